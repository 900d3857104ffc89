//! `GET /v1/openapi.json`: the HTTP API described as OpenAPI 3.1, generated
//! from the handlers' `#[utoipa::path]` annotations and the request and
//! response types' `ToSchema` derives (utoipa), so the description moves
//! with the code. No token needed: it says what the API takes, nothing about
//! what a server holds.
//!
//! ```text
//! handler  #[utoipa::path(post, path = "/v1/rooms", responses(...))]  ─┐
//! bodies   #[derive(ToSchema)] CreateRoom, RoomSummary, …              ─┼─► ApiDoc::openapi() ─► JSON, built once
//! schema   ErrorBody, the shapes handlers build with json!             ─┘
//! ```
//!
//! `crates/server/tests/openapi.rs` checks it against the routes the router
//! is built from (a route without a description fails, and so does a
//! description without a route) over real HTTP, and against
//! `docs/api/openapi.json`, the copy a reviewer sees change in a diff.
//! This module uses every handler (for its path); none uses it.

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::state::ApiState;

/// Declares the bearer JWT (`Authorization: Bearer`) and, for the routes a
/// browser opens without headers, the `?token=` query.
struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let mut bearer = Http::new(HttpAuthScheme::Bearer);
        bearer.bearer_format = Some("JWT".into());
        bearer.description = Some(
            "An access token (JWT, HS256): the room, the identity, the permissions (listen, speak, admin), \
             the expiry. See docs/security.md#tokens."
                .into(),
        );
        components.add_security_scheme("bearer", SecurityScheme::Http(bearer));
        components.add_security_scheme(
            "token_query",
            SecurityScheme::ApiKey(ApiKey::Query(ApiKeyValue::with_description(
                "token",
                "The same access token in the query, for clients that cannot set headers (a browser's WebSocket).",
            ))),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "tutti",
        description = "The HTTP API of tutti, an MCU audio conference server. Errors are JSON \
            `{\"code\", \"message\"}` with a stable code (docs/api/errors.md). The room WebSocket's \
            messages are in docs/api/websocket.md and docs/api/websocket.schema.json.",
        license(name = "MIT OR Apache-2.0"),
    ),
    paths(
        super::health::healthz,
        super::health::readyz,
        openapi_json,
        super::rooms::create_room,
        super::rooms::list_rooms,
        super::rooms::get_room,
        super::rooms::delete_room,
        super::stage::update_room,
        super::rooms::join,
        super::rooms::update_participant,
        super::rooms::leave,
        super::ws::upgrade,
        super::enter::enter,
        super::recording::start,
        super::recording::show,
        super::recording::stop,
        super::rtp_out::start,
        super::rtp_out::show,
        super::rtp_out::stop,
        super::speakers::upgrade,
        super::playback::start,
        super::playback::list,
        super::playback::stop,
        super::playback::show_sounds,
        super::playback::set_sounds,
        super::moves::move_participant,
        super::dtmf::send_dtmf,
        super::calls::dial,
        super::whisper::open,
        super::whisper::list,
        super::whisper::change,
        super::whisper::close,
        super::data::send,
        super::node::status,
        super::node::drain,
        super::ice::ice_servers,
        super::invite::create_invite,
        super::web::index,
        super::web::app_js,
        super::web::tutti_js,
        super::web::style_css,
    ),
    components(schemas(super::schema::ErrorBody)),
    modifiers(&Security),
    security(("bearer" = [])),
    tags(
        (name = "rooms", description = "Rooms: create, list, look, change, delete."),
        (name = "participants", description = "Joining (WHIP-style SDP or JSON), changing, leaving; ICE restart."),
        (name = "websocket", description = "The room socket: events and joining (docs/api/websocket.md)."),
        (name = "outputs", description = "Recording, RTP out, and files played into rooms."),
        (name = "invites", description = "Guest tokens minted for a room."),
        (name = "node", description = "The node itself: health, readiness, drain."),
        (name = "cluster", description = "Moving between nodes with a single-use ticket."),
        (name = "web", description = "The browser client."),
    ),
)]
struct ApiDoc;

/// The description as JSON, built once.
pub(crate) fn document() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| {
        let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
        optional_bodies(&mut doc);
        serde_json::to_string_pretty(&doc).unwrap_or_default()
    })
}

/// An optional body (`request_body = Option<T>`) is `T`, not required;
/// utoipa also writes it as "`T` or JSON null", which the API refuses.
fn optional_bodies(doc: &mut serde_json::Value) {
    let Some(paths) = doc.get_mut("paths").and_then(|p| p.as_object_mut()) else { return };
    for operation in paths.values_mut().filter_map(|p| p.as_object_mut()).flat_map(|p| p.values_mut()) {
        let Some(content) = operation.pointer_mut("/requestBody/content").and_then(|c| c.as_object_mut()) else {
            continue;
        };
        for media in content.values_mut() {
            let Some(options) = media.pointer("/schema/oneOf").and_then(|o| o.as_array()) else { continue };
            let null = serde_json::json!({ "type": "null" });
            if let [a, b] = options.as_slice()
                && (a == &null || b == &null)
            {
                media["schema"] = if a == &null { b.clone() } else { a.clone() };
            }
        }
    }
}

/// The OpenAPI 3.1 description of this API.
///
/// No token needed.
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    tag = "node",
    operation_id = "openapi",
    security(()),
    responses((status = 200, description = "This document", content_type = "application/json", body = Object)),
)]
async fn openapi_json() -> Response {
    ([(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-cache")], document()).into_response()
}

/// The description's route; merged into the API's router.
pub(crate) fn routes() -> Router<Arc<ApiState>> {
    Router::new().route("/v1/openapi.json", get(openapi_json))
}
