//! Where a room lives: here (hosted, or placed here now), or on another
//! node; for a join, a room socket, and a route about a room or one of its
//! participants.

use std::sync::Arc;
use std::time::Instant;

use tutti_cluster::{JoinPlacement, Owner, Placement, RoomSpread};

use super::control::{self, Control};
use super::hosting::{StoredConfig, host};
use super::node::{Node, unavailable};
use crate::auth::unix_now;
use crate::refusal::Refused;
use crate::room::{Room, RoomError, valid_room_id};
use crate::sync::lock;

/// Where the room of a join is.
pub(crate) enum Located {
    /// Hosted here (it was, or it was placed here just now).
    Here(Arc<Room>),
    /// Held by another node.
    Elsewhere(Owner),
}

/// Finds `room` for a join (REST or WebSocket): here when hosted here
/// (without asking Redis), else placed by the directory. `ticketed`: the
/// caller was redirected here, so the room's lease is (most likely) this
/// node's already: claim it rather than place it afresh. With
/// `cluster.room_spread` a join may be hosted here for a room held by
/// another node (this node joins the room's span) or sent to another node
/// of the span: `when_full` keeps joins here while this node has room
/// (below `cluster.capacity` and `max_participants`), `always` places every
/// join that was not redirected here. A node at `max_participants` sends a
/// fresh join of a spread room to another node even when its last
/// heartbeat called it eligible.
pub(crate) async fn locate_for_join(node: &Node, room: &str, ticketed: bool) -> Refused<Located> {
    let spread = node.dir.as_ref().map_or(RoomSpread::Off, |c| c.config().room_spread);
    let stays = match spread {
        _ if ticketed => true,
        RoomSpread::Off => true,
        RoomSpread::WhenFull => {
            !node.rooms.is_full()
                && node.dir.as_ref().is_none_or(|c| node.rooms.participants() < c.config().capacity as usize)
        }
        RoomSpread::Always => false,
    };
    locate(node, room, ticketed, stays).await
}

/// Finds `room` for a WebSocket (a page joins through its socket, and a
/// REST participant watches through one): here when hosted here (a member
/// of a spread room included), else at its owner. With
/// `cluster.room_spread`, a socket is placed as a REST join is: here (this
/// node joins the room's span) or `moved` to the node chosen; but a socket
/// that names this node (`?node=`: where a `moved` or the room's snapshot
/// said its client is, as for a resume) stays here, hosting the room if
/// this node is below `cluster.capacity`, so that a client never bounces
/// between nodes; and with `when_full` a socket stays on a node hosting
/// the room while the node is below `cluster.capacity`.
pub(crate) async fn locate_for_socket(node: &Node, room: &str, named: Option<&str>) -> Refused<Located> {
    let Some(cluster) = node.dir.as_ref().filter(|c| c.config().room_spread != RoomSpread::Off) else {
        return locate(node, room, false, true).await;
    };
    let hosted = node.rooms.get(room).is_ok_and(|r| !r.is_handed_over());
    let has_room = !node.rooms.is_full() && node.rooms.participants() < cluster.config().capacity as usize;
    if named == Some(cluster.node_id()) && (hosted || has_room) {
        // As a join redirected here: the room is hosted here (claimed, or this node joins its span).
        return locate(node, room, !hosted, true).await;
    }
    let stays = hosted && cluster.config().room_spread == RoomSpread::WhenFull && has_room;
    locate(node, room, false, stays).await
}

async fn locate(node: &Node, room: &str, ticketed: bool, stay_if_hosted: bool) -> Refused<Located> {
    // A room this node handed over (a drain) is placed like any other: the
    // directory sends the join to its new node.
    if let Ok(r) = node.rooms.get(room)
        && !r.is_handed_over()
        && stay_if_hosted
    {
        return Ok(Located::Here(r));
    }
    let Some(cluster) = &node.dir else { return create_on_join(node, room).map(Located::Here) };
    if !valid_room_id(room) {
        return Err(RoomError::BadRoomId.into());
    }
    if node.rooms.is_closing() {
        return Err(RoomError::ShuttingDown.into());
    }
    // Until the room is made here (or found elsewhere): no lease of it is given back meanwhile.
    let _held = node.locks.share(room).await;
    // Only an admin creates rooms, unless `room.auto_create` says a join may.
    may_create_on_join(node, cluster, room).await?;
    let placement = if stay_if_hosted && !ticketed {
        // Placed as a whole room (a socket): its owner, or here if nobody holds it.
        match cluster.place(room, None).await.map_err(|e| unavailable(&e))? {
            Placement::Local { epoch, .. } => JoinPlacement::Here { epoch, owner: true },
            Placement::Remote(owner) => JoinPlacement::Elsewhere(owner),
        }
    } else if node.rooms.is_full() {
        cluster.place_join_when_full(room, ticketed).await.map_err(|e| unavailable(&e))?
    } else {
        cluster.place_join(room, ticketed).await.map_err(|e| unavailable(&e))?
    };
    match placement {
        JoinPlacement::Here { .. } => {
            // Created elsewhere (or here, before a restart): host it as it was created.
            let stored = cluster.room_config(room).await.map_err(|e| unavailable(&e))?;
            let config = StoredConfig::parse(stored.as_deref());
            let fresh = node.rooms.get(room).is_err();
            let state = host(node, cluster, room, config.max_participants, config.max_speakers, false)?;
            // Its spatial mode and moderation as its creator (or a drain) stored them: a room
            // that waits for its moderator holds this node's first guest from its arrival.
            if fresh {
                config.options().apply(&state);
            }
            // Handed over by a draining node: its lock and bans come with it.
            if fresh && let Some(carried) = &config.handover {
                node.rooms.restore_stage(&state, carried, Instant::now(), unix_now());
            }
            if fresh && cluster.config().room_spread != RoomSpread::Off {
                // Its span is read now, here and (told) on the other nodes,
                // so that the mesh carries the room to this node's first
                // participant from its first frames.
                node.span_wake.notify_one();
                control::publish(node.dir.as_ref(), room, &Control::Joined);
            }
            Ok(Located::Here(state))
        }
        JoinPlacement::Elsewhere(node) => Ok(Located::Elsewhere(node)),
    }
}

/// The room a join names, on a single node, when it does not exist:
/// created if `room.auto_create` allows it, else `404 room_not_found`
/// (rooms are an admin's to create).
pub(crate) fn create_on_join(node: &Node, room: &str) -> Refused<Arc<Room>> {
    if !node.cfg.room.auto_create {
        return Err(RoomError::NoRoom(room.to_owned()).into());
    }
    let state = match node.rooms.create(room, None, None) {
        Ok(state) => state,
        Err(RoomError::RoomExists(_)) => node.rooms.get(room)?,
        Err(e) => return Err(e.into()),
    };
    node.outputs.watch(&state);
    Ok(state)
}

/// In cluster mode, before a join places a room that is not hosted here:
/// unless `room.auto_create`, the room must exist: created by an admin (its
/// record in the directory carries the creator's config; a released room's
/// does not), or held by a live node (a Redis that restarted empty lost the
/// config, but the owner writes its lease back), else `404 room_not_found`.
pub(crate) async fn may_create_on_join(node: &Node, cluster: &tutti_cluster::Cluster, room: &str) -> Refused<()> {
    if node.cfg.room.auto_create {
        return Ok(());
    }
    match cluster.room_config(room).await {
        Ok(Some(_)) => return Ok(()),
        Ok(None) => {}
        Err(e) => return Err(unavailable(&e)),
    }
    match cluster.locate(room).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(RoomError::NoRoom(room.to_owned()).into()),
        Err(e) => Err(unavailable(&e)),
    }
}

/// Where the room of a route is: here, or on another node (and why: the
/// redirect's message).
pub(crate) enum Found {
    Here(Arc<Room>),
    Elsewhere(Owner, String),
}

/// What a redirect to the node holding `room` says.
pub(crate) fn room_is_on(room: &str, owner: &Owner) -> String {
    format!("room '{room}' is on node {}", owner.node_id)
}

/// The room a request names if this node holds it; in cluster mode, else,
/// the node that does (the API answers a `307` there with a ticket: check
/// what the caller may do before); else the error (`no_room`, 503).
pub(crate) async fn here(node: &Node, room: &str) -> Refused<Found> {
    match (node.rooms.get(room), &node.dir) {
        (Ok(state), _) => Ok(Found::Here(state)),
        (Err(e), None) => Err(e.into()),
        (Err(e), Some(c)) => {
            let owner = c.locate(room).await.map_err(|e| unavailable(&e))?.ok_or(e)?;
            let message = room_is_on(room, &owner);
            Ok(Found::Elsewhere(owner, message))
        }
    }
}

/// The room of a participant's route (`PATCH`, `DELETE` and `…/move` of
/// `/v1/rooms/{room}/participants/{id}`): here when `id` is one of this
/// node's participants of it. In a room spread over nodes, else, the node
/// of the room's span whose number the id carries (ids are `number << 32 |
/// n`; the node found among the span's live members by their signed
/// records only: [`tutti_cluster::Cluster::span_node`]), where the API
/// redirects with a ticket of the least grant bound to the request, as
/// [`here`] does for a room on another node. Else as [`here`]: the room
/// here (its `participant_not_found` comes next), or its owner. A request
/// redirected already (`ticketed`) is never sent on for its id: an id
/// whose node does not host it is a 404, not a bounce.
pub(crate) async fn participant_here(node: &Node, room: &str, id: u64, ticketed: bool) -> Refused<Found> {
    if let Ok(r) = node.rooms.get(room)
        && lock(&r.members).contains_key(&id)
    {
        return Ok(Found::Here(r));
    }
    if let Some(c) = &node.dir
        && !ticketed
        && c.config().room_spread != RoomSpread::Off
        && let Some(number) = tutti_cluster::node_number_of(id)
        && number != c.node_number()
    {
        match c.span_node(room, number).await {
            Ok(Some(owner)) if owner.node_id != c.node_id() => {
                let message = format!("participant {id} of room '{room}' is on node {}", owner.node_id);
                return Ok(Found::Elsewhere(owner, message));
            }
            Ok(_) => {}
            Err(e) => return Err(unavailable(&e)),
        }
    }
    here(node, room).await
}
