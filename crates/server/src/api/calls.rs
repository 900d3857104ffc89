//! `POST /v1/rooms/{room}/calls`: dial-out. tutti calls a SIP URI or a
//! number through an `[[sip.outbound]]` trunk; answered, the callee is a
//! participant of the room (docs/features/sip.md#dial-out).
//!
//! Who may: an admin of the room. The call is placed by the SIP edge, which
//! this module never names: it asks the session layer
//! (`Sessions::dial`, the seam the edge registers at start; 503 `sip_off`
//! without it). With `wait` the answer comes when the call is answered
//! (201) or refused (the JSON error carries `sip_status`), at the latest
//! a second before the API's request timeout (then 202, still ringing:
//! the room's `call_*` events tell the rest); without, 202 at once.

use std::sync::Arc;
use std::time::Duration;

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
use crate::session::dialer::{DialOutcome, DialRequest};

/// The routes.
pub(super) fn routes() -> Router<Arc<ApiState>> {
    Router::new().route("/v1/rooms/{room}/calls", post(dial))
}

/// Longest ringing timeout a request may ask for.
const MAX_RINGING_SECONDS: u64 = 600;

/// `POST /v1/rooms/{room}/calls`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CallRequest {
    /// Whom to call: a SIP URI, or a number (up to 32 of `0`-`9`, `+`, `*`,
    /// `#`) sent to the trunk's address.
    #[schema(example = "sip:alice@192.0.2.20")]
    to: String,
    /// The `[[sip.outbound]]` trunk to call through.
    #[schema(example = "carrier")]
    trunk: String,
    /// The callee's name in the room; absent: `to`.
    #[serde(default)]
    name: Option<String>,
    /// The callee's identity; absent: `<to>#<Call-ID>`.
    #[serde(default)]
    identity: Option<String>,
    /// How long it may ring before tutti gives up (CANCEL, `no_answer`): 1 to 600.
    #[serde(default = "default_ringing")]
    #[schema(default = 30, minimum = 1, maximum = 600)]
    ringing_timeout_seconds: u64,
    /// The longest the call may last once answered (then BYE); absent: no limit.
    #[serde(default)]
    max_duration_seconds: Option<u64>,
    /// Keypad digits sent (RFC 4733) once answered, up to 32 of `0`-`9`, `*`, `#`, `A`-`D`.
    #[serde(default)]
    #[schema(example = "1234#")]
    digits: String,
    /// Answer when the call is answered or refused (else 202 at once).
    #[serde(default)]
    wait: bool,
}

fn default_ringing() -> u64 {
    30
}

/// A call placed.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CallPlaced {
    /// The call's SIP Call-ID (also the `call_id` of the room's `call_*` events
    /// and the participant's `sip.call_id` attribute).
    call_id: String,
    /// `ringing` (202: not decided yet) or `answered` (201).
    state: &'static str,
    /// The callee's participant id, once answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<u64>,
}

/// A call that was not answered: the error body (`code`, `message`) with
/// the SIP status and the Call-ID.
#[derive(Debug, Serialize)]
pub(crate) struct CallFailedBody {
    /// `callee_busy` (486, 600), `callee_declined` (603, 403), `no_answer`
    /// (408, 480, 487: nobody answered in time), `call_failed` (another).
    code: &'static str,
    /// Why, for a person.
    message: String,
    /// The final SIP status (0: none came, the trunk did not answer at all).
    sip_status: u16,
    /// The call's SIP Call-ID.
    call_id: String,
}

/// Calls a phone into the room through an outbound trunk (admin).
#[utoipa::path(
    post,
    path = "/v1/rooms/{room}/calls",
    tag = "rooms",
    operation_id = "dial_out",
    params(("room" = String, Path, description = "The room"), cluster::Access),
    request_body(content = CallRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "`wait`: answered; the callee is participant `id`", body = CallPlaced),
        (status = 202, description = "Placed, not decided yet (without `wait`, or `wait` beyond the API's request timeout)", body = CallPlaced),
        (status = 307, description = "Cluster mode: the room is on another node; follow `Location`"),
        (status = 400, description = "`bad_json`, `bad_to`, `bad_digits`, `unknown_trunk`, `bad_timeout`", body = ErrorBody),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`forbidden` (not an admin of the room)", body = ErrorBody),
        (status = 404, description = "`room_not_found`", body = ErrorBody),
        (status = 409, description = "`wait`: `callee_busy` (486, 600), `callee_declined` (603, 403), `call_failed`; the body also carries `sip_status` (the SIP final status, 0: none) and `call_id`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 429, description = "`too_many_calls`: the trunk's `max_calls` or the room's `[sip] max_calls_per_room` are up", body = ErrorBody),
        (status = 503, description = "`sip_off` (no SIP edge), `rtp_in_off`, `shutting_down`, `cluster_unavailable`", body = ErrorBody),
        (status = 504, description = "`wait`: `no_answer` (408, 480, 487: not answered within the ringing timeout); also `sip_status`, `call_id`", body = ErrorBody),
    ),
)]
pub(crate) async fn dial(
    State(api): State<Arc<ApiState>>,
    Path(room): Path<String>,
    headers: HeaderMap,
    target: cluster::Target,
    query: Result<Query<Access>, axum::extract::rejection::QueryRejection>,
    raw: Result<Bytes, BytesRejection>,
) -> Refused<Response> {
    let access = cluster::access(query);
    let grant = cluster::caller(&api, &headers, &target, access.ticket.as_deref(), &room).await?;
    let req: CallRequest = json(&headers, &body(raw)?, None)?;
    if !grant.may_manage(&room) {
        return Err(Refusal::forbidden(format!("calling out of '{room}' needs an admin token")));
    }
    if !(1..=MAX_RINGING_SECONDS).contains(&req.ringing_timeout_seconds) || req.max_duration_seconds == Some(0) {
        return Err(Refusal::bad_request(
            "bad_timeout",
            format!("ringing_timeout_seconds must be 1 to {MAX_RINGING_SECONDS}, max_duration_seconds at least 1"),
        ));
    }
    crate::session::dialout::check_digits(&req.digits)?;
    if let Err(elsewhere) = cluster::here(&api, &room, &target, &grant).await? {
        return Ok(elsewhere);
    }
    let request = DialRequest {
        room: room.clone(),
        name: req.name.clone().unwrap_or_else(|| req.to.clone()),
        to: req.to,
        trunk: req.trunk,
        identity: req.identity,
        ringing_timeout: Duration::from_secs(req.ringing_timeout_seconds),
        max_duration: req.max_duration_seconds.map(Duration::from_secs),
        digits: req.digits,
    };
    let dialling = api.session.dial(request)?;
    let call_id = dialling.call_id;
    let ringing =
        || (StatusCode::ACCEPTED, axum::Json(CallPlaced { call_id: call_id.clone(), state: "ringing", id: None }));
    if !req.wait {
        return Ok(ringing().into_response());
    }
    // Answered before the API's own request timeout cuts the request.
    let budget = Duration::from_secs_f64((api.cfg.limits.http_request_timeout_seconds - 1.0).max(0.5));
    let outcome = match tokio::time::timeout(budget, dialling.outcome).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(_)) => return Err(Refusal::shutting_down()),
        Err(_) => return Ok(ringing().into_response()),
    };
    Ok(match outcome {
        DialOutcome::Answered { id } => {
            (StatusCode::CREATED, axum::Json(CallPlaced { call_id, state: "answered", id: Some(id) })).into_response()
        }
        DialOutcome::Failed { sip_status, reason } => {
            let code = crate::session::dialout::failure_code(sip_status);
            let status = if code == "no_answer" { StatusCode::GATEWAY_TIMEOUT } else { StatusCode::CONFLICT };
            (status, axum::Json(CallFailedBody { code, message: reason, sip_status, call_id })).into_response()
        }
    })
}
