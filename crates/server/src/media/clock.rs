//! The `mix-clock` thread: every 20 ms, on an absolute schedule, it ticks
//! every room on the `mix-N` pool (rooms in parallel, a big room's shards in
//! parallel within it) and hands the I/O threads one O(K) result per room.
//! A tick that starts more than one period late is counted as an overrun
//! and the schedule skips to the present; none is dropped silently.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rayon::prelude::*;
use tutti_mix::{MixPool, TickReport};

use super::command::{IoCommand, IoHandle};
use super::shed::Shedder;
use crate::metrics;
use crate::room::{RoomMix, Rooms};

/// One 20 ms tick.
pub(crate) const TICK: Duration = Duration::from_millis(20);

/// Peers whose ICE never started are looked for every this many ticks (1 s).
const HOUSEKEEPING_TICKS: u64 = 50;

/// What the clock needs.
pub(crate) struct Clock {
    pub(crate) rooms: Arc<Rooms>,
    pub(crate) pool: Arc<MixPool>,
    pub(crate) io: Arc<[IoHandle]>,
    pub(crate) peer_timeout: Duration,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) overruns: Arc<AtomicU64>,
    /// Nice value of the thread (see `crate::priority`).
    pub(crate) thread_nice: i32,
    /// Recordings and RTP out: handed each tick's mixes (never blocks).
    pub(crate) outputs: Option<Arc<crate::outputs::Outputs>>,
}

impl Clock {
    /// Starts the clock thread.
    pub(crate) fn spawn(self) -> std::io::Result<JoinHandle<()>> {
        std::thread::Builder::new().name("mix-clock".into()).spawn(move || self.run())
    }

    fn run(&self) {
        crate::priority::media_thread(self.thread_nice);
        let start = Instant::now();
        let mut tick = 0u64;
        let mut shed = Shedder::default();
        while !self.stop.load(Ordering::Relaxed) {
            let due = start + TICK * u32::try_from(tick).unwrap_or(u32::MAX);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            } else if now - due > TICK {
                // Behind by more than a tick: count it and skip to the present.
                let behind = ((now - due).as_millis() / TICK.as_millis()) as u64;
                self.overruns.fetch_add(behind, Ordering::Relaxed);
                metrics::tick_overruns(behind);
                tracing::warn!(ticks = behind, "mixer fell behind; ticks skipped");
                tick += behind;
            }
            let started = Instant::now();
            let level = shed.level();
            let rooms = self.rooms.all();
            let ticked: Vec<(RoomMix, TickReport)> =
                self.pool.install(|| rooms.par_iter().filter_map(|room| room.tick(&self.pool, tick, level)).collect());
            let mut totals = metrics::TickTotals::default();
            let mixes: Vec<RoomMix> = ticked
                .into_iter()
                .map(|(mix, report)| {
                    totals.add(&report);
                    mix
                })
                .collect();
            // Every room counts, including empty ones that had nothing to tick.
            totals.rooms = rooms.len();
            if !mixes.is_empty() {
                let mixes = Arc::new(mixes);
                for io in self.io.iter() {
                    io.send(IoCommand::Deliver(mixes.clone()));
                }
                if let Some(outputs) = &self.outputs {
                    outputs.feed(&mixes);
                }
            }
            let took = started.elapsed();
            metrics::tick(took, &totals);
            if let Some(new) = shed.after_tick(took, TICK) {
                metrics::shed_level(new);
                if new > level {
                    tracing::warn!(
                        level = new,
                        took_ms = took.as_secs_f64() * 1e3,
                        "mixer near its deadline: shedding codec work"
                    );
                } else {
                    tracing::info!(level = new, "mixer has time again: shedding less");
                }
            }
            if tick.is_multiple_of(HOUSEKEEPING_TICKS) {
                self.rooms.expire_pending(Instant::now(), self.peer_timeout);
            }
            tick += 1;
        }
    }
}
