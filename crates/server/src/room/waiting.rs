//! Rooms that wait for their moderator (Asterisk ConfBridge's `marked`,
//! `wait_marked`, `end_marked`; FreeSWITCH's `wait-mod`, `endconf`).
//!
//! A moderator is a participant who joined with an admin token for the
//! room, or one whose attributes say `tutti.moderator=true` (a reserved key:
//! only its token or an admin sets it). With `wait_for_moderator`, those
//! who join while no moderator is in the room are held: muted (they cannot
//! unmute themselves: 409 `waiting_for_moderator`) and played the room's
//! hold music, told `waiting` `{waiting: true}`. The first moderator to
//! join opens the room: the held are unmuted (unless `join_muted`), the hold
//! music stops, `waiting` `{waiting: false}`. When the last moderator
//! leaves, `on_moderator_leave` says what happens: `stay` (nothing), `mute`
//! (everyone else is muted), or `end` (the room is closed); a room that
//! waits for its moderator holds everyone again. With `join_muted`, every
//! participant but a moderator joins muted (and may unmute).
//!
//! The checks run where the room's members change: a join
//! ([`Rooms::add_member`]) holds or opens, a leave ([`Rooms::leave`])
//! notes that the last moderator went; the session layer carries out an
//! `end` (the room's peers are closed there).
//!
//! In a room spread over nodes, each node says whether it has a moderator
//! (the cluster layer sends it as a control message when that changes, and
//! again to a node that joins the room); a moderator on any node counts
//! ([`Rooms::moderator_elsewhere`]): one there opens the room here, and the
//! last one gone anywhere applies `on_moderator_leave` here too.

use tutti_mix::ParticipantId;

use super::member::Member;
use super::moderation::{Moderation, OnModeratorLeave, is_moderator};
use super::{Room, RoomError, RoomEvent};
use crate::sync::lock;

impl Room {
    /// The room's moderation options.
    pub(crate) fn moderation(&self) -> Moderation {
        lock(&self.waiting).options
    }

    /// Whether participants are held until a moderator joins.
    pub(crate) fn is_waiting(&self) -> bool {
        lock(&self.waiting).waiting
    }

    /// Whether a moderator is in the room now: here, or on another node of a spread room.
    pub(crate) fn has_moderator(&self) -> bool {
        self.has_moderator_here() || !lock(&self.waiting).elsewhere.is_empty()
    }

    /// Whether one of this node's participants is a moderator.
    pub(crate) fn has_moderator_here(&self) -> bool {
        lock(&self.members).values().any(is_moderator)
    }

    /// Another node of a spread room (`node`) says whether it has a
    /// moderator: the first one opens a waiting room; the last one gone
    /// (none here either) applies `on_moderator_leave`. Whether the room is
    /// to end now (as [`Room::after_moderator_left`]).
    pub(super) fn moderator_elsewhere(&self, node: &str, present: bool) -> bool {
        let changed = {
            let mut w = lock(&self.waiting);
            if present { w.elsewhere.insert(node.to_owned()) } else { w.elsewhere.remove(node) }
        };
        match (changed, present) {
            (false, _) => false,
            (true, true) => {
                self.open();
                false
            }
            (true, false) => self.after_moderator_left(),
        }
    }

    /// Sets the room's moderation options (at creation, or an admin's
    /// `PATCH`): a room told to wait with no moderator in it holds everyone
    /// at once; one told not to wait opens.
    pub(crate) fn set_moderation(&self, options: Moderation) {
        let hold = options.wait_for_moderator && !self.has_moderator();
        {
            let mut w = lock(&self.waiting);
            w.options = options;
        }
        if hold { self.hold() } else { self.open() }
    }

    /// Whether a participant joining now, not a moderator, is muted on
    /// arrival: held, or `join_muted`.
    pub(super) fn joins_muted(&self, moderator: bool) -> bool {
        let w = lock(&self.waiting);
        !moderator && (w.waiting || w.options.join_muted)
    }

    /// After a join of a moderator (`moderator`) or not: a waiting room opens.
    pub(super) fn after_join(&self, moderator: bool) {
        if moderator {
            self.open();
        }
    }

    /// After a leave of a moderator: if it was the last, `on_moderator_leave`.
    /// Whether the room is to end now (`end`: the caller has the session
    /// layer close it, unless a moderator came back meanwhile).
    pub(super) fn after_moderator_left(&self) -> bool {
        if self.has_moderator() || self.is_closed() || self.len() == 0 {
            return false;
        }
        let options = self.moderation();
        if options.on_moderator_leave == OnModeratorLeave::Mute {
            self.mute_all_but_moderators();
        }
        if options.wait_for_moderator {
            self.hold();
        }
        options.on_moderator_leave == OnModeratorLeave::End
    }

    /// Holds everyone but the moderators: muted, the hold music on.
    fn hold(&self) {
        {
            let mut w = lock(&self.waiting);
            if w.waiting {
                return;
            }
            w.waiting = true;
        }
        self.mute_all_but_moderators();
        self.publish(RoomEvent::Waiting { waiting: true });
        self.hold_music(true);
        tracing::info!(room = %self.id, "room waits for its moderator");
    }

    /// Opens a waiting room: the held are unmuted (not with `join_muted`),
    /// the hold music stops unless one is alone.
    fn open(&self) {
        let join_muted = {
            let mut w = lock(&self.waiting);
            if !w.waiting {
                return;
            }
            w.waiting = false;
            w.options.join_muted
        };
        if !join_muted {
            self.set_muted_where(false, |m| m.muted && !m.listen_only);
        }
        self.publish(RoomEvent::Waiting { waiting: false });
        self.hold_music(false);
        tracing::info!(room = %self.id, "room opened by its moderator");
    }

    /// Mutes everyone who is not a moderator, each told `muted`.
    fn mute_all_but_moderators(&self) {
        self.set_muted_where(true, |m| !m.muted && !is_moderator(m));
    }

    /// Mutes or unmutes the members `which` picks, each told `muted`. The
    /// mixer first, then the members (the lock order: mixer, then members).
    fn set_muted_where(&self, muted: bool, which: impl Fn(&Member) -> bool) {
        let ids: Vec<u64> = lock(&self.members).values().filter(|m| which(m)).map(|m| m.id).collect();
        for id in ids {
            if self.set_muted(ParticipantId(id), muted).is_err() {
                continue; // gone meanwhile
            }
            let changed =
                lock(&self.members).get_mut(&id).is_some_and(|m| std::mem::replace(&mut m.muted, muted) != muted);
            if changed {
                self.publish(RoomEvent::Muted { id, muted });
            }
        }
    }

    /// Refuses a participant's unmuting of itself while the room waits.
    pub(crate) fn check_unmute(&self, member: &Member) -> Result<(), RoomError> {
        if self.is_waiting() && !is_moderator(member) {
            return Err(RoomError::Waiting(self.id.clone()));
        }
        Ok(())
    }
}
