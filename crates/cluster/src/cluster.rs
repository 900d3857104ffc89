//! The [`Cluster`] handle: the I/O around the pure parts (placement,
//! tickets) and the Lua scripts, plus the heartbeat and renewal task.
//!
//! The handle and its shared state are here, with the one way every call
//! reaches Redis (under the operation timeout, counted). Its calls, one
//! concern a file:
//!
//! - `lifecycle`: joining the cluster (start), the heartbeat task, leaving it;
//! - `registry`: this node's signed record (heartbeat, number, load,
//!   draining) and reading the other nodes' records;
//! - `place`: where a room lives: placing, claiming, locating, listing;
//! - `lease`: the leases this node holds: renewal, fencing, release;
//! - `spans`: rooms across nodes: joins by `room_spread`, span membership,
//!   spans read, and the members' rosters;
//! - `tickets`: redirect tickets minted and burnt;
//! - `messages`: room events and control messages to and from other nodes;
//! - `keys`: the Redis keys; `values`: what the calls answer with;
//!   `route`: node numbers in participant ids and redirect locations.

mod keys;
mod lease;
mod lifecycle;
mod messages;
mod place;
mod registry;
mod route;
mod spans;
mod tickets;
mod values;

pub use route::{MAX_NODE_NUMBER, NODE_NUMBER_SHIFT, node_number_of, redirect_location};
pub use values::{FENCED_CHANNEL_CAPACITY, Fenced, JoinPlacement, Owner, Placement, RoomEntry, Span, SpanMember};

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use redis::RedisResult;
use redis::aio::ConnectionManager;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::config::ClusterConfig;
use crate::control::{ControlKey, ControlMessage};
use crate::error::ClusterError;
use crate::events::Relay;
use crate::placement::Load;
use crate::record::{PartsKey, RecordKey};
use crate::scripts::Scripts;
use crate::stats::{ClusterStats, Counters};
use crate::ticket::TicketKey;
use keys::Keys;

struct Inner {
    cfg: ClusterConfig,
    node_id: String,
    keys: Keys,
    con: ConnectionManager,
    scripts: Scripts,
    tickets: TicketKey,
    records: RecordKey,
    configs: PartsKey,
    /// Signs this node's roster entries and checks the others'.
    roster_key: PartsKey,
    control: ControlKey,
    /// This node's number (see [`Cluster::node_number`]); set at start.
    number: AtomicU32,
    /// Rooms whose span this node joined, with the epochs.
    spanned: Mutex<HashMap<String, u64>>,
    control_tx: mpsc::Sender<ControlMessage>,
    control_rx: Mutex<Option<mpsc::Receiver<ControlMessage>>>,
    /// Node ids whose unauthenticated record was logged already (bounded).
    warned_forged: Mutex<HashSet<String>>,
    load: Mutex<Load>,
    draining: AtomicBool,
    /// Rooms whose lease this node holds, with their epochs.
    owned: Mutex<HashMap<String, u64>>,
    fenced_tx: mpsc::Sender<Fenced>,
    fenced_rx: Mutex<Option<mpsc::Receiver<Fenced>>>,
    counters: Counters,
    relay: Arc<Relay>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Ids seen at the last registry scan (for "node lost" events).
    last_nodes: Mutex<HashSet<String>>,
    /// Another live node seen with this node's number at the last scan.
    number_clash: Mutex<Option<String>>,
    /// This node's SIP address (`host:port`), once its SIP edge is bound
    /// (see [`Cluster::set_sip_addr`]); empty without one.
    sip_addr: Mutex<String>,
}

impl Drop for Inner {
    /// The last handle is gone: stop the relay's tasks too (the heartbeat
    /// task holds only a weak reference and ends by itself).
    fn drop(&mut self) {
        for task in lock(&self.tasks).drain(..) {
            task.abort();
        }
    }
}

/// A node's handle on the cluster; cheap to clone.
///
/// Created by [`Cluster::start`], which spawns the heartbeat task on the
/// current tokio runtime. Every Redis operation gives up after
/// `op_timeout_seconds` with [`ClusterError::Unavailable`].
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("node_id", &self.inner.node_id).finish_non_exhaustive()
    }
}

/// A poisoned lock only means another thread panicked mid-update of plain data; go on with it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

pub(crate) use crate::record::unix_now_ms;

fn random_u64() -> u64 {
    getrandom::u64().unwrap_or_else(|_| {
        // No OS randomness: the clock's nanoseconds still spread the draws.
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos().into())
    })
}

impl Cluster {
    /// This node's id.
    pub fn node_id(&self) -> &str {
        &self.inner.node_id
    }

    /// The configuration in force.
    pub fn config(&self) -> &ClusterConfig {
        &self.inner.cfg
    }

    /// A snapshot of the counters (no I/O).
    pub fn stats(&self) -> ClusterStats {
        let owned = lock(&self.inner.owned).len() as u64;
        let mut stats = self.inner.counters.snapshot(owned);
        let relay = &self.inner.relay;
        let e = &relay.counters;
        stats.events_published_total = e.published.load(Relaxed);
        stats.events_dropped_total = e.publish_dropped.load(Relaxed) + e.receive_dropped.load(Relaxed);
        stats.events_delivered_total = e.delivered.load(Relaxed);
        stats.events_refused_total = e.refused.load(Relaxed);
        stats.rooms_watched = relay.watched() as u64;
        stats.control_published_total = e.control_published.load(Relaxed);
        stats.control_dropped_total = e.control_dropped.load(Relaxed);
        stats
    }

    /// Runs one Redis operation under the timeout, counting latency and errors.
    async fn run<T>(&self, op: impl Future<Output = RedisResult<T>>) -> Result<T, ClusterError> {
        run(&self.inner, op).await
    }
}

async fn run<T>(inner: &Inner, op: impl Future<Output = RedisResult<T>>) -> Result<T, ClusterError> {
    let started = Instant::now();
    let result = match tokio::time::timeout(inner.cfg.op_timeout(), op).await {
        Err(_) => Err(ClusterError::Unavailable(format!("no answer within {:?}", inner.cfg.op_timeout()))),
        Ok(r) => r.map_err(ClusterError::from_redis),
    };
    let c = &inner.counters;
    match &result {
        Ok(_) => c.observe_latency(started.elapsed()),
        Err(_) => {
            c.redis_errors.fetch_add(1, Relaxed);
        }
    }
    result
}
