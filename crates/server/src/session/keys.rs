//! Keypad keys of phone legs (RFC 4733 on their plain RTP, or SIP INFO):
//! a key pressed is told to the room (`keypad`), and what a key does
//! (the `[sip] keypad` map, in `crate::sip`) goes through the same
//! operations as the API's mute and hand; keys the API sends a leg go to
//! the media plane, which sends them as RFC 4733 events.

use std::time::Duration;

use axum::http::StatusCode;
use tokio::sync::mpsc::Receiver;

use super::sessions::Sessions;
use crate::media::{Keypress, KeysRefused};
use crate::refusal::{Refusal, Refused};
use crate::room::{Room, RoomError, RoomEvent};
use crate::sync::lock;

impl Sessions {
    /// The keys plain RTP legs press, for one reader (the SIP edge): the
    /// first call takes them, later ones get `None`.
    pub(crate) fn keypresses(&self) -> Option<Receiver<Keypress>> {
        self.media.keypresses()
    }

    /// Participant `id` of `room` pressed `key`: the room's sockets are told.
    pub(crate) fn keypress(&self, room: &Room, id: u64, key: char) {
        if lock(&room.members).contains_key(&id) {
            tracing::debug!(room = %room.id, participant = id, %key, "keypad");
            room.publish(RoomEvent::Keypad { id, digit: key });
        }
    }

    /// Mutes participant `id` if it is unmuted, else unmutes it (when it may
    /// speak); returns whether it is muted now.
    pub(crate) fn toggle_mute(&self, room: &Room, id: u64) -> Refused<bool> {
        let muted = lock(&room.members).get(&id).map(|m| m.muted).ok_or(RoomError::NoParticipant(id))?;
        self.set_muted(room, id, !muted)?;
        Ok(!muted)
    }

    /// Raises participant `id`'s hand if it is down, else lowers it; returns
    /// whether it is raised now.
    pub(crate) fn toggle_hand(&self, room: &Room, id: u64) -> Refused<bool> {
        let raised = !lock(&room.members).get(&id).map(|m| m.hand).ok_or(RoomError::NoParticipant(id))?;
        if self.rooms.set_hand(room, id, raised)? {
            crate::metrics::stage_action(if raised { "hand_raised" } else { "hand_lowered" });
        }
        Ok(raised)
    }

    /// Sends `keys` to phone leg `id` of `room` as RFC 4733 events; returns
    /// how long sending them takes.
    pub(crate) fn send_keys(&self, room: &Room, id: u64, keys: &str) -> Refused<Duration> {
        if !lock(&room.members).contains_key(&id) {
            return Err(RoomError::NoParticipant(id).into());
        }
        self.media.send_keys(id, keys).map_err(|e| {
            let code = match e {
                KeysRefused::Count(_) | KeysRefused::BadKey(_) => {
                    return Refusal::bad_request("bad_digits", e.to_string());
                }
                KeysRefused::NotALeg(_) => "not_a_phone_leg",
                KeysRefused::NoEvents(_) => "no_telephone_event",
                KeysRefused::Busy(_) => "digits_in_progress",
            };
            Refusal::new(StatusCode::CONFLICT, code, e.to_string())
        })
    }
}
