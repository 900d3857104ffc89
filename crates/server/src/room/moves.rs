//! Moving a participant to another room of this node without a new
//! connection (a breakout): same peer, same ICE/DTLS/SRTP, same participant
//! id and identity; only which room's mixer takes its packets and which
//! room's mix it is sent change.
//!
//! The room domain decides and records the move (members, mixers, the
//! registry's home of the peer, events in both rooms) and returns an
//! [`Effect::Rehome`] for the I/O thread that owns the peer, which re-reads
//! the peer's home between two loop turns: no media thread waits on
//! anything here. Until it has, the peer's packets still reach the old room,
//! whose mixer drops them (it no longer knows the participant), and it may
//! be sent one more tick of the old room's mix.
//!
//! As on a join, one identity holds one participant per room: a
//! participant of the same identity already in the new room is replaced.
//!
//! A plain RTP participant (`media::plain`) moves the same way: its
//! I/O thread is the `rtp-in` thread, which keeps its socket, addresses,
//! SSRC, sequence numbers and timestamps (no new offer or answer); it stays
//! marked as a source that suppresses no noise itself.
//!
//! What moves: the participant's id, name, identity, mute state
//! and its speak gate (set by the move's `speak`, or kept). What starts
//! afresh in the new room: its place in the mixer (jitter buffer, level,
//! gain 1, the room's own voice processing), its hand (lowered) and its
//! hearing (not deaf). Its admin flag moves only when its token is an
//! admin's of every room: an admin of the old room is none of the new.

use std::sync::Arc;
use std::time::Instant;

use tutti_mix::ParticipantId;
use tutti_rtc::PeerId;

use super::moderation::is_moderator;
use super::{Effect, LeaveReason, Room, RoomError, RoomEvent, Rooms};
use crate::sync::lock;

/// A move that was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MoveOutcome {
    /// Whether the participant may speak in the new room.
    pub(crate) speak: bool,
    /// Its name.
    pub(crate) name: String,
}

impl Rooms {
    /// Moves participant `id` from `from` to `to`. `speak`: its right to
    /// speak there (`None`: as it had). The target's checks are a join's:
    /// not closed, not full, not locked, the identity not banned. Returns
    /// what was done and the effect that re-homes the peer on its I/O
    /// thread (`None` while it waits for its first ICE check: the registry
    /// hands it over with the new room then).
    pub(crate) fn move_member(
        &self,
        from: &Arc<Room>,
        to: &Arc<Room>,
        id: u64,
        speak: Option<bool>,
        now: Instant,
    ) -> Result<(MoveOutcome, Option<Effect>), RoomError> {
        if from.key == to.key {
            return Err(RoomError::SameRoom(to.id.clone()));
        }
        let (identity, name) = {
            let members = lock(&from.members);
            let m = members.get(&id).ok_or(RoomError::NoParticipant(id))?;
            (m.identity.clone(), m.name.clone())
        };
        let plain = lock(&self.registry).is_plain(PeerId(id));
        if self.closing.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(RoomError::ShuttingDown);
        }
        if to.is_closed() {
            return Err(RoomError::NoRoom(to.id.clone()));
        }
        if to.len() >= to.max_participants() {
            return Err(RoomError::RoomFull { room: to.id.clone(), max: to.max_participants() });
        }
        self.admit(to, &identity, &name, now)?;
        // Out of the old room: its member entry (checked again: it may have left meanwhile), its mixer.
        let Some(mut member) = lock(&from.members).remove(&id) else {
            return Err(RoomError::NoParticipant(id));
        };
        let (stereo, old_seat) = from.with_mixer(|m| {
            let pid = ParticipantId(id);
            (m.is_stereo(pid), m.seat_of(pid).unwrap_or(0))
        });
        from.remove(ParticipantId(id));
        let was_moderator = is_moderator(&member);
        // Put back as it was when the new room refuses it after all.
        let original = member.clone();
        let back = |original: super::Member| {
            original.gate.set(original.listen_only);
            let _ = from.add(ParticipantId(id), original.muted, old_seat, stereo);
            if plain {
                from.mark_raw_source(ParticipantId(id));
            }
            lock(&from.members).insert(id, original);
        };
        if let Some(speak) = speak {
            member.listen_only = !speak;
            if !speak {
                member.muted = true;
            }
        }
        member.gate.set(member.listen_only);
        member.joined_in.get_or_insert_with(|| from.id.clone());
        // An admin of the old room only is no admin of the new one (its mute-all spares it not).
        member.admin = member.admin.moved();
        member.talking = false;
        member.hand = false;
        member.deaf = false;
        // For moderation, a move is a leave of the old room and a join of the
        // new one: held there on arrival while it waits for its moderator.
        let moderator = is_moderator(&member);
        let held = !member.muted && to.joins_muted(moderator);
        member.muted |= held;
        let listen_only = member.listen_only;
        let muted = member.muted;
        let seat = to.seat_for(id, &identity, &mut member.attributes);
        let attributes = member.attributes.clone();
        // Into the new one. The mixer refuses only when full (a join raced
        // us to the last seat): the participant then goes back.
        if to.add(ParticipantId(id), muted, seat, stereo).is_err() {
            back(original);
            return Err(RoomError::RoomFull { room: to.id.clone(), max: to.max_participants() });
        }
        if plain {
            // Its client suppresses no noise, in this room as in the old one.
            to.mark_raw_source(ParticipantId(id));
        }
        // One identity, one participant, as a join: the identity's participant
        // already in the new room leaves (`replaced`); its peer is closed by
        // whoever takes `take_replaced`.
        if !identity.is_empty() && !member.admin.is_admin() {
            let old: Vec<u64> = lock(&to.members).values().filter(|m| m.identity == identity).map(|m| m.id).collect();
            for old in old {
                if let Ok(Some(effect)) = self.leave(to, old, LeaveReason::Replaced) {
                    lock(&self.replaced).push(effect);
                }
            }
        }
        lock(&self.vacant).remove(&to.key);
        let members = {
            let mut members = lock(&to.members);
            members.insert(id, member);
            members.len()
        };
        // Deleted meanwhile (its deletion marks it closed before it lists
        // whom to remove, so either it lists this one or this sees it closed).
        if to.is_closed() {
            if lock(&to.members).remove(&id).is_some() {
                to.remove(ParticipantId(id));
                back(original);
            }
            return Err(RoomError::NoRoom(to.id.clone()));
        }
        // The registry last: from here on the peer's I/O thread (or its first check) finds the new room.
        let io = lock(&self.registry).rehome(PeerId(id), to.clone());
        from.sounds_on_leave(from.len());
        to.sounds_on_join(members);
        from.publish(RoomEvent::Left { id, reason: LeaveReason::MovedRoom.as_str() });
        to.publish(RoomEvent::Joined { id, name: name.clone(), attributes });
        if held {
            to.publish(RoomEvent::Muted { id, muted: true });
        }
        if was_moderator && from.after_moderator_left() {
            lock(&self.unmoderated).push((from.id.clone(), from.key));
        }
        to.after_join(moderator);
        tracing::info!(from = %from.id, to = %to.id, participant = id, listen_only, "participant moved");
        Ok((MoveOutcome { speak: !listen_only, name }, io.map(|io| Effect::Rehome { peer: PeerId(id), io })))
    }

    /// The room a participant is in now (the registry's record), if it is anywhere.
    pub(crate) fn room_of(&self, id: u64) -> Option<Arc<Room>> {
        lock(&self.registry).room_of(PeerId(id))
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Duration;

    use tutti_mix::{RoomConfig, SpeakerLimit};

    use super::super::tests::events;
    use super::super::{Claim, Joiner};
    use super::*;

    fn joiner(acceptor: &tutti_rtc::Acceptor, name: &str) -> (Joiner, String) {
        let now = Instant::now();
        let (_client, offer) =
            tutti_rtc::ClientPeer::new(SocketAddr::from(([127, 0, 0, 1], 50_000)), now).expect("client offer");
        let (peer, _answer) = acceptor.accept(&offer, now).expect("accepted");
        let ufrag = peer.ufrag().to_owned();
        let j = Joiner {
            peer,
            name: name.into(),
            identity: name.into(),
            listen_only: false,
            admin: Default::default(),
            attributes: Default::default(),
            stereo: false,
        };
        (j, ufrag)
    }

    #[test]
    fn a_move_changes_rooms_mixers_registry_and_tells_both_rooms() {
        let cfg = RoomConfig { max_participants: 2, max_speakers: SpeakerLimit::Top(3), ..RoomConfig::default() };
        let rooms = Rooms::new(cfg, 4, 10).expect("rooms");
        let acc =
            tutti_rtc::Acceptor::new(SocketAddr::from(([127, 0, 0, 1], 4000)), Duration::from_secs(10)).expect("acc");
        let (a, b) = (rooms.create("a", None, None).expect("a"), rooms.create("b", None, None).expect("b"));
        let now = Instant::now();
        let (j, ufrag) = joiner(&acc, "x");
        let x = rooms.join(&a, j, now).expect("x joins");
        let (j, other) = joiner(&acc, "y");
        let y = rooms.join(&a, j, now).expect("y joins");
        let (mut rx_a, mut rx_b) = (a.subscribe(), b.subscribe());
        events(&a, &mut rx_a);

        // Pending (no I/O thread yet): no effect; its first check adopts it into b.
        let (done, effect) = rooms.move_member(&a, &b, x, Some(false), now).expect("moved");
        assert_eq!((done.speak, effect), (false, None));
        assert_eq!((a.len(), b.len(), rooms.participants()), (1, 1, 2));
        let m = b.member_list();
        assert_eq!((m[0].id, m[0].listen_only, m[0].muted, m[0].gate.get()), (x, true, true, true));
        assert_eq!(events(&a, &mut rx_a), vec![RoomEvent::Left { id: x, reason: "moved_room" }]);
        assert_eq!(
            events(&b, &mut rx_b),
            vec![RoomEvent::Joined { id: x, name: "x".into(), attributes: Default::default() }]
        );
        match rooms.claim(&ufrag, 1) {
            Claim::Adopt { room, .. } => assert_eq!(room.key, b.key),
            _ => panic!("adopted"),
        }
        // Adopted: the effect names its I/O thread; the registry says where it is.
        let Claim::Adopt { .. } = rooms.claim(&other, 0) else { panic!("adopted") };
        let (_, effect) = rooms.move_member(&a, &b, y, None, now).expect("moved");
        assert_eq!(effect, Some(Effect::Rehome { peer: PeerId(y), io: 0 }));
        assert_eq!(rooms.room_of(y).map(|r| r.key), Some(b.key));
        assert!(a.tick(None, 1, 0).is_none(), "a's mixer is empty");
        assert!(b.tick(None, 1, 0).is_some(), "b's mixer has them");

        // Refusals change nothing.
        assert_eq!(rooms.move_member(&b, &b, y, None, now), Err(RoomError::SameRoom("b".into())));
        assert_eq!(rooms.move_member(&a, &b, y, None, now), Err(RoomError::NoParticipant(y)));
        let c = rooms.create("c", Some(1), None).expect("c");
        rooms.move_member(&b, &c, y, None, now).expect("into c");
        assert!(matches!(rooms.move_member(&b, &c, x, None, now), Err(RoomError::RoomFull { .. })));
        assert_eq!((b.len(), rooms.room_of(x).map(|r| r.key)), (1, Some(b.key)));
        // Back again, its speak right kept.
        rooms.move_member(&b, &a, x, None, now).expect("back");
        assert!(a.member_list()[0].listen_only);
        // One identity, one participant: another "y" moved in replaces the one there.
        rooms.move_member(&c, &b, y, None, now).expect("into b");
        let (j, _) = joiner(&acc, "y");
        let y2 = rooms.join(&a, j, now).expect("a second y joins a");
        rooms.move_member(&a, &b, y2, None, now).expect("y2 into b");
        assert_eq!(b.member_list().iter().map(|m| m.id).collect::<Vec<_>>(), vec![y2]);
        assert_eq!(rooms.take_replaced(), vec![Effect::ClosePeer { peer: PeerId(y), io: 0 }]);
        // It leaves from where it is, closed on its thread.
        assert_eq!(rooms.leave(&a, x, LeaveReason::Left), Ok(Some(Effect::ClosePeer { peer: PeerId(x), io: 1 })));
    }

    #[test]
    fn a_plain_rtp_participant_moves_on_its_own_thread_and_stays_a_raw_source() {
        let cfg = RoomConfig { max_participants: 2, max_speakers: SpeakerLimit::Top(3), ..RoomConfig::default() };
        let rooms = Rooms::new(cfg, 4, 10).expect("rooms");
        let acc =
            tutti_rtc::Acceptor::new(SocketAddr::from(([127, 0, 0, 1], 4000)), Duration::from_secs(10)).expect("acc");
        let (a, b) = (rooms.create("a", None, None).expect("a"), rooms.create("b", None, None).expect("b"));
        let c = rooms.create("c", Some(1), None).expect("c");
        let now = Instant::now();
        let (j, _) = joiner(&acc, "full");
        rooms.join(&c, j, now).expect("c is full");
        let peer = acc.reserve_id();
        let plain = super::super::PlainJoiner {
            id: peer,
            name: "phone".into(),
            identity: "phone".into(),
            listen_only: false,
            admin: Default::default(),
            io: 7,
            attributes: Default::default(),
        };
        let (id, gate) = rooms.join_plain(&a, plain).expect("joins a");
        let suppressed = |room: &Arc<Room>| rooms.set_voice(room, id, None, None).map(|v| v.noise_suppression);
        assert_eq!(suppressed(&a), Ok(true), "room `auto`: a plain caller is suppressed");
        let (mut rx_a, mut rx_b) = (a.subscribe(), b.subscribe());
        events(&a, &mut rx_a);

        // A full target refuses it; it stays in a, as it was.
        assert!(matches!(rooms.move_member(&a, &c, id, None, now), Err(RoomError::RoomFull { .. })));
        assert_eq!((a.len(), rooms.room_of(id).map(|r| r.key)), (1, Some(a.key)));
        assert_eq!(suppressed(&a), Ok(true));

        // Moved: the effect names the plain RTP thread; the gate it holds is the member's.
        let (done, effect) = rooms.move_member(&a, &b, id, Some(false), now).expect("moved");
        assert_eq!((done.speak, effect), (false, Some(Effect::Rehome { peer, io: 7 })));
        assert!(gate.get(), "the thread's speak gate follows the move");
        assert_eq!((a.len(), b.len(), rooms.room_of(id).map(|r| r.key)), (0, 1, Some(b.key)));
        assert_eq!(suppressed(&b), Ok(true), "still a raw source in the new room");
        assert_eq!(events(&a, &mut rx_a), vec![RoomEvent::Left { id, reason: "moved_room" }]);
        assert_eq!(
            events(&b, &mut rx_b),
            vec![RoomEvent::Joined { id, name: "phone".into(), attributes: Default::default() }]
        );
        assert_eq!(rooms.leave(&b, id, LeaveReason::Left), Ok(Some(Effect::ClosePeer { peer, io: 7 })));
    }
}
