//! A room hosted here in cluster mode: its local copy made (with the config
//! stored at its creation), its events published to the other nodes, and
//! its lease given back when it closes.

use std::sync::Arc;

use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;
use tutti_cluster::{Cluster, RoomSpread};

use super::control::{self, Control};
use super::locks::RoomGuard;
use super::node::Node;
use super::options::RoomOptions;
use super::roster::{self, Roster};
use crate::refusal::Refused;
use crate::room::{CarriedStage, Moderation, Room, RoomError, RoomEvent, Rooms, SpatialMode};

/// The config a room's creator gave, as stored in the directory (JSON);
/// fields missing or unreadable take the defaults. A drain's hand-over
/// writes the room's current limits, options, lock and bans into it.
#[derive(Debug, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct StoredConfig {
    pub(crate) max_participants: Option<usize>,
    pub(crate) max_speakers: Option<usize>,
    /// The spatial mode its creator gave (else the node's `[room] spatial`).
    pub(crate) spatial: Option<SpatialMode>,
    /// The moderation options its creator gave.
    pub(crate) moderation: Option<Moderation>,
    pub(crate) handover: Option<CarriedStage>,
}

impl StoredConfig {
    pub(crate) fn parse(json: Option<&str>) -> Self {
        json.and_then(|j| serde_json::from_str(j).ok()).unwrap_or_default()
    }

    /// The room options it carries ([`RoomOptions`]).
    pub(crate) fn options(&self) -> RoomOptions {
        RoomOptions { spatial: self.spatial, moderation: self.moderation }
    }
}

/// The local copy of a room whose lease this node holds: created (with
/// the defaults unless given) when missing; its events go to the other
/// nodes' watchers. `exclusive` (a create): a room that exists already is
/// `409 room_exists`, not the room.
pub(crate) fn host(
    node: &Node,
    cluster: &Cluster,
    room: &str,
    max_participants: Option<usize>,
    max_speakers: Option<usize>,
    exclusive: bool,
) -> Refused<Arc<Room>> {
    match node.rooms.create(room, max_participants, max_speakers) {
        Ok(r) => {
            relay_events(cluster.clone(), &r, node.roster.clone());
            if node.media.has_mesh() && cluster.config().room_spread != RoomSpread::Off {
                // A room that may spread: the other nodes' events for this one (its
                // roster is written once it spreads: `spans`).
                roster::relay_span_events(cluster.clone(), &r, node.roster.clone(), node.cfg.limits.data_max_bytes);
            }
            Ok(r)
        }
        Err(e @ RoomError::RoomExists(_)) if exclusive => Err(e.into()),
        Err(RoomError::RoomExists(_)) => Ok(node.rooms.get(room)?),
        Err(e) => {
            // Not hosted after all: give the lease back so another node may take the room.
            release(node, cluster, room, None);
            Err(e.into())
        }
    }
}

/// Gives `room`'s lease back, in the background (it lapses by itself if
/// Redis is away), holding the room's lock (`held`, or taken first): a
/// room made here again meanwhile (a join or a create that came first)
/// keeps its lease. A room spread over other nodes keeps its owner: the
/// lease is kept (and renewed) while another node of its span hosts
/// participants (`spans` releases it when the last one leaves).
pub(crate) fn release(node: &Node, cluster: &Cluster, room: &str, held: Option<RoomGuard>) {
    let (cluster, room) = (cluster.clone(), room.to_owned());
    let (rooms, locks) = (node.rooms.clone(), node.locks.clone());
    tokio::spawn(async move {
        let _held = match held {
            Some(held) => held,
            None => locks.lock(&room).await,
        };
        if hosts(&rooms, &room) {
            tracing::debug!(room, "room made here again before its lease was given back: the lease is kept");
            return;
        }
        if cluster.config().room_spread != RoomSpread::Off
            && let Some(epoch) = cluster.owned_epoch(&room)
            && let Ok(spans) = cluster.spans(std::slice::from_ref(&room)).await
            && spans.iter().flat_map(|s| &s.members).any(|m| m.node_id != cluster.node_id() && m.epoch == epoch)
        {
            tracing::debug!(room, "room closed here but hosted by other nodes of its span: its lease is kept");
            let _ = cluster.leave_span(&room).await;
            return;
        }
        let _ = cluster.leave_span(&room).await;
        if let Err(e) = cluster.release(&room).await {
            tracing::debug!(room, error = %e, "room lease not released; it lapses");
        }
    });
}

/// Publishes a hosted room's events to the cluster until the room closes:
/// its own (those relayed from the other nodes of a spread room are never
/// published again), and notes its participants' changes for its roster.
/// Its own data messages go too while other nodes host it, on the same
/// channel and queue as its events (so a sender's stay in order).
fn relay_events(cluster: Cluster, room: &Arc<Room>, roster: Arc<Roster>) {
    let mut events = room.subscribe();
    let moved = room.moved_to();
    let name = room.id.clone();
    let spread = cluster.config().room_spread != RoomSpread::Off;
    // Read only where rooms may spread (an unread subscriber would hold the channel's messages).
    let mut data = spread.then(|| room.subscribe_data());
    let weak = Arc::downgrade(room);
    // Whether the other nodes were last told that a moderator is here.
    let mut moderator_told = false;
    tokio::spawn(async move {
        loop {
            let batch = tokio::select! {
                b = events.recv() => b,
                m = async {
                    match data.as_mut() {
                        Some(data) => data.recv().await,
                        None => std::future::pending().await,
                    }
                } => {
                    match m {
                        Ok(m) if !m.relayed && weak.upgrade().is_some_and(|r| r.is_spread()) => {
                            if let Some(wire) = m.wire() {
                                cluster.publish_event(&name, wire);
                            }
                        }
                        Err(RecvError::Lagged(n)) => crate::metrics::data_messages("lagged", n),
                        Err(RecvError::Closed) => break,
                        Ok(_) => {}
                    }
                    continue;
                }
            };
            match batch {
                // Handed over: the room's events are its new node's to tell.
                Ok(_) if moved.borrow().is_some() => break,
                Ok(batch) => {
                    // One tick's events, already serialized once for every subscriber.
                    let last =
                        batch.events.iter().any(|e| matches!(e, RoomEvent::RoomClosed | RoomEvent::Shutdown { .. }));
                    if spread {
                        roster::note_batch(&roster, &name, &batch);
                        // This node's first moderator came, or its last one went: the other nodes hear of it.
                        let members_changed = batch.events.iter().any(|e| {
                            matches!(
                                e,
                                RoomEvent::Joined { .. } | RoomEvent::Left { .. } | RoomEvent::AttributesChanged { .. }
                            )
                        });
                        if members_changed
                            && let Some(here) = weak.upgrade().map(|r| r.has_moderator_here())
                            && here != moderator_told
                        {
                            moderator_told = here;
                            control::publish(Some(&cluster), &name, &Control::Moderators { present: here });
                        }
                    }
                    if let Some(json) = batch.local_json() {
                        cluster.publish_event(&name, String::from_utf8_lossy(&json).into_owned());
                    }
                    if last {
                        break;
                    }
                }
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => break,
            }
        }
    });
}

/// Whether this node hosts `room`: it holds the room, neither handed over nor closed.
pub(crate) fn hosted_here(room: &Room) -> bool {
    !room.is_handed_over() && !room.is_closed()
}

/// Whether the room named `room` is made and hosted here ([`hosted_here`]):
/// the check, under the room's lock, before its lease or span is given up.
pub(crate) fn hosts(rooms: &Rooms, room: &str) -> bool {
    rooms.get(room).is_ok_and(|r| hosted_here(&r))
}
