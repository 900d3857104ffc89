//! The node registry: this node's signed record, rewritten by every
//! heartbeat (load, draining, node number), and the other nodes' records,
//! trusted only when signed with the cluster's key.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use tracing::{info, warn};

use super::route::MAX_NODE_NUMBER;
#[cfg(doc)]
use super::route::NODE_NUMBER_SHIFT;
use super::{Cluster, lock};
use crate::error::ClusterError;
use crate::placement::{Load, NodeInfo, NodeState};

/// Attempts at a node number held by no live node.
const NUMBER_ATTEMPTS: usize = 16;

/// Forged records logged by id, at most this many (then only counted).
const MAX_WARNED_FORGED: usize = 64;

/// A `node:<id>` hash as read from Redis.
pub(super) enum Record {
    /// Signed with the cluster's key and complete.
    Node(NodeInfo),
    /// No such key (the node is dead or gone).
    Gone,
    /// Present but not signed with the cluster's key, or incomplete: ignored.
    Rejected,
}

fn parse_node(id: &str, h: &HashMap<String, String>) -> Option<NodeInfo> {
    let num = |k: &str| h.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    Some(NodeInfo {
        id: id.to_owned(),
        api_url: h.get("api_url")?.clone(),
        media_addr: h.get("media_addr").cloned().unwrap_or_default(),
        sip_addr: h.get("sip_addr").cloned().unwrap_or_default(),
        state: NodeState::parse(h.get("state")?)?,
        load: Load {
            participants: num("participants") as u32,
            busiest_thread_cpu: num("cpu") as f32,
            tick_p99: Duration::try_from_secs_f64(num("tick_p99_seconds")).unwrap_or_default(),
        },
        capacity: num("capacity") as u32,
        placements: num("placements") as u32,
        joins: num("joins") as u32,
        mesh_addr: h.get("mesh_addr").and_then(|a| a.parse().ok()),
        number: h.get("number").and_then(|n| n.parse().ok()).filter(|n| (1..=MAX_NODE_NUMBER).contains(n)),
    })
}

impl Cluster {
    /// This node's number, unique among the live nodes: the server starts
    /// its participant ids at `number << 32` ([`NODE_NUMBER_SHIFT`]), so
    /// that ids are unique across the nodes of a room and name their node.
    /// Taken at start with `INCR node_numbers` (wrapping past
    /// [`MAX_NODE_NUMBER`]), skipping numbers whose `number:<n>` key a
    /// live node still holds; the key is rewritten with every heartbeat
    /// (it lapses with the node's TTL). A restarted node takes a new number
    /// (its old participants' ids are not handed out again). Published in
    /// the node's signed record.
    ///
    /// The `number:<n>` keys are only a fast path: anyone who can write to
    /// Redis can delete them and wind the counter back. What decides is
    /// the other nodes' signed records: a number one of them names is
    /// skipped (counted as `tutti_cluster_node_number_conflicts_total`) and
    /// the next one tried, rather than refusing to start, so that a writer
    /// to Redis can make a node skip numbers but neither keep it from
    /// starting nor give it a live node's number. A clash that still
    /// happens (the live node's record deleted too at that moment) is
    /// reported by the registry scan ([`Cluster::nodes`]).
    pub fn node_number(&self) -> u32 {
        self.inner.number.load(Relaxed)
    }

    /// Publishes this node's SIP address (`host:port`: the host and port of
    /// its SIP Contact) in its signed record, from the next heartbeat on:
    /// other nodes redirect calls to a room this node holds there
    /// (`302 Moved Temporarily`). Set by the server once its SIP edge is
    /// bound (its port may be chosen by the system).
    pub fn set_sip_addr(&self, addr: String) {
        *lock(&self.inner.sip_addr) = addr;
    }

    pub(super) async fn take_number(&self) -> Result<u32, ClusterError> {
        for _ in 0..NUMBER_ATTEMPTS {
            let mut con = self.inner.con.clone();
            let key = self.inner.keys.node_numbers();
            let n: u64 = self.run(async move { redis::cmd("INCR").arg(key).query_async(&mut con).await }).await?;
            let number = (n.saturating_sub(1) % u64::from(MAX_NODE_NUMBER)) as u32 + 1;
            let mut con = self.inner.con.clone();
            let (key, me, ttl) =
                (self.inner.keys.number(number), self.inner.node_id.clone(), self.inner.cfg.node_ttl_ms());
            let set: Option<String> = self
                .run(async move {
                    redis::cmd("SET").arg(key).arg(me).arg("NX").arg("PX").arg(ttl).query_async(&mut con).await
                })
                .await?;
            if set.is_none() {
                continue;
            }
            if let Some(holder) = self.number_holder(number).await? {
                self.inner.counters.node_number_conflicts.fetch_add(1, Relaxed);
                warn!(node = %self.inner.node_id, number, holder = %holder,
                    "node number given out again (its number key was gone: deleted from Redis, or Redis \
                     lost its data) though a live node's signed record names it: taking another");
                continue;
            }
            info!(node = %self.inner.node_id, number, "node number taken");
            return Ok(number);
        }
        Err(ClusterError::Corrupt(format!("no free node number in {NUMBER_ATTEMPTS} attempts")))
    }

    /// Another live node whose signed record names `number`, if any.
    async fn number_holder(&self, number: u32) -> Result<Option<String>, ClusterError> {
        let me = &self.inner.node_id;
        Ok(self.nodes().await?.into_iter().find(|n| n.number == Some(number) && n.id != *me).map(|n| n.id))
    }

    /// The load the next heartbeat reports (no I/O).
    pub fn set_load(&self, load: Load) {
        *lock(&self.inner.load) = load;
    }

    /// Marks the node draining (no new rooms placed here; its rooms stay)
    /// and writes the registry entry at once.
    pub async fn set_draining(&self) -> Result<(), ClusterError> {
        self.inner.draining.store(true, Relaxed);
        self.heartbeat().await
    }

    /// The live nodes (registry entries present), this one included;
    /// ids whose entry is gone are removed from the node set.
    pub async fn nodes(&self) -> Result<Vec<NodeInfo>, ClusterError> {
        let keys = &self.inner.keys;
        let mut con = self.inner.con.clone();
        let nodes_key = keys.nodes();
        let ids: Vec<String> =
            self.run(async move { redis::cmd("SMEMBERS").arg(nodes_key).query_async(&mut con).await }).await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.cmd("HGETALL").arg(keys.node(id));
        }
        let mut con = self.inner.con.clone();
        let hashes: Vec<HashMap<String, String>> = self.run(async move { pipe.query_async(&mut con).await }).await?;
        let mut live = Vec::with_capacity(ids.len());
        let mut gone = Vec::new();
        for (id, h) in ids.iter().zip(&hashes) {
            match self.read_node(id, h) {
                Record::Node(n) => live.push(n),
                Record::Gone => gone.push(id.clone()),
                Record::Rejected => {}
            }
        }
        if !gone.is_empty() {
            let mut con = self.inner.con.clone();
            let nodes_key = keys.nodes();
            let _: Result<i64, _> =
                self.run(async move { redis::cmd("SREM").arg(nodes_key).arg(&gone).query_async(&mut con).await }).await;
        }
        live.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(live)
    }

    /// A node's registry record, trusted only when signed with the
    /// cluster's key (see `record`); rejections are logged (once per id)
    /// and counted.
    pub(super) fn read_node(&self, id: &str, h: &HashMap<String, String>) -> Record {
        if h.is_empty() {
            return Record::Gone;
        }
        if self.inner.records.verify_fresh(id, h, super::unix_now_ms(), self.inner.cfg.node_ttl_ms())
            && let Some(n) = parse_node(id, h)
            && self.inner.cfg.api_url_allowed(&n.api_url)
        {
            return Record::Node(n);
        }
        self.inner.counters.node_records_rejected.fetch_add(1, Relaxed);
        let mut warned = lock(&self.inner.warned_forged);
        if warned.len() < MAX_WARNED_FORGED && warned.insert(id.to_owned()) {
            warn!(node = %id, api_url = ?h.get("api_url"),
                at = ?h.get("at"),
                "registry record not signed with the cluster's key (another secret, or written by hand), \
                 or written more than node_ttl_seconds ago or ahead (replayed, or the nodes' clocks differ: \
                 sync them), or its api_url not in cluster.allowed_api_urls: ignored");
        }
        Record::Rejected
    }

    /// Writes this node's registry entry now (the task does so every
    /// heartbeat interval): fields, TTL and membership in one MULTI.
    pub async fn heartbeat(&self) -> Result<(), ClusterError> {
        let inner = &self.inner;
        let load = *lock(&inner.load);
        let state = if inner.draining.load(Relaxed) { NodeState::Draining } else { NodeState::Serving };
        let key = inner.keys.node(&inner.node_id);
        let number = inner.number.load(Relaxed);
        let mut fields: Vec<(&str, String)> = vec![
            ("api_url", inner.cfg.api_url.clone()),
            ("media_addr", inner.cfg.media_addr.clone()),
            ("state", state.as_str().to_owned()),
            ("participants", load.participants.to_string()),
            ("capacity", inner.cfg.capacity.to_string()),
            ("cpu", load.busiest_thread_cpu.to_string()),
            ("tick_p99_seconds", load.tick_p99.as_secs_f64().to_string()),
        ];
        // The address bound (the server puts it in the config it starts the cluster with).
        if !inner.cfg.mesh_addr.is_empty() {
            fields.push(("mesh_addr", inner.cfg.mesh_addr.clone()));
        }
        if number != 0 {
            fields.push(("number", number.to_string()));
        }
        let sip_addr = lock(&inner.sip_addr).clone();
        if !sip_addr.is_empty() {
            fields.push(("sip_addr", sip_addr));
        }
        let sig = inner.records.sign(&inner.node_id, &fields);
        let at = super::unix_now_ms();
        let at_sig = inner.records.sign_at(&inner.node_id, &fields, at);
        let mut pipe = redis::pipe();
        pipe.atomic().cmd("HSET").arg(&key);
        for (field, value) in &fields {
            pipe.arg(*field).arg(value);
        }
        pipe.arg("sig")
            .arg(sig)
            .arg("at")
            .arg(at)
            .arg("at_sig")
            .arg(at_sig)
            // Placements since the last heartbeat: their participants show in
            // the next figures (a room's first clients arrive within a second).
            .arg("placements")
            .arg(0)
            .arg("joins")
            .arg(0)
            .ignore()
            .cmd("PEXPIRE")
            .arg(&key)
            .arg(inner.cfg.node_ttl_ms())
            .ignore()
            .cmd("SADD")
            .arg(inner.keys.nodes())
            .arg(&inner.node_id)
            .ignore();
        if number != 0 {
            // The number stays this node's while it lives (and after Redis lost it).
            pipe.cmd("SET").arg(inner.keys.number(number)).arg(&inner.node_id).arg("PX").arg(inner.cfg.node_ttl_ms());
            pipe.ignore();
        }
        let mut con = inner.con.clone();
        let result = self.run(async move { pipe.exec_async(&mut con).await }).await;
        let c = &inner.counters;
        match &result {
            Ok(()) => c.heartbeats.fetch_add(1, Relaxed),
            Err(_) => c.heartbeat_failures.fetch_add(1, Relaxed),
        };
        result
    }
}
