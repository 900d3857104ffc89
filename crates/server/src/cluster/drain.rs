//! Whether this node drains, and until when (the state; the drain itself
//! is `handover`).

use std::sync::atomic::{AtomicU64, Ordering};

/// A node's drain: whether one started, and until when.
#[derive(Debug, Default)]
pub(crate) struct Drain {
    /// Unix milliseconds at which the drain ends at the latest; 0 = not draining.
    pub(crate) deadline_ms: AtomicU64,
    /// Wakes [`Drain::requested`] when the API asked for a drain.
    asked: tokio::sync::Notify,
}

impl Drain {
    /// The drain's deadline (unix seconds, rounded up), once one started.
    pub(crate) fn deadline(&self) -> Option<u64> {
        Some(self.deadline_ms.load(Ordering::Relaxed)).filter(|d| *d > 0).map(|ms| ms.div_ceil(1000))
    }

    /// The API asks this node to drain: wakes [`Drain::requested`].
    pub(crate) fn ask(&self) {
        self.asked.notify_one();
    }

    /// Resolves once the API has asked this node to drain.
    pub(crate) async fn requested(&self) {
        self.asked.notified().await;
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
