//! The node itself: `GET /v1/node` (what it holds, whether it drains) and
//! `POST /v1/node/drain` (a drain without a signal, for operators who have
//! none; the drain is the cluster's: `cluster::handover`).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tutti_cluster::Cluster;

use super::access::authenticate;
use super::schema::{ErrorBody, shapes};
use super::state::ApiState;
use crate::refusal::{Refusal, Refused};

/// The node's routes.
pub(crate) fn routes() -> Router<Arc<ApiState>> {
    Router::new().route("/v1/node", get(status)).route("/v1/node/drain", post(drain))
}

/// 403 unless the caller is an admin of every room (the node is everyone's).
fn node_admin(api: &ApiState, headers: &HeaderMap) -> Refused<()> {
    let grant = authenticate(api, headers, None)?;
    if !grant.may_list() {
        return Err(Refusal::forbidden("the node's routes need an admin token for every room ('*')"));
    }
    Ok(())
}

fn summary(api: &ApiState) -> serde_json::Value {
    serde_json::json!({
        "node": api.node.dir.as_ref().map(Cluster::node_id),
        "draining": api.node.drain.deadline().is_some(),
        "drain_deadline": api.node.drain.deadline(),
        "rooms": api.rooms.all().len(),
        "participants": api.rooms.participants(),
    })
}

/// `GET /v1/node`: whether it drains, what it holds.
#[utoipa::path(
    get,
    path = "/v1/node",
    tag = "node",
    operation_id = "node_status",
    responses(
        (status = 200, description = "The node", body = shapes::NodeSummary),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`", body = ErrorBody),
        (status = 403, description = "`forbidden`: not an admin of every room", body = ErrorBody),
    ),
)]
pub(super) async fn status(State(api): State<Arc<ApiState>>, headers: HeaderMap) -> Refused<Response> {
    node_admin(&api, &headers)?;
    Ok(axum::Json(summary(&api)).into_response())
}

/// `POST /v1/node/drain`: starts a drain of `drain_seconds` (as SIGTERM
/// does); `tutti serve` shuts down when it ends. 202, with the node's summary.
#[utoipa::path(
    post,
    path = "/v1/node/drain",
    tag = "node",
    operation_id = "node_drain",
    responses(
        (status = 202, description = "Draining (a second call changes nothing)", body = shapes::NodeSummary),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`", body = ErrorBody),
        (status = 403, description = "`forbidden`: not an admin of every room", body = ErrorBody),
    ),
)]
pub(super) async fn drain(State(api): State<Arc<ApiState>>, headers: HeaderMap) -> Refused<Response> {
    node_admin(&api, &headers)?;
    api.session.drain(api.cfg.drain_time()).await;
    api.node.drain.ask();
    Ok((StatusCode::ACCEPTED, axum::Json(summary(&api))).into_response())
}
