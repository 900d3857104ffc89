//! A drain: SIGTERM, or `POST /v1/node/drain`.
//!
//! ```text
//! SIGTERM, or POST /v1/node/drain (admin of every room)
//!   ─► draining: /readyz 503, no new room here (Rooms::drain), rooms told `draining` {deadline}
//!   single node: calls go on; `tutti serve` shuts down when the last participant
//!                has left, or at the deadline (`drain_seconds`)
//!   cluster:     Cluster::set_draining (placement skips this node), then each room:
//!                its stored config read ─► lease released ─► placed afresh (never here)
//!                ─► Room::hand_over(node B): every socket gets `moved` {room, node,
//!                   api_url, reason: "drain", ticket} and rejoins at B, then closes here;
//!                   participants without a socket (WHIP, REST) are closed at once
//!                   (DTLS close_notify): they rejoin through any node, and are sent to B
//!                no other node (or no Redis) ─► the room stays here, as on a single node
//! ```
//!
//! A drain is not undone: a draining node ends with a shutdown.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tutti_cluster::{Cluster, Placement};

use super::drain::unix_ms;
use super::node::Node;
use crate::room::{LeaveReason, MovedTo, Room};
use crate::sync::lock;

/// What the participants of a draining node are told.
const DRAINING_MESSAGE: &str = "this server is restarting: your call goes on for now";

/// Whether participant `id` has a socket that a `moved` message reaches
/// (the WebSocket's resume slots say): the others are closed at a hand-over.
pub(crate) type HasSocket = Arc<dyn Fn(u64) -> bool + Send + Sync>;

/// Starts draining this node (once: later calls return the first drain's
/// deadline). `within`: how long calls may go on here at most. Returns
/// the deadline in unix milliseconds.
pub(crate) async fn begin(node: &Arc<Node>, within: Duration, has_socket: HasSocket) -> u64 {
    let deadline_ms = unix_ms() + within.as_millis() as u64;
    let set = node.drain.deadline_ms.compare_exchange(0, deadline_ms.max(1), Ordering::Relaxed, Ordering::Relaxed);
    if let Err(first) = set {
        return first;
    }
    crate::metrics::set_draining(true);
    if let Some(cluster) = &node.dir
        && let Err(e) = cluster.set_draining().await
    {
        tracing::warn!(error = %e, "could not mark this node draining in the cluster directory");
    }
    node.rooms.drain(deadline_ms.div_ceil(1000), DRAINING_MESSAGE);
    tracing::warn!(
        rooms = node.rooms.all().len(),
        participants = node.rooms.participants(),
        seconds = within.as_secs_f64(),
        "draining: no new rooms here; calls go on until they end or the drain time runs out"
    );
    if let Some(cluster) = node.dir.clone() {
        // Not in the caller's way: each room is a few Redis round trips.
        tokio::spawn(hand_over_all(node.clone(), cluster, deadline_ms.div_ceil(1000), has_socket));
    }
    deadline_ms
}

/// Hands every room of this node over to another node, one by one.
/// `until`: the drain's deadline (Unix seconds), when what the rooms carry
/// (their lock and bans) stops applying on the new node.
async fn hand_over_all(node: Arc<Node>, cluster: Cluster, until: u64, has_socket: HasSocket) {
    for room in node.rooms.all() {
        match hand_over(&node, &cluster, &room, until).await {
            Ok(Some(to)) => {
                tracing::info!(room = %room.id, node = %to.node, "room handed over");
                room.hand_over(to);
                close_socketless(&node, &room, &*has_socket);
            }
            Ok(None) => tracing::warn!(room = %room.id, "no other node can take the room: it stays here"),
            Err(e) => {
                tracing::warn!(room = %room.id, error = %e, "could not hand the room over: it stays here");
            }
        }
    }
}

/// Places `room` on another node: its creation config kept with its
/// current limits, lock and bans written in ([`carried_config`]), this
/// node's lease given up, the room claimed for the lighter of the others
/// (this node is draining: placement skips it). `Ok(None)` when no other
/// node can take it (the room is claimed back here, with the config it
/// had). A lease that could not be released is claimed back too: `release`
/// stops renewing it at once.
async fn hand_over(
    node: &Node,
    cluster: &Cluster,
    room: &Room,
    until: u64,
) -> Result<Option<MovedTo>, tutti_cluster::ClusterError> {
    let config = cluster.room_config(&room.id).await?;
    let carried = carried_config(node, room, config.as_deref(), until);
    let room = room.id.as_str();
    let placed = match cluster.release(room).await {
        Ok(_) => cluster.place(room, Some(&carried)).await,
        Err(e) => Err(e),
    };
    match placed {
        Ok(Placement::Remote(owner)) => Ok(Some(MovedTo { node: owner.node_id, api_url: owner.api_url })),
        Ok(Placement::Local { .. }) => Ok(None),
        Err(e) => {
            // Nobody else (or Redis went away): keep serving it here.
            cluster.claim(room, config.as_deref()).await?;
            match e {
                tutti_cluster::ClusterError::NoEligibleNode => Ok(None),
                e => Err(e),
            }
        }
    }
}

/// The stored config (JSON) the room's new node hosts it with: what its
/// creator gave (fields this node does not know kept as they are), its
/// limits and options (spatial mode, moderation) as they stand now, and its lock, bans and participants as
/// `handover` (see [`crate::room::CarriedStage`]).
fn carried_config(node: &Node, room: &Room, stored: Option<&str>, until: u64) -> String {
    let mut config = stored
        .and_then(|c| serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(c).ok())
        .unwrap_or_default();
    config.insert("max_participants".into(), room.max_participants().into());
    config.insert("max_speakers".into(), room.max_speakers().into());
    super::options::RoomOptions::of(room).write_into(&mut config);
    let stage = node.rooms.carry_stage(room, until, std::time::Instant::now(), crate::auth::unix_now());
    config.insert("handover".into(), serde_json::to_value(stage).unwrap_or_default());
    serde_json::Value::Object(config).to_string()
}

/// Closes the participants of a handed-over room that no WebSocket can
/// tell (WHIP and REST joins): their peers get DTLS close_notify, and they
/// rejoin through any node, which sends them to the room's new node.
fn close_socketless(node: &Node, room: &Room, has_socket: &dyn Fn(u64) -> bool) {
    let ids: Vec<u64> = lock(&room.members).keys().copied().filter(|id| !has_socket(*id)).collect();
    for id in ids {
        if let Ok(Some(effect)) = node.rooms.leave(room, id, LeaveReason::Moved) {
            node.apply([effect]);
        }
    }
}
