//! The REST API: rooms, joining with an SDP offer (WHIP-style or JSON),
//! leaving, muting; errors as JSON with a stable code.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use tutti_mix::{ParticipantId, Room, RoomConfig, SpeakerLimit};
use tutti_rtc::{PeerId, RtcError};

use crate::engine::{RoomEntry, Shared};

/// An API error: a status, a stable machine-readable code and a sentence.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into() }
    }

    fn no_room(room: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, "room_not_found", format!("there is no room '{room}'"))
    }

    fn no_participant(id: u64) -> Self {
        Self::new(StatusCode::NOT_FOUND, "participant_not_found", format!("there is no participant {id} in this room"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "code": self.code, "message": self.message });
        (self.status, axum::Json(body)).into_response()
    }
}

type ApiResult<T> = Result<T, ApiError>;

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
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_json", format!("the JSON body is not valid: {e}")))
}

fn valid_room_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateRoom {
    id: Option<String>,
    max_participants: Option<usize>,
    max_speakers: Option<usize>,
}

#[derive(Debug, Serialize)]
struct RoomSummary {
    id: String,
    participants: usize,
    max_participants: usize,
    max_speakers: Option<usize>,
}

fn summary(id: &str, room: &Room) -> RoomSummary {
    let cfg = room.config();
    let max_speakers = match cfg.max_speakers {
        SpeakerLimit::Top(k) => Some(k),
        SpeakerLimit::All => None,
    };
    RoomSummary { id: id.to_owned(), participants: room.len(), max_participants: cfg.max_participants, max_speakers }
}

async fn create_room(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let req: CreateRoom = json(&headers, &body(raw)?, Some(CreateRoom::default()))?;
    let id = match req.id {
        Some(id) if valid_room_id(&id) => id,
        Some(_) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_room_id",
                "a room id is 1 to 64 letters, digits, '-' or '_'",
            ));
        }
        None => format!("room-{}", shared.next_room.fetch_add(1, Ordering::Relaxed)),
    };
    let mut cfg = shared.room_defaults.clone();
    if let Some(n) = req.max_participants {
        cfg.max_participants = n;
    }
    if let Some(k) = req.max_speakers {
        cfg.max_speakers = SpeakerLimit::Top(k);
    }
    let room = Room::new(cfg).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_room_config", e.to_string()))?;
    let mut engine = shared.engine();
    if engine.rooms.contains_key(&id) {
        return Err(ApiError::new(StatusCode::CONFLICT, "room_exists", format!("room '{id}' already exists")));
    }
    let s = summary(&id, &room);
    engine.rooms.insert(id.clone(), RoomEntry { room, names: BTreeMap::new() });
    tracing::info!(room = %id, "room created");
    Ok((StatusCode::CREATED, [(header::LOCATION, format!("/v1/rooms/{id}"))], axum::Json(s)).into_response())
}

async fn list_rooms(State(shared): State<Arc<Shared>>) -> axum::Json<Vec<RoomSummary>> {
    let engine = shared.engine();
    axum::Json(engine.rooms.iter().map(|(id, e)| summary(id, &e.room)).collect())
}

#[derive(Debug, Serialize)]
struct ParticipantView {
    id: u64,
    name: String,
    talking: bool,
}

async fn get_room(State(shared): State<Arc<Shared>>, Path(room): Path<String>) -> ApiResult<Response> {
    let engine = shared.engine();
    let entry = engine.rooms.get(&room).ok_or_else(|| ApiError::no_room(&room))?;
    let participants: Vec<ParticipantView> = entry
        .names
        .iter()
        .map(|(id, name)| ParticipantView {
            id: id.0,
            name: name.clone(),
            talking: entry.room.is_talking(*id).unwrap_or(false),
        })
        .collect();
    let speakers: Vec<u64> = entry.room.speakers().map(|id| id.0).collect();
    let body =
        serde_json::json!({ "room": summary(&room, &entry.room), "participants": participants, "speakers": speakers });
    Ok(axum::Json(body).into_response())
}

async fn delete_room(State(shared): State<Arc<Shared>>, Path(room): Path<String>) -> ApiResult<StatusCode> {
    let out = {
        let mut engine = shared.engine();
        let entry = engine.rooms.remove(&room).ok_or_else(|| ApiError::no_room(&room))?;
        for id in entry.names.keys() {
            engine.peer_room.remove(&PeerId(id.0));
            let _ = engine.mux.remove(PeerId(id.0));
        }
        engine.take_transmits()
    };
    shared.send(out);
    tracing::info!(%room, "room deleted");
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JoinRequest {
    sdp: String,
    #[serde(default)]
    name: String,
}

#[derive(Debug, Serialize)]
struct JoinResponse {
    id: u64,
    sdp: String,
}

async fn join(
    State(shared): State<Arc<Shared>>,
    Path(room): Path<String>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let bytes = body(raw)?;
    let whip = content_type(&headers).eq_ignore_ascii_case("application/sdp");
    let req = if whip {
        let sdp = String::from_utf8(bytes.to_vec())
            .map_err(|_| ApiError::new(StatusCode::BAD_REQUEST, "bad_sdp", "the SDP offer is not UTF-8"))?;
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
    if shared.stopping.load(Ordering::Relaxed) {
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", "the server is shutting down"));
    }
    let (peer, answer) = {
        let mut engine = shared.engine();
        let entry = engine.rooms.get(&room).ok_or_else(|| ApiError::no_room(&room))?;
        let max = entry.room.config().max_participants;
        if entry.room.len() >= max {
            return Err(ApiError::new(StatusCode::CONFLICT, "room_full", format!("room '{room}' is full ({max})")));
        }
        let (peer, answer) = engine.mux.accept_offer(&req.sdp, Instant::now()).map_err(|e| match e {
            RtcError::BadSdp(_) | RtcError::NoAudio => ApiError::new(StatusCode::BAD_REQUEST, "bad_sdp", e.to_string()),
            e => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()),
        })?;
        let id = ParticipantId(peer.0);
        let name = if req.name.is_empty() { format!("participant-{}", peer.0) } else { req.name };
        let entry = engine.rooms.get_mut(&room).ok_or_else(|| ApiError::no_room(&room))?;
        if let Err(e) = entry.room.add_participant(id) {
            let _ = engine.mux.remove(peer);
            return Err(ApiError::new(StatusCode::CONFLICT, "room_full", e.to_string()));
        }
        entry.names.insert(id, name);
        engine.peer_room.insert(peer, room.clone());
        (peer, answer)
    };
    tracing::info!(%room, %peer, "participant joined");
    let location = format!("/v1/rooms/{room}/participants/{}", peer.0);
    if whip {
        let mut response = (StatusCode::CREATED, answer).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/sdp"));
        if let Ok(v) = HeaderValue::from_str(&location) {
            headers.insert(header::LOCATION, v);
        }
        Ok(response)
    } else {
        let body = axum::Json(JoinResponse { id: peer.0, sdp: answer });
        Ok((StatusCode::CREATED, [(header::LOCATION, location)], body).into_response())
    }
}

/// Looks up a participant of a room, as the peer that carries it.
fn peer_in(engine: &crate::engine::Engine, room: &str, id: u64) -> ApiResult<PeerId> {
    let entry = engine.rooms.get(room).ok_or_else(|| ApiError::no_room(room))?;
    if !entry.names.contains_key(&ParticipantId(id)) {
        return Err(ApiError::no_participant(id));
    }
    Ok(PeerId(id))
}

async fn leave(State(shared): State<Arc<Shared>>, Path((room, id)): Path<(String, u64)>) -> ApiResult<StatusCode> {
    let out = {
        let mut engine = shared.engine();
        let peer = peer_in(&engine, &room, id)?;
        engine.remove_peer(peer);
        engine.take_transmits()
    };
    shared.send(out);
    tracing::info!(%room, participant = id, "participant left");
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateParticipant {
    muted: Option<bool>,
    gain: Option<f32>,
}

async fn update_participant(
    State(shared): State<Arc<Shared>>,
    Path((room, id)): Path<(String, u64)>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let req: UpdateParticipant = json(&headers, &body(raw)?, None)?;
    let mut engine = shared.engine();
    peer_in(&engine, &room, id)?;
    let entry = engine.rooms.get_mut(&room).ok_or_else(|| ApiError::no_room(&room))?;
    let pid = ParticipantId(id);
    let bad = |e: tutti_mix::MixError| ApiError::new(StatusCode::BAD_REQUEST, "bad_value", e.to_string());
    if let Some(gain) = req.gain {
        entry.room.set_gain(pid, gain).map_err(bad)?;
    }
    if let Some(muted) = req.muted {
        entry.room.set_muted(pid, muted).map_err(bad)?;
    }
    Ok(axum::Json(serde_json::json!({ "id": id, "muted": req.muted, "gain": req.gain })).into_response())
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(shared): State<Arc<Shared>>) -> ApiResult<&'static str> {
    if shared.stopping.load(Ordering::Relaxed) {
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", "the server is shutting down"));
    }
    Ok("ready")
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
}

/// The API's routes.
pub(crate) fn router(shared: Arc<Shared>, max_body_bytes: usize) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/v1/rooms", post(create_room).get(list_rooms))
        .route("/v1/rooms/{room}", get(get_room).delete(delete_room))
        .route("/v1/rooms/{room}/participants", post(join))
        .route("/v1/rooms/{room}/participants/{id}", axum::routing::delete(leave).patch(update_participant))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(axum::middleware::from_fn(crate::metrics::track_api))
        .with_state(shared)
}

/// The room settings a new room starts from.
pub(crate) fn default_room_config(max_participants: usize, max_speakers: usize) -> RoomConfig {
    RoomConfig { max_participants, max_speakers: SpeakerLimit::Top(max_speakers), ..RoomConfig::default() }
}
