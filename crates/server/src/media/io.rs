//! The I/O threads `io-0`, `io-1`, …: each owns a socket on the media port
//! ([`BatchSocket`]) and a [`Mux`] with the peers whose first ICE check
//! reached that socket.
//!
//! One loop turn, bounded: wait (poll on the socket and a wake-up eventfd)
//! → commands (the clock's mixes to send, peers to close, forwarded
//! datagrams) → up to [`RECV_BATCHES`] × [`BATCH`] datagrams → timers →
//! events (packets batched into each room's inbox, one lock per room per
//! turn) → everything to send, [`BATCH`] datagrams per syscall.
//!
//! A datagram from an address no peer here has costs this thread alone: the
//! mux drops it (or an ICE check that does not verify), or this thread's own
//! table of forwarded addresses sends it on. Only a verified check for a peer
//! the mux does not hold asks the shared registry (`Rooms::claim`, a lock).

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, ppoll};
use nix::sys::eventfd::{EfdFlags, EventFd};
use tutti_mix::{Packet, ParticipantId};
use tutti_rtc::{Acceptor, CloseReason, Mux, MuxEvent, MuxStats, PeerId, Route, Transmit};

use super::clock::TICK;
use super::command::{IoCommand, IoCounters, IoHandle};
use super::socket::{BATCH, BatchSocket};
use super::tcp::{Frame, TcpPlane};
use crate::metrics;
use crate::room::{Claim, Effect, Inboxes, LeaveReason, Room, RoomKey, RoomMix, Rooms};
use crate::sync::lock;

/// Receive batches per loop turn, so commands and timers are never starved.
pub(crate) const RECV_BATCHES: usize = 8;
/// Peers whose send state is read ahead at a time ([`Mux::warm`]): enough
/// for their cache misses to overlap, few enough that what was read is still
/// in the L1 cache when their packets are built (a big room's whole state is
/// not: each packet also reads its peer's cold SRTP key).
const WARM_AHEAD: usize = 32;
/// Longest wait for work when no timer is due.
const IDLE_WAIT: Duration = Duration::from_millis(100);
/// Longest wait while bytes wait for a TCP connection's kernel buffer to drain.
const TCP_RETRY: Duration = Duration::from_millis(5);
/// Most client addresses one I/O thread forwards to another (see `IoThread::forwards`).
pub(crate) const MAX_FORWARDS: usize = 16_384;
/// How often forwarded addresses unused for the peer timeout are dropped.
const FORWARDS_PRUNE: Duration = Duration::from_secs(1);

/// A peer as its I/O thread knows it.
struct Local {
    room: Arc<Room>,
    connected: bool,
    /// While set (its token lacks `speak`, or an admin revoked it), its audio is dropped here.
    listen_only: crate::room::ListenOnly,
    /// The SSRC its packets carry, once seen.
    ssrc: Option<u32>,
}

/// What every I/O thread shares with the rest of the media plane.
pub(crate) struct IoShared {
    pub(crate) rooms: Arc<Rooms>,
    /// Every I/O thread, for forwarding; set once they all run.
    pub(crate) peers_io: std::sync::OnceLock<Arc<[IoHandle]>>,
    /// Under load, datagrams are read this long before each tick (see `IoThread::wait`).
    pub(crate) batch_window: Duration,
    /// Tick n of the mixer is due at `tick_epoch + n · TICK`.
    pub(crate) tick_epoch: Instant,
    /// Nice value of the thread (see `crate::priority`).
    pub(crate) thread_nice: i32,
    /// ICE-TCP limits (see `tcp`); the listeners come with `spawn`.
    pub(crate) tcp_limits: tutti_rtc::TcpLimits,
    /// A forwarded address unused this long is forgotten (the peer timeout).
    pub(crate) forward_idle: Duration,
}

impl IoShared {
    fn io(&self, k: usize) -> Option<&IoHandle> {
        self.peers_io.get().and_then(|v| v.get(k))
    }
}

struct IoThread {
    index: usize,
    shared: Arc<IoShared>,
    socket: Option<BatchSocket>,
    mux: Mux,
    rx: Receiver<IoCommand>,
    wake: Arc<EventFd>,
    counters: Arc<IoCounters>,
    peers: HashMap<PeerId, Local>,
    /// Connected peers by room: who gets each room's mix.
    rooms: HashMap<RoomKey, Vec<PeerId>>,
    /// Packets received this turn, by room, for the rooms' inboxes.
    inbox: Inboxes,
    transmits: Vec<Transmit>,
    last_stats: MuxStats,
    /// ICE-TCP on the media port (`None`: off).
    tcp: Option<TcpPlane>,
    /// Frames read from TCP connections this turn.
    tcp_frames: Vec<Frame>,
    last_tcp: (tutti_rtc::TcpStats, u64),
    /// Client addresses whose ICE check (verified by the mux) named a peer
    /// another I/O thread owns: the kernel hashes their datagrams to this
    /// socket, and they go there (owner, last used). Learnt only from
    /// authenticated checks, at most [`MAX_FORWARDS`], dropped when unused
    /// for the peer timeout: a datagram from an unknown address is looked up
    /// here, by this thread alone, never in a shared table under a lock.
    forwards: HashMap<SocketAddr, (usize, Instant)>,
    next_prune: Instant,
}

/// How long from `now` until the next read under load: `lead` before the
/// next tick (ticks at `epoch + n · TICK`) that is still that far away.
fn until_read(now: Instant, epoch: Instant, lead: Duration) -> Duration {
    let period = TICK.as_nanos();
    let into = now.saturating_duration_since(epoch).as_nanos() % period;
    let read_at = TICK.saturating_sub(lead).as_nanos();
    let wait = if into < read_at { read_at - into } else { period - into + read_at };
    Duration::from_nanos(u64::try_from(wait).unwrap_or(u64::MAX))
}

/// Starts one I/O thread per socket; returns their handles and threads.
pub(crate) fn spawn(
    shared: &Arc<IoShared>,
    acceptor: &Acceptor,
    sockets: Vec<UdpSocket>,
    listeners: Vec<TcpListener>,
) -> std::io::Result<(Vec<IoHandle>, Vec<JoinHandle<()>>)> {
    let mut handles = Vec::new();
    let mut threads = Vec::new();
    let mut listeners = listeners.into_iter();
    for (index, socket) in sockets.into_iter().enumerate() {
        let tcp = match listeners.next() {
            Some(l) => Some(TcpPlane::new(l, shared.tcp_limits)?),
            None => None,
        };
        let (tx, rx) = mpsc::channel();
        let wake = Arc::new(
            EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
                .map_err(std::io::Error::from)?,
        );
        let counters = Arc::new(IoCounters::default());
        handles.push(IoHandle { tx, wake: wake.clone(), counters: counters.clone() });
        let shared = shared.clone();
        let acceptor = acceptor.clone();
        let thread = std::thread::Builder::new().name(format!("io-{index}")).spawn(move || {
            crate::priority::media_thread(shared.thread_nice);
            IoThread {
                index,
                shared,
                socket: Some(BatchSocket::new(socket)),
                mux: Mux::with_acceptor(acceptor),
                rx,
                wake,
                counters,
                peers: HashMap::new(),
                rooms: HashMap::new(),
                inbox: Inboxes::default(),
                transmits: Vec::new(),
                last_stats: MuxStats::default(),
                tcp,
                tcp_frames: Vec::new(),
                last_tcp: Default::default(),
                forwards: HashMap::new(),
                next_prune: Instant::now() + FORWARDS_PRUNE,
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
            self.receive_tcp(now);
            let now = Instant::now();
            self.mux.handle_timeout(now);
            if let Some(tcp) = &mut self.tcp {
                tcp.handle_timeout(now);
            }
            if now >= self.next_prune {
                self.next_prune = now + FORWARDS_PRUNE;
                let idle = self.shared.forward_idle;
                self.forwards.retain(|_, (_, used)| now.saturating_duration_since(*used) < idle);
            }
            self.events();
            self.inbox.flush();
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
    /// the thread: it reads twice a tick, after sending the tick's mixes (a
    /// command, which wakes it at once) and the batch window before the next
    /// tick, each time taking in one go what arrived meanwhile. The mixer
    /// takes a participant's audio only at its ticks, so a datagram read
    /// before the tick is mixed in it whenever it was read; reading as they
    /// come, or every couple of milliseconds, cost a wake-up each (in a VM
    /// the dearest part of a read) for nothing.
    fn wait(&mut self, batching: bool) {
        let now = Instant::now();
        let mut until = self.mux.poll_timeout().map_or(IDLE_WAIT, |t| t.saturating_duration_since(now)).min(IDLE_WAIT);
        if let Some(tcp) = &self.tcp {
            if let Some(t) = tcp.poll_timeout() {
                until = until.min(t.saturating_duration_since(now));
            }
            if tcp.has_pending_writes() {
                // A connection's kernel buffer was full: try again soon.
                until = until.min(TCP_RETRY);
            }
        }
        let window = self.shared.batch_window;
        let batching = batching && !window.is_zero();
        if batching {
            until = until.min(until_read(now, self.shared.tick_epoch, window));
        }
        let timeout = nix::sys::time::TimeSpec::from_duration(until);
        let wake = PollFd::new(self.wake.as_fd(), PollFlags::POLLIN);
        // TCP connections (one epoll descriptor for all) wake the thread even
        // while UDP batches: they are few, and their reads are bounded per turn.
        let tcp = self.tcp.as_ref().map(|t| PollFd::new(t.fd(), PollFlags::POLLIN));
        match (&self.socket, batching, tcp) {
            (Some(s), false, Some(tcp)) => {
                let socket = PollFd::new(s.socket.as_fd(), PollFlags::POLLIN);
                let _ = ppoll(&mut [socket, wake, tcp], Some(timeout), None);
            }
            (Some(s), false, None) => {
                let socket = PollFd::new(s.socket.as_fd(), PollFlags::POLLIN);
                let _ = ppoll(&mut [socket, wake], Some(timeout), None);
            }
            (_, _, Some(tcp)) => {
                let _ = ppoll(&mut [wake, tcp], Some(timeout), None);
            }
            _ => {
                let _ = ppoll(&mut [wake], Some(timeout), None);
            }
        }
        // Reset the eventfd (EAGAIN when nothing was written).
        let _ = self.wake.read();
    }

    /// Runs queued commands. Returns false on shutdown.
    fn commands(&mut self, now: Instant) -> bool {
        while let Ok(cmd) = self.rx.try_recv() {
            match cmd {
                IoCommand::Deliver(mixes) => self.deliver(&mixes, now),
                IoCommand::Close(id) => self.close(id),
                IoCommand::Rehome(id) => self.rehome(id),
                IoCommand::Restart { peer, offer, reply } => {
                    // The API may have given up waiting; the answer then goes nowhere.
                    let _ = reply.send(self.mux.restart(peer, &offer, now));
                }
                IoCommand::Forward { from, data } => self.route(from, &data, now),
                IoCommand::Shutdown => return false,
                IoCommand::TcpConn(moving, frames) => self.attach_tcp(*moving, frames, now),
            }
        }
        true
    }

    /// Closes one of this thread's peers (DTLS close_notify) and forgets it.
    fn close(&mut self, id: PeerId) {
        if self.mux.remove(id).is_ok() {
            self.forget(id);
        }
    }

    /// Moves one of this thread's peers to the room the registry now has it
    /// in (a breakout): its packets go to that room's inbox and it is sent
    /// that room's mix from the next delivery on. Its SSRC is told to the
    /// new room with its next packet.
    fn rehome(&mut self, id: PeerId) {
        let Some(room) = self.shared.rooms.room_of(id.0) else { return };
        let Some(local) = self.peers.get_mut(&id) else { return };
        if local.room.key == room.key {
            return;
        }
        let old = std::mem::replace(&mut local.room, room.clone());
        local.ssrc = None;
        let connected = local.connected;
        if let Some(list) = self.rooms.get_mut(&old.key) {
            list.retain(|p| *p != id);
            if list.is_empty() {
                self.rooms.remove(&old.key);
            }
        }
        if connected {
            self.rooms.entry(room.key).or_default().push(id);
        }
        tracing::debug!(from = %old.id, to = %room.id, peer = %id, io = self.index, "peer moved to another room");
    }

    /// Sends each of this thread's connected peers its mix.
    fn deliver(&mut self, mixes: &[RoomMix], now: Instant) {
        for mix in mixes {
            // A silent room's peers are not even looked at (their state is cold).
            if mix.sends_nothing() {
                continue;
            }
            // Taken out while sending (sending changes no room's peers), and put back.
            let Some(peers) = self.rooms.get_mut(&mix.key).map(std::mem::take) else { continue };
            for ahead in peers.chunks(WARM_AHEAD) {
                self.mux.warm(ahead);
                for &peer in ahead {
                    let feed = mix.feed_for(ParticipantId(peer.0));
                    if feed.payload.is_empty() {
                        continue;
                    }
                    // Stamped from the tick: a skipped tick or a DTX pause is a gap the
                    // receiver conceals, never delay that grows. A peer closed since its
                    // last event is reported by the mux; nothing to do here.
                    let _ = self.mux.send_audio_at(peer, mix.tick, &feed.payload, feed.level, &feed.contributors, now);
                }
                // Out in batches as they fill, also within a big room: the
                // sent buffers come back to the mux while still in cache, and
                // the next peers' packets are built in them.
                self.drain_transmits();
                if self.transmits.len() >= BATCH * 4 {
                    self.flush_transmits();
                }
            }
            if let Some(list) = self.rooms.get_mut(&mix.key) {
                *list = peers;
            }
        }
    }

    /// Reads what is waiting, at most `RECV_BATCHES` batches. Returns how
    /// many datagrams, and whether it stopped at the bound (more may be waiting).
    fn receive(&mut self, now: Instant) -> (usize, bool) {
        let Some(mut socket) = self.socket.take() else { return (0, false) };
        let mut total = 0;
        let mut full = true;
        for _ in 0..RECV_BATCHES {
            let n = socket.receive(|from, data| self.route(from, data, now));
            total += n;
            if n < BATCH {
                full = false;
                break;
            }
        }
        self.socket = Some(socket);
        (total, full)
    }

    /// Hands a datagram to its peer: here, adopted from the peers waiting for
    /// their first check, or forwarded to the I/O thread that owns it. Only
    /// a check the mux verified (`Route::UnknownUfrag`) reaches the shared
    /// registry; anything else from an unknown address is this thread's
    /// business alone (its forwarded addresses, or dropped and counted).
    fn route(&mut self, from: SocketAddr, data: &[u8], now: Instant) {
        match self.mux.handle_datagram(from, data, now) {
            Route::Peer(_) => {}
            Route::UnknownUfrag(ufrag) => match self.claim(&ufrag) {
                Claim::Adopt { peer, room, listen_only } => {
                    let id = peer.id();
                    self.mux.adopt(peer, now);
                    self.peers.insert(id, Local { room, connected: false, listen_only, ssrc: None });
                    self.mux.handle_datagram(from, data, now);
                }
                Claim::Forward(owner) if owner != self.index => {
                    if self.forwards.len() < MAX_FORWARDS || self.forwards.contains_key(&from) {
                        self.forwards.insert(from, (owner, now));
                    }
                    self.forward(owner, from, data);
                }
                Claim::Forward(_) | Claim::Unknown => {
                    self.counters.unknown_ufrag.fetch_add(1, Ordering::Relaxed);
                }
            },
            Route::Unrouted => {
                // One lookup in this thread's own table; the mux counted it if nobody's.
                if let Some((owner, used)) = self.forwards.get_mut(&from) {
                    *used = now;
                    let owner = *owner;
                    self.forward(owner, from, data);
                }
            }
        }
    }

    /// Asks the shared registry about a verified check's ufrag (counted).
    fn claim(&self, ufrag: &str) -> Claim {
        self.counters.claims.fetch_add(1, Ordering::Relaxed);
        self.shared.rooms.claim(ufrag, self.index)
    }

    /// Reads the TCP connections that are ready and routes their frames.
    fn receive_tcp(&mut self, now: Instant) {
        let Some(tcp) = &mut self.tcp else { return };
        let mut frames = std::mem::take(&mut self.tcp_frames);
        tcp.receive(now, &mut frames);
        let mut i = 0;
        // Bounded by the frames read this turn.
        while i < frames.len() {
            let conn = frames[i].conn;
            if let Some(owner) = self.route_tcp(conn, frames[i].from, &frames[i].data, now) {
                // The connection moves to its peer's thread with the rest of its frames.
                let rest: Vec<Vec<u8>> =
                    frames[i..].iter().filter(|f| f.conn == conn).map(|f| f.data.clone()).collect();
                frames.retain(|f| f.conn != conn);
                self.move_tcp(conn, owner, rest);
                continue;
            }
            i += 1;
        }
        frames.clear();
        self.tcp_frames = frames;
    }

    /// Hands one TCP frame to its peer, as [`IoThread::route`] does a
    /// datagram. Returns the I/O thread the connection must move to, if its
    /// peer lives there. A frame that reaches no peer closes its connection
    /// (its peer is gone, or it never had one).
    fn route_tcp(&mut self, conn: tutti_rtc::ConnId, from: SocketAddr, data: &[u8], now: Instant) -> Option<usize> {
        let close = match self.mux.handle_tcp_frame(from, data, now) {
            Route::Peer(_) => false,
            Route::UnknownUfrag(ufrag) => match self.claim(&ufrag) {
                Claim::Adopt { peer, room, listen_only } => {
                    let id = peer.id();
                    self.mux.adopt(peer, now);
                    self.peers.insert(id, Local { room, connected: false, listen_only, ssrc: None });
                    self.mux.handle_tcp_frame(from, data, now);
                    false
                }
                Claim::Forward(owner) if owner != self.index => return Some(owner),
                Claim::Forward(_) | Claim::Unknown => {
                    self.counters.unknown_ufrag.fetch_add(1, Ordering::Relaxed);
                    true
                }
            },
            Route::Unrouted => true,
        };
        if close && let Some(tcp) = &mut self.tcp {
            tcp.close(conn, tutti_rtc::TcpClose::Local);
        }
        None
    }

    /// Sends a TCP connection, and frames read from it, to the thread `owner`.
    fn move_tcp(&mut self, conn: tutti_rtc::ConnId, owner: usize, frames: Vec<Vec<u8>>) {
        let Some(tcp) = &mut self.tcp else { return };
        let Some(moving) = tcp.detach(conn) else { return };
        match self.shared.io(owner) {
            Some(io) => io.send(IoCommand::TcpConn(Box::new(moving), frames)),
            None => drop(moving),
        }
    }

    /// Takes in a TCP connection another thread accepted, and routes its frames.
    fn attach_tcp(&mut self, moving: super::tcp::MovingConn, frames: Vec<Vec<u8>>, now: Instant) {
        let from = moving.conn.peer_addr();
        let Some(tcp) = &mut self.tcp else { return };
        let Some(conn) = tcp.attach(moving) else { return };
        for data in frames {
            // Its peer is here: it does not move again (a peer gone meanwhile closes it).
            if self.route_tcp(conn, from, &data, now).is_some() {
                if let Some(tcp) = &mut self.tcp {
                    tcp.close(conn, tutti_rtc::TcpClose::Local);
                }
                return;
            }
        }
    }

    fn forward(&self, owner: usize, from: SocketAddr, data: &[u8]) {
        if let Some(io) = self.shared.io(owner) {
            io.send(IoCommand::Forward { from, data: data.to_vec() });
        }
    }

    /// Acts on the mux's events.
    fn events(&mut self) {
        while let Some(event) = self.mux.poll_event() {
            match event {
                MuxEvent::Audio(peer, a) => {
                    let Some(local) = self.peers.get_mut(&peer) else { continue };
                    if local.listen_only.get() {
                        self.counters.listen_only_dropped.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let id = ParticipantId(peer.0);
                    if local.ssrc != Some(a.ssrc) {
                        local.ssrc = Some(a.ssrc);
                        local.room.set_source(id, a.ssrc);
                    }
                    let packet = Packet { seq: a.seq, timestamp: a.timestamp, payload: a.payload, level: a.level };
                    self.inbox.push(&local.room, id, packet);
                }
                MuxEvent::Connected(peer) => {
                    let Some(local) = self.peers.get_mut(&peer) else { continue };
                    if !local.connected {
                        local.connected = true;
                        self.rooms.entry(local.room.key).or_default().push(peer);
                        self.shared.rooms.set_connected(&local.room, peer.0);
                        tracing::debug!(room = %local.room.id, %peer, io = self.index, "peer connected");
                    }
                }
                MuxEvent::Closed(peer, why) => {
                    let _ = self.mux.remove(peer);
                    let Some(local) = self.forget(peer) else { continue };
                    // The mux counts failures and time-outs itself (MuxStats).
                    let reason = match why {
                        CloseReason::Failed => LeaveReason::Failed,
                        CloseReason::TimedOut => LeaveReason::TimedOut,
                        CloseReason::Closed => LeaveReason::Left,
                    };
                    if let Ok(Some(effect)) = self.shared.rooms.leave(&local.room, peer.0, reason) {
                        self.apply(effect);
                    }
                }
            }
        }
    }

    /// Carries out an effect of a room operation.
    fn apply(&mut self, effect: Effect) {
        match effect {
            // Closed and forgotten here already.
            Effect::ClosePeer { io, .. } if io == self.index => {}
            Effect::ClosePeer { peer, io } => {
                if let Some(h) = self.shared.io(io) {
                    h.send(IoCommand::Close(peer));
                }
            }
            Effect::Rehome { peer, io } if io == self.index => self.rehome(peer),
            Effect::Rehome { peer, io } => {
                if let Some(h) = self.shared.io(io) {
                    h.send(IoCommand::Rehome(peer));
                }
            }
        }
    }

    fn forget(&mut self, id: PeerId) -> Option<Local> {
        let local = self.peers.remove(&id)?;
        if let Some(list) = self.rooms.get_mut(&local.room.key) {
            list.retain(|p| *p != id);
            if list.is_empty() {
                self.rooms.remove(&local.room.key);
            }
        }
        Some(local)
    }

    fn drain_transmits(&mut self) {
        while let Some(t) = self.mux.poll_transmit() {
            if t.tcp {
                // Framed into the connection's bounded buffer; written at flush.
                if let Some(tcp) = &mut self.tcp {
                    tcp.send(&t);
                }
                self.mux.recycle(t.data);
            } else {
                self.transmits.push(t);
            }
        }
    }

    /// Sends everything queued.
    fn flush_transmits(&mut self) {
        self.drain_transmits();
        if let Some(socket) = &mut self.socket {
            let failed = socket.send(&self.transmits);
            if failed > 0 {
                self.counters.send_errors.fetch_add(failed, Ordering::Relaxed);
                metrics::packets_out(0, 0, failed);
            }
        }
        for t in self.transmits.drain(..) {
            self.mux.recycle(t.data);
        }
        if let Some(tcp) = &mut self.tcp {
            tcp.flush();
        }
    }

    /// Publishes the mux's counters (to the server's stats and the metrics).
    fn count(&mut self) {
        if let Some(tcp) = &self.tcp {
            let t = tcp.stats();
            if t != self.last_tcp {
                metrics::tcp(&self.last_tcp, &t);
                self.last_tcp = t;
                *lock(&self.counters.tcp) = t;
            }
        }
        self.counters.forwarded.store(self.forwards.len() as u64, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_load_reads_fall_the_window_before_each_tick() {
        let epoch = Instant::now();
        let ms = Duration::from_millis;
        let lead = ms(2);
        // Ticks at 0, 20, 40 ms…: reads at 18, 38, 58 ms….
        assert_eq!(until_read(epoch, epoch, lead), ms(18));
        assert_eq!(until_read(epoch + ms(5), epoch, lead), ms(13));
        assert_eq!(until_read(epoch + ms(17), epoch, lead), ms(1));
        // At or past a read point: the next tick's.
        assert_eq!(until_read(epoch + ms(18), epoch, lead), ms(20));
        assert_eq!(until_read(epoch + ms(19), epoch, lead), ms(19));
        assert_eq!(until_read(epoch + ms(20) + ms(20_000), epoch, lead), ms(18));
        // Before the epoch (a thread that started first): as at the epoch.
        assert_eq!(until_read(epoch, epoch + ms(3), lead), ms(18));
    }
}
