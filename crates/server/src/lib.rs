//! # tutti-server: rooms people can join
//!
//! Joins the mixing core ([`tutti_mix`]) and the WebRTC transport
//! ([`tutti_rtc`]) into a server. The folders are the layers, and imports
//! only go down (checked file by file by `tests/layers.rs`):
//!
//! ```text
//! api, sip     the control planes: HTTP (REST routes, the room WebSocket, the page: thin
//!   │          handlers) and the SIP edge (a call joins its room); neither uses the other
//! session      where a participant joins (one join for REST, WebSocket, RTP in and SIP),
//!   │          leaves, moves, is muted, granted speech, kicked, banned
//! cluster      this node in a cluster: where a room lives, redirect tickets, spans,
//!   │          rosters, control messages, load reports, drain and hand-over
//! refusal      why a request was refused (status class, stable code, sentence)
//! media        the real-time plane (io-N, mix-clock, rtp-in), reached through MediaHandle
//! outputs      recordings, RTP out, webhooks: the leaves, and their wiring above them
//! room         the domain: rooms, members, events, the stage; no sockets, no threads
//! config, auth, metrics, limit, cidr, ice, priority, sync: leaves
//! ```
//!
//! `server` wires them together.
//!
//! The packet path:
//!
//! ```text
//! api      POST /v1/rooms/{room}/participants, or a WebSocket `join` ─► session: Sessions::join
//!          (checks, placement) ─► MediaHandle::accept ─► Rooms::join: the peer waits for its first ICE check ─► answer
//! media    io-N threads: one socket each on the media port (SO_REUSEPORT), recvmmsg
//!          ─► Mux (ICE/DTLS/SRTP) ─► unknown ufrag? Rooms::claim ─► Adopt | Forward | Unknown
//!          ─► audio packets batched into each Room's inbox (one lock per room per loop turn)
//! media    mix-clock every 20 ms: Room::tick for every room on the mix-N pool
//!          (jitter buffers ─► top-K speakers ─► K+1 shared encodes) ─► one O(K) RoomMix per room
//! media    io-N threads: each sends its own peers their feed (RTP, SRTP) ─► sendmmsg
//! ```
//!
//! No lock is taken per packet: an I/O thread owns its peers outright and
//! appends to a room's inbox once per loop turn; the clock owns the mixing.
//! Room operations (`room`) return effects ("close peer P on I/O thread
//! T") instead of reaching into the media plane; whoever called carries
//! them out. Room events (joined, left, talking, muted) are pushed to
//! WebSocket subscribers. The API also serves a browser client at `/`: a
//! page that joins through that WebSocket.
//!
//! In cluster mode (`[cluster]` in [`Config`], off without a Redis URL)
//! the node joins a room directory shared with other nodes
//! ([`tutti_cluster`]): a request for a room hosted here is served as on a
//! single node, without Redis; any other is placed by the directory and
//! either hosted here or answered with a `307` to the owning node, carrying
//! a single-use ticket that stands in for the token there (`cluster`).
//! A room this node was fenced out of is closed; SIGTERM marks the node
//! draining first.
//!
//! Nobody joins a room without a token for it ([`auth`]: JWT, HS256, room,
//! identity, permissions, expiry); room management needs an admin token; a
//! listen-only participant's audio is dropped as it arrives (until an admin
//! grants it speech: `room::stage`). Every input a
//! client controls has a limit (`[limits]` in [`Config`]): joins per
//! address, connections, header and request time, WebSocket message size,
//! rate and idle time, request body, rooms and participants.
//!
//! ```no_run
//! # async fn run() -> Result<(), tutti_server::ServerError> {
//! let server = tutti_server::Server::start(tutti_server::Config::default()).await?;
//! println!("API on http://{}", server.http_addr());
//! if let Some(token) = server.mint_token(&tutti_server::auth::Grant::admin("me"), std::time::Duration::from_secs(3600)) {
//!     println!("admin token: {token}");
//! }
//! server.shutdown().await;
//! # Ok(())
//! # }
//! ```

mod api;
pub mod attributes;
pub mod auth;
mod cidr;
mod cluster;
mod config;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzz;
pub mod ice;
mod limit;
mod media;
pub mod metrics;
pub mod outputs;
mod priority;
mod refusal;
mod room;
mod server;
mod session;
mod sip;
mod sync;

pub use config::{
    AuthConfig, AuthKey, Challenge, Config, ConfigError, DEV_SECRET, LOOPBACK_ORIGINS, Limits, LogConfig,
    OutboundConfig, RecordingSettings, RoomDefaults, RtpInConfig, RtpOutSettings, SrtpMode, TrunkConfig,
    WebhookSettings,
};
pub use media::MediaStats;
pub use room::SpatialMode;
pub use server::{API_THREAD_NICE, DrainEnd, Resources, Server, ServerError, api_runtime, lower_thread_priority};
