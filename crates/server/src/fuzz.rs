//! Entry points for the fuzz targets in `fuzz/` (target `signalling_json`);
//! not part of tutti's API, and not stable. Compiled only with the
//! `fuzzing` feature (the fuzz crate turns it on).
//!
//! [`signalling`] parses bytes as every JSON body and WebSocket message the
//! API takes, and as an access token. [`Api`] is the whole REST API and the
//! WebSocket message handler over a server state with no sockets and no
//! threads: requests go straight into the router.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use tower::ServiceExt as _;

use crate::api::rooms::{CreateRoom, JoinRequest, UpdateParticipant};
use crate::api::state::ApiState;
use crate::api::ws::frames::Caller;
use crate::api::ws::{ClientMessage, handle};
use crate::auth::{Auth, Grant, unix_now};
use crate::media::MediaHandle;
use crate::room::{clean_name, valid_room_id};
use crate::{Config, ServerError};

/// The secret the fuzzing server signs with.
pub const SECRET: &str = "fuzzing secret, thirty-two bytes or more";

/// Parses `data` as each request body, each WebSocket message and a token.
pub fn signalling(data: &[u8]) {
    let _ = serde_json::from_slice::<CreateRoom>(data);
    let _ = serde_json::from_slice::<JoinRequest>(data);
    let _ = serde_json::from_slice::<UpdateParticipant>(data);
    let _ = serde_json::from_slice::<ClientMessage>(data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = valid_room_id(text);
        let name = clean_name(text);
        assert!(name.len() <= 64 && !name.chars().any(char::is_control), "a cleaned name is clean");
        if let Ok(auth) = Auth::new(SECRET) {
            let _ = auth.verify(text, unix_now());
            // Any grant that mints verifies to itself.
            let grant = Grant::participant(text, text.chars().take(32).collect::<String>());
            if let Ok(token) = auth.mint(&grant, Duration::from_secs(60), unix_now()) {
                assert_eq!(auth.verify(&token, unix_now()).ok(), Some(grant), "a minted token verifies");
            }
            let grant = Grant::participant("room", text.chars().take(128).collect::<String>());
            if let Ok(token) = auth.mint(&grant, Duration::from_secs(60), unix_now()) {
                assert_eq!(auth.verify(&token, unix_now()).ok(), Some(grant), "a minted token verifies");
            }
        }
    }
}

/// Which token a fuzzed request carries.
#[derive(Debug, Clone, Copy)]
pub enum Token<'a> {
    /// None at all.
    None,
    /// A valid admin token for every room.
    Admin,
    /// A valid participant token for one room.
    Participant(&'a str),
    /// A valid listen-only token for one room.
    Listener(&'a str),
    /// An expired participant token for one room.
    Expired(&'a str),
    /// These bytes, as the token.
    Raw(&'a str),
}

/// The REST API and WebSocket handler over a state with no sockets.
pub struct Api {
    runtime: tokio::runtime::Runtime,
    api: Arc<ApiState>,
    router: Router,
    auth: Auth,
}

impl Api {
    /// A fresh API (tokens under [`SECRET`], no join rate limit, rooms of at most 4).
    pub fn new() -> Result<Self, ServerError> {
        let mut cfg = Config::default();
        cfg.auth.secret = SECRET.to_owned();
        cfg.limits.join_rate_per_second = 0.0;
        cfg.room.max_participants = 4;
        cfg.max_rooms = 8;
        let setup = |e: &dyn std::fmt::Display| ServerError::Setup(e.to_string());
        let media = MediaHandle::detached(SocketAddr::from(([127, 0, 0, 1], 9)))?;
        let rooms = Arc::new(crate::server::rooms_from(&cfg)?);
        let auth = crate::server::auth_from(&cfg)?;
        let outputs = Arc::new(crate::outputs::Outputs::disabled());
        let node = Arc::new(crate::cluster::node::Node::new(cfg, None, rooms, Arc::new(media), outputs));
        let session = Arc::new(crate::session::sessions::Sessions::new(node, auth.is_some()));
        let api = Arc::new(ApiState::new(session, auth));
        let router = crate::api::router(api.clone());
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().map_err(|e| setup(&e))?;
        Ok(Self { runtime, api, router, auth: Auth::new(SECRET).map_err(|e| setup(&e))? })
    }

    fn token(&self, token: Token<'_>) -> Option<String> {
        let mint = |g: Grant, ttl: u64, now: u64| self.auth.mint(&g, Duration::from_secs(ttl), now).ok();
        match token {
            Token::None => None,
            Token::Admin => mint(Grant::admin("fuzz"), 60, unix_now()),
            Token::Participant(room) => mint(Grant::participant(room, "p"), 60, unix_now()),
            Token::Listener(room) => mint(Grant::listener(room, "l"), 60, unix_now()),
            Token::Expired(room) => mint(Grant::participant(room, "p"), 60, unix_now().saturating_sub(120)),
            Token::Raw(raw) => Some(raw.to_owned()),
        }
    }

    /// One request; returns its status. Panics only on a bug (a 500).
    pub fn request(&self, method: &str, path: &str, token: Token<'_>, content_type: &str, body: &[u8]) -> u16 {
        let mut builder = axum::http::Request::builder().method(method).uri(path);
        if let Some(t) = self.token(token) {
            builder = builder.header("authorization", format!("Bearer {t}"));
        }
        if !content_type.is_empty() {
            builder = builder.header("content-type", content_type);
        }
        let Ok(mut request) = builder.body(Body::from(body.to_vec())) else { return 0 };
        request.extensions_mut().insert(ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 50_000))));
        let router = self.router.clone();
        let Ok(response) = self.runtime.block_on(router.oneshot(request));
        let status = response.status().as_u16();
        assert!(status != 500, "{method} {path}: the API failed (500)");
        status
    }

    /// One WebSocket text message from a client holding `token`'s grant in
    /// `room` (which must exist); returns the reply, if any.
    pub fn ws_message(&self, room: &str, token: Token<'_>, me: &mut Option<u64>, text: &str) -> Option<String> {
        let mut kinds = crate::room::EventKinds::ALL;
        let state = self.api.rooms.get(room).ok()?;
        let grant = self.auth.verify(&self.token(token)?, unix_now()).ok()?;
        let caller = Caller { grant, client: SocketAddr::from(([127, 0, 0, 1], 50_001)) };
        let reply = self.runtime.block_on(handle(&self.api, &state, &caller, me, &mut kinds, text))?;
        match reply {
            axum::extract::ws::Message::Text(t) => Some(t.as_str().to_owned()),
            _ => None,
        }
    }

    /// Removes every room and participant, as if the server had just started.
    pub fn reset(&self) {
        let rooms = &self.api.rooms;
        self.api.session.apply(rooms.clear());
        rooms.expire_pending(Instant::now() + Duration::from_secs(3600), Duration::ZERO);
        let (registered, pending) = rooms.registry_sizes();
        assert!(registered == 0 && pending == 0, "every peer is forgotten with its room");
        assert_eq!(rooms.participants(), 0);
    }
}
