//! # tutti-server: rooms people can join
//!
//! Joins the mixing core ([`tutti_mix`]) and the WebRTC transport
//! ([`tutti_rtc`]) into a server:
//!
//! ```text
//! HTTP (axum, tokio)   POST /v1/rooms/{room}/participants  SDP offer ─► Mux::accept_offer ─► answer
//! io-0 thread          UDP socket ─► Mux (ICE/DTLS/SRTP) ─► Room::push_packet
//! mix-clock thread     every 20 ms: Room::tick on the mix-N pool ─► Mux::send_audio per participant
//! ```
//!
//! One lock guards the mux and the rooms; the threads hold it briefly. That
//! is simple and correct for rooms of hundreds; sharding peers over several
//! I/O threads with batched syscalls is the next step for thousands.
//!
//! Prometheus metrics (per-thread CPU among them) are served on their own
//! address, `GET /metrics`: see [`metrics`].

mod api;
pub mod client;
mod engine;
pub mod metrics;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

use tutti_mix::MixPool;
use tutti_rtc::Mux;

use crate::engine::{Engine, Shared};

/// Server settings. `Config::default()` is what `tutti serve` runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// HTTP API address. Default 127.0.0.1:8080.
    pub http: SocketAddr,
    /// UDP media address, one port for every peer. Default 127.0.0.1:4000.
    pub media: SocketAddr,
    /// Address advertised in ICE candidates. Default: the media address.
    pub advertise: Option<SocketAddr>,
    /// Mixer threads (`mix-0`, …); 0 = one per core. Default 0.
    pub mix_threads: usize,
    /// Largest request body accepted, in bytes. Default 64 KiB.
    pub max_body_bytes: usize,
    /// Participants per room unless the room says otherwise. Default 10 000.
    pub max_participants: usize,
    /// Speakers mixed per tick unless the room says otherwise. Default 5.
    pub max_speakers: usize,
    /// Where `GET /metrics` (Prometheus) is served; `None` turns metrics off
    /// entirely (nothing recorded). Default 127.0.0.1:9464.
    pub metrics: Option<SocketAddr>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            http: SocketAddr::from(([127, 0, 0, 1], 8080)),
            media: SocketAddr::from(([127, 0, 0, 1], 4000)),
            advertise: None,
            mix_threads: 0,
            max_body_bytes: 64 * 1024,
            max_participants: 10_000,
            max_speakers: 5,
            metrics: Some(SocketAddr::from(([127, 0, 0, 1], 9464))),
        }
    }
}

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
    /// The media transport or the mixer could not be set up.
    #[error("{0}")]
    Setup(String),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServerError {
    let what = what.into();
    move |source| ServerError::Io { what, source }
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
    /// Binds the sockets and starts the API, the I/O thread and the mixer clock.
    /// Must be called within a tokio runtime.
    pub async fn start(cfg: Config) -> Result<Self, ServerError> {
        let socket = engine::bind_media(cfg.media).map_err(io_err(format!("binding UDP {}", cfg.media)))?;
        let media = socket.local_addr().map_err(io_err("reading the UDP address"))?;
        let advertise = cfg.advertise.unwrap_or(media);
        let mux = Mux::new(advertise).map_err(|e| ServerError::Setup(e.to_string()))?;
        let pool = MixPool::new(cfg.mix_threads).map_err(|e| ServerError::Setup(e.to_string()))?;
        let room_defaults = api::default_room_config(cfg.max_participants, cfg.max_speakers);
        room_defaults.validate().map_err(|e| ServerError::Setup(e.to_string()))?;
        let engine = Engine { mux, rooms: Default::default(), peer_room: Default::default() };
        let shared = Arc::new(Shared::new(engine, socket, pool, room_defaults));

        let listener =
            tokio::net::TcpListener::bind(cfg.http).await.map_err(io_err(format!("binding HTTP {}", cfg.http)))?;
        let http = listener.local_addr().map_err(io_err("reading the HTTP address"))?;
        let metrics_listener = match cfg.metrics {
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
        let threads = vec![
            engine::spawn_io(shared.clone()).map_err(io_err("starting io-0"))?,
            engine::spawn_clock(shared.clone()).map_err(io_err("starting mix-clock"))?,
        ];
        let (stop_http, mut stopped) = tokio::sync::watch::channel(false);
        let metrics_task = metrics_listener.map(|l| tokio::spawn(metrics::serve(l, stopped.clone())));
        let app = api::router(shared.clone(), cfg.max_body_bytes);
        let http_task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
                tracing::error!(error = %e, "HTTP server failed");
            }
        });
        tracing::info!(%http, %media, %advertise, ?metrics, mix_threads = shared.pool.threads(), "tutti is serving");
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

    /// Stops taking joins, closes every peer (they get DTLS close_notify),
    /// stops the threads and the API.
    pub async fn shutdown(self) {
        self.shared.stopping.store(true, Ordering::Relaxed);
        let out = {
            let mut engine = self.shared.engine();
            let peers: Vec<_> = engine.peer_room.keys().copied().collect();
            for peer in peers {
                engine.remove_peer(peer);
            }
            engine.take_transmits()
        };
        self.shared.send(out);
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
        .enable_all()
        .build()
}
