//! `/healthz` and `/readyz`, for load balancers and orchestrators.

use std::sync::Arc;

use super::state::ApiState;
use crate::refusal::{Refusal, Refused};
use crate::room::RoomError;

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "node", operation_id = "healthz", security(()),
    responses((status = 200, description = "`ok`", body = String, content_type = "text/plain")))]
pub(crate) async fn healthz() -> &'static str {
    "ok"
}

/// Readiness: 503 while the node drains or shuts down (take it out of the load balancer).
#[utoipa::path(get, path = "/readyz", tag = "node", operation_id = "readyz", security(()),
    responses(
        (status = 200, description = "`ready`", body = String, content_type = "text/plain"),
        (status = 503, description = "`draining`, `shutting_down`", body = super::schema::ErrorBody),
    ))]
pub(crate) async fn readyz(axum::extract::State(api): axum::extract::State<Arc<ApiState>>) -> Refused<&'static str> {
    if api.rooms.is_closing() {
        return Err(Refusal::shutting_down());
    }
    if api.rooms.is_draining() {
        return Err(RoomError::Draining.into());
    }
    Ok("ready")
}
