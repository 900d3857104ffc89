//! [`Rooms`]: the single owner of the rooms map and the peer registry, and
//! the operations every user can cause (create, join, leave, mute, gain,
//! delete); the stage's, the playbacks' and the whispers' are methods of
//! it in their own files.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tutti_mix::{MAX_GAIN, ParticipantId, RoomConfig, SpeakerLimit};
use tutti_rtc::{PeerId, ServerPeer};

use crate::attributes::Attributes;

use super::error::RoomError;
use super::event::RoomEvent;
use super::member::{Admin, LeaveReason, ListenOnly, MAX_NAME_BYTES, Member};
use super::playback;
use super::registry::{Claim, Registry};
use super::room::{Room, RoomKey};
use crate::sync::{lock, read, write};

/// Something a room operation needs done outside the room domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "an effect must be carried out"]
pub(crate) enum Effect {
    /// Close this peer (DTLS close_notify) and forget it, on the I/O thread that owns it.
    ClosePeer {
        /// The peer.
        peer: PeerId,
        /// Its I/O thread.
        io: usize,
    },
    /// The peer was moved to another room: its I/O thread re-reads where it
    /// is (`Rooms::room_of`) and sends it that room's mix from then on.
    Rehome {
        /// The peer.
        peer: PeerId,
        /// Its I/O thread.
        io: usize,
    },
}

/// What a new participant brings.
pub(crate) struct Joiner {
    /// Its accepted peer (answered, not yet connected).
    pub(crate) peer: ServerPeer,
    /// Its display name (cleaned here).
    pub(crate) name: String,
    /// The identity of its token.
    pub(crate) identity: String,
    /// Its token lacks `speak`.
    pub(crate) listen_only: bool,
    /// Its token is an admin's for the room (`mute_all` spares it).
    pub(crate) admin: Admin,
    /// Its attributes from the start (its token's).
    pub(crate) attributes: Attributes,
    /// Its offer asked for stereo Opus (a spatial room's stereo render).
    pub(crate) stereo: bool,
}

/// A participant about to join (see [`Rooms::add_member`]).
pub(crate) struct NewMember {
    pub(super) id: u64,
    pub(super) name: String,
    pub(super) identity: String,
    pub(super) listen_only: bool,
    pub(super) admin: Admin,
    /// Already connected (a plain RTP participant has no ICE or DTLS to wait for).
    pub(super) connected: bool,
    /// Its name's prefix when it has neither a name nor an identity.
    pub(super) unnamed: &'static str,
    pub(super) attributes: Attributes,
    /// It takes a spatial room's stereo render.
    pub(super) stereo: bool,
}

/// Every room of the server, and where every peer is.
pub(crate) struct Rooms {
    pub(super) defaults: RoomConfig,
    pub(super) max_rooms: usize,
    pub(super) max_participants: usize,
    pub(super) map: RwLock<BTreeMap<String, Arc<Room>>>,
    pub(super) registry: Mutex<Registry>,
    pub(super) participants: AtomicUsize,
    /// Numbers rooms created without an id (`room-1`, …).
    pub(super) next_name: AtomicU64,
    pub(super) next_key: AtomicU64,
    /// Set at shutdown: no more joins.
    pub(super) closing: AtomicBool,
    /// Set when the node drains: no new rooms (joins to its rooms go on).
    pub(super) draining: AtomicBool,
    /// Rooms seen without participants, since when (see [`Rooms::reap_empty`]).
    pub(super) vacant: Mutex<HashMap<RoomKey, Instant>>,
    /// Effects of participants replaced by a join with their identity, for
    /// the joiner's caller to carry out ([`Rooms::take_replaced`]).
    pub(super) replaced: Mutex<Vec<Effect>>,
    /// Rooms whose last moderator left, set to end then, for the session
    /// layer to close ([`Rooms::take_unmoderated`]).
    pub(super) unmoderated: Mutex<Vec<(String, RoomKey)>>,
    /// What new rooms play (`[playback]`: limit and sounds).
    pub(super) playback: RwLock<playback::Defaults>,
    /// The last [`DEPARTED_KEPT`] participants that left (oldest first), so
    /// that a later request about one says why it is gone ([`Rooms::departed`]).
    pub(super) departed: Mutex<std::collections::VecDeque<Departed>>,
}

/// Participants that left, remembered ([`Rooms::departed`]).
pub(crate) const DEPARTED_KEPT: usize = 4096;

/// A participant that left: which, from where, why, when.
#[derive(Debug, Clone)]
pub(crate) struct Departed {
    pub(crate) id: u64,
    pub(crate) room: String,
    pub(crate) reason: LeaveReason,
    pub(crate) at: Instant,
}

/// Whether `id` may name a room: 1 to 64 letters, digits, '-' or '_'.
pub(crate) fn valid_room_id(id: &str) -> bool {
    crate::auth::is_room_id(id)
}

/// A display name: no control characters, at most [`MAX_NAME_BYTES`].
pub(crate) fn clean_name(name: &str) -> String {
    let mut name: String = name.chars().filter(|c| !c.is_control()).collect();
    while name.len() > MAX_NAME_BYTES {
        name.pop();
    }
    name
}

impl Rooms {
    /// No rooms yet. New rooms are made from `defaults` unless their
    /// creator asks for another size or speaker count; the server holds at
    /// most `max_rooms` rooms and `max_participants` participants.
    pub(crate) fn new(defaults: RoomConfig, max_rooms: usize, max_participants: usize) -> Result<Self, RoomError> {
        defaults.validate().map_err(|e| RoomError::BadRoomConfig(e.to_string()))?;
        Ok(Self {
            defaults,
            max_rooms,
            max_participants,
            map: RwLock::new(BTreeMap::new()),
            registry: Mutex::new(Registry::default()),
            participants: AtomicUsize::new(0),
            next_name: AtomicU64::new(1),
            next_key: AtomicU64::new(1),
            closing: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            vacant: Mutex::new(HashMap::new()),
            replaced: Mutex::new(Vec::new()),
            unmoderated: Mutex::new(Vec::new()),
            departed: Mutex::new(std::collections::VecDeque::new()),
            playback: RwLock::new(playback::Defaults::default()),
        })
    }

    /// Sets what rooms created from now on play (`[playback]`).
    pub(crate) fn set_playback_defaults(&self, defaults: playback::Defaults) {
        *write(&self.playback) = defaults;
    }

    /// The room `id`.
    pub(crate) fn get(&self, id: &str) -> Result<Arc<Room>, RoomError> {
        read(&self.map).get(id).cloned().ok_or_else(|| RoomError::NoRoom(id.to_owned()))
    }

    /// Every room.
    pub(crate) fn all(&self) -> Vec<Arc<Room>> {
        read(&self.map).values().cloned().collect()
    }

    /// Participants in all rooms.
    pub(crate) fn participants(&self) -> usize {
        self.participants.load(Ordering::Relaxed)
    }

    /// At `max_participants`: a join here would be refused (`server_full`).
    pub(crate) fn is_full(&self) -> bool {
        self.participants() >= self.max_participants
    }

    /// A fresh name for a room created without one.
    pub(crate) fn fresh_name(&self) -> String {
        format!("room-{}", self.next_name.fetch_add(1, Ordering::Relaxed))
    }

    /// Creates room `id`, with the defaults unless given.
    pub(crate) fn create(
        &self,
        id: &str,
        max_participants: Option<usize>,
        max_speakers: Option<usize>,
    ) -> Result<Arc<Room>, RoomError> {
        if !valid_room_id(id) {
            return Err(RoomError::BadRoomId);
        }
        if self.draining.load(Ordering::Relaxed) {
            return Err(RoomError::Draining);
        }
        let mut cfg = self.defaults.clone();
        if let Some(n) = max_participants {
            cfg.max_participants = n;
        }
        let speakers = match (max_speakers, cfg.max_speakers) {
            (Some(k), _) | (None, SpeakerLimit::Top(k)) => k,
            (None, SpeakerLimit::All) => usize::MAX,
        };
        cfg.max_speakers = SpeakerLimit::Top(speakers);
        let mixer = tutti_mix::Room::new(cfg).map_err(|e| RoomError::BadRoomConfig(e.to_string()))?;
        let key = RoomKey(self.next_key.fetch_add(1, Ordering::Relaxed));
        let room = Arc::new(Room::new(id.to_owned(), key, mixer, speakers));
        room.init_playback(read(&self.playback).clone());
        let mut map = write(&self.map);
        if map.contains_key(id) {
            return Err(RoomError::RoomExists(id.to_owned()));
        }
        if map.len() >= self.max_rooms {
            return Err(RoomError::TooManyRooms(self.max_rooms));
        }
        map.insert(id.to_owned(), room.clone());
        drop(map);
        tracing::info!(room = %id, "room created");
        Ok(room)
    }

    /// Deletes room `id`: every participant leaves (`room_closed`), then the
    /// subscribers hear `room_closed`.
    pub(crate) fn delete(&self, id: &str) -> Result<Vec<Effect>, RoomError> {
        let room = write(&self.map).remove(id).ok_or_else(|| RoomError::NoRoom(id.to_owned()))?;
        let effects = self.close(&room, LeaveReason::RoomClosed);
        room.publish(RoomEvent::RoomClosed);
        tracing::info!(room = %id, "room deleted");
        Ok(effects)
    }

    /// Deletes the rooms that have had no participant for `timeout` at
    /// `now` (called every second or so: a room is "seen empty" from the
    /// first call that finds it so). A room that is empty for a shorter
    /// while, or has anyone in it, stays. Returns the rooms deleted (their
    /// subscribers hear `room_closed`); nobody was in them, so there is no
    /// effect to carry out.
    pub(crate) fn reap_empty(&self, now: Instant, timeout: Duration) -> Vec<String> {
        let rooms = self.all();
        let empty: HashSet<RoomKey> = rooms.iter().filter(|r| r.len() == 0).map(|r| r.key).collect();
        let mut due = Vec::new();
        {
            let mut vacant = lock(&self.vacant);
            vacant.retain(|key, _| empty.contains(key));
            for room in rooms.iter().filter(|r| empty.contains(&r.key)) {
                let since = *vacant.entry(room.key).or_insert(now);
                if now.saturating_duration_since(since) >= timeout {
                    due.push(room.id.clone());
                }
            }
        }
        let mut reaped = Vec::new();
        for id in due {
            // Still empty, checked under the map's lock: a join that came meanwhile keeps it.
            let room = {
                let mut map = write(&self.map);
                match map.get(&id) {
                    Some(r) if r.len() == 0 => map.remove(&id),
                    _ => None,
                }
            };
            let Some(room) = room else { continue };
            lock(&self.vacant).remove(&room.key);
            room.mark_closed();
            room.publish(RoomEvent::RoomClosed);
            tracing::info!(room = %id, timeout_seconds = timeout.as_secs_f64(), "empty room closed");
            reaped.push(id);
        }
        reaped
    }

    /// The rooms whose last moderator left, set to end then
    /// (`on_moderator_leave = "end"`); the caller closes them.
    pub(crate) fn take_unmoderated(&self) -> Vec<(String, RoomKey)> {
        std::mem::take(&mut *lock(&self.unmoderated))
    }

    /// The peers to close of participants that a join with their identity
    /// replaced (see [`Rooms::join`]); the caller carries them out.
    pub(crate) fn take_replaced(&self) -> Vec<Effect> {
        std::mem::take(&mut *lock(&self.replaced))
    }

    /// Removes every participant of a room (the room stays in the map
    /// unless [`Rooms::delete`] took it out).
    pub(super) fn close(&self, room: &Room, reason: LeaveReason) -> Vec<Effect> {
        room.mark_closed();
        let ids: Vec<u64> = lock(&room.members).keys().copied().collect();
        ids.into_iter().filter_map(|id| self.leave(room, id, reason).ok().flatten()).collect()
    }

    /// Refuses a join that cannot fit, before any work is spent on its offer.
    pub(crate) fn check_space(&self, room: &Room) -> Result<(), RoomError> {
        if self.closing.load(Ordering::Relaxed) {
            return Err(RoomError::ShuttingDown);
        }
        if room.is_closed() {
            return Err(RoomError::NoRoom(room.id.clone()));
        }
        if room.len() >= room.max_participants() {
            return Err(RoomError::RoomFull { room: room.id.clone(), max: room.max_participants() });
        }
        if self.participants() >= self.max_participants {
            return Err(RoomError::TooManyParticipants(self.max_participants));
        }
        Ok(())
    }

    /// Adds an accepted peer to `room` as a participant and makes it findable
    /// by its first ICE check. Returns its participant id.
    pub(crate) fn join(&self, room: &Arc<Room>, joiner: Joiner, now: Instant) -> Result<u64, RoomError> {
        let Joiner { peer, name, identity, listen_only, admin, attributes, stereo } = joiner;
        let id = peer.id().0;
        let new = NewMember {
            id,
            name,
            identity,
            listen_only,
            admin,
            connected: false,
            unnamed: "participant",
            attributes,
            stereo,
        };
        let (name, gate, attributes) = self.add_member(room, new, now)?;
        lock(&self.registry).insert(peer, room.clone(), gate, now);
        room.publish(RoomEvent::Joined { id, name, attributes });
        tracing::info!(room = %room.id, participant = id, listen_only, "participant joined");
        Ok(id)
    }

    /// What every join does, whatever carries the participant's media:
    /// space, lock and ban checks, its name (cleaned; else its identity;
    /// else `{unnamed}-{id}`), its place in the mixer and the member list.
    /// Returns its name, its speak gate and its attributes; the caller
    /// registers its media and then publishes `joined`.
    pub(super) fn add_member(
        &self,
        room: &Arc<Room>,
        new: NewMember,
        now: Instant,
    ) -> Result<(String, ListenOnly, Attributes), RoomError> {
        self.check_space(room)?;
        let NewMember { id, name, identity, listen_only, admin, connected, unnamed, mut attributes, stereo } = new;
        self.admit(room, &identity, &name, now)?;
        // One identity, one participant: a join replaces the identity's
        // participant already here (it leaves with reason `replaced`; its
        // peer is closed by whoever takes `take_replaced`). Anonymous
        // participants (no identity: auth disabled) are never matched, and
        // an admin of the room may hold several (a load generator, a bridge).
        if !identity.is_empty() && !admin.is_admin() {
            let old: Vec<u64> = lock(&room.members).values().filter(|m| m.identity == identity).map(|m| m.id).collect();
            for old in old {
                if let Ok(Some(effect)) = self.leave(room, old, LeaveReason::Replaced) {
                    lock(&self.replaced).push(effect);
                }
                tracing::info!(room = %room.id, participant = old, by = id, "participant replaced by a join with its identity");
            }
        }
        lock(&self.vacant).remove(&room.key);
        let mut name = clean_name(if name.is_empty() { &identity } else { &name });
        if name.is_empty() {
            name = format!("{unnamed}-{id}");
        }
        // A moderator opens a room that waits for one; anyone else joins it muted (held).
        let moderator = admin.is_admin() || attributes.get(super::MODERATOR_ATTRIBUTE).is_some_and(|v| v == "true");
        let muted = listen_only || room.joins_muted(moderator);
        // Listen-only: belt and braces, its packets never reach the mixer anyway.
        // A spatial room seats it: where its attributes say, else where its identity sits.
        let seat = room.seat_for(id, &identity, &mut attributes);
        room.add(ParticipantId(id), muted, seat, stereo)
            .map_err(|_| RoomError::RoomFull { room: room.id.clone(), max: room.max_participants() })?;
        self.participants.fetch_add(1, Ordering::Relaxed);
        let gate = ListenOnly::new(listen_only);
        let member = Member {
            id,
            name: name.clone(),
            identity,
            talking: false,
            muted,
            listen_only,
            connected,
            hand: false,
            deaf: false,
            admin,
            attributes: attributes.clone(),
            joined_in: None,
            gate: gate.clone(),
        };
        let members = {
            let mut members = lock(&room.members);
            members.insert(id, member);
            members.len()
        };
        room.sounds_on_join(members);
        room.after_join(moderator);
        Ok((name, gate, attributes))
    }

    /// Another node of spread `room` (`node`) has a moderator now, or no
    /// longer ([`Room`]'s `moderator_elsewhere`): a room to end is closed by
    /// the session layer, as after a moderator's leave here.
    pub(crate) fn moderator_elsewhere(&self, room: &Room, node: &str, present: bool) {
        if room.moderator_elsewhere(node, present) {
            lock(&self.unmoderated).push((room.id.clone(), room.key));
        }
    }

    /// Removes participant `id` from `room`. `Ok(None)` when its peer was not
    /// adopted by an I/O thread yet; the effect closes it where it is.
    pub(crate) fn leave(&self, room: &Room, id: u64, reason: LeaveReason) -> Result<Option<Effect>, RoomError> {
        let Some(gone) = lock(&room.members).remove(&id) else {
            return Err(RoomError::NoParticipant(id));
        };
        room.remove(ParticipantId(id));
        room.sounds_on_leave(room.len());
        self.participants.fetch_sub(1, Ordering::Relaxed);
        let io = lock(&self.registry).remove(PeerId(id));
        room.publish(RoomEvent::Left { id, reason: reason.as_str() });
        tracing::info!(room = %room.id, participant = id, reason = reason.as_str(), "participant left");
        if super::moderation::is_moderator(&gone) && reason != LeaveReason::RoomClosed && room.after_moderator_left() {
            lock(&self.unmoderated).push((room.id.clone(), room.key));
        }
        let mut departed = lock(&self.departed);
        if departed.len() >= DEPARTED_KEPT {
            departed.pop_front();
        }
        departed.push_back(Departed { id, room: room.id.clone(), reason, at: Instant::now() });
        Ok(io.map(|io| Effect::ClosePeer { peer: PeerId(id), io }))
    }

    /// Participant `id` of room `room`, if it left lately (one of the last
    /// [`DEPARTED_KEPT`] to leave this node) and is not back.
    pub(crate) fn departed(&self, room: &str, id: u64) -> Option<Departed> {
        if self.get(room).is_ok_and(|r| lock(&r.members).contains_key(&id)) {
            return None;
        }
        lock(&self.departed).iter().rev().find(|d| d.id == id && d.room == room).cloned()
    }

    /// Mutes or unmutes a participant (and tells the room when it changed).
    /// A listen-only participant cannot be unmuted: its token decides, or
    /// an admin's grant (`Rooms::set_speak`).
    pub(crate) fn set_muted(&self, room: &Room, id: u64, muted: bool) -> Result<(), RoomError> {
        let mut members = lock(&room.members);
        let member = members.get_mut(&id).ok_or(RoomError::NoParticipant(id))?;
        if !muted && member.listen_only {
            return Err(RoomError::ListenOnly(id));
        }
        room.set_muted(ParticipantId(id), muted).map_err(|_| RoomError::NoParticipant(id))?;
        if std::mem::replace(&mut member.muted, muted) != muted {
            drop(members);
            room.publish(RoomEvent::Muted { id, muted });
        }
        Ok(())
    }

    /// Sets how loud a participant is mixed (0 to [`MAX_GAIN`]).
    pub(crate) fn set_gain(&self, room: &Room, id: u64, gain: f32) -> Result<(), RoomError> {
        if !(gain.is_finite() && (0.0..=MAX_GAIN).contains(&gain)) {
            return Err(RoomError::BadValue(format!("gain must be within 0 to {MAX_GAIN}")));
        }
        room.set_gain(ParticipantId(id), gain).map_err(|_| RoomError::NoParticipant(id))
    }

    /// Marks a participant's ICE and DTLS up.
    pub(crate) fn set_connected(&self, room: &Room, id: u64) {
        if let Some(m) = lock(&room.members).get_mut(&id) {
            m.connected = true;
        }
    }

    /// What I/O thread `io` does with an ICE check (verified by its mux) for
    /// a ufrag its mux does not know. The only way a datagram takes this lock.
    pub(crate) fn claim(&self, ufrag: &str, io: usize) -> Claim {
        lock(&self.registry).claim(ufrag, io)
    }

    /// Removes participants accepted longer than `timeout` ago whose ICE
    /// never started (their client never sent a check).
    pub(crate) fn expire_pending(&self, now: Instant, timeout: Duration) {
        let stale = lock(&self.registry).stale(now, timeout);
        for (room, id) in stale {
            // Never adopted: nothing to close on any I/O thread.
            let _ = self.leave(&room, id, LeaveReason::TimedOut);
        }
    }

    /// Takes no more joins, and tells every room's subscribers why.
    pub(crate) fn shut_down(&self, message: &str) {
        self.closing.store(true, Ordering::Relaxed);
        for room in self.all() {
            room.publish(RoomEvent::Shutdown { message: message.to_owned() });
        }
    }

    /// Takes no more new rooms (every way of making one: a create, a join
    /// that places a room here) and tells every room's subscribers until
    /// when, at the latest, their call goes on here. Idempotent: only the
    /// first call tells. Returns whether this call started the drain.
    pub(crate) fn drain(&self, deadline: u64, message: &str) -> bool {
        if self.draining.swap(true, Ordering::Relaxed) {
            return false;
        }
        for room in self.all() {
            room.publish(RoomEvent::Draining { deadline, message: message.to_owned() });
        }
        true
    }

    /// Whether [`Rooms::drain`] was called.
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Whether [`Rooms::shut_down`] was called.
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }

    /// The I/O thread that owns a participant's peer: `None` for no such
    /// peer, `Some(None)` while it waits for its first ICE check.
    pub(crate) fn peer_io(&self, id: u64) -> Option<Option<usize>> {
        lock(&self.registry).io_of(PeerId(id))
    }

    /// (registered peers, pending peers).
    pub(crate) fn registry_sizes(&self) -> (usize, usize) {
        lock(&self.registry).sizes()
    }

    /// Deletes every room (for a fresh start, as the fuzzer wants).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn clear(&self) -> Vec<Effect> {
        let ids: Vec<String> = read(&self.map).keys().cloned().collect();
        ids.iter().filter_map(|id| self.delete(id).ok()).flatten().collect()
    }
}
