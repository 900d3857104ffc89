//! Joining a room without a WebRTC peer: a plain RTP participant (see
//! `media::plain`). Same checks, member and events as [`Rooms::join`]; the
//! registry gets the participant owned by the plain RTP thread at once
//! (there is no ICE check to wait for).

use std::sync::Arc;

use tutti_mix::ParticipantId;
use tutti_rtc::PeerId;

use super::{ListenOnly, Member, Room, RoomError, RoomEvent, Rooms, clean_name};
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
    pub(crate) admin: bool,
    /// The I/O thread (index in the media plane's list) that owns it.
    pub(crate) io: usize,
}

impl Rooms {
    /// Adds a plain RTP participant to `room` (a locked room or a banned
    /// identity is refused as for any join). Returns its participant id and
    /// its speak gate (for the thread that drops a listener's packets).
    pub(crate) fn join_plain(&self, room: &Arc<Room>, joiner: PlainJoiner) -> Result<(u64, ListenOnly), RoomError> {
        self.check_space(room)?;
        let PlainJoiner { id: peer, name, identity, listen_only, admin, io } = joiner;
        self.admit(room, &identity, &name, std::time::Instant::now())?;
        let id = peer.0;
        let mut name = clean_name(if name.is_empty() { &identity } else { &name });
        if name.is_empty() {
            name = format!("rtp-{id}");
        }
        room.add(ParticipantId(id), listen_only)
            .map_err(|_| RoomError::RoomFull { room: room.id.clone(), max: room.max_participants() })?;
        self.participants.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let member = Member {
            id,
            name: name.clone(),
            identity,
            talking: false,
            muted: listen_only,
            listen_only,
            // No ICE or DTLS to wait for: it is as connected as it gets.
            connected: true,
            hand: false,
            admin,
            gate: ListenOnly::new(listen_only),
        };
        let gate = member.gate.clone();
        lock(&room.members).insert(id, member);
        lock(&self.registry).insert_plain(peer, room.clone(), gate.clone(), io);
        room.publish(RoomEvent::Joined { id, name });
        tracing::info!(room = %room.id, participant = id, listen_only, "plain RTP participant joined");
        Ok((id, gate))
    }
}
