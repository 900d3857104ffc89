//! Room events across nodes: the owner of a room publishes each event on
//! `events:<room>` (Redis pub/sub); a node whose clients watch a room held
//! elsewhere subscribes and hands the events to them.
//!
//! ```text
//! owner: Cluster::publish_event(room, json) ─► bounded queue ─► task: PUBLISH events:<room>
//! other: Cluster::watch(room) ─► SUBSCRIBE (one RESP3 connection per node)
//!        push ─► bounded queue ─► task ─► broadcast::Sender per room ─► watchers
//! ```
//!
//! The same connection and queues carry the room control messages (see the
//! `control` module): published like events, and received on the one
//! `control` channel every node subscribes to, handed raw to the cluster's
//! control task.
//!
//! Best effort, like the local event channel: events published while Redis
//! is unreachable, or beyond the bounded queues, are dropped and counted.
//! After a disconnection every watched room is subscribed again.
//!
//! Signed: anyone who can publish on Redis could otherwise speak for any
//! node (phantom participants, a fake `moved`). A message is
//! `<origin>\n<at> <sig>\n<event>`, `sig` an HMAC (key purpose
//! `cluster-event`) of the room, the origin, `at` (Unix ms) and the event;
//! one without a valid signature, or written more than `node_ttl_seconds`
//! from now (a replay), is dropped and counted
//! (`tutti_cluster_events_refused_total`) before any watcher sees it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, SendError};
use redis::{PushInfo, PushKind, Value};
use tokio::sync::{broadcast, mpsc};
use tracing::{debug, info, warn};

use crate::config::ClusterConfig;
use crate::control::CONTROL_QUEUE_CAPACITY;
use crate::error::ClusterError;
use crate::record::{EVENT_PURPOSE, PartsKey, unix_now_ms};

/// Events waiting to be published before new ones are dropped.
pub const EVENT_QUEUE_CAPACITY: usize = 4096;
/// Events a slow watcher may lag behind before it loses the oldest.
pub const WATCH_CAPACITY: usize = 256;
/// Events published in one pipeline.
const PUBLISH_BATCH: usize = 64;

/// An event of a room held on another node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomEvent {
    /// The room.
    pub room: String,
    /// The node that published it (the room's owner).
    pub origin: String,
    /// The event as the owner serialized it (the server's JSON).
    pub event: String,
}

#[derive(Default)]
pub(crate) struct EventCounters {
    pub published: AtomicU64,
    pub publish_dropped: AtomicU64,
    pub delivered: AtomicU64,
    pub receive_dropped: AtomicU64,
    pub control_published: AtomicU64,
    pub control_dropped: AtomicU64,
    /// Events received without a valid signature, or too old.
    pub refused: AtomicU64,
}

pub(crate) struct Relay {
    channel_prefix: String,
    control_channel: String,
    node_id: String,
    con: ConnectionManager,
    op_timeout: Duration,
    out_tx: mpsc::Sender<Outgoing>,
    control_tx: mpsc::Sender<String>,
    watchers: Mutex<HashMap<String, broadcast::Sender<RoomEvent>>>,
    resubscribe: Arc<AtomicBool>,
    pub counters: Arc<EventCounters>,
    /// Signs this node's events and checks the others'.
    key: PartsKey,
    /// How far from now an event's time may be (the node TTL).
    max_age_ms: u64,
    /// Whether a refused event was logged already (once: then only counted).
    warned_refused: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A message to publish: channel, payload, and whether it is a control message.
type Outgoing = (String, String, bool);

/// The queues the relay's tasks drain (`control`: raw control messages
/// received, for the cluster's control task).
pub(crate) struct RelayQueues {
    pub outgoing: mpsc::Receiver<Outgoing>,
    pub pushes: mpsc::Receiver<PushInfo>,
    pub control: mpsc::Receiver<String>,
}

impl Relay {
    /// A relay on its own RESP3 connection to the config's Redis (made lazily).
    pub fn new(
        config: &ClusterConfig,
        node_id: &str,
        op_timeout: Duration,
        secret: &[u8],
    ) -> Result<(Self, RelayQueues), ClusterError> {
        let key_prefix = config.key_prefix.as_str();
        let max_age_ms = config.node_ttl_ms();
        // Events signed under a previous secret (a roll) are accepted too.
        let events_key = config
            .previous_secrets
            .iter()
            .fold(PartsKey::new(secret, EVENT_PURPOSE), |k, old| k.also_accept(old.as_bytes()));
        let client = config.redis_client(true)?;
        let counters = Arc::new(EventCounters::default());
        let resubscribe = Arc::new(AtomicBool::new(false));
        let (push_tx, pushes) = mpsc::channel(EVENT_QUEUE_CAPACITY);
        let (c, flag) = (counters.clone(), resubscribe.clone());
        let sender = move |push: PushInfo| {
            if push.kind == PushKind::Disconnection {
                flag.store(true, Relaxed);
            }
            push_tx.try_send(push).map_err(|_| {
                c.receive_dropped.fetch_add(1, Relaxed);
                SendError
            })
        };
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(op_timeout))
            .set_response_timeout(Some(op_timeout))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500))
            .set_push_sender(sender);
        let con = ConnectionManager::new_lazy_with_config(client, config).map_err(ClusterError::from_redis)?;
        let (out_tx, outgoing) = mpsc::channel(EVENT_QUEUE_CAPACITY);
        let (control_tx, control) = mpsc::channel(CONTROL_QUEUE_CAPACITY);
        let relay = Self {
            channel_prefix: format!("{key_prefix}events:"),
            control_channel: format!("{key_prefix}control"),
            node_id: node_id.to_owned(),
            con,
            op_timeout,
            out_tx,
            control_tx,
            watchers: Mutex::new(HashMap::new()),
            resubscribe,
            counters,
            key: events_key,
            max_age_ms,
            warned_refused: AtomicBool::new(false),
        };
        Ok((relay, RelayQueues { outgoing, pushes, control }))
    }

    fn channel(&self, room: &str) -> String {
        format!("{}{room}", self.channel_prefix)
    }

    /// Queues an event (never blocks; a full queue drops and counts it).
    pub fn publish(&self, room: &str, event: String) {
        let at = unix_now_ms().to_string();
        let sig = self.key.sign(&Self::parts(room, &self.node_id, &at, &event));
        let payload = format!("{}\n{at} {sig}\n{event}", self.node_id);
        if self.out_tx.try_send((self.channel(room), payload, false)).is_err() {
            self.counters.publish_dropped.fetch_add(1, Relaxed);
        }
    }

    /// Queues a signed control message (never blocks; a full queue drops and counts it).
    pub fn publish_control(&self, wire: String) {
        if self.out_tx.try_send((self.control_channel.clone(), wire, true)).is_err() {
            self.counters.control_dropped.fetch_add(1, Relaxed);
        }
    }

    /// Subscribes the control channel (at start; again after a disconnection
    /// by [`maintain`](Self::maintain)). On failure, `maintain` retries.
    pub async fn subscribe_control(&self) {
        let mut con = self.con.clone();
        match tokio::time::timeout(self.op_timeout, con.subscribe(&self.control_channel)).await {
            Ok(Ok(())) => {}
            _ => {
                debug!("control channel not subscribed yet; retrying");
                self.resubscribe.store(true, Relaxed);
            }
        }
    }

    /// The events of `room` published by other nodes, from now on.
    pub async fn watch(&self, room: &str) -> Result<broadcast::Receiver<RoomEvent>, ClusterError> {
        if let Some(tx) = lock(&self.watchers).get(room) {
            return Ok(tx.subscribe());
        }
        let mut con = self.con.clone();
        let channel = self.channel(room);
        match tokio::time::timeout(self.op_timeout, con.subscribe(&channel)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(ClusterError::from_redis(e)),
            Err(_) => return Err(ClusterError::Unavailable(format!("SUBSCRIBE took over {:?}", self.op_timeout))),
        }
        let mut watchers = lock(&self.watchers);
        let tx = watchers.entry(room.to_owned()).or_insert_with(|| broadcast::channel(WATCH_CAPACITY).0);
        Ok(tx.subscribe())
    }

    /// Rooms watched now.
    pub fn watched(&self) -> usize {
        lock(&self.watchers).len()
    }

    /// Unsubscribes rooms nobody watches any more; after a disconnection,
    /// subscribes every watched room again. Called by the heartbeat task.
    pub async fn maintain(&self) {
        let (idle, all): (Vec<String>, Vec<String>) = {
            let mut watchers = lock(&self.watchers);
            let idle: Vec<String> =
                watchers.iter().filter(|(_, tx)| tx.receiver_count() == 0).map(|(r, _)| r.clone()).collect();
            for room in &idle {
                watchers.remove(room);
            }
            (idle, watchers.keys().cloned().collect())
        };
        let mut con = self.con.clone();
        if !idle.is_empty() {
            let channels: Vec<String> = idle.iter().map(|r| self.channel(r)).collect();
            let _ = tokio::time::timeout(self.op_timeout, con.unsubscribe(&channels)).await;
        }
        if self.resubscribe.swap(false, Relaxed) {
            let mut channels: Vec<String> = all.iter().map(|r| self.channel(r)).collect();
            channels.push(self.control_channel.clone());
            match tokio::time::timeout(self.op_timeout, con.subscribe(&channels)).await {
                Ok(Ok(())) => info!(rooms = all.len(), "room event and control subscriptions restored"),
                _ => {
                    debug!("room event subscriptions not restored yet; retrying");
                    self.resubscribe.store(true, Relaxed);
                }
            }
        }
    }

    /// Task: drains the outgoing queue into PUBLISH pipelines.
    pub async fn run_publisher(self: Arc<Self>, mut outgoing: mpsc::Receiver<Outgoing>) {
        let mut batch = Vec::with_capacity(PUBLISH_BATCH);
        let mut failing = false;
        while outgoing.recv_many(&mut batch, PUBLISH_BATCH).await > 0 {
            let mut pipe = redis::pipe();
            for (channel, payload, _) in &batch {
                pipe.cmd("PUBLISH").arg(channel).arg(payload).ignore();
            }
            let mut con = self.con.clone();
            let control = batch.iter().filter(|(_, _, c)| *c).count() as u64;
            let n = batch.len() as u64 - control;
            batch.clear();
            match tokio::time::timeout(self.op_timeout, pipe.exec_async(&mut con)).await {
                Ok(Ok(())) => {
                    self.counters.published.fetch_add(n, Relaxed);
                    self.counters.control_published.fetch_add(control, Relaxed);
                    failing = false;
                }
                other => {
                    self.counters.publish_dropped.fetch_add(n, Relaxed);
                    self.counters.control_dropped.fetch_add(control, Relaxed);
                    if !failing {
                        let why = match other {
                            Ok(Err(e)) => e.to_string(),
                            _ => "timed out".to_owned(),
                        };
                        warn!(error = %why, "room events not published (dropped while Redis is away)");
                    }
                    failing = true;
                }
            }
        }
    }

    /// Task: hands pushed messages to the rooms' watchers.
    pub async fn run_dispatcher(self: Arc<Self>, mut pushes: mpsc::Receiver<PushInfo>) {
        while let Some(push) = pushes.recv().await {
            if push.kind != PushKind::Message {
                continue;
            }
            if let Some(wire) = self.control(&push.data) {
                if self.control_tx.try_send(wire).is_err() {
                    self.counters.control_dropped.fetch_add(1, Relaxed);
                }
                continue;
            }
            let Some(event) = self.parse(&push.data) else {
                self.counters.refused.fetch_add(1, Relaxed);
                if !self.warned_refused.swap(true, Relaxed) {
                    warn!(
                        "room event from Redis not signed with the cluster's key (published by hand, by a node \
                        with another cluster secret or an older version), or older than node_ttl_seconds (replayed, \
                        or the nodes' clocks differ): dropped (only counted from now on)"
                    );
                }
                continue;
            };
            if event.origin == self.node_id {
                // This node's own rooms reach its clients locally.
                continue;
            }
            let watchers = lock(&self.watchers);
            if let Some(tx) = watchers.get(&event.room)
                && tx.send(event).is_ok()
            {
                self.counters.delivered.fetch_add(1, Relaxed);
            }
        }
    }

    /// A message of the control channel: its payload (empty when it is not
    /// text: refused as malformed, and counted, by the control task).
    fn control(&self, data: &[Value]) -> Option<String> {
        let [channel, payload] = data else { return None };
        (text(channel)? == self.control_channel).then(|| text(payload).unwrap_or_default())
    }

    fn parse(&self, data: &[Value]) -> Option<RoomEvent> {
        let [channel, payload] = data else { return None };
        let channel = text(channel)?;
        let room = channel.strip_prefix(&self.channel_prefix)?.to_owned();
        let payload = text(payload)?;
        let (origin, rest) = payload.split_once('\n')?;
        let (stamp, event) = rest.split_once('\n')?;
        let (at, sig) = stamp.split_once(' ')?;
        let fresh = at.parse::<u64>().is_ok_and(|at| at.abs_diff(unix_now_ms()) <= self.max_age_ms);
        if !fresh || !self.key.verify(&Self::parts(&room, origin, at, event), sig) {
            return None;
        }
        Some(RoomEvent { room, origin: origin.to_owned(), event: event.to_owned() })
    }

    /// What an event's signature covers.
    fn parts<'a>(room: &'a str, origin: &'a str, at: &'a str, event: &'a str) -> [&'a [u8]; 4] {
        [room.as_bytes(), origin.as_bytes(), at.as_bytes(), event.as_bytes()]
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}
