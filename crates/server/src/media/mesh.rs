//! One room across nodes, per tick: the glue between the mix clock, the
//! rooms' mixers and the node's mesh socket (tutti-mesh).
//!
//! ```text
//! api (every ~250 ms): Cluster::spans ─► MeshCommand::Set{room, epoch, peers} ─► bounded channel
//! mix-clock, tick t (mesh tick T = Unix time / 20 ms, the same on every node):
//!   before the rooms tick: commands ─► MeshSocket::set_room / remove_room
//!     drain the socket (non-blocking; its own mesh-rx thread verifies) ─► per room, per peer, per tick
//!     per spanned room: entries = own candidates of T−1 ∪ each live peer's of T−1
//!       ─► tutti_mesh::select(K, hysteresis) ─► set_selection(local ids + remote ids)
//!       ─► put_remote_frame(each selected remote's frame of T−1)
//!   the rooms tick (unchanged)
//!   after: per spanned room: Room::candidates ─► MeshSocket::send_tick(T) to every peer
//! ```
//!
//! Local audio is not delayed; a remote speaker is one tick later than on
//! its own node. The selection of tick T is made of the candidates of T−1,
//! so a local talker's first frame takes a seat the selection leaves free
//! for that tick only (`fill_free_seats`; not flagged selected: the next
//! selection decides), rather than being clipped on its own node. Every node that got all of T−1's datagrams before its tick
//! T selects the same speakers; a peer's `selected` flags of tick T that
//! disagree with this node's selection of T are counted as mismatches. A
//! peer silent for [`tutti_mesh::ABSENT_AFTER`] leaves selection; a remote
//! participant not selected for [`REMOTE_IDLE_TICKS`] leaves the mixer.
//! Nothing here blocks: the socket's sends are non-blocking, its receive
//! queue is drained with a bound, commands come on a bounded channel.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tutti_mesh::{
    ABSENT_AFTER, Candidate, Entry, Liveness, MAX_CANDIDATES, MeshSocket, MeshStats, NodeId, Peer, Received, RoomId,
    Speaker, Summary, select,
};
use tutti_mix::{LocalCandidate, ParticipantId};

use crate::metrics::mesh as names;
use crate::room::{REMOTE_ID_BASE, Room};

/// The mixer's tick (the clock's `TICK`), which mesh tick numbers count.
const TICK: std::time::Duration = std::time::Duration::from_millis(20);

/// A remote participant not selected for this many ticks (5 s) leaves the mixer.
pub(crate) const REMOTE_IDLE_TICKS: u64 = 250;
/// Challengers sent beyond the K loudest.
const EXTRA_CANDIDATES: usize = 2;
/// Verified datagrams taken from the socket per tick at most.
const DRAIN_PER_TICK: usize = 4096;
/// Ticks of a peer's messages kept (for late parts and the mismatch check).
const PEER_TICKS: usize = 4;
/// A peer's tick (or this node's own candidates) older than this many ticks is not mixed.
const MAX_LAG_TICKS: u64 = 3;
/// Ticks of this node's selections kept for the mismatch check.
const SELECTIONS_KEPT: usize = 8;
/// Commands queued for the clock before the API's refresher waits for the next round.
const COMMAND_QUEUE: usize = 1024;
/// Metrics are published every this many ticks (1 s).
const METRICS_TICKS: u64 = 50;

/// What the API tells the clock about spanned rooms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MeshCommand {
    /// Room `room` spans these other nodes at `epoch` (none: this node is
    /// alone in it, the mixer chooses on its own again).
    Set {
        /// The room's name.
        room: String,
        /// The room's epoch (the keys are per epoch).
        epoch: u64,
        /// The other nodes: id and mesh address (from signed records).
        peers: Vec<(String, SocketAddr)>,
    },
    /// This node no longer hosts the room.
    Remove {
        /// The room's name.
        room: String,
    },
}

/// The API's end: sends [`MeshCommand`]s to the clock, never blocking.
#[derive(Clone, Debug)]
pub(crate) struct MeshControl {
    tx: SyncSender<MeshCommand>,
    /// The mesh socket's address as published in the node's record.
    pub(crate) addr: SocketAddr,
}

impl MeshControl {
    /// Queues `command`; false when the queue is full (try again later).
    pub(crate) fn send(&self, command: MeshCommand) -> bool {
        match self.tx.try_send(command) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        }
    }
}

/// The mesh tick numbering: tick `n` of the clock is mesh tick `base + n`
/// when the clock's epoch sits on a multiple of 20 ms of Unix time
/// ([`aligned_epoch`]), so that nodes (with synchronized clocks) number
/// the same instant alike.
pub(crate) fn aligned_epoch() -> (Instant, u64) {
    let (now, wall) = (Instant::now(), SystemTime::now());
    let since = wall.duration_since(UNIX_EPOCH).unwrap_or_default();
    let period = TICK.as_nanos();
    let phase = std::time::Duration::from_nanos((since.as_nanos() % period) as u64);
    let base = (since.as_nanos() / period) as u64;
    match now.checked_sub(phase) {
        Some(epoch) => (epoch, base),
        None => (now, base),
    }
}

/// A peer's candidates of one tick (all parts received so far).
struct PeerTick {
    tick: u64,
    candidates: Vec<Candidate>,
    parts: u8,
    parts_seen: u8,
    checked: bool,
}

struct PeerState {
    ticks: VecDeque<PeerTick>,
    /// The newest of its ticks mixed here: older ones arriving now are late.
    used: u64,
}

struct RemoteState {
    id: ParticipantId,
    last_selected: u64,
}

/// One spanned room on this node.
struct MeshRoom {
    name: String,
    epoch: u64,
    peers: HashMap<NodeId, PeerState>,
    liveness: Liveness,
    /// This node's candidates of `own_tick`, as selection entries.
    own: Vec<Entry>,
    own_tick: u64,
    remotes: HashMap<Speaker, RemoteState>,
    /// This node's selections of the last few ticks.
    selections: VecDeque<(u64, Vec<Speaker>)>,
    /// The mixer's own selection is replaced (set_selection(Some)).
    overridden: bool,
    /// Left: undo what was done to the mixer, then forget.
    removed: bool,
}

/// The clock's side: owns the node's mesh socket.
pub(crate) struct Mesh {
    socket: MeshSocket,
    me: NodeId,
    commands: Receiver<MeshCommand>,
    rooms: HashMap<RoomId, MeshRoom>,
    received: Vec<Received>,
    local: Vec<LocalCandidate>,
    entries: Vec<Entry>,
    frames: Vec<(Speaker, u8, Bytes)>,
    wire: Vec<Candidate>,
    next_remote: u64,
    mismatches: u64,
    late: u64,
    tick_base: u64,
    control: MeshControl,
}

impl Mesh {
    /// Also opens media sealed under `secret` (a previous cluster secret) in
    /// the rooms joined from now on.
    pub(crate) fn also_accept(&mut self, secret: &[u8]) {
        self.socket.also_accept(secret);
    }

    /// Binds the node's mesh socket at `bind` for node `node_id`, sealing
    /// with keys derived from `secret`; `publish_ip` replaces an unspecified
    /// bound IP in the address other nodes are told ([`Mesh::addr`]).
    pub(crate) fn bind(
        bind: SocketAddr,
        node_id: &str,
        secret: &[u8],
        publish_ip: std::net::IpAddr,
    ) -> std::io::Result<Self> {
        let me = NodeId::from_name(node_id);
        let socket = MeshSocket::bind(bind, me, MeshSocket::session_now(), secret, DRAIN_PER_TICK)?;
        let bound = socket.local_addr()?;
        let addr = if bound.ip().is_unspecified() { SocketAddr::new(publish_ip, bound.port()) } else { bound };
        let (tx, commands) = sync_channel(COMMAND_QUEUE);
        let mesh = Self {
            socket,
            me,
            commands,
            rooms: HashMap::new(),
            received: Vec::new(),
            local: Vec::new(),
            entries: Vec::new(),
            frames: Vec::new(),
            wire: Vec::new(),
            next_remote: REMOTE_ID_BASE,
            mismatches: 0,
            late: 0,
            tick_base: 0,
            control: MeshControl { tx, addr },
        };
        Ok(mesh)
    }

    /// The API's end (through `MediaHandle`).
    pub(crate) fn control(&self) -> MeshControl {
        self.control.clone()
    }

    /// The address published for this node's mesh socket.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.control.addr
    }

    /// Sets the mesh tick of the clock's tick 0 (see [`aligned_epoch`]).
    pub(crate) fn set_tick_base(&mut self, base: u64) {
        self.tick_base = base;
    }

    fn apply_commands(&mut self) {
        for _ in 0..COMMAND_QUEUE {
            let Ok(command) = self.commands.try_recv() else { break };
            match command {
                MeshCommand::Set { room, epoch, peers } => {
                    let id = RoomId::from_name(&room);
                    let list: Vec<Peer> =
                        peers.iter().map(|(n, addr)| Peer { node: NodeId::from_name(n), addr: *addr }).collect();
                    self.socket.set_room(id, epoch, &list);
                    let nodes: Vec<NodeId> = list.iter().map(|p| p.node).filter(|&n| n != self.me).collect();
                    let r = self.rooms.entry(id).or_insert_with(|| MeshRoom {
                        name: room.clone(),
                        epoch,
                        peers: HashMap::new(),
                        liveness: Liveness::new(ABSENT_AFTER, []),
                        own: Vec::new(),
                        own_tick: 0,
                        remotes: HashMap::new(),
                        selections: VecDeque::new(),
                        overridden: false,
                        removed: false,
                    });
                    if r.epoch != epoch {
                        // New keys: what came under the old epoch is gone.
                        r.epoch = epoch;
                        r.peers.clear();
                    }
                    r.removed = false;
                    r.peers.retain(|n, _| nodes.contains(n));
                    for n in &nodes {
                        r.peers.entry(*n).or_insert_with(|| PeerState { ticks: VecDeque::new(), used: 0 });
                    }
                    r.liveness.set_peers(nodes);
                }
                MeshCommand::Remove { room } => {
                    let id = RoomId::from_name(&room);
                    self.socket.remove_room(id);
                    if let Some(r) = self.rooms.get_mut(&id) {
                        r.removed = true;
                        r.peers.clear();
                    }
                }
            }
        }
    }

    /// Files the verified datagrams under their room, peer and tick.
    fn take_received(&mut self, now_tick: u64) {
        self.received.clear();
        self.socket.drain(DRAIN_PER_TICK, &mut self.received);
        for r in self.received.drain(..) {
            let h = r.message.header;
            let Some(room) = self.rooms.get_mut(&h.room) else { continue };
            if h.epoch != room.epoch {
                continue;
            }
            let Some(peer) = room.peers.get_mut(&h.sender) else { continue };
            room.liveness.heard(h.sender, r.at);
            // A tick of it already mixed here (or one older) is too late.
            if h.tick <= peer.used || h.tick + PEER_TICKS as u64 + 1 < now_tick {
                self.late += 1;
                continue;
            }
            let at = match peer.ticks.iter().position(|t| t.tick == h.tick) {
                Some(i) => i,
                None => {
                    peer.ticks.push_back(PeerTick {
                        tick: h.tick,
                        candidates: Vec::new(),
                        parts: h.parts,
                        parts_seen: 0,
                        checked: false,
                    });
                    while peer.ticks.len() > PEER_TICKS {
                        peer.ticks.pop_front();
                    }
                    peer.ticks.len() - 1
                }
            };
            let Some(t) = peer.ticks.get_mut(at) else { continue };
            t.parts_seen = t.parts_seen.saturating_add(1);
            t.candidates.extend(r.message.candidates);
            // All parts in: do its selected flags agree with our selection of that tick?
            if !t.checked && t.parts_seen >= t.parts {
                t.checked = true;
                if let Some((_, ours)) = room.selections.iter().find(|(tick, _)| *tick == h.tick) {
                    let theirs = t.candidates.iter().filter(|c| c.selected).count();
                    let ours_there = ours.iter().filter(|(n, _)| *n == h.sender).count();
                    let agree = theirs == ours_there
                        && t.candidates.iter().all(|c| c.selected == ours.contains(&(h.sender, c.participant)));
                    if !agree {
                        self.mismatches += 1;
                    }
                }
            }
        }
    }

    /// Before the rooms tick (clock tick `tick`): commands, received
    /// datagrams, then each spanned room's selection and remote frames.
    pub(crate) fn before_tick(&mut self, tick: u64, rooms: &[Arc<Room>]) {
        let t = self.tick_base + tick;
        self.apply_commands();
        self.take_received(t);
        if self.rooms.is_empty() {
            return;
        }
        let now = Instant::now();
        let by_name: HashMap<&str, &Arc<Room>> = rooms.iter().map(|r| (r.id.as_str(), r)).collect();
        let me = self.me;
        let (entries, frames) = (&mut self.entries, &mut self.frames);
        let next_remote = &mut self.next_remote;
        self.rooms.retain(|_, room| {
            let local = by_name.get(room.name.as_str()).copied();
            if room.removed || room.peers.is_empty() {
                // Alone (or gone): the mixer chooses on its own again, remotes leave.
                if let Some(local) = local
                    && (room.overridden || !room.remotes.is_empty())
                {
                    local.with_mixer(|m| {
                        m.set_selection(None);
                        m.fill_free_seats(false);
                        for r in room.remotes.values() {
                            let _ = m.remove_participant(r.id);
                            local.name_remote(r.id.0, None);
                        }
                    });
                }
                room.remotes.clear();
                room.overridden = false;
                return !room.removed;
            }
            let Some(local) = local else {
                // Not hosted here (yet, or any more): nothing to mix.
                room.remotes.clear();
                room.overridden = false;
                return true;
            };
            entries.clear();
            frames.clear();
            // Our own candidates of the last tick sent (T − 1, or older after
            // ticks were skipped).
            if room.own_tick < t && room.own_tick + MAX_LAG_TICKS >= t {
                entries.extend_from_slice(&room.own);
            }
            for (&node, peer) in &mut room.peers {
                if !room.liveness.present(node, now) {
                    continue;
                }
                // Its tick T − 1; if that is missing, its newest earlier one not
                // mixed yet (a node whose clock runs a little behind is heard a
                // little later, rather than not at all).
                let Some(pt) = peer
                    .ticks
                    .iter()
                    .filter(|p| p.tick < t && p.tick > peer.used && p.tick + MAX_LAG_TICKS >= t)
                    .max_by_key(|p| p.tick)
                else {
                    continue;
                };
                peer.used = pt.tick;
                for c in &pt.candidates {
                    entries.push(Entry { node, participant: c.participant, rank: c.rank, incumbent: c.selected });
                    if !c.frame.is_empty() {
                        frames.push(((node, c.participant), c.level, Bytes::copy_from_slice(&c.frame)));
                    }
                }
            }
            let k = local.max_speakers();
            local.with_mixer(|m| {
                let hysteresis = (m.config().hysteresis_db * 256.0).clamp(0.0, f32::from(u16::MAX)) as u16;
                let speakers = select(k, hysteresis, entries);
                let mut ids = Vec::with_capacity(speakers.len());
                for &(node, participant) in &speakers {
                    if node == me {
                        ids.push(ParticipantId(participant));
                        continue;
                    }
                    let remote = room.remotes.entry((node, participant)).or_insert_with(|| {
                        let id = ParticipantId(*next_remote);
                        *next_remote =
                            if *next_remote + 1 >= REMOTE_ID_BASE * 2 { REMOTE_ID_BASE } else { *next_remote + 1 };
                        // Its talking and speaking are told by its real id.
                        local.name_remote(id.0, Some(participant));
                        RemoteState { id, last_selected: t }
                    });
                    remote.last_selected = t;
                    if !m.contains(remote.id) {
                        if m.add_remote(remote.id).is_err() {
                            continue;
                        }
                        // Seated where its own node seats it, when told (`Room::note_remote_seats`).
                        if let Some(seat) = local.remote_seat(participant) {
                            let _ = m.set_seat(remote.id, seat);
                        }
                    }
                    ids.push(remote.id);
                }
                for (who, level, frame) in frames.drain(..) {
                    if let Some(r) = room.remotes.get(&who)
                        && r.last_selected == t
                    {
                        let _ = m.put_remote_frame(r.id, level, frame);
                    }
                }
                m.set_selection(Some(ids));
                // A local talker's first frame is not clipped here while a seat is free.
                m.fill_free_seats(true);
                room.remotes.retain(|_, r| {
                    let keep = r.last_selected + REMOTE_IDLE_TICKS >= t;
                    if !keep {
                        let _ = m.remove_participant(r.id);
                        local.name_remote(r.id.0, None);
                    }
                    keep
                });
                room.selections.push_back((t, speakers));
                while room.selections.len() > SELECTIONS_KEPT {
                    room.selections.pop_front();
                }
            });
            room.overridden = true;
            true
        });
    }

    /// After the rooms ticked: each spanned room's candidates to its peers.
    pub(crate) fn after_tick(&mut self, tick: u64, rooms: &[Arc<Room>]) {
        let t = self.tick_base + tick;
        if !self.rooms.is_empty() {
            let by_name: HashMap<&str, &Arc<Room>> = rooms.iter().map(|r| (r.id.as_str(), r)).collect();
            for (&id, room) in &mut self.rooms {
                if room.peers.is_empty() {
                    continue;
                }
                let Some(local) = by_name.get(room.name.as_str()) else { continue };
                self.local.clear();
                let participants = local.with_mixer(|m| {
                    if !m.is_empty() {
                        m.candidates(EXTRA_CANDIDATES, &mut self.local);
                    }
                    m.len()
                });
                if participants == 0 {
                    continue;
                }
                self.wire.clear();
                self.wire.extend(self.local.iter().take(MAX_CANDIDATES).map(|c| Candidate {
                    participant: c.id.0,
                    level: c.level.min(127),
                    rank: c.rank,
                    selected: c.selected,
                    seq: t as u16,
                    rtp_time: (t as u32).wrapping_mul(960),
                    frame: c.frame.as_ref().map(|f| f.to_vec()).unwrap_or_default(),
                }));
                let summary = Summary {
                    participants: u32::try_from(participants).unwrap_or(u32::MAX),
                    talking: u16::try_from(self.wire.iter().filter(|c| c.level < 127).count()).unwrap_or(u16::MAX),
                    candidates: self.wire.len() as u8,
                };
                if let Err(e) = self.socket.send_tick(id, t, summary, &self.wire) {
                    tracing::debug!(room = %room.name, error = %e, "mesh tick not sent");
                }
                room.own.clear();
                let me = self.me;
                room.own.extend(self.wire.iter().map(|c| Entry {
                    node: me,
                    participant: c.participant,
                    rank: c.rank,
                    incumbent: c.selected,
                }));
                room.own_tick = t;
            }
        }
        if tick.is_multiple_of(METRICS_TICKS) {
            self.publish_metrics();
        }
    }

    /// The socket's counters (and the glue's own).
    pub(crate) fn stats(&self) -> (MeshStats, u64, u64) {
        (self.socket.stats(), self.mismatches, self.late)
    }

    fn publish_metrics(&self) {
        let (s, mismatches, late) = self.stats();
        let now = Instant::now();
        metrics::counter!(names::DATAGRAMS_SENT).absolute(s.sent);
        metrics::counter!(names::SENT_BYTES).absolute(s.sent_bytes);
        metrics::counter!(names::DATAGRAMS_RECEIVED).absolute(s.received);
        metrics::counter!(names::RECEIVED_BYTES).absolute(s.received_bytes);
        for (reason, n) in [
            ("send_failed", s.send_dropped),
            ("oversize_frame", s.oversize),
            ("queue_full", s.queue_overflow),
            ("malformed", s.malformed),
            ("unknown", s.unknown),
            ("wrong_epoch", s.wrong_epoch),
            ("auth", s.auth_failed),
            ("replayed", s.replayed),
            ("stale_session", s.stale_session),
            ("late", late),
        ] {
            metrics::counter!(names::DATAGRAMS_DROPPED, "reason" => reason).absolute(n);
        }
        metrics::counter!(names::SELECTION_MISMATCHES).absolute(mismatches);
        let spanned = self.rooms.values().filter(|r| !r.peers.is_empty());
        metrics::gauge!(names::ROOMS).set(spanned.clone().count() as f64);
        let peers: usize = spanned.map(|r| r.peers.keys().filter(|&&n| r.liveness.present(n, now)).count()).sum();
        metrics::gauge!(names::PEERS).set(peers as f64);
        let remotes: usize = self.rooms.values().map(|r| r.remotes.len()).sum();
        metrics::gauge!(names::REMOTE_PARTICIPANTS).set(remotes as f64);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use tutti_mix::{Encoder, EncoderConfig, FRAME_SAMPLES, Packet, RoomConfig, level_of, tone};

    use super::*;
    use crate::room::RoomKey;

    #[test]
    fn the_clock_epoch_falls_on_twenty_milliseconds_of_unix_time() {
        let (epoch, base) = aligned_epoch();
        let at = SystemTime::now() - epoch.elapsed();
        let us = at.duration_since(UNIX_EPOCH).unwrap().as_micros();
        let phase = us % 20_000;
        assert!(!(1_000..19_000).contains(&phase), "the epoch is {phase} µs into a 20 ms period");
        assert!(((us + 1_000) / 20_000) as u64 - base <= 1, "tick 0 is mesh tick {base}");
    }

    fn room(key: u64) -> Arc<Room> {
        Arc::new(Room::new("r".into(), RoomKey(key), tutti_mix::Room::new(RoomConfig::default()).unwrap(), 5))
    }

    /// Two nodes in one process, over loopback UDP: node a's lone talker is
    /// selected on both, and node b's listener is sent its frames unchanged.
    #[test]
    fn a_lone_talker_on_one_node_is_forwarded_unchanged_by_the_other() {
        let secret = b"0123456789abcdef0123456789abcdef";
        let ip = std::net::Ipv4Addr::LOCALHOST.into();
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let (mut a, mut b) = (Mesh::bind(any, "a", secret, ip).unwrap(), Mesh::bind(any, "b", secret, ip).unwrap());
        let (ra, rb) = (room(1), room(2));
        ra.with_mixer(|m| m.add_participant(ParticipantId(1))).unwrap();
        rb.with_mixer(|m| m.add_participant(ParticipantId(1))).unwrap();
        let set = |to: &Mesh, peer: &Mesh, name: &str| {
            to.control().send(MeshCommand::Set { room: "r".into(), epoch: 7, peers: vec![(name.into(), peer.addr())] })
        };
        assert!(set(&a, &b, "b") && set(&b, &a, "a"));
        let mut encoder = Encoder::new(&EncoderConfig::default()).unwrap();
        let mut sent = Vec::new();
        let mut forwarded = 0;
        for tick in 1..=100u64 {
            let pcm = tone(440.0, 0.3, tick * FRAME_SAMPLES as u64);
            let payload = encoder.encode(&pcm);
            sent.push(payload.clone());
            let packet =
                Packet { seq: tick as u16, timestamp: (tick * 960) as u32, payload, level: Some(level_of(&pcm)) };
            ra.deliver(&mut vec![(ParticipantId(1), packet)]);
            a.before_tick(tick, std::slice::from_ref(&ra));
            b.before_tick(tick, std::slice::from_ref(&rb));
            let _ = ra.tick(None, tick, 0);
            let heard = rb.tick(None, tick, 0).map(|(mix, _)| mix.listeners.payload.clone());
            a.after_tick(tick, std::slice::from_ref(&ra));
            b.after_tick(tick, std::slice::from_ref(&rb));
            forwarded += usize::from(heard.is_some_and(|p| !p.is_empty() && sent.contains(&p)));
            // Loopback delivery to the other node's receive thread: every
            // datagram sent is verified and queued before the next tick (a
            // busy machine may take longer than a real tick's 20 ms).
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                let ((sa, _, _), (sb, _, _)) = (a.stats(), b.stats());
                if sb.received >= sa.sent && sa.received >= sb.sent {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        assert!(forwarded >= 80, "{forwarded} of 100 ticks forwarded a's frames unchanged to b's listener");
        assert_eq!(rb.with_mixer(|m| m.remotes()), 1, "a's talker is a remote in b's mixer");
        assert_eq!(ra.with_mixer(|m| m.remotes()), 0, "b's silent listener is never a candidate");
        let ((sa, _, _), (sb, mismatches, _)) = (a.stats(), b.stats());
        assert!(sa.sent >= 99 && sb.received >= 95, "a sent {}, b received {}", sa.sent, sb.received);
        assert_eq!(mismatches, 0, "a's selected flags agree with b's selection");
        // b leaves the room: a's frames are refused from now on, the remote goes.
        assert!(b.control().send(MeshCommand::Remove { room: "r".into() }));
        b.before_tick(101, std::slice::from_ref(&rb));
        assert_eq!(rb.with_mixer(|m| (m.remotes(), m.selection().is_some())), (0, false));
    }
}
