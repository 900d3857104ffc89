//! Where a phone call's room is, in a cluster: the SIP edge asks before it
//! answers the INVITE (a redirect is the INVITE's only answer), then joins
//! the room found here through the one join (`Place::Given`).
//!
//! A call carries no redirect ticket, and a redirect costs the caller a
//! second INVITE (and a second digest challenge: nonces are per node). So
//! in a cluster whose rooms spread, a node with room (below
//! `cluster.capacity` and `max_participants`, not draining) hosts the call
//! as it hosts a join redirected to it: it claims the room if nobody holds
//! it, else joins the room's span, never fencing the owner. Otherwise the
//! room is placed as any join's: here, or on the node the caller is sent to.

use std::sync::Arc;

use tutti_cluster::{Owner, RoomSpread};

use super::sessions::Sessions;
use crate::cluster::locate::{Located, locate_for_join};
use crate::refusal::Refused;
use crate::room::Room;

/// Where a call's room is.
pub(crate) enum CallPlace {
    /// A single node (no cluster): the join finds or makes the room, as a REST join.
    Anywhere,
    /// Hosted here (it was, or it was placed or spread here just now).
    Here(Arc<Room>),
    /// On another node: the call goes there (its signed record's `sip_addr`).
    Elsewhere(Owner),
}

impl Sessions {
    /// Where the room of a call to this node is (see the module's doc):
    /// refused as a join's placement is (`room_not_found`, the directory
    /// unavailable, …).
    pub(crate) async fn place_call(&self, room: &str) -> Refused<CallPlace> {
        let node = &self.node;
        let Some(cluster) = &node.dir else { return Ok(CallPlace::Anywhere) };
        let has_room = !node.rooms.is_full()
            && !node.rooms.is_draining()
            && node.rooms.participants() < cluster.config().capacity as usize;
        let here_if_spread = has_room && cluster.config().room_spread != RoomSpread::Off;
        Ok(match locate_for_join(node, room, here_if_spread).await? {
            Located::Here(room) => CallPlace::Here(room),
            Located::Elsewhere(owner) => CallPlace::Elsewhere(owner),
        })
    }
}
