//! One lock per room name: a claim and the room's making here (shared) never
//! interleave with a close giving the room's lease back (sole).

use std::collections::HashMap;
use std::sync::Arc;

use crate::sync::lock;

/// One lock per room name, kept only while it is held or awaited: a
/// claim and the room's making here (shared: joins and creates of a room
/// go on side by side) and a close's lease given back (sole) never
/// interleave. A lease given back between a join's claim and its room's
/// making left the room hosted here with no owner (other nodes answered
/// 404 for it; a later claim fenced and closed it).
#[derive(Clone, Default)]
pub(crate) struct RoomLocks(Arc<std::sync::Mutex<HashMap<String, Arc<tokio::sync::RwLock<()>>>>>);

/// A room's lock, held until dropped.
pub(crate) struct RoomGuard {
    shared: Option<tokio::sync::OwnedRwLockReadGuard<()>>,
    sole: Option<tokio::sync::OwnedRwLockWriteGuard<()>>,
    locks: RoomLocks,
}

impl RoomLocks {
    fn entry(&self, room: &str) -> (Arc<tokio::sync::RwLock<()>>, RoomGuard) {
        let rw = lock(&self.0).entry(room.to_owned()).or_default().clone();
        // Made before any wait: a wait given up still clears the entry.
        (rw, RoomGuard { shared: None, sole: None, locks: self.clone() })
    }

    /// Waits for `room`'s lock, shared with other joins and creates (a
    /// claim and the room's making here).
    pub(crate) async fn share(&self, room: &str) -> RoomGuard {
        let (rw, mut guard) = self.entry(room);
        guard.shared = Some(rw.read_owned().await);
        guard
    }

    /// Waits for `room`'s lock, alone (its lease given back).
    pub(crate) async fn lock(&self, room: &str) -> RoomGuard {
        let (rw, mut guard) = self.entry(room);
        guard.sole = Some(rw.write_owned().await);
        guard
    }

    /// `room`'s lock, alone, if nobody holds it now.
    pub(crate) fn try_lock(&self, room: &str) -> Option<RoomGuard> {
        let (rw, mut guard) = self.entry(room);
        guard.sole = Some(rw.try_write_owned().ok()?);
        Some(guard)
    }

    /// Rooms with a lock held or awaited.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.0).len()
    }
}

impl Drop for RoomGuard {
    fn drop(&mut self) {
        drop((self.shared.take(), self.sole.take()));
        // Rooms nobody holds or waits for any more (the map's is the only reference).
        lock(&self.locks.0).retain(|_, m| Arc::strong_count(m) > 1);
    }
}
