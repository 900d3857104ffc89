//! Joining and leaving the cluster: [`Cluster::start`] (connection, node
//! number, first heartbeat, tasks), the heartbeat task (record, lease
//! renewal, registry scan, back-off), shutdown and abandon.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::keys::Keys;
use super::messages::control_task;
use super::route::MAX_NODE_NUMBER;
use super::values::FENCED_CHANNEL_CAPACITY;
use super::{Cluster, Inner, lock, random_u64};
use crate::config::{ClusterConfig, validate_node_id};
use crate::control::{CONTROL_QUEUE_CAPACITY, ControlKey};
use crate::error::ClusterError;
use crate::events::Relay;
use crate::placement::Load;
use crate::record::{PartsKey, ROOM_CONFIG_PURPOSE, ROSTER_PURPOSE, RecordKey, TICKET_PURPOSE, derive_key};
use crate::scripts::Scripts;
use crate::stats::Counters;
use crate::ticket::TicketKey;

/// Longest pause between heartbeat attempts while Redis is unreachable.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

impl Cluster {
    /// Joins the cluster: validates the config, prepares the Redis
    /// connection (made lazily: a node starts even while Redis is down) and
    /// spawns the heartbeat task on the current tokio runtime. The first
    /// heartbeat is attempted before returning; its failure is only logged.
    ///
    /// `ticket_secret` is the secret all nodes share (the server's
    /// `auth.secret`), at least 32 bytes.
    pub async fn start(config: ClusterConfig, ticket_secret: &[u8]) -> Result<Cluster, ClusterError> {
        config.validate()?;
        if ticket_secret.len() < 32 {
            return Err(ClusterError::Config {
                field: "auth.secret",
                reason: "every node of a cluster needs the same secret of at least 32 bytes".into(),
            });
        }
        let node_id = config.clone().with_node_id().node_id;
        validate_node_id(&node_id).map_err(|reason| ClusterError::Config { field: "node_id", reason })?;
        let client = config.redis_client(false)?;
        let op = config.op_timeout();
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(op))
            .set_response_timeout(Some(op))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500));
        let con = ConnectionManager::new_lazy_with_config(client, manager_config).map_err(ClusterError::from_redis)?;
        let (fenced_tx, fenced_rx) = mpsc::channel(FENCED_CHANNEL_CAPACITY);
        let mut tickets =
            TicketKey::new(&derive_key(ticket_secret, TICKET_PURPOSE), config.ticket_ttl_seconds.ceil() as u64);
        let mut records = RecordKey::new(ticket_secret);
        let mut configs = PartsKey::new(ticket_secret, ROOM_CONFIG_PURPOSE);
        let mut roster_key = PartsKey::new(ticket_secret, ROSTER_PURPOSE);
        let mut control = ControlKey::new(ticket_secret);
        // During a roll of the secret: signatures under the others are accepted too.
        for old in config.previous_secrets.iter().map(String::as_bytes) {
            tickets = tickets.also_accept(&derive_key(old, TICKET_PURPOSE));
            records = records.also_accept(old);
            configs = configs.also_accept(old);
            roster_key = roster_key.also_accept(old);
            control = control.also_accept(old);
        }
        let (relay, queues) = Relay::new(&config, &node_id, op, ticket_secret)?;
        let relay = Arc::new(relay);
        let (control_tx, control_rx) = mpsc::channel(CONTROL_QUEUE_CAPACITY);
        let inner = Arc::new(Inner {
            keys: Keys { prefix: config.key_prefix.clone() },
            cfg: config,
            node_id,
            con,
            scripts: Scripts::new(),
            tickets,
            records,
            configs,
            roster_key,
            control,
            number: AtomicU32::new(0),
            spanned: Mutex::new(HashMap::new()),
            control_tx,
            control_rx: Mutex::new(Some(control_rx)),
            warned_forged: Mutex::new(HashSet::new()),
            load: Mutex::new(Load::default()),
            draining: AtomicBool::new(false),
            owned: Mutex::new(HashMap::new()),
            fenced_tx,
            fenced_rx: Mutex::new(Some(fenced_rx)),
            counters: Counters::default(),
            relay: relay.clone(),
            tasks: Mutex::new(Vec::new()),
            last_nodes: Mutex::new(HashSet::new()),
            number_clash: Mutex::new(None),
            sip_addr: Mutex::new(String::new()),
        });
        let cluster = Cluster { inner };
        // A wrong password or certificate does not mend itself: say so at
        // start. (A plain PING: the heartbeat is a MULTI, and redis-rs trips
        // over an error answered to MULTI itself.)
        let mut con = cluster.inner.con.clone();
        let ping = cluster.run(async move { redis::cmd("PING").query_async::<String>(&mut con).await }).await;
        if let Err(e @ ClusterError::Refused(_)) = ping {
            return Err(e);
        }
        let number = match cluster.take_number().await {
            Ok(n) => n,
            Err(e) => {
                // Redis away at start: a random number (a clash with a live
                // node is 1 in ~500 000 per pair; its ids would then map to
                // either node, and only routes by id would go astray).
                let n = (random_u64() % u64::from(MAX_NODE_NUMBER)) as u32 + 1;
                warn!(error = %e, number = n, "no node number from the directory; took a random one");
                n
            }
        };
        cluster.inner.number.store(number, Relaxed);
        relay.subscribe_control().await;
        match cluster.heartbeat().await {
            Ok(()) => {
                cluster.inner.counters.redis_up.store(true, Relaxed);
                info!(node = %cluster.inner.node_id, "joined the cluster");
            }
            // A wrong password or certificate does not mend itself: say so at start.
            Err(e @ ClusterError::Refused(_)) => return Err(e),
            Err(e) => {
                warn!(node = %cluster.inner.node_id, error = %e, "cluster directory unreachable at start; retrying")
            }
        }
        *lock(&cluster.inner.tasks) = vec![
            tokio::spawn(background(Arc::downgrade(&cluster.inner))),
            tokio::spawn(relay.clone().run_publisher(queues.outgoing)),
            tokio::spawn(relay.run_dispatcher(queues.pushes)),
            tokio::spawn(control_task(Arc::downgrade(&cluster.inner), queues.control)),
        ];
        Ok(cluster)
    }

    /// Leaves the cluster: stops the task, releases every lease held and
    /// deletes the registry entry (best effort: on error the entries lapse
    /// by their TTLs). Returns the first error.
    pub async fn shutdown(&self) -> Result<(), ClusterError> {
        self.abandon();
        let mut first_err = None;
        for (room, _) in self.owned_rooms() {
            if let Err(e) = self.release(&room).await {
                // Redis away: do not wait one timeout per room; the leases lapse.
                if matches!(e, ClusterError::Unavailable(_)) {
                    return Err(e);
                }
                first_err.get_or_insert(e);
            }
        }
        let key = self.inner.keys.node(&self.inner.node_id);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("DEL")
            .arg(key)
            .ignore()
            .cmd("SREM")
            .arg(self.inner.keys.nodes())
            .arg(&self.inner.node_id)
            .ignore();
        let mut con = self.inner.con.clone();
        if let Err(e) = self.run(async move { pipe.exec_async(&mut con).await }).await {
            first_err.get_or_insert(e);
        }
        info!(node = %self.inner.node_id, "left the cluster");
        first_err.map_or(Ok(()), Err)
    }

    /// Stops the heartbeat task without releasing anything, as a crash
    /// would: the registry entry lapses after the node TTL and the rooms are
    /// placed again by their next join. For a process that must exit at
    /// once, and for tests.
    pub fn abandon(&self) {
        for task in lock(&self.inner.tasks).drain(..) {
            task.abort();
        }
    }
}

/// The heartbeat task: registry entry every interval, leases every third
/// of their TTL (at once after Redis comes back), a registry scan for the
/// "nodes seen" gauge. Backs off while Redis is unreachable; logs once per
/// change of state. Ends when the last [`Cluster`] handle is dropped.
async fn background(weak: Weak<Inner>) {
    let mut failures: u32 = 0;
    let mut last_renewal = Instant::now();
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let cluster = Cluster { inner };
        let interval = cluster.inner.cfg.heartbeat_interval();
        let renew_every = Duration::from_secs_f64(cluster.inner.cfg.lease_ttl_seconds / 3.0);
        let pause = match cluster.heartbeat().await {
            Ok(()) => {
                let recovered = failures > 0;
                if recovered {
                    info!(node = %cluster.inner.node_id, after = failures, "cluster directory reachable again");
                }
                failures = 0;
                cluster.inner.counters.redis_up.store(true, Relaxed);
                if recovered || last_renewal.elapsed() >= renew_every {
                    match cluster.renew_leases().await {
                        Ok(_) => last_renewal = Instant::now(),
                        Err(e) => debug!(error = %e, "lease renewal failed; retrying next heartbeat"),
                    }
                }
                scan_nodes(&cluster).await;
                cluster.inner.relay.maintain().await;
                interval
            }
            Err(e) => {
                if failures == 0 {
                    warn!(node = %cluster.inner.node_id, error = %e,
                        "cluster directory unreachable: rooms here go on, new cross-node joins get 503");
                }
                failures = failures.saturating_add(1);
                cluster.inner.counters.redis_up.store(false, Relaxed);
                (interval / 2).saturating_mul(1u32 << failures.min(4)).min(MAX_BACKOFF.max(interval))
            }
        };
        drop(cluster);
        tokio::time::sleep(pause).await;
    }
}

async fn scan_nodes(cluster: &Cluster) {
    let Ok(nodes) = cluster.nodes().await else { return };
    let c = &cluster.inner.counters;
    let (me, number) = (&cluster.inner.node_id, cluster.inner.number.load(Relaxed));
    let other = nodes.iter().find(|n| n.number == Some(number) && n.id != *me).map(|n| n.id.clone());
    let mut clash = lock(&cluster.inner.number_clash);
    if let Some(other) = &other
        && clash.as_ref() != Some(other)
    {
        // Once per clash, not per scan.
        c.node_number_conflicts.fetch_add(1, Relaxed);
        warn!(node = %me, number, other = %other,
            "another live node has this node's number: participant ids of the two nodes can clash \
             (a node number given out twice, after its key was deleted from Redis): restart one of them");
    }
    *clash = other;
    drop(clash);
    let now: HashSet<String> = nodes.into_iter().map(|n| n.id).collect();
    c.nodes_seen.store(now.len() as u64, Relaxed);
    let mut last = lock(&cluster.inner.last_nodes);
    for lost in last.difference(&now) {
        c.nodes_lost.fetch_add(1, Relaxed);
        warn!(node = %lost, "cluster node disappeared (its registry entry lapsed or it left)");
    }
    *last = now;
}
