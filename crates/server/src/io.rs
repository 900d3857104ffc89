//! The I/O threads `io-0`, `io-1`, …: each owns a UDP socket bound to the
//! one media port (SO_REUSEPORT: the kernel sends a given client address to
//! the same socket every time) and a [`Mux`] with the peers whose first ICE
//! check reached that socket.
//!
//! One loop turn, bounded: wait (poll on the socket and a wake-up eventfd)
//! → commands (the clock's mixes to send, removals) → up to
//! [`RECV_BATCHES`] × [`BATCH`] datagrams by `recvmmsg` → timers → events
//! (packets batched into each room's inbox, one lock per room per turn) →
//! everything to send by `sendmmsg`, [`BATCH`] datagrams per syscall.

use std::collections::HashMap;
use std::io::IoSliceMut;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, ppoll};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::socket::{MsgFlags, MultiHeaders, SockaddrStorage};
use nix::sys::socket::{recvmmsg, sendmmsg};
use tutti_mix::{Packet, ParticipantId};
use tutti_rtc::{CloseReason, Mux, MuxEvent, MuxStats, PeerId, Route, Transmit};

use crate::metrics;
use crate::state::{Inbox, LeaveReason, MixOut, RoomState, Shared, lock};

/// Datagrams per `recvmmsg` / `sendmmsg` call.
pub(crate) const BATCH: usize = 64;
/// Receive batches per loop turn, so commands and timers are never starved.
pub(crate) const RECV_BATCHES: usize = 8;
/// Largest datagram read; longer ones are truncated (and fail SRTP/DTLS).
const MAX_DATAGRAM: usize = 2048;
/// Most client addresses remembered as reaching another I/O thread's socket.
const MAX_FOREIGN: usize = 65_536;
/// Longest wait for work when no timer is due.
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// What the rest of the server asks an I/O thread to do.
pub(crate) enum IoCommand {
    /// Send one tick's mixes to this thread's peers in those rooms.
    Deliver(Arc<Vec<MixOut>>),
    /// Close and forget a peer.
    Remove(PeerId),
    /// A datagram for one of this thread's peers that reached another socket.
    Forward { from: SocketAddr, data: Vec<u8> },
    /// Close every peer and stop.
    Shutdown,
}

/// Counters of one I/O thread (read by the metrics).
#[derive(Debug, Default)]
pub(crate) struct IoCounters {
    /// The thread's mux's counters, as of the end of its last loop turn.
    pub(crate) mux: Mutex<MuxStats>,
    /// ICE checks for a server ufrag no peer has (besides the mux's own unrouted).
    pub(crate) unknown_ufrag: AtomicU64,
    pub(crate) send_errors: AtomicU64,
    pub(crate) listen_only_dropped: AtomicU64,
}

/// How to reach an I/O thread.
pub(crate) struct IoHandle {
    tx: Sender<IoCommand>,
    wake: Arc<EventFd>,
    pub(crate) counters: Arc<IoCounters>,
}

impl IoHandle {
    pub(crate) fn send(&self, cmd: IoCommand) {
        if self.tx.send(cmd).is_ok() {
            // A full eventfd counter (2^64 − 2 wake-ups pending) is as awake as it gets.
            let _ = self.wake.write(1);
        }
    }
}

/// Binds `n` sockets on `addr` (the first fixes the port if `addr` has port
/// 0), each with SO_REUSEPORT and the buffers asked for.
pub(crate) fn bind_sockets(addr: SocketAddr, n: usize, buffer: usize) -> std::io::Result<Vec<UdpSocket>> {
    let mut sockets = Vec::with_capacity(n);
    let mut addr = addr;
    for i in 0..n {
        let s = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::DGRAM, None)?;
        s.set_reuse_port(true)?;
        // Root may exceed net.core.{r,w}mem_max; others get what the cap allows.
        let size = buffer.min(i32::MAX as usize);
        let forced = nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::RcvBufForce, &size).is_ok()
            && nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::SndBufForce, &size).is_ok();
        if !forced {
            s.set_recv_buffer_size(size)?;
            s.set_send_buffer_size(size)?;
        }
        s.bind(&addr.into())?;
        let socket: UdpSocket = s.into();
        if i == 0 {
            addr = socket.local_addr()?;
            // Linux reports twice the size set (the kernel's bookkeeping share).
            let sock = socket2::SockRef::from(&socket);
            tracing::info!(
                asked = buffer,
                recv_granted = sock.recv_buffer_size().unwrap_or(0) / 2,
                send_granted = sock.send_buffer_size().unwrap_or(0) / 2,
                forced,
                "media socket buffers (bytes)"
            );
        }
        sockets.push(socket);
    }
    Ok(sockets)
}

/// A peer as its I/O thread knows it.
struct Local {
    room: Arc<RoomState>,
    connected: bool,
    /// Its token lacks `speak`: its audio is dropped here.
    listen_only: bool,
}

struct IoThread {
    index: usize,
    shared: Arc<Shared>,
    socket: UdpSocket,
    mux: Mux,
    rx: Receiver<IoCommand>,
    wake: Arc<EventFd>,
    counters: Arc<IoCounters>,
    peers: HashMap<PeerId, Local>,
    /// Connected peers by room id: who gets each room's mix.
    rooms: HashMap<String, Vec<PeerId>>,
    /// Packets received this turn, by room id, for the rooms' inboxes.
    inbox: HashMap<String, (Arc<RoomState>, Inbox)>,
    transmits: Vec<Transmit>,
    bufs: Vec<[u8; MAX_DATAGRAM]>,
    /// `recvmmsg` and `sendmmsg` headers, allocated once (they hold raw
    /// pointers, so the thread makes them itself).
    rx_headers: MultiHeaders<SockaddrStorage>,
    tx_headers: MultiHeaders<SockaddrStorage>,
    last_stats: MuxStats,
}

/// Starts the I/O threads, one per socket.
pub(crate) fn spawn(
    shared: &Arc<Shared>,
    sockets: Vec<UdpSocket>,
) -> std::io::Result<(Vec<IoHandle>, Vec<JoinHandle<()>>)> {
    let mut handles = Vec::new();
    let mut threads = Vec::new();
    for (index, socket) in sockets.into_iter().enumerate() {
        let (tx, rx) = mpsc::channel();
        let wake = Arc::new(
            EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
                .map_err(std::io::Error::from)?,
        );
        let counters = Arc::new(IoCounters::default());
        handles.push(IoHandle { tx, wake: wake.clone(), counters: counters.clone() });
        let shared = shared.clone();
        let thread = std::thread::Builder::new().name(format!("io-{index}")).spawn(move || {
            let mux = Mux::with_acceptor(shared.acceptor.clone());
            IoThread {
                index,
                shared,
                socket,
                mux,
                rx,
                wake,
                counters,
                peers: HashMap::new(),
                rooms: HashMap::new(),
                inbox: HashMap::new(),
                transmits: Vec::new(),
                bufs: vec![[0u8; MAX_DATAGRAM]; BATCH],
                rx_headers: MultiHeaders::preallocate(BATCH, None),
                tx_headers: MultiHeaders::preallocate(BATCH, None),
                last_stats: Default::default(),
            }
            .run()
        })?;
        threads.push(thread);
    }
    Ok((handles, threads))
}

impl IoThread {
    fn run(&mut self) {
        let (mut busy, mut received) = (false, 0);
        loop {
            if !busy {
                self.wait(received > 0);
            }
            let now = Instant::now();
            if !self.commands(now) {
                break;
            }
            (received, busy) = self.receive(now);
            self.mux.handle_timeout(Instant::now());
            self.events();
            self.flush_inbox();
            self.flush_transmits();
            self.count();
        }
        // Shutdown: every peer gets its DTLS close_notify.
        let ids: Vec<PeerId> = self.mux.peer_ids().collect();
        for id in ids {
            let _ = self.mux.remove(id);
        }
        self.flush_transmits();
        self.count();
    }

    /// Sleeps until a datagram, a command or the next timer. Under load
    /// (`batching`: the last turn received something) datagrams do not wake
    /// the thread: it sleeps the batch window, so one `recvmmsg` takes what
    /// arrived meanwhile instead of one wake-up and syscall per datagram.
    /// Commands (the clock's mixes to send) still wake it at once.
    fn wait(&mut self, batching: bool) {
        let now = Instant::now();
        let mut until = self.mux.poll_timeout().map_or(IDLE_WAIT, |t| t.saturating_duration_since(now)).min(IDLE_WAIT);
        let window = self.shared.cfg.io_batch_window();
        let batching = batching && !window.is_zero();
        if batching {
            until = until.min(window);
        }
        let timeout = nix::sys::time::TimeSpec::from_duration(until);
        let socket = PollFd::new(self.socket.as_fd(), PollFlags::POLLIN);
        let wake = PollFd::new(self.wake.as_fd(), PollFlags::POLLIN);
        if batching {
            let _ = ppoll(&mut [wake], Some(timeout), None);
        } else {
            let _ = ppoll(&mut [socket, wake], Some(timeout), None);
        }
        // Reset the eventfd (EAGAIN when nothing was written).
        let _ = self.wake.read();
    }

    /// Runs queued commands. Returns false on shutdown.
    fn commands(&mut self, now: Instant) -> bool {
        while let Ok(cmd) = self.rx.try_recv() {
            match cmd {
                IoCommand::Deliver(outs) => self.deliver(&outs, now),
                IoCommand::Remove(id) => {
                    if self.mux.remove(id).is_ok() {
                        self.forget(id);
                    }
                }
                IoCommand::Forward { from, data } => self.route(from, &data, now),
                IoCommand::Shutdown => return false,
            }
        }
        true
    }

    /// Sends each of this thread's connected peers its mix.
    fn deliver(&mut self, outs: &[MixOut], now: Instant) {
        for out in outs {
            let Some(peers) = self.rooms.get(&out.room.id) else { continue };
            for &peer in peers {
                let stream = out.stream_for(ParticipantId(peer.0));
                if stream.payload.is_empty() {
                    continue;
                }
                // A peer closed since its last event is reported by the mux; nothing to do here.
                let _ = self.mux.send_audio(peer, stream.payload.clone(), stream.level, &stream.contributors, now);
            }
            self.drain_transmits();
            if self.transmits.len() >= BATCH * 4 {
                self.flush_transmits();
            }
        }
    }

    /// Reads what is waiting, at most `RECV_BATCHES` batches. Returns how
    /// many datagrams, and whether it stopped at the bound (more may be waiting).
    fn receive(&mut self, now: Instant) -> (usize, bool) {
        let mut total = 0;
        for _ in 0..RECV_BATCHES {
            let mut got: Vec<(usize, Option<SocketAddr>)> = Vec::with_capacity(BATCH);
            {
                let mut iovs: Vec<[IoSliceMut<'_>; 1]> =
                    self.bufs.iter_mut().map(|b| [IoSliceMut::new(&mut b[..])]).collect();
                let fd = self.socket.as_raw_fd();
                match recvmmsg(fd, &mut self.rx_headers, iovs.iter_mut(), MsgFlags::MSG_DONTWAIT, None) {
                    Ok(msgs) => got.extend(msgs.map(|m| (m.bytes, m.address.and_then(|a| to_socket_addr(&a))))),
                    Err(_) => return (total, false), // EAGAIN: nothing more; other errors: try next turn
                }
            }
            let n = got.len();
            let bufs = std::mem::take(&mut self.bufs);
            for (buf, (len, from)) in bufs.iter().zip(got) {
                if let Some(from) = from {
                    self.route(from, &buf[..len.min(MAX_DATAGRAM)], now);
                }
            }
            self.bufs = bufs;
            total += n;
            if n < BATCH {
                return (total, false);
            }
        }
        (total, true)
    }

    /// Hands a datagram to its peer: here, adopted from the API's pending
    /// peers, or forwarded to the I/O thread that owns it.
    fn route(&mut self, from: SocketAddr, data: &[u8], now: Instant) {
        match self.mux.handle_datagram(from, data, now) {
            Route::Peer(_) => {}
            Route::UnknownUfrag(ufrag) => {
                enum Found {
                    Adopt(tutti_rtc::ServerPeer, Arc<RoomState>, bool),
                    Forward(usize),
                    Nothing,
                }
                let found = {
                    let mut reg = lock(&self.shared.registry);
                    if let Some(p) = reg.pending.remove(&ufrag) {
                        let id = p.peer.id();
                        match reg.homes.get_mut(&id) {
                            Some(home) => {
                                home.io = Some(self.index);
                                let (room, listen_only) = (home.room.clone(), home.listen_only);
                                reg.ufrags.insert(ufrag, id);
                                Found::Adopt(p.peer, room, listen_only)
                            }
                            None => Found::Nothing,
                        }
                    } else if let Some((id, owner)) =
                        reg.ufrags.get(&ufrag).and_then(|id| Some((*id, reg.homes.get(id)?.io?)))
                    {
                        if owner == self.index {
                            Found::Nothing
                        } else {
                            // Bounded: forged checks from many ports cannot grow it
                            // without end (entries go with their peer).
                            if reg.foreign.len() < MAX_FOREIGN {
                                reg.foreign.insert(from, (owner, id));
                            }
                            Found::Forward(owner)
                        }
                    } else {
                        Found::Nothing
                    }
                };
                match found {
                    Found::Adopt(peer, room, listen_only) => {
                        let id = peer.id();
                        self.mux.adopt(peer, now);
                        self.peers.insert(id, Local { room, connected: false, listen_only });
                        self.mux.handle_datagram(from, data, now);
                    }
                    Found::Forward(owner) => self.forward(owner, from, data),
                    Found::Nothing => {
                        self.counters.unknown_ufrag.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Route::Unrouted => {
                let owner = {
                    let reg = lock(&self.shared.registry);
                    if reg.foreign.is_empty() { None } else { reg.foreign.get(&from).map(|(owner, _)| *owner) }
                };
                match owner {
                    Some(owner) if owner != self.index => self.forward(owner, from, data),
                    _ => {}
                }
            }
        }
    }

    fn forward(&self, owner: usize, from: SocketAddr, data: &[u8]) {
        if let Some(io) = self.shared.io().get(owner) {
            io.send(IoCommand::Forward { from, data: data.to_vec() });
        }
    }

    /// Acts on the mux's events.
    fn events(&mut self) {
        while let Some(event) = self.mux.poll_event() {
            match event {
                MuxEvent::Audio(peer, a) => {
                    let Some(local) = self.peers.get(&peer) else { continue };
                    if local.listen_only {
                        self.counters.listen_only_dropped.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let packet = Packet { seq: a.seq, timestamp: a.timestamp, payload: a.payload, level: a.level };
                    let (_, batch) =
                        self.inbox.entry(local.room.id.clone()).or_insert_with(|| (local.room.clone(), Vec::new()));
                    batch.push((ParticipantId(peer.0), a.ssrc, packet));
                }
                MuxEvent::Connected(peer) => {
                    let Some(local) = self.peers.get_mut(&peer) else { continue };
                    if !local.connected {
                        local.connected = true;
                        self.rooms.entry(local.room.id.clone()).or_default().push(peer);
                        if let Some(m) = lock(&local.room.members).get_mut(&peer.0) {
                            m.connected = true;
                        }
                        tracing::debug!(room = %local.room.id, %peer, io = self.index, "peer connected");
                    }
                }
                MuxEvent::Closed(peer, why) => {
                    let _ = self.mux.remove(peer);
                    if let Some(local) = self.forget(peer) {
                        // The mux counts failures and time-outs itself (MuxStats).
                        let reason = match why {
                            CloseReason::Failed => LeaveReason::Failed,
                            CloseReason::TimedOut => LeaveReason::TimedOut,
                            CloseReason::Closed => LeaveReason::Left,
                        };
                        self.shared.remove_participant(&local.room, peer.0, reason);
                    }
                }
            }
        }
    }

    fn forget(&mut self, id: PeerId) -> Option<Local> {
        let local = self.peers.remove(&id)?;
        if let Some(list) = self.rooms.get_mut(&local.room.id) {
            list.retain(|p| *p != id);
            if list.is_empty() {
                self.rooms.remove(&local.room.id);
            }
        }
        Some(local)
    }

    /// Appends this turn's packets to their rooms' inboxes: one lock per room.
    fn flush_inbox(&mut self) {
        for (_, (room, batch)) in self.inbox.iter_mut() {
            if !batch.is_empty() {
                lock(&room.inbox).append(batch);
            }
        }
        // Forget rooms idle this turn so the map does not keep closed rooms alive.
        self.inbox.retain(|_, (room, _)| !room.closed.load(Ordering::Relaxed));
    }

    fn drain_transmits(&mut self) {
        while let Some(t) = self.mux.poll_transmit() {
            self.transmits.push(t);
        }
    }

    /// Sends everything queued, `BATCH` datagrams per `sendmmsg`.
    fn flush_transmits(&mut self) {
        self.drain_transmits();
        let mut start = 0;
        while start < self.transmits.len() {
            let chunk = &self.transmits[start..(start + BATCH).min(self.transmits.len())];
            let iovs: Vec<[std::io::IoSlice<'_>; 1]> = chunk.iter().map(|t| [std::io::IoSlice::new(&t.data)]).collect();
            let addrs: Vec<Option<SockaddrStorage>> = chunk.iter().map(|t| Some(SockaddrStorage::from(t.to))).collect();
            let sent =
                sendmmsg(self.socket.as_raw_fd(), &mut self.tx_headers, iovs.iter(), &addrs, [], MsgFlags::empty())
                    .map(Iterator::count);
            match sent {
                Ok(n) if n > 0 => start += n,
                // The first datagram of the chunk failed: drop it (UDP loses datagrams; peers cope).
                _ => {
                    self.counters.send_errors.fetch_add(1, Ordering::Relaxed);
                    metrics::packets_out(0, 0, 1);
                    start += 1;
                }
            }
        }
        self.transmits.clear();
    }

    /// Publishes the mux's counters (to the server's stats and the metrics).
    fn count(&mut self) {
        let s = self.mux.stats();
        if s == self.last_stats {
            return;
        }
        let last = self.last_stats;
        metrics::packets_in(s.datagrams_in - last.datagrams_in, s.bytes_in - last.bytes_in);
        metrics::packets_out(s.datagrams_out - last.datagrams_out, s.bytes_out - last.bytes_out, 0);
        metrics::media(&mut self.last_stats, s);
        *lock(&self.counters.mux) = s;
    }
}

fn to_socket_addr(a: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::from(std::net::SocketAddrV4::from(*v4)));
    }
    a.as_sockaddr_in6().map(|v6| SocketAddr::from(std::net::SocketAddrV6::from(*v6)))
}
