//! The I/O piece: one UDP socket per node for all its cross-node rooms.
//! The caller (the mix clock) seals and sends each tick with
//! [`MeshSocket::send_tick`] (non-blocking sends: a full socket buffer
//! drops the datagram and counts it) and drains verified messages with
//! [`MeshSocket::drain`] from a bounded queue that a receive thread
//! (`mesh-rx`) fills; when the caller falls behind, new messages are
//! dropped and counted, the thread never waits.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::crypto::{Message, Opener, RoomKey, Sealer};
use crate::error::{DropReason, SealError};
use crate::wire::{Candidate, Header, MAX_DATAGRAM_BYTES, NodeId, RoomId, Summary};

/// Datagrams the receive thread reads in a row before it looks at its stop flag again.
const RECV_BATCH: usize = 64;
/// How long the receive thread waits for a datagram before checking its stop flag.
const POLL_MS: u16 = 20;

/// A node of a room, where its mesh socket listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// The node.
    pub node: NodeId,
    /// Its mesh socket's address.
    pub addr: SocketAddr,
}

/// A verified message and when it arrived.
#[derive(Debug, Clone)]
pub struct Received {
    /// The opened datagram.
    pub message: Message,
    /// Where it came from.
    pub from: SocketAddr,
    /// When the receive thread read it.
    pub at: Instant,
}

/// Counters of a mesh socket (monotonic since its start).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MeshStats {
    /// Datagrams sent.
    pub sent: u64,
    /// Bytes of them (UDP payloads).
    pub sent_bytes: u64,
    /// Datagrams not sent: the socket's buffer was full, or an error.
    pub send_dropped: u64,
    /// Candidates left out of a tick for a frame over the maximum.
    pub oversize: u64,
    /// Datagrams verified and queued.
    pub received: u64,
    /// Bytes of them (UDP payloads).
    pub received_bytes: u64,
    /// Verified datagrams dropped because the queue was full.
    pub queue_overflow: u64,
    /// Dropped: does not parse.
    pub malformed: u64,
    /// Dropped: unknown room, sender, or a sender from an address not its own.
    pub unknown: u64,
    /// Dropped: another epoch of the room.
    pub wrong_epoch: u64,
    /// Dropped: the tag does not verify.
    pub auth_failed: u64,
    /// Dropped: replayed or older than the replay window.
    pub replayed: u64,
    /// Dropped: an older session of the sender.
    pub stale_session: u64,
}

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    sent_bytes: AtomicU64,
    received_bytes: AtomicU64,
    send_dropped: AtomicU64,
    oversize: AtomicU64,
    received: AtomicU64,
    queue_overflow: AtomicU64,
    malformed: AtomicU64,
    unknown: AtomicU64,
    wrong_epoch: AtomicU64,
    auth_failed: AtomicU64,
    replayed: AtomicU64,
    stale_session: AtomicU64,
}

impl Counters {
    fn drop(&self, why: DropReason) {
        let c = match why {
            DropReason::Malformed(_) => &self.malformed,
            DropReason::Unknown => &self.unknown,
            DropReason::WrongEpoch => &self.wrong_epoch,
            DropReason::Auth => &self.auth_failed,
            DropReason::Replay => &self.replayed,
            DropReason::StaleSession => &self.stale_session,
        };
        c.fetch_add(1, Relaxed);
    }
}

struct RoomState {
    opener: Opener,
    peers: Vec<Peer>,
}

struct Shared {
    rooms: Mutex<HashMap<RoomId, RoomState>>,
    stop: AtomicBool,
    counters: Counters,
}

impl Shared {
    fn rooms(&self) -> MutexGuard<'_, HashMap<RoomId, RoomState>> {
        // A panic while holding the lock leaves plain data: go on with it.
        self.rooms.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One node's mesh endpoint.
pub struct MeshSocket {
    socket: Arc<UdpSocket>,
    shared: Arc<Shared>,
    queue: Receiver<Received>,
    thread: Option<JoinHandle<()>>,
    node: NodeId,
    /// The next sealer's session: each room joined (or rejoined) seals under
    /// a session of its own, so a tick number reused after a rejoin is
    /// never a nonce reused under one key.
    session: u64,
    secret: Vec<u8>,
    /// Previous cluster secrets (a roll): their room keys open peers' media too.
    previous: Vec<Vec<u8>>,
    sealers: HashMap<RoomId, Sealer>,
    datagrams: Vec<Vec<u8>>,
    addrs: Vec<SocketAddr>,
}

impl std::fmt::Debug for MeshSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeshSocket").field("node", &self.node).field("session", &self.session).finish_non_exhaustive()
    }
}

impl MeshSocket {
    /// Binds `addr` and starts the receive thread. `session` must exceed
    /// every session an earlier run of this node used: each room joined
    /// takes the next value (`session`, `session + 1`, …), so pass
    /// [`MeshSocket::session_now`] (Unix milliseconds × 2²⁰); `secret` is
    /// the cluster's shared secret; `queue` the most verified messages held
    /// for the caller.
    pub fn bind(addr: SocketAddr, node: NodeId, session: u64, secret: &[u8], queue: usize) -> io::Result<Self> {
        let socket = Arc::new(UdpSocket::bind(addr)?);
        socket.set_nonblocking(true)?;
        let shared = Arc::new(Shared {
            rooms: Mutex::new(HashMap::new()),
            stop: AtomicBool::new(false),
            counters: Counters::default(),
        });
        let (tx, rx) = sync_channel(queue.max(1));
        let thread = {
            let (socket, shared) = (Arc::clone(&socket), Arc::clone(&shared));
            std::thread::Builder::new().name("mesh-rx".into()).spawn(move || receive_loop(&socket, &shared, &tx))?
        };
        Ok(Self {
            socket,
            shared,
            queue: rx,
            thread: Some(thread),
            node,
            session,
            secret: secret.to_vec(),
            previous: Vec::new(),
            sealers: HashMap::new(),
            datagrams: Vec::new(),
            addrs: Vec::new(),
        })
    }

    /// A session base for [`MeshSocket::bind`]: the time in Unix
    /// milliseconds shifted left by 20, above any session a run of this node
    /// started at least a millisecond earlier used (unless it joined rooms
    /// more than 2²⁰ times a millisecond).
    pub fn session_now() -> u64 {
        let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        ms << 20
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Also opens the datagrams of rooms joined from now on when sealed
    /// under `secret` (a previous cluster secret, while a new one rolls
    /// out); this node seals under the secret it was bound with only.
    pub fn also_accept(&mut self, secret: &[u8]) {
        self.previous.push(secret.to_vec());
    }

    /// Joins (or updates) a room at `epoch` with its other nodes. Same
    /// epoch: the peer set is replaced, peers kept keep their replay state.
    /// New epoch: new keys, fresh state. This node in `peers` is ignored.
    pub fn set_room(&mut self, room: RoomId, epoch: u64, peers: &[Peer]) {
        let peers: Vec<Peer> = peers.iter().copied().filter(|p| p.node != self.node).collect();
        let ids = peers.iter().map(|p| p.node);
        let mut rooms = self.shared.rooms();
        match rooms.get_mut(&room) {
            Some(r) if r.opener.room_epoch().1 == epoch => {
                r.opener.set_peers(ids);
                r.peers = peers;
            }
            _ => {
                let opener = self
                    .previous
                    .iter()
                    .fold(Opener::new(RoomKey::derive(&self.secret, room, epoch), self.node, ids), |o, old| {
                        o.also_accept(RoomKey::derive(old, room, epoch))
                    });
                rooms.insert(room, RoomState { opener, peers });
                let sealer = Sealer::new(&RoomKey::derive(&self.secret, room, epoch), self.node, self.session);
                self.session += 1;
                self.sealers.insert(room, sealer);
            }
        }
    }

    /// Leaves a room: its datagrams are refused from now on.
    pub fn remove_room(&mut self, room: RoomId) {
        self.shared.rooms().remove(&room);
        self.sealers.remove(&room);
    }

    /// Seals `tick` of `room` and sends it to every peer of the room. Never
    /// blocks. Returns the datagrams sent per peer (0 for a room not set).
    pub fn send_tick(
        &mut self,
        room: RoomId,
        tick: u64,
        summary: Summary,
        candidates: &[Candidate],
    ) -> Result<usize, SealError> {
        let Some(sealer) = self.sealers.get_mut(&room) else { return Ok(0) };
        let sealed = sealer.seal_tick(tick, summary, candidates, &mut self.datagrams)?;
        let c = &self.shared.counters;
        c.oversize.fetch_add(sealed.oversize as u64, Relaxed);
        self.addrs.clear();
        if let Some(r) = self.shared.rooms().get(&room) {
            self.addrs.extend(r.peers.iter().map(|p| p.addr));
        }
        for d in &self.datagrams {
            for addr in &self.addrs {
                match self.socket.send_to(d, addr) {
                    Ok(n) => {
                        c.sent_bytes.fetch_add(n as u64, Relaxed);
                        c.sent.fetch_add(1, Relaxed)
                    }
                    Err(_) => c.send_dropped.fetch_add(1, Relaxed),
                };
            }
        }
        Ok(sealed.parts)
    }

    /// Takes up to `max` verified messages, oldest first. Never blocks.
    pub fn drain(&self, max: usize, out: &mut Vec<Received>) -> usize {
        let mut n = 0;
        while n < max {
            let Ok(r) = self.queue.try_recv() else { break };
            out.push(r);
            n += 1;
        }
        n
    }

    /// The counters.
    pub fn stats(&self) -> MeshStats {
        let c = &self.shared.counters;
        MeshStats {
            sent: c.sent.load(Relaxed),
            sent_bytes: c.sent_bytes.load(Relaxed),
            received_bytes: c.received_bytes.load(Relaxed),
            send_dropped: c.send_dropped.load(Relaxed),
            oversize: c.oversize.load(Relaxed),
            received: c.received.load(Relaxed),
            queue_overflow: c.queue_overflow.load(Relaxed),
            malformed: c.malformed.load(Relaxed),
            unknown: c.unknown.load(Relaxed),
            wrong_epoch: c.wrong_epoch.load(Relaxed),
            auth_failed: c.auth_failed.load(Relaxed),
            replayed: c.replayed.load(Relaxed),
            stale_session: c.stale_session.load(Relaxed),
        }
    }
}

impl Drop for MeshSocket {
    fn drop(&mut self) {
        self.shared.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn receive_loop(socket: &UdpSocket, shared: &Shared, tx: &SyncSender<Received>) {
    use nix::poll::{PollFd, PollFlags, poll};
    let mut buf = vec![0u8; MAX_DATAGRAM_BYTES + 1];
    while !shared.stop.load(Relaxed) {
        let mut fds = [PollFd::new(socket.as_fd(), PollFlags::POLLIN)];
        if poll(&mut fds, POLL_MS).is_err() {
            continue;
        }
        for _ in 0..RECV_BATCH {
            let (len, from) = match socket.recv_from(&mut buf) {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => continue,
            };
            let at = Instant::now();
            match verify(shared, &mut buf[..len], from) {
                Ok(message) => match tx.try_send(Received { message, from, at }) {
                    Ok(()) => {
                        shared.counters.received_bytes.fetch_add(len as u64, Relaxed);
                        shared.counters.received.fetch_add(1, Relaxed)
                    }
                    Err(TrySendError::Full(_)) => shared.counters.queue_overflow.fetch_add(1, Relaxed),
                    Err(TrySendError::Disconnected(_)) => return,
                },
                Err(why) => {
                    shared.counters.drop(why);
                    0
                }
            };
        }
    }
}

fn verify(shared: &Shared, datagram: &mut [u8], from: SocketAddr) -> Result<Message, DropReason> {
    // A datagram of MAX+1 bytes was truncated by recv: too large.
    let header = Header::read(datagram)?;
    let mut rooms = shared.rooms();
    let room = rooms.get_mut(&header.room).ok_or(DropReason::Unknown)?;
    // Only from the address the peer set names (cheap, before any crypto).
    if !room.peers.iter().any(|p| p.node == header.sender && p.addr == from) {
        return Err(DropReason::Unknown);
    }
    room.opener.open(&header, datagram)
}
