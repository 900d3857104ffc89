//! This node's side of the directory: its load reported every second, and
//! the rooms it was fenced out of closed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tutti_cluster::{Cluster, Load};

use super::node::Node;

/// The CPU share of the process's busiest thread since the last reading
/// (`/proc/self/task/*/stat`; 0 where there is no /proc).
struct BusiestThread {
    last: HashMap<u64, f64>,
    at: Instant,
}

impl BusiestThread {
    fn new() -> Self {
        let mut b = Self { last: HashMap::new(), at: Instant::now() };
        b.read();
        b
    }

    fn read(&mut self) -> f32 {
        let now = Instant::now();
        let elapsed = now.duration_since(self.at).as_secs_f64();
        let mut busiest = 0.0f64;
        let mut next = HashMap::new();
        for (tid, stat) in tutti_procfs::thread_stats("self") {
            let cpu = stat.cpu_seconds();
            if let Some(before) = self.last.get(&tid)
                && elapsed > 0.0
            {
                busiest = busiest.max((cpu - before) / elapsed);
            }
            next.insert(tid, cpu);
        }
        (self.last, self.at) = (next, now);
        busiest.clamp(0.0, 1.0) as f32
    }
}

/// This node's side of the directory, until `stop`: closes the rooms the
/// node was fenced out of (their clients rejoin and are redirected to the
/// new owner), and reports the load every second: the participants (over
/// `cluster.capacity`), the busiest thread's CPU share and the mixer's
/// tick p99 over its last ~5 s (`metrics::tick_p99`).
pub(crate) async fn maintain(node: Arc<Node>, cluster: Cluster, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut busiest = BusiestThread::new();
    let mut fenced = cluster.take_fenced();
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            notice = async {
                match fenced.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            } => match notice {
                Some(notice) => {
                    tracing::warn!(room = %notice.room, holder = %notice.holder, "room taken over by another node: closing it here");
                    if let Ok(effects) = node.rooms.delete(&notice.room) {
                        node.apply(effects);
                    }
                }
                None => fenced = None,
            },
            _ = every.tick() => {
                let participants = u32::try_from(node.rooms.participants()).unwrap_or(u32::MAX);
                let busiest_thread_cpu = busiest.read();
                let tick_p99 = crate::metrics::tick_p99();
                cluster.set_load(Load { participants, busiest_thread_cpu, tick_p99 });
                crate::metrics::cluster(&cluster.stats());
            }
            _ = stop.wait_for(|s| *s) => break,
        }
    }
}
