//! The REST API: rooms, joining with an SDP offer (WHIP-style or JSON),
//! leaving, muting; errors as JSON with a stable code.
//!
//! Every route but `/healthz` and `/readyz` takes an access token
//! ([`crate::auth`]). The checks run in a fixed order, so that a caller
//! learns nothing about a room it may not see: 401 (no valid token), 403
//! (not for this room, or lacking the permission), 429 (join rate), and
//! only then 404, 409, 400.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use tutti_mix::{MAX_GAIN, ParticipantId, Room, RoomConfig, SpeakerLimit};
use tutti_rtc::RtcError;

use crate::auth::{AuthError, Grant, unix_now};
use crate::state::{LeaveReason, RoomEvent, RoomState, Shared, lock};

/// An API error: a status, a stable machine-readable code and a sentence.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
    /// `WWW-Authenticate` (RFC 6750 §3), for 401 and 403.
    challenge: Option<&'static str>,
    /// `Retry-After`, in seconds, for 429.
    retry_after: Option<u64>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), challenge: None, retry_after: None }
    }

    /// 401: no valid token.
    pub(crate) fn unauthorized(e: &AuthError) -> Self {
        let challenge = match e {
            AuthError::Missing => r#"Bearer realm="tutti""#,
            _ => r#"Bearer realm="tutti", error="invalid_token""#,
        };
        Self { challenge: Some(challenge), ..Self::new(StatusCode::UNAUTHORIZED, "unauthorized", e.to_string()) }
    }

    /// 403: a valid token that does not allow this.
    pub(crate) fn forbidden(message: impl Into<String>) -> Self {
        Self {
            challenge: Some(r#"Bearer realm="tutti", error="insufficient_scope""#),
            ..Self::new(StatusCode::FORBIDDEN, "forbidden", message)
        }
    }

    /// 429: too many joins from this address.
    pub(crate) fn rate_limited(retry: Duration) -> Self {
        let secs = retry.as_secs_f64().ceil().max(1.0) as u64;
        Self {
            retry_after: Some(secs),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!("too many joins from this address; retry in {secs} s"),
            )
        }
    }

    pub(crate) fn no_room(room: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, "room_not_found", format!("there is no room '{room}'"))
    }

    fn no_participant(id: u64) -> Self {
        Self::new(StatusCode::NOT_FOUND, "participant_not_found", format!("there is no participant {id} in this room"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "code": self.code, "message": self.message });
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(challenge) = self.challenge {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
        }
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// The token of `Authorization: Bearer <token>`; `Some("")` for another
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
pub(crate) fn authenticate(shared: &Shared, headers: &HeaderMap, query_token: Option<&str>) -> ApiResult<Grant> {
    let Some(auth) = &shared.auth else { return Ok(Grant::admin("")) };
    let token = bearer(headers).or(query_token).unwrap_or("");
    auth.verify(token, unix_now()).map_err(|e| ApiError::unauthorized(&e))
}

/// 403 unless the grant may see `room` (without saying whether it exists).
pub(crate) fn may_see(grant: &Grant, room: &str) -> ApiResult<()> {
    if grant.may_see(room) { Ok(()) } else { Err(ApiError::forbidden(format!("this token is not for room '{room}'"))) }
}

/// 403 unless the grant may join `room`; 429 if `ip` joins too often.
pub(crate) fn may_join(shared: &Shared, grant: &Grant, room: &str, ip: IpAddr) -> ApiResult<()> {
    may_see(grant, room)?;
    if !grant.listen {
        return Err(ApiError::forbidden("joining needs a token with the 'listen' permission"));
    }
    shared.joins.check(ip, Instant::now()).map_err(ApiError::rate_limited)
}

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

pub(crate) fn valid_room_id(id: &str) -> bool {
    crate::auth::is_room_id(id)
}

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

fn summary(room: &RoomState) -> RoomSummary {
    RoomSummary {
        id: room.id.clone(),
        participants: lock(&room.members).len(),
        max_participants: room.max_participants,
        max_speakers: room.max_speakers,
    }
}

async fn create_room(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let grant = authenticate(&shared, &headers, None)?;
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
        None => format!("room-{}", shared.next_room.fetch_add(1, Ordering::Relaxed)),
    };
    if !valid_room_id(&id) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_room_id",
            "a room id is 1 to 64 letters, digits, '-' or '_'",
        ));
    }
    let mut cfg = shared.room_defaults.clone();
    if let Some(n) = req.max_participants {
        cfg.max_participants = n;
    }
    if let Some(k) = req.max_speakers {
        cfg.max_speakers = SpeakerLimit::Top(k);
    }
    let max_speakers = match cfg.max_speakers {
        SpeakerLimit::Top(k) => k,
        SpeakerLimit::All => usize::MAX,
    };
    let room = Room::new(cfg).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_room_config", e.to_string()))?;
    let state = Arc::new(RoomState::new(id.clone(), room, max_speakers));
    {
        let mut rooms = shared.rooms.write().unwrap_or_else(|p| p.into_inner());
        if rooms.contains_key(&id) {
            return Err(ApiError::new(StatusCode::CONFLICT, "room_exists", format!("room '{id}' already exists")));
        }
        if rooms.len() >= shared.cfg.max_rooms {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_full",
                format!("the server holds its maximum of {} rooms", shared.cfg.max_rooms),
            ));
        }
        rooms.insert(id.clone(), state.clone());
    }
    tracing::info!(room = %id, "room created");
    Ok((StatusCode::CREATED, [(header::LOCATION, format!("/v1/rooms/{id}"))], axum::Json(summary(&state)))
        .into_response())
}

async fn list_rooms(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> ApiResult<Response> {
    let grant = authenticate(&shared, &headers, None)?;
    if !grant.may_list() {
        return Err(ApiError::forbidden("listing rooms needs an admin token for every room ('*')"));
    }
    Ok(axum::Json(shared.all_rooms().iter().map(|r| summary(r)).collect::<Vec<_>>()).into_response())
}

async fn get_room(
    State(shared): State<Arc<Shared>>,
    Path(room): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    may_see(&authenticate(&shared, &headers, None)?, &room)?;
    let state = shared.room(&room).ok_or_else(|| ApiError::no_room(&room))?;
    let speakers: Vec<u64> = lock(&state.speakers).iter().map(|s| s.id.0).collect();
    let body = serde_json::json!({
        "room": summary(&state),
        "participants": state.member_list(),
        "speakers": speakers,
    });
    Ok(axum::Json(body).into_response())
}

async fn delete_room(
    State(shared): State<Arc<Shared>>,
    Path(room): Path<String>,
    headers: HeaderMap,
) -> ApiResult<StatusCode> {
    if !authenticate(&shared, &headers, None)?.may_manage(&room) {
        return Err(ApiError::forbidden(format!("deleting room '{room}' needs an admin token for it")));
    }
    let state = shared
        .rooms
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&room)
        .ok_or_else(|| ApiError::no_room(&room))?;
    shared.close_room(&state, LeaveReason::RoomClosed);
    tracing::info!(%room, "room deleted");
    Ok(StatusCode::NO_CONTENT)
}

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

/// Longest participant name kept, in bytes.
const MAX_NAME_BYTES: usize = 64;

/// Joins `room` with an SDP offer: checks, answers, admits, as `grant`
/// allows (checked by [`may_join`]): without `speak`, the participant is
/// muted for good. Shared by the REST join and the WebSocket `join` message.
pub(crate) fn join_room(
    shared: &Shared,
    room: &str,
    sdp: &str,
    name: &str,
    grant: &Grant,
) -> ApiResult<(Arc<RoomState>, u64, String)> {
    if shared.stopping.load(Ordering::Relaxed) {
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", "the server is shutting down"));
    }
    let state = shared.room(room).ok_or_else(|| ApiError::no_room(room))?;
    let room_full = || {
        ApiError::new(StatusCode::CONFLICT, "room_full", format!("room '{room}' is full ({})", state.max_participants))
    };
    if lock(&state.members).len() >= state.max_participants {
        return Err(room_full());
    }
    if shared.participants.load(Ordering::Relaxed) >= shared.cfg.max_participants {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_full",
            format!("the server holds its maximum of {} participants", shared.cfg.max_participants),
        ));
    }
    let now = Instant::now();
    let (peer, answer) = shared.acceptor.accept(sdp, now).map_err(|e| match e {
        RtcError::BadSdp(_) | RtcError::NoAudio => ApiError::new(StatusCode::BAD_REQUEST, "bad_sdp", e.to_string()),
        e => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()),
    })?;
    let mut name = clean_name(if name.is_empty() { &grant.identity } else { name });
    if name.is_empty() {
        name = format!("participant-{}", peer.id());
    }
    let listen_only = !grant.speak;
    let id = shared.admit(&state, peer, name, grant.identity.clone(), listen_only, now).map_err(|_| room_full())?;
    tracing::info!(room = %state.id, participant = id, listen_only, "participant joined");
    Ok((state, id, answer))
}

/// A display name: no control characters, at most [`MAX_NAME_BYTES`].
pub(crate) fn clean_name(name: &str) -> String {
    let mut name: String = name.chars().filter(|c| !c.is_control()).collect();
    while name.len() > MAX_NAME_BYTES {
        name.pop();
    }
    name
}

async fn join(
    State(shared): State<Arc<Shared>>,
    Path(room): Path<String>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let grant = authenticate(&shared, &headers, None)?;
    may_join(&shared, &grant, &room, client.ip())?;
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
    let (_, id, answer) = join_room(&shared, &room, &req.sdp, &req.name, &grant)?;
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
fn member_of(shared: &Shared, room: &str, id: u64) -> ApiResult<Arc<RoomState>> {
    let state = shared.room(room).ok_or_else(|| ApiError::no_room(room))?;
    if !lock(&state.members).contains_key(&id) {
        return Err(ApiError::no_participant(id));
    }
    Ok(state)
}

/// 403 unless the grant manages the room or is the participant's own
/// (same identity); returns whether it manages the room.
fn may_act_on(grant: &Grant, state: &RoomState, id: u64) -> ApiResult<bool> {
    if grant.may_manage(&state.id) {
        return Ok(true);
    }
    let own = lock(&state.members).get(&id).is_some_and(|m| !grant.identity.is_empty() && m.identity == grant.identity);
    if own { Ok(false) } else { Err(ApiError::forbidden("acting on another participant needs an admin token")) }
}

async fn leave(
    State(shared): State<Arc<Shared>>,
    Path((room, id)): Path<(String, u64)>,
    headers: HeaderMap,
) -> ApiResult<StatusCode> {
    let grant = authenticate(&shared, &headers, None)?;
    may_see(&grant, &room)?;
    let state = member_of(&shared, &room, id)?;
    may_act_on(&grant, &state, id)?;
    if !shared.remove_participant(&state, id, LeaveReason::Left) {
        return Err(ApiError::no_participant(id));
    }
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateParticipant {
    muted: Option<bool>,
    gain: Option<f32>,
}

/// Mutes or unmutes a participant (and tells the room). A listen-only
/// participant cannot be unmuted, not even by an admin: its token decides.
pub(crate) fn set_muted(state: &RoomState, id: u64, muted: bool) -> ApiResult<()> {
    if !muted && lock(&state.members).get(&id).is_some_and(|m| m.listen_only) {
        return Err(ApiError::forbidden(format!(
            "participant {id} may only listen: its token does not allow speaking"
        )));
    }
    lock(&state.core).room.set_muted(ParticipantId(id), muted).map_err(|_| ApiError::no_participant(id))?;
    let changed = match lock(&state.members).get_mut(&id) {
        Some(m) => std::mem::replace(&mut m.muted, muted) != muted,
        None => return Err(ApiError::no_participant(id)),
    };
    if changed {
        state.publish(RoomEvent::Muted { id, muted });
    }
    Ok(())
}

async fn update_participant(
    State(shared): State<Arc<Shared>>,
    Path((room, id)): Path<(String, u64)>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let grant = authenticate(&shared, &headers, None)?;
    may_see(&grant, &room)?;
    let req: UpdateParticipant = json(&headers, &body(raw)?, None)?;
    let state = member_of(&shared, &room, id)?;
    let admin = may_act_on(&grant, &state, id)?;
    if req.gain.is_some() && !admin {
        return Err(ApiError::forbidden("changing a participant's gain needs an admin token"));
    }
    if let Some(gain) = req.gain {
        if !(gain.is_finite() && (0.0..=MAX_GAIN).contains(&gain)) {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_value",
                format!("gain must be within 0 to {MAX_GAIN}"),
            ));
        }
        lock(&state.core).room.set_gain(ParticipantId(id), gain).map_err(|_| ApiError::no_participant(id))?;
    }
    if let Some(muted) = req.muted {
        set_muted(&state, id, muted)?;
    }
    let member = lock(&state.members).get(&id).cloned().ok_or_else(|| ApiError::no_participant(id))?;
    Ok(axum::Json(serde_json::json!({ "id": id, "muted": member.muted, "gain": req.gain })).into_response())
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

/// 408 for a request (body included) that takes longer than the limit.
async fn request_timeout(
    State(limit): State<Duration>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            let message = format!("the request took longer than {} s", limit.as_secs_f64());
            let mut response = ApiError::new(StatusCode::REQUEST_TIMEOUT, "request_timeout", message).into_response();
            response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            response
        }
    }
}

/// The API's routes.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let max_body_bytes = shared.cfg.max_body_bytes;
    let timeout = Duration::from_secs_f64(shared.cfg.limits.http_request_timeout_seconds);
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/v1/rooms", post(create_room).get(list_rooms))
        .route("/v1/rooms/{room}", get(get_room).delete(delete_room))
        .route("/v1/rooms/{room}/participants", post(join))
        .route("/v1/rooms/{room}/participants/{id}", axum::routing::delete(leave).patch(update_participant))
        .route("/v1/rooms/{room}/ws", get(crate::ws::upgrade))
        .merge(crate::web::routes())
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(timeout, request_timeout))
        .layer(axum::middleware::from_fn(crate::metrics::track_api))
        .with_state(shared)
}

/// The room settings a new room starts from.
pub(crate) fn default_room_config(max_participants: usize, max_speakers: usize) -> RoomConfig {
    RoomConfig { max_participants, max_speakers: SpeakerLimit::Top(max_speakers), ..RoomConfig::default() }
}
