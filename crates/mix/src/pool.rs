//! The mixer's thread pool: rayon threads named `mix-0`, `mix-1`, … so their
//! CPU can be seen (and alerted on) one by one.

use rayon::prelude::*;

use crate::{MixError, Room, TickReport};

/// A rayon pool shared by every room of a process.
#[derive(Debug)]
pub struct MixPool {
    pool: rayon::ThreadPool,
}

impl MixPool {
    /// A pool of `threads` threads (0 = one per available core).
    pub fn new(threads: usize) -> Result<Self, MixError> {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).thread_name(|i| format!("mix-{i}")).build()?;
        Ok(Self { pool })
    }

    /// Threads in the pool.
    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// Runs `f` inside the pool.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }

    /// Ticks every room once, rooms in parallel (and each big room's shards
    /// in parallel within it). Reports are in the rooms' order.
    pub fn tick_rooms(&self, rooms: &mut [Room], tick: u64) -> Vec<TickReport> {
        self.pool.install(|| rooms.par_iter_mut().map(|room| room.run_tick(tick, true)).collect())
    }
}
