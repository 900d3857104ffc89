//! Where a room lives: placing it (power of two choices, claimed on the
//! chosen node's behalf), claiming it here, locating its live owner, its
//! stored config, and the directory's rooms.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use redis::Value;
use tracing::{debug, info, warn};

use super::lease::parse_lease;
use super::registry::Record;
use super::values::{Owner, Placement, RoomEntry};
use super::{Cluster, lock, random_u64};
use crate::error::ClusterError;
use crate::placement::{NodeInfo, choose};

/// Attempts of [`Cluster::place`] when chosen nodes vanish meanwhile.
const PLACE_ATTEMPTS: usize = 3;

/// What the claim script said, before the callers decide.
enum ClaimReply {
    /// Owned by this node or another live one.
    Placed(Placement),
    /// The node to claim for has no registry entry (dead, or not yet written).
    TargetDead,
}

impl Cluster {
    /// Claims `room` for this node (atomically, see the crate docs): the
    /// room becomes [`Placement::Local`] when no live node holds it or this
    /// node already does (e.g. a placer claimed it for this node and
    /// redirected the client here); otherwise [`Placement::Remote`].
    /// `config` (JSON) is stored with a new claim when given.
    pub async fn claim(&self, room: &str, config: Option<&str>) -> Result<Placement, ClusterError> {
        match self.claim_for(&self.inner.node_id, room, config).await? {
            ClaimReply::Placed(p) => Ok(p),
            ClaimReply::TargetDead => {
                // Our own entry is missing (Redis restarted, or our first
                // heartbeat has not landed yet): write it, then try once more.
                self.heartbeat().await?;
                match self.claim_for(&self.inner.node_id, room, config).await? {
                    ClaimReply::Placed(p) => Ok(p),
                    ClaimReply::TargetDead => {
                        Err(ClusterError::Unavailable("this node's registry entry does not stay written".into()))
                    }
                }
            }
        }
    }

    /// Where `room` should live: this node when it holds it already (no
    /// Redis needed, so joins to local rooms work while Redis is down);
    /// else its live owner; else the lighter of two random eligible nodes,
    /// claimed on that node's behalf (see the crate docs for why the placer
    /// claims). Retries with another node when the chosen one vanished.
    pub async fn place(&self, room: &str, config: Option<&str>) -> Result<Placement, ClusterError> {
        if let Some(epoch) = self.owned_epoch(room) {
            return Ok(Placement::Local { epoch, new: false });
        }
        let mut nodes = self.nodes().await?;
        let budget = Duration::from_secs_f64(self.inner.cfg.tick_budget_seconds);
        let estimate = self.inner.cfg.room_size_estimate;
        for _ in 0..PLACE_ATTEMPTS {
            let Some(i) = choose(&nodes, budget, estimate, [random_u64(), random_u64()]) else {
                // Nobody may take a new room; the room may still have a live owner.
                return match self.locate(room).await? {
                    Some(owner) if owner.node_id == self.inner.node_id => self.claim(room, config).await,
                    Some(owner) => Ok(Placement::Remote(owner)),
                    None => Err(ClusterError::NoEligibleNode),
                };
            };
            let target = nodes[i].id.clone();
            let result = if target == self.inner.node_id {
                ClaimReply::Placed(self.claim(room, config).await?)
            } else {
                self.claim_for(&target, room, config).await?
            };
            match result {
                ClaimReply::Placed(p) => return Ok(p),
                ClaimReply::TargetDead => {
                    debug!(room, node = %target, "chosen node vanished before the claim; choosing again");
                    nodes.remove(i);
                }
            }
        }
        Err(ClusterError::NoEligibleNode)
    }

    /// Runs the claim script for `node` (this node or another).
    async fn claim_for(&self, node: &str, room: &str, config: Option<&str>) -> Result<ClaimReply, ClusterError> {
        let inner = &self.inner;
        let keys = &inner.keys;
        let mut inv = inner.scripts.claim.prepare_invoke();
        inv.key(keys.room(room))
            .key(keys.lease(room))
            .key(keys.rooms())
            .arg(node)
            .arg(inner.cfg.lease_ttl_ms())
            .arg(keys.node_prefix())
            .arg(room)
            .arg(config.unwrap_or(""))
            .arg(config.map(|c| inner.configs.sign(&[room.as_bytes(), c.as_bytes()])).unwrap_or_default());
        let mut con = inner.con.clone();
        let reply: Result<Vec<String>, _> = self.run(async move { inv.invoke_async(&mut con).await }).await;
        let c = &inner.counters;
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                c.claim_failed.fetch_add(1, Relaxed);
                return Err(e);
            }
        };
        let mut reply = reply.into_iter();
        let (Some(status), Some(owner), Some(epoch)) = (reply.next(), reply.next(), reply.next()) else {
            return Err(ClusterError::Corrupt("short claim script answer".into()));
        };
        let epoch: u64 = epoch.parse().map_err(|_| ClusterError::Corrupt(format!("epoch {epoch:?}")))?;
        // The owner's record as Redis holds it: trusted only when signed.
        let mut record = HashMap::new();
        while let (Some(k), Some(v)) = (reply.next(), reply.next()) {
            record.insert(k, v);
        }
        let remote = |node_id: String| match self.read_node(&node_id, &record) {
            Record::Node(n) => Ok(Placement::Remote(Owner {
                node_id,
                epoch,
                api_url: n.api_url,
                media_addr: n.media_addr,
                sip_addr: n.sip_addr,
            })),
            Record::Gone | Record::Rejected => Err(ClusterError::Untrusted(format!(
                "room '{room}' is leased to node '{node_id}', whose registry record is not signed with the cluster's key"
            ))),
        };
        let placed = match status.as_str() {
            "dead" => {
                c.dead_target.fetch_add(1, Relaxed);
                return Ok(ClaimReply::TargetDead);
            }
            "claimed" if owner == inner.node_id => {
                c.claimed.fetch_add(1, Relaxed);
                lock(&inner.owned).insert(room.to_owned(), epoch);
                info!(room, epoch, "claimed room");
                Placement::Local { epoch, new: true }
            }
            "claimed" => {
                c.claimed.fetch_add(1, Relaxed);
                info!(room, epoch, node = %owner, "placed room on another node");
                remote(owner)?
            }
            "owner" if owner == inner.node_id => {
                c.already_owned.fetch_add(1, Relaxed);
                lock(&inner.owned).insert(room.to_owned(), epoch);
                Placement::Local { epoch, new: false }
            }
            "owner" => {
                c.elsewhere.fetch_add(1, Relaxed);
                // If this node thought it held the room, it has been fenced.
                let held = lock(&inner.owned).get(room).copied();
                if let Some(held) = held.filter(|&held| held != epoch) {
                    self.fence(room, held, format!("{owner}:{epoch}"));
                }
                remote(owner)?
            }
            other => return Err(ClusterError::Corrupt(format!("claim status {other:?}"))),
        };
        Ok(ClaimReply::Placed(placed))
    }

    /// The live owner of `room`: `None` when nobody holds its lease or the
    /// holder's node is dead (the room is then placed again on its next join).
    pub async fn locate(&self, room: &str) -> Result<Option<Owner>, ClusterError> {
        if let Some(epoch) = self.owned_epoch(room) {
            return Ok(Some(self.me(epoch)));
        }
        let mut con = self.inner.con.clone();
        let lease_key = self.inner.keys.lease(room);
        let lease: Option<String> =
            self.run(async move { redis::cmd("GET").arg(lease_key).query_async(&mut con).await }).await?;
        let Some((node, epoch)) = lease.as_deref().and_then(parse_lease) else {
            return Ok(None);
        };
        let mut con = self.inner.con.clone();
        let node_key = self.inner.keys.node(node);
        let h: HashMap<String, String> =
            self.run(async move { redis::cmd("HGETALL").arg(node_key).query_async(&mut con).await }).await?;
        Ok(match self.read_node(node, &h) {
            Record::Node(n) => {
                Some(Owner { node_id: n.id, epoch, api_url: n.api_url, media_addr: n.media_addr, sip_addr: n.sip_addr })
            }
            Record::Gone | Record::Rejected => None,
        })
    }

    /// The config JSON stored with `room` when it was created (by the
    /// claim that made it), if any: a room placed again after its owner
    /// died is hosted with it rather than with the defaults. Only one
    /// signed with the cluster's key for this room (see `record::PartsKey`).
    pub async fn room_config(&self, room: &str) -> Result<Option<String>, ClusterError> {
        let mut con = self.inner.con.clone();
        let key = self.inner.keys.room(room);
        let (config, sig): (Option<String>, Option<String>) = self
            .run(
                async move { redis::cmd("HMGET").arg(key).arg("config").arg("config_sig").query_async(&mut con).await },
            )
            .await?;
        Ok(self.signed_config(room, config, sig))
    }

    /// `config` as stored with `room` when `sig` is its signature; else
    /// nothing (logged, counted): a writer to Redis cannot give a room
    /// limits, a lock or bans.
    fn signed_config(&self, room: &str, config: Option<String>, sig: Option<String>) -> Option<String> {
        let config = config.filter(|c| !c.is_empty())?;
        if self.is_signed(room, &config, sig.as_deref()) {
            return Some(config);
        }
        self.inner.counters.room_configs_rejected.fetch_add(1, Relaxed);
        warn!(
            room,
            "the room's stored config is not signed with the cluster's key (written by hand into Redis, \
            by a node with another cluster secret, or by a version before signed configs): ignored, the defaults apply"
        );
        None
    }

    fn is_signed(&self, room: &str, config: &str, sig: Option<&str>) -> bool {
        sig.is_some_and(|sig| self.inner.configs.verify(&[room.as_bytes(), config.as_bytes()], sig))
    }

    fn me(&self, epoch: u64) -> Owner {
        Owner {
            node_id: self.inner.node_id.clone(),
            epoch,
            api_url: self.inner.cfg.api_url.clone(),
            media_addr: self.inner.cfg.media_addr.clone(),
            sip_addr: lock(&self.inner.sip_addr).clone(),
        }
    }

    /// Every room of the directory with its live owner, if any (for
    /// `GET /v1/rooms` on any node). Sorted by name. A room whose owner died
    /// stays listed with `owner: None` (its config kept) until its next join
    /// places it again; a released (closed) room is not listed.
    pub async fn list_rooms(&self) -> Result<Vec<RoomEntry>, ClusterError> {
        let keys = &self.inner.keys;
        let mut con = self.inner.con.clone();
        let rooms_key = keys.rooms();
        let mut names: Vec<String> =
            self.run(async move { redis::cmd("SMEMBERS").arg(rooms_key).query_async(&mut con).await }).await?;
        names.sort();
        let nodes: HashMap<String, NodeInfo> = self.nodes().await?.into_iter().map(|n| (n.id.clone(), n)).collect();
        let mut out = Vec::with_capacity(names.len());
        for chunk in names.chunks(500) {
            let mut pipe = redis::pipe();
            for room in chunk {
                pipe.cmd("HMGET").arg(keys.room(room)).arg("owner").arg("epoch").arg("config").arg("config_sig");
                pipe.cmd("GET").arg(keys.lease(room));
            }
            let mut con = self.inner.con.clone();
            let replies: Vec<Value> = self.run(async move { pipe.query_async(&mut con).await }).await?;
            for (room, pair) in chunk.iter().zip(replies.chunks(2)) {
                let [fields, lease] = pair else {
                    return Err(ClusterError::Corrupt("short pipeline reply".into()));
                };
                let fields: Vec<Option<String>> =
                    redis::from_redis_value(fields.clone()).map_err(|e| ClusterError::Corrupt(e.to_string()))?;
                let lease: Option<String> =
                    redis::from_redis_value(lease.clone()).map_err(|e| ClusterError::Corrupt(e.to_string()))?;
                let field = |i: usize| fields.get(i).cloned().flatten();
                let owner = lease.as_deref().and_then(parse_lease).and_then(|(node, epoch)| {
                    let n = nodes.get(node)?;
                    Some(Owner {
                        node_id: n.id.clone(),
                        epoch,
                        api_url: n.api_url.clone(),
                        media_addr: n.media_addr.clone(),
                        sip_addr: n.sip_addr.clone(),
                    })
                });
                out.push(RoomEntry {
                    room: room.clone(),
                    epoch: field(1).and_then(|e| e.parse().ok()).unwrap_or(0),
                    // Unsigned ones left out quietly: a listing applies nothing.
                    config: field(2).filter(|c| self.is_signed(room, c, field(3).as_deref())),
                    recorded_owner: field(0),
                    owner,
                });
            }
        }
        Ok(out)
    }
}
