//! Whisper channels (see `room::whisper`), every route for an admin of the room:
//!
//! - `POST /v1/rooms/{room}/whispers`: `{"speakers": [3], "listeners": [7]}`
//!   opens a channel: participant 3 is heard by 7 only; 7 hears the room
//!   plus 3; 3 hears the room.
//! - `GET /v1/rooms/{room}/whispers`: the open channels.
//! - `PATCH /v1/rooms/{room}/whispers/{id}`: new `speakers` and/or `listeners`.
//! - `DELETE /v1/rooms/{room}/whispers/{id}`: closes it (its speakers are
//!   heard by the room again).
//!
//! Bounded by `whisper.max_channels` per room (429 `too_many_whispers`) and
//! `whisper.max_members` per channel (400 `too_many_members`). A participant
//! who is not in the room (it left) is 404 `participant_not_found`; one in
//! another channel 409 `participant_in_whisper`.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::recording::{RoomRequest, may_manage};
use super::schema::ErrorBody;
use super::state::ApiState;
use crate::refusal::{Refusal, Refused};
use crate::room::whisper::{WhisperError, WhisperLimits};

/// The routes.
pub(super) fn routes() -> Router<Arc<ApiState>> {
    Router::new()
        .route("/v1/rooms/{room}/whispers", get(list).post(open))
        .route("/v1/rooms/{room}/whispers/{id}", patch(change).delete(close))
}

impl From<WhisperError> for Refusal {
    fn from(e: WhisperError) -> Self {
        let (status, code) = match &e {
            WhisperError::NoParticipant(_) => (StatusCode::NOT_FOUND, "participant_not_found"),
            WhisperError::InChannel { .. } => (StatusCode::CONFLICT, "participant_in_whisper"),
            WhisperError::TooMany(_) => (StatusCode::TOO_MANY_REQUESTS, "too_many_whispers"),
            WhisperError::TooManyMembers(_) => (StatusCode::BAD_REQUEST, "too_many_members"),
            WhisperError::NotFound(_) => (StatusCode::NOT_FOUND, "whisper_not_found"),
            WhisperError::Bad(_) => (StatusCode::BAD_REQUEST, "bad_value"),
            WhisperError::Closed => (StatusCode::NOT_FOUND, "room_not_found"),
        };
        Refusal::new(status, code, e.to_string())
    }
}

/// `POST …/whispers`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct OpenWhisper {
    /// Participant ids heard by the channel's members only (at least one).
    speakers: Vec<u64>,
    /// Participant ids that hear the room plus the channel (at least one).
    listeners: Vec<u64>,
}

/// `PATCH …/whispers/{id}`: a list left out is kept.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ChangeWhisper {
    speakers: Option<Vec<u64>>,
    listeners: Option<Vec<u64>>,
}

/// A whisper channel.
#[derive(Serialize, ToSchema)]
pub(super) struct Whisper {
    id: u64,
    /// Who whispers: heard by the channel's members only.
    speakers: Vec<u64>,
    /// Who hears the room plus the channel.
    listeners: Vec<u64>,
}

/// The open channels.
#[derive(Serialize, ToSchema)]
pub(super) struct Whispers {
    whispers: Vec<Whisper>,
}

fn limits(api: &ApiState) -> WhisperLimits {
    WhisperLimits { max_channels: api.cfg.whisper.max_channels, max_members: api.cfg.whisper.max_members }
}

/// Opens a whisper channel (admin of the room).
#[utoipa::path(
    post,
    path = "/v1/rooms/{room}/whispers",
    tag = "rooms",
    operation_id = "open_whisper",
    params(("room" = String, Path, description = "The room's id"), super::access::Access),
    request_body = OpenWhisper,
    responses(
        (status = 201, description = "Open from the next tick", body = Whisper),
        (status = 400, description = "`bad_json`, `bad_value` (no speaker, no listener, a participant named twice), `too_many_members`", body = ErrorBody),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden`", body = ErrorBody),
        (status = 404, description = "`room_not_found`, `participant_not_found` (not in the room: it left)", body = ErrorBody),
        (status = 307, description = "Cluster mode: the room is on another node; follow `Location`"),
        (status = 409, description = "`participant_in_whisper`: in another channel already", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 429, description = "`too_many_whispers` (`whisper.max_channels`)", body = ErrorBody),
    ),
)]
pub(super) async fn open(State(api): State<Arc<ApiState>>, req: RoomRequest, body: Bytes) -> Refused<Response> {
    let room = match req.room(&api, |g, room| may_manage(g, room, "opening a whisper channel")).await? {
        Ok(room) => room,
        Err(elsewhere) => return Ok(elsewhere),
    };
    let r: OpenWhisper = super::body::json(&req.headers, &body, None)?;
    let info = room.open_whisper(r.speakers, r.listeners, limits(&api))?;
    Ok((StatusCode::CREATED, axum::Json(info)).into_response())
}

/// The room's open whisper channels (admin of the room).
#[utoipa::path(
    get,
    path = "/v1/rooms/{room}/whispers",
    tag = "rooms",
    operation_id = "list_whispers",
    params(("room" = String, Path, description = "The room's id"), super::access::Access),
    responses(
        (status = 200, description = "The open channels", body = Whispers),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden`", body = ErrorBody),
        (status = 404, description = "`room_not_found`", body = ErrorBody),
        (status = 307, description = "Cluster mode: the room is on another node; follow `Location`"),
    ),
)]
pub(super) async fn list(State(api): State<Arc<ApiState>>, req: RoomRequest) -> Refused<Response> {
    let room = match req.room(&api, |g, room| may_manage(g, room, "looking at a room's whisper channels")).await? {
        Ok(room) => room,
        Err(elsewhere) => return Ok(elsewhere),
    };
    Ok(axum::Json(serde_json::json!({ "whispers": room.whispers() })).into_response())
}

/// Changes who is in a whisper channel (admin of the room).
#[utoipa::path(
    patch,
    path = "/v1/rooms/{room}/whispers/{id}",
    tag = "rooms",
    operation_id = "change_whisper",
    params(
        ("room" = String, Path, description = "The room's id"),
        ("id" = u64, Path, description = "The channel's id"),
        super::access::Access,
    ),
    request_body = ChangeWhisper,
    responses(
        (status = 200, description = "Changed from the next tick", body = Whisper),
        (status = 400, description = "`bad_json`, `bad_value`, `too_many_members`", body = ErrorBody),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden`", body = ErrorBody),
        (status = 404, description = "`room_not_found`, `whisper_not_found`, `participant_not_found`", body = ErrorBody),
        (status = 307, description = "Cluster mode: the room is on another node; follow `Location`"),
        (status = 409, description = "`participant_in_whisper`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
    ),
)]
pub(super) async fn change(State(api): State<Arc<ApiState>>, req: RoomRequest, body: Bytes) -> Refused<Response> {
    let room = match req.room(&api, |g, room| may_manage(g, room, "changing a whisper channel")).await? {
        Ok(room) => room,
        Err(elsewhere) => return Ok(elsewhere),
    };
    let id = req.id("a whisper channel id")?;
    let r: ChangeWhisper = super::body::json(&req.headers, &body, None)?;
    let info = room.change_whisper(id, r.speakers, r.listeners, limits(&api))?;
    Ok(axum::Json(info).into_response())
}

/// Closes a whisper channel: its speakers are heard by the room again (admin of the room).
#[utoipa::path(
    delete,
    path = "/v1/rooms/{room}/whispers/{id}",
    tag = "rooms",
    operation_id = "close_whisper",
    params(
        ("room" = String, Path, description = "The room's id"),
        ("id" = u64, Path, description = "The channel's id"),
        super::access::Access,
    ),
    responses(
        (status = 200, description = "Closed: what it was", body = Whisper),
        (status = 400, description = "`bad_value` (not a channel id)", body = ErrorBody),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden`", body = ErrorBody),
        (status = 404, description = "`room_not_found`, `whisper_not_found`", body = ErrorBody),
        (status = 307, description = "Cluster mode: the room is on another node; follow `Location`"),
    ),
)]
pub(super) async fn close(State(api): State<Arc<ApiState>>, req: RoomRequest) -> Refused<Response> {
    let room = match req.room(&api, |g, room| may_manage(g, room, "closing a whisper channel")).await? {
        Ok(room) => room,
        Err(elsewhere) => return Ok(elsewhere),
    };
    let id = req.id("a whisper channel id")?;
    let info = room.close_whisper(id)?;
    Ok(axum::Json(info).into_response())
}
