//! Counters the server exports as `tutti_cluster_*`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::control::ControlRefusal;

const REFUSALS: usize = ControlRefusal::ALL.len();

/// Upper bounds (seconds) of the Redis latency histogram's buckets.
pub const LATENCY_BUCKETS_SECONDS: [f64; 10] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5];

/// A snapshot of the cluster's counters and gauges.
///
/// Suggested Prometheus names are given per field; counters only grow.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterStats {
    /// `tutti_cluster_redis_up` (gauge 0/1): the last Redis operation succeeded.
    pub redis_up: bool,
    /// `tutti_cluster_nodes` (gauge): live nodes seen at the last heartbeat, this one included.
    pub nodes_seen: u64,
    /// `tutti_cluster_nodes_lost_total`: nodes seen at one heartbeat and gone at a later one.
    pub nodes_lost_total: u64,
    /// `tutti_cluster_rooms_owned` (gauge): rooms whose lease this node holds.
    pub rooms_owned: u64,
    /// `tutti_cluster_claims_total{outcome="claimed"}`: a new epoch taken (for this node or, by placement, another).
    pub claims_claimed_total: u64,
    /// `tutti_cluster_claims_total{outcome="owned"}`: this node already held the room.
    pub claims_already_owned_total: u64,
    /// `tutti_cluster_claims_total{outcome="elsewhere"}`: another live node holds it.
    pub claims_elsewhere_total: u64,
    /// `tutti_cluster_claims_total{outcome="dead_target"}`: the chosen node vanished before the claim.
    pub claims_dead_target_total: u64,
    /// `tutti_cluster_claims_total{outcome="error"}`: Redis failed.
    pub claims_failed_total: u64,
    /// `tutti_cluster_lease_renewals_total`: leases extended or restored.
    pub renewals_total: u64,
    /// `tutti_cluster_fenced_total`: rooms this node lost to another owner.
    pub fenced_total: u64,
    /// `tutti_cluster_fenced_dropped_total`: fencing notices the full channel could not take.
    pub fenced_dropped_total: u64,
    /// `tutti_cluster_redirects_total`: redirects the server answered (it counts them with
    /// [`Cluster::record_redirect`](crate::Cluster::record_redirect)).
    pub redirects_total: u64,
    /// `tutti_cluster_tickets_minted_total`.
    pub tickets_minted_total: u64,
    /// `tutti_cluster_tickets_accepted_total`.
    pub tickets_accepted_total: u64,
    /// `tutti_cluster_tickets_refused_total`: bad, expired, replayed or uncheckable tickets.
    pub tickets_refused_total: u64,
    /// `tutti_cluster_heartbeats_total`: registry entries written.
    pub heartbeats_total: u64,
    /// `tutti_cluster_heartbeat_failures_total`.
    pub heartbeat_failures_total: u64,
    /// `tutti_cluster_events_published_total`: room events sent to other nodes.
    pub events_published_total: u64,
    /// `tutti_cluster_events_dropped_total`: room events lost to a full queue or an unreachable Redis.
    pub events_dropped_total: u64,
    /// `tutti_cluster_events_delivered_total`: room events from other nodes handed to watchers here.
    pub events_delivered_total: u64,
    /// `tutti_cluster_events_refused_total`: room events received without a
    /// valid signature, or too old (dropped before any watcher).
    pub events_refused_total: u64,
    /// `tutti_cluster_rooms_watched` (gauge): rooms held elsewhere watched from here.
    pub rooms_watched: u64,
    /// `tutti_cluster_control_published_total`: room control messages sent to the span's other nodes.
    pub control_published_total: u64,
    /// `tutti_cluster_control_dropped_total`: control messages lost to a full queue or an unreachable Redis.
    pub control_dropped_total: u64,
    /// `tutti_cluster_control_refused_total{reason}`: control messages received and refused,
    /// per [`ControlRefusal`] (in the order of [`ControlRefusal::ALL`]).
    pub control_refused_total: [u64; REFUSALS],
    /// `tutti_cluster_redis_errors_total`: failed or timed-out Redis operations.
    pub redis_errors_total: u64,
    /// `tutti_cluster_node_records_rejected_total`: node records read that were
    /// not signed with the cluster's key (ignored: never placed on nor redirected to).
    pub node_records_rejected_total: u64,
    /// `tutti_cluster_node_number_conflicts_total`: node numbers found in
    /// another live node's signed record: skipped at start, or (a node that
    /// shares its number) reported by the registry scan.
    pub node_number_conflicts_total: u64,
    /// `tutti_cluster_room_configs_rejected_total`: stored room configs read
    /// without a valid signature (ignored: the room gets the defaults).
    pub room_configs_rejected_total: u64,
    /// `tutti_cluster_redis_latency_seconds` histogram: count of successful operations.
    pub redis_latency_count: u64,
    /// … and their summed duration in seconds.
    pub redis_latency_sum_seconds: f64,
    /// … and cumulative counts per bound of [`LATENCY_BUCKETS_SECONDS`] (`le`).
    pub redis_latency_buckets: [u64; LATENCY_BUCKETS_SECONDS.len()],
}

/// Whether a [`Sample`] only grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleKind {
    /// Only grows (export with `counter!(…).absolute(value)`).
    Counter,
    /// Goes up and down (export with `gauge!(…).set(value)`).
    Gauge,
}

/// One exported value: the names live here, once, so every node exports the same.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Prometheus name, `tutti_cluster_…`.
    pub name: &'static str,
    /// One label, if any (`outcome` of claims).
    pub label: Option<(&'static str, &'static str)>,
    /// Counter or gauge.
    pub kind: SampleKind,
    /// The value.
    pub value: f64,
    /// One line of help text.
    pub help: &'static str,
}

impl ClusterStats {
    /// Every figure as a named sample, for the server's exporter. Redis
    /// latency is exported as operations and seconds spent (mean =
    /// `rate(seconds) / rate(operations)`); the buckets stay in the struct
    /// for an exporter that renders histograms itself.
    pub fn samples(&self) -> Vec<Sample> {
        use SampleKind::{Counter, Gauge};
        let s = |name, label, kind, value: u64, help| Sample { name, label, kind, value: value as f64, help };
        let claims = "tutti_cluster_claims_total";
        let claims_help = "Room claims by outcome.";
        let refused_help = "Room control messages from other nodes refused, by reason.";
        let refused = ControlRefusal::ALL.iter().map(|r| {
            let value = self.control_refused_total[r.index()];
            s("tutti_cluster_control_refused_total", Some(("reason", r.as_str())), Counter, value, refused_help)
        });
        let mut all = vec![
            s(
                "tutti_cluster_redis_up",
                None,
                Gauge,
                u64::from(self.redis_up),
                "1 when the last Redis operation succeeded.",
            ),
            s("tutti_cluster_nodes", None, Gauge, self.nodes_seen, "Live nodes seen, this one included."),
            s("tutti_cluster_nodes_lost_total", None, Counter, self.nodes_lost_total, "Nodes that disappeared."),
            s("tutti_cluster_rooms_owned", None, Gauge, self.rooms_owned, "Rooms whose lease this node holds."),
            s(claims, Some(("outcome", "claimed")), Counter, self.claims_claimed_total, claims_help),
            s(claims, Some(("outcome", "owned")), Counter, self.claims_already_owned_total, claims_help),
            s(claims, Some(("outcome", "elsewhere")), Counter, self.claims_elsewhere_total, claims_help),
            s(claims, Some(("outcome", "dead_target")), Counter, self.claims_dead_target_total, claims_help),
            s(claims, Some(("outcome", "error")), Counter, self.claims_failed_total, claims_help),
            s("tutti_cluster_lease_renewals_total", None, Counter, self.renewals_total, "Leases extended or restored."),
            s("tutti_cluster_fenced_total", None, Counter, self.fenced_total, "Rooms lost to another owner."),
            s(
                "tutti_cluster_fenced_dropped_total",
                None,
                Counter,
                self.fenced_dropped_total,
                "Fencing notices dropped.",
            ),
            s("tutti_cluster_redirects_total", None, Counter, self.redirects_total, "Redirects to other nodes."),
            s(
                "tutti_cluster_tickets_minted_total",
                None,
                Counter,
                self.tickets_minted_total,
                "Redirect tickets minted.",
            ),
            s("tutti_cluster_tickets_accepted_total", None, Counter, self.tickets_accepted_total, "Tickets accepted."),
            s("tutti_cluster_tickets_refused_total", None, Counter, self.tickets_refused_total, "Tickets refused."),
            s("tutti_cluster_heartbeats_total", None, Counter, self.heartbeats_total, "Registry entries written."),
            s(
                "tutti_cluster_heartbeat_failures_total",
                None,
                Counter,
                self.heartbeat_failures_total,
                "Failed heartbeats.",
            ),
            s("tutti_cluster_events_published_total", None, Counter, self.events_published_total, "Room events sent."),
            s("tutti_cluster_events_dropped_total", None, Counter, self.events_dropped_total, "Room events dropped."),
            s(
                "tutti_cluster_events_delivered_total",
                None,
                Counter,
                self.events_delivered_total,
                "Room events received.",
            ),
            s(
                "tutti_cluster_events_refused_total",
                None,
                Counter,
                self.events_refused_total,
                "Room events dropped: not signed with the cluster's key, or too old.",
            ),
            s("tutti_cluster_rooms_watched", None, Gauge, self.rooms_watched, "Rooms held elsewhere watched here."),
            s("tutti_cluster_redis_errors_total", None, Counter, self.redis_errors_total, "Failed Redis operations."),
            s(
                "tutti_cluster_node_records_rejected_total",
                None,
                Counter,
                self.node_records_rejected_total,
                "Node records ignored: not signed with the cluster's key.",
            ),
            s(
                "tutti_cluster_node_number_conflicts_total",
                None,
                Counter,
                self.node_number_conflicts_total,
                "Node numbers found held by another live node.",
            ),
            s(
                "tutti_cluster_room_configs_rejected_total",
                None,
                Counter,
                self.room_configs_rejected_total,
                "Stored room configs ignored: not signed with the cluster's key.",
            ),
            s(
                "tutti_cluster_redis_operations_total",
                None,
                Counter,
                self.redis_latency_count,
                "Redis operations that succeeded.",
            ),
            Sample {
                name: "tutti_cluster_redis_operation_seconds_total",
                label: None,
                kind: Counter,
                value: self.redis_latency_sum_seconds,
                help: "Time spent in successful Redis operations.",
            },
            s(
                "tutti_cluster_control_published_total",
                None,
                Counter,
                self.control_published_total,
                "Room control messages sent to the other nodes of rooms' spans.",
            ),
            s(
                "tutti_cluster_control_dropped_total",
                None,
                Counter,
                self.control_dropped_total,
                "Room control messages dropped (queue full, Redis away).",
            ),
        ];
        all.extend(refused);
        all
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    pub redis_up: AtomicBool,
    pub nodes_seen: AtomicU64,
    pub nodes_lost: AtomicU64,
    pub claimed: AtomicU64,
    pub already_owned: AtomicU64,
    pub elsewhere: AtomicU64,
    pub dead_target: AtomicU64,
    pub claim_failed: AtomicU64,
    pub renewals: AtomicU64,
    pub fenced: AtomicU64,
    pub fenced_dropped: AtomicU64,
    pub redirects: AtomicU64,
    pub tickets_minted: AtomicU64,
    pub tickets_accepted: AtomicU64,
    pub tickets_refused: AtomicU64,
    pub heartbeats: AtomicU64,
    pub heartbeat_failures: AtomicU64,
    pub redis_errors: AtomicU64,
    pub node_records_rejected: AtomicU64,
    pub node_number_conflicts: AtomicU64,
    pub room_configs_rejected: AtomicU64,
    pub control_refused: [AtomicU64; REFUSALS],
    latency_count: AtomicU64,
    latency_sum_nanos: AtomicU64,
    latency_buckets: [AtomicU64; LATENCY_BUCKETS_SECONDS.len()],
}

impl Counters {
    pub fn observe_latency(&self, d: Duration) {
        self.latency_count.fetch_add(1, Relaxed);
        self.latency_sum_nanos.fetch_add(d.as_nanos().min(u128::from(u64::MAX)) as u64, Relaxed);
        let s = d.as_secs_f64();
        for (bound, bucket) in LATENCY_BUCKETS_SECONDS.iter().zip(&self.latency_buckets) {
            if s <= *bound {
                bucket.fetch_add(1, Relaxed);
            }
        }
    }

    pub fn snapshot(&self, rooms_owned: u64) -> ClusterStats {
        let get = |a: &AtomicU64| a.load(Relaxed);
        ClusterStats {
            redis_up: self.redis_up.load(Relaxed),
            nodes_seen: get(&self.nodes_seen),
            nodes_lost_total: get(&self.nodes_lost),
            rooms_owned,
            claims_claimed_total: get(&self.claimed),
            claims_already_owned_total: get(&self.already_owned),
            claims_elsewhere_total: get(&self.elsewhere),
            claims_dead_target_total: get(&self.dead_target),
            claims_failed_total: get(&self.claim_failed),
            renewals_total: get(&self.renewals),
            fenced_total: get(&self.fenced),
            fenced_dropped_total: get(&self.fenced_dropped),
            redirects_total: get(&self.redirects),
            tickets_minted_total: get(&self.tickets_minted),
            tickets_accepted_total: get(&self.tickets_accepted),
            tickets_refused_total: get(&self.tickets_refused),
            heartbeats_total: get(&self.heartbeats),
            heartbeat_failures_total: get(&self.heartbeat_failures),
            events_published_total: 0,
            events_dropped_total: 0,
            events_delivered_total: 0,
            events_refused_total: 0,
            rooms_watched: 0,
            control_published_total: 0,
            control_dropped_total: 0,
            control_refused_total: std::array::from_fn(|i| get(&self.control_refused[i])),
            redis_errors_total: get(&self.redis_errors),
            node_records_rejected_total: get(&self.node_records_rejected),
            node_number_conflicts_total: get(&self.node_number_conflicts),
            room_configs_rejected_total: get(&self.room_configs_rejected),
            redis_latency_count: get(&self.latency_count),
            redis_latency_sum_seconds: get(&self.latency_sum_nanos) as f64 / 1e9,
            redis_latency_buckets: std::array::from_fn(|i| get(&self.latency_buckets[i])),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_buckets_are_cumulative() {
        let c = Counters::default();
        c.observe_latency(Duration::from_micros(300));
        c.observe_latency(Duration::from_millis(3));
        c.observe_latency(Duration::from_secs(2));
        let s = c.snapshot(0);
        assert_eq!(s.redis_latency_count, 3);
        assert_eq!(s.redis_latency_buckets[0], 1);
        assert_eq!(s.redis_latency_buckets[3], 2);
        assert_eq!(s.redis_latency_buckets[9], 2);
        assert!((s.redis_latency_sum_seconds - 2.0033).abs() < 1e-6);
    }

    #[test]
    fn samples_are_named_by_the_convention() {
        let samples = Counters::default().snapshot(3).samples();
        for x in &samples {
            assert!(x.name.starts_with("tutti_cluster_"), "{}", x.name);
            assert_eq!(x.kind == SampleKind::Counter, x.name.ends_with("_total"), "{}", x.name);
            assert!(!x.name.contains("_ms"));
        }
        let owned = samples.iter().find(|x| x.name == "tutti_cluster_rooms_owned").expect("present");
        assert_eq!(owned.value, 3.0);
    }
}
