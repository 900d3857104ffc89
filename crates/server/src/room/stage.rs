//! The stage: what an admin runs a room with at runtime. Speak rights
//! granted and revoked without rejoining, raised hands, a lock on new
//! joins, the room's size and speaker limit, mute-all, and kicking with a
//! ban on the kicked identity.
//!
//! Listen-only is a gate on the server, not in the SDP: every join
//! negotiates `sendrecv` (the answer does not depend on the token), so a
//! listener's browser sends its microphone all along and the I/O thread
//! drops those packets while the participant's [`ListenOnly`](super::ListenOnly)
//! flag is set.
//! Granting speak clears the flag and unmutes it in the mixer: its next
//! packets are mixed, no renegotiation. Revoking mutes it in the mixer
//! first (it leaves the selection at the next tick), then sets the flag.
//!
//! Bans are per room, by identity: the token's subject, or, when the token
//! names none (auth disabled), the display name (best effort: anyone may
//! pick a name). At most [`MAX_BANS`] live bans per room; expired ones go
//! when a ban is added or checked.
//!
//! A drain hands the room to another node with its lock and bans
//! ([`CarriedStage`], in the room's stored config): there the participants
//! who were in it come back through the lock until the drain's deadline,
//! nobody else does, and a banned identity stays out.

use std::time::{Duration, Instant};

use tutti_mix::{MAX_SPEAKERS, ParticipantId};

use super::member::LeaveReason;
use super::{Effect, Room, RoomError, RoomEvent, Rooms, clean_name};
use crate::sync::lock;

/// Longest ban, in seconds (30 days).
pub(crate) const MAX_BAN_SECONDS: u64 = 30 * 24 * 3600;
/// Most live bans a room keeps.
pub(crate) const MAX_BANS: usize = 4096;
/// Largest `max_participants` a `PATCH` may set.
pub(crate) const MAX_ROOM_PARTICIPANTS: usize = 100_000;

/// Longest ban key carried to another node (an identity, or `name:` and a
/// display name of at most 64 bytes): a longer one is not a key of ours.
const MAX_KEY_BYTES: usize = 512;

/// A room's lock and bans on their way to another node (a drain's
/// hand-over, through the room's stored config): times in Unix seconds,
/// the one clock the nodes share.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct CarriedStage {
    /// Until when (Unix seconds) it applies: the drain's deadline. A room
    /// hosted again later (its node failed) starts from its creation config.
    pub(crate) until: u64,
    pub(crate) locked: bool,
    /// Ban key → banned until (Unix seconds).
    pub(crate) bans: Vec<(String, u64)>,
    /// The ban keys of the participants in the room at the hand-over.
    pub(crate) returning: Vec<String>,
}

/// What `PATCH /v1/rooms/{room}` changes; `None` leaves a setting as it is.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RoomUpdate {
    pub(crate) locked: Option<bool>,
    pub(crate) max_participants: Option<usize>,
    pub(crate) max_speakers: Option<usize>,
    /// Mute every participant who did not join with an admin token.
    pub(crate) mute_all: bool,
}

/// What a ban is keyed by: the identity, or the display name without one.
fn ban_key(identity: &str, name: &str) -> String {
    if identity.is_empty() { format!("name:{name}") } else { format!("id:{identity}") }
}

impl Room {
    /// Whether the room takes no new joins.
    pub(crate) fn is_locked(&self) -> bool {
        lock(&self.stage).locked
    }
}

impl Rooms {
    /// Refuses a join into a locked room, or by an identity banned from it
    /// (checked before any work is spent on the offer, and again at the join).
    /// A participant a drain moved here comes back through the lock until
    /// the drain's deadline.
    pub(crate) fn admit(&self, room: &Room, identity: &str, name: &str, now: Instant) -> Result<(), RoomError> {
        let mut stage = lock(&room.stage);
        if !stage.locked && stage.bans.is_empty() {
            return Ok(());
        }
        let name = clean_name(if name.is_empty() { identity } else { name });
        let key = ban_key(identity, &name);
        if stage.locked && stage.returning.get(&key).is_none_or(|until| *until <= now) {
            return Err(RoomError::Locked(room.id.clone()));
        }
        match stage.bans.get(&key) {
            Some(until) if *until > now => {
                let left = until.saturating_duration_since(now);
                Err(RoomError::Banned(left.as_secs() + u64::from(left.subsec_nanos() > 0)))
            }
            Some(_) => {
                stage.bans.remove(&key);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Grants (`true`) or revokes a participant's right to speak, at once:
    /// granted, it is unmuted and its hand lowered; revoked, it is muted and
    /// its audio dropped on arrival. Returns whether anything changed.
    pub(crate) fn set_speak(&self, room: &Room, id: u64, speak: bool) -> Result<bool, RoomError> {
        let mut members = lock(&room.members);
        let member = members.get_mut(&id).ok_or(RoomError::NoParticipant(id))?;
        if member.listen_only != speak {
            return Ok(false);
        }
        let pid = ParticipantId(id);
        let mut events = vec![RoomEvent::Permissions { id, speak }];
        if speak {
            member.gate.set(false);
            room.set_muted(pid, false).map_err(|_| RoomError::NoParticipant(id))?;
            member.listen_only = false;
            if std::mem::replace(&mut member.muted, false) {
                events.push(RoomEvent::Muted { id, muted: false });
            }
            if std::mem::replace(&mut member.hand, false) {
                events.push(RoomEvent::Hand { id, raised: false });
            }
        } else {
            room.set_muted(pid, true).map_err(|_| RoomError::NoParticipant(id))?;
            member.gate.set(true);
            member.listen_only = true;
            if !std::mem::replace(&mut member.muted, true) {
                events.push(RoomEvent::Muted { id, muted: true });
            }
        }
        drop(members);
        for event in events {
            room.publish(event);
        }
        tracing::info!(room = %room.id, participant = id, speak, "speak right changed");
        Ok(true)
    }

    /// Raises or lowers a participant's hand. Returns whether it changed.
    pub(crate) fn set_hand(&self, room: &Room, id: u64, raised: bool) -> Result<bool, RoomError> {
        let mut members = lock(&room.members);
        let member = members.get_mut(&id).ok_or(RoomError::NoParticipant(id))?;
        let changed = std::mem::replace(&mut member.hand, raised) != raised;
        drop(members);
        if changed {
            room.publish(RoomEvent::Hand { id, raised });
        }
        Ok(changed)
    }

    /// Changes a participant's attributes by `patch` (a value sets its key,
    /// `None` removes it); without `may_reserved` (the participant itself) a
    /// key of `reserved` is refused. Returns whether anything changed (then
    /// the room is told `attributes_changed` with the whole set).
    pub(crate) fn set_attributes(
        &self,
        room: &Room,
        id: u64,
        patch: &crate::attributes::AttributesPatch,
        (reserved, may_reserved): (&[String], bool),
    ) -> Result<bool, RoomError> {
        let mut members = lock(&room.members);
        let member = members.get_mut(&id).ok_or(RoomError::NoParticipant(id))?;
        let Some(next) = crate::attributes::apply(&member.attributes, patch, reserved, may_reserved)? else {
            return Ok(false);
        };
        let seat = crate::attributes::seat_of(&next);
        if next.contains_key(crate::attributes::SEAT) && seat.is_none() {
            return Err(RoomError::BadValue(format!(
                "{} must be a whole number from -{max} (far left) to {max} (far right)",
                crate::attributes::SEAT,
                max = tutti_mix::MAX_SEAT
            )));
        }
        member.attributes = next.clone();
        drop(members);
        if let Some(seat) = seat {
            room.set_seat(id, seat);
        }
        room.publish(RoomEvent::AttributesChanged { id, attributes: next });
        Ok(true)
    }

    /// Makes a participant deaf (sent nothing: it hears no one) or hearing
    /// again. Returns whether it changed.
    pub(crate) fn set_deaf(&self, room: &Room, id: u64, deaf: bool) -> Result<bool, RoomError> {
        let mut members = lock(&room.members);
        let member = members.get_mut(&id).ok_or(RoomError::NoParticipant(id))?;
        if std::mem::replace(&mut member.deaf, deaf) == deaf {
            return Ok(false);
        }
        // Sorted (members are keyed by id): the I/O threads look it up per peer.
        let list = members.values().filter(|m| m.deaf).map(|m| m.id).collect();
        drop(members);
        room.set_deaf(list);
        room.publish(RoomEvent::Deaf { id, deaf });
        Ok(true)
    }

    /// Changes a room: every value is checked before any is applied.
    /// Returns how many participants `mute_all` muted.
    pub(crate) fn update_room(&self, room: &Room, update: RoomUpdate) -> Result<usize, RoomError> {
        if let Some(n) = update.max_participants
            && !(1..=MAX_ROOM_PARTICIPANTS).contains(&n)
        {
            return Err(RoomError::BadValue(format!("max_participants must be within 1 to {MAX_ROOM_PARTICIPANTS}")));
        }
        if let Some(k) = update.max_speakers
            && !(1..=MAX_SPEAKERS).contains(&k)
        {
            return Err(RoomError::BadValue(format!("max_speakers must be within 1 to {MAX_SPEAKERS}")));
        }
        room.set_limits(update.max_participants, update.max_speakers)
            .map_err(|e| RoomError::BadRoomConfig(e.to_string()))?;
        if let Some(locked) = update.locked {
            lock(&room.stage).locked = locked;
        }
        if update.locked.is_some() || update.max_participants.is_some() || update.max_speakers.is_some() {
            room.publish(RoomEvent::RoomUpdated {
                locked: room.is_locked(),
                max_participants: room.max_participants(),
                max_speakers: room.max_speakers(),
            });
            tracing::info!(room = %room.id, ?update, "room updated");
        }
        if !update.mute_all {
            return Ok(0);
        }
        let mut members = lock(&room.members);
        let mut muted = Vec::new();
        for member in members.values_mut().filter(|m| !m.admin.is_admin() && !m.muted) {
            if room.set_muted(ParticipantId(member.id), true).is_ok() {
                member.muted = true;
                muted.push(member.id);
            }
        }
        drop(members);
        for &id in &muted {
            room.publish(RoomEvent::Muted { id, muted: true });
        }
        room.publish(RoomEvent::MutedAll { count: muted.len() });
        tracing::info!(room = %room.id, muted = muted.len(), "everyone muted");
        Ok(muted.len())
    }

    /// Removes a participant as an admin (reason `kicked`), and with `ban`,
    /// keeps its identity out of the room for that long. A participant no
    /// longer in the room is `NoParticipant`: its identity is not known any more.
    pub(crate) fn kick(
        &self,
        room: &Room,
        id: u64,
        ban: Option<Duration>,
        now: Instant,
    ) -> Result<Option<Effect>, RoomError> {
        let key = self.ban_key_of(room, id).ok_or(RoomError::NoParticipant(id))?;
        if let Some(ban) = ban {
            self.ban(room, key, ban, now)?;
            tracing::info!(room = %room.id, participant = id, seconds = ban.as_secs(), "participant banned");
        }
        self.leave(room, id, LeaveReason::Kicked)
    }

    /// What a ban of participant `id` keeps out (its identity, or its name
    /// without one), for telling the other nodes of a spread room.
    pub(crate) fn ban_key_of(&self, room: &Room, id: u64) -> Option<String> {
        lock(&room.members).get(&id).map(|m| ban_key(&m.identity, &m.name))
    }

    /// Keeps `key` ([`Rooms::ban_key_of`]) out of the room for `ban` (a
    /// ban made on another node of a spread room, or by [`Rooms::kick`]).
    pub(crate) fn ban(&self, room: &Room, key: String, ban: Duration, now: Instant) -> Result<(), RoomError> {
        if ban.is_zero() || ban > Duration::from_secs(MAX_BAN_SECONDS) {
            return Err(RoomError::BadValue(format!("ban_seconds must be within 1 to {MAX_BAN_SECONDS}")));
        }
        let mut stage = lock(&room.stage);
        if stage.bans.len() >= MAX_BANS {
            stage.prune(now);
        }
        if stage.bans.len() >= MAX_BANS && !stage.bans.contains_key(&key) {
            return Err(RoomError::BadValue(format!("room '{}' holds its maximum of {MAX_BANS} bans", room.id)));
        }
        let until = now + ban;
        let entry = stage.bans.entry(key).or_insert(until);
        *entry = (*entry).max(until);
        Ok(())
    }

    /// Live bans in a room.
    pub(crate) fn bans(&self, room: &Room, now: Instant) -> usize {
        let mut stage = lock(&room.stage);
        stage.prune(now);
        stage.bans.len()
    }

    /// The room's lock, bans and participants, for the node a drain hands
    /// it to (see [`CarriedStage`]), valid until `until` (Unix seconds).
    pub(crate) fn carry_stage(&self, room: &Room, until: u64, now: Instant, unix_now: u64) -> CarriedStage {
        let returning = lock(&room.members).values().map(|m| ban_key(&m.identity, &m.name)).collect();
        let mut stage = lock(&room.stage);
        stage.prune(now);
        let unix = |at: Instant| unix_now + at.saturating_duration_since(now).as_secs().max(1);
        let bans = stage.bans.iter().map(|(key, at)| (key.clone(), unix(*at))).collect();
        CarriedStage { until, locked: stage.locked, bans, returning }
    }

    /// Applies what [`Rooms::carry_stage`] carried, if it is not stale,
    /// to a room just hosted here. What it holds came through Redis: keys
    /// too long, bans beyond [`MAX_BANS`] or [`MAX_BAN_SECONDS`], and more
    /// returning participants than the room takes are left out.
    pub(crate) fn restore_stage(&self, room: &Room, carried: &CarriedStage, now: Instant, unix_now: u64) {
        if carried.until <= unix_now {
            return;
        }
        let at = |unix: u64| now + Duration::from_secs(unix.saturating_sub(unix_now).min(MAX_BAN_SECONDS));
        let fits = |key: &&String| key.len() <= MAX_KEY_BYTES;
        let mut stage = lock(&room.stage);
        stage.locked |= carried.locked;
        for (key, until) in carried.bans.iter().filter(|(k, u)| fits(&k) && *u > unix_now).take(MAX_BANS) {
            let until = at(*until);
            let entry = stage.bans.entry(key.clone()).or_insert(until);
            *entry = (*entry).max(until);
        }
        let back = at(carried.until);
        for key in carried.returning.iter().filter(fits).take(room.max_participants()) {
            stage.returning.insert(key.clone(), back);
        }
        tracing::info!(
            room = %room.id,
            locked = stage.locked,
            bans = stage.bans.len(),
            returning = stage.returning.len(),
            "room's lock and bans carried over from its previous node"
        );
    }
}

mod state;
#[cfg(test)]
mod tests;

pub(crate) use state::Stage;
