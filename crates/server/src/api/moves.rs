//! `POST /v1/rooms/{room}/participants/{id}/move`: moves a participant to
//! another room of this node without a new connection (a breakout; the
//! move is the session layer's, `session::moves`; see `room::moves` and
//! docs/features/breakout.md).
//!
//! Who may: an admin of both rooms. What the participant may do in the new
//! room is what the move grants it (`speak`; default: as it could), not
//! what its token says: its token may be for the old room only. Its room
//! WebSocket follows (`room_changed`, see `ws`). Across nodes (cluster
//! mode, the target room held by another node): 409 `room_elsewhere`,
//! with where it is; the participant must leave and join there.
//!
//! A target room that does not exist is 404 `room_not_found`, unless
//! `breakout.create_rooms` is on (a single node only): then the move
//! creates it, with the `[room]` defaults, as `POST /v1/rooms` without
//! options would (the caller is an admin of it already: see above). If
//! the move then fails, the room it created is deleted again.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::access::{self as cluster, Access};
use super::body::{body, json};
use super::schema::ErrorBody;
use super::state::ApiState;
use crate::refusal::{Refusal, Refused};
use crate::room::RoomError;
use crate::session::moves::Moved;

/// The routes.
pub(super) fn routes() -> Router<Arc<ApiState>> {
    Router::new().route("/v1/rooms/{room}/participants/{id}/move", post(move_participant))
}

/// `POST …/participants/{id}/move`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MoveRequest {
    /// The room to move it to (on this node; it must exist unless
    /// `breakout.create_rooms`).
    to: String,
    /// Whether it may speak there (default: as it may now).
    speak: Option<bool>,
}

/// A move that was made.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct MoveResult {
    /// The participant (its id does not change).
    id: u64,
    /// The room it left.
    from: String,
    /// The room it is in now.
    to: String,
    /// Whether it may speak there.
    speak: bool,
}

/// Counts a move's outcome (`tutti_participant_moves_total{result}`):
/// `moved`, `room_elsewhere`, `redirected` (a 307 to the node of the room or of the participant), or
/// the error's code.
fn counted(result: Refused<Response>) -> Refused<Response> {
    let label = match &result {
        Ok(r) if r.status() == StatusCode::OK => "moved",
        Ok(r) if r.status() == StatusCode::CONFLICT => "room_elsewhere",
        Ok(_) => "redirected",
        Err(e) => e.code,
    };
    crate::metrics::participant_move(label);
    result
}

/// Moves a participant to another room of this node, keeping its
/// connection (admin of both rooms).
#[utoipa::path(
    post,
    path = "/v1/rooms/{room}/participants/{id}/move",
    tag = "participants",
    operation_id = "move_participant",
    params(
        ("room" = String, Path, description = "The room it is in"),
        ("id" = u64, Path, description = "The participant's id"),
        cluster::Access,
    ),
    request_body(content = MoveRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Moved: `left` (reason `moved_room`) in the old room, `joined` in the new", body = MoveResult),
        (status = 307, description = "Cluster mode: the participant's room, or the participant (its id names its node), is on another node; follow `Location`"),
        (status = 400, description = "`bad_json`, `bad_room_id`, `same_room`", body = ErrorBody),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`forbidden` (not an admin of both rooms), `banned` (from the target room)", body = ErrorBody),
        (status = 404, description = "`room_not_found` (either room; the target only while `breakout.create_rooms` is off), `participant_not_found`", body = ErrorBody),
        (status = 409, description = "`room_full` (the target), `room_elsewhere` (cluster mode: the target room is held by another node; `node` and `api_url` say which)", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 423, description = "`room_locked` (the target)", body = ErrorBody),
        (status = 503, description = "`shutting_down`, `cluster_unavailable`", body = ErrorBody),
    ),
)]
pub(crate) async fn move_participant(
    State(api): State<Arc<ApiState>>,
    Path((room, id)): Path<(String, u64)>,
    headers: HeaderMap,
    target: cluster::Target,
    query: Result<Query<Access>, axum::extract::rejection::QueryRejection>,
    raw: Result<Bytes, BytesRejection>,
) -> Refused<Response> {
    counted(move_inner(api, room, id, headers, target, query, raw).await)
}

async fn move_inner(
    api: Arc<ApiState>,
    room: String,
    id: u64,
    headers: HeaderMap,
    target: cluster::Target,
    query: Result<Query<Access>, axum::extract::rejection::QueryRejection>,
    raw: Result<Bytes, BytesRejection>,
) -> Refused<Response> {
    let access = cluster::access(query);
    let grant = cluster::caller(&api, &headers, &target, access.ticket.as_deref(), &room).await?;
    let req: MoveRequest = json(&headers, &body(raw)?, None)?;
    if !crate::room::valid_room_id(&req.to) {
        return Err(RoomError::BadRoomId.into());
    }
    if !grant.may_manage(&room) || !grant.may_manage(&req.to) {
        return Err(Refusal::forbidden(format!(
            "moving a participant from '{room}' to '{}' needs an admin token for both rooms",
            req.to
        )));
    }
    let ticketed = access.ticket.is_some();
    let from = match cluster::participant_here(&api, &room, id, &target, &grant, ticketed).await? {
        Ok(state) => state,
        Err(elsewhere) => return Ok(elsewhere),
    };
    match api.session.move_participant(&from, id, &req.to, req.speak).await? {
        Moved::Done { speak } => {
            let body = MoveResult { id, from: from.id.clone(), to: req.to.clone(), speak };
            Ok(axum::Json(body).into_response())
        }
        Moved::Elsewhere { node, api_url } => Ok(elsewhere(&req.to, &node, &api_url)),
    }
}

/// 409 `room_elsewhere`: the target room is held by another node.
fn elsewhere(room: &str, node: &str, api_url: &str) -> Response {
    let body = serde_json::json!({
        "code": "room_elsewhere",
        "message": format!(
            "room '{room}' is held by node '{node}': a participant moves without a new connection only within a node; \
             have it leave and join there"
        ),
        "node": node,
        "api_url": api_url,
    });
    (StatusCode::CONFLICT, axum::Json(body)).into_response()
}
