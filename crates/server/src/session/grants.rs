//! What a grant lets its holder see and do in a room, as refusals: the
//! checks every control plane runs before it asks for a change.

use crate::auth::Grant;
use crate::refusal::{Refusal, Refused};
use crate::room::{Room, Rooms};
use crate::sync::lock;

/// 403 unless the grant may see `room` (without saying whether it exists).
pub(crate) fn may_see(grant: &Grant, room: &str) -> Refused<()> {
    if grant.may_see(room) {
        Ok(())
    } else if !grant.covers(room) {
        Err(Refusal::wrong_room(room))
    } else {
        Err(Refusal::forbidden(format!("this token grants nothing in room '{room}'")))
    }
}

/// 403 `wrong_room` unless the grant may see `room`, or is the token a
/// participant moved here (a breakout) joined with: its identity's, for the
/// room it first joined (the move's grant stands in for its token here).
pub(crate) fn may_see_member(rooms: &Rooms, grant: &Grant, room: &str, id: u64) -> Refused<()> {
    if grant.may_see(room) {
        return Ok(());
    }
    let moved_here = rooms.get(room).is_ok_and(|r| {
        lock(&r.members).get(&id).is_some_and(|m| {
            !grant.identity.is_empty()
                && m.identity == grant.identity
                && m.joined_in.as_deref().is_some_and(|first| grant.may_see(first))
        })
    });
    if moved_here { Ok(()) } else { may_see(grant, room) }
}

/// 403 unless the grant manages the room or is the participant's own
/// (same identity); returns whether it manages the room.
pub(crate) fn may_act_on(grant: &Grant, room: &Room, id: u64) -> Refused<bool> {
    if grant.may_manage(&room.id) {
        return Ok(true);
    }
    let own = lock(&room.members).get(&id).is_some_and(|m| !grant.identity.is_empty() && m.identity == grant.identity);
    if own { Ok(false) } else { Err(Refusal::forbidden("acting on another participant needs an admin token")) }
}

/// The room back if `id` is one of its participants, else the 404.
pub(crate) fn member_of(state: std::sync::Arc<Room>, id: u64) -> Refused<std::sync::Arc<Room>> {
    if !lock(&state.members).contains_key(&id) {
        return Err(crate::room::RoomError::NoParticipant(id).into());
    }
    Ok(state)
}
