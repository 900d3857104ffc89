//! `POST`/`GET`/`DELETE /v1/rooms/{room}/recording`: recording a room's
//! listener stream to an Ogg/Opus file (see [`crate::outputs`]).
//!
//! Starting and stopping need an admin token for the room; looking, one
//! that may see it. What they answer names the file, never the server's
//! directory. With `recording.dir_max_bytes`, a start when the directory
//! holds that much already is refused: 507 `recording_quota` (counted in
//! `tutti_recording_quota_refusals_total`); a recording that reaches it
//! stops with reason `quota`. In cluster mode a node that does not hold the room
//! answers with a `307` to the one that does (see `cluster`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;

use super::access::{self as cluster, Access};
use super::schema::{ErrorBody, shapes};
use super::state::ApiState;
use crate::auth::Grant;
use crate::cluster::control::{self, Control};
use crate::outputs::{OutputError, PerSpeaker};
use crate::refusal::{Refusal, Refused};
use crate::room::Room;
use crate::session::grants::may_see;

/// How long `DELETE` waits for the writer to close the file before answering with what it knows.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// The routes.
pub(super) fn routes() -> Router<Arc<ApiState>> {
    Router::new().route("/v1/rooms/{room}/recording", post(start).get(show).delete(stop))
}

/// The JSON error for an output failure, with its stable code.
pub(super) fn output_error(e: OutputError) -> Refusal {
    let (status, code) = match &e {
        OutputError::RecordingDisabled => (StatusCode::FORBIDDEN, "recording_disabled"),
        OutputError::RecordingActive(_) => (StatusCode::CONFLICT, "recording_active"),
        OutputError::RecordingNotFound(_) => (StatusCode::NOT_FOUND, "recording_not_found"),
        OutputError::RtpOutDisabled => (StatusCode::FORBIDDEN, "rtp_out_disabled"),
        OutputError::RtpOutForbidden(_) => (StatusCode::FORBIDDEN, "rtp_out_forbidden"),
        OutputError::RtpOutActive(_) => (StatusCode::CONFLICT, "rtp_out_active"),
        OutputError::RtpOutNotFound(_) => (StatusCode::NOT_FOUND, "rtp_out_not_found"),
        OutputError::BadValue(_) => (StatusCode::BAD_REQUEST, "bad_value"),
        OutputError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    };
    Refusal::new(status, code, e.to_string())
}

/// 403 unless `grant` manages `room`.
pub(super) fn may_manage(grant: &Grant, room: &str, what: &str) -> Refused<()> {
    may_see(grant, room)?;
    if grant.may_manage(room) {
        Ok(())
    } else {
        Err(Refusal::forbidden(format!("{what} needs an admin token for room '{room}'")))
    }
}

/// What a route about a room's outputs reads of its request: the room in
/// the path, the headers (the token), the path and query as sent (for a
/// `307`), and a redirect ticket standing in for the token.
pub(super) struct RoomRequest {
    room: String,
    /// The path's `{id}`, on routes that name one (a playback, a whisper channel).
    id: Option<String>,
    pub(super) headers: HeaderMap,
    target: cluster::Target,
    ticket: Option<String>,
}

impl FromRequestParts<Arc<ApiState>> for RoomRequest {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<ApiState>) -> Result<Self, Refusal> {
        // The room, whatever else the path names (a playback's id).
        let Path(params) = Path::<std::collections::HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|e| Refusal::bad_request("bad_value", e.body_text()))?;
        let room = params.get("room").cloned().unwrap_or_default();
        let id = params.get("id").cloned();
        let access = cluster::access(Query::<Access>::from_request_parts(parts, state).await);
        let target = cluster::Target { method: parts.method.clone(), uri: parts.uri.clone() };
        Ok(Self { room, id, headers: parts.headers.clone(), target, ticket: access.ticket })
    }
}

impl RoomRequest {
    /// The caller's grant (token or ticket), checked by `allowed`; then the
    /// room if it is here, or the `307` to the node holding it.
    pub(super) async fn room(
        &self,
        api: &ApiState,
        allowed: impl FnOnce(&Grant, &str) -> Refused<()>,
    ) -> Refused<Result<Arc<Room>, Response>> {
        Ok(self.room_until(api, allowed).await?.map(|(room, _, _)| room))
    }

    /// As [`RoomRequest::room`], with the caller's grant and its expiry
    /// (Unix seconds; `None` when auth is disabled), for a socket that must
    /// end with its access.
    pub(super) async fn room_until(
        &self,
        api: &ApiState,
        allowed: impl FnOnce(&Grant, &str) -> Refused<()>,
    ) -> Refused<Result<(Arc<Room>, Grant, Option<u64>), Response>> {
        let (grant, exp) =
            cluster::caller_until(api, &self.headers, &self.target, self.ticket.as_deref(), &self.room).await?;
        allowed(&grant, &self.room)?;
        Ok(cluster::here(api, &self.room, &self.target, &grant).await?.map(|room| (room, grant, exp)))
    }

    /// The path's `{id}` as a number; `400 bad_value` ("`what` is a number") otherwise.
    pub(super) fn id(&self, what: &str) -> Refused<u64> {
        self.id
            .as_deref()
            .and_then(|id| id.parse::<u64>().ok())
            .ok_or_else(|| Refusal::bad_request("bad_value", format!("{what} is a number")))
    }
}

/// A recording's state as the API shows it: the file's name, not where the server keeps it.
pub(super) fn public(mut state: serde_json::Value) -> serde_json::Value {
    if let Some(o) = state.as_object_mut() {
        o.remove("path");
    }
    state
}

/// 507 `recording_quota` when the recordings directory holds
/// `recording.dir_max_bytes` or more already (measured off the async threads).
/// A directory that cannot be measured (not a directory, not readable) does
/// not stop the start: the recording then fails as it would without a quota,
/// with `recording_stopped` saying why.
pub(super) async fn check_quota(api: &ApiState) -> Refused<()> {
    let max = api.cfg.recording.dir_max_bytes;
    if max == 0 || !api.cfg.recording.enabled {
        return Ok(());
    }
    let dir = std::path::PathBuf::from(&api.cfg.recording.dir);
    let used = tokio::task::spawn_blocking(move || crate::outputs::recording::dir_usage(&dir))
        .await
        .map_err(|e| Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    let used = match used {
        Ok(used) => used,
        Err(e) => {
            tracing::warn!(error = %e.kind(), "the recordings directory cannot be measured for its quota");
            return Ok(());
        }
    };
    if used >= max {
        metrics::counter!(crate::metrics::outputs::RECORDING_QUOTA_REFUSALS).increment(1);
        tracing::warn!(used, max, "recording refused: the recordings directory is at its quota");
        return Err(Refusal::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "recording_quota",
            format!(
                "the recordings directory holds {used} bytes, its quota (recording.dir_max_bytes) is {max}: free some space first"
            ),
        ));
    }
    Ok(())
}

/// `POST /v1/rooms/{room}/recording` (every field optional; an empty body: the mix only).
#[derive(Debug, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StartRecording {
    /// Also a file per speaker (`true`: everyone who speaks; a list of
    /// participant ids: those), with a sidecar placing them on the room's timeline.
    #[schema(value_type = Option<Object>)]
    per_speaker: Option<serde_json::Value>,
    /// A spatial room's mix in two channels (its stereo render's packets);
    /// default `recording.stereo` (true). Mono in a room that is not spatial.
    stereo: Option<bool>,
}

/// Starts recording the room (admin of the room): its mix, and with
/// `per_speaker` a file per speaker (docs/features/recording.md).
#[utoipa::path(
    post,
    path = "/v1/rooms/{room}/recording",
    tag = "outputs",
    operation_id = "start_recording",
    params(("room" = String, Path, description = "The room's id"), super::access::Access),
    request_body(content = Option<StartRecording>, content_type = "application/json", description = "Optional"),
    responses(
        (status = 201, description = "Recording", body = shapes::Recording),
        (status = 400, description = "`bad_json`, `bad_value` (`per_speaker`)", body = ErrorBody),
        (status = 409, description = "`recording_active`", body = ErrorBody),
        (status = 507, description = "`recording_quota`", body = ErrorBody),
        (status = 307, description = "Cluster mode: the room is on another node; follow `Location`"),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden`, `recording_disabled`", body = ErrorBody),
        (status = 404, description = "`room_not_found`", body = ErrorBody),
    ),
)]
pub(super) async fn start(
    State(api): State<Arc<ApiState>>,
    req: RoomRequest,
    raw: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Refused<Response> {
    let state = match req.room(&api, |g, room| may_manage(g, room, "recording a room")).await? {
        Ok(state) => state,
        Err(elsewhere) => return Ok(elsewhere),
    };
    let start: StartRecording =
        super::body::json(&req.headers, &super::body::body(raw)?, Some(StartRecording::default()))?;
    let per_speaker = match start.per_speaker {
        None | Some(serde_json::Value::Bool(false)) => PerSpeaker::Off,
        Some(serde_json::Value::Bool(true)) => PerSpeaker::All,
        Some(serde_json::Value::Array(ids))
            if !ids.is_empty() && ids.len() <= 256 && ids.iter().all(serde_json::Value::is_u64) =>
        {
            PerSpeaker::Only(ids.iter().filter_map(serde_json::Value::as_u64).collect())
        }
        Some(_) => {
            return Err(Refusal::bad_request(
                "bad_value",
                "per_speaker is true, false, or a list of 1 to 256 participant ids",
            ));
        }
    };
    check_quota(&api).await?;
    let body = api.outputs.start_recording_with(&state, per_speaker, start.stereo).map_err(output_error)?;
    // A spread room: every other node records its own speakers on this recording's timeline.
    if let Some(at) = api.outputs.speakers_timeline(&state) {
        control::publish(api.node.dir.as_ref(), &state.id, &Control::record_speakers(at));
    }
    Ok((StatusCode::CREATED, axum::Json(public(body))).into_response())
}

/// The room's recording, if any.
#[utoipa::path(
    get,
    path = "/v1/rooms/{room}/recording",
    tag = "outputs",
    operation_id = "show_recording",
    params(("room" = String, Path, description = "The room's id"), super::access::Access),
    responses(
        (status = 200, description = "The recording (`{\"active\": false}` when none ran)", body = shapes::Recording),
        (status = 307, description = "Cluster mode: the room is on another node; follow `Location`"),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden`, `recording_disabled`", body = ErrorBody),
        (status = 404, description = "`room_not_found`", body = ErrorBody),
    ),
)]
pub(super) async fn show(State(api): State<Arc<ApiState>>, req: RoomRequest) -> Refused<Response> {
    let state = match req.room(&api, may_see).await? {
        Ok(state) => state,
        Err(elsewhere) => return Ok(elsewhere),
    };
    let body = api.outputs.recording_state(&state).unwrap_or_else(|| serde_json::json!({ "active": false }));
    Ok(axum::Json(public(body)).into_response())
}

/// Stops the room's recording (admin of the room) and waits up to 5 s for the file to close.
#[utoipa::path(
    delete,
    path = "/v1/rooms/{room}/recording",
    tag = "outputs",
    operation_id = "stop_recording",
    params(("room" = String, Path, description = "The room's id"), super::access::Access),
    responses(
        (status = 200, description = "The finished file (or, still closing, its state with `finishing`)", body = shapes::RecordingStopped),
        (status = 404, description = "`room_not_found`, `recording_not_found`", body = ErrorBody),
        (status = 307, description = "Cluster mode: the room is on another node; follow `Location`"),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden`, `recording_disabled`", body = ErrorBody),
    ),
)]
pub(super) async fn stop(State(api): State<Arc<ApiState>>, req: RoomRequest) -> Refused<Response> {
    let state = match req.room(&api, |g, room| may_manage(g, room, "stopping a recording")).await? {
        Ok(state) => state,
        Err(elsewhere) => return Ok(elsewhere),
    };
    let rec = api.outputs.stop_recording(&state);
    // A spread room: the other nodes close their speakers' files too (also
    // when this node's recording ended by itself: theirs may still run).
    if matches!(&rec, Ok(r) if r.tracks.is_some()) || matches!(rec, Err(OutputError::RecordingNotFound(_))) {
        control::publish(api.node.dir.as_ref(), &state.id, &Control::StopSpeakers);
    }
    let rec = rec.map_err(output_error)?;
    // The writer closes the file on its own thread; wait here without blocking a worker.
    let deadline = Instant::now() + STOP_WAIT;
    let outcome = loop {
        if let Some(o) = rec.recorder.outcome() {
            break Some(o);
        }
        if Instant::now() >= deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // The speakers' files close with the mix's; their sidecar is written off the async threads.
    let rec = Arc::new(rec);
    let sidecar = {
        let rec = Arc::clone(&rec);
        tokio::task::spawn_blocking(move || rec.finish_tracks()).await.ok().flatten()
    };
    let tracks = rec.tracks.as_ref().map(|t| t.state());
    let body = match outcome {
        Some(f) => serde_json::json!({
            "file": rec.file,
            "bytes": f.bytes,
            "duration_seconds": f.duration.as_secs_f64(),
            "reason": f.reason.code(),
            "error": match &f.reason { crate::outputs::recording::StopReason::Error(e) => Some(e.clone()), _ => None },
            "tracks": tracks,
            "sidecar": sidecar,
        }),
        None => {
            // Still writing (a slow disk): what is known, and that it is finishing.
            let mut s = public(rec.state());
            s["finishing"] = serde_json::Value::Bool(true);
            s
        }
    };
    Ok(axum::Json(body).into_response())
}
