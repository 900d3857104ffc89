//! # tutti-server: rooms people can join
//!
//! Joins the mixing core ([`tutti_mix`]) and the WebRTC transport
//! ([`tutti_rtc`]) into a server:
//!
//! ```text
//! api-N (tokio, axum)  POST /v1/rooms/{room}/participants, or a WebSocket `join`:
//!                      SDP offer ─► Acceptor::accept ─► peer parked until its first ICE check ─► answer
//! io-N threads         one socket each on the media port (SO_REUSEPORT), recvmmsg
//!                      ─► Mux (ICE/DTLS/SRTP; adopts the parked peers its checks reach)
//!                      ─► packets batched into each room's inbox
//! mix-clock thread     every 20 ms: each room's inbox ─► jitter buffers ─► Room::tick on the
//!                      mix-N pool ─► one O(K) result per room to every io thread
//! io-N threads         each sends its own peers their mix (SRTP) ─► sendmmsg
//! ```
//!
//! No lock is taken per packet: an I/O thread owns its peers outright and
//! appends to a room's inbox once per loop turn; the clock owns the mixing.
//! The API touches a room (join, mute, leave) under that room's lock.
//! Room events (joined, left, talking, muted) are pushed to WebSocket
//! subscribers. The API also serves a browser client at `/` (`web`): a
//! page that joins through that WebSocket.
//!
//! Nobody joins a room without a token for it ([`auth`]: JWT, HS256, room,
//! identity, permissions, expiry); room management needs an admin token; a
//! listen-only participant's audio is dropped as it arrives. Every input a
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
pub mod auth;
pub mod client;
mod clock;
mod config;
#[doc(hidden)]
pub mod fuzz;
mod http;
mod io;
mod limit;
pub mod metrics;
pub mod ops;
mod state;
mod web;
mod ws;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use config::{AuthConfig, Config, ConfigError, Limits, LogConfig, RoomDefaults};
use tutti_mix::MixPool;
use tutti_rtc::Acceptor;

use crate::state::{RoomEvent, Shared};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A socket could not be bound, or a thread started.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The media transport, the mixer or the token secret could not be set up.
    #[error("{0}")]
    Setup(String),
}

/// What a running server holds, for leak checks (see [`Server::resources`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resources {
    /// Rooms.
    pub rooms: usize,
    /// Participants, over all rooms.
    pub participants: usize,
    /// Peers registered (joined, adopted by an I/O thread or not).
    pub registered_peers: usize,
    /// Joined peers whose first ICE check has not arrived yet.
    pub pending_peers: usize,
    /// Peers held by the I/O threads.
    pub io_peers: u64,
    /// Client addresses forwarded between I/O threads.
    pub forwarded_addresses: usize,
    /// Open WebSocket sessions.
    pub ws_sessions: usize,
    /// Client addresses the join rate limiter tracks.
    pub rate_limited_addresses: usize,
}

/// How much lower than the media threads `tutti serve` runs the API threads
/// (see [`lower_thread_priority`]).
pub const API_THREAD_NICE: i32 = 5;

/// Lowers the calling thread's scheduling priority by `nice` (Linux: per
/// thread). Give it to the threads that serve the API (the tokio runtime's
/// `on_thread_start`): under a flood of requests the kernel then runs the
/// media threads (`io-N`, `mix-clock`, `mix-N`) first, and calls in
/// progress keep their timing. Raising priority needs privileges;
/// lowering does not.
pub fn lower_thread_priority(nice: i32) -> std::io::Result<()> {
    let tid = rustix::thread::gettid();
    let current = rustix::process::getpriority_process(Some(tid))?;
    rustix::process::setpriority_process(Some(tid), current.saturating_add(nice)).map_err(std::io::Error::from)
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServerError {
    let what = what.into();
    move |source| ServerError::Io { what, source }
}

/// Media counters of a running server (see [`Server::media_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MediaStats {
    /// UDP datagrams received.
    pub datagrams_in: u64,
    /// Bytes of them.
    pub bytes_in: u64,
    /// UDP datagrams sent.
    pub datagrams_out: u64,
    /// Bytes of them.
    pub bytes_out: u64,
    /// Datagrams that belonged to no peer (garbage, strays), dropped.
    pub unrouted: u64,
    /// Datagrams the OS refused to send.
    pub send_errors: u64,
    /// Peers whose ICE or DTLS failed.
    pub peers_failed: u64,
    /// Peers removed because nothing arrived from them for the peer timeout.
    pub peers_timed_out: u64,
    /// Peers held by the I/O threads now.
    pub peers: u64,
    /// Audio packets of listen-only participants, dropped on arrival.
    pub listen_only_dropped: u64,
}

/// A running server. Dropping it without [`Server::shutdown`] leaves its
/// threads running until the process exits.
pub struct Server {
    http: SocketAddr,
    media: SocketAddr,
    metrics: Option<SocketAddr>,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    http_task: tokio::task::JoinHandle<()>,
    metrics_task: Option<tokio::task::JoinHandle<()>>,
    stop_http: tokio::sync::watch::Sender<bool>,
}

impl Server {
    /// Binds the sockets and starts the API, the I/O threads and the mixer
    /// clock. Must be called within a tokio runtime.
    pub async fn start(cfg: Config) -> Result<Self, ServerError> {
        cfg.validate()?;
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let io_threads = if cfg.io_threads == 0 { cores } else { cfg.io_threads };
        let sockets = io::bind_sockets(cfg.media, io_threads, cfg.socket_buffer_bytes)
            .map_err(io_err(format!("binding UDP {}", cfg.media)))?;
        let media = sockets[0].local_addr().map_err(io_err("reading the UDP address"))?;
        let advertise = cfg.advertise_addr(media);
        if advertise.ip().is_unspecified() {
            tracing::warn!(%advertise, "the media address is unspecified: set `advertise` to an address clients can reach");
        }
        let acceptor = Acceptor::new(advertise, cfg.peer_timeout()).map_err(|e| ServerError::Setup(e.to_string()))?;
        let pool = MixPool::new(cfg.mix_threads).map_err(|e| ServerError::Setup(e.to_string()))?;
        let shared = Arc::new(Shared::new(cfg.clone(), acceptor, pool)?);

        let listener =
            tokio::net::TcpListener::bind(cfg.http).await.map_err(io_err(format!("binding HTTP {}", cfg.http)))?;
        let http = listener.local_addr().map_err(io_err("reading the HTTP address"))?;
        let metrics_listener = match cfg.metrics_addr() {
            Some(addr) => {
                metrics::install().map_err(ServerError::Setup)?;
                Some(metrics::bind(addr).await.map_err(io_err(format!("binding metrics {addr}")))?)
            }
            None => None,
        };
        let metrics = match &metrics_listener {
            Some(l) => Some(l.local_addr().map_err(io_err("reading the metrics address"))?),
            None => None,
        };
        let (handles, mut threads) = io::spawn(&shared, sockets).map_err(io_err("starting the io threads"))?;
        let _ = shared.io.set(handles);
        threads.push(clock::spawn(shared.clone()).map_err(io_err("starting mix-clock"))?);
        let (stop_http, stopped) = tokio::sync::watch::channel(false);
        let metrics_task = metrics_listener.map(|l| tokio::spawn(metrics::serve(l, stopped.clone())));
        let app = api::router(shared.clone());
        let limits = http::HttpLimits {
            max_connections: cfg.limits.max_connections,
            header_timeout: Duration::from_secs_f64(cfg.limits.http_header_timeout_seconds),
        };
        let http_task = tokio::spawn(http::serve(listener, app, limits, stopped));
        tracing::info!(
            %http, %media, %advertise, ?metrics, io_threads, mix_threads = shared.pool.threads(), "tutti is serving"
        );
        Ok(Self { http, media, metrics, shared, threads, http_task, metrics_task, stop_http })
    }

    /// The bound HTTP address.
    pub fn http_addr(&self) -> SocketAddr {
        self.http
    }

    /// The bound UDP media address.
    pub fn media_addr(&self) -> SocketAddr {
        self.media
    }

    /// The bound metrics address (`GET /metrics`), when metrics are on.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics
    }

    /// Ticks that ran late enough to be skipped (the mixer fell behind).
    pub fn tick_overruns(&self) -> u64 {
        self.shared.overruns.load(Ordering::Relaxed)
    }

    /// The media counters, summed over the I/O threads.
    pub fn media_stats(&self) -> MediaStats {
        let mut m = MediaStats::default();
        for io in self.shared.io() {
            let c = &io.counters;
            let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
            let s = *state::lock(&c.mux);
            m.datagrams_in += s.datagrams_in;
            m.bytes_in += s.bytes_in;
            m.datagrams_out += s.datagrams_out;
            m.bytes_out += s.bytes_out;
            m.unrouted += s.unrouted + get(&c.unknown_ufrag);
            m.send_errors += get(&c.send_errors);
            m.peers_failed += s.ice_failures + s.dtls_failures + s.lost;
            m.peers_timed_out += s.timed_out;
            // Closed peers leave the mux in the turn they close, before it publishes.
            m.peers += s.connecting + s.connected;
            m.listen_only_dropped += get(&c.listen_only_dropped);
        }
        m
    }

    /// Participants in all rooms.
    pub fn participants(&self) -> usize {
        self.shared.participants.load(Ordering::Relaxed)
    }

    /// A token for `grant`, valid for `ttl`, signed with this server's
    /// secret (configured or generated); `None` when auth is disabled or the
    /// grant fails [`auth::Grant::check`].
    pub fn mint_token(&self, grant: &auth::Grant, ttl: Duration) -> Option<String> {
        self.shared.auth.as_ref().and_then(|a| a.mint(grant, ttl, auth::unix_now()).ok())
    }

    /// Whether the token secret was generated at start (none configured).
    pub fn secret_generated(&self) -> bool {
        self.shared.auth.as_ref().is_some_and(auth::Auth::is_generated)
    }

    /// What the server holds now.
    pub fn resources(&self) -> Resources {
        let (registered_peers, pending_peers, forwarded_addresses) = {
            let reg = state::lock(&self.shared.registry);
            (reg.homes.len(), reg.pending.len(), reg.foreign.len())
        };
        Resources {
            rooms: self.shared.all_rooms().len(),
            participants: self.participants(),
            registered_peers,
            pending_peers,
            io_peers: self.media_stats().peers,
            forwarded_addresses,
            ws_sessions: self.shared.ws_sessions.load(Ordering::Relaxed),
            rate_limited_addresses: self.shared.joins.tracked(),
        }
    }

    /// Stops taking joins, tells every WebSocket subscriber, closes every
    /// peer (they get DTLS close_notify), stops the threads and the API.
    pub async fn shutdown(self) {
        self.shared.stopping.store(true, Ordering::Relaxed);
        for room in self.shared.all_rooms() {
            room.publish(RoomEvent::Shutdown { message: "the server is shutting down".to_owned() });
        }
        // Give the WebSocket sessions a moment to pass the word on.
        let told = Instant::now() + Duration::from_secs(1);
        while self.shared.ws_sessions.load(Ordering::Relaxed) > 0 && Instant::now() < told {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for io in self.shared.io() {
            io.send(io::IoCommand::Shutdown);
        }
        let _ = self.stop_http.send(true);
        let _ = self.http_task.await;
        if let Some(task) = self.metrics_task {
            let _ = task.await;
        }
        for t in self.threads {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        tracing::info!("tutti stopped");
    }
}

/// The tokio runtime the API runs on, its threads named by role so
/// per-thread CPU can be told apart: `api-0` … `api-{workers-1}` for the
/// workers, `api-blocking` for blocking-pool threads (which come and go;
/// their CPU is summed under that one name).
pub fn api_runtime(workers: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let workers = workers.max(1);
    // tokio starts its workers first, on the blocking pool, when the runtime
    // is built: the first `workers` names go to them.
    let spawned = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name_fn(move || match spawned.fetch_add(1, Ordering::Relaxed) {
            n if n < workers => format!("api-{n}"),
            _ => "api-blocking".to_owned(),
        })
        // Below the media threads: a join flood must not cost frames.
        .on_thread_start(|| {
            let _ = lower_thread_priority(API_THREAD_NICE);
        })
        .enable_all()
        .build()
}
