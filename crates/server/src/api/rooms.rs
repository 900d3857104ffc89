//! The REST routes on rooms and participants.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::error::{ApiError, ApiResult};
use super::{ApiState, authenticate, join_room, may_join, may_see};
use crate::auth::Grant;
use crate::room::{LeaveReason, Room, RoomError};
use crate::sync::lock;

/// The body, or the JSON error for why it could not be read (413 when too large).
fn body(body: Result<Bytes, BytesRejection>) -> ApiResult<Bytes> {
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
fn json<T: serde::de::DeserializeOwned>(headers: &HeaderMap, bytes: &Bytes, empty: Option<T>) -> ApiResult<T> {
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
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateRoom {
    id: Option<String>,
    max_participants: Option<usize>,
    max_speakers: Option<usize>,
}

#[derive(Debug, Serialize)]
struct RoomSummary {
    id: String,
    participants: usize,
    max_participants: usize,
    max_speakers: usize,
}

fn summary(room: &Room) -> RoomSummary {
    RoomSummary {
        id: room.id.clone(),
        participants: room.len(),
        max_participants: room.max_participants,
        max_speakers: room.max_speakers,
    }
}

pub(crate) async fn create_room(
    State(api): State<Arc<ApiState>>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let grant = authenticate(&api, &headers, None)?;
    if !grant.admin {
        return Err(ApiError::forbidden("creating a room needs a token with the 'admin' permission"));
    }
    let req: CreateRoom = json(&headers, &body(raw)?, Some(CreateRoom::default()))?;
    let id = match req.id {
        Some(id) if !grant.covers(&id) => {
            return Err(ApiError::forbidden(format!("this token is not for room '{id}'")));
        }
        Some(id) => id,
        // A room admin's token names its room.
        None if grant.room != "*" => grant.room.clone(),
        None => api.rooms.fresh_name(),
    };
    let room = api.rooms.create(&id, req.max_participants, req.max_speakers)?;
    Ok((StatusCode::CREATED, [(header::LOCATION, format!("/v1/rooms/{id}"))], axum::Json(summary(&room)))
        .into_response())
}

pub(crate) async fn list_rooms(State(api): State<Arc<ApiState>>, headers: HeaderMap) -> ApiResult<Response> {
    let grant = authenticate(&api, &headers, None)?;
    if !grant.may_list() {
        return Err(ApiError::forbidden("listing rooms needs an admin token for every room ('*')"));
    }
    Ok(axum::Json(api.rooms.all().iter().map(|r| summary(r)).collect::<Vec<_>>()).into_response())
}

pub(crate) async fn get_room(
    State(api): State<Arc<ApiState>>,
    Path(room): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    may_see(&authenticate(&api, &headers, None)?, &room)?;
    let room = api.rooms.get(&room)?;
    let body = serde_json::json!({
        "room": summary(&room),
        "participants": room.member_list(),
        "speakers": room.speaker_ids(),
    });
    Ok(axum::Json(body).into_response())
}

pub(crate) async fn delete_room(
    State(api): State<Arc<ApiState>>,
    Path(room): Path<String>,
    headers: HeaderMap,
) -> ApiResult<StatusCode> {
    if !authenticate(&api, &headers, None)?.may_manage(&room) {
        return Err(ApiError::forbidden(format!("deleting room '{room}' needs an admin token for it")));
    }
    api.apply(api.rooms.delete(&room)?);
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/rooms/{room}/participants` as JSON.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JoinRequest {
    sdp: String,
    #[serde(default)]
    name: String,
}

#[derive(Debug, Serialize)]
struct JoinResponse {
    id: u64,
    sdp: String,
}

pub(crate) async fn join(
    State(api): State<Arc<ApiState>>,
    Path(room): Path<String>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let grant = authenticate(&api, &headers, None)?;
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
    let state = api.rooms.get(&room)?;
    let (id, answer) = join_room(&api, &state, &req.sdp, &req.name, &grant)?;
    let location = format!("/v1/rooms/{room}/participants/{id}");
    if whip {
        let mut response = (StatusCode::CREATED, answer).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/sdp"));
        if let Ok(v) = HeaderValue::from_str(&location) {
            headers.insert(header::LOCATION, v);
        }
        Ok(response)
    } else {
        let body = axum::Json(JoinResponse { id, sdp: answer });
        Ok((StatusCode::CREATED, [(header::LOCATION, location)], body).into_response())
    }
}

/// A room and one of its participants, or the 404 for whichever is missing.
fn member_of(api: &ApiState, room: &str, id: u64) -> ApiResult<Arc<Room>> {
    let state = api.rooms.get(room)?;
    if !lock(&state.members).contains_key(&id) {
        return Err(RoomError::NoParticipant(id).into());
    }
    Ok(state)
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

pub(crate) async fn leave(
    State(api): State<Arc<ApiState>>,
    Path((room, id)): Path<(String, u64)>,
    headers: HeaderMap,
) -> ApiResult<StatusCode> {
    let grant = authenticate(&api, &headers, None)?;
    may_see(&grant, &room)?;
    let state = member_of(&api, &room, id)?;
    may_act_on(&grant, &state, id)?;
    api.apply(api.rooms.leave(&state, id, LeaveReason::Left)?);
    Ok(StatusCode::NO_CONTENT)
}

/// `PATCH /v1/rooms/{room}/participants/{id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateParticipant {
    muted: Option<bool>,
    gain: Option<f32>,
}

pub(crate) async fn update_participant(
    State(api): State<Arc<ApiState>>,
    Path((room, id)): Path<(String, u64)>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let grant = authenticate(&api, &headers, None)?;
    may_see(&grant, &room)?;
    let req: UpdateParticipant = json(&headers, &body(raw)?, None)?;
    let state = member_of(&api, &room, id)?;
    let admin = may_act_on(&grant, &state, id)?;
    if req.gain.is_some() && !admin {
        return Err(ApiError::forbidden("changing a participant's gain needs an admin token"));
    }
    if let Some(gain) = req.gain {
        api.rooms.set_gain(&state, id, gain)?;
    }
    if let Some(muted) = req.muted {
        api.rooms.set_muted(&state, id, muted)?;
    }
    let member = lock(&state.members).get(&id).cloned().ok_or(RoomError::NoParticipant(id))?;
    Ok(axum::Json(serde_json::json!({ "id": id, "muted": member.muted, "gain": req.gain })).into_response())
}
