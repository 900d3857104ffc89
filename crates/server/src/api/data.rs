//! `POST /v1/rooms/{room}/data`: the backend sends a data message to a
//! room's sockets (everyone, or the participants it names), as a
//! participant does over its socket (`data`). See `room::data`.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Deserialize;
use utoipa::ToSchema;

use super::access as cluster;
use super::body::{body, json};
use super::recording::{RoomRequest, may_manage};
use super::schema::ErrorBody;
use super::state::ApiState;
use crate::refusal::Refused;

/// The route.
pub(super) fn routes() -> Router<Arc<ApiState>> {
    Router::new().route("/v1/rooms/{room}/data", post(send))
}

/// `POST /v1/rooms/{room}/data`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SendData {
    /// What it is about (`chat`, `reaction`…): at most 64 bytes.
    topic: String,
    /// Any JSON (a string, an object…), at most `limits.data_max_bytes` serialized.
    #[schema(value_type = Object)]
    payload: Box<serde_json::value::RawValue>,
    /// Only these participants' sockets get it (1 to 64 ids); left out: everyone.
    to: Option<Vec<u64>>,
}

/// What a send did.
#[derive(ToSchema)]
#[allow(dead_code)] // described, never built
pub(crate) struct DataSent {
    /// The sockets of this node it was handed to (a spread room's other nodes deliver to theirs).
    sockets: usize,
}

/// Sends a data message to the room's sockets (admin of the room: the backend).
///
/// Best effort: it reaches the sockets connected now, in the order sent,
/// and is not stored. The message arrives as `{"type":"data","from":null,
/// "topic":…,"payload":…}` (`from` null: the backend).
#[utoipa::path(
    post,
    path = "/v1/rooms/{room}/data",
    tag = "rooms",
    operation_id = "send_data",
    params(("room" = String, Path, description = "The room's id"), cluster::Access),
    request_body(content = SendData, content_type = "application/json"),
    responses(
        (status = 202, description = "Handed to the room's sockets", body = DataSent),
        (status = 307, description = "Cluster mode: the room is on another node; follow `Location`"),
        (status = 400, description = "`bad_json`, `bad_value` (topic, payload size, `to`)", body = ErrorBody),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden`: not an admin of the room", body = ErrorBody),
        (status = 404, description = "`room_not_found`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 429, description = "`rate_limited`: more than `limits.data_messages_per_second` to this room (`Retry-After`)", body = ErrorBody),
    ),
)]
pub(crate) async fn send(
    State(api): State<Arc<ApiState>>,
    req: RoomRequest,
    raw: Result<Bytes, BytesRejection>,
) -> Refused<Response> {
    let what = "sending a data message from the backend (participants send over their socket)";
    let state = match req.room(&api, |g, room| may_manage(g, room, what)).await? {
        Ok(state) => state,
        Err(elsewhere) => return Ok(elsewhere),
    };
    let message: SendData = json(&req.headers, &body(raw)?, None)?;
    let sockets = api.session.send_data(&state, None, &message.topic, &message.payload, message.to)?;
    Ok((StatusCode::ACCEPTED, axum::Json(serde_json::json!({ "sockets": sockets }))).into_response())
}
