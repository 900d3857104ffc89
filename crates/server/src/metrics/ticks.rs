//! The mixer clock's recent tick durations, for the node's load in a
//! cluster's directory (tick p99): a fixed window of the last
//! [`WINDOW`] ticks (about 5 s), written by the clock thread with relaxed
//! atomic stores (never blocks, never allocates), read on demand.
//!
//! Process-wide, like the metrics recorder: one server per process.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

/// Ticks remembered: 256 × 20 ms ≈ 5 s.
pub const WINDOW: usize = 256;

static RECENT: [AtomicU32; WINDOW] = [const { AtomicU32::new(0) }; WINDOW];
static WRITTEN: AtomicUsize = AtomicUsize::new(0);

/// Remembers one tick's wall time (µs, saturating at ~71 min).
pub(crate) fn record(took: Duration) {
    let i = WRITTEN.fetch_add(1, Relaxed) % WINDOW;
    RECENT[i].store(u32::try_from(took.as_micros()).unwrap_or(u32::MAX), Relaxed);
}

/// The 99th percentile (nearest rank) of the remembered ticks' wall time;
/// zero before the first tick.
pub fn tick_p99() -> Duration {
    let n = WRITTEN.load(Relaxed).min(WINDOW);
    let mut us: Vec<u32> = RECENT[..n].iter().map(|a| a.load(Relaxed)).collect();
    if us.is_empty() {
        return Duration::ZERO;
    }
    us.sort_unstable();
    let rank = (us.len() * 99).div_ceil(100).clamp(1, us.len());
    Duration::from_micros(u64::from(us[rank - 1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_p99_of_the_window() {
        // Other tests' clocks may write too: fill the whole window at once.
        for i in 0..WINDOW {
            record(Duration::from_micros(if i < 250 { 100 } else { 9_000 }));
        }
        let p = tick_p99();
        assert!(p >= Duration::from_micros(100), "{p:?}");
        // 6 of 256 are slow (2.3 %): the p99 is one of them.
        assert!(p <= Duration::from_micros(9_000), "{p:?}");
    }
}
