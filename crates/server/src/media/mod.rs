//! # The media plane: sockets, I/O threads and the mixer clock
//!
//! Real time lives here, and nothing else does: the API reaches it only
//! through [`MediaHandle`] (answer an offer, carry out room effects, read
//! counters), and nothing here waits on the API.
//!
//! ```text
//! io-N threads   socket (SO_REUSEPORT, recvmmsg) ─► Mux (ICE/DTLS/SRTP; adopts the peers
//!                Rooms::claim says are theirs) ─► packets batched into each room's inbox
//! mix-clock      every 20 ms: Room::tick for every room on the mix-N pool
//!                ─► one O(K) RoomMix per room ─► IoCommand::Deliver to every io thread
//! io-N threads   each sends its own peers their feed (SRTP) ─► sendmmsg
//! ```

mod clock;
mod comfort;
mod command;
mod g711;
mod g722;
mod io;
mod keys;
mod lobby;
pub(crate) mod mesh;
mod plain;
mod plain_srtp;
mod shed;
mod socket;
mod tcp;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tutti_mix::MixPool;
use tutti_rtc::{Acceptor, RtcError, ServerPeer};

use crate::room::{Effect, Rooms};
use crate::sync::lock;
use command::{IoCommand, IoHandle};
pub(crate) use keys::Keypress;
pub(crate) use lobby::LobbyCommand;
pub(crate) use plain::{KeysRefused, Steer};

/// Keypresses queued for their reader at most (more are dropped, logged).
const KEYPRESS_QUEUE: usize = 256;

/// Media counters of a running server (see `Server::media_stats`).
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
    /// Datagrams that belonged to no peer (garbage, strays, forged ICE
    /// checks), dropped on their I/O thread without taking any shared lock.
    pub unrouted: u64,
    /// Of those, ICE checks naming a server ufrag whose MESSAGE-INTEGRITY did
    /// not verify with that peer's password (no route learnt, no sign of life).
    pub forged_checks: u64,
    /// Remote addresses routed to peers now (at most `tutti_rtc::MAX_ROUTES` per peer).
    pub routes: u64,
    /// Routes dropped for a newer one beyond `tutti_rtc::MAX_ROUTES` per peer.
    pub routes_evicted: u64,
    /// ICE checks that asked the shared peer registry (verified checks for a
    /// peer the receiving I/O thread does not hold: a new peer's first, or a
    /// client socket the kernel hashed to another thread's socket).
    pub registry_claims: u64,
    /// Client addresses an I/O thread forwards to the thread owning their peer, now.
    pub forwarded_addresses: u64,
    /// Audio packets received from peers.
    pub audio_in: u64,
    /// Of those, packets read on the lean receive path (`lean_receive`).
    pub lean_in: u64,
    /// SRTP packets the lean receive path dropped (failed authentication, replays).
    pub lean_dropped: u64,
    /// Consent checks answered on the lean receive path.
    pub lean_checks: u64,
    /// Peers whose webrtc-rs connection was retired once their call was up (`retire_peers`).
    pub retired_peers: u64,
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
    /// ICE-TCP: connections and frames over TCP (their frames are also
    /// counted in the datagram counters above).
    pub tcp: tutti_rtc::TcpStats,
    /// ICE-TCP frames dropped because their connection was gone.
    pub tcp_no_connection: u64,
}

/// How the media plane is set up.
pub(crate) struct MediaConfig {
    /// Where the sockets bind (port 0: any free port).
    pub(crate) bind: SocketAddr,
    /// I/O threads, one socket each.
    pub(crate) io_threads: usize,
    /// Socket buffers asked for, in bytes.
    pub(crate) socket_buffer_bytes: usize,
    /// The address put in answers' ICE candidates; `None`: the bound one.
    pub(crate) advertise: Option<SocketAddr>,
    pub(crate) peer_timeout: Duration,
    pub(crate) batch_window: Duration,
    /// Mixer threads; 0 = one per core.
    pub(crate) mix_threads: usize,
    /// Nice value of every media thread (see `crate::priority`).
    pub(crate) thread_nice: i32,
    /// Established peers send RTP on tutti-rtc's lean path (else webrtc-rs's).
    pub(crate) lean_send: bool,
    /// Established peers' audio is read on tutti-rtc's lean path (else webrtc-rs's).
    pub(crate) lean_receive: bool,
    /// Connections are retired once their call is up (`retire_peers`).
    pub(crate) retire_peers: bool,
    /// Recordings and RTP out, fed by the clock after each tick.
    pub(crate) outputs: Option<Arc<crate::outputs::Outputs>>,
    /// Where the plain RTP (`rtp_in`) socket binds; `None`: plain RTP is off.
    pub(crate) rtp_in: Option<SocketAddr>,
    /// Further addresses put in answers after `advertise` (each a UDP and,
    /// with `tcp`, a TCP candidate); port 0 = the bound media port.
    pub(crate) advertise_more: Vec<SocketAddr>,
    /// ICE-TCP on the media port with these limits; `None`: UDP only.
    pub(crate) tcp: Option<tutti_rtc::TcpLimits>,
}

/// The media plane, running: what the API and the server hold of it.
pub(crate) struct MediaHandle {
    acceptor: Acceptor,
    bound: SocketAddr,
    io: Arc<[IoHandle]>,
    stop: Arc<AtomicBool>,
    overruns: Arc<AtomicU64>,
    mix_threads: usize,
    /// The plain RTP thread, when `rtp_in` is on.
    plain: Option<plain::PlainHandle>,
    /// The keys plain RTP legs press, until someone takes them ([`MediaHandle::keypresses`]).
    pressed: std::sync::Mutex<Option<tokio::sync::mpsc::Receiver<Keypress>>>,
    /// The clock's mesh (rooms spread over nodes), in cluster mode.
    mesh: Option<mesh::MeshControl>,
}

/// Why the media plane could not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MediaError {
    /// A socket could not be bound or a thread started.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The WebRTC acceptor or the mixer pool could not be set up.
    #[error("{0}")]
    Setup(String),
}

/// One I/O thread's share of the TCP connection caps (rounded up).
fn per_thread(l: tutti_rtc::TcpLimits, threads: usize) -> tutti_rtc::TcpLimits {
    tutti_rtc::TcpLimits {
        max_connections: l.max_connections.div_ceil(threads),
        max_per_ip: l.max_per_ip.div_ceil(threads),
        ..l
    }
}

/// Binds the UDP media sockets and, with ICE-TCP on, the TCP listeners on
/// the same port. With port 0 the kernel picks a free UDP port, which TCP
/// may have in use (another connection's local port): then both are bound
/// again on another port, a few times at most.
fn bind(cfg: &MediaConfig) -> Result<(Vec<std::net::UdpSocket>, Vec<std::net::TcpListener>), MediaError> {
    const ATTEMPTS: usize = 8;
    let threads = cfg.io_threads.max(1);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let sockets = socket::bind(cfg.bind, threads, cfg.socket_buffer_bytes)
            .map_err(io_err(format!("binding UDP {}", cfg.bind)))?;
        let bound = sockets[0].local_addr().map_err(io_err("reading the UDP address"))?;
        if cfg.tcp.is_none() {
            return Ok((sockets, Vec::new()));
        }
        match tcp::bind(bound, threads) {
            Ok(listeners) => return Ok((sockets, listeners)),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && cfg.bind.port() == 0 && attempt < ATTEMPTS => {
                tracing::debug!(%bound, "TCP has the UDP media port in use; binding another");
            }
            Err(e) => return Err(io_err(format!("binding TCP {bound}"))(e)),
        }
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> MediaError {
    let what = what.into();
    move |source| MediaError::Io { what, source }
}

impl MediaHandle {
    /// Binds the media sockets and starts the I/O threads and the clock.
    /// With `mesh` (cluster mode), the clock also runs the node's side of
    /// rooms spread over several nodes.
    pub(crate) fn start(
        cfg: &MediaConfig,
        rooms: Arc<Rooms>,
        mut mesh: Option<mesh::Mesh>,
    ) -> Result<(Self, Vec<JoinHandle<()>>), MediaError> {
        let (sockets, listeners) = bind(cfg)?;
        let bound = sockets[0].local_addr().map_err(io_err("reading the UDP address"))?;
        let with_port = |a: SocketAddr| if a.port() == 0 { SocketAddr::new(a.ip(), bound.port()) } else { a };
        let advertise = with_port(cfg.advertise.unwrap_or(bound));
        if advertise.ip().is_unspecified() {
            tracing::warn!(%advertise, "the media address is unspecified: set `advertise` to an address clients can reach");
        }
        let mut acceptor = Acceptor::new(advertise, cfg.peer_timeout).map_err(|e| MediaError::Setup(e.to_string()))?;
        acceptor.set_lean_send(cfg.lean_send);
        acceptor.set_lean_receive(cfg.lean_receive);
        acceptor.set_retire(cfg.retire_peers);
        let advertised: Vec<SocketAddr> =
            std::iter::once(advertise).chain(cfg.advertise_more.iter().copied().map(with_port)).collect();
        acceptor.set_advertised(&advertised);
        acceptor.set_tcp(cfg.tcp.is_some());
        let pool = Arc::new(MixPool::new(cfg.mix_threads).map_err(|e| MediaError::Setup(e.to_string()))?);
        let nice = cfg.thread_nice;
        pool.install(|| rayon::broadcast(|_| crate::priority::media_thread(nice)));
        // The mixer's ticks fall at epoch + n · 20 ms; under load the I/O
        // threads read just before each one. The epoch sits on a multiple of
        // 20 ms of Unix time, so that the nodes of a cluster tick together
        // and number their ticks alike (the mesh's tick numbers).
        let (epoch, tick_base) = mesh::aligned_epoch();
        if let Some(m) = mesh.as_mut() {
            m.set_tick_base(tick_base);
        }
        if let Some(o) = &cfg.outputs {
            // Per-speaker recordings' sidecars number ticks so: alike on every node.
            o.set_tick_base(tick_base);
        }
        let mesh_control = mesh.as_ref().map(mesh::Mesh::control);
        let shared = Arc::new(io::IoShared {
            rooms: rooms.clone(),
            peers_io: std::sync::OnceLock::new(),
            batch_window: cfg.batch_window,
            tick_epoch: epoch,
            thread_nice: cfg.thread_nice,
            // Each I/O thread keeps its own table: the caps are split evenly
            // (the kernel spreads connections over the threads by their 4-tuple).
            tcp_limits: cfg.tcp.map(|l| per_thread(l, cfg.io_threads.max(1))).unwrap_or_default(),
            forward_idle: cfg.peer_timeout,
        });
        let (mut handles, mut threads) =
            io::spawn(&shared, &acceptor, sockets, listeners).map_err(io_err("starting the io threads"))?;
        // Plain RTP: one more thread in the list, so mixes, effects and shutdown reach it too.
        let (press, pressed) = tokio::sync::mpsc::channel(KEYPRESS_QUEUE);
        let plain = match cfg.rtp_in {
            Some(bind) => {
                let (io, plain, thread) =
                    plain::spawn(bind, handles.len(), rooms.clone(), cfg.peer_timeout, cfg.thread_nice, press)
                        .map_err(io_err(format!("binding the plain RTP socket {bind}")))?;
                handles.push(io);
                threads.push(thread);
                Some(plain)
            }
            None => None,
        };
        // The threads reach each other (forwarding) through the shared list.
        let io: Arc<[IoHandle]> = handles.into();
        let _ = shared.peers_io.set(io.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let overruns = Arc::new(AtomicU64::new(0));
        let mix_threads = pool.threads();
        let clock = clock::Clock {
            epoch,
            rooms,
            pool,
            io: io.clone(),
            peer_timeout: cfg.peer_timeout,
            stop: stop.clone(),
            overruns: overruns.clone(),
            thread_nice: cfg.thread_nice,
            outputs: cfg.outputs.clone(),
            mesh,
        };
        threads.push(clock.spawn().map_err(io_err("starting mix-clock"))?);
        tracing::info!(media = %bound, advertise = ?advertised, tcp = cfg.tcp.is_some(), io_threads = io.len(), mix_threads, lean_send = cfg.lean_send, lean_receive = cfg.lean_receive, retire_peers = cfg.retire_peers, "media plane running");
        let pressed = std::sync::Mutex::new(Some(pressed));
        Ok((Self { acceptor, bound, io, stop, overruns, mix_threads, plain, pressed, mesh: mesh_control }, threads))
    }

    /// A media plane with no sockets and no threads: offers are answered,
    /// effects go nowhere (for the fuzzer).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn detached(advertise: SocketAddr) -> Result<Self, MediaError> {
        let acceptor =
            Acceptor::new(advertise, Duration::from_secs(10)).map_err(|e| MediaError::Setup(e.to_string()))?;
        Ok(Self {
            acceptor,
            bound: advertise,
            io: Arc::from([]),
            stop: Arc::new(AtomicBool::new(false)),
            overruns: Arc::new(AtomicU64::new(0)),
            mix_threads: 0,
            plain: None,
            pressed: std::sync::Mutex::new(None),
            mesh: None,
        })
    }

    /// Answers an SDP offer: a peer that waits for its first ICE check, and the answer.
    pub(crate) fn accept(&self, offer: &str, now: Instant) -> Result<(ServerPeer, String), RtcError> {
        self.acceptor.accept(offer, now)
    }

    /// Carries out room effects (closing peers on their I/O threads).
    pub(crate) fn apply(&self, effects: impl IntoIterator<Item = Effect>) {
        for effect in effects {
            match effect {
                Effect::ClosePeer { peer, io } => {
                    if let Some(h) = self.io.get(io) {
                        h.send(IoCommand::Close(peer));
                    }
                }
                Effect::Rehome { peer, io } => {
                    if let Some(h) = self.io.get(io) {
                        h.send(IoCommand::Rehome(peer));
                    }
                }
            }
        }
    }

    /// Asks I/O thread `io` to answer its peer's ICE-restart offer. The
    /// answer comes on the returned channel (closed if the thread is gone).
    pub(crate) fn restart(
        &self,
        io: usize,
        peer: tutti_rtc::PeerId,
        offer: String,
    ) -> tokio::sync::oneshot::Receiver<Result<String, RtcError>> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        if let Some(h) = self.io.get(io) {
            h.send(IoCommand::Restart { peer, offer, reply });
        }
        answer
    }

    /// Plain RTP, when on: the address answers name (the advertised IP,
    /// the plain socket's port) and the I/O thread index its participants have.
    pub(crate) fn plain_rtp(&self) -> Option<(SocketAddr, usize)> {
        let p = self.plain.as_ref()?;
        Some((SocketAddr::new(self.acceptor.local_addr().ip(), p.bound.port()), p.io))
    }

    /// A participant id from the peers' sequence (for a plain RTP participant).
    pub(crate) fn reserve_id(&self) -> tutti_rtc::PeerId {
        self.acceptor.reserve_id()
    }

    /// Starts the participant ids at `first` (a cluster node: its number's
    /// range, so that ids are unique across nodes; before any join).
    pub(crate) fn start_ids_at(&self, first: u64) {
        self.acceptor.start_ids_at(first);
    }

    /// Hands a plain RTP participant, joined to `room` already, to the plain
    /// RTP thread: its packets from its offer's address (or, with comedia,
    /// the address it latches) go into the room, its mix there. False when
    /// plain RTP is off or its thread is gone.
    pub(crate) fn add_plain(
        &self,
        id: tutti_rtc::PeerId,
        room: Arc<crate::room::Room>,
        offer: tutti_rtc::plain::PlainOffer,
        srtp: Option<tutti_rtc::sdes::Sdes>,
        listen_only: crate::room::ListenOnly,
    ) -> bool {
        let Some(p) = &self.plain else { return false };
        let tutti_rtc::plain::PlainOffer {
            remote,
            codec,
            payload_type,
            comedia,
            ssrc,
            events,
            comfort_noise,
            rtcp,
            ..
        } = offer;
        let srtp = match srtp.map(|s| plain_srtp::Srtp::new(&s)) {
            None => None,
            Some(Ok(s)) => Some(Box::new(s)),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "SRTP contexts not made: the participant is not added");
                return false;
            }
        };
        p.add(plain::NewPlain {
            id,
            room,
            remote,
            comedia,
            ssrc,
            codec,
            payload_type,
            events,
            comfort_noise,
            srtp,
            listen_only,
            rtcp,
        })
    }

    /// Tells the plain RTP thread's lobby (legs answered, in no room yet:
    /// `lobby`). False when plain RTP is off or its thread is gone.
    pub(crate) fn lobby(&self, cmd: LobbyCommand) -> bool {
        self.plain.as_ref().is_some_and(|p| p.lobby(cmd))
    }

    /// The keys plain RTP legs press (RFC 4733), for one reader: the first
    /// call takes them, later ones get `None`.
    pub(crate) fn keypresses(&self) -> Option<tokio::sync::mpsc::Receiver<Keypress>> {
        lock(&self.pressed).take()
    }

    /// Sends `keys` to plain RTP leg `id` as RFC 4733 events (see
    /// `plain::PlainHandle::send_keys`); returns how long that takes.
    pub(crate) fn send_keys(&self, id: u64, keys: &str) -> Result<Duration, KeysRefused> {
        let p = self.plain.as_ref().ok_or(KeysRefused::NotALeg(id))?;
        p.send_keys(tutti_rtc::PeerId(id), keys)
    }

    /// Steers plain RTP leg `id` (its call moved its media, held or
    /// resumed: `plain::Steer`). False when plain RTP is off or its queue full.
    pub(crate) fn steer(&self, id: u64, steer: Steer) -> bool {
        self.plain.as_ref().is_some_and(|p| p.steer(tutti_rtc::PeerId(id), steer))
    }

    /// Whether this node runs a mesh (cluster mode).
    pub(crate) fn has_mesh(&self) -> bool {
        self.mesh.is_some()
    }

    /// Tells the clock that `room` spans these other nodes (id, mesh
    /// address) at `epoch`; none: this node is alone in it. Never blocks:
    /// false when the clock's queue is full (try again later) or no mesh runs.
    pub(crate) fn set_span(&self, room: &str, epoch: u64, peers: Vec<(String, SocketAddr)>) -> bool {
        self.mesh.as_ref().is_some_and(|m| m.send(mesh::MeshCommand::Set { room: room.to_owned(), epoch, peers }))
    }

    /// Tells the clock that `room` is no longer hosted here (see [`MediaHandle::set_span`]).
    pub(crate) fn leave_span(&self, room: &str) -> bool {
        self.mesh.as_ref().is_some_and(|m| m.send(mesh::MeshCommand::Remove { room: room.to_owned() }))
    }

    /// The bound media address.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.bound
    }

    /// Mixer threads.
    pub(crate) fn mix_threads(&self) -> usize {
        self.mix_threads
    }

    /// Ticks skipped because the mixer fell behind.
    pub(crate) fn tick_overruns(&self) -> u64 {
        self.overruns.load(Ordering::Relaxed)
    }

    /// The media counters, summed over the I/O threads.
    pub(crate) fn stats(&self) -> MediaStats {
        let mut m = MediaStats::default();
        for io in self.io.iter() {
            let c = &io.counters;
            let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
            let s = *lock(&c.mux);
            m.datagrams_in += s.datagrams_in;
            m.bytes_in += s.bytes_in;
            m.datagrams_out += s.datagrams_out;
            m.bytes_out += s.bytes_out;
            m.unrouted += s.unrouted + get(&c.unknown_ufrag);
            m.forged_checks += s.forged_checks;
            m.routes += s.routes;
            m.routes_evicted += s.routes_evicted;
            m.registry_claims += get(&c.claims);
            m.forwarded_addresses += get(&c.forwarded);
            m.audio_in += s.audio_in;
            m.lean_in += s.lean_in;
            m.lean_dropped += s.lean_dropped;
            m.lean_checks += s.lean_checks;
            m.retired_peers += s.retired;
            m.send_errors += get(&c.send_errors);
            m.peers_failed += s.ice_failures + s.dtls_failures + s.lost;
            m.peers_timed_out += s.timed_out;
            // Closed peers leave the mux in the turn they close, before it publishes.
            m.peers += s.connecting + s.connected;
            m.listen_only_dropped += get(&c.listen_only_dropped);
            let (t, no_conn) = *lock(&c.tcp);
            tcp::add_stats(&mut m.tcp, &t);
            m.tcp_no_connection += no_conn;
        }
        m
    }

    /// Stops the clock and the I/O threads (every peer gets close_notify).
    pub(crate) fn shutdown(&self) {
        self.stop.store(true, Ordering::Relaxed);
        for io in self.io.iter() {
            io.send(IoCommand::Shutdown);
        }
    }
}

/// Signals for the media modules' unit tests.
#[cfg(test)]
pub(crate) mod test_signal {
    /// RMS of a signal, in dB.
    pub(crate) fn db(x: &[f32]) -> f32 {
        10.0 * (x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32).log10()
    }

    /// `n` samples of a sine of `freq` Hz at `rate`, amplitude `amp`.
    pub(crate) fn sine(freq: f32, rate: f32, n: usize, amp: f32) -> Vec<f32> {
        (0..n).map(|i| amp * (std::f32::consts::TAU * freq * i as f32 / rate).sin()).collect()
    }
}
