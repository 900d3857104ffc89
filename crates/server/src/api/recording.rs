//! `POST`/`GET`/`DELETE /v1/rooms/{room}/recording`: recording a room's
//! listener stream to an Ogg/Opus file (see [`crate::outputs`]).
//!
//! Starting and stopping need an admin token for the room; looking, one
//! that may see it. The room must be on this node (in cluster mode, send
//! these to the node holding it: `GET /v1/rooms/{room}` says which).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;

use super::error::{ApiError, ApiResult};
use super::{ApiState, authenticate, may_see};
use crate::outputs::OutputError;

/// How long `DELETE` waits for the writer to close the file before answering with what it knows.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// The routes.
pub(super) fn routes() -> Router<Arc<ApiState>> {
    Router::new().route("/v1/rooms/{room}/recording", post(start).get(show).delete(stop))
}

/// The JSON error for an output failure, with its stable code.
pub(super) fn output_error(e: OutputError) -> ApiError {
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
    ApiError::new(status, code, e.to_string())
}

/// 403 unless the caller manages `room`.
pub(super) fn may_manage(api: &ApiState, headers: &HeaderMap, room: &str, what: &str) -> ApiResult<()> {
    let grant = authenticate(api, headers, None)?;
    may_see(&grant, room)?;
    if grant.may_manage(room) {
        Ok(())
    } else {
        Err(ApiError::forbidden(format!("{what} needs an admin token for room '{room}'")))
    }
}

async fn start(State(api): State<Arc<ApiState>>, Path(room): Path<String>, headers: HeaderMap) -> ApiResult<Response> {
    may_manage(&api, &headers, &room, "recording a room")?;
    let state = api.rooms.get(&room)?;
    let body = api.outputs.start_recording(&state).map_err(output_error)?;
    Ok((StatusCode::CREATED, axum::Json(body)).into_response())
}

async fn show(State(api): State<Arc<ApiState>>, Path(room): Path<String>, headers: HeaderMap) -> ApiResult<Response> {
    may_see(&authenticate(&api, &headers, None)?, &room)?;
    let state = api.rooms.get(&room)?;
    let body = api.outputs.recording_state(&state).unwrap_or_else(|| serde_json::json!({ "active": false }));
    Ok(axum::Json(body).into_response())
}

async fn stop(State(api): State<Arc<ApiState>>, Path(room): Path<String>, headers: HeaderMap) -> ApiResult<Response> {
    may_manage(&api, &headers, &room, "stopping a recording")?;
    let state = api.rooms.get(&room)?;
    let rec = api.outputs.stop_recording(&state).map_err(output_error)?;
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
    let body = match outcome {
        Some(f) => serde_json::json!({
            "file": rec.file,
            "path": f.path.display().to_string(),
            "bytes": f.bytes,
            "duration_seconds": f.duration.as_secs_f64(),
            "reason": f.reason.code(),
            "error": match &f.reason { crate::ops::recording::StopReason::Error(e) => Some(e.clone()), _ => None },
        }),
        None => {
            // Still writing (a slow disk): what is known, and that it is finishing.
            let mut s = rec.state();
            s["finishing"] = serde_json::Value::Bool(true);
            s
        }
    };
    Ok(axum::Json(body).into_response())
}
