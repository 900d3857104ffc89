//! Which node takes a new room: the lighter of two random eligible nodes.
//!
//! Pure arithmetic on a snapshot of the registry; the random draws are
//! passed in, so a test can replay any choice.

use std::net::SocketAddr;
use std::time::Duration;

/// The load a node reports in its heartbeat (the server calls
/// [`Cluster::set_load`](crate::Cluster::set_load) whenever it likes; the
/// latest value goes out with the next heartbeat).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Load {
    /// Participants connected to this node.
    pub participants: u32,
    /// CPU share of the node's busiest thread over the last interval, 0 to 1.
    pub busiest_thread_cpu: f32,
    /// 99th percentile of the mixer's tick duration.
    pub tick_p99: Duration,
}

/// Whether a node takes new rooms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// Takes new rooms.
    Serving,
    /// Keeps its rooms, takes no new ones (shutting down).
    Draining,
}

impl NodeState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Serving => "serving",
            Self::Draining => "draining",
        }
    }
    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "serving" => Some(Self::Serving),
            "draining" => Some(Self::Draining),
            _ => None,
        }
    }
}

/// A live node as its registry entry shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeInfo {
    /// Node id.
    pub id: String,
    /// Where clients of this node send API requests (redirect target).
    pub api_url: String,
    /// The media address clients of this node reach.
    pub media_addr: String,
    /// Where its SIP edge takes calls (`host:port`, the host of its SIP
    /// Contact); empty: no SIP edge (or a node from before SIP).
    pub sip_addr: String,
    /// Serving or draining.
    pub state: NodeState,
    /// The load of its last heartbeat.
    pub load: Load,
    /// Participants it is sized for.
    pub capacity: u32,
    /// Rooms placed on it since its last heartbeat (by any node).
    pub placements: u32,
    /// Joins of spread rooms sent to it since its last heartbeat (by any node).
    pub joins: u32,
    /// Where its node-to-node media socket listens (`None`: a node from
    /// before room spreading, or an address that does not parse).
    pub mesh_addr: Option<SocketAddr>,
    /// Its node number (the high bits of the participant ids it hands out;
    /// `None`: a node from before node numbers).
    pub number: Option<u32>,
}

impl NodeInfo {
    /// `max(participants / capacity, busiest thread CPU, tick p99 / budget)`,
    /// plus each placement not yet in the heartbeat weighed as
    /// `room_size_estimate / capacity` (so a burst of placements does not
    /// all land on the node that looked lightest a second ago).
    pub fn effective_load(&self, tick_budget: Duration, room_size_estimate: u32) -> f64 {
        let capacity = f64::from(self.capacity.max(1));
        self.measured_load(tick_budget) + f64::from(self.placements) * f64::from(room_size_estimate) / capacity
    }

    /// `max(participants / capacity, busiest thread CPU, tick p99 / budget)`:
    /// the load the node itself measured, without pending placements.
    pub fn measured_load(&self, tick_budget: Duration) -> f64 {
        let capacity = f64::from(self.capacity.max(1));
        let share = f64::from(self.load.participants) / capacity;
        let cpu = f64::from(self.load.busiest_thread_cpu).clamp(0.0, 1.5);
        let tick = if tick_budget.is_zero() {
            0.0
        } else {
            (self.load.tick_p99.as_secs_f64() / tick_budget.as_secs_f64()).min(1.5)
        };
        share.max(cpu).max(tick)
    }

    /// What spreading a room's joins compares: `(participants + joins sent
    /// to it since its heartbeat) / capacity`. Participants only: the CPU
    /// and tick figures decide whether a node is full ([`eligible`](Self::eligible)),
    /// but are too noisy to rank nodes one join at a time.
    pub fn join_load(&self) -> f64 {
        (f64::from(self.load.participants) + f64::from(self.joins)) / f64::from(self.capacity.max(1))
    }

    /// Serving and below full measured load. Pending placements rank
    /// nodes but do not exclude them: a burst larger than the estimate
    /// foresaw still finds a node, the least pending one.
    pub fn eligible(&self, tick_budget: Duration) -> bool {
        self.state == NodeState::Serving && self.measured_load(tick_budget) < 1.0
    }
}

/// Power of two choices: among the eligible nodes (serving, measured load
/// below 1), draw two (with the given random numbers) and return the index
/// of the one with the lower effective load; a tie goes to the first draw.
/// `None` when no node is eligible.
pub fn choose(nodes: &[NodeInfo], tick_budget: Duration, room_size_estimate: u32, draws: [u64; 2]) -> Option<usize> {
    let eligible: Vec<usize> = (0..nodes.len()).filter(|&i| nodes[i].eligible(tick_budget)).collect();
    match eligible.len() {
        0 => None,
        1 => Some(eligible[0]),
        n => {
            let first = (draws[0] % n as u64) as usize;
            // The second draw picks among the others, so the two differ.
            let mut second = (draws[1] % (n as u64 - 1)) as usize;
            if second >= first {
                second += 1;
            }
            let (a, b) = (eligible[first], eligible[second]);
            let load = |i: usize| nodes[i].effective_load(tick_budget, room_size_estimate);
            Some(if load(b) < load(a) { b } else { a })
        }
    }
}

/// Where a join of a spread room goes: among the eligible nodes that
/// `allowed` admits, the one with the least [`NodeInfo::join_load`]; a tie
/// goes to `prefer` (the node choosing: no redirect), then to the smaller
/// id. `None` when none is eligible.
pub fn choose_for_join(
    nodes: &[NodeInfo],
    tick_budget: Duration,
    prefer: &str,
    allowed: impl Fn(&NodeInfo) -> bool,
) -> Option<usize> {
    let key = |n: &NodeInfo| (n.join_load(), n.id != prefer);
    (0..nodes.len()).filter(|&i| nodes[i].eligible(tick_budget) && allowed(&nodes[i])).min_by(|&a, &b| {
        let (la, pa) = key(&nodes[a]);
        let (lb, pb) = key(&nodes[b]);
        la.total_cmp(&lb).then(pa.cmp(&pb)).then(nodes[a].id.cmp(&nodes[b].id))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: Duration = Duration::from_millis(20);

    fn node(id: &str, participants: u32, placements: u32) -> NodeInfo {
        NodeInfo {
            id: id.into(),
            api_url: format!("http://{id}"),
            media_addr: String::new(),
            sip_addr: String::new(),
            state: NodeState::Serving,
            load: Load { participants, ..Load::default() },
            capacity: 100,
            placements,
            joins: 0,
            mesh_addr: None,
            number: None,
        }
    }

    #[test]
    fn joins_go_to_the_fewest_participants_ties_to_the_chooser() {
        let mut nodes = vec![node("a", 3, 0), node("b", 2, 9), node("c", 2, 0)];
        // Room placements do not count; participants do; a tie goes to the chooser, then the smaller id.
        assert_eq!(choose_for_join(&nodes, BUDGET, "a", |_| true), Some(1));
        assert_eq!(choose_for_join(&nodes, BUDGET, "c", |_| true), Some(2));
        nodes[1].joins = 1;
        assert_eq!(choose_for_join(&nodes, BUDGET, "a", |_| true), Some(2), "b has a join pending");
        assert_eq!(choose_for_join(&nodes, BUDGET, "a", |n| n.id != "c"), Some(0), "a tie: the chooser");
        // Full or draining nodes are never chosen.
        nodes[2].load.busiest_thread_cpu = 1.0;
        nodes[0].state = NodeState::Draining;
        assert_eq!(choose_for_join(&nodes, BUDGET, "a", |_| true), Some(1));
        assert_eq!(choose_for_join(&nodes, BUDGET, "a", |n| n.id == "c"), None);
    }

    #[test]
    fn load_is_the_worst_of_three_figures_plus_pending_placements() {
        let mut n = node("a", 30, 0);
        assert!((n.effective_load(BUDGET, 4) - 0.3).abs() < 1e-9);
        n.load.busiest_thread_cpu = 0.5;
        assert!((n.effective_load(BUDGET, 4) - 0.5).abs() < 1e-6);
        n.load.tick_p99 = Duration::from_millis(14);
        assert!((n.effective_load(BUDGET, 4) - 0.7).abs() < 1e-6);
        n.placements = 5;
        assert!((n.effective_load(BUDGET, 4) - 0.9).abs() < 1e-6);
    }

    #[test]
    fn the_lighter_of_the_two_draws_wins_and_draws_differ() {
        let nodes = [node("a", 10, 0), node("b", 50, 0), node("c", 90, 0)];
        // Every pair of draws: never the heaviest of the two.
        for d0 in 0..3 {
            for d1 in 0..2 {
                let i = choose(&nodes, BUDGET, 4, [d0, d1]).expect("eligible nodes");
                assert_ne!(i, 2, "draws {d0},{d1} chose the heaviest");
            }
        }
        // Same index drawn twice cannot happen: (0, 0) means a and b.
        assert_eq!(choose(&nodes, BUDGET, 4, [0, 0]), Some(0));
        assert_eq!(choose(&nodes, BUDGET, 4, [2, 1]), Some(1));
    }

    #[test]
    fn draining_and_full_nodes_are_not_eligible() {
        let mut nodes = vec![node("a", 100, 0), node("b", 10, 0), node("c", 10, 30)];
        nodes[1].state = NodeState::Draining;
        // c's pending placements rank it but do not exclude it.
        assert_eq!(choose(&nodes, BUDGET, 4, [7, 9]), Some(2));
        nodes[2].load.busiest_thread_cpu = 1.0;
        assert_eq!(choose(&nodes, BUDGET, 4, [7, 9]), None);
        assert_eq!(choose(&[], BUDGET, 4, [1, 2]), None);
    }

    #[test]
    fn pending_placements_spread_a_burst() {
        // Three idle nodes; place 30 rooms without heartbeats in between.
        let mut nodes = vec![node("a", 0, 0), node("b", 0, 0), node("c", 0, 0)];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..30 {
            let i = choose(&nodes, BUDGET, 4, [next(), next()]).expect("eligible");
            nodes[i].placements += 1;
        }
        let counts: Vec<u32> = nodes.iter().map(|n| n.placements).collect();
        assert!(counts.iter().all(|&c| (8..=12).contains(&c)), "uneven spread {counts:?}");
    }
}
