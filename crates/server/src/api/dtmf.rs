//! `POST /v1/rooms/{room}/participants/{id}/dtmf`: sends keypad digits to
//! a phone leg (a SIP call, or another plain RTP participant whose offer
//! named `telephone-event`) as RFC 4733 events on its RTP — to navigate an
//! IVR, enter a conference PIN elsewhere, and so on
//! (docs/features/sip.md#keypad).
//!
//! Who may: an admin of the room. Bounded: 1 to 32 digits a request, one
//! request at a time per leg (another while digits are still going out is
//! 409 `digits_in_progress`). The answer (202) comes at once, with how
//! long sending takes (200 ms a digit).

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

/// The routes.
pub(super) fn routes() -> Router<Arc<ApiState>> {
    Router::new().route("/v1/rooms/{room}/participants/{id}/dtmf", post(send_dtmf))
}

/// `POST …/participants/{id}/dtmf`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DtmfRequest {
    /// 1 to 32 digits: `0`-`9`, `*`, `#`, `A`-`D` (any case).
    #[schema(example = "123#", min_length = 1, max_length = 32)]
    digits: String,
}

/// Digits being sent.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DtmfSending {
    /// The participant.
    id: u64,
    /// The digits, as sent (upper case).
    digits: String,
    /// How long sending them takes; another request before then is 409.
    duration_seconds: f64,
}

/// Sends keypad digits to a phone leg as RFC 4733 events (admin).
#[utoipa::path(
    post,
    path = "/v1/rooms/{room}/participants/{id}/dtmf",
    tag = "participants",
    operation_id = "send_dtmf",
    params(
        ("room" = String, Path, description = "The room"),
        ("id" = u64, Path, description = "The participant's id (a phone leg)"),
        cluster::Access,
    ),
    request_body(content = DtmfRequest, content_type = "application/json"),
    responses(
        (status = 202, description = "The digits are being sent, one every 200 ms", body = DtmfSending),
        (status = 307, description = "Cluster mode: the room, or the participant, is on another node; follow `Location`"),
        (status = 400, description = "`bad_json`, `bad_digits` (none, more than 32, or not 0-9 * # A-D)", body = ErrorBody),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`forbidden` (not an admin of the room)", body = ErrorBody),
        (status = 404, description = "`room_not_found`, `participant_not_found`", body = ErrorBody),
        (status = 409, description = "`not_a_phone_leg` (a WebRTC participant), `no_telephone_event` (its call did not offer RFC 4733), `digits_in_progress` (an earlier request's digits are still going out)", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 503, description = "`shutting_down`, `cluster_unavailable`", body = ErrorBody),
    ),
)]
pub(crate) async fn send_dtmf(
    State(api): State<Arc<ApiState>>,
    Path((room, id)): Path<(String, u64)>,
    headers: HeaderMap,
    target: cluster::Target,
    query: Result<Query<Access>, axum::extract::rejection::QueryRejection>,
    raw: Result<Bytes, BytesRejection>,
) -> Refused<Response> {
    let access = cluster::access(query);
    let grant = cluster::caller(&api, &headers, &target, access.ticket.as_deref(), &room).await?;
    let req: DtmfRequest = json(&headers, &body(raw)?, None)?;
    if !grant.may_manage(&room) {
        return Err(Refusal::forbidden(format!("sending digits to a participant of '{room}' needs an admin token")));
    }
    let ticketed = access.ticket.is_some();
    let state = match cluster::participant_here(&api, &room, id, &target, &grant, ticketed).await? {
        Ok(state) => state,
        Err(elsewhere) => return Ok(elsewhere),
    };
    let takes = api.session.send_keys(&state, id, &req.digits)?;
    let body = DtmfSending { id, digits: req.digits.to_ascii_uppercase(), duration_seconds: takes.as_secs_f64() };
    Ok((StatusCode::ACCEPTED, axum::Json(body)).into_response())
}
