//! The [`Cluster`] handle: the I/O around the pure parts (placement,
//! tickets) and the Lua scripts, plus the heartbeat and renewal task.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{RedisResult, Value};
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::config::{ClusterConfig, RoomSpread, validate_node_id};
use crate::control::{CONTROL_QUEUE_CAPACITY, ControlKey, ControlMessage, ControlRefusal, SEEN_CAPACITY, Seen};
use crate::error::{ClusterError, TicketError};
use crate::events::{Relay, RoomEvent};
use crate::placement::{Load, NodeInfo, NodeState, choose, choose_for_join};
use crate::record::{RecordKey, TICKET_PURPOSE, derive_key};
use crate::roster::{RosterWrite, Rosters, parse_roster, read_script, script_reply};
use crate::scripts::Scripts;
use crate::stats::{ClusterStats, Counters};
use crate::ticket::{TicketClaims, TicketKey};

/// Fencing notices kept for the server before the oldest is dropped (counted).
pub const FENCED_CHANNEL_CAPACITY: usize = 1024;
/// Rooms renewed per script call.
const RENEW_BATCH: usize = 100;
/// Bits of a participant id below the node number: a node hands out ids
/// `number << 32 | 1, 2, …` ([`Cluster::node_number`]).
pub const NODE_NUMBER_SHIFT: u32 = 32;
/// The highest node number: ids stay below 2^51 (`MAX_NODE_NUMBER << 32`
/// plus 2^32 joins), under the server's remote participants (from 2^51) and
/// exact as JavaScript numbers (below 2^53). Numbers wrap past it (see
/// [`Cluster::node_number`]).
pub const MAX_NODE_NUMBER: u32 = (1 << 19) - 1;
/// Attempts at a node number held by no live node.
const NUMBER_ATTEMPTS: usize = 16;

/// The node number in a participant id (`None`: an id of a single node, or
/// of a node from before node numbers).
pub fn node_number_of(participant: u64) -> Option<u32> {
    u32::try_from(participant >> NODE_NUMBER_SHIFT).ok().filter(|n| (1..=MAX_NODE_NUMBER).contains(n))
}

/// Attempts of [`Cluster::place`] when chosen nodes vanish meanwhile.
const PLACE_ATTEMPTS: usize = 3;
/// A released room's hash (its epoch) is kept this long, so a room opened
/// again soon gets a higher epoch.
const RELEASED_RETENTION_SECONDS: u64 = 86_400;
/// Longest pause between heartbeat attempts while Redis is unreachable.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The live node holding a room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Node id.
    pub node_id: String,
    /// The lease's epoch: goes up on every new claim of the room.
    pub epoch: u64,
    /// Where to redirect clients (the owner's public API URL).
    pub api_url: String,
    /// The owner's media address.
    pub media_addr: String,
}

/// Where a room lives after [`Cluster::place`] or [`Cluster::claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// This node holds the room's lease at `epoch`: host it here.
    Local {
        /// The lease's epoch.
        epoch: u64,
        /// The epoch was taken just now (a new room, or one whose owner died),
        /// rather than already held.
        new: bool,
    },
    /// Another node holds it: redirect there.
    Remote(Owner),
}

/// This node lost a room to another owner (or the room was closed
/// elsewhere): the server must close its copy and disconnect its clients
/// (they rejoin through any node and are redirected to the new owner).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fenced {
    /// The room.
    pub room: String,
    /// The epoch this node held.
    pub epoch: u64,
    /// What Redis holds instead (`node:epoch`, or `owner:epoch` of the room's record).
    pub holder: String,
}

/// A room of the directory, as [`Cluster::list_rooms`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomEntry {
    /// Room name.
    pub room: String,
    /// The last epoch given out.
    pub epoch: u64,
    /// The config JSON stored by the claim that created it, if any.
    pub config: Option<String>,
    /// The node recorded as owner (alive or not).
    pub recorded_owner: Option<String>,
    /// The live owner, when the lease is held and its node is alive; `None`
    /// means the room is placed again on its next join.
    pub owner: Option<Owner>,
}

/// Where a join of a room goes ([`Cluster::place_join`]), when rooms may
/// span several nodes (`room_spread`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinPlacement {
    /// Host the participant here. `owner`: this node holds the room's lease
    /// (its control and recording are here); else this node is a member of
    /// the room's span at `epoch` (its copy mixes its own participants and
    /// meets the others over the mesh).
    Here {
        /// The room's epoch.
        epoch: u64,
        /// This node holds the lease.
        owner: bool,
    },
    /// Send the join to this node: the owner, or another node of (or for) the span.
    Elsewhere(Owner),
}

/// A node of a room's span as the directory holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanMember {
    /// Node id.
    pub node_id: String,
    /// The room epoch it joined the span at.
    pub epoch: u64,
    /// Its mesh socket's address, from its signed record.
    pub mesh_addr: Option<std::net::SocketAddr>,
    /// Its node number, from its signed record.
    pub number: Option<u32>,
    /// Its API URL, from its signed record.
    pub api_url: String,
}

/// A room's span: its lease and the live nodes hosting its participants.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Span {
    /// The room.
    pub room: String,
    /// The lease: owner node and epoch (`None`: nobody holds it now).
    pub lease: Option<(String, u64)>,
    /// Members whose node is alive and whose record is signed (this node
    /// included when it is one), sorted by id.
    pub members: Vec<SpanMember>,
}

/// What the claim script said, before the callers decide.
enum ClaimReply {
    /// Owned by this node or another live one.
    Placed(Placement),
    /// The node to claim for has no registry entry (dead, or not yet written).
    TargetDead,
}

struct Keys {
    prefix: String,
}

impl Keys {
    fn nodes(&self) -> String {
        format!("{}nodes", self.prefix)
    }
    fn node_prefix(&self) -> String {
        format!("{}node:", self.prefix)
    }
    fn node(&self, id: &str) -> String {
        format!("{}node:{id}", self.prefix)
    }
    fn rooms(&self) -> String {
        format!("{}rooms", self.prefix)
    }
    fn room(&self, room: &str) -> String {
        format!("{}room:{room}", self.prefix)
    }
    // `lease:<r>`, not `room:<r>:lease`: a room named `x:lease` must not collide.
    fn lease(&self, room: &str) -> String {
        format!("{}lease:{room}", self.prefix)
    }
    fn ticket(&self, nonce: &str) -> String {
        format!("{}ticket:{nonce}", self.prefix)
    }
    fn span(&self, room: &str) -> String {
        format!("{}span:{room}", self.prefix)
    }
    // Node ids hold no ':', so the last one splits room and node.
    fn roster(&self, room: &str, node: &str) -> String {
        format!("{}roster:{room}:{node}", self.prefix)
    }
    fn node_numbers(&self) -> String {
        format!("{}node_numbers", self.prefix)
    }
    fn number(&self, n: u32) -> String {
        format!("{}number:{n}", self.prefix)
    }
}

struct Inner {
    cfg: ClusterConfig,
    node_id: String,
    keys: Keys,
    con: ConnectionManager,
    scripts: Scripts,
    tickets: TicketKey,
    records: RecordKey,
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

fn unix_now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn random_u64() -> u64 {
    getrandom::u64().unwrap_or_else(|_| {
        // No OS randomness: the clock's nanoseconds still spread the draws.
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos().into())
    })
}

/// Forged records logged by id, at most this many (then only counted).
const MAX_WARNED_FORGED: usize = 64;

/// A `node:<id>` hash as read from Redis.
enum Record {
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
        let tickets =
            TicketKey::new(&derive_key(ticket_secret, TICKET_PURPOSE), config.ticket_ttl_seconds.ceil() as u64);
        let records = RecordKey::new(ticket_secret);
        let (relay, queues) = Relay::new(&config, &node_id, op)?;
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
            control: ControlKey::new(ticket_secret),
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

    /// This node's id.
    pub fn node_id(&self) -> &str {
        &self.inner.node_id
    }

    /// This node's number, unique among the live nodes: the server starts
    /// its participant ids at `number << 32` ([`NODE_NUMBER_SHIFT`]), so
    /// that ids are unique across the nodes of a room and name their node.
    /// Taken at start with `INCR node_numbers` (wrapping past
    /// [`MAX_NODE_NUMBER`]), skipping numbers whose `number:<n>` key a
    /// live node still holds; the key is rewritten with every heartbeat
    /// (it lapses with the node's TTL). A restarted node takes a new number
    /// (its old participants' ids are not handed out again). Published in
    /// the node's signed record.
    pub fn node_number(&self) -> u32 {
        self.inner.number.load(Relaxed)
    }

    async fn take_number(&self) -> Result<u32, ClusterError> {
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
            if set.is_some() {
                info!(node = %self.inner.node_id, number, "node number taken");
                return Ok(number);
            }
        }
        Err(ClusterError::Corrupt(format!("no free node number in {NUMBER_ATTEMPTS} attempts")))
    }

    /// The epoch of `room` at this node: the lease's when it holds it, else
    /// the one it joined the room's span at (no I/O).
    pub fn room_epoch(&self, room: &str) -> Option<u64> {
        self.owned_epoch(room).or_else(|| lock(&self.inner.spanned).get(room).copied())
    }

    /// Tells every other node hosting `room` to apply `body` (the server's
    /// JSON) to its copy; signed, with the room's epoch here, this node's
    /// id, the time and a nonce (see `control`). Never blocks: a bounded
    /// queue feeds the publishing task (overflow counted). `false` when
    /// this node knows no epoch of the room (it hosts no copy of a spread room).
    pub fn publish_control(&self, room: &str, body: serde_json::Value) -> bool {
        let Some(epoch) = self.room_epoch(room) else { return false };
        match self.inner.control.seal(room, epoch, &self.inner.node_id, body, unix_now_ms()) {
            Some(wire) => {
                self.inner.relay.publish_control(wire);
                true
            }
            None => false,
        }
    }

    /// The receiver of the control messages other nodes sent for rooms this
    /// node hosts, checked (see `control`); `Some` on the first call only.
    /// Messages beyond [`CONTROL_QUEUE_CAPACITY`] unread are dropped and counted.
    pub fn take_control(&self) -> Option<mpsc::Receiver<ControlMessage>> {
        lock(&self.inner.control_rx).take()
    }

    /// The live node of `room`'s span (at the lease's epoch) whose number
    /// is `number`, from signed records only; `None` when no such node
    /// hosts the room (the caller answers as if the id were unknown).
    pub async fn span_node(&self, room: &str, number: u32) -> Result<Option<Owner>, ClusterError> {
        let Some(span) = self.spans(&[room.to_owned()]).await?.pop() else { return Ok(None) };
        let epoch = span.lease.as_ref().map(|(_, e)| *e);
        Ok(span
            .members
            .into_iter()
            .find(|m| m.number == Some(number) && epoch.is_none_or(|e| e == m.epoch))
            .map(|m| Owner { node_id: m.node_id, epoch: m.epoch, api_url: m.api_url, media_addr: String::new() }))
    }

    /// The configuration in force.
    pub fn config(&self) -> &ClusterConfig {
        &self.inner.cfg
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

    /// Whether this node holds `room`'s lease, and at which epoch (no I/O).
    pub fn owned_epoch(&self, room: &str) -> Option<u64> {
        lock(&self.inner.owned).get(room).copied()
    }

    /// Rooms whose lease this node holds (no I/O).
    pub fn owned_rooms(&self) -> Vec<(String, u64)> {
        lock(&self.inner.owned).iter().map(|(r, e)| (r.clone(), *e)).collect()
    }

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
            .arg(config.unwrap_or(""));
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
            Record::Node(n) => {
                Ok(Placement::Remote(Owner { node_id, epoch, api_url: n.api_url, media_addr: n.media_addr }))
            }
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

    /// Forgets a room lost to another holder and tells the server.
    fn fence(&self, room: &str, epoch: u64, holder: String) -> Option<Fenced> {
        let inner = &self.inner;
        {
            let mut owned = lock(&inner.owned);
            // Released or re-claimed meanwhile at another epoch: not a loss.
            if owned.get(room) != Some(&epoch) {
                return None;
            }
            owned.remove(room);
        }
        warn!(room, epoch, holder, "room lost to another owner: fenced");
        let notice = Fenced { room: room.to_owned(), epoch, holder };
        inner.counters.fenced.fetch_add(1, Relaxed);
        if inner.fenced_tx.try_send(notice.clone()).is_err() {
            inner.counters.fenced_dropped.fetch_add(1, Relaxed);
            warn!(room, "fencing notice dropped: channel full or closed");
        }
        Some(notice)
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
            Record::Node(n) => Some(Owner { node_id: n.id, epoch, api_url: n.api_url, media_addr: n.media_addr }),
            Record::Gone | Record::Rejected => None,
        })
    }

    /// The config JSON stored with `room` when it was created (by the
    /// claim that made it), if any: a room placed again after its owner
    /// died is hosted with it rather than with the defaults.
    pub async fn room_config(&self, room: &str) -> Result<Option<String>, ClusterError> {
        let mut con = self.inner.con.clone();
        let key = self.inner.keys.room(room);
        let config: Option<String> =
            self.run(async move { redis::cmd("HGET").arg(key).arg("config").query_async(&mut con).await }).await?;
        Ok(config.filter(|c| !c.is_empty()))
    }

    fn me(&self, epoch: u64) -> Owner {
        Owner {
            node_id: self.inner.node_id.clone(),
            epoch,
            api_url: self.inner.cfg.api_url.clone(),
            media_addr: self.inner.cfg.media_addr.clone(),
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
                pipe.cmd("HMGET").arg(keys.room(room)).arg("owner").arg("epoch").arg("config");
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
                    })
                });
                out.push(RoomEntry {
                    room: room.clone(),
                    epoch: field(1).and_then(|e| e.parse().ok()).unwrap_or(0),
                    config: field(2),
                    recorded_owner: field(0),
                    owner,
                });
            }
        }
        Ok(out)
    }

    /// Gives up `room` (it closed here): compare-and-delete of the lease.
    /// `Ok(false)` when this node did not hold it (any more).
    pub async fn release(&self, room: &str) -> Result<bool, ClusterError> {
        let Some(epoch) = lock(&self.inner.owned).remove(room) else {
            return Ok(false);
        };
        let keys = &self.inner.keys;
        let mut inv = self.inner.scripts.release.prepare_invoke();
        inv.key(keys.room(room))
            .key(keys.lease(room))
            .key(keys.rooms())
            .arg(&self.inner.node_id)
            .arg(epoch)
            .arg(room)
            .arg(RELEASED_RETENTION_SECONDS);
        let mut con = self.inner.con.clone();
        let released: Result<i64, _> = self.run(async move { inv.invoke_async(&mut con).await }).await;
        match released {
            Ok(n) => Ok(n == 1),
            Err(e) => {
                // Not released in Redis: the lease lapses by itself; the
                // record's owner stays until the next claim takes it over.
                warn!(room, error = %e, "could not release the room's lease; it will lapse");
                Err(e)
            }
        }
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
    fn read_node(&self, id: &str, h: &HashMap<String, String>) -> Record {
        if h.is_empty() {
            return Record::Gone;
        }
        if self.inner.records.verify(id, h)
            && let Some(n) = parse_node(id, h)
            && self.inner.cfg.api_url_allowed(&n.api_url)
        {
            return Record::Node(n);
        }
        self.inner.counters.node_records_rejected.fetch_add(1, Relaxed);
        let mut warned = lock(&self.inner.warned_forged);
        if warned.len() < MAX_WARNED_FORGED && warned.insert(id.to_owned()) {
            warn!(node = %id, api_url = ?h.get("api_url"),
                "registry record not signed with the cluster's key (another secret, or written by hand), \
                 or its api_url not in cluster.allowed_api_urls: ignored");
        }
        Record::Rejected
    }

    /// Where a join of `room` goes, by `room_spread` (see [`RoomSpread`]).
    /// `off`: as [`place`](Self::place) (or [`claim`](Self::claim) when
    /// `ticketed`). Otherwise a join that was redirected here (`ticketed`)
    /// stays: this node claims the room if nobody holds it, else joins its
    /// span (never fencing the owner). A fresh join of a room nobody holds
    /// is placed as a new room; of a held room, it goes to the owner while
    /// the owner has room (`when_full`), else to the least-loaded eligible
    /// node of the span, else of the cluster (`always`: of the cluster
    /// straight away); a tie stays here. The chosen node's pending joins go
    /// up (until its next heartbeat) so that joins in a burst spread.
    pub async fn place_join(&self, room: &str, ticketed: bool) -> Result<JoinPlacement, ClusterError> {
        let spread = self.inner.cfg.room_spread;
        let me = self.inner.node_id.clone();
        let here = |p: Placement| match p {
            Placement::Local { epoch, .. } => JoinPlacement::Here { epoch, owner: true },
            Placement::Remote(o) => JoinPlacement::Elsewhere(o),
        };
        if spread == RoomSpread::Off {
            return Ok(here(if ticketed { self.claim(room, None).await? } else { self.place(room, None).await? }));
        }
        if ticketed {
            return match self.claim(room, None).await? {
                Placement::Local { epoch, .. } => Ok(JoinPlacement::Here { epoch, owner: true }),
                Placement::Remote(owner) => {
                    self.join_spans(&[(room.to_owned(), owner.epoch)]).await?;
                    Ok(JoinPlacement::Here { epoch: owner.epoch, owner: false })
                }
            };
        }
        let Some(owner) = self.locate(room).await? else {
            return Ok(here(self.place(room, None).await?));
        };
        let nodes = self.nodes().await?;
        let budget = Duration::from_secs_f64(self.inner.cfg.tick_budget_seconds);
        let owner_has_room = nodes.iter().any(|n| n.id == owner.node_id && n.eligible(budget));
        let target = match spread {
            RoomSpread::WhenFull if owner_has_room => None,
            RoomSpread::WhenFull => {
                let span = self.spans(&[room.to_owned()]).await?.pop().unwrap_or_default();
                let member = |n: &NodeInfo| span.members.iter().any(|m| m.node_id == n.id && m.epoch == owner.epoch);
                choose_for_join(&nodes, budget, &me, member).or_else(|| choose_for_join(&nodes, budget, &me, |_| true))
            }
            _ => choose_for_join(&nodes, budget, &me, |_| true),
        };
        let Some(target) = target.map(|i| &nodes[i]) else {
            return Ok(if owner.node_id == me {
                JoinPlacement::Here { epoch: owner.epoch, owner: true }
            } else {
                JoinPlacement::Elsewhere(owner)
            });
        };
        self.count_join(&target.id).await;
        if target.id == me {
            if owner.node_id == me {
                return Ok(JoinPlacement::Here { epoch: owner.epoch, owner: true });
            }
            self.join_spans(&[(room.to_owned(), owner.epoch)]).await?;
            return Ok(JoinPlacement::Here { epoch: owner.epoch, owner: false });
        }
        Ok(JoinPlacement::Elsewhere(Owner {
            node_id: target.id.clone(),
            epoch: owner.epoch,
            api_url: target.api_url.clone(),
            media_addr: target.media_addr.clone(),
        }))
    }

    /// Counts a join sent to `node` in its record until its next heartbeat
    /// (best effort; only while its record exists, so that a dead node's
    /// record is never brought back without its TTL).
    async fn count_join(&self, node: &str) {
        const BUMP: &str = "if redis.call('EXISTS', KEYS[1]) == 1 then \
            return redis.call('HINCRBY', KEYS[1], 'joins', 1) end return 0";
        let mut con = self.inner.con.clone();
        let key = self.inner.keys.node(node);
        let _: Result<i64, _> =
            self.run(async move { redis::Script::new(BUMP).key(key).invoke_async(&mut con).await }).await;
    }

    /// Records this node as a member of each room's span at the given
    /// epoch (again: members rewrite it every few seconds, and the span key
    /// lives three lease TTLs past its last rewrite).
    pub async fn join_spans(&self, rooms: &[(String, u64)]) -> Result<(), ClusterError> {
        if rooms.is_empty() {
            return Ok(());
        }
        let keep = self.inner.cfg.lease_ttl_ms() * 3;
        lock(&self.inner.spanned).extend(rooms.iter().cloned());
        let mut pipe = redis::pipe();
        for (room, epoch) in rooms {
            let key = self.inner.keys.span(room);
            pipe.cmd("HSET").arg(&key).arg(&self.inner.node_id).arg(*epoch).ignore();
            pipe.cmd("PEXPIRE").arg(&key).arg(keep).ignore();
            // This node's roster of the room lives as long as its membership.
            pipe.cmd("PEXPIRE").arg(self.inner.keys.roster(room, &self.inner.node_id)).arg(keep).ignore();
        }
        let mut con = self.inner.con.clone();
        self.run(async move { pipe.exec_async(&mut con).await }).await
    }

    /// Takes this node out of `room`'s span (its last participant there left).
    pub async fn leave_span(&self, room: &str) -> Result<(), ClusterError> {
        lock(&self.inner.spanned).remove(room);
        let mut con = self.inner.con.clone();
        let key = self.inner.keys.span(room);
        let node = self.inner.node_id.clone();
        let roster = self.inner.keys.roster(room, &node);
        let mut pipe = redis::pipe();
        pipe.cmd("HDEL").arg(key).arg(node).ignore();
        pipe.cmd("DEL").arg(roster).ignore();
        self.run(async move { pipe.exec_async(&mut con).await }).await
    }

    /// Writes changes to this node's rosters of spread rooms (see the
    /// `roster` module), each room's atomically, all in one round trip.
    /// The caller bounds them (a room's `max_participants` entries).
    pub async fn write_rosters(&self, writes: &[RosterWrite]) -> Result<(), ClusterError> {
        if writes.is_empty() {
            return Ok(());
        }
        let keep = self.inner.cfg.lease_ttl_ms() * 3;
        let mut pipe = redis::pipe();
        pipe.atomic();
        for w in writes {
            let key = self.inner.keys.roster(&w.room, &self.inner.node_id);
            if w.full {
                pipe.cmd("DEL").arg(&key).ignore();
            }
            if !w.upserts.is_empty() {
                let mut hset = redis::cmd("HSET");
                hset.arg(&key);
                for (id, summary) in &w.upserts {
                    hset.arg(*id).arg(summary);
                }
                pipe.add_command(hset).ignore();
            }
            if !w.removals.is_empty() {
                pipe.cmd("HDEL").arg(&key).arg(&w.removals).ignore();
            }
            pipe.cmd("PEXPIRE").arg(&key).arg(keep).ignore();
        }
        let mut con = self.inner.con.clone();
        self.run(async move { pipe.exec_async(&mut con).await }).await
    }

    /// The rosters of `room` kept by `members` (node id and number: the
    /// span's members at the room's epoch, from their signed records; this
    /// node's own is never read), each read only if it holds at most `cap`
    /// entries, and only the entries that name participants of that node
    /// (see the `roster` module). One round trip.
    pub async fn rosters(&self, room: &str, members: &[(String, u32)], cap: usize) -> Result<Rosters, ClusterError> {
        let members: Vec<&(String, u32)> = members.iter().filter(|(n, _)| *n != self.inner.node_id).collect();
        if members.is_empty() {
            return Ok(Rosters::default());
        }
        let script = read_script();
        let mut invocation = script.prepare_invoke();
        invocation.arg(cap);
        for (node, _) in &members {
            invocation.key(self.inner.keys.roster(room, node));
        }
        let mut con = self.inner.con.clone();
        let reply: Value = self.run(async move { invocation.invoke_async(&mut con).await }).await?;
        let reply = script_reply(reply, members.len()).ok_or_else(|| ClusterError::Corrupt("roster read".into()))?;
        let mut out = Rosters::default();
        for ((node, number), fields) in members.into_iter().zip(reply) {
            match fields {
                Some(fields) => {
                    let (entries, refused) = parse_roster(node, |id| node_number_of(id) == Some(*number), fields);
                    out.entries.extend(entries);
                    out.refused += refused;
                }
                None => out.refused += 1,
            }
        }
        Ok(out)
    }

    /// The spans of `rooms`: each room's lease and its live members with
    /// their mesh addresses, from signed records only (an address Redis
    /// holds without a valid signature is never used). Two round trips
    /// whatever the number of rooms, plus the registry read.
    pub async fn spans(&self, rooms: &[String]) -> Result<Vec<Span>, ClusterError> {
        if rooms.is_empty() {
            return Ok(Vec::new());
        }
        let keys = &self.inner.keys;
        let mut pipe = redis::pipe();
        for room in rooms {
            pipe.cmd("GET").arg(keys.lease(room));
            pipe.cmd("HGETALL").arg(keys.span(room));
        }
        let mut con = self.inner.con.clone();
        let replies: Vec<Value> = self.run(async move { pipe.query_async(&mut con).await }).await?;
        let nodes: HashMap<String, NodeInfo> = self.nodes().await?.into_iter().map(|n| (n.id.clone(), n)).collect();
        let mut out = Vec::with_capacity(rooms.len());
        for (room, pair) in rooms.iter().zip(replies.chunks(2)) {
            let [lease, span] = pair else {
                return Err(ClusterError::Corrupt("short pipeline reply".into()));
            };
            let lease: Option<String> =
                redis::from_redis_value(lease.clone()).map_err(|e| ClusterError::Corrupt(e.to_string()))?;
            let span: HashMap<String, String> =
                redis::from_redis_value(span.clone()).map_err(|e| ClusterError::Corrupt(e.to_string()))?;
            let mut members: Vec<SpanMember> = span
                .into_iter()
                .filter_map(|(node, epoch)| {
                    let n = nodes.get(&node)?;
                    Some(SpanMember {
                        node_id: node,
                        epoch: epoch.parse().ok()?,
                        mesh_addr: n.mesh_addr,
                        number: n.number,
                        api_url: n.api_url.clone(),
                    })
                })
                .collect();
            members.sort_by(|a, b| a.node_id.cmp(&b.node_id));
            let lease = lease.as_deref().and_then(parse_lease).map(|(n, e)| (n.to_owned(), e));
            out.push(Span { room: room.clone(), lease, members });
        }
        Ok(out)
    }

    /// A redirect ticket for `room`, vouching for `identity` and `grants`
    /// (the server's token claims, opaque here: give the least the request
    /// needs), for the one request `(method, path)`, valid `ticket_ttl_seconds`.
    pub fn mint_ticket(
        &self,
        room: &str,
        identity: &str,
        grants: serde_json::Value,
        request: (&str, &str),
    ) -> Result<String, TicketError> {
        let (ticket, _) = self.inner.tickets.mint(room, identity, grants, request, unix_now())?;
        self.inner.counters.tickets_minted.fetch_add(1, Relaxed);
        Ok(ticket)
    }

    /// Checks a ticket for `room` and the request `(method, path)` it comes
    /// with, and burns it: a ticket is accepted once in
    /// the whole cluster (`SET ticket:<nonce> 1 NX EX <ttl + 30 s>`). When
    /// Redis cannot be reached the ticket is refused with
    /// [`TicketError::Unavailable`] (answer 503 + Retry-After).
    pub async fn verify_ticket(
        &self,
        ticket: &str,
        room: &str,
        request: (&str, &str),
    ) -> Result<TicketClaims, TicketError> {
        let result = self.verify_ticket_inner(ticket, room, request).await;
        let c = &self.inner.counters;
        match &result {
            Ok(_) => c.tickets_accepted.fetch_add(1, Relaxed),
            Err(_) => c.tickets_refused.fetch_add(1, Relaxed),
        };
        result
    }

    async fn verify_ticket_inner(
        &self,
        ticket: &str,
        room: &str,
        request: (&str, &str),
    ) -> Result<TicketClaims, TicketError> {
        let claims = self.inner.tickets.verify(ticket, room, request, unix_now())?;
        let mut con = self.inner.con.clone();
        let key = self.inner.keys.ticket(&claims.nonce);
        // Kept past the expiry, with slack for clocks a little apart.
        let keep = self.inner.tickets.ttl_seconds() + 30;
        let set: Option<String> =
            self.run(async move {
                redis::cmd("SET").arg(key).arg(1).arg("NX").arg("EX").arg(keep).query_async(&mut con).await
            })
            .await
            .map_err(|e| TicketError::Unavailable(e.to_string()))?;
        match set {
            Some(_) => Ok(claims),
            None => Err(TicketError::Replayed),
        }
    }

    /// Sends a room event to the other nodes' watchers of `room` (the
    /// owner calls this for each event of a room it holds). Never blocks: a
    /// bounded queue feeds a task; overflow and events sent while Redis is
    /// away are dropped and counted.
    pub fn publish_event(&self, room: &str, event: String) {
        self.inner.relay.publish(room, event);
    }

    /// The events of `room`, held on another node, from now on (for a
    /// WebSocket on this node watching that room). The subscription ends
    /// when the last receiver is dropped; it is restored by itself after
    /// Redis comes back. A receiver that lags loses the oldest events
    /// (`RecvError::Lagged`). Events this node published are not relayed
    /// back to it.
    pub async fn watch(&self, room: &str) -> Result<broadcast::Receiver<RoomEvent>, ClusterError> {
        self.inner.relay.watch(room).await
    }

    /// Counts a redirect the server answered (for `tutti_cluster_redirects_total`).
    pub fn record_redirect(&self) {
        self.inner.counters.redirects.fetch_add(1, Relaxed);
    }

    /// The receiver of fencing notices (rooms this node lost); `Some` on the
    /// first call only. Notices beyond [`FENCED_CHANNEL_CAPACITY`] unread are
    /// dropped and counted; [`Cluster::owned_epoch`] tells the truth anyway.
    pub fn take_fenced(&self) -> Option<mpsc::Receiver<Fenced>> {
        lock(&self.inner.fenced_rx).take()
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
        stats.rooms_watched = relay.watched() as u64;
        stats.control_published_total = e.control_published.load(Relaxed);
        stats.control_dropped_total = e.control_dropped.load(Relaxed);
        stats
    }

    /// Checks a control message received (see `control`) and queues it for
    /// the server: `Ok(false)` when skipped (this node's own, or for a room
    /// it does not host).
    fn receive_control(&self, wire: &str, seen: &mut Seen) -> Result<bool, ControlRefusal> {
        let inner = &self.inner;
        let msg = inner.control.open(wire)?;
        if msg.origin == inner.node_id {
            return Ok(false);
        }
        // Rooms hosted elsewhere only: their nonces need not be kept here.
        let Some(epoch) = self.room_epoch(&msg.room) else { return Ok(false) };
        seen.check(&msg, unix_now_ms())?;
        if epoch != msg.epoch {
            return Err(ControlRefusal::Epoch);
        }
        inner.control_tx.try_send(msg).map_err(|_| ControlRefusal::QueueFull)?;
        Ok(true)
    }

    /// Renews every lease this node holds now (the heartbeat task does so
    /// every third of the lease TTL, and at once when Redis comes back).
    /// Returns the rooms lost to fencing, which are also sent to the
    /// [`take_fenced`](Self::take_fenced) channel and forgotten.
    pub async fn renew_leases(&self) -> Result<Vec<Fenced>, ClusterError> {
        let rooms = self.owned_rooms();
        let keys = &self.inner.keys;
        let mut fenced = Vec::new();
        for chunk in rooms.chunks(RENEW_BATCH) {
            let mut inv = self.inner.scripts.renew.prepare_invoke();
            inv.key(keys.rooms()).arg(&self.inner.node_id).arg(self.inner.cfg.lease_ttl_ms());
            for (room, epoch) in chunk {
                inv.key(keys.room(room)).key(keys.lease(room)).arg(room).arg(*epoch);
            }
            let mut con = self.inner.con.clone();
            let results: Vec<String> = self.run(async move { inv.invoke_async(&mut con).await }).await?;
            if results.len() != chunk.len() {
                return Err(ClusterError::Corrupt(format!("{} renewals for {} rooms", results.len(), chunk.len())));
            }
            for ((room, epoch), result) in chunk.iter().zip(results) {
                match result.strip_prefix("lost:") {
                    None => {
                        if result == "restored" {
                            info!(room, epoch, "lease restored after it lapsed");
                        }
                        self.inner.counters.renewals.fetch_add(1, Relaxed);
                    }
                    Some(holder) => fenced.extend(self.fence(room, *epoch, holder.to_owned())),
                }
            }
        }
        Ok(fenced)
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
        let sig = inner.records.sign(&inner.node_id, &fields);
        let mut pipe = redis::pipe();
        pipe.atomic().cmd("HSET").arg(&key);
        for (field, value) in &fields {
            pipe.arg(*field).arg(value);
        }
        pipe.arg("sig")
            .arg(sig)
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

/// `node:epoch` → (node, epoch).
fn parse_lease(lease: &str) -> Option<(&str, u64)> {
    let (node, epoch) = lease.rsplit_once(':')?;
    Some((node, epoch.parse().ok()?))
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

/// The control task: checks each control message the relay received and
/// hands the good ones to the server; refusals are counted by reason (and
/// logged at debug). Ends when the last [`Cluster`] handle is dropped.
async fn control_task(weak: Weak<Inner>, mut raw: mpsc::Receiver<String>) {
    let mut seen = Seen::new(SEEN_CAPACITY);
    while let Some(wire) = raw.recv().await {
        let Some(inner) = weak.upgrade() else { return };
        let cluster = Cluster { inner };
        if let Err(reason) = cluster.receive_control(&wire, &mut seen) {
            cluster.inner.counters.control_refused[reason.index()].fetch_add(1, Relaxed);
            debug!(reason = reason.as_str(), "control message refused");
        }
    }
}

async fn scan_nodes(cluster: &Cluster) {
    let Ok(nodes) = cluster.nodes().await else { return };
    let now: HashSet<String> = nodes.into_iter().map(|n| n.id).collect();
    let c = &cluster.inner.counters;
    c.nodes_seen.store(now.len() as u64, Relaxed);
    let mut last = lock(&cluster.inner.last_nodes);
    for lost in last.difference(&now) {
        c.nodes_lost.fetch_add(1, Relaxed);
        warn!(node = %lost, "cluster node disappeared (its registry entry lapsed or it left)");
    }
    *last = now;
}

/// The `Location` of a redirect to `owner_api_url` for `path_and_query`
/// (as received, e.g. `/v1/rooms/r1/whip?x=1`), carrying `ticket` as the
/// `ticket` query parameter (tickets are base64url and `.`: no escaping).
pub fn redirect_location(owner_api_url: &str, path_and_query: &str, ticket: &str) -> String {
    let base = owner_api_url.trim_end_matches('/');
    let sep = if path_and_query.contains('?') { '&' } else { '?' };
    format!("{base}{path_and_query}{sep}ticket={ticket}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_numbers_map_ids_back_and_keep_them_below_2_pow_51() {
        assert_eq!(node_number_of(1), None, "a single node's ids");
        assert_eq!(node_number_of((7 << NODE_NUMBER_SHIFT) + 1), Some(7));
        assert_eq!(node_number_of((7 << NODE_NUMBER_SHIFT) + u64::from(u32::MAX)), Some(7));
        let last = (u64::from(MAX_NODE_NUMBER) << NODE_NUMBER_SHIFT) + u64::from(u32::MAX);
        assert_eq!(node_number_of(last), Some(MAX_NODE_NUMBER));
        assert!(last < 1 << 51, "under the mixer's remote participants");
        assert_eq!(node_number_of(1 << 51), None, "a remote participant's id names no node");
    }

    #[test]
    fn leases_parse_with_the_last_colon() {
        assert_eq!(parse_lease("node-1:42"), Some(("node-1", 42)));
        assert_eq!(parse_lease("a:b:7"), Some(("a:b", 7)));
        assert_eq!(parse_lease("nocolon"), None);
        assert_eq!(parse_lease("n:x"), None);
    }

    #[test]
    fn redirect_locations_append_the_ticket() {
        assert_eq!(
            redirect_location("http://b:8080/", "/v1/rooms/r/whip", "t.s"),
            "http://b:8080/v1/rooms/r/whip?ticket=t.s"
        );
        assert_eq!(redirect_location("http://b", "/r?x=1", "t.s"), "http://b/r?x=1&ticket=t.s");
    }
}
