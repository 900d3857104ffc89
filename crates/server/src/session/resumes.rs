//! Keeping a WebSocket-joined participant through a lost socket: its
//! resume slot (the leave that follows a lost socket is `members::socket_gone`).
//!
//! A participant that joined over a WebSocket leaves when its socket closes
//! cleanly (a close frame: the page left, the tab closed). When the socket
//! is *lost* instead (no close frame: the network changed, the connection
//! reset or went silent), the participant stays for
//! `limits.ws_resume_seconds`, mixed and heard as before, so that the
//! client can open a new socket and send `resume {id, key}` with the key
//! its `answer` carried (and restart ICE for its media, see "ICE restart"
//! in docs/api/rest.md). Unclaimed by then, it leaves with reason `left`.
//!
//! The slots are bounded by the participants: one per WebSocket-joined
//! participant, forgotten when it leaves.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::sync::lock;

/// One WebSocket-joined participant's resume key and whether a socket holds it.
struct Slot {
    room: String,
    key: String,
    /// Bumped at every detach and resume: a pending leave fires only if it is unchanged.
    generation: u64,
    attached: bool,
}

/// The resume slots, by participant id.
#[derive(Default)]
pub(crate) struct Resumes(Mutex<HashMap<u64, Slot>>);

/// Why a `resume` was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ResumeError {
    /// No such participant waits for a socket here (it left, the grace
    /// period ran out, the key is wrong, or another socket holds it).
    NotFound,
}

impl Resumes {
    /// A new participant joined through a socket: its key for `resume`.
    pub(crate) fn issue(&self, room: &str, id: u64) -> String {
        let mut bytes = [0u8; 16];
        // Without randomness there is no key worth giving: an empty one never matches.
        if getrandom::fill(&mut bytes).is_err() {
            return String::new();
        }
        let key: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        lock(&self.0).insert(id, Slot { room: room.to_owned(), key: key.clone(), generation: 0, attached: true });
        key
    }

    /// Its participant was moved to room `room` (a breakout): its key now
    /// resumes it there.
    pub(crate) fn rehome(&self, id: u64, room: &str) {
        if let Some(slot) = lock(&self.0).get_mut(&id) {
            room.clone_into(&mut slot.room);
        }
    }

    /// Whether participant `id` joined through a WebSocket (and has not left).
    pub(crate) fn holds(&self, id: u64) -> bool {
        lock(&self.0).contains_key(&id)
    }

    /// The participant left: forget its slot.
    pub(crate) fn forget(&self, id: u64) {
        lock(&self.0).remove(&id);
    }

    /// Its socket was lost: the generation a later leave must still find.
    pub(crate) fn detach(&self, id: u64) -> Option<u64> {
        let mut slots = lock(&self.0);
        let slot = slots.get_mut(&id)?;
        slot.attached = false;
        slot.generation += 1;
        Some(slot.generation)
    }

    /// Whether the slot is still detached at `generation` (then it is forgotten).
    pub(crate) fn expire(&self, id: u64, generation: u64) -> bool {
        let mut slots = lock(&self.0);
        let expired = slots.get(&id).is_some_and(|s| !s.attached && s.generation == generation);
        if expired {
            slots.remove(&id);
        }
        expired
    }

    /// A new socket claims participant `id` of `room` with `key`.
    pub(crate) fn resume(&self, room: &str, id: u64, key: &str) -> Result<(), ResumeError> {
        let mut slots = lock(&self.0);
        match slots.get_mut(&id) {
            Some(s) if !s.attached && s.room == room && !s.key.is_empty() && s.key == key => {
                s.attached = true;
                s.generation += 1;
                Ok(())
            }
            _ => Err(ResumeError::NotFound),
        }
    }

    /// Slots held (for tests and leak checks).
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.0).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_socket_is_resumed_with_its_key_once_and_expires_otherwise() {
        let r = Resumes::default();
        let key = r.issue("a", 7);
        assert_eq!(key.len(), 32);
        assert_eq!(r.resume("a", 7, &key), Err(ResumeError::NotFound), "held by its socket");
        let g = r.detach(7).expect("a slot");
        assert_eq!(r.resume("a", 7, "wrong"), Err(ResumeError::NotFound));
        assert_eq!(r.resume("b", 7, &key), Err(ResumeError::NotFound), "another room");
        assert_eq!(r.resume("a", 7, &key), Ok(()));
        assert!(!r.expire(7, g), "resumed: the pending leave does nothing");
        assert_eq!(r.resume("a", 7, &key), Err(ResumeError::NotFound), "one socket at a time");
        let g = r.detach(7).expect("a slot");
        assert!(r.expire(7, g), "unclaimed: it leaves");
        assert_eq!(r.len(), 0);
        r.issue("a", 8);
        r.forget(8);
        assert_eq!((r.len(), r.detach(8)), (0, None));
    }
}
