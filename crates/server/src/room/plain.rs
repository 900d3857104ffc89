//! Joining a room without a WebRTC peer: a plain RTP participant (see
//! `media::plain`). Same checks, member and events as [`Rooms::join`]; the
//! registry gets the participant owned by the plain RTP thread at once
//! (there is no ICE check to wait for).

use std::sync::Arc;

use tutti_rtc::PeerId;

use super::rooms::NewMember;
use super::{ListenOnly, Room, RoomError, RoomEvent, Rooms};
use crate::sync::lock;

/// What a new plain RTP participant brings.
pub(crate) struct PlainJoiner {
    /// Its participant id (from the acceptor's sequence, so unique among peers).
    pub(crate) id: PeerId,
    /// Its display name (cleaned here).
    pub(crate) name: String,
    /// The identity of its token.
    pub(crate) identity: String,
    /// Its token lacks `speak`.
    pub(crate) listen_only: bool,
    /// Its token manages the room (spared by mute-all).
    pub(crate) admin: super::member::Admin,
    /// The I/O thread (index in the media plane's list) that owns it.
    pub(crate) io: usize,
    /// Its attributes from the start (its token's; a SIP call's).
    pub(crate) attributes: crate::attributes::Attributes,
}

impl Rooms {
    /// Adds a plain RTP participant to `room` (a locked room or a banned
    /// identity is refused as for any join). Returns its participant id and
    /// its speak gate (for the thread that drops a listener's packets).
    pub(crate) fn join_plain(&self, room: &Arc<Room>, joiner: PlainJoiner) -> Result<(u64, ListenOnly), RoomError> {
        let PlainJoiner { id: peer, name, identity, listen_only, admin, io, attributes } = joiner;
        let id = peer.0;
        // No ICE or DTLS to wait for: it is as connected as it gets.
        let new = NewMember {
            id,
            name,
            identity,
            listen_only,
            admin,
            connected: true,
            unnamed: "rtp",
            attributes,
            stereo: false,
        };
        let (name, gate, attributes) = self.add_member(room, new, std::time::Instant::now())?;
        // Its client suppresses no noise: `room.noise_suppression = "auto"` does, here.
        room.mark_raw_source(tutti_mix::ParticipantId(id));
        lock(&self.registry).insert_plain(peer, room.clone(), gate.clone(), io);
        room.publish(RoomEvent::Joined { id, name, attributes });
        tracing::info!(room = %room.id, participant = id, listen_only, "plain RTP participant joined");
        Ok((id, gate))
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::{Duration, Instant};

    use tutti_mix::{RoomConfig, SpeakerLimit};

    use super::*;
    use crate::room::{Claim, Effect, LeaveReason};

    fn plain(id: PeerId, name: &str) -> PlainJoiner {
        PlainJoiner {
            id,
            name: name.to_owned(),
            identity: String::new(),
            listen_only: false,
            admin: Default::default(),
            io: 7,
            attributes: Default::default(),
        }
    }

    #[test]
    fn a_plain_participant_joins_owned_by_its_thread_and_leaves_with_an_effect_for_it() {
        let cfg = RoomConfig { max_participants: 2, max_speakers: SpeakerLimit::Top(5), ..RoomConfig::default() };
        let rooms = Rooms::new(cfg, 2, 10).expect("valid defaults");
        let room = rooms.create("r", None, None).expect("created");
        let acceptor = tutti_rtc::Acceptor::new(SocketAddr::from(([127, 0, 0, 1], 4000)), Duration::from_secs(10))
            .expect("acceptor");
        let (a, b) = (acceptor.reserve_id(), acceptor.reserve_id());
        assert_ne!(a, b, "ids come from one sequence");
        let (id, gate) = rooms.join_plain(&room, plain(a, "phone\u{7}")).expect("joins");
        assert!(!gate.get(), "it may speak");
        assert_eq!(id, a.0);
        let member = lock(&room.members).get(&id).cloned().expect("a member");
        assert_eq!((member.name.as_str(), member.connected, member.muted), ("phone", true, false));
        assert_eq!(rooms.registry_sizes(), (1, 0), "registered, not pending: no ICE check to wait for");
        // Nothing can claim it by an ICE ufrag, and it never expires as a pending peer.
        assert!(matches!(rooms.claim(&format!("plain:{id}"), 0), Claim::Unknown));
        rooms.expire_pending(Instant::now() + Duration::from_secs(3600), Duration::from_secs(1));
        assert_eq!(room.len(), 1);
        // The room's limits hold as for WebRTC joins.
        let (unnamed, _) = rooms.join_plain(&room, plain(b, "")).expect("joins");
        assert_eq!(lock(&room.members).get(&unnamed).map(|m| m.name.clone()), Some(format!("rtp-{unnamed}")));
        let full = rooms.join_plain(&room, plain(acceptor.reserve_id(), "third"));
        assert!(matches!(full, Err(RoomError::RoomFull { .. })), "{:?}", full.err());
        // Leaving closes it on its own thread.
        assert_eq!(
            rooms.leave(&room, id, LeaveReason::Left).expect("left"),
            Some(Effect::ClosePeer { peer: a, io: 7 })
        );
        assert_eq!((rooms.participants(), rooms.registry_sizes().0), (1, 1));
    }
}
