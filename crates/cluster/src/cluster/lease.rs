//! The leases this node holds: which rooms at which epoch, their renewal
//! (fencing the rooms lost to another holder), and their release.

use std::sync::atomic::Ordering::Relaxed;

use tokio::sync::mpsc;
use tracing::{info, warn};

#[cfg(doc)]
use super::values::FENCED_CHANNEL_CAPACITY;
use super::values::Fenced;
use super::{Cluster, lock};
use crate::error::ClusterError;

/// Rooms renewed per script call.
const RENEW_BATCH: usize = 100;

/// A released room's hash (its epoch) is kept this long, so a room opened
/// again soon gets a higher epoch.
const RELEASED_RETENTION_SECONDS: u64 = 86_400;

impl Cluster {
    /// Whether this node holds `room`'s lease, and at which epoch (no I/O).
    pub fn owned_epoch(&self, room: &str) -> Option<u64> {
        lock(&self.inner.owned).get(room).copied()
    }

    /// Rooms whose lease this node holds (no I/O).
    pub fn owned_rooms(&self) -> Vec<(String, u64)> {
        lock(&self.inner.owned).iter().map(|(r, e)| (r.clone(), *e)).collect()
    }

    /// Forgets a room lost to another holder and tells the server.
    pub(super) fn fence(&self, room: &str, epoch: u64, holder: String) -> Option<Fenced> {
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

    /// The receiver of fencing notices (rooms this node lost); `Some` on the
    /// first call only. Notices beyond [`FENCED_CHANNEL_CAPACITY`] unread are
    /// dropped and counted; [`Cluster::owned_epoch`] tells the truth anyway.
    pub fn take_fenced(&self) -> Option<mpsc::Receiver<Fenced>> {
        lock(&self.inner.fenced_rx).take()
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
}

/// `node:epoch` → (node, epoch).
pub(super) fn parse_lease(lease: &str) -> Option<(&str, u64)> {
    let (node, epoch) = lease.rsplit_once(':')?;
    Some((node, epoch.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_parse_with_the_last_colon() {
        assert_eq!(parse_lease("node-1:42"), Some(("node-1", 42)));
        assert_eq!(parse_lease("a:b:7"), Some(("a:b", 7)));
        assert_eq!(parse_lease("nocolon"), None);
        assert_eq!(parse_lease("n:x"), None);
    }
}
