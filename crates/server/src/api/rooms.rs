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

use super::access::{self as cluster, Access, authenticate};
use super::body::{body, content_type, json};
use super::schema::{ErrorBody, shapes};
use super::state::ApiState;
use crate::auth::Grant;
use crate::cluster::node::unavailable;
use crate::cluster::roster;
use crate::refusal::{Refusal, Refused};
use crate::room::{Room, RoomError};
use crate::session::grants::{may_act_on, may_see, may_see_member, member_of};
use crate::session::join::{Joined, Offer, Place};
use crate::session::members::Change;
use crate::session::rooms::Placed;

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
    /// Hold participants muted, with the hold music, until a moderator joins (docs/features/moderated-rooms.md).
    wait_for_moderator: Option<bool>,
    /// When the last moderator leaves: `stay` (default), `mute` everyone else, or `end` the room.
    on_moderator_leave: Option<crate::room::OnModeratorLeave>,
    /// Everyone but a moderator joins muted.
    join_muted: Option<bool>,
    /// Speakers on seats, heard in stereo by clients that ask for it (docs/features/spatial.md):
    /// `true` or `"panned"`, `"binaural"` (for headphones), `false` or `"off"`; default: `room.spatial`.
    spatial: Option<crate::room::SpatialMode>,
}

/// A room's moderation options as a request changes them (each `None`: as it is).
pub(crate) fn moderation_of(
    now: crate::room::Moderation,
    wait_for_moderator: Option<bool>,
    on_moderator_leave: Option<crate::room::OnModeratorLeave>,
    join_muted: Option<bool>,
) -> crate::room::Moderation {
    crate::room::Moderation {
        wait_for_moderator: wait_for_moderator.unwrap_or(now.wait_for_moderator),
        on_moderator_leave: on_moderator_leave.unwrap_or(now.on_moderator_leave),
        join_muted: join_muted.unwrap_or(now.join_muted),
    }
}

/// A room and its figures.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RoomSummary {
    id: String,
    /// Its participants (in a room spread over nodes: on all of them, in
    /// `GET /v1/rooms` and `GET /v1/rooms/{room}`).
    participants: usize,
    max_participants: usize,
    max_speakers: usize,
    /// No new joins (`PATCH` `locked`).
    locked: bool,
    /// Whether it waits for its moderator, and what it does when they leave.
    moderation: crate::room::Moderation,
    /// No moderator has come yet in a room that waits for one: the others are held muted.
    waiting: bool,
    /// Speakers sit on seats, heard in stereo by clients that ask for it.
    spatial: bool,
    /// How: `off`, `panned` or `binaural` (docs/features/spatial.md).
    spatial_mode: crate::room::SpatialMode,
    /// The node holding the room (cluster mode only).
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<String>,
}

pub(crate) fn summary(api: &ApiState, room: &Room) -> RoomSummary {
    RoomSummary {
        id: room.id.clone(),
        participants: room.len(),
        max_participants: room.max_participants(),
        max_speakers: room.max_speakers(),
        locked: room.is_locked(),
        moderation: room.moderation(),
        waiting: room.is_waiting(),
        spatial: room.is_spatial(),
        spatial_mode: room.spatial_mode(),
        node: api.node.dir.as_ref().map(|c| c.node_id().to_owned()),
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
) -> Refused<Response> {
    let access = cluster::access(query);
    // A redirected create names its room in the query, for its ticket.
    let ticket_room = access.ticket.as_ref().map(|_| access.room.clone().unwrap_or_default());
    let grant =
        cluster::caller(&api, &headers, &target, access.ticket.as_deref(), ticket_room.as_deref().unwrap_or(""))
            .await?;
    if !grant.admin {
        return Err(Refusal::forbidden("creating a room needs a token with the 'admin' permission"));
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
            return Err(Refusal::bad_request("bad_room_id", "the body's id and the query's room differ"));
        }
        (Some(id), _) | (None, Some(id)) if !grant.covers(&id) => {
            return Err(Refusal::forbidden(format!("this token is not for room '{id}'")));
        }
        (Some(id), _) | (None, Some(id)) => id,
        // A room admin's token names its room.
        (None, None) if grant.room != "*" => grant.room.clone(),
        // Names unique across nodes in cluster mode (each node counts on its own).
        (None, None) if api.node.dir.is_some() => format!("room-{:08x}", getrandom::u32().unwrap_or_default()),
        (None, None) => api.rooms.fresh_name(),
    };
    let given = req.wait_for_moderator.is_some() || req.on_moderator_leave.is_some() || req.join_muted.is_some();
    let options = crate::cluster::options::RoomOptions {
        spatial: req.spatial,
        moderation: given
            .then(|| moderation_of(Default::default(), req.wait_for_moderator, req.on_moderator_leave, req.join_muted)),
    };
    let room = match api
        .session
        .create_room(&id, req.max_participants, req.max_speakers, options, ticket_room.is_some())
        .await?
    {
        Placed::Here(room) => room,
        Placed::Elsewhere(owner) => {
            // The id goes in the query (once), for the ticket to name it there.
            let extra = ticket_room.is_none().then(|| format!("room={id}"));
            return cluster::redirect_room(&api, &owner, &id, &target, extra.as_deref(), (&grant, None));
        }
    };
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
pub(crate) async fn list_rooms(State(api): State<Arc<ApiState>>, headers: HeaderMap) -> Refused<Response> {
    let grant = authenticate(&api, &headers, None)?;
    if !grant.may_list() {
        return Err(Refusal::forbidden("listing rooms needs an admin token for every room ('*')"));
    }
    let mut local: Vec<serde_json::Value> = Vec::new();
    for r in api.rooms.all() {
        let mut entry = summary(&api, &r);
        // A spread room counts every node's participants (the others' from their rosters).
        entry.participants += roster::others(api.node.dir.as_ref(), &api.node.roster, &r).await.len();
        local.extend(serde_json::to_value(entry).ok());
    }
    let Some(c) = &api.node.dir else { return Ok(axum::Json(local).into_response()) };
    // Every room of the directory; the ones hosted here with their figures.
    let mut out = local;
    for entry in c.list_rooms().await.map_err(|e| unavailable(&e))? {
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
) -> Refused<Response> {
    may_see(&authenticate(&api, &headers, None)?, &room)?;
    let state = match (api.rooms.get(&room), &api.node.dir) {
        (Ok(state), _) => state,
        (Err(e), None) => return Err(e.into()),
        (Err(e), Some(c)) => {
            // Held elsewhere: say where (the figures are the owner's to give).
            let owner = c.locate(&room).await.map_err(|e| unavailable(&e))?.ok_or(e)?;
            let body = serde_json::json!({
                "room": { "id": room, "node": owner.node_id },
                "node": owner.node_id,
                "api_url": owner.api_url,
            });
            return Ok(axum::Json(body).into_response());
        }
    };
    // A spread room: every node's participants (the others' from their rosters).
    let participants = roster::participants(api.node.dir.as_ref(), &api.node.roster, &state).await;
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
) -> Refused<Response> {
    let access = cluster::access(query);
    let grant = cluster::caller(&api, &headers, &target, access.ticket.as_deref(), &room).await?;
    if !grant.may_manage(&room) {
        return Err(Refusal::forbidden(format!("deleting room '{room}' needs an admin token for it")));
    }
    if let Some(owner) = api.session.delete_room(&room).await? {
        return cluster::redirect_room(&api, &owner, &room, &target, None, (&grant, None));
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
) -> Refused<Response> {
    let access = cluster::access(query);
    // The token's expiry (or the one a redirect ticket carries): the TURN
    // credentials, here or on the node a redirect sends the join to, expire with it.
    let (grant, token_exp) = cluster::caller_until(&api, &headers, &target, access.ticket.as_deref(), &room).await?;
    let whip = content_type(&headers).eq_ignore_ascii_case("application/sdp");
    // The offer is parsed once the caller may join (the session layer asks for it).
    let offer = || {
        let bytes = body(raw)?;
        if whip {
            let sdp = String::from_utf8(bytes.to_vec())
                .map_err(|_| Refusal::bad_request("bad_sdp", "the SDP offer is not UTF-8"))?;
            return Ok(Offer { sdp, name: String::new() });
        }
        let req = json::<JoinRequest>(&headers, &bytes, None).map_err(|e| {
            if e.status == StatusCode::UNSUPPORTED_MEDIA_TYPE {
                Refusal::new(e.status, e.code, "send the offer as application/sdp, or as application/json {sdp, name}")
            } else {
                e
            }
        })?;
        Ok(Offer { sdp: req.sdp, name: req.name })
    };
    let request = crate::session::join::JoinRequest {
        room: &room,
        grant: &grant,
        client: client.ip(),
        place: Place::Locate { ticketed: access.ticket.is_some() },
        plain: true,
    };
    let (id, answer) = match api.session.join(request, offer).await? {
        Joined::Here { id, answer } => (id, answer),
        Joined::Elsewhere(owner) => {
            return cluster::redirect_room(&api, &owner, &room, &target, None, (&grant, token_exp));
        }
    };
    let location = format!("/v1/rooms/{room}/participants/{id}");

    if whip {
        let mut response = (StatusCode::CREATED, answer).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/sdp"));
        if let Ok(v) = HeaderValue::from_str(&location) {
            headers.insert(header::LOCATION, v);
        }
        super::ice::link_headers(&api, &grant, &room, token_exp, &mut response);
        Ok(response)
    } else {
        let body = axum::Json(JoinResponse { id, sdp: answer });
        let mut response = (StatusCode::CREATED, [(header::LOCATION, location)], body).into_response();
        super::ice::link_headers(&api, &grant, &room, token_exp, &mut response);
        Ok(response)
    }
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
        (status = 410, description = "`participant_left`: it left lately; the message says when and why (e.g. `timed_out`: its answer came too late)", body = ErrorBody),
    ),
)]
pub(crate) async fn leave(
    State(api): State<Arc<ApiState>>,
    Path((room, id)): Path<(String, u64)>,
    headers: HeaderMap,
    target: cluster::Target,
    params: Result<Query<LeaveParams>, axum::extract::rejection::QueryRejection>,
) -> Refused<Response> {
    let Query(params) = params.map_err(|e| Refusal::bad_request("bad_value", e.body_text()))?;
    let grant = cluster::caller(&api, &headers, &target, params.ticket.as_deref(), &room).await?;
    gone(&api, &grant, &room, id)?;
    may_see_member(&api.rooms, &grant, &room, id)?;
    if params.ban_seconds.is_some() && !grant.may_manage(&room) {
        return Err(Refusal::forbidden("banning a participant needs an admin token"));
    }
    let ticketed = params.ticket.is_some();
    let state = match cluster::participant_here(&api, &room, id, &target, &grant, ticketed).await? {
        Ok(state) => member_of(state, id)?,
        Err(elsewhere) => return Ok(elsewhere),
    };
    api.session.remove(&state, id, &grant, params.ban_seconds)?;
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
    /// Attributes to set (a string) or remove (null); the others stay.
    /// Keys under `limits.reserved_attributes` (`sip.`, `tutti.`): admin only.
    #[schema(value_type = Option<std::collections::BTreeMap<String, Option<String>>>)]
    attributes: Option<crate::attributes::AttributesPatch>,
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
        (status = 400, description = "`bad_json`, `bad_value`, `bad_sdp`, `bad_attributes` (past a bound: 16 keys, a key of 64 bytes, a value of 1,024, 4,096 in all)", body = ErrorBody),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden` (another's participant, or an admin-only field), `reserved_attribute` (a key under `limits.reserved_attributes`, set by the participant itself)", body = ErrorBody),
        (status = 404, description = "`room_not_found`, `participant_not_found`", body = ErrorBody),
        (status = 410, description = "`participant_left`: it left lately; the message says when and why (e.g. `timed_out`: its answer came too late)", body = ErrorBody),
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
) -> Refused<Response> {
    let access = cluster::access(query);
    let grant = cluster::caller(&api, &headers, &target, access.ticket.as_deref(), &room).await?;
    gone(&api, &grant, &room, id)?;
    may_see_member(&api.rooms, &grant, &room, id)?;
    let ticketed = access.ticket.is_some();
    let here = match cluster::participant_here(&api, &room, id, &target, &grant, ticketed).await? {
        Ok(here) => here,
        Err(elsewhere) => return Ok(elsewhere),
    };
    if content_type(&headers).eq_ignore_ascii_case("application/sdp") {
        // An answer is SDP work on a media thread: restarts count against
        // the client address's join rate, like joins.
        api.session.joins.check(client.ip(), std::time::Instant::now()).map_err(Refusal::rate_limited)?;
        return restart_ice(&api, &grant, here, id, body(raw)?).await;
    }
    let req: UpdateParticipant = json(&headers, &body(raw)?, None)?;
    let state = member_of(here, id)?;
    let change = Change {
        muted: req.muted,
        gain: req.gain,
        speak: req.speak,
        hand: req.hand,
        deaf: req.deaf,
        noise_suppression: req.noise_suppression,
        loudness: req.loudness,
        attributes: req.attributes,
    };
    let (member, voice) = api.session.update(&state, id, &grant, &change)?;
    let mut body = serde_json::json!({
        "id": id,
        "muted": member.muted,
        "gain": req.gain,
        "speak": !member.listen_only,
        "hand": member.hand,
        "deaf": member.deaf,
        "attributes": member.attributes,
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
async fn restart_ice(api: &ApiState, grant: &Grant, room: Arc<Room>, id: u64, offer: Bytes) -> Refused<Response> {
    let result = restart_answer(api, grant, room, id, offer).await;
    crate::metrics::ice_restart(result.is_ok());
    let answer = result?;
    let mut response = (StatusCode::OK, answer).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/sdp"));
    Ok(response)
}

async fn restart_answer(api: &ApiState, grant: &Grant, room: Arc<Room>, id: u64, offer: Bytes) -> Refused<String> {
    let room = member_of(room, id)?;
    may_act_on(grant, &room, id)?;
    let offer =
        String::from_utf8(offer.to_vec()).map_err(|_| Refusal::bad_request("bad_sdp", "the SDP offer is not UTF-8"))?;
    let not_connected = || {
        Refusal::new(
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
        Ok(Ok(Err(tutti_rtc::RtcError::BadSdp(e)))) => Err(Refusal::bad_request("bad_sdp", e)),
        Ok(Ok(Err(tutti_rtc::RtcError::NoAudio))) => {
            Err(Refusal::bad_request("bad_sdp", "the SDP offer has no Opus audio"))
        }
        Ok(Ok(Err(tutti_rtc::RtcError::NotConnected))) => Err(not_connected()),
        Ok(Ok(Err(tutti_rtc::RtcError::UnknownPeer(_)))) | Ok(Err(_)) => Err(RoomError::NoParticipant(id).into()),
        Ok(Ok(Err(e))) => Err(Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())),
        Err(_) => Err(Refusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "media_busy",
            "the media thread did not answer the restart in time; try again",
        )),
    }
}

/// 410 `participant_left` when participant `id` of `room` left lately (told
/// to whoever may see the room, as its `left` event was): when, and why, so
/// that a client that applied its answer too late, or whose token expired,
/// learns it rather than a bare 404. Only for the leaves nobody asked for
/// (its media timed out or failed, its token expired); one that left, was
/// removed or replaced is the 404 it always was.
fn gone(api: &ApiState, grant: &Grant, room: &str, id: u64) -> Refused<()> {
    use crate::room::LeaveReason::{Failed, TimedOut, TokenExpired};
    if may_see(grant, room).is_err() {
        return Ok(());
    }
    let Some(d) = api.rooms.departed(room, id).filter(|d| matches!(d.reason, TimedOut | Failed | TokenExpired)) else {
        return Ok(());
    };
    let ago = d.at.elapsed().as_secs();
    Err(Refusal::new(
        StatusCode::GONE,
        "participant_left",
        format!("participant {id} left room '{room}' {ago} s ago ({}): {}", d.reason.as_str(), d.reason.explain()),
    ))
}
