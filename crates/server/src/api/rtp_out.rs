//! `POST`/`GET`/`DELETE /v1/rooms/{room}/rtp_out`: forwarding a room's mix
//! as plain RTP/Opus to an address in `[rtp_out] allowed` (see
//! [`crate::outputs`]). `POST {"address": "127.0.0.1:5004"}` answers with
//! the SDP a receiver (ffmpeg, a broadcast encoder) opens.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Deserialize;

use super::body::{body, json};
use super::recording::{RoomRequest, may_manage, output_error};
use super::schema::{ErrorBody, shapes};
use super::state::ApiState;
use crate::outputs::OutputError;
use crate::refusal::{Refusal, Refused};
use crate::session::grants::may_see;

/// The routes.
pub(super) fn routes() -> Router<Arc<ApiState>> {
    Router::new().route("/v1/rooms/{room}/rtp_out", post(start).get(show).delete(stop))
}

/// `POST /v1/rooms/{room}/rtp_out`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct StartRtpOut {
    /// `host:port` of the receiver, an IP address (no names: the allow-list is by address).
    address: String,
    /// A spatial room's mix as stereo Opus (its stereo render's packets,
    /// `stereo=1` in the SDP); default `rtp_out.stereo` (true). Mono in a
    /// room that is not spatial.
    stereo: Option<bool>,
}

/// Forwards the room's mix as RTP/Opus to an address in `rtp_out.allowed` (admin of the room).
#[utoipa::path(
    post,
    path = "/v1/rooms/{room}/rtp_out",
    tag = "outputs",
    operation_id = "start_rtp_out",
    params(("room" = String, Path, description = "The room's id"), super::access::Access),
    request_body(content = StartRtpOut, content_type = "application/json"),
    responses(
        (status = 201, description = "Forwarding: with the SDP a receiver opens", body = shapes::RtpOut),
        (status = 400, description = "`bad_json`, `bad_address`, `bad_value`", body = ErrorBody),
        (status = 409, description = "`rtp_out_active`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 307, description = "Cluster mode: the room is on another node; follow `Location`"),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden`, `rtp_out_disabled`", body = ErrorBody),
        (status = 404, description = "`room_not_found`", body = ErrorBody),
    ),
)]
pub(super) async fn start(
    State(api): State<Arc<ApiState>>,
    req: RoomRequest,
    raw: Result<Bytes, BytesRejection>,
) -> Refused<Response> {
    let state = match req.room(&api, |g, room| may_manage(g, room, "forwarding a room")).await? {
        Ok(state) => state,
        Err(elsewhere) => return Ok(elsewhere),
    };
    let req: StartRtpOut = json(&req.headers, &body(raw)?, None)?;
    let dest: SocketAddr = req.address.parse().map_err(|_| {
        Refusal::bad_request("bad_address", format!("'{}' is not an address like 127.0.0.1:5004", req.address))
    })?;
    if dest.ip().is_unspecified() || dest.ip().is_multicast() || dest.port() == 0 {
        return Err(output_error(OutputError::BadValue(format!("{dest} is not a unicast address with a port"))));
    }
    let body = api.outputs.start_rtp_out(&state, dest, req.stereo).map_err(output_error)?;
    Ok((StatusCode::CREATED, axum::Json(body)).into_response())
}

/// The room's RTP out.
#[utoipa::path(
    get,
    path = "/v1/rooms/{room}/rtp_out",
    tag = "outputs",
    operation_id = "show_rtp_out",
    params(("room" = String, Path, description = "The room's id"), super::access::Access),
    responses(
        (status = 200, description = "Forwarding", body = shapes::RtpOut),
        (status = 404, description = "`room_not_found`, `rtp_out_not_found`", body = ErrorBody),
        (status = 307, description = "Cluster mode: the room is on another node; follow `Location`"),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden`, `rtp_out_disabled`", body = ErrorBody),
    ),
)]
pub(super) async fn show(State(api): State<Arc<ApiState>>, req: RoomRequest) -> Refused<Response> {
    let state = match req.room(&api, may_see).await? {
        Ok(state) => state,
        Err(elsewhere) => return Ok(elsewhere),
    };
    let body =
        api.outputs.rtp_out_state(&state).ok_or_else(|| output_error(OutputError::RtpOutNotFound(state.id.clone())))?;
    Ok(axum::Json(body).into_response())
}

/// Stops the room's RTP out (admin of the room).
#[utoipa::path(
    delete,
    path = "/v1/rooms/{room}/rtp_out",
    tag = "outputs",
    operation_id = "stop_rtp_out",
    params(("room" = String, Path, description = "The room's id"), super::access::Access),
    responses(
        (status = 200, description = "Stopped: its last figures", body = shapes::RtpOut),
        (status = 404, description = "`room_not_found`, `rtp_out_not_found`", body = ErrorBody),
        (status = 307, description = "Cluster mode: the room is on another node; follow `Location`"),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden`, `rtp_out_disabled`", body = ErrorBody),
    ),
)]
pub(super) async fn stop(State(api): State<Arc<ApiState>>, req: RoomRequest) -> Refused<Response> {
    let state = match req.room(&api, |g, room| may_manage(g, room, "stopping a room's RTP out")).await? {
        Ok(state) => state,
        Err(elsewhere) => return Ok(elsewhere),
    };
    let body = api.outputs.stop_rtp_out(&state).map_err(output_error)?;
    Ok(axum::Json(body).into_response())
}
