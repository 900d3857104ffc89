//! # The HTTP control plane: the REST API, the room WebSocket, the web page
//!
//! Thin handlers: each parses its request, authenticates it (`access`: a
//! token, or a redirect ticket), checks what the grant allows, calls down
//! into the session layer ([`crate::session`]: join, leave, move, mute,
//! grant, kick, ban) or reads the room domain, and answers: a refusal as
//! JSON with a stable code (`error`), a room on another node as a `307`
//! (where it is, the cluster's [`crate::cluster`] says). Room operations
//! are the room domain's ([`crate::room`]); effects reach the media plane
//! through its small handle ([`crate::media::MediaHandle`]).
//!
//! Every route but `/healthz` and `/readyz` takes an access token
//! ([`crate::auth`]). The checks run in a fixed order, so that a caller
//! learns nothing about a room it may not see: 401 (no valid token), 403
//! (not for this room, or lacking the permission), 429 (join rate), and
//! only then 404, 409, 400.

mod access;
mod body;
mod calls;
mod client;
mod cors;
mod data;
mod dtmf;
mod enter;
pub(crate) mod error;
mod health;
pub(crate) mod http;
mod ice;
mod invite;
mod moves;
mod node;
mod openapi;
mod origin;
pub(crate) mod playback;
mod recording;
pub(crate) mod rooms;
mod rtp_out;
pub(crate) mod schema;
mod speakers;
mod stage;
pub(crate) mod state;
mod web;
mod whisper;
pub(crate) mod ws;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::header;
use axum::routing::{get, post};

use crate::refusal::Refusal;
use state::ApiState;

/// 405 as JSON (axum adds `Allow`), for a route that exists with other methods.
async fn method_not_allowed() -> Refusal {
    Refusal::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not take this method (see the Allow header)",
    )
}

async fn not_found() -> Refusal {
    Refusal::new(axum::http::StatusCode::NOT_FOUND, "not_found", "no such endpoint")
}

/// 408 for a request (body included) that takes longer than the limit.
async fn request_timeout(
    axum::extract::State(limit): axum::extract::State<Duration>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            let message = format!("the request took longer than {} s", limit.as_secs_f64());
            let mut response =
                Refusal::new(axum::http::StatusCode::REQUEST_TIMEOUT, "request_timeout", message).into_response();
            response.headers_mut().insert(header::CONNECTION, axum::http::HeaderValue::from_static("close"));
            response
        }
    }
}

/// The API's routes.
pub(crate) fn router(api: Arc<ApiState>) -> Router {
    let max_body_bytes = api.cfg.max_body_bytes;
    let timeout = Duration::from_secs_f64(api.cfg.limits.http_request_timeout_seconds);
    let dev_mode = api.auth.is_none().then_some(api.cfg.http);
    let router = Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/v1/rooms", post(rooms::create_room).get(rooms::list_rooms))
        .route("/v1/rooms/{room}", get(rooms::get_room).delete(rooms::delete_room).patch(stage::update_room))
        .route("/v1/rooms/{room}/participants", post(rooms::join))
        .route(
            "/v1/rooms/{room}/participants/{id}",
            axum::routing::delete(rooms::leave).patch(rooms::update_participant),
        )
        .route("/v1/rooms/{room}/ws", get(ws::upgrade))
        .merge(enter::routes())
        .merge(recording::routes())
        .merge(rtp_out::routes())
        .merge(speakers::routes())
        .merge(playback::routes())
        .merge(moves::routes())
        .merge(dtmf::routes())
        .merge(calls::routes())
        .merge(whisper::routes())
        .merge(data::routes())
        .merge(node::routes())
        .route("/v1/rooms/{room}/ice-servers", get(ice::ice_servers))
        .merge(invite::routes())
        .merge(web::routes())
        .merge(openapi::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // Who calls from where, and the connection's share, before any handler.
        .layer(axum::middleware::from_fn_with_state(client::Clients::new(api.clone()), client::admit))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(timeout, request_timeout))
        .layer(axum::middleware::from_fn(crate::metrics::track_api));
    // Auth disabled: no cross-site or DNS-rebinding use of a local server.
    let router = match dev_mode {
        Some(http) => router.layer(axum::middleware::from_fn_with_state(http, origin::guard)),
        None => router,
    };
    // Outermost: CORS headers on every answer, errors and timeouts included.
    let router = match cors::layer(&api.cfg.cors) {
        Some(cors) => router.layer(cors).layer(axum::middleware::from_fn(cors::only_allowed)),
        None => router,
    };
    router.with_state(api)
}
