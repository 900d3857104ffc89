//! This node's side of the cluster: the directory (none on a single node)
//! and what the node keeps beside it — the room locks, the rosters of
//! spread rooms, the other nodes as last read, the span task's wake-up,
//! the drain — with the room domain, the media handle and the outputs the
//! cluster's work acts on.

use std::sync::Arc;

use tutti_cluster::{Cluster, ClusterError};

use super::drain::Drain;
use super::locks::RoomLocks;
use super::nodes::OtherNodes;
use super::roster::Roster;
use crate::Config;
use crate::media::MediaHandle;
use crate::outputs::Outputs;
use crate::refusal::Refusal;
use crate::room::{Effect, Rooms};

/// This node, alone or in a cluster.
pub(crate) struct Node {
    pub(crate) cfg: Config,
    /// The cluster directory; `None` on a single node (no Redis at all).
    pub(crate) dir: Option<Cluster>,
    pub(crate) rooms: Arc<Rooms>,
    pub(crate) media: Arc<MediaHandle>,
    /// Recordings, RTP out, webhooks.
    pub(crate) outputs: Arc<Outputs>,
    /// Per room: a claim and the room's making here, or a close and the
    /// lease given back, one at a time (cluster mode).
    pub(crate) locks: RoomLocks,
    /// Rosters of spread rooms: this node's changes to write, the other
    /// nodes' as last read (`roster`).
    pub(crate) roster: Arc<Roster>,
    /// The other nodes a page and a snapshot name, as last read.
    pub(crate) other_nodes: OtherNodes,
    /// Wakes the span task (`spans`) before its next refresh: this node or
    /// another just joined a spread room's span.
    pub(crate) span_wake: tokio::sync::Notify,
    /// Whether this node drains (SIGTERM, `POST /v1/node/drain`), and until when.
    pub(crate) drain: Drain,
}

impl Node {
    pub(crate) fn new(
        cfg: Config,
        dir: Option<Cluster>,
        rooms: Arc<Rooms>,
        media: Arc<MediaHandle>,
        outputs: Arc<Outputs>,
    ) -> Self {
        Self {
            cfg,
            dir,
            rooms,
            media,
            outputs,
            locks: RoomLocks::default(),
            roster: Arc::default(),
            other_nodes: OtherNodes::default(),
            span_wake: tokio::sync::Notify::new(),
            drain: Drain::default(),
        }
    }

    /// Hands room effects to the media plane.
    pub(crate) fn apply(&self, effects: impl IntoIterator<Item = Effect>) {
        self.media.apply(effects);
    }

    /// The other serving nodes (id, API URL), at most `max`: see [`OtherNodes::read`].
    pub(crate) async fn other_nodes(&self, max: usize) -> Vec<(String, String)> {
        self.other_nodes.read(self.dir.as_ref(), max).await
    }
}

/// 503 with `Retry-After` for a directory that cannot answer.
pub(crate) fn unavailable(e: &ClusterError) -> Refusal {
    Refusal::cluster_unavailable(e.to_string(), e.retry_after_seconds())
}
