//! Cluster mode in the API: where a room a request names lives, the `307`
//! to the node holding it, redirect tickets standing in for tokens, and the
//! task that keeps this node's entry in the directory true.
//!
//! ```text
//! request for room r ─► r hosted here? ─► serve it (no Redis needed)
//!   else Cluster::place(r) (Cluster::claim(r) when the request carries ?ticket=)
//!     Local  ─► create r here (with the config stored at its creation, else the
//!               defaults; a create: the creator's config), relay its events
//!     Remote ─► 307 Location: <owner api_url><path>?ticket=<single-use ticket>
//!     Unavailable | NoEligibleNode | Untrusted ─► 503 cluster_unavailable + Retry-After
//! ```
//!
//! A redirect ticket carries the least grant its request needs
//! ([`least_grant`]: the room, never `*`; `admin` only for a request that
//! may need it, never for a join or a read) and is bound to the request's
//! method and path: an admin's `DELETE` is redirected with a ticket that
//! deletes that room once, and does nothing else.
//!
//! In a room spread over nodes, a participant's routes go to the node
//! hosting the participant ([`participant_here`]: its id carries the
//! node's number), and room-wide changes reach the other nodes as control
//! messages (`control`).
//!
//! A WebSocket handshake does not follow redirects: on a node that does
//! not hold the room the socket opens and says `{"type": "moved", "room",
//! "node", "api_url", "ticket"}`. The page never carries its bearer token
//! to another origin: it goes to `<api_url>/v1/rooms/{room}/enter?ticket=…`
//! ([`enter`]), which burns the ticket and answers `303` to the page at
//! that origin with a fresh token for that room only, expiring when the
//! original one does. A client that stays gets the room's events relayed
//! from the owner (`ws::relay`); 4307 closes it when they cannot be.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;
use tutti_cluster::{
    Cluster, ClusterError, JoinPlacement, Load, Owner, Placement, RoomSpread, TicketClaims, TicketError,
};

use super::error::{ApiError, ApiResult};
use super::{ApiState, authenticate};
use crate::auth::{Grant, unix_now};
use crate::room::{CarriedStage, Room, RoomError, RoomEvent, Rooms, valid_room_id};
use crate::sync::lock;

/// Close code of a WebSocket whose room is on another node.
pub(crate) const CLOSE_MOVED: u16 = 4307;

/// The query parameters a request may carry besides its body.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct Access {
    /// A redirect ticket (set by another node's `307`), standing in for the token.
    pub(crate) ticket: Option<String>,
    /// The room a redirected `POST /v1/rooms` creates (its id was chosen
    /// by the node that redirected, so that the ticket names it).
    pub(crate) room: Option<String>,
}

/// The query of a request, or none when it does not parse.
pub(crate) fn access(query: Result<Query<Access>, axum::extract::rejection::QueryRejection>) -> Access {
    query.map(|Query(a)| a).unwrap_or_default()
}

/// 503 with `Retry-After` for a directory that cannot answer.
pub(crate) fn unavailable(e: &ClusterError) -> ApiError {
    ApiError::cluster_unavailable(e.to_string(), e.retry_after_seconds())
}

/// The request a redirect ticket is minted for or checked against: its
/// method and its path (the query aside).
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) method: Method,
    pub(crate) uri: Uri,
}

impl Target {
    fn request(&self) -> (&str, &str) {
        (self.method.as_str(), self.uri.path())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Target {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self { method: parts.method.clone(), uri: parts.uri.clone() })
    }
}

/// The caller's grant: from the redirect ticket when the request carries
/// one (checked against this request's method and path, and burnt in
/// Redis: once in the whole cluster), else from its token as on a single node.
pub(crate) async fn caller(
    api: &ApiState,
    headers: &HeaderMap,
    target: &Target,
    ticket: Option<&str>,
    room: &str,
) -> ApiResult<Grant> {
    let (Some(ticket), Some(cluster)) = (ticket, &api.cluster) else {
        return authenticate(api, headers, None);
    };
    let claims = cluster.verify_ticket(ticket, room, target.request()).await.map_err(ticket_error)?;
    Ok(grant_of(&claims))
}

fn ticket_error(e: TicketError) -> ApiError {
    match e {
        TicketError::Unavailable(m) => {
            ApiError::cluster_unavailable(format!("the redirect ticket cannot be checked now: {m}"), 2)
        }
        e => ApiError::new(StatusCode::UNAUTHORIZED, "bad_ticket", format!("the redirect ticket was refused: {e}")),
    }
}

/// What a ticket carries of a grant (the identity goes as the ticket's own field).
fn grants_json(grant: &Grant) -> serde_json::Value {
    serde_json::json!({ "room": grant.room, "speak": grant.speak, "listen": grant.listen, "admin": grant.admin })
}

/// The least of `grant` that the request `method path` about `room` needs
/// on the node it is redirected to: the room itself (never `*`); `admin`
/// only for a change that may need it, or an admin's join (not a read: a
/// room's admin joins as its moderator, spared by mute-all and free of the
/// one-participant-per-identity rule);
/// `speak`/`listen` only for a participant's routes (a join, its
/// `PATCH`/`DELETE`) and reads. The ticket is also bound to the request,
/// so what it carries serves that one request.
pub(crate) fn least_grant(grant: &Grant, room: &str, method: &Method, path: &str) -> Grant {
    let tail = path.strip_prefix("/v1/rooms/").and_then(|p| p.strip_prefix(room));
    let participant = tail.is_some_and(|t| t == "/participants" || t.starts_with("/participants/"));
    let read = *method == Method::GET;
    Grant {
        room: room.to_owned(),
        identity: grant.identity.clone(),
        speak: grant.speak && participant,
        listen: (grant.listen && (participant || read)) || (read && grant.admin),
        admin: grant.admin && !read,
    }
}

fn grant_of(claims: &TicketClaims) -> Grant {
    let g = &claims.grants;
    let flag = |k: &str| g[k].as_bool().unwrap_or(false);
    Grant {
        room: g["room"].as_str().unwrap_or(&claims.room).to_owned(),
        identity: claims.identity.clone(),
        speak: flag("speak"),
        listen: flag("listen"),
        admin: flag("admin"),
    }
}

/// The path and query of a request, without the parameters a redirect
/// replaces (`ticket`, `token`: the new ticket stands in for both).
fn forwardable(uri: &Uri) -> String {
    let path = uri.path();
    let kept: Vec<&str> = uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty() && !p.starts_with("ticket=") && !p.starts_with("token="))
        .collect();
    if kept.is_empty() { path.to_owned() } else { format!("{path}?{}", kept.join("&")) }
}

/// A `307 Temporary Redirect` to the node holding `room`, carrying a
/// ticket of the least of `grant` the request needs ([`least_grant`]),
/// bound to the request's method and path. `extra_query` is added to the
/// path (e.g. the room id of a redirected create).
pub(crate) fn redirect(
    cluster: &Cluster,
    owner: &Owner,
    room: &str,
    target: &Target,
    extra_query: Option<&str>,
    grant: &Grant,
) -> ApiResult<Response> {
    let message = format!("room '{room}' is on node {}", owner.node_id);
    redirect_saying(cluster, owner, room, target, extra_query, grant, message)
}

/// [`redirect`] with the body's `message`.
fn redirect_saying(
    cluster: &Cluster,
    owner: &Owner,
    room: &str,
    target: &Target,
    extra_query: Option<&str>,
    grant: &Grant,
    message: String,
) -> ApiResult<Response> {
    let least = least_grant(grant, room, &target.method, target.uri.path());
    let ticket = cluster.mint_ticket(room, &grant.identity, grants_json(&least), target.request()).map_err(|e| {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("cannot mint a redirect ticket: {e}"))
    })?;
    let mut path = forwardable(&target.uri);
    if let Some(extra) = extra_query {
        path.push(if path.contains('?') { '&' } else { '?' });
        path.push_str(extra);
    }
    let location = tutti_cluster::redirect_location(&owner.api_url, &path, &ticket);
    cluster.record_redirect();
    let body = serde_json::json!({
        "code": "room_elsewhere",
        "message": message,
        "node": owner.node_id,
        "api_url": owner.api_url,
    });
    let mut response = (StatusCode::TEMPORARY_REDIRECT, axum::Json(body)).into_response();
    let value = HeaderValue::from_str(&location)
        .map_err(|_| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "bad redirect location"))?;
    response.headers_mut().insert(header::LOCATION, value);
    Ok(response)
}

/// The room a request names if this node holds it (`Ok(Ok(room))`); in
/// cluster mode, else, the `307` to the node that does (`Ok(Err(redirect))`,
/// with a ticket of `grant`); else the error (`no_room`, 503). Check what
/// `grant` may do before: the ticket carries it.
pub(crate) async fn here(
    api: &ApiState,
    room: &str,
    target: &Target,
    grant: &Grant,
) -> ApiResult<Result<Arc<Room>, Response>> {
    match (api.rooms.get(room), &api.cluster) {
        (Ok(state), _) => Ok(Ok(state)),
        (Err(e), None) => Err(e.into()),
        (Err(e), Some(c)) => {
            let owner = c.locate(room).await.map_err(|e| unavailable(&e))?.ok_or(e)?;
            redirect(c, &owner, room, target, None, grant).map(Err)
        }
    }
}

/// The room of a participant's route (`PATCH`, `DELETE` and `…/move` of
/// `/v1/rooms/{room}/participants/{id}`): here when `id` is one of this
/// node's participants of it. In a room spread over nodes, else, the `307`
/// to the node of the room's span whose number the id carries (ids are
/// `number << 32 | n`; the node found among the span's live members by
/// their signed records only: [`Cluster::span_node`]), with a ticket of
/// the least grant bound to this request, as [`here`] does for a room on
/// another node. Else as [`here`]: the room here (its
/// `participant_not_found` comes next), or the `307` to its owner. A
/// request redirected already (`ticketed`) is never sent on for its id: an
/// id whose node does not host it is a 404, not a bounce.
pub(crate) async fn participant_here(
    api: &ApiState,
    room: &str,
    id: u64,
    target: &Target,
    grant: &Grant,
    ticketed: bool,
) -> ApiResult<Result<Arc<Room>, Response>> {
    if let Ok(r) = api.rooms.get(room)
        && lock(&r.members).contains_key(&id)
    {
        return Ok(Ok(r));
    }
    if let Some(c) = &api.cluster
        && !ticketed
        && c.config().room_spread != RoomSpread::Off
        && let Some(number) = tutti_cluster::node_number_of(id)
        && number != c.node_number()
    {
        match c.span_node(room, number).await {
            Ok(Some(node)) if node.node_id != c.node_id() => {
                let message = format!("participant {id} of room '{room}' is on node {}", node.node_id);
                return redirect_saying(c, &node, room, target, None, grant, message).map(Err);
            }
            Ok(_) => {}
            Err(e) => return Err(unavailable(&e)),
        }
    }
    here(api, room, target, grant).await
}

/// The path the page goes to after `moved`: [`enter`].
fn enter_path(room: &str) -> String {
    format!("/v1/rooms/{room}/enter")
}

/// The `moved` message of a WebSocket whose room `room` is held by node
/// `node` at `api_url`: `{"type":"moved","room","node","api_url","ticket"}`.
/// The ticket (absent when auth is off) is single-use, short-lived
/// (`cluster.ticket_ttl_seconds`), for `GET /v1/rooms/{room}/enter` only,
/// and carries the socket's grant narrowed to the room and the expiry of
/// the socket's token (`token_exp`), which the token [`enter`] gives back
/// does not outlive.
pub(crate) fn moved_message(
    api: &ApiState,
    room: &str,
    node: &str,
    api_url: &str,
    grant: &Grant,
    token_exp: Option<u64>,
) -> serde_json::Value {
    let mut msg = serde_json::json!({
        "type": "moved",
        "protocol": super::schema::WS_PROTOCOL,
        "room": room,
        "node": node,
        "api_url": api_url,
    });
    if let (Some(cluster), Some(_), Some(exp)) = (&api.cluster, &api.auth, token_exp) {
        let mut grants = grants_json(&Grant { room: room.to_owned(), ..grant.clone() });
        grants["exp"] = exp.into();
        let path = enter_path(room);
        match cluster.mint_ticket(room, &grant.identity, grants, ("GET", &path)) {
            Ok(ticket) => msg["ticket"] = ticket.into(),
            Err(e) => tracing::warn!(room, error = %e, "no ticket for a moved socket"),
        }
    }
    msg
}

/// The page's query parameters [`enter`] passes on to the page (after a
/// drain's `moved`, the page asks to join at once, as it was: `autojoin`,
/// `muted`, `hand`).
const PAGE_PARAMS: [&str; 5] = ["name", "processing", "autojoin", "muted", "hand"];

/// `GET /v1/rooms/{room}/enter?ticket=…[&name=…&processing=…]`: where the
/// page lands after a `moved`, on the node holding the room. Burns the
/// ticket (single use, bound to this path) and answers `303 See Other` to
/// the page at this origin (`/?room=…#token=…`), with an access token for
/// this room only, the ticket's grant, expiring with the token the socket
/// was opened with. A bad or used ticket: 401 `bad_ticket`.
#[utoipa::path(
    get,
    path = "/v1/rooms/{room}/enter",
    tag = "cluster",
    operation_id = "enter",
    security(()),
    params(
        ("room" = String, Path, description = "The room's id"),
        ("ticket" = String, Query, description = "The single-use ticket of a `moved` message"),
        ("name" = Option<String>, Query, description = "Passed on to the page"),
        ("processing" = Option<String>, Query, description = "Passed on to the page"),
        ("autojoin" = Option<String>, Query, description = "Passed on to the page"),
        ("muted" = Option<String>, Query, description = "Passed on to the page"),
        ("hand" = Option<String>, Query, description = "Passed on to the page"),
    ),
    responses(
        (status = 303, description = "To the page on this node, `/?…&room=<room>#token=<token>`", headers(("Location" = String))),
        (status = 401, description = "`bad_ticket` (malformed, used, expired, or for another path)", body = super::schema::ErrorBody),
        (status = 404, description = "`not_found`: not a cluster node with auth", body = super::schema::ErrorBody),
        (status = 503, description = "`cluster_unavailable`", body = super::schema::ErrorBody),
    ),
)]
pub(crate) async fn enter(
    State(api): State<Arc<ApiState>>,
    Path(room): Path<String>,
    target: Target,
    query: Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    let query = query.map(|Query(q)| q).unwrap_or_default();
    let (Some(cluster), Some(auth)) = (&api.cluster, &api.auth) else {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", "only cluster nodes with auth hand out tickets"));
    };
    let ticket = query.get("ticket").ok_or_else(|| ticket_error(TicketError::Malformed))?;
    let claims = cluster.verify_ticket(ticket, &room, target.request()).await.map_err(ticket_error)?;
    let now = unix_now();
    let exp = claims.grants["exp"].as_u64().filter(|&exp| exp > now).ok_or_else(|| {
        ApiError::new(StatusCode::UNAUTHORIZED, "bad_ticket", "the token this ticket was minted for has expired")
    })?;
    let token = auth.mint(&grant_of(&claims), Duration::from_secs(exp - now), now).map_err(|e| {
        ApiError::new(StatusCode::UNAUTHORIZED, "bad_ticket", format!("no token for this ticket's grant: {e}"))
    })?;
    // A spread room the placement sent this page to: hosted here now (this
    // node joins its span), so that the page's socket stays here. Whatever
    // goes wrong, the socket says so.
    if cluster.config().room_spread != RoomSpread::Off
        && api.rooms.get(&room).is_err()
        && let Err(e) = locate_for_join(&api, &room, true).await
    {
        tracing::debug!(room, code = e.code, "a moved page's room is not hosted here yet");
    }
    let mut page: Vec<String> =
        PAGE_PARAMS.iter().filter_map(|&k| query.get(k).map(|v| format!("{k}={}", percent_encode(v)))).collect();
    if cluster.config().room_spread != RoomSpread::Off {
        // The page's socket names this node: it stays here (see `locate_for_socket`).
        page.push(format!("node={}", percent_encode(cluster.node_id())));
    }
    page.push(format!("room={}", percent_encode(&room)));
    // In the fragment: never sent to a server, nor in a Referer.
    let location = HeaderValue::from_str(&format!("/?{}#token={token}", page.join("&")))
        .map_err(|_| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "bad page location"))?;
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    headers.insert(header::LOCATION, location);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    Ok(response)
}

/// `value` with every byte but the unreserved ones (RFC 3986) as `%XX`.
fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The cluster's own routes.
pub(super) fn routes() -> axum::Router<Arc<ApiState>> {
    axum::Router::new().route("/v1/rooms/{room}/enter", axum::routing::get(enter))
}

/// Where the room of a join is.
pub(crate) enum Located {
    /// Hosted here (it was, or it was placed here just now).
    Here(Arc<Room>),
    /// Held by another node.
    Elsewhere(Owner),
}

/// Nodes a page names in its room snapshot (`nodes`).
const MAX_REJOIN_NODES: usize = 8;

/// In a cluster whose rooms spread: up to [`MAX_REJOIN_NODES`] other
/// serving nodes (`{node, api_url}`, from signed records), where a client
/// whose node is lost rejoins its room (the SDK does it on its own: its
/// socket there is placed like any join). Empty otherwise, or when Redis
/// cannot say.
pub(crate) async fn rejoin_nodes(api: &ApiState) -> Vec<serde_json::Value> {
    other_nodes(api, MAX_REJOIN_NODES)
        .await
        .into_iter()
        .map(|(node, api_url)| serde_json::json!({ "node": node, "api_url": api_url }))
        .collect()
}

/// How long one read of the other nodes serves every page and snapshot.
const OTHER_NODES_FRESH: Duration = Duration::from_secs(1);

/// Other serving nodes: (id, API URL).
type NodeUrls = Arc<[(String, String)]>;

/// The other serving nodes as last read, and when: see [`other_nodes`].
#[derive(Default)]
pub(crate) struct OtherNodes(std::sync::Mutex<Option<(Instant, NodeUrls)>>);

/// In a cluster whose rooms spread: up to `max` other serving nodes (id,
/// API URL), sorted by id, from signed records; empty otherwise, or when
/// Redis cannot say. Read at most once per [`OTHER_NODES_FRESH`] for all
/// callers (the page at `/`, which anyone may load, and every socket's
/// snapshot), so neither costs Redis a read per request.
pub(crate) async fn other_nodes(api: &ApiState, max: usize) -> Vec<(String, String)> {
    let Some(cluster) = api.cluster.as_ref().filter(|c| c.config().room_spread != RoomSpread::Off) else {
        return Vec::new();
    };
    let cached = lock(&api.other_nodes.0).as_ref().filter(|(at, _)| at.elapsed() < OTHER_NODES_FRESH).cloned();
    let nodes = match cached {
        Some((_, nodes)) => nodes,
        None => {
            // A failed read serves its callers too (as none), until the next.
            let nodes: NodeUrls = match cluster.nodes().await {
                Ok(nodes) => nodes
                    .into_iter()
                    .filter(|n| n.id != cluster.node_id() && n.state == tutti_cluster::NodeState::Serving)
                    .map(|n| (n.id, n.api_url))
                    .collect(),
                Err(_) => Arc::from([]),
            };
            *lock(&api.other_nodes.0) = Some((Instant::now(), nodes.clone()));
            nodes
        }
    };
    nodes.iter().take(max).cloned().collect()
}

/// Finds `room` for a join (REST or WebSocket): here when hosted here
/// (without asking Redis), else placed by the directory. `ticketed`: the
/// caller was redirected here, so the room's lease is (most likely) this
/// node's already: claim it rather than place it afresh. With
/// `cluster.room_spread` a join may be hosted here for a room held by
/// another node (this node joins the room's span) or sent to another node
/// of the span: `when_full` keeps joins here while this node has room,
/// `always` places every join that was not redirected here.
pub(crate) async fn locate_for_join(api: &ApiState, room: &str, ticketed: bool) -> ApiResult<Located> {
    let spread = api.cluster.as_ref().map_or(RoomSpread::Off, |c| c.config().room_spread);
    let stays = match spread {
        _ if ticketed => true,
        RoomSpread::Off => true,
        RoomSpread::WhenFull => {
            api.cluster.as_ref().is_none_or(|c| api.rooms.participants() < c.config().capacity as usize)
        }
        RoomSpread::Always => false,
    };
    locate(api, room, ticketed, stays).await
}

/// Finds `room` for a WebSocket (a page joins through its socket, and a
/// REST participant watches through one): here when hosted here (a member
/// of a spread room included), else at its owner. With
/// `cluster.room_spread`, a socket is placed as a REST join is: here (this
/// node joins the room's span) or `moved` to the node chosen; but a socket
/// that names this node (`?node=`: where a `moved` or the room's snapshot
/// said its client is, as for a resume) stays here, hosting the room if
/// this node is below `cluster.capacity`, so that a client never bounces
/// between nodes; and with `when_full` a socket stays on a node hosting
/// the room while the node is below `cluster.capacity`.
pub(crate) async fn locate_for_socket(api: &ApiState, room: &str, named: Option<&str>) -> ApiResult<Located> {
    let Some(cluster) = api.cluster.as_ref().filter(|c| c.config().room_spread != RoomSpread::Off) else {
        return locate(api, room, false, true).await;
    };
    let hosted = api.rooms.get(room).is_ok_and(|r| !r.is_handed_over());
    let has_room = api.rooms.participants() < cluster.config().capacity as usize;
    if named == Some(cluster.node_id()) && (hosted || has_room) {
        // As a join redirected here: the room is hosted here (claimed, or this node joins its span).
        return locate(api, room, !hosted, true).await;
    }
    let stays = hosted && cluster.config().room_spread == RoomSpread::WhenFull && has_room;
    locate(api, room, false, stays).await
}

async fn locate(api: &ApiState, room: &str, ticketed: bool, stay_if_hosted: bool) -> ApiResult<Located> {
    // A room this node handed over (a drain) is placed like any other: the
    // directory sends the join to its new node.
    if let Ok(r) = api.rooms.get(room)
        && !r.is_handed_over()
        && stay_if_hosted
    {
        return Ok(Located::Here(r));
    }
    let Some(cluster) = &api.cluster else { return create_on_join(api, room).map(Located::Here) };
    if !valid_room_id(room) {
        return Err(RoomError::BadRoomId.into());
    }
    if api.rooms.is_closing() {
        return Err(RoomError::ShuttingDown.into());
    }
    // Until the room is made here (or found elsewhere): no lease of it is given back meanwhile.
    let _held = api.room_locks.share(room).await;
    // Only an admin creates rooms, unless `room.auto_create` says a join may.
    may_create_on_join(api, cluster, room).await?;
    let placement = if stay_if_hosted && !ticketed {
        // Placed as a whole room (a socket): its owner, or here if nobody holds it.
        match cluster.place(room, None).await.map_err(|e| unavailable(&e))? {
            Placement::Local { epoch, .. } => JoinPlacement::Here { epoch, owner: true },
            Placement::Remote(owner) => JoinPlacement::Elsewhere(owner),
        }
    } else {
        cluster.place_join(room, ticketed).await.map_err(|e| unavailable(&e))?
    };
    match placement {
        JoinPlacement::Here { .. } => {
            // Created elsewhere (or here, before a restart): host it as it was created.
            let stored = cluster.room_config(room).await.map_err(|e| unavailable(&e))?;
            let config = StoredConfig::parse(stored.as_deref());
            let fresh = api.rooms.get(room).is_err();
            let state = host(api, cluster, room, config.max_participants, config.max_speakers, false)?;
            // Handed over by a draining node: its lock and bans come with it.
            if fresh && let Some(carried) = &config.handover {
                api.rooms.restore_stage(&state, carried, Instant::now(), unix_now());
            }
            if fresh && cluster.config().room_spread != RoomSpread::Off {
                // Its span is read now, here and (told) on the other nodes,
                // so that the mesh carries the room to this node's first
                // participant from its first frames.
                api.span_wake.notify_one();
                super::control::publish(api, room, &super::control::Control::Joined);
            }
            Ok(Located::Here(state))
        }
        JoinPlacement::Elsewhere(node) => Ok(Located::Elsewhere(node)),
    }
}

/// The room a join names, on a single node, when it does not exist:
/// created if `room.auto_create` allows it, else `404 room_not_found`
/// (rooms are an admin's to create).
pub(crate) fn create_on_join(api: &ApiState, room: &str) -> ApiResult<Arc<Room>> {
    if !api.cfg.room.auto_create {
        return Err(RoomError::NoRoom(room.to_owned()).into());
    }
    let state = match api.rooms.create(room, None, None) {
        Ok(state) => state,
        Err(RoomError::RoomExists(_)) => api.rooms.get(room)?,
        Err(e) => return Err(e.into()),
    };
    api.outputs.watch(&state);
    Ok(state)
}

/// In cluster mode, before a join places a room that is not hosted here:
/// unless `room.auto_create`, the room must exist: created by an admin (its
/// record in the directory carries the creator's config; a released room's
/// does not), or held by a live node (a Redis that restarted empty lost the
/// config, but the owner writes its lease back), else `404 room_not_found`.
pub(crate) async fn may_create_on_join(api: &ApiState, cluster: &tutti_cluster::Cluster, room: &str) -> ApiResult<()> {
    if api.cfg.room.auto_create {
        return Ok(());
    }
    match cluster.room_config(room).await {
        Ok(Some(_)) => return Ok(()),
        Ok(None) => {}
        Err(e) => return Err(unavailable(&e)),
    }
    match cluster.locate(room).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(RoomError::NoRoom(room.to_owned()).into()),
        Err(e) => Err(unavailable(&e)),
    }
}

/// The config a room's creator gave, as stored in the directory (JSON);
/// fields missing or unreadable take the defaults. A drain's hand-over
/// writes the room's current limits and its lock and bans into it.
#[derive(Debug, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct StoredConfig {
    pub(crate) max_participants: Option<usize>,
    pub(crate) max_speakers: Option<usize>,
    pub(crate) handover: Option<CarriedStage>,
}

impl StoredConfig {
    pub(crate) fn parse(json: Option<&str>) -> Self {
        json.and_then(|j| serde_json::from_str(j).ok()).unwrap_or_default()
    }
}

/// The local copy of a room whose lease this node holds: created (with
/// the defaults unless given) when missing; its events go to the other
/// nodes' watchers. `exclusive` (a create): a room that exists already is
/// `409 room_exists`, not the room.
pub(crate) fn host(
    api: &ApiState,
    cluster: &Cluster,
    room: &str,
    max_participants: Option<usize>,
    max_speakers: Option<usize>,
    exclusive: bool,
) -> ApiResult<Arc<Room>> {
    match api.rooms.create(room, max_participants, max_speakers) {
        Ok(r) => {
            relay_events(cluster.clone(), &r, api.roster.clone());
            if api.media.has_mesh() && cluster.config().room_spread != RoomSpread::Off {
                // A room that may spread: the other nodes' events for this one (its
                // roster is written once it spreads: `spans`).
                super::roster::relay_span_events(cluster.clone(), &r);
            }
            Ok(r)
        }
        Err(e @ RoomError::RoomExists(_)) if exclusive => Err(e.into()),
        Err(RoomError::RoomExists(_)) => Ok(api.rooms.get(room)?),
        Err(e) => {
            // Not hosted after all: give the lease back so another node may take the room.
            release(api, cluster, room, None);
            Err(e.into())
        }
    }
}

/// Gives `room`'s lease back, in the background (it lapses by itself if
/// Redis is away), holding the room's lock (`held`, or taken first): a
/// room made here again meanwhile (a join or a create that came first)
/// keeps its lease. A room spread over other nodes keeps its owner: the
/// lease is kept (and renewed) while another node of its span hosts
/// participants ([`spans`] releases it when the last one leaves).
pub(crate) fn release(api: &ApiState, cluster: &Cluster, room: &str, held: Option<RoomGuard>) {
    let (cluster, room) = (cluster.clone(), room.to_owned());
    let (rooms, locks) = (api.rooms.clone(), api.room_locks.clone());
    tokio::spawn(async move {
        let _held = match held {
            Some(held) => held,
            None => locks.lock(&room).await,
        };
        if hosts(&rooms, &room) {
            tracing::debug!(room, "room made here again before its lease was given back: the lease is kept");
            return;
        }
        if cluster.config().room_spread != RoomSpread::Off
            && let Some(epoch) = cluster.owned_epoch(&room)
            && let Ok(spans) = cluster.spans(std::slice::from_ref(&room)).await
            && spans.iter().flat_map(|s| &s.members).any(|m| m.node_id != cluster.node_id() && m.epoch == epoch)
        {
            tracing::debug!(room, "room closed here but hosted by other nodes of its span: its lease is kept");
            let _ = cluster.leave_span(&room).await;
            return;
        }
        let _ = cluster.leave_span(&room).await;
        if let Err(e) = cluster.release(&room).await {
            tracing::debug!(room, error = %e, "room lease not released; it lapses");
        }
    });
}

/// One lock per room name, kept only while it is held or awaited: a
/// claim and the room's making here (shared: joins and creates of a room
/// go on side by side) and a close's lease given back (sole) never
/// interleave. A lease given back between a join's claim and its room's
/// making left the room hosted here with no owner (other nodes answered
/// 404 for it; a later claim fenced and closed it).
#[derive(Clone, Default)]
pub(crate) struct RoomLocks(Arc<std::sync::Mutex<HashMap<String, Arc<tokio::sync::RwLock<()>>>>>);

/// A room's lock, held until dropped.
pub(crate) struct RoomGuard {
    shared: Option<tokio::sync::OwnedRwLockReadGuard<()>>,
    sole: Option<tokio::sync::OwnedRwLockWriteGuard<()>>,
    locks: RoomLocks,
}

impl RoomLocks {
    fn entry(&self, room: &str) -> (Arc<tokio::sync::RwLock<()>>, RoomGuard) {
        let rw = lock(&self.0).entry(room.to_owned()).or_default().clone();
        // Made before any wait: a wait given up still clears the entry.
        (rw, RoomGuard { shared: None, sole: None, locks: self.clone() })
    }

    /// Waits for `room`'s lock, shared with other joins and creates (a
    /// claim and the room's making here).
    pub(crate) async fn share(&self, room: &str) -> RoomGuard {
        let (rw, mut guard) = self.entry(room);
        guard.shared = Some(rw.read_owned().await);
        guard
    }

    /// Waits for `room`'s lock, alone (its lease given back).
    pub(crate) async fn lock(&self, room: &str) -> RoomGuard {
        let (rw, mut guard) = self.entry(room);
        guard.sole = Some(rw.write_owned().await);
        guard
    }

    /// `room`'s lock, alone, if nobody holds it now.
    pub(crate) fn try_lock(&self, room: &str) -> Option<RoomGuard> {
        let (rw, mut guard) = self.entry(room);
        guard.sole = Some(rw.try_write_owned().ok()?);
        Some(guard)
    }

    /// Rooms with a lock held or awaited.
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.0).len()
    }
}

impl Drop for RoomGuard {
    fn drop(&mut self) {
        drop((self.shared.take(), self.sole.take()));
        // Rooms nobody holds or waits for any more (the map's is the only reference).
        lock(&self.locks.0).retain(|_, m| Arc::strong_count(m) > 1);
    }
}

/// Publishes a hosted room's events to the cluster until the room closes:
/// its own (those relayed from the other nodes of a spread room are never
/// published again), and notes its participants' changes for its roster.
fn relay_events(cluster: Cluster, room: &Arc<Room>, roster: Arc<super::roster::Roster>) {
    let mut events = room.subscribe();
    let moved = room.moved_to();
    let name = room.id.clone();
    let spread = cluster.config().room_spread != RoomSpread::Off;
    tokio::spawn(async move {
        loop {
            match events.recv().await {
                // Handed over: the room's events are its new node's to tell.
                Ok(_) if moved.borrow().is_some() => break,
                Ok(batch) => {
                    // One tick's events, already serialized once for every subscriber.
                    let last =
                        batch.events.iter().any(|e| matches!(e, RoomEvent::RoomClosed | RoomEvent::Shutdown { .. }));
                    if spread {
                        super::roster::note_batch(&roster, &name, &batch);
                    }
                    if let Some(json) = batch.local_json() {
                        cluster.publish_event(&name, String::from_utf8_lossy(&json).into_owned());
                    }
                    if last {
                        break;
                    }
                }
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => break,
            }
        }
    });
}

/// The CPU share of the process's busiest thread since the last reading
/// (`/proc/self/task/*/stat`; 0 where there is no /proc).
struct BusiestThread {
    last: HashMap<u64, f64>,
    at: Instant,
}

impl BusiestThread {
    fn new() -> Self {
        let mut b = Self { last: HashMap::new(), at: Instant::now() };
        b.read();
        b
    }

    fn read(&mut self) -> f32 {
        let now = Instant::now();
        let elapsed = now.duration_since(self.at).as_secs_f64();
        let mut busiest = 0.0f64;
        let mut next = HashMap::new();
        for (tid, stat) in tutti_procfs::thread_stats("self") {
            let cpu = stat.cpu_seconds();
            if let Some(before) = self.last.get(&tid)
                && elapsed > 0.0
            {
                busiest = busiest.max((cpu - before) / elapsed);
            }
            next.insert(tid, cpu);
        }
        (self.last, self.at) = (next, now);
        busiest.clamp(0.0, 1.0) as f32
    }
}

/// How often a node reads the spans of the rooms it hosts.
const SPAN_REFRESH: Duration = Duration::from_millis(250);
/// How often it writes its membership again (the span key lives three lease TTLs).
const SPAN_REWRITE: Duration = Duration::from_secs(2);

/// The spans of the rooms hosted here, until `stop` (cluster mode with
/// `room_spread` on): every [`SPAN_REFRESH`] it reads them and tells the
/// mix clock each room's peers (the other members at the room's epoch
/// whose signed records name a mesh address); it records this node as a
/// member of every room it hosts (at the lease's epoch: a new epoch, after
/// the owner changed, is joined again), leaves the spans of rooms no
/// longer hosted, and gives back the lease of a room it holds but no
/// longer hosts once no other node hosts it either (under the room's lock,
/// so that a room claimed and about to be made here is kept). A room with
/// peers is spread: its roster is written ([`super::roster`]).
pub(crate) async fn spans(api: Arc<ApiState>, cluster: Cluster, mut stop: tokio::sync::watch::Receiver<bool>) {
    // What the clock was told, and the epoch this node is a member at, per room.
    let mut told: HashMap<String, (u64, Vec<(String, std::net::SocketAddr)>)> = HashMap::new();
    let mut member: HashMap<String, u64> = HashMap::new();
    // The first round writes every membership.
    let mut last_write = Instant::now().checked_sub(SPAN_REWRITE).unwrap_or_else(Instant::now);
    let mut every = tokio::time::interval(SPAN_REFRESH);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let me = cluster.node_id().to_owned();
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = api.span_wake.notified() => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        // Held first, then hosted: a join claims its room before it makes it
        // here, so a room made between the two reads is seen as hosted.
        let owned = cluster.owned_rooms();
        let hosted: std::collections::HashSet<String> =
            api.rooms.all().iter().filter(|r| hosted_here(r)).map(|r| r.id.clone()).collect();
        // Owned but not hosted here (emptied while others host it): read too.
        let unhosted: std::collections::HashSet<String> =
            owned.into_iter().map(|(r, _)| r).filter(|r| !hosted.contains(r)).collect();
        let mut names: Vec<String> = hosted.iter().cloned().collect();
        names.extend(unhosted);
        let Ok(spans) = cluster.spans(&names).await else { continue };
        let mut writes = Vec::new();
        for span in &spans {
            let room = &span.room;
            let is_hosted = hosted.contains(room);
            // The room's epoch: its lease's; without a lease (its owner
            // died, or let it go), the one this node joined at.
            let Some(epoch) = span.lease.as_ref().map(|(_, e)| *e).or_else(|| member.get(room).copied()) else {
                continue;
            };
            if !is_hosted {
                // Held here, hosted by nobody else any more: let it go, unless
                // a join or a create holds the room's lock (it claimed the
                // room and is about to make it here: a lease given back in
                // between would leave the room without an owner) or made it
                // since this round's start.
                let others = span.members.iter().any(|m| m.node_id != me && m.epoch == epoch);
                if !others
                    && let Some(_held) = api.room_locks.try_lock(room)
                    && !hosts(&api.rooms, room)
                    && cluster.owned_epoch(room).is_some()
                    && let Err(e) = cluster.release(room).await
                {
                    tracing::debug!(room, error = %e, "room lease not released; it lapses");
                }
                continue;
            }
            let recorded = span.members.iter().any(|m| m.node_id == me && m.epoch == epoch);
            if !recorded || member.get(room) != Some(&epoch) || last_write.elapsed() >= SPAN_REWRITE {
                writes.push((room.clone(), epoch));
            }
            member.insert(room.clone(), epoch);
            let peers: Vec<(String, std::net::SocketAddr)> = span
                .members
                .iter()
                .filter(|m| m.node_id != me && m.epoch == epoch)
                .filter_map(|m| Some((m.node_id.clone(), m.mesh_addr?)))
                .collect();
            // Its roster is written (and the others' read) while other nodes host it too.
            api.roster.set_spread(room, !peers.is_empty());
            if let Ok(r) = api.rooms.get(room) {
                r.set_spread(!peers.is_empty());
            }
            if told.get(room) != Some(&(epoch, peers.clone())) && api.media.set_span(room, epoch, peers.clone()) {
                told.insert(room.clone(), (epoch, peers));
            }
        }
        // Every room whose record is missing or old, and all of them every SPAN_REWRITE.
        let rewrite = last_write.elapsed() >= SPAN_REWRITE;
        if !writes.is_empty() && cluster.join_spans(&writes).await.is_ok() && rewrite {
            last_write = Instant::now();
        }
        // Rooms no longer hosted here: out of the clock and the span. Not one
        // a join is making here again, or made since this round's start (it
        // would be left out of the span until the next round).
        let gone: Vec<String> = member.keys().filter(|r| !hosted.contains(*r)).cloned().collect();
        for room in gone {
            let Some(_held) = api.room_locks.try_lock(&room) else { continue };
            if hosts(&api.rooms, &room) {
                continue;
            }
            api.roster.set_spread(&room, false);
            if api.media.leave_span(&room) {
                told.remove(&room);
                member.remove(&room);
                let _ = cluster.leave_span(&room).await;
            }
        }
    }
}

/// Whether this node hosts `room`: it holds the room, neither handed over nor closed.
fn hosted_here(room: &Room) -> bool {
    !room.is_handed_over() && !room.is_closed()
}

/// Whether the room named `room` is made and hosted here ([`hosted_here`]):
/// the check, under the room's lock, before its lease or span is given up.
fn hosts(rooms: &Rooms, room: &str) -> bool {
    rooms.get(room).is_ok_and(|r| hosted_here(&r))
}

/// This node's side of the directory, until `stop`: closes the rooms the
/// node was fenced out of (their clients rejoin and are redirected to the
/// new owner), and reports the load every second: the participants (over
/// `cluster.capacity`), the busiest thread's CPU share and the mixer's
/// tick p99 over its last ~5 s (`metrics::tick_p99`).
pub(crate) async fn maintain(api: Arc<ApiState>, cluster: Cluster, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut busiest = BusiestThread::new();
    let mut fenced = cluster.take_fenced();
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            notice = async {
                match fenced.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            } => match notice {
                Some(notice) => {
                    tracing::warn!(room = %notice.room, holder = %notice.holder, "room taken over by another node: closing it here");
                    if let Ok(effects) = api.rooms.delete(&notice.room) {
                        api.apply(effects);
                    }
                }
                None => fenced = None,
            },
            _ = every.tick() => {
                let participants = u32::try_from(api.rooms.participants()).unwrap_or(u32::MAX);
                let busiest_thread_cpu = busiest.read();
                let tick_p99 = crate::metrics::tick_p99();
                cluster.set_load(Load { participants, busiest_thread_cpu, tick_p99 });
                crate::metrics::cluster(&cluster.stats());
            }
            _ = stop.wait_for(|s| *s) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Grant, Method, RoomLocks, StoredConfig, least_grant};

    #[tokio::test]
    async fn a_room_lock_is_shared_by_joins_sole_for_a_release_and_kept_only_while_wanted() {
        use std::time::Duration;
        let locks = RoomLocks::default();
        let join = locks.share("r").await;
        let _other_join = locks.share("r").await;
        assert!(locks.try_lock("r").is_none(), "a release waits for the joins");
        let other = locks.try_lock("s").expect("another room's lock is free");
        drop(other);
        assert_eq!(locks.len(), 1, "a room's entry goes with its last holder");
        // A wait given up (its request dropped) leaves nothing behind.
        let gave_up = tokio::time::timeout(Duration::from_millis(20), locks.lock("r")).await;
        assert!(gave_up.is_err(), "the joins still hold it");
        drop((join, _other_join));
        let release = locks.lock("r").await;
        // A join waits for the release, then has the lock.
        let waiter = tokio::spawn({
            let locks = locks.clone();
            async move { drop(locks.share("r").await) }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "waits while the release holds it");
        drop(release);
        waiter.await.expect("the join has the lock");
        assert_eq!(locks.len(), 0, "no room held or awaited: no entry");
    }

    #[test]
    fn a_redirect_ticket_carries_the_least_grant_its_request_needs() {
        let admin = Grant::admin("ops");
        let g = |method: Method, path: &str| {
            let l = least_grant(&admin, "r", &method, path);
            assert_eq!((l.room.as_str(), l.identity.as_str()), ("r", "ops"), "never '*'");
            (l.speak, l.listen, l.admin)
        };
        // An admin's DELETE of the room: admin for that room, nothing else.
        assert_eq!(g(Method::DELETE, "/v1/rooms/r"), (false, false, true));
        assert_eq!(g(Method::PATCH, "/v1/rooms/r"), (false, false, true));
        assert_eq!(g(Method::POST, "/v1/rooms"), (false, false, true));
        // An admin joining: a moderator of that room (that request only).
        assert_eq!(g(Method::POST, "/v1/rooms/r/participants"), (true, true, true));
        // Acting on a participant may be a kick: all it had, for that path only.
        assert_eq!(g(Method::PATCH, "/v1/rooms/r/participants/7"), (true, true, true));
        // Reads: see, nothing more.
        assert_eq!(g(Method::GET, "/v1/rooms/r/recording"), (false, true, false));
        assert_eq!(g(Method::POST, "/v1/rooms/r/recording"), (false, false, true));
        // A listener's join stays a listener's.
        let l = least_grant(&Grant::listener("*", "bob"), "r", &Method::POST, "/v1/rooms/r/participants");
        assert_eq!((l.speak, l.listen, l.admin, l.room.as_str()), (false, true, false, "r"));
    }

    #[test]
    fn a_stored_config_is_read_back_and_bad_ones_take_the_defaults() {
        let c = StoredConfig::parse(Some(r#"{"max_participants":7,"max_speakers":2}"#));
        assert_eq!((c.max_participants, c.max_speakers), (Some(7), Some(2)));
        let c = StoredConfig::parse(Some(r#"{"max_participants":7,"max_speakers":null,"later":1}"#));
        assert_eq!((c.max_participants, c.max_speakers), (Some(7), None));
        assert_eq!(StoredConfig::parse(Some("not json")), StoredConfig::default());
        assert_eq!(StoredConfig::parse(None), StoredConfig::default());
    }
}
