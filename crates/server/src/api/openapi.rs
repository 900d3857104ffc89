//! `GET /v1/openapi.json`: the HTTP API described as OpenAPI 3.1, generated
//! from the handlers' `#[utoipa::path]` annotations and the request and
//! response types' `ToSchema` derives (utoipa), so the description moves
//! with the code. No token needed: it says what the API takes, nothing about
//! what a server holds.
//!
//! ```text
//! handler  #[utoipa::path(post, path = "/v1/rooms", responses(...))]  ─┐
//! bodies   #[derive(ToSchema)] CreateRoom, RoomSummary, …              ─┼─► ApiDoc::openapi() ─► JSON, built once
//! here     shapes the handlers build with json! (described only)      ─┘
//! ```
//!
//! `crates/server/tests/openapi.rs` checks it against the routes the router
//! is built from (a route without a description fails, and so does a
//! description without a route) over real HTTP, and against
//! `docs/api/openapi.json`, the copy a reviewer sees change in a diff.

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

use super::ApiState;

/// The version of the room WebSocket's protocol (`?protocol=`, and the
/// `protocol` field of its first message). Raised when a message changes
/// in a way an existing client would misread.
pub(crate) const WS_PROTOCOL: u32 = 1;

/// Every API error: an HTTP status with this JSON body. `code` is stable
/// (clients branch on it; see docs/api/errors.md), `message` is a sentence
/// for people.
#[derive(ToSchema)]
#[schema(example = json!({"code": "room_not_found", "message": "no room 'demo'"}))]
pub(crate) struct ErrorBody {
    /// The stable, machine-readable code (`token_missing`, `room_not_found`, …).
    #[allow(dead_code)] // described, never built: ApiError renders this shape
    code: String,
    /// What went wrong, for a person.
    #[allow(dead_code)]
    message: String,
}

/// Shapes the handlers build with `serde_json::json!`, described here (the
/// handlers' code stays as it is; the test checks real answers against them).
#[allow(dead_code)] // described, never built
pub(crate) mod shapes {
    use utoipa::ToSchema;

    /// A participant as the room shows it.
    #[derive(ToSchema)]
    pub(in crate::api) struct Member {
        id: u64,
        name: String,
        /// The identity (`sub`) of the token it joined with.
        identity: String,
        talking: bool,
        muted: bool,
        /// It may not speak (its token lacks `speak`, or an admin revoked it).
        listen_only: bool,
        /// Whether ICE and DTLS are up.
        connected: bool,
        /// Its hand is raised.
        hand: bool,
        /// It joined with an admin token for the room.
        admin: bool,
    }

    /// `GET /v1/rooms/{room}` for a room on this node.
    #[derive(ToSchema)]
    pub(in crate::api) struct RoomDetail {
        room: crate::api::rooms::RoomSummary,
        participants: Vec<Member>,
        /// The ids of the last tick's selected speakers.
        speakers: Vec<u64>,
        /// How many identities are banned from the room now.
        bans: usize,
    }

    /// Where a room held by another node of the cluster is.
    #[derive(ToSchema)]
    pub(in crate::api) struct RoomElsewhere {
        /// The room's id and its node.
        room: RoomRef,
        /// The node holding it.
        node: String,
        /// That node's API URL.
        api_url: String,
    }

    /// A room's id and node.
    #[derive(ToSchema)]
    pub(in crate::api) struct RoomRef {
        id: String,
        node: String,
    }

    /// `GET /v1/rooms/{room}`: the room here, or (cluster mode) where it is.
    #[derive(ToSchema)]
    #[serde(untagged)]
    pub(in crate::api) enum RoomLookup {
        Here(RoomDetail),
        Elsewhere(RoomElsewhere),
    }

    /// A room of the cluster's directory held by another node (`GET /v1/rooms`, cluster mode).
    #[derive(ToSchema)]
    pub(in crate::api) struct RemoteRoom {
        id: String,
        /// The node holding it (null: none holds it now).
        node: Option<String>,
        /// That node's API URL.
        api_url: Option<String>,
    }

    /// An entry of `GET /v1/rooms`: a room here with its figures, or one elsewhere.
    #[derive(ToSchema)]
    #[serde(untagged)]
    pub(in crate::api) enum RoomListEntry {
        Here(crate::api::rooms::RoomSummary),
        Elsewhere(RemoteRoom),
    }

    /// A room's voice processing.
    #[derive(ToSchema)]
    pub(in crate::api) struct RoomVoice {
        /// `auto`, `on` or `off`.
        noise_suppression: String,
        /// Loudness normalisation on for the room.
        loudness: bool,
    }

    /// `PATCH /v1/rooms/{room}`: the room as it is now.
    #[derive(ToSchema)]
    pub(in crate::api) struct RoomChanged {
        #[serde(flatten)]
        room: crate::api::rooms::RoomSummary,
        /// How many participants `mute_all` muted.
        muted: usize,
        voice: RoomVoice,
    }

    /// A participant's voice processing.
    #[derive(ToSchema)]
    pub(in crate::api) struct ParticipantVoice {
        /// Noise suppressed while they speak (their setting, else the room's).
        noise_suppression: bool,
        /// Loudness normalised while they speak (their setting, else the room's).
        loudness: bool,
        /// The normaliser's current gain, dB.
        loudness_gain_db: f32,
    }

    /// `PATCH /v1/rooms/{room}/participants/{id}` (JSON): the participant now.
    #[derive(ToSchema)]
    pub(in crate::api) struct ParticipantChanged {
        id: u64,
        muted: bool,
        /// The gain set by this request (null: unchanged).
        gain: Option<f32>,
        /// It may speak.
        speak: bool,
        hand: bool,
        voice: ParticipantVoice,
    }

    /// `GET /v1/rooms/{room}/ice-servers`.
    #[derive(ToSchema)]
    pub(in crate::api) struct IceServers {
        ice_servers: Vec<IceServer>,
    }

    /// One entry of `RTCPeerConnection({iceServers})`.
    #[derive(ToSchema)]
    pub(in crate::api) struct IceServer {
        urls: Vec<String>,
        /// TURN only: the REST username (`expiry:user`).
        username: Option<String>,
        /// TURN only: the credential for `username`.
        credential: Option<String>,
    }

    /// `GET /v1/node` and `POST /v1/node/drain`.
    #[derive(ToSchema)]
    pub(in crate::api) struct NodeSummary {
        /// The node's id (cluster mode; null on a single node).
        node: Option<String>,
        draining: bool,
        /// When the drain ends at the latest, Unix seconds (null: not draining).
        drain_deadline: Option<u64>,
        rooms: usize,
        participants: usize,
    }

    /// A recording as `GET …/recording` shows it (`{"active": false}` alone when none ran).
    #[derive(ToSchema)]
    pub(in crate::api) struct Recording {
        /// Whether it is still writing.
        active: bool,
        /// The file's name in the recordings directory.
        file: Option<String>,
        /// Unix seconds.
        started_at: Option<u64>,
        bytes: Option<u64>,
        frames: Option<u64>,
        /// Ticks nobody was heard in, written as silence.
        gap_frames: Option<u64>,
        /// Frames the writer could not keep up with.
        dropped_frames: Option<u64>,
        /// `DELETE` only: the writer is still closing the file.
        finishing: Option<bool>,
    }

    /// `DELETE …/recording`: the finished file.
    #[derive(ToSchema)]
    pub(in crate::api) struct RecordingFinished {
        file: String,
        bytes: u64,
        duration_seconds: f64,
        /// `stopped`, `limit`, `quota` or `error`.
        reason: String,
        /// What failed, for `error`.
        error: Option<String>,
    }

    /// `DELETE …/recording`: finished, or still closing after 5 s.
    #[derive(ToSchema)]
    #[serde(untagged)]
    pub(in crate::api) enum RecordingStopped {
        Finished(RecordingFinished),
        Finishing(Recording),
    }

    /// A room's RTP out.
    #[derive(ToSchema)]
    pub(in crate::api) struct RtpOut {
        /// The receiver, `ip:port`.
        address: String,
        ssrc: u32,
        /// Always 111 (Opus).
        payload_type: u8,
        /// The SDP a receiver (ffmpeg, a broadcast encoder) opens.
        sdp: String,
        packets: u64,
        bytes: u64,
        /// Sends that failed.
        failed: u64,
    }
}

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
        super::healthz,
        super::readyz,
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
        super::cluster::enter,
        super::recording::start,
        super::recording::show,
        super::recording::stop,
        super::rtp_out::start,
        super::rtp_out::show,
        super::rtp_out::stop,
        super::node::status,
        super::node::drain,
        super::ice::ice_servers,
        super::invite::create_invite,
        super::web::index,
        super::web::app_js,
        super::web::style_css,
    ),
    components(schemas(ErrorBody)),
    modifiers(&Security),
    security(("bearer" = [])),
    tags(
        (name = "rooms", description = "Rooms: create, list, look, change, delete."),
        (name = "participants", description = "Joining (WHIP-style SDP or JSON), changing, leaving; ICE restart."),
        (name = "websocket", description = "The room socket: events and joining (docs/api/websocket.md)."),
        (name = "outputs", description = "Recording and RTP out."),
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
