//! The spans of the rooms hosted here (cluster mode with `room_spread`):
//! which other nodes host each room too, told to the mix clock for the mesh.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tutti_cluster::Cluster;

use super::hosting::{hosted_here, hosts};
use super::node::Node;

/// How often a node reads the spans of the rooms it hosts.
const SPAN_REFRESH: Duration = Duration::from_millis(250);

/// How often it writes its membership again (the span key lives three lease TTLs).
const SPAN_REWRITE: Duration = Duration::from_secs(2);

/// The spans of the rooms hosted here, until `stop` (cluster mode with
/// `room_spread` on): every [`SPAN_REFRESH`] it reads them and tells the
/// mix clock each room's peers (the other members at the room's epoch
/// whose signed records name a mesh address); it records this node as a
/// member of every room it hosts (at the lease's epoch: a new epoch, after
/// the owner changed, is joined again), leaves the spans of rooms no
/// longer hosted, and gives back the lease of a room it holds but no
/// longer hosts once no other node hosts it either (under the room's lock,
/// so that a room claimed and about to be made here is kept). A room with
/// peers is spread: its roster is written ([`super::roster`]).
pub(crate) async fn spans(node: Arc<Node>, cluster: Cluster, mut stop: tokio::sync::watch::Receiver<bool>) {
    // What the clock was told, and the epoch this node is a member at, per room.
    let mut told: HashMap<String, (u64, Vec<(String, std::net::SocketAddr)>)> = HashMap::new();
    let mut member: HashMap<String, u64> = HashMap::new();
    // The first round writes every membership.
    let mut last_write = Instant::now().checked_sub(SPAN_REWRITE).unwrap_or_else(Instant::now);
    let mut every = tokio::time::interval(SPAN_REFRESH);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let me = cluster.node_id().to_owned();
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = node.span_wake.notified() => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        // Held first, then hosted: a join claims its room before it makes it
        // here, so a room made between the two reads is seen as hosted.
        let owned = cluster.owned_rooms();
        let hosted: std::collections::HashSet<String> =
            node.rooms.all().iter().filter(|r| hosted_here(r)).map(|r| r.id.clone()).collect();
        // Owned but not hosted here (emptied while others host it): read too.
        let unhosted: std::collections::HashSet<String> =
            owned.into_iter().map(|(r, _)| r).filter(|r| !hosted.contains(r)).collect();
        let mut names: Vec<String> = hosted.iter().cloned().collect();
        names.extend(unhosted);
        let Ok(spans) = cluster.spans(&names).await else { continue };
        let mut writes = Vec::new();
        for span in &spans {
            let room = &span.room;
            let is_hosted = hosted.contains(room);
            // The room's epoch: its lease's; without a lease (its owner
            // died, or let it go), the one this node joined at.
            let Some(epoch) = span.lease.as_ref().map(|(_, e)| *e).or_else(|| member.get(room).copied()) else {
                continue;
            };
            if !is_hosted {
                // Held here, hosted by nobody else any more: let it go, unless
                // a join or a create holds the room's lock (it claimed the
                // room and is about to make it here: a lease given back in
                // between would leave the room without an owner) or made it
                // since this round's start.
                let others = span.members.iter().any(|m| m.node_id != me && m.epoch == epoch);
                if !others
                    && let Some(_held) = node.locks.try_lock(room)
                    && !hosts(&node.rooms, room)
                    && cluster.owned_epoch(room).is_some()
                    && let Err(e) = cluster.release(room).await
                {
                    tracing::debug!(room, error = %e, "room lease not released; it lapses");
                }
                continue;
            }
            let recorded = span.members.iter().any(|m| m.node_id == me && m.epoch == epoch);
            if !recorded || member.get(room) != Some(&epoch) || last_write.elapsed() >= SPAN_REWRITE {
                writes.push((room.clone(), epoch));
            }
            member.insert(room.clone(), epoch);
            let peers: Vec<(String, std::net::SocketAddr)> = span
                .members
                .iter()
                .filter(|m| m.node_id != me && m.epoch == epoch)
                .filter_map(|m| Some((m.node_id.clone(), m.mesh_addr?)))
                .collect();
            // Its roster is written (and the others' read) while other nodes host it too.
            node.roster.set_spread(room, !peers.is_empty());
            if let Ok(r) = node.rooms.get(room) {
                r.set_spread(!peers.is_empty());
            }
            if told.get(room) != Some(&(epoch, peers.clone())) && node.media.set_span(room, epoch, peers.clone()) {
                told.insert(room.clone(), (epoch, peers));
            }
        }
        // Every room whose record is missing or old, and all of them every SPAN_REWRITE.
        let rewrite = last_write.elapsed() >= SPAN_REWRITE;
        if !writes.is_empty() && cluster.join_spans(&writes).await.is_ok() && rewrite {
            last_write = Instant::now();
        }
        // Rooms no longer hosted here: out of the clock and the span. Not one
        // a join is making here again, or made since this round's start (it
        // would be left out of the span until the next round).
        let gone: Vec<String> = member.keys().filter(|r| !hosted.contains(*r)).cloned().collect();
        for room in gone {
            let Some(_held) = node.locks.try_lock(&room) else { continue };
            if hosts(&node.rooms, &room) {
                continue;
            }
            node.roster.set_spread(&room, false);
            if node.media.leave_span(&room) {
                told.remove(&room);
                member.remove(&room);
                let _ = cluster.leave_span(&room).await;
            }
        }
    }
}
