//! Moving a participant to another room of this node without a new
//! connection (a breakout; see `room::moves` and docs/features/breakout.md).
//!
//! What the participant may do in the new room is what the move grants it
//! (`speak`; default: as it could), not what its token says. A target room
//! that does not exist is `room_not_found`, unless `breakout.create_rooms`
//! is on (a single node only): then the move creates it, with the `[room]`
//! defaults; if the move then fails, the room it created is deleted again.
//! Across nodes (the target room held by another node) it is not moved:
//! the participant must leave and join there.

use std::sync::Arc;
use std::time::Instant;

use super::sessions::Sessions;
use crate::refusal::Refused;
use crate::room::{Room, RoomError};

/// A move's outcome.
pub(crate) enum Moved {
    /// Moved: whether it may speak in its new room.
    Done { speak: bool },
    /// The target room is held by another node (`node`, `api_url`).
    Elsewhere { node: String, api_url: String },
}

impl Sessions {
    /// Moves participant `id` from `from` (hosted here) to room `to`.
    pub(crate) async fn move_participant(
        &self,
        from: &Arc<Room>,
        id: u64,
        to: &str,
        speak: Option<bool>,
    ) -> Refused<Moved> {
        let mut created = false;
        let to = match (self.rooms.get(to), &self.node.dir) {
            (Ok(to), _) if !to.is_handed_over() => to,
            (Err(RoomError::NoRoom(_)), None) if self.cfg.breakout.create_rooms => {
                let (to, fresh) = self.create_target(to)?;
                created = fresh;
                to
            }
            (Ok(_), None) => return Err(RoomError::NoRoom(to.to_owned()).into()),
            (Err(e), None) => return Err(e.into()),
            (_, Some(c)) => {
                let owner = c.locate(to).await.map_err(|e| crate::cluster::node::unavailable(&e))?;
                return match owner {
                    Some(owner) => Ok(Moved::Elsewhere { node: owner.node_id, api_url: owner.api_url }),
                    None => Err(RoomError::NoRoom(to.to_owned()).into()),
                };
            }
        };
        let (done, effect) = match self.rooms.move_member(from, &to, id, speak, Instant::now()) {
            Ok(moved) => moved,
            Err(e) => {
                if created && to.len() == 0 {
                    // Nobody came: the room this move created goes again.
                    if let Ok(effects) = self.rooms.delete(&to.id) {
                        self.apply(effects);
                    }
                }
                return Err(e.into());
            }
        };
        self.apply(effect.into_iter().chain(self.rooms.take_replaced()));
        Ok(Moved::Done { speak: done.speak })
    }

    /// The target room, created now (`breakout.create_rooms`, a single node):
    /// with the `[room]` defaults, watched by the outputs as a room `POST
    /// /v1/rooms` creates. Whether this call created it (not a concurrent one).
    fn create_target(&self, room: &str) -> Refused<(Arc<Room>, bool)> {
        let state = match self.rooms.create(room, None, None) {
            Ok(state) => state,
            Err(RoomError::RoomExists(_)) => return Ok((self.rooms.get(room)?, false)),
            Err(e) => return Err(e.into()),
        };
        self.outputs.watch(&state);
        Ok((state, true))
    }
}
