//! The other serving nodes a page and a room snapshot name, read from
//! their signed records at most once a second for every caller.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tutti_cluster::{Cluster, RoomSpread};

use crate::sync::lock;

/// Nodes a page names in its room snapshot (`nodes`).
const MAX_REJOIN_NODES: usize = 8;

/// In a cluster whose rooms spread: up to [`MAX_REJOIN_NODES`] other
/// serving nodes (`{node, api_url}`, from signed records), where a client
/// whose node is lost rejoins its room (the SDK does it on its own: its
/// socket there is placed like any join). Empty otherwise, or when Redis
/// cannot say.
pub(crate) async fn rejoin_nodes(other_nodes: &OtherNodes, dir: Option<&Cluster>) -> Vec<serde_json::Value> {
    other_nodes
        .read(dir, MAX_REJOIN_NODES)
        .await
        .into_iter()
        .map(|(node, api_url)| serde_json::json!({ "node": node, "api_url": api_url }))
        .collect()
}

/// How long one read of the other nodes serves every page and snapshot.
const OTHER_NODES_FRESH: Duration = Duration::from_secs(1);

/// Other serving nodes: (id, API URL).
type NodeUrls = Arc<[(String, String)]>;

/// The other serving nodes as last read, and when: see [`OtherNodes::read`].
#[derive(Default)]
pub(crate) struct OtherNodes(std::sync::Mutex<Option<(Instant, NodeUrls)>>);

impl OtherNodes {
    /// In a cluster whose rooms spread: up to `max` other serving nodes (id,
    /// API URL), sorted by id, from signed records; empty otherwise, or when
    /// Redis cannot say. Read at most once per [`OTHER_NODES_FRESH`] for all
    /// callers (the page at `/`, which anyone may load, and every socket's
    /// snapshot), so neither costs Redis a read per request.
    pub(crate) async fn read(&self, dir: Option<&Cluster>, max: usize) -> Vec<(String, String)> {
        let Some(cluster) = dir.filter(|c| c.config().room_spread != RoomSpread::Off) else {
            return Vec::new();
        };
        let cached = lock(&self.0).as_ref().filter(|(at, _)| at.elapsed() < OTHER_NODES_FRESH).cloned();
        let nodes = match cached {
            Some((_, nodes)) => nodes,
            None => {
                // A failed read serves its callers too (as none), until the next.
                let nodes: NodeUrls = match cluster.nodes().await {
                    Ok(nodes) => nodes
                        .into_iter()
                        .filter(|n| n.id != cluster.node_id() && n.state == tutti_cluster::NodeState::Serving)
                        .map(|n| (n.id, n.api_url))
                        .collect(),
                    Err(_) => Arc::from([]),
                };
                *lock(&self.0) = Some((Instant::now(), nodes.clone()));
                nodes
            }
        };
        nodes.iter().take(max).cloned().collect()
    }
}
