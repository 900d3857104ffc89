//! Where another node's participants sit in a spread spatial room: the seat
//! their own node gave them (their `tutti.seat` attribute), so that a
//! listener on any node hears a speaker where the speaker's node puts them.
//!
//! ```text
//! node A: a participant joins, or its attributes change ─► events (with tutti.seat)
//!   ─► node B's relay (`cluster::roster`) ─► Room::note_remote_seats ─► remembered,
//!      and the mixer's remote for that participant (if selected now) moved there
//! node B's mesh glue adds a remote to its mixer ─► Room::remote_seat ─► seated there
//! a participant that joined A before B hosted the room: its seat is read from A's
//!   roster (`cluster::roster`) while a remote in B's mixer has none
//! ```
//!
//! Bounded: at most [`MAX_REMOTE_SEATS`] seats are remembered per room.

use tutti_mix::ParticipantId;

use super::event::RoomEvent;
use super::room::Room;
use crate::sync::lock;

/// Other nodes' participants whose seats a room remembers at most.
pub(crate) const MAX_REMOTE_SEATS: usize = 65_536;

impl Room {
    /// Notes the seats another node's events tell (`joined`,
    /// `attributes_changed`: a valid `tutti.seat`; `left`: forgotten), and
    /// moves the mixer's remotes of those participants there.
    pub(crate) fn note_remote_seats(&self, events: &[RoomEvent]) {
        let mut changed = Vec::new();
        {
            let mut seats = lock(&self.remote_seats);
            for event in events {
                match event {
                    RoomEvent::Joined { id, attributes, .. } | RoomEvent::AttributesChanged { id, attributes } => {
                        let Some(seat) = crate::attributes::seat_of(attributes) else { continue };
                        if seats.len() < MAX_REMOTE_SEATS || seats.contains_key(id) {
                            seats.insert(*id, seat);
                            changed.push((*id, seat));
                        }
                    }
                    RoomEvent::Left { id, .. } => {
                        seats.remove(id);
                    }
                    _ => {}
                }
            }
        }
        self.seat_remotes(&changed);
    }

    /// Notes seats read from another node's roster (`(real id, seat)`), as
    /// [`Room::note_remote_seats`] does for its events.
    pub(crate) fn note_seats_read(&self, read: &[(u64, i8)]) {
        let mut changed = Vec::new();
        {
            let mut seats = lock(&self.remote_seats);
            for &(id, seat) in read {
                if seats.len() >= MAX_REMOTE_SEATS && !seats.contains_key(&id) {
                    break;
                }
                if seats.insert(id, seat) != Some(seat) {
                    changed.push((id, seat));
                }
            }
        }
        self.seat_remotes(&changed);
    }

    /// The seat another node's participant `real` has there, if told.
    pub(crate) fn remote_seat(&self, real: u64) -> Option<i8> {
        lock(&self.remote_seats).get(&real).copied()
    }

    /// The real ids of the other nodes' participants in the mixer now whose
    /// seat is not known here (a spatial room only; else none).
    pub(crate) fn unseated_remotes(&self) -> Vec<u64> {
        if !self.is_spatial() {
            return Vec::new();
        }
        let named: Vec<u64> = lock(&self.remote_names).values().copied().collect();
        let seats = lock(&self.remote_seats);
        named.into_iter().filter(|id| !seats.contains_key(id)).collect()
    }

    /// Moves the mixer's remotes of these participants to their seats.
    fn seat_remotes(&self, changed: &[(u64, i8)]) {
        if changed.is_empty() {
            return;
        }
        let remotes: Vec<(u64, i8)> = {
            let names = lock(&self.remote_names);
            names
                .iter()
                .filter_map(|(remote, real)| changed.iter().find(|(id, _)| id == real).map(|(_, s)| (*remote, *s)))
                .collect()
        };
        if remotes.is_empty() {
            return;
        }
        let mut m = lock(&self.mixing);
        for (remote, seat) in remotes {
            let _ = m.mixer.set_seat(ParticipantId(remote), seat);
        }
    }
}

#[cfg(test)]
mod tests {
    use tutti_mix::{ParticipantId, RoomConfig};

    use super::super::event::RoomEvent;
    use super::super::room::REMOTE_ID_BASE;
    use crate::room::{Rooms, SpatialMode};

    #[test]
    fn another_nodes_participant_sits_where_its_events_and_roster_say() {
        let rooms = Rooms::new(RoomConfig::default(), 4, 10).expect("rooms");
        let room = rooms.create("r", None, None).expect("room");
        let remote = ParticipantId(REMOTE_ID_BASE);
        room.with_mixer(|m| m.add_remote(remote)).expect("a remote");
        room.name_remote(remote.0, Some(7));
        assert!(room.unseated_remotes().is_empty(), "not spatial: no seat asked");
        room.set_spatial(SpatialMode::Panned);
        assert_eq!(room.unseated_remotes(), [7]);

        let seated = |seat: &str| [("tutti.seat".to_owned(), seat.to_owned())].into_iter().collect();
        room.note_remote_seats(&[RoomEvent::Joined { id: 7, name: "ann".into(), attributes: seated("-3") }]);
        assert_eq!(room.remote_seat(7), Some(-3));
        assert_eq!(room.with_mixer(|m| m.seat_of(remote).ok()), Some(-3), "the mixer's remote moved there");
        assert!(room.unseated_remotes().is_empty());
        // A seat out of range is not one; a change moves it; a leave forgets it.
        room.note_remote_seats(&[RoomEvent::AttributesChanged { id: 7, attributes: seated("9") }]);
        assert_eq!(room.remote_seat(7), Some(-3));
        room.note_remote_seats(&[RoomEvent::AttributesChanged { id: 7, attributes: seated("2") }]);
        assert_eq!(room.with_mixer(|m| m.seat_of(remote).ok()), Some(2));
        room.note_remote_seats(&[RoomEvent::Left { id: 7, reason: "left" }]);
        assert_eq!(room.remote_seat(7), None);
        // Read from a roster instead.
        room.note_seats_read(&[(7, 4)]);
        assert_eq!(room.with_mixer(|m| m.seat_of(remote).ok()), Some(4));
    }
}
