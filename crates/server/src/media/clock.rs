//! The `mix-clock` thread: every 20 ms, on an absolute schedule, it ticks
//! every room on the `mix-N` pool (rooms in parallel, a big room's shards in
//! parallel within it) and hands the I/O threads one O(K) result per room.
//! A tick that starts more than one period late is counted as an overrun
//! and the schedule skips to the present; none is dropped silently.
//!
//! A light tick (one room of 1,000 takes about 2 ms) runs on this thread
//! alone: handing it to the pool costs wake-ups, and the pool's threads
//! spin (`sched_yield`) after each piece of work, which cost more CPU than
//! the split saved (see [`Spread`]).

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

/// An inline tick that used more CPU than this (or took more than
/// [`INLINE_WALL_MAX`]) moves the next ones to the pool.
const INLINE_MAX: Duration = Duration::from_millis(8);
/// See [`INLINE_MAX`].
const INLINE_WALL_MAX: Duration = Duration::from_millis(15);
/// On the pool, every this many ticks (5 s) …
const PROBE_TICKS: u32 = 250;
/// … if at least half of them took less than this, the next tick is tried inline.
const PROBE_BELOW: Duration = Duration::from_millis(4);

/// Whether the next tick runs on the clock thread alone or is split on the
/// `mix-N` pool. Inline while a tick's work (this thread's CPU time, which a
/// preemption does not inflate) stays under [`INLINE_MAX`]; on the pool as
/// soon as it does not. On the pool, ticks' wall times are noisy (the pool's
/// threads wait for cores the I/O threads hold), so the way back is a probe:
/// every 5 s, if most pool ticks were short, one tick runs inline and its
/// CPU time decides. With two threads a probed tick's work is at most about
/// twice [`PROBE_BELOW`], far from the deadline.
#[derive(Debug, Default)]
pub(crate) struct Spread {
    pooled: bool,
    window: u32,
    short: u32,
}

impl Spread {
    /// True: tick on the pool; false: on this thread.
    pub(crate) fn pooled(&self) -> bool {
        self.pooled
    }

    /// Takes the tick just run into account: its wall time, and for an
    /// inline tick this thread's CPU time. Returns the new choice when it changed.
    pub(crate) fn after_tick(&mut self, took: Duration, work: Option<Duration>) -> Option<bool> {
        if !self.pooled {
            if took > INLINE_WALL_MAX || work.is_some_and(|w| w > INLINE_MAX) {
                self.pooled = true;
                (self.window, self.short) = (0, 0);
                return Some(true);
            }
            return None;
        }
        self.window += 1;
        self.short += u32::from(took < PROBE_BELOW);
        if self.window < PROBE_TICKS {
            return None;
        }
        let probe = self.short * 2 >= self.window;
        (self.window, self.short) = (0, 0);
        if probe {
            self.pooled = false;
            return Some(false);
        }
        None
    }
}

/// CPU time this thread has used (zero if the clock cannot be read).
fn thread_cpu() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(Duration::ZERO, Duration::from)
}

/// The kernel's account of this thread: its CPU time, and how many times it
/// gave its core up (`blocked`: waited for a lock or a full queue) or had it
/// taken (`preempted`: another thread ran). Read at each tick's start and
/// end (four system calls), so that a slow tick's warning says why it was
/// slow: work (`cpu` near the tick's time), or waiting.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct ThreadUsage {
    cpu: Duration,
    blocked: i64,
    preempted: i64,
}

impl ThreadUsage {
    fn now() -> Self {
        let cpu = thread_cpu();
        match nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD) {
            Ok(u) => Self { cpu, blocked: u.voluntary_context_switches(), preempted: u.involuntary_context_switches() },
            Err(_) => Self { cpu, ..Self::default() },
        }
    }

    /// What was used from `before` to `self`.
    fn since(self, before: Self) -> Self {
        Self {
            cpu: self.cpu.saturating_sub(before.cpu),
            blocked: self.blocked.saturating_sub(before.blocked),
            preempted: self.preempted.saturating_sub(before.preempted),
        }
    }

    fn cpu_ms(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e3
    }
}

/// Peers whose ICE never started are looked for every this many ticks (1 s).
const HOUSEKEEPING_TICKS: u64 = 50;

/// What the clock needs.
pub(crate) struct Clock {
    /// Tick n is due at `epoch + n · TICK` (the I/O threads read by it too).
    pub(crate) epoch: Instant,
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
    /// Rooms spread over several nodes: this node's side, before and after each tick.
    pub(crate) mesh: Option<super::mesh::Mesh>,
}

impl Clock {
    /// Starts the clock thread.
    pub(crate) fn spawn(self) -> std::io::Result<JoinHandle<()>> {
        std::thread::Builder::new().name("mix-clock".into()).spawn(move || self.run())
    }

    fn run(mut self) {
        crate::priority::media_thread(self.thread_nice);
        let mut mesh = self.mesh.take();
        let start = self.epoch;
        let mut tick = 0u64;
        let mut shed = Shedder::default();
        let mut spread = Spread::default();
        // The last tick's time and use of this thread, for the warning of an overrun.
        let mut last = (Duration::ZERO, ThreadUsage::default());
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
                // The last tick's figures tell a slow tick (its time) from a late wake-up.
                let (took, usage) = last;
                tracing::warn!(
                    ticks = behind,
                    last_took_ms = took.as_secs_f64() * 1e3,
                    last_cpu_ms = usage.cpu_ms(),
                    last_blocked = usage.blocked,
                    last_preempted = usage.preempted,
                    "mixer fell behind; ticks skipped"
                );
                tick += behind;
            }
            let started = Instant::now();
            let at_start = ThreadUsage::now();
            let level = shed.level();
            let rooms = self.rooms.all();
            if let Some(mesh) = mesh.as_mut() {
                mesh.before_tick(tick, &rooms);
            }
            let (ticked, work): (Vec<(RoomMix, TickReport)>, _) = if spread.pooled() {
                let pool = Some(&*self.pool);
                (self.pool.install(|| rooms.par_iter().filter_map(|room| room.tick(pool, tick, level)).collect()), None)
            } else {
                let cpu = thread_cpu();
                let ticked = rooms.iter().filter_map(|room| room.tick(None, tick, level)).collect();
                (ticked, Some(thread_cpu().saturating_sub(cpu)))
            };
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
            if let Some(mesh) = mesh.as_mut() {
                mesh.after_tick(tick, &rooms);
            }
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
            let usage = ThreadUsage::now().since(at_start);
            last = (took, usage);
            metrics::tick(took, &totals);
            if let Some(pooled) = spread.after_tick(took, work) {
                tracing::debug!(pooled, took_ms = took.as_secs_f64() * 1e3, "mixer work moves");
            }
            if let Some(new) = shed.after_tick(took, TICK) {
                metrics::shed_level(new);
                if new > level {
                    tracing::warn!(
                        level = new,
                        took_ms = took.as_secs_f64() * 1e3,
                        cpu_ms = usage.cpu_ms(),
                        blocked = usage.blocked,
                        preempted = usage.preempted,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tick_that_waited_shows_as_blocked_and_not_as_work() {
        let before = ThreadUsage::now();
        std::thread::sleep(Duration::from_millis(5));
        let waited = ThreadUsage::now().since(before);
        assert!(waited.blocked >= 1, "a sleep gives the core up: {waited:?}");
        assert!(waited.cpu < Duration::from_millis(4), "a sleep is not work: {waited:?}");
        let spun = ThreadUsage::now();
        while ThreadUsage::now().since(spun).cpu < Duration::from_millis(2) {
            std::hint::spin_loop();
        }
        let worked = ThreadUsage::now().since(spun);
        assert!(worked.cpu >= Duration::from_millis(2) && worked.blocked == 0, "{worked:?}");
    }

    #[test]
    fn light_ticks_stay_inline_heavy_work_moves_to_the_pool_and_a_probe_brings_it_back() {
        let ms = Duration::from_millis;
        let mut s = Spread::default();
        assert!(!s.pooled(), "inline at start");
        // A preempted tick (long wall time, little work) does not move it.
        for _ in 0..500 {
            assert_eq!(s.after_tick(ms(9), Some(ms(3))), None);
        }
        assert_eq!(s.after_tick(ms(9), Some(ms(9))), Some(true), "more work than INLINE_MAX");
        assert!(s.pooled());
        // Mostly long pool ticks: no probe.
        for i in 0..3 * PROBE_TICKS {
            let took = if i % 3 == 0 { ms(1) } else { ms(5) };
            assert_eq!(s.after_tick(took, None), None);
        }
        // Mostly short ones: the window's last tick brings a probe.
        for i in 0..PROBE_TICKS - 1 {
            let took = if i % 3 == 0 { ms(5) } else { ms(1) };
            assert_eq!(s.after_tick(took, None), None);
        }
        assert_eq!(s.after_tick(ms(1), None), Some(false));
        // The probe was too heavy: back to the pool at once …
        assert_eq!(s.after_tick(ms(6), Some(ms(12))), Some(true));
        // … and a wall time past INLINE_WALL_MAX moves it too.
        let mut s = Spread::default();
        assert_eq!(s.after_tick(ms(16), Some(ms(2))), Some(true));
    }
}
