//! What the API, the I/O threads and the mixer clock share: the rooms, the
//! registry of peers (which I/O thread owns each), and room events.
//!
//! Lock order, outer to inner: `rooms` → a room's `core` → its `members`
//! → `registry`. The media path takes none of them per packet: I/O threads
//! batch received packets into a room's `inbox` once per loop turn.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};
use std::time::Instant;

use bytes::Bytes;
use serde::Serialize;
use tokio::sync::broadcast;
use tutti_mix::{ActiveSpeaker, MixPool, Packet, ParticipantId, Room, RoomConfig};
use tutti_rtc::{Acceptor, Contributor, PeerId, ServerPeer};

use crate::Config;
use crate::auth::Auth;
use crate::io::IoHandle;
use crate::limit::AddressLimiter;

/// Locks a mutex. A panic elsewhere while holding it is a bug, but it must
/// not take every later request down with it: the state is still used.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What the WebSocket pushes about a room.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum RoomEvent {
    /// Someone joined.
    Joined { id: u64, name: String },
    /// Someone left (`left`, `timed_out`, `failed`, `room_closed`).
    Left { id: u64, reason: &'static str },
    /// Someone started or stopped talking.
    Talking { id: u64, talking: bool },
    /// Someone was muted or unmuted.
    Muted { id: u64, muted: bool },
    /// The room was deleted.
    RoomClosed,
    /// The server is shutting down: every peer is about to be closed.
    Shutdown { message: String },
}

/// What the API knows about a participant.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Member {
    pub(crate) id: u64,
    pub(crate) name: String,
    /// The identity (`sub`) of the token it joined with.
    pub(crate) identity: String,
    pub(crate) talking: bool,
    pub(crate) muted: bool,
    /// Its token lacks `speak`: muted for good, its packets dropped on arrival.
    pub(crate) listen_only: bool,
    /// Whether ICE and DTLS are up.
    pub(crate) connected: bool,
}

/// Received packets on their way to a room: (participant, SSRC, packet).
pub(crate) type Inbox = Vec<(ParticipantId, u32, Packet)>;

/// The mixer's side of a room, touched by the clock each tick.
pub(crate) struct RoomCore {
    pub(crate) room: Room,
    /// Each participant's sending SSRC, as their packets carry it (for CSRCs).
    pub(crate) ssrcs: HashMap<ParticipantId, u32>,
}

/// One room.
pub(crate) struct RoomState {
    pub(crate) id: String,
    pub(crate) core: Mutex<RoomCore>,
    /// Packets received since the last tick: (participant, SSRC, packet).
    pub(crate) inbox: Mutex<Inbox>,
    pub(crate) members: Mutex<BTreeMap<u64, Member>>,
    pub(crate) events: broadcast::Sender<RoomEvent>,
    /// The speakers of the last tick.
    pub(crate) speakers: Mutex<Arc<[ActiveSpeaker]>>,
    pub(crate) closed: AtomicBool,
    /// Its configuration (fixed at creation).
    pub(crate) max_participants: usize,
    pub(crate) max_speakers: usize,
}

impl RoomState {
    pub(crate) fn new(id: String, room: Room, max_speakers: usize) -> Self {
        let max_participants = room.config().max_participants;
        Self {
            id,
            core: Mutex::new(RoomCore { room, ssrcs: HashMap::new() }),
            inbox: Mutex::new(Vec::new()),
            members: Mutex::new(BTreeMap::new()),
            events: broadcast::channel(1024).0,
            speakers: Mutex::new(Arc::from([])),
            closed: AtomicBool::new(false),
            max_participants,
            max_speakers,
        }
    }

    /// Tells the room's WebSocket subscribers (none listening is fine).
    pub(crate) fn publish(&self, event: RoomEvent) {
        let _ = self.events.send(event);
    }

    /// Participants, as the API shows them.
    pub(crate) fn member_list(&self) -> Vec<Member> {
        lock(&self.members).values().cloned().collect()
    }
}

/// One tick's output for one room: what every participant is sent. O(K)
/// in size: listeners share one payload; each selected speaker has their own.
pub(crate) struct MixOut {
    pub(crate) room: Arc<RoomState>,
    /// The listeners' payload, level and contributors (every speaker).
    pub(crate) listener: Stream,
    /// Each selected speaker's own stream (the mix without them).
    pub(crate) speakers: Vec<(ParticipantId, Stream)>,
}

/// A payload with its RFC 6464 level and RFC 6465 contributors.
pub(crate) struct Stream {
    pub(crate) payload: Bytes,
    pub(crate) level: Option<u8>,
    pub(crate) contributors: Vec<Contributor>,
}

impl MixOut {
    /// What participant `id` is sent.
    pub(crate) fn stream_for(&self, id: ParticipantId) -> &Stream {
        self.speakers.iter().find(|(s, _)| *s == id).map_or(&self.listener, |(_, s)| s)
    }
}

/// Where a peer is.
pub(crate) struct Home {
    pub(crate) room: Arc<RoomState>,
    /// The I/O thread that adopted it; `None` while it waits for its first ICE check.
    pub(crate) io: Option<usize>,
    pub(crate) ufrag: String,
    /// Its audio is dropped on arrival (see [`Member::listen_only`]).
    pub(crate) listen_only: bool,
}

/// A peer accepted by the API, waiting for the I/O thread its first ICE check reaches.
pub(crate) struct Pending {
    pub(crate) peer: ServerPeer,
    pub(crate) since: Instant,
}

/// Which peer is where; one lock, so adoption and removal never race.
#[derive(Default)]
pub(crate) struct Registry {
    pub(crate) homes: HashMap<PeerId, Home>,
    /// Accepted peers by server ufrag, until adopted.
    pub(crate) pending: HashMap<String, Pending>,
    /// Adopted peers' ufrags, for checks that reach another I/O thread's socket.
    pub(crate) ufrags: HashMap<String, PeerId>,
    /// Remote addresses whose datagrams reach a socket other than their
    /// peer's I/O thread's: forwarded there. (I/O thread, peer); forgotten
    /// with the peer.
    pub(crate) foreign: HashMap<SocketAddr, (usize, PeerId)>,
}

/// The state shared by the API handlers and the media threads.
pub(crate) struct Shared {
    pub(crate) cfg: Config,
    /// Verifies access tokens; `None` when auth is disabled.
    pub(crate) auth: Option<Auth>,
    /// Joins per client address.
    pub(crate) joins: AddressLimiter,
    pub(crate) acceptor: Acceptor,
    pub(crate) pool: MixPool,
    pub(crate) room_defaults: RoomConfig,
    pub(crate) rooms: RwLock<BTreeMap<String, Arc<RoomState>>>,
    pub(crate) registry: Mutex<Registry>,
    /// The I/O threads' command queues, set once they run.
    pub(crate) io: OnceLock<Vec<IoHandle>>,
    pub(crate) participants: AtomicUsize,
    /// Open WebSocket sessions (shutdown waits for them to be told).
    pub(crate) ws_sessions: AtomicUsize,
    pub(crate) stopping: AtomicBool,
    pub(crate) overruns: AtomicU64,
    pub(crate) next_room: AtomicU64,
}

/// Why a participant is removed (the `reason` of the `left` event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaveReason {
    Left,
    TimedOut,
    Failed,
    RoomClosed,
}

impl LeaveReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Left => "left",
            Self::TimedOut => "timed_out",
            Self::Failed => "failed",
            Self::RoomClosed => "room_closed",
        }
    }
}

impl Shared {
    /// The state of a server that has not started its threads yet.
    pub(crate) fn new(cfg: Config, acceptor: Acceptor, pool: MixPool) -> Result<Self, crate::ServerError> {
        let setup = |e: &dyn std::fmt::Display| crate::ServerError::Setup(e.to_string());
        let room_defaults = crate::api::default_room_config(cfg.room.max_participants, cfg.room.max_speakers);
        room_defaults.validate().map_err(|e| setup(&e))?;
        let auth = if cfg.auth.disabled {
            tracing::warn!(http = %cfg.http, "auth is disabled: anyone who reaches the API may join any room (loopback only)");
            None
        } else if cfg.auth.secret.is_empty() {
            Some(Auth::generate().map_err(|e| setup(&e))?)
        } else {
            Some(Auth::new(&cfg.auth.secret).map_err(|e| setup(&e))?)
        };
        Ok(Self {
            joins: AddressLimiter::new(cfg.limits.join_rate_per_second, cfg.limits.join_burst),
            cfg,
            auth,
            acceptor,
            pool,
            room_defaults,
            rooms: RwLock::new(BTreeMap::new()),
            registry: Mutex::new(Registry::default()),
            io: OnceLock::new(),
            participants: AtomicUsize::new(0),
            ws_sessions: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            overruns: AtomicU64::new(0),
            next_room: AtomicU64::new(1),
        })
    }

    pub(crate) fn room(&self, id: &str) -> Option<Arc<RoomState>> {
        self.rooms.read().unwrap_or_else(|p| p.into_inner()).get(id).cloned()
    }

    pub(crate) fn all_rooms(&self) -> Vec<Arc<RoomState>> {
        self.rooms.read().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    pub(crate) fn io(&self) -> &[IoHandle] {
        self.io.get().map_or(&[], Vec::as_slice)
    }

    /// Adds an accepted peer to a room as a participant and makes it
    /// findable by its first ICE check. The room must have been checked for
    /// space; fails if it filled up meanwhile.
    pub(crate) fn admit(
        &self,
        room: &Arc<RoomState>,
        peer: ServerPeer,
        name: String,
        identity: String,
        listen_only: bool,
        now: Instant,
    ) -> Result<u64, tutti_mix::MixError> {
        let id = peer.id();
        let pid = ParticipantId(id.0);
        {
            let mut core = lock(&room.core);
            core.room.add_participant(pid)?;
            if listen_only {
                // Belt and braces: its packets never reach the mixer anyway.
                let _ = core.room.set_muted(pid, true);
            }
        }
        self.participants.fetch_add(1, Ordering::Relaxed);
        lock(&room.members).insert(
            id.0,
            Member {
                id: id.0,
                name: name.clone(),
                identity,
                talking: false,
                muted: listen_only,
                listen_only,
                connected: false,
            },
        );
        {
            let mut reg = lock(&self.registry);
            let ufrag = peer.ufrag().to_owned();
            reg.homes.insert(id, Home { room: room.clone(), io: None, ufrag: ufrag.clone(), listen_only });
            reg.pending.insert(ufrag, Pending { peer, since: now });
        }
        room.publish(RoomEvent::Joined { id: id.0, name });
        Ok(id.0)
    }

    /// Removes a participant from its room and closes its peer wherever it
    /// is. Returns false if it was already gone.
    pub(crate) fn remove_participant(&self, room: &RoomState, id: u64, reason: LeaveReason) -> bool {
        if lock(&room.members).remove(&id).is_none() {
            return false;
        }
        {
            let mut core = lock(&room.core);
            let _ = core.room.remove_participant(ParticipantId(id));
            core.ssrcs.remove(&ParticipantId(id));
        }
        self.participants.fetch_sub(1, Ordering::Relaxed);
        let home = {
            let mut reg = lock(&self.registry);
            let home = reg.homes.remove(&PeerId(id));
            if let Some(h) = &home {
                reg.pending.remove(&h.ufrag);
                reg.ufrags.remove(&h.ufrag);
            }
            if !reg.foreign.is_empty() {
                reg.foreign.retain(|_, (_, peer)| peer.0 != id);
            }
            home
        };
        if let Some(k) = home.and_then(|h| h.io)
            && let Some(io) = self.io().get(k)
        {
            io.send(crate::io::IoCommand::Remove(PeerId(id)));
        }
        room.publish(RoomEvent::Left { id, reason: reason.as_str() });
        tracing::info!(room = %room.id, participant = id, reason = reason.as_str(), "participant left");
        true
    }

    /// Removes every participant of a room, then the room.
    pub(crate) fn close_room(&self, room: &Arc<RoomState>, reason: LeaveReason) {
        room.closed.store(true, Ordering::Relaxed);
        let ids: Vec<u64> = lock(&room.members).keys().copied().collect();
        for id in ids {
            self.remove_participant(room, id, reason);
        }
        if reason == LeaveReason::RoomClosed {
            room.publish(RoomEvent::RoomClosed);
        }
    }

    /// Forgets peers accepted longer than the peer timeout ago whose ICE never
    /// started (their client never sent a check).
    pub(crate) fn expire_pending(&self, now: Instant) {
        let timeout = self.cfg.peer_timeout();
        let stale: Vec<(Arc<RoomState>, u64)> = {
            let reg = lock(&self.registry);
            reg.pending
                .values()
                .filter(|p| now.saturating_duration_since(p.since) > timeout)
                .filter_map(|p| reg.homes.get(&p.peer.id()).map(|h| (h.room.clone(), p.peer.id().0)))
                .collect()
        };
        for (room, id) in stale {
            self.remove_participant(&room, id, LeaveReason::TimedOut);
        }
    }
}
