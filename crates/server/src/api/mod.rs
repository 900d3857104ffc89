//! # The control plane: the REST API, the WebSocket, the web page
//!
//! Rooms, joining with an SDP offer (WHIP-style or JSON), leaving, muting;
//! room events over a WebSocket; errors as JSON with a stable code
//! ([`error`]). Room operations are the room domain's ([`crate::room`]);
//! the API checks who may do what, turns requests into those operations and
//! their `RoomError`s into HTTP, and hands their effects to the media plane
//! through its small handle ([`crate::media::MediaHandle`]).
//!
//! Every route but `/healthz` and `/readyz` takes an access token
//! ([`crate::auth`]). The checks run in a fixed order, so that a caller
//! learns nothing about a room it may not see: 401 (no valid token), 403
//! (not for this room, or lacking the permission), 429 (join rate), and
//! only then 404, 409, 400.

pub(crate) mod cluster;
pub(crate) mod control;
mod cors;
pub(crate) mod error;
pub(crate) mod http;
mod ice;
mod invite;
mod limit;
mod moves;
pub(crate) mod node;
mod openapi;
mod origin;
pub(crate) mod playback;
mod recording;
pub(crate) mod rooms;
pub(crate) mod roster;
mod rtp_in;
mod rtp_out;
pub(crate) mod schema;
mod speakers;
mod stage;
mod web;
mod whisper;
pub(crate) mod ws;

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderMap, header};
use axum::routing::{get, post};

use crate::Config;
use crate::auth::{Auth, Grant, unix_now};
use crate::media::MediaHandle;
use crate::room::{Effect, Room, RoomError, Rooms};
use error::{ApiError, ApiResult};
use limit::AddressLimiter;

/// What the API handlers share.
pub(crate) struct ApiState {
    pub(crate) cfg: Config,
    pub(crate) rooms: Arc<Rooms>,
    pub(crate) media: Arc<MediaHandle>,
    /// Verifies access tokens; `None` when auth is disabled.
    pub(crate) auth: Option<Auth>,
    /// Joins per client address.
    pub(crate) joins: AddressLimiter,
    /// Open WebSocket sessions (shutdown waits for them to be told).
    pub(crate) ws_sessions: AtomicUsize,
    /// The cluster directory; `None` on a single node (no Redis at all).
    pub(crate) cluster: Option<tutti_cluster::Cluster>,
    /// Recordings, RTP out, webhooks.
    pub(crate) outputs: Arc<crate::outputs::Outputs>,
    /// WebSocket-joined participants a new socket may resume.
    pub(crate) ws_resumes: ws::Resumes,
    /// Whether this node drains (SIGTERM, `POST /v1/node/drain`), and until when.
    pub(crate) drain: node::Drain,
    /// `PATCH …/participants/{id}` per participant.
    pub(crate) updates: limit::KeyedLimiter<u64>,
    /// Open WebSockets per token identity.
    pub(crate) ws_identities: limit::Counts,
    /// Files of the playback directory read once for every room playing them.
    pub(crate) clips: playback::ClipCache,
    /// Wakes the span task (`cluster::spans`) before its next refresh: this
    /// node or another just joined a spread room's span.
    pub(crate) span_wake: tokio::sync::Notify,
    /// Rosters of spread rooms: this node's changes to write, the other
    /// nodes' as last read (`roster`).
    pub(crate) roster: Arc<roster::Roster>,
    /// The other nodes a page and a snapshot name, as last read.
    pub(crate) other_nodes: cluster::OtherNodes,
    /// Per room: a claim and the room's making here, or a close and the
    /// lease given back, one at a time (cluster mode).
    pub(crate) room_locks: cluster::RoomLocks,
}

impl ApiState {
    pub(crate) fn new(cfg: Config, rooms: Arc<Rooms>, media: Arc<MediaHandle>, auth: Option<Auth>) -> Self {
        Self {
            joins: AddressLimiter::new(cfg.limits.join_rate_per_second, cfg.limits.join_burst),
            rooms,
            media,
            auth,
            ws_sessions: AtomicUsize::new(0),
            cluster: None,
            outputs: Arc::new(crate::outputs::Outputs::disabled()),
            ws_resumes: ws::Resumes::default(),
            drain: node::Drain::default(),
            updates: limit::KeyedLimiter::new(
                cfg.limits.participant_updates_per_second,
                cfg.limits.participant_update_burst,
            ),
            ws_identities: limit::Counts::default(),
            clips: playback::ClipCache::default(),
            span_wake: tokio::sync::Notify::new(),
            roster: Arc::default(),
            other_nodes: cluster::OtherNodes::default(),
            room_locks: cluster::RoomLocks::default(),
            cfg,
        }
    }

    /// Client addresses the join rate limiter tracks.
    pub(crate) fn rate_limited_addresses(&self) -> usize {
        self.joins.tracked()
    }

    /// Hands room effects to the media plane.
    pub(crate) fn apply(&self, effects: impl IntoIterator<Item = Effect>) {
        self.media.apply(effects);
    }
}

/// The token of `Authorization: Bearer <token>`; `Some("!")` for another
/// scheme (refused as malformed, not as missing).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().unwrap_or("");
    match value.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => Some(token.trim()),
        _ => Some("!"),
    }
}

/// The caller's grant: from its token (the `Authorization` header, else
/// `query_token`), or every permission when auth is disabled.
pub(crate) fn authenticate(api: &ApiState, headers: &HeaderMap, query_token: Option<&str>) -> ApiResult<Grant> {
    authenticate_until(api, headers, query_token).map(|(grant, _)| grant)
}

/// As [`authenticate`], with the token's expiry (Unix seconds; `None` when auth is disabled).
pub(crate) fn authenticate_until(
    api: &ApiState,
    headers: &HeaderMap,
    query_token: Option<&str>,
) -> ApiResult<(Grant, Option<u64>)> {
    let Some(auth) = &api.auth else { return Ok((Grant::admin(""), None)) };
    let token = bearer(headers).or(query_token).unwrap_or("");
    auth.verify_until(token, unix_now()).map(|(g, exp)| (g, Some(exp))).map_err(|e| ApiError::unauthorized(&e))
}

/// 403 unless the grant may see `room` (without saying whether it exists).
pub(crate) fn may_see(grant: &Grant, room: &str) -> ApiResult<()> {
    if grant.may_see(room) {
        Ok(())
    } else if !grant.covers(room) {
        Err(ApiError::wrong_room(room))
    } else {
        Err(ApiError::forbidden(format!("this token grants nothing in room '{room}'")))
    }
}

/// 403 unless the grant may join `room`; 429 if `ip` joins too often.
pub(crate) fn may_join(api: &ApiState, grant: &Grant, room: &str, ip: IpAddr) -> ApiResult<()> {
    may_see(grant, room)?;
    if !grant.listen {
        return Err(ApiError::forbidden("joining needs a token with the 'listen' permission"));
    }
    api.joins.check(ip, Instant::now()).map_err(ApiError::rate_limited)
}

/// Joins `room` with an SDP offer: checks space, answers, admits, as
/// `grant` allows (checked by [`may_join`]): without `speak`, the
/// participant is muted for good. Shared by the REST join and the WebSocket
/// `join` message. Returns (participant id, SDP answer).
pub(crate) fn join_room(
    api: &ApiState,
    room: &Arc<Room>,
    sdp: &str,
    name: &str,
    grant: &Grant,
) -> ApiResult<(u64, String)> {
    api.rooms.check_space(room)?;
    stage::admit(api, room, grant, name)?;
    if tutti_rtc::plain::is_plain_offer(sdp) {
        // The REST join takes these (rtp_in::check); here (the WebSocket) they would wait for ICE forever.
        return Err(ApiError::bad_request(
            "bad_sdp",
            "plain RTP/AVP offers join with POST /v1/rooms/{room}/participants",
        ));
    }
    let now = Instant::now();
    let (peer, answer) = api.media.accept(sdp, now).map_err(|e| match e {
        tutti_rtc::RtcError::BadSdp(_) | tutti_rtc::RtcError::NoAudio => {
            ApiError::bad_request("bad_sdp", e.to_string())
        }
        e => ApiError::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()),
    })?;
    let joiner = crate::room::Joiner {
        peer,
        name: name.to_owned(),
        identity: grant.identity.clone(),
        listen_only: !grant.speak,
        // With auth off every caller is an admin: then nobody is spared by mute-all.
        admin: api.auth.is_some() && grant.may_manage(&room.id),
    };
    let id = api.rooms.join(room, joiner, now)?;
    // The participant its identity had here, if any, is replaced: close its peer.
    api.apply(api.rooms.take_replaced());
    Ok((id, answer))
}

/// Forgets join-rate buckets that refilled, every second, until the API stops.
pub(crate) async fn housekeeping(api: Arc<ApiState>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = every.tick() => {
                let now = Instant::now();
                api.joins.prune(now);
                api.updates.prune(now);
                // Replaced participants' peers not yet closed by their joiner's caller (plain RTP joins).
                api.apply(api.rooms.take_replaced());
                rooms::reap_empty(&api, now);
            }
            _ = stop.wait_for(|s| *s) => break,
        }
    }
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "node", operation_id = "healthz", security(()),
    responses((status = 200, description = "`ok`", body = String, content_type = "text/plain")))]
async fn healthz() -> &'static str {
    "ok"
}

/// Readiness: 503 while the node drains or shuts down (take it out of the load balancer).
#[utoipa::path(get, path = "/readyz", tag = "node", operation_id = "readyz", security(()),
    responses(
        (status = 200, description = "`ready`", body = String, content_type = "text/plain"),
        (status = 503, description = "`draining`, `shutting_down`", body = schema::ErrorBody),
    ))]
async fn readyz(axum::extract::State(api): axum::extract::State<Arc<ApiState>>) -> ApiResult<&'static str> {
    if api.rooms.is_closing() {
        return Err(ApiError::shutting_down());
    }
    if api.rooms.is_draining() {
        return Err(RoomError::Draining.into());
    }
    Ok("ready")
}

/// 405 as JSON (axum adds `Allow`), for a route that exists with other methods.
async fn method_not_allowed() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not take this method (see the Allow header)",
    )
}

async fn not_found() -> ApiError {
    ApiError::new(axum::http::StatusCode::NOT_FOUND, "not_found", "no such endpoint")
}

/// 408 for a request (body included) that takes longer than the limit.
async fn request_timeout(
    axum::extract::State(limit): axum::extract::State<Duration>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            let message = format!("the request took longer than {} s", limit.as_secs_f64());
            let mut response =
                ApiError::new(axum::http::StatusCode::REQUEST_TIMEOUT, "request_timeout", message).into_response();
            response.headers_mut().insert(header::CONNECTION, axum::http::HeaderValue::from_static("close"));
            response
        }
    }
}

/// The API's routes.
pub(crate) fn router(api: Arc<ApiState>) -> Router {
    let max_body_bytes = api.cfg.max_body_bytes;
    let timeout = Duration::from_secs_f64(api.cfg.limits.http_request_timeout_seconds);
    let dev_mode = api.auth.is_none().then_some(api.cfg.http);
    let router = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/v1/rooms", post(rooms::create_room).get(rooms::list_rooms))
        .route("/v1/rooms/{room}", get(rooms::get_room).delete(rooms::delete_room).patch(stage::update_room))
        .route("/v1/rooms/{room}/participants", post(rooms::join))
        .route(
            "/v1/rooms/{room}/participants/{id}",
            axum::routing::delete(rooms::leave).patch(rooms::update_participant),
        )
        .route("/v1/rooms/{room}/ws", get(ws::upgrade))
        .merge(cluster::routes())
        .merge(recording::routes())
        .merge(rtp_out::routes())
        .merge(speakers::routes())
        .merge(playback::routes())
        .merge(moves::routes())
        .merge(whisper::routes())
        .merge(node::routes())
        .route("/v1/rooms/{room}/ice-servers", get(ice::ice_servers))
        .merge(invite::routes())
        .merge(web::routes())
        .merge(openapi::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(timeout, request_timeout))
        .layer(axum::middleware::from_fn(crate::metrics::track_api));
    // Auth disabled: no cross-site or DNS-rebinding use of a local server.
    let router = match dev_mode {
        Some(http) => router.layer(axum::middleware::from_fn_with_state(http, origin::guard)),
        None => router,
    };
    // Outermost: CORS headers on every answer, errors and timeouts included.
    let router = match cors::layer(&api.cfg.cors) {
        Some(cors) => router.layer(cors).layer(axum::middleware::from_fn(cors::only_allowed)),
        None => router,
    };
    router.with_state(api)
}
