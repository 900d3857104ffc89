//! Starting and stopping a server: the one place that wires the room
//! domain, the media plane and the API together.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::api::{self, state::ApiState};
use crate::auth::{self, Auth};
use crate::cluster::node::Node;
use crate::media::{MediaConfig, MediaError, MediaHandle, MediaStats};
use crate::metrics;
use crate::room::Rooms;
use crate::session::sessions::Sessions;
use crate::{Config, ConfigError};

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

impl From<MediaError> for ServerError {
    fn from(e: MediaError) -> Self {
        match e {
            MediaError::Io { what, source } => Self::Io { what, source },
            MediaError::Setup(s) => Self::Setup(s),
        }
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServerError {
    let what = what.into();
    move |source| ServerError::Io { what, source }
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

/// The token verifier `cfg` asks for: none (auth disabled), a generated
/// secret, or the configured one.
pub(crate) fn auth_from(cfg: &Config) -> Result<Option<Auth>, ServerError> {
    let setup = |e: &dyn std::fmt::Display| ServerError::Setup(e.to_string());
    if cfg.auth.disabled {
        tracing::warn!(http = %cfg.http, "auth is disabled: anyone who reaches the API may join any room (loopback only)");
        Ok(None)
    } else if cfg.auth.secret.is_empty() && cfg.auth.keys.is_empty() {
        Ok(Some(Auth::generate().map_err(|e| setup(&e))?))
    } else {
        Ok(Some(Auth::with_keys(&cfg.auth.secret, &cfg.auth.key_pairs()).map_err(|e| setup(&e))?))
    }
}

/// The rooms `cfg` asks for.
pub(crate) fn rooms_from(cfg: &Config) -> Result<Rooms, ServerError> {
    let rooms = Rooms::new(room_defaults(cfg), cfg.max_rooms, cfg.max_participants)
        .map_err(|e| ServerError::Setup(e.to_string()))?;
    // The sounds `[playback]` names, read once here: a missing or bad file stops the start.
    rooms.set_playback_defaults(crate::api::playback::default_sounds(&cfg.playback).map_err(ServerError::Setup)?);
    Ok(rooms)
}

/// The mixer's settings for a new room, from `[room]`.
fn room_defaults(cfg: &Config) -> tutti_mix::RoomConfig {
    tutti_mix::RoomConfig {
        max_participants: cfg.room.max_participants,
        max_speakers: tutti_mix::SpeakerLimit::Top(cfg.room.max_speakers),
        passthrough: cfg.room.passthrough,
        dtx: cfg.room.dtx,
        encoder: tutti_mix::EncoderConfig {
            complexity: i32::from(cfg.room.complexity),
            speaker_complexity: i32::from(cfg.room.speaker_complexity),
            ..tutti_mix::EncoderConfig::default()
        },
        // Validated with the config: "auto", "on" or "off".
        noise_suppression: tutti_mix::NoiseSuppression::parse(&cfg.room.noise_suppression).unwrap_or_default(),
        loudness: cfg.room.loudness,
        spatial: cfg.room.spatial.is_spatial(),
        binaural: cfg.room.spatial == crate::room::SpatialMode::Binaural,
        loudness_target_dbfs: cfg.room.loudness_target_dbfs as f32,
        ..tutti_mix::RoomConfig::default()
    }
}

/// Binds the node's mesh socket: at `cluster.mesh_addr`, or by default at
/// the IP of `cluster.media_addr` (the address other nodes reach this one
/// at) on a port the system picks; when that IP is not this machine's (an
/// address behind a NAT), at the media socket's IP. An unspecified bound IP
/// is published as `cluster.media_addr`'s.
fn bind_mesh(cfg: &Config, cluster: &tutti_cluster::ClusterConfig) -> Result<crate::media::mesh::Mesh, ServerError> {
    use crate::media::mesh::Mesh;
    let advertised = cluster.media_addr.parse::<SocketAddr>().map_or(cfg.media.ip(), |a| a.ip());
    let secret = cluster_secret(cfg);
    let id = &cluster.node_id;
    let mut mesh = if let Ok(bind) = cluster.mesh_addr.parse::<SocketAddr>() {
        Mesh::bind(bind, id, secret, advertised).map_err(io_err(format!("binding cluster.mesh_addr {bind}")))?
    } else {
        let first = SocketAddr::new(advertised, 0);
        Mesh::bind(first, id, secret, advertised).or_else(|_| {
            let second = SocketAddr::new(cfg.media.ip(), 0);
            Mesh::bind(second, id, secret, advertised).map_err(io_err(format!("binding the mesh socket at {second}")))
        })?
    };
    // During a roll of the secret, media sealed under a previous one opens too.
    for old in &cluster.previous_secrets {
        mesh.also_accept(old.as_bytes());
    }
    Ok(mesh)
}

/// The root of the cluster's keys (records, tickets, control, the mesh):
/// `cluster.secret`, else (warned at start) `auth.secret`.
fn cluster_secret(cfg: &Config) -> &[u8] {
    if cfg.cluster.secret.is_empty() { cfg.auth.secret.as_bytes() } else { cfg.cluster.secret.as_bytes() }
}

/// A running server. Dropping it without [`Server::shutdown`] leaves its
/// threads running until the process exits.
pub struct Server {
    http: SocketAddr,
    metrics: Option<SocketAddr>,
    /// The bound SIP address, when `[sip]` is on.
    sip: Option<SocketAddr>,
    api: Arc<ApiState>,
    threads: Vec<JoinHandle<()>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    stop_http: tokio::sync::watch::Sender<bool>,
    /// `shutdown_timeout_seconds`: what [`Server::shutdown`] keeps within.
    shutdown_timeout: Duration,
}

impl Server {
    /// Binds the sockets and starts the API, the I/O threads and the mixer
    /// clock. Must be called within a tokio runtime.
    pub async fn start(cfg: Config) -> Result<Self, ServerError> {
        cfg.validate()?;
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let rooms = Arc::new(rooms_from(&cfg)?);
        let auth = auth_from(&cfg)?;
        let outputs = Arc::new(
            crate::outputs::Outputs::new(&cfg, &tokio::runtime::Handle::current()).map_err(ServerError::Setup)?,
        );
        let media_cfg = MediaConfig {
            bind: cfg.media,
            io_threads: if cfg.io_threads == 0 { cores } else { cfg.io_threads },
            socket_buffer_bytes: cfg.socket_buffer_bytes,
            advertise: cfg.advertise_addrs().first().copied(),
            advertise_more: cfg.advertise_addrs().into_iter().skip(1).collect(),
            tcp: cfg.tcp_limits(),
            peer_timeout: cfg.peer_timeout(),
            batch_window: cfg.io_batch_window(),
            mix_threads: cfg.mix_threads,
            thread_nice: cfg.media_thread_nice,
            lean_send: cfg.lean_send,
            lean_receive: cfg.lean_receive,
            retire_peers: cfg.retire_peers,
            outputs: Some(outputs.clone()),
            rtp_in: (!cfg.rtp_in.trusted.is_empty()).then(|| SocketAddr::new(cfg.media.ip(), cfg.rtp_in.port)),
        };
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
        // Cluster mode: the node-to-node media socket (rooms spread over
        // nodes), its address published in the node's record.
        let mut cluster_cfg = cfg.cluster.clone().with_node_id();
        // A node never holds more than `max_participants`: its record says
        // so, so that the cluster counts it full (load 1) when it is.
        let most = u32::try_from(cfg.max_participants).unwrap_or(u32::MAX);
        if cfg.cluster.enabled() && cluster_cfg.capacity > most {
            tracing::info!(
                capacity = cluster_cfg.capacity,
                max_participants = most,
                "cluster.capacity above max_participants: this node's record says {most}"
            );
            cluster_cfg.capacity = most;
        }
        let mesh = if cfg.cluster.enabled() {
            let mesh = bind_mesh(&cfg, &cluster_cfg)?;
            cluster_cfg.mesh_addr = mesh.addr().to_string();
            Some(mesh)
        } else {
            None
        };
        let (media, threads) = MediaHandle::start(&media_cfg, rooms.clone(), mesh)?;
        let media_addr = media.addr();
        // Cluster mode: join the directory (the Redis connection is made
        // lazily: a node starts while Redis is down, and says so).
        let cluster = if cfg.cluster.enabled() {
            if cfg.cluster.secret.is_empty() {
                tracing::warn!(
                    "cluster.secret is not set: the cluster's keys derive from auth.secret, so whoever holds the token secret can also sign node records and tickets and read the mesh; set cluster.secret (TUTTI_CLUSTER_SECRET), the same on every node"
                );
            }
            let cluster = tutti_cluster::Cluster::start(cluster_cfg, cluster_secret(&cfg))
                .await
                .map_err(|e| ServerError::Setup(e.to_string()))?;
            // Participant ids unique across the cluster, naming their node:
            // from `number << 32` (a single node's start at 1).
            let number = u64::from(cluster.node_number());
            media.start_ids_at((number << tutti_cluster::NODE_NUMBER_SHIFT) + 1);
            tracing::info!(node = cluster.node_id(), number, api_url = %cfg.cluster.api_url, "cluster mode: this node joined");
            outputs.set_node(cluster.node_id());
            Some(cluster)
        } else {
            None
        };
        let node = Arc::new(Node::new(cfg.clone(), cluster.clone(), rooms, Arc::new(media), outputs));
        let session = Arc::new(Sessions::new(node.clone(), auth.is_some()));
        let api = Arc::new(ApiState::new(session.clone(), auth));
        let (stop_http, stopped) = tokio::sync::watch::channel(false);
        let mut tasks = Vec::new();
        if let Some(cluster) = cluster {
            if api.media.has_mesh() && cluster.config().room_spread != tutti_cluster::RoomSpread::Off {
                tasks.push(tokio::spawn(crate::cluster::spans::spans(node.clone(), cluster.clone(), stopped.clone())));
                let roster = crate::cluster::roster::write(
                    node.roster.clone(),
                    node.rooms.clone(),
                    cluster.clone(),
                    stopped.clone(),
                );
                tasks.push(tokio::spawn(roster));
            }
            tasks.push(tokio::spawn(crate::cluster::control::run(node.clone(), cluster.clone(), stopped.clone())));
            tasks.push(tokio::spawn(crate::cluster::load::maintain(node.clone(), cluster, stopped.clone())));
        }
        if let Some(l) = metrics_listener {
            tasks.push(tokio::spawn(metrics::serve(l, stopped.clone())));
        }
        tasks.push(tokio::spawn(session.clone().housekeeping(stopped.clone())));
        tasks.push(tokio::spawn(api.outputs.clone().housekeeping(api.rooms.clone(), stopped.clone())));
        let limits = api::http::HttpLimits {
            max_connections: cfg.limits.max_connections,
            max_per_address: cfg.limits.max_connections_per_address,
            max_per_identity: cfg.limits.max_connections_per_identity,
            // Validated at load.
            trusted_proxies: crate::cidr::parse_all(&cfg.limits.trusted_proxies).unwrap_or_default(),
            header_timeout: Duration::from_secs_f64(cfg.limits.http_header_timeout_seconds),
        };
        // The SIP edge: a control plane beside the API, on its runtime.
        let sip = if cfg.sip.enabled {
            let fallback = cfg.advertise_addr(media_addr).ip();
            let (edge, states) = crate::sip::Edge::bind(session.clone(), fallback).await.map_err(ServerError::Setup)?;
            crate::sip::offer_dial_out(&edge);
            let addr = edge.addr();
            // In a cluster its address goes in this node's signed record (calls are redirected here).
            if let Some(cluster) = &node.dir {
                cluster.set_sip_addr(edge.sip_addr());
                let cluster = cluster.clone();
                tasks.push(tokio::spawn(async move {
                    cluster.heartbeat().await.ok();
                }));
            }
            tasks.push(tokio::spawn(edge.serve(states, stopped.clone())));
            Some(addr)
        } else {
            None
        };
        tasks.push(tokio::spawn(api::http::serve(listener, api::router(api.clone()), limits, stopped)));
        tracing::info!(%http, media = %media_addr, ?metrics, ?sip, "tutti is serving");
        Ok(Self { http, metrics, sip, api, threads, tasks, stop_http, shutdown_timeout: cfg.shutdown_timeout() })
    }

    /// The bound HTTP address.
    pub fn http_addr(&self) -> SocketAddr {
        self.http
    }

    /// The bound UDP media address.
    pub fn media_addr(&self) -> SocketAddr {
        self.api.media.addr()
    }

    /// The bound SIP address (UDP), when `[sip]` is on.
    pub fn sip_addr(&self) -> Option<SocketAddr> {
        self.sip
    }

    /// The bound metrics address (`GET /metrics`), when metrics are on.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics
    }

    /// Ticks that ran late enough to be skipped (the mixer fell behind).
    pub fn tick_overruns(&self) -> u64 {
        self.api.media.tick_overruns()
    }

    /// The media counters, summed over the I/O threads.
    pub fn media_stats(&self) -> MediaStats {
        self.api.media.stats()
    }

    /// Participants in all rooms.
    pub fn participants(&self) -> usize {
        self.api.rooms.participants()
    }

    /// Mixer threads.
    pub fn mix_threads(&self) -> usize {
        self.api.media.mix_threads()
    }

    /// A token for `grant`, valid for `ttl`, signed with this server's
    /// secret (configured or generated); `None` when auth is disabled or the
    /// grant fails [`auth::Grant::check`].
    pub fn mint_token(&self, grant: &auth::Grant, ttl: Duration) -> Option<String> {
        self.api.auth.as_ref().and_then(|a| a.mint(grant, ttl, auth::unix_now()).ok())
    }

    /// This node's id in the cluster (`None` on a single node).
    pub fn cluster_node_id(&self) -> Option<&str> {
        self.api.node.dir.as_ref().map(tutti_cluster::Cluster::node_id)
    }

    /// The cluster's counters (`None` on a single node).
    pub fn cluster_stats(&self) -> Option<tutti_cluster::ClusterStats> {
        self.api.node.dir.as_ref().map(tutti_cluster::Cluster::stats)
    }

    /// The webhook sender's counters (`None` without webhooks).
    pub fn webhook_stats(&self) -> Option<crate::outputs::webhook::WebhookStats> {
        self.api.outputs.webhooks().map(|w| w.stats())
    }

    /// Whether the token secret was generated at start (none configured).
    pub fn secret_generated(&self) -> bool {
        self.api.auth.as_ref().is_some_and(auth::Auth::is_generated)
    }

    /// What the server holds now.
    pub fn resources(&self) -> Resources {
        let (registered_peers, pending_peers) = self.api.rooms.registry_sizes();
        let media = self.media_stats();
        Resources {
            rooms: self.api.rooms.all().len(),
            participants: self.participants(),
            registered_peers,
            pending_peers,
            io_peers: media.peers,
            forwarded_addresses: media.forwarded_addresses as usize,
            ws_sessions: self.api.ws_sessions.load(Ordering::Relaxed),
            rate_limited_addresses: self.api.session.rate_limited_addresses(),
        }
    }

    /// Drains the node: no new rooms here, calls in progress go on (in a
    /// cluster, each room is handed over to another node and its clients
    /// told to move); returns when the last participant has left, or after
    /// `within` (or the deadline of a drain already started by the API).
    /// [`Server::shutdown`] follows. `within` zero: returns at once.
    pub async fn drain(&self, within: Duration) -> DrainEnd {
        if within.is_zero() {
            return DrainEnd::Skipped;
        }
        let deadline = self.api.session.drain(within).await;
        let mut every = tokio::time::interval(DRAIN_POLL);
        loop {
            every.tick().await;
            if self.api.rooms.participants() == 0 {
                return DrainEnd::Empty;
            }
            if crate::cluster::drain::unix_ms() >= deadline {
                return DrainEnd::TimedOut { participants: self.api.rooms.participants() };
            }
        }
    }

    /// Resolves once the API asked this node to drain (`POST /v1/node/drain`):
    /// then call [`Server::drain`] and [`Server::shutdown`], as for SIGTERM.
    pub async fn drain_requested(&self) {
        self.api.node.drain.requested().await;
    }

    /// Stops taking joins, tells every WebSocket subscriber, closes every
    /// peer (they get DTLS close_notify), stops the threads and the API.
    pub async fn shutdown(self) {
        let deadline = Instant::now() + self.shutdown_timeout;
        if let Some(cluster) = &self.api.node.dir
            && let Err(e) = cluster.set_draining().await
        {
            tracing::warn!(error = %e, "could not mark this node draining in the cluster directory");
        }
        self.api.rooms.shut_down("the server is shutting down");
        // Give the WebSocket sessions a moment to pass the word on.
        let told = Instant::now() + Duration::from_secs(1);
        while self.api.ws_sessions.load(Ordering::Relaxed) > 0 && Instant::now() < told {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The calls end with the server: every participant leaves (reason
        // room_closed) and every room closes, as a delete would, so that the
        // webhooks say so (in a cluster the room's lease is kept: it lapses,
        // and the room starts again on another node as its clients rejoin).
        // The peers are closed with the I/O threads just after.
        for room in self.api.rooms.all() {
            let _ = self.api.rooms.delete(&room.id);
        }
        self.api.media.shutdown();
        // Recordings end with the calls: their files are closed, not cut;
        // and the webhooks that say so (and that the rooms finished) go out.
        // Within `shutdown_timeout`, keeping a second for what follows.
        let webhooks = deadline.saturating_duration_since(Instant::now()).saturating_sub(SHUTDOWN_RESERVE);
        self.api.outputs.shutdown(Duration::from_secs(3), webhooks).await;
        let _ = self.stop_http.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        for t in self.threads {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        if let Some(cluster) = &self.api.node.dir
            && let Err(e) = cluster.shutdown().await
        {
            tracing::warn!(error = %e, "leaving the cluster: leases and the node entry lapse by themselves");
        }
        tracing::info!("tutti stopped");
    }
}

/// How often a drain looks whether the node is empty.
const DRAIN_POLL: Duration = Duration::from_millis(100);

/// How a drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainEnd {
    /// The last participant left (or was handed over).
    Empty,
    /// The drain time ran out with these participants still here.
    TimedOut {
        /// Participants still here.
        participants: usize,
    },
    /// No drain (`drain_seconds = 0`).
    Skipped,
}

/// What a shutdown keeps of `shutdown_timeout_seconds` for stopping the
/// threads and leaving the cluster after waiting for webhooks.
const SHUTDOWN_RESERVE: Duration = Duration::from_secs(1);

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
    crate::priority::renice_current_thread(nice.max(0))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_room_sections_complexities_reach_the_mixer() {
        let mut cfg = Config::default();
        let defaults = room_defaults(&cfg).encoder;
        assert_eq!((defaults.complexity, defaults.speaker_complexity), (10, 0));
        cfg.room.complexity = 4;
        cfg.room.speaker_complexity = 2;
        let set = room_defaults(&cfg).encoder;
        assert_eq!((set.complexity, set.speaker_complexity), (4, 2));
    }
}
