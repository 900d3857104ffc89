//! The REST routes on rooms and participants.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::cluster::{self, Access, Located};
use super::error::{ApiError, ApiResult};
use super::schema::{ErrorBody, shapes};
use super::{ApiState, authenticate, join_room, may_join, may_see};
use crate::auth::Grant;
use crate::room::{LeaveReason, Room, RoomError};
use crate::sync::lock;

/// The body, or the JSON error for why it could not be read (413 when too large).
pub(super) fn body(body: Result<Bytes, BytesRejection>) -> ApiResult<Bytes> {
    body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", "the request body is too large")
        }
        status => ApiError::new(status, "bad_body", rejection.body_text()),
    })
}

fn content_type(headers: &HeaderMap) -> &str {
    let value = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    value.split(';').next().unwrap_or("").trim()
}

/// Parses a JSON body; an empty body is `T::default()` when `T` allows it.
pub(super) fn json<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    bytes: &Bytes,
    empty: Option<T>,
) -> ApiResult<T> {
    if bytes.is_empty()
        && let Some(default) = empty
    {
        return Ok(default);
    }
    if !content_type(headers).eq_ignore_ascii_case("application/json") {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as application/json",
        ));
    }
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request("bad_json", format!("the JSON body is not valid: {e}")))
}

/// `POST /v1/rooms`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateRoom {
    /// 1 to 64 letters, digits, `-` or `_` (default: a fresh name, or a room admin's token's room).
    id: Option<String>,
    /// Default: `room.max_participants`.
    max_participants: Option<usize>,
    /// How many are mixed at once (top-K); default: `room.max_speakers`.
    max_speakers: Option<usize>,
    /// Record the room from its first join (docs/features/recording.md).
    record: Option<bool>,
}

/// A room and its figures.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct RoomSummary {
    id: String,
    /// Its participants (in a room spread over nodes: on all of them, in
    /// `GET /v1/rooms` and `GET /v1/rooms/{room}`).
    participants: usize,
    max_participants: usize,
    max_speakers: usize,
    /// No new joins (`PATCH` `locked`).
    locked: bool,
    /// The node holding the room (cluster mode only).
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<String>,
}

pub(super) fn summary(api: &ApiState, room: &Room) -> RoomSummary {
    RoomSummary {
        id: room.id.clone(),
        participants: room.len(),
        max_participants: room.max_participants(),
        max_speakers: room.max_speakers(),
        locked: room.is_locked(),
        node: api.cluster.as_ref().map(|c| c.node_id().to_owned()),
    }
}

/// Creates a room (admin). In cluster mode the room is placed on the
/// lighter of two nodes: another node's answers a `307` with a ticket.
#[utoipa::path(
    post,
    path = "/v1/rooms",
    tag = "rooms",
    operation_id = "create_room",
    params(cluster::Access),
    request_body(content = Option<CreateRoom>, content_type = "application/json", description = "Every field optional; an empty body takes the defaults"),
    responses(
        (status = 201, description = "Created", body = RoomSummary, headers(("Location" = String, description = "/v1/rooms/{room}"))),
        (status = 307, description = "Cluster mode: placed on another node; follow `Location` (it carries a single-use ticket)"),
        (status = 400, description = "`bad_json`, `bad_room_id`, `bad_room_config`", body = ErrorBody),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`", body = ErrorBody),
        (status = 403, description = "`forbidden` (not an admin), `recording_disabled`", body = ErrorBody),
        (status = 409, description = "`room_exists`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 503, description = "`server_full`, `draining`, `shutting_down`, `cluster_unavailable` (with `Retry-After`)", body = ErrorBody),
        (status = 507, description = "`recording_quota` (`record: true` with the recordings directory full)", body = ErrorBody),
    ),
)]
pub(crate) async fn create_room(
    State(api): State<Arc<ApiState>>,
    headers: HeaderMap,
    target: cluster::Target,
    query: Result<Query<Access>, axum::extract::rejection::QueryRejection>,
    raw: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let access = cluster::access(query);
    // A redirected create names its room in the query, for its ticket.
    let ticket_room = access.ticket.as_ref().map(|_| access.room.clone().unwrap_or_default());
    let grant =
        cluster::caller(&api, &headers, &target, access.ticket.as_deref(), ticket_room.as_deref().unwrap_or(""))
            .await?;
    if !grant.admin {
        return Err(ApiError::forbidden("creating a room needs a token with the 'admin' permission"));
    }
    let req: CreateRoom = json(&headers, &body(raw)?, Some(CreateRoom::default()))?;
    let record = req.record == Some(true);
    if record && !api.outputs.recording_enabled() {
        return Err(super::recording::output_error(crate::outputs::OutputError::RecordingDisabled));
    }
    if record {
        super::recording::check_quota(&api).await?;
    }
    let id = match (req.id, access.room) {
        (Some(a), Some(b)) if a != b => {
            return Err(ApiError::bad_request("bad_room_id", "the body's id and the query's room differ"));
        }
        (Some(id), _) | (None, Some(id)) if !grant.covers(&id) => {
            return Err(ApiError::forbidden(format!("this token is not for room '{id}'")));
        }
        (Some(id), _) | (None, Some(id)) => id,
        // A room admin's token names its room.
        (None, None) if grant.room != "*" => grant.room.clone(),
        // Names unique across nodes in cluster mode (each node counts on its own).
        (None, None) if api.cluster.is_some() => format!("room-{:08x}", getrandom::u32().unwrap_or_default()),
        (None, None) => api.rooms.fresh_name(),
    };
    let room = match &api.cluster {
        None => api.rooms.create(&id, req.max_participants, req.max_speakers)?,
        Some(c) => {
            // Until the room is made here: no lease of it is given back meanwhile.
            let _held = api.room_locks.share(&id).await;
            if api.rooms.get(&id).is_ok() {
                return Err(RoomError::RoomExists(id).into());
            }
            if !crate::room::valid_room_id(&id) {
                return Err(RoomError::BadRoomId.into());
            }
            let config =
                serde_json::json!({ "max_participants": req.max_participants, "max_speakers": req.max_speakers })
                    .to_string();
            let placement = if ticket_room.is_some() {
                c.claim(&id, Some(&config)).await
            } else {
                c.place(&id, Some(&config)).await
            };
            match placement.map_err(|e| cluster::unavailable(&e))? {
                tutti_cluster::Placement::Local { .. } => {
                    cluster::host(&api, c, &id, req.max_participants, req.max_speakers, true)?
                }
                tutti_cluster::Placement::Remote(owner) => {
                    // The id goes in the query (once), for the ticket to name it there.
                    let extra = ticket_room.is_none().then(|| format!("room={id}"));
                    return cluster::redirect(c, &owner, &id, &target, extra.as_deref(), &grant);
                }
            }
        }
    };
    api.outputs.watch(&room);
    if record {
        api.outputs.start_recording(&room).map_err(super::recording::output_error)?;
    }
    Ok((StatusCode::CREATED, [(header::LOCATION, format!("/v1/rooms/{id}"))], axum::Json(summary(&api, &room)))
        .into_response())
}

/// Lists the rooms (an admin token for every room, `*`); in cluster mode
/// every room of the directory, those elsewhere with their node.
#[utoipa::path(
    get,
    path = "/v1/rooms",
    tag = "rooms",
    operation_id = "list_rooms",
    responses(
        (status = 200, description = "The rooms", body = Vec<RoomListEntry>),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`", body = ErrorBody),
        (status = 403, description = "`forbidden`: not an admin of every room", body = ErrorBody),
        (status = 503, description = "`cluster_unavailable`", body = ErrorBody),
    ),
)]
pub(crate) async fn list_rooms(State(api): State<Arc<ApiState>>, headers: HeaderMap) -> ApiResult<Response> {
    let grant = authenticate(&api, &headers, None)?;
    if !grant.may_list() {
        return Err(ApiError::forbidden("listing rooms needs an admin token for every room ('*')"));
    }
    let mut local: Vec<serde_json::Value> = Vec::new();
    for r in api.rooms.all() {
        let mut entry = summary(&api, &r);
        // A spread room counts every node's participants (the others' from their rosters).
        entry.participants += super::roster::others(&api, &r).await.len();
        local.extend(serde_json::to_value(entry).ok());
    }
    let Some(c) = &api.cluster else { return Ok(axum::Json(local).into_response()) };
    // Every room of the directory; the ones hosted here with their figures.
    let mut out = local;
    for entry in c.list_rooms().await.map_err(|e| cluster::unavailable(&e))? {
        if api.rooms.get(&entry.room).is_ok() {
            continue;
        }
        out.push(serde_json::json!({
            "id": entry.room,
            "node": entry.owner.as_ref().map(|o| o.node_id.clone()),
            "api_url": entry.owner.as_ref().map(|o| o.api_url.clone()),
        }));
    }
    out.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    Ok(axum::Json(out).into_response())
}

/// A room: its participants, who is talking, the selected speakers. In
/// cluster mode, a room held by another node: where it is.
#[utoipa::path(
    get,
    path = "/v1/rooms/{room}",
    tag = "rooms",
    operation_id = "get_room",
    params(("room" = String, Path, description = "The room's id")),
    responses(
        (status = 200, description = "The room", body = RoomLookup),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden`", body = ErrorBody),
        (status = 404, description = "`room_not_found`", body = ErrorBody),
        (status = 503, description = "`cluster_unavailable`", body = ErrorBody),
    ),
)]
pub(crate) async fn get_room(
    State(api): State<Arc<ApiState>>,
    Path(room): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    may_see(&authenticate(&api, &headers, None)?, &room)?;
    let state = match (api.rooms.get(&room), &api.cluster) {
        (Ok(state), _) => state,
        (Err(e), None) => return Err(e.into()),
        (Err(e), Some(c)) => {
            // Held elsewhere: say where (the figures are the owner's to give).
            let owner = c.locate(&room).await.map_err(|e| cluster::unavailable(&e))?.ok_or(e)?;
            let body = serde_json::json!({
                "room": { "id": room, "node": owner.node_id },
                "node": owner.node_id,
                "api_url": owner.api_url,
            });
            return Ok(axum::Json(body).into_response());
        }
    };
    // A spread room: every node's participants (the others' from their rosters).
    let participants = super::roster::participants(&api, &state).await;
    let mut room_summary = summary(&api, &state);
    room_summary.participants = participants.len();
    let body = serde_json::json!({
        "room": room_summary,
        "participants": participants,
        "speakers": state.speaker_ids(),
        "bans": api.rooms.bans(&state, Instant::now()),
    });
    Ok(axum::Json(body).into_response())
}

/// Deletes a room (admin of the room): every participant's peer is closed.
#[utoipa::path(
    delete,
    path = "/v1/rooms/{room}",
    tag = "rooms",
    operation_id = "delete_room",
    params(("room" = String, Path, description = "The room's id"), cluster::Access),
    responses(
        (status = 204, description = "Deleted"),
        (status = 307, description = "Cluster mode: held by another node; follow `Location`"),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`forbidden`: not an admin of the room", body = ErrorBody),
        (status = 404, description = "`room_not_found`", body = ErrorBody),
        (status = 503, description = "`cluster_unavailable`", body = ErrorBody),
    ),
)]
pub(crate) async fn delete_room(
    State(api): State<Arc<ApiState>>,
    Path(room): Path<String>,
    headers: HeaderMap,
    target: cluster::Target,
    query: Result<Query<Access>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    let access = cluster::access(query);
    let grant = cluster::caller(&api, &headers, &target, access.ticket.as_deref(), &room).await?;
    if !grant.may_manage(&room) {
        return Err(ApiError::forbidden(format!("deleting room '{room}' needs an admin token for it")));
    }
    // A spread room: the other nodes close their copies too.
    if api.rooms.get(&room).is_ok() {
        super::control::publish(&api, &room, &super::control::Control::Close);
    }
    // Held until the lease is given back: a join after this answer finds the room gone.
    let held = match &api.cluster {
        Some(_) => Some(api.room_locks.lock(&room).await),
        None => None,
    };
    match (api.rooms.delete(&room), &api.cluster) {
        (Ok(effects), cluster) => {
            api.apply(effects);
            if let Some(c) = cluster {
                cluster::release(&api, c, &room, held);
            }
        }
        (Err(e), None) => return Err(e.into()),
        (Err(e), Some(c)) => {
            let owner = c.locate(&room).await.map_err(|e| cluster::unavailable(&e))?.ok_or(e)?;
            return cluster::redirect(c, &owner, &room, &target, None, &grant);
        }
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /v1/rooms/{room}/participants` as JSON.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct JoinRequest {
    /// The SDP offer, with an Opus audio section.
    sdp: String,
    /// The name others see.
    #[serde(default)]
    name: String,
}

/// A JSON join's answer.
#[derive(Debug, Serialize, ToSchema)]
struct JoinResponse {
    /// The participant's id.
    id: u64,
    /// The SDP answer (ICE-lite, host candidates, non-trickle).
    sdp: String,
}

/// Joins a room with an SDP offer: WHIP-style (`application/sdp` in, SDP
/// answer out) or JSON `{sdp, name}` (token with `listen`; without `speak`
/// the participant is muted for good). A plain RTP/AVP offer joins from
/// `rtp_in.allowed` networks only. The answer carries the ICE servers as
/// WHIP `Link` headers.
#[utoipa::path(
    post,
    path = "/v1/rooms/{room}/participants",
    tag = "participants",
    operation_id = "join",
    params(("room" = String, Path, description = "The room's id"), cluster::Access),
    request_body(content(
        (String = "application/sdp"),
        (JoinRequest = "application/json"),
    )),
    responses(
        (status = 201, description = "Joined: the SDP answer (as the offer came: SDP, or JSON)",
            content((String = "application/sdp"), (JoinResponse = "application/json")),
            headers(
                ("Location" = String, description = "/v1/rooms/{room}/participants/{id}: the WHIP resource"),
                ("Link" = String, description = "`<url>; rel=\"ice-server\"`, one per STUN/TURN server (WHIP)"),
            )),
        (status = 307, description = "Cluster mode: the room is on another node; follow `Location` (WHIP clients must)"),
        (status = 400, description = "`bad_sdp`, `bad_json`, `bad_body`", body = ErrorBody),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden` (no `listen`), `banned`, `rtp_in_forbidden`", body = ErrorBody),
        (status = 404, description = "`room_not_found`", body = ErrorBody),
        (status = 409, description = "`room_full`", body = ErrorBody),
        (status = 413, description = "`body_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 423, description = "`room_locked`", body = ErrorBody),
        (status = 429, description = "`rate_limited` (joins per address; `Retry-After`)", body = ErrorBody),
        (status = 503, description = "`server_full`, `draining`, `shutting_down`, `cluster_unavailable`", body = ErrorBody),
    ),
)]
pub(crate) async fn join(
    State(api): State<Arc<ApiState>>,
    Path(room): Path<String>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    target: cluster::Target,
    query: Result<Query<Access>, axum::extract::rejection::QueryRejection>,
    raw: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let access = cluster::access(query);
    let grant = cluster::caller(&api, &headers, &target, access.ticket.as_deref(), &room).await?;
    may_join(&api, &grant, &room, client.ip())?;
    let bytes = body(raw)?;
    let whip = content_type(&headers).eq_ignore_ascii_case("application/sdp");
    let req = if whip {
        let sdp = String::from_utf8(bytes.to_vec())
            .map_err(|_| ApiError::bad_request("bad_sdp", "the SDP offer is not UTF-8"))?;
        JoinRequest { sdp, name: String::new() }
    } else {
        json::<JoinRequest>(&headers, &bytes, None).map_err(|e| {
            if e.status == StatusCode::UNSUPPORTED_MEDIA_TYPE {
                ApiError::new(e.status, e.code, "send the offer as application/sdp, or as application/json {sdp, name}")
            } else {
                e
            }
        })?
    };
    // A plain RTP/AVP offer (SIP gateway): allowed from trusted networks only.
    let plain = super::rtp_in::check(&api, &req.sdp, client.ip())?;
    let state = match cluster::locate_for_join(&api, &room, access.ticket.is_some()).await? {
        Located::Here(state) => state,
        Located::Elsewhere(owner) => {
            let c = api.cluster.as_ref().ok_or_else(|| ApiError::from(RoomError::NoRoom(room.clone())))?;
            return cluster::redirect(c, &owner, &room, &target, None, &grant);
        }
    };
    let (id, answer) = match plain {
        Some(offer) => super::rtp_in::join(&api, &state, offer, &req.name, &grant)?,
        None => join_room(&api, &state, &req.sdp, &req.name, &grant)?,
    };
    // The participant its identity had here, if any, was replaced: close its peer.
    api.apply(api.rooms.take_replaced());
    let location = format!("/v1/rooms/{room}/participants/{id}");
    // TURN credentials expire with the token (a redirect ticket carries no token expiry: the configured TTL).
    let token_expiry = if access.ticket.is_none() {
        super::authenticate_until(&api, &headers, None).ok().and_then(|(_, exp)| exp)
    } else {
        None
    };
    if whip {
        let mut response = (StatusCode::CREATED, answer).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/sdp"));
        if let Ok(v) = HeaderValue::from_str(&location) {
            headers.insert(header::LOCATION, v);
        }
        super::ice::link_headers(&api, &grant, &room, token_expiry, &mut response);
        Ok(response)
    } else {
        let body = axum::Json(JoinResponse { id, sdp: answer });
        let mut response = (StatusCode::CREATED, [(header::LOCATION, location)], body).into_response();
        super::ice::link_headers(&api, &grant, &room, token_expiry, &mut response);
        Ok(response)
    }
}

/// The room back if `id` is one of its participants, else the 404.
fn member_of(state: Arc<Room>, id: u64) -> ApiResult<Arc<Room>> {
    if !lock(&state.members).contains_key(&id) {
        return Err(RoomError::NoParticipant(id).into());
    }
    Ok(state)
}

/// 403 `wrong_room` unless the grant may see `room`, or is the token a
/// participant moved here (a breakout) joined with: its identity's, for the
/// room it first joined (the move's grant stands in for its token here).
fn may_see_member(api: &ApiState, grant: &Grant, room: &str, id: u64) -> ApiResult<()> {
    if grant.may_see(room) {
        return Ok(());
    }
    let moved_here = api.rooms.get(room).is_ok_and(|r| {
        lock(&r.members).get(&id).is_some_and(|m| {
            !grant.identity.is_empty()
                && m.identity == grant.identity
                && m.joined_in.as_deref().is_some_and(|first| grant.may_see(first))
        })
    });
    if moved_here { Ok(()) } else { may_see(grant, room) }
}

/// 403 unless the grant manages the room or is the participant's own
/// (same identity); returns whether it manages the room.
fn may_act_on(grant: &Grant, room: &Room, id: u64) -> ApiResult<bool> {
    if grant.may_manage(&room.id) {
        return Ok(true);
    }
    let own = lock(&room.members).get(&id).is_some_and(|m| !grant.identity.is_empty() && m.identity == grant.identity);
    if own { Ok(false) } else { Err(ApiError::forbidden("acting on another participant needs an admin token")) }
}

/// The query of `DELETE …/participants/{id}`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct LeaveParams {
    /// Keep the participant's identity out of the room this long (admin only).
    ban_seconds: Option<u64>,
    /// A redirect ticket standing in for the token (another node's `307`).
    ticket: Option<String>,
}

/// `DELETE …/participants/{id}`: a participant leaves (its own token), or an
/// admin removes it (reason `kicked`), with `?ban_seconds=` banning its
/// identity from the room for that long (in a room spread over nodes, on
/// every node of it: they refuse its joins within the pub/sub latency).
#[utoipa::path(
    delete,
    path = "/v1/rooms/{room}/participants/{id}",
    tag = "participants",
    operation_id = "leave",
    params(
        ("room" = String, Path, description = "The room's id"),
        ("id" = u64, Path, description = "The participant's id"),
        LeaveParams,
    ),
    responses(
        (status = 204, description = "Left (or kicked, or banned)"),
        (status = 307, description = "Cluster mode: the room, or the participant (its id names its node), is on another node; follow `Location`"),
        (status = 400, description = "`bad_value` (the query)", body = ErrorBody),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden` (another's participant, or a ban, without admin)", body = ErrorBody),
        (status = 404, description = "`room_not_found`, `participant_not_found`", body = ErrorBody),
    ),
)]
pub(crate) async fn leave(
    State(api): State<Arc<ApiState>>,
    Path((room, id)): Path<(String, u64)>,
    headers: HeaderMap,
    target: cluster::Target,
    params: Result<Query<LeaveParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    let Query(params) = params.map_err(|e| ApiError::bad_request("bad_value", e.body_text()))?;
    let grant = cluster::caller(&api, &headers, &target, params.ticket.as_deref(), &room).await?;
    may_see_member(&api, &grant, &room, id)?;
    if params.ban_seconds.is_some() && !grant.may_manage(&room) {
        return Err(ApiError::forbidden("banning a participant needs an admin token"));
    }
    let ticketed = params.ticket.is_some();
    let state = match cluster::participant_here(&api, &room, id, &target, &grant, ticketed).await? {
        Ok(state) => member_of(state, id)?,
        Err(elsewhere) => return Ok(elsewhere),
    };
    let admin = may_act_on(&grant, &state, id)?;
    let own = lock(&state.members).get(&id).is_some_and(|m| m.identity == grant.identity);
    let effect = match params.ban_seconds {
        Some(secs) => {
            let key = api.rooms.ban_key_of(&state, id);
            let ban = std::time::Duration::from_secs(secs);
            let effect = api.rooms.kick(&state, id, Some(ban), Instant::now())?;
            crate::metrics::stage_action("ban");
            // The other nodes of a spread room refuse the identity too.
            if let Some(key) = key {
                super::control::publish(&api, &room, &super::control::Control::Ban { key, seconds: secs });
            }
            effect
        }
        // An admin removing someone else kicks it (with auth off, every caller is an admin with no identity: it leaves).
        None if admin && !own => {
            let effect = api.rooms.kick(&state, id, None, Instant::now())?;
            crate::metrics::stage_action("kick");
            effect
        }
        None => api.rooms.leave(&state, id, LeaveReason::Left)?,
    };
    api.apply(effect);
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `PATCH /v1/rooms/{room}/participants/{id}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateParticipant {
    muted: Option<bool>,
    /// 0 to 4 (admin only).
    gain: Option<f32>,
    /// Grant or revoke the right to speak (admin only).
    speak: Option<bool>,
    /// Raise or lower the hand (its own, or an admin).
    hand: Option<bool>,
    /// Hear no one (sent nothing), or hear the room again (its own, or an admin).
    deaf: Option<bool>,
    // sound: voice processing over the room's setting (admin only; null: the room's).
    /// Over the room's setting (admin only; null: the room's again).
    #[serde(default, deserialize_with = "crate::room::double_option")]
    noise_suppression: Option<Option<bool>>,
    /// Over the room's setting (admin only; null: the room's again).
    #[serde(default, deserialize_with = "crate::room::double_option")]
    loudness: Option<Option<bool>>,
}

/// Changes a participant (JSON: mute, gain, speak, hand, voice), or
/// restarts its ICE (`application/sdp`: a new offer on the same connection).
#[utoipa::path(
    patch,
    path = "/v1/rooms/{room}/participants/{id}",
    tag = "participants",
    operation_id = "update_participant",
    params(
        ("room" = String, Path, description = "The room's id"),
        ("id" = u64, Path, description = "The participant's id"),
        cluster::Access,
    ),
    request_body(content(
        (UpdateParticipant = "application/json"),
        (String = "application/sdp"),
    )),
    responses(
        (status = 200, description = "JSON: the participant now; SDP: the ICE restart's answer",
            content((shapes::ParticipantChanged = "application/json"), (String = "application/sdp"))),
        (status = 307, description = "Cluster mode: the room, or the participant (its id names its node), is on another node; follow `Location`"),
        (status = 400, description = "`bad_json`, `bad_value`, `bad_sdp`", body = ErrorBody),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden` (another's participant, or an admin-only field)", body = ErrorBody),
        (status = 404, description = "`room_not_found`, `participant_not_found`", body = ErrorBody),
        (status = 409, description = "`not_connected` (ICE restart before the first connection)", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 429, description = "`rate_limited` (updates per participant, restarts per address)", body = ErrorBody),
        (status = 503, description = "`media_busy`", body = ErrorBody),
    ),
)]
pub(crate) async fn update_participant(
    State(api): State<Arc<ApiState>>,
    Path((room, id)): Path<(String, u64)>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    target: cluster::Target,
    query: Result<Query<Access>, axum::extract::rejection::QueryRejection>,
    raw: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let access = cluster::access(query);
    let grant = cluster::caller(&api, &headers, &target, access.ticket.as_deref(), &room).await?;
    may_see_member(&api, &grant, &room, id)?;
    let ticketed = access.ticket.is_some();
    let here = match cluster::participant_here(&api, &room, id, &target, &grant, ticketed).await? {
        Ok(here) => here,
        Err(elsewhere) => return Ok(elsewhere),
    };
    if content_type(&headers).eq_ignore_ascii_case("application/sdp") {
        // An answer is SDP work on a media thread: restarts count against
        // the client address's join rate, like joins.
        api.joins.check(client.ip(), std::time::Instant::now()).map_err(ApiError::rate_limited)?;
        return restart_ice(&api, &grant, here, id, body(raw)?).await;
    }
    let req: UpdateParticipant = json(&headers, &body(raw)?, None)?;
    let state = member_of(here, id)?;
    let admin = may_act_on(&grant, &state, id)?;
    // Each change is fanned out to every socket of the room: a participant
    // takes at most `limits.participant_updates_per_second` of them.
    api.updates.check(id, Instant::now()).map_err(|retry| {
        let mut e = ApiError::rate_limited(retry);
        e.message = format!(
            "participant {id} is updated too often (limits.participant_updates_per_second = {}); retry in {} s",
            api.cfg.limits.participant_updates_per_second,
            retry.as_secs_f64().ceil().max(1.0)
        );
        e
    })?;
    if req.gain.is_some() && !admin {
        return Err(ApiError::forbidden("changing a participant's gain needs an admin token"));
    }
    if req.speak.is_some() && !admin {
        return Err(ApiError::forbidden("granting or revoking the right to speak needs an admin token"));
    }
    // sound: noise suppression and loudness switches (admin only).
    if (req.noise_suppression.is_some() || req.loudness.is_some()) && !admin {
        return Err(ApiError::forbidden("changing a participant's noise suppression or loudness needs an admin token"));
    }
    if let Some(gain) = req.gain {
        api.rooms.set_gain(&state, id, gain)?;
    }
    // Speak first: a grant unmutes, so `{"speak": true, "muted": true}` ends muted.
    if let Some(speak) = req.speak
        && api.rooms.set_speak(&state, id, speak)?
    {
        crate::metrics::stage_action(if speak { "grant" } else { "revoke" });
    }
    if let Some(raised) = req.hand
        && api.rooms.set_hand(&state, id, raised)?
    {
        crate::metrics::stage_action(if raised { "hand_raised" } else { "hand_lowered" });
    }
    if let Some(deaf) = req.deaf
        && api.rooms.set_deaf(&state, id, deaf)?
    {
        crate::metrics::stage_action(if deaf { "deafened" } else { "undeafened" });
    }
    if let Some(muted) = req.muted {
        api.rooms.set_muted(&state, id, muted)?;
    }
    // sound: last, so a refused gain or mute above leaves it unchanged.
    let voice = api.rooms.set_voice(&state, id, req.noise_suppression, req.loudness)?;
    let member = lock(&state.members).get(&id).cloned().ok_or(RoomError::NoParticipant(id))?;
    let mut body = serde_json::json!({
        "id": id,
        "muted": member.muted,
        "gain": req.gain,
        "speak": !member.listen_only,
        "hand": member.hand,
        "deaf": member.deaf,
    });
    body["voice"] = serde_json::to_value(voice).unwrap_or_default(); // sound
    Ok(axum::Json(body).into_response())
}

// Answers built with `json!`, described for the OpenAPI document (see `schema`).

/// `GET /v1/rooms/{room}` for a room on this node.
#[derive(ToSchema)]
#[allow(dead_code)] // described, never built
pub(super) struct RoomDetail {
    room: RoomSummary,
    participants: Vec<shapes::Member>,
    /// The ids of the last tick's selected speakers.
    speakers: Vec<u64>,
    /// How many identities are banned from the room now.
    bans: usize,
}

/// `GET /v1/rooms/{room}`: the room here, or (cluster mode) where it is.
#[derive(ToSchema)]
#[serde(untagged)]
#[allow(dead_code)] // described, never built
pub(super) enum RoomLookup {
    Here(RoomDetail),
    Elsewhere(shapes::RoomElsewhere),
}

/// An entry of `GET /v1/rooms`: a room here with its figures, or one elsewhere.
#[derive(ToSchema)]
#[serde(untagged)]
#[allow(dead_code)] // described, never built
pub(super) enum RoomListEntry {
    Here(RoomSummary),
    Elsewhere(shapes::RemoteRoom),
}

/// `PATCH /v1/rooms/{room}`: the room as it is now.
#[derive(ToSchema)]
#[allow(dead_code)] // described, never built
pub(super) struct RoomChanged {
    #[serde(flatten)]
    room: RoomSummary,
    /// How many participants `mute_all` muted.
    muted: usize,
    voice: shapes::RoomVoice,
}

/// How long the API waits for the I/O thread's answer to a restart offer.
const RESTART_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// `PATCH /v1/rooms/{room}/participants/{id}` with `application/sdp`: an
/// ICE restart. The participant's new offer (new ICE credentials, perhaps a
/// new address or network) is answered on its existing connection: same
/// id, mute state, gain and place in the room; the DTLS session and SRTP
/// keys carry on. Allowed within the peer timeout after its connection
/// dropped (the grace period); after that the participant has left.
async fn restart_ice(api: &ApiState, grant: &Grant, room: Arc<Room>, id: u64, offer: Bytes) -> ApiResult<Response> {
    let result = restart_answer(api, grant, room, id, offer).await;
    crate::metrics::ice_restart(result.is_ok());
    let answer = result?;
    let mut response = (StatusCode::OK, answer).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/sdp"));
    Ok(response)
}

async fn restart_answer(api: &ApiState, grant: &Grant, room: Arc<Room>, id: u64, offer: Bytes) -> ApiResult<String> {
    let room = member_of(room, id)?;
    may_act_on(grant, &room, id)?;
    let offer = String::from_utf8(offer.to_vec())
        .map_err(|_| ApiError::bad_request("bad_sdp", "the SDP offer is not UTF-8"))?;
    let not_connected = || {
        ApiError::new(
            StatusCode::CONFLICT,
            "not_connected",
            format!("participant {id} has not connected yet: there is no connection to restart (join again)"),
        )
    };
    let io = api.rooms.peer_io(id).ok_or(RoomError::NoParticipant(id))?.ok_or_else(not_connected)?;
    let answer = api.media.restart(io, tutti_rtc::PeerId(id), offer);
    match tokio::time::timeout(RESTART_TIMEOUT, answer).await {
        Ok(Ok(Ok(sdp))) => {
            tracing::info!(room = %room.id, participant = id, "ICE restart answered");
            Ok(sdp)
        }
        Ok(Ok(Err(tutti_rtc::RtcError::BadSdp(e)))) => Err(ApiError::bad_request("bad_sdp", e)),
        Ok(Ok(Err(tutti_rtc::RtcError::NoAudio))) => {
            Err(ApiError::bad_request("bad_sdp", "the SDP offer has no Opus audio"))
        }
        Ok(Ok(Err(tutti_rtc::RtcError::NotConnected))) => Err(not_connected()),
        Ok(Ok(Err(tutti_rtc::RtcError::UnknownPeer(_)))) | Ok(Err(_)) => Err(RoomError::NoParticipant(id).into()),
        Ok(Ok(Err(e))) => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())),
        Err(_) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "media_busy",
            "the media thread did not answer the restart in time; try again",
        )),
    }
}

/// Deletes the rooms empty for `room.empty_timeout_seconds` (0: never); in
/// cluster mode their leases are given back. Called every second.
pub(crate) fn reap_empty(api: &ApiState, now: Instant) {
    let secs = api.cfg.room.empty_timeout_seconds;
    if secs <= 0.0 || !secs.is_finite() {
        return;
    }
    for room in api.rooms.reap_empty(now, std::time::Duration::from_secs_f64(secs)) {
        if let Some(c) = &api.cluster {
            cluster::release(api, c, &room, None);
        }
    }
}
