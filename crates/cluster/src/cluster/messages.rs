//! Messages between the nodes of a room: room events for the watchers
//! elsewhere, and signed control messages, sent and received (the control
//! task checks each one received).

use std::sync::Weak;
use std::sync::atomic::Ordering::Relaxed;

use tokio::sync::{broadcast, mpsc};
use tracing::debug;

use super::{Cluster, Inner, lock, unix_now_ms};
#[cfg(doc)]
use crate::control::CONTROL_QUEUE_CAPACITY;
use crate::control::{ControlMessage, ControlRefusal, SEEN_CAPACITY, Seen};
use crate::error::ClusterError;
use crate::events::RoomEvent;

impl Cluster {
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
}

/// The control task: checks each control message the relay received and
/// hands the good ones to the server; refusals are counted by reason (and
/// logged at debug). Ends when the last [`Cluster`] handle is dropped.
pub(super) async fn control_task(weak: Weak<Inner>, mut raw: mpsc::Receiver<String>) {
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
