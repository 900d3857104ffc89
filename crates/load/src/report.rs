//! Turning what the threads measured into figures: the periodic summary, the
//! final per-client details, mouth-to-ear latencies from the probes, the
//! validity verdict, and the JSON report.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::cpu::CpuUse;
use crate::marker::SELF_ECHO_THRESHOLD;
use crate::model::{
    ClientSnapshot, ClientState, Detection, Lateness, LoadConfig, MarkerSent, Role, SilenceMode, ThreadView,
};
use crate::quality::mos;

/// A marker counts as heard when its onset is detected within this time.
const MATCH_WINDOW: Duration = Duration::from_millis(1500);
/// Slack before the send instant (the detector's onset estimate is ±1 ms).
const MATCH_EARLY: Duration = Duration::from_millis(20);
/// A run is invalid when the generator's p99 send-tick lateness exceeds this (ms).
pub const MAX_P99_LATENESS_MS: f64 = 10.0;
/// … or when one of its `load-N` threads used more than this share of a core.
pub const MAX_THREAD_BUSY: f64 = 0.9;
/// Above this share of the whole machine busy, a run is flagged as contended.
const MACHINE_SATURATED: f64 = 0.95;
/// A client delivered "perfectly" may be this many frames short of a 20 ms
/// clock (the edges of the window; a frame in flight).
const PERFECT_SLACK_FRAMES: u64 = 3;

/// Average, minimum and maximum over clients.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Stat {
    /// Mean.
    pub avg: f64,
    /// Least.
    pub min: f64,
    /// Most.
    pub max: f64,
}

impl Stat {
    fn of(values: impl IntoIterator<Item = f64>) -> Self {
        let (mut n, mut sum, mut min, mut max) = (0usize, 0.0, f64::INFINITY, f64::NEG_INFINITY);
        for v in values {
            n += 1;
            sum += v;
            min = min.min(v);
            max = max.max(v);
        }
        if n == 0 { Self::default() } else { Self { avg: sum / n as f64, min, max } }
    }
}

/// Mouth-to-ear latency, from the probes' markers.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LatencyStat {
    /// Marker × listener pairs judged (markers sent in the window, at least
    /// 1.5 s before the end, each with every decoding client connected then).
    pub pairs: usize,
    /// Pairs where the marker was never heard (within 1.5 s).
    pub missed: usize,
    /// Over the heard pairs, in ms.
    pub ms: Stat,
    /// Median, ms (missed pairs count as infinitely late).
    pub p50_ms: Option<f64>,
    /// 95th percentile, ms (missed pairs count as infinitely late).
    pub p95_ms: Option<f64>,
}

/// The generator's own health.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GeneratorHealth {
    /// Generator threads.
    pub threads: usize,
    /// Its CPU, in cores, over the window.
    pub cpu_cores: Option<f64>,
    /// Its CPU per joined client per 20 ms tick, µs.
    pub us_per_client_tick: Option<f64>,
    /// The busiest `load-N` thread, share of one core.
    pub busiest_thread: Option<f64>,
    /// Send slots fired (1 ms slots; 20 per frame per thread).
    pub slots: u64,
    /// Median send-slot lateness, ms.
    pub lateness_p50_ms: f64,
    /// 99th percentile send-slot lateness, ms.
    pub lateness_p99_ms: f64,
    /// Worst send-slot lateness, ms.
    pub lateness_max_ms: f64,
    /// How the clients read received audio: "lean" (tutti's own SRTP
    /// receive) or "rtc" (webrtc-rs's pipeline, `--rtc-receive`).
    pub receive_path: &'static str,
    /// Packets read on the lean receive path, all clients.
    pub lean_received: u64,
    /// Packets the lean receive path dropped (authentication, replay).
    pub lean_dropped: u64,
}

/// One summary: the whole room at one instant.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// Seconds since the run started.
    pub elapsed_s: f64,
    /// Seconds of measurement window so far (0: still warming up; figures
    /// then cover everything since each client connected).
    pub window_s: f64,
    /// Participants asked for.
    pub clients: usize,
    /// Not joined yet.
    pub joining: usize,
    /// Join request refused or failed.
    pub join_failed: usize,
    /// Why joins failed: each reason (e.g. `join refused: rate_limited …`)
    /// with how many joins it stopped.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub join_errors: BTreeMap<String, usize>,
    /// Joined, ICE/DTLS not up yet.
    pub connecting: usize,
    /// Connected.
    pub connected: usize,
    /// Closed or failed after connecting.
    pub closed: usize,
    /// Talkers (P.59), silent, probe talkers, probe listeners.
    pub roles: [usize; 4],
    /// Join request to ICE+DTLS up, ms, over connected clients.
    pub connect_ms: Stat,
    /// Drift delay at the latest packet, ms, over clients.
    pub drift_ms: Stat,
    /// Mouth-to-ear latency.
    pub latency: LatencyStat,
    /// Received packets per second, over clients.
    pub packets_per_second: Stat,
    /// Loss percent, over clients.
    pub loss_percent: Stat,
    /// All lost frames over all expected frames, percent.
    pub loss_total_percent: f64,
    /// RFC 3550 jitter, ms, over clients.
    pub jitter_ms: Stat,
    /// One-way delay put into the E-model besides each client's drift: the
    /// median mouth-to-ear latency (0 when none was measured).
    pub mos_one_way_ms: f64,
    /// 5th percentile MOS over clients (a client that receives nothing scores 1).
    pub mos_p5: f64,
    /// Median MOS over clients.
    pub mos_p50: f64,
    /// Standard deviation of frames received per client.
    pub frames_stddev: f64,
    /// Share of clients that received every frame (0..1).
    pub perfect_share: f64,
    /// Probe talkers that heard their own marker.
    pub self_echo: usize,
    /// Markers the probe talkers sent (in the window).
    pub markers_sent: usize,
    /// Clients whose packets carry no RFC 6464 level.
    pub without_level: usize,
    /// Every room (one entry for a single-room run).
    pub rooms: Vec<RoomSummary>,
    /// Index into `rooms` of the worst: lowest p5 MOS, then most loss.
    pub worst_room: Option<usize>,
    /// The room WebSockets' traffic (`None`: no client holds one).
    pub ws: Option<WsSummary>,
    /// Calls that moved between nodes (a cluster's hand-over) and how.
    pub handover: HandoverSummary,
    /// The generator's own CPU and timing.
    pub generator: GeneratorHealth,
    /// The server's CPU in cores over the window, when readable.
    pub server_cpu_cores: Option<f64>,
    /// The server's CPU per connected participant per 20 ms tick, µs.
    pub server_us_per_participant_tick: Option<f64>,
    /// The server's busiest threads (local server), share of a core.
    pub server_threads: Vec<(String, f64)>,
    /// The whole machine busy over the window (0..1).
    pub machine_busy: Option<f64>,
    /// Datagrams the kernel dropped on the server's media socket over the
    /// window (a server on this machine only): upstream loss the clients
    /// cannot see.
    pub server_udp_drops: Option<u64>,
    /// False when the generator, not the server, limited the run.
    pub valid: bool,
    /// Why the run is invalid.
    pub invalid_reasons: Vec<String>,
    /// Things worth knowing that do not invalidate the run.
    pub warnings: Vec<String>,
}

/// One room's figures (the fleet's rooms are judged one by one: the worst
/// room matters, not only the average).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RoomSummary {
    /// Index of the room in the run.
    pub room: usize,
    /// Its name.
    pub name: String,
    /// Participants planned for it.
    pub size: usize,
    /// Connected now.
    pub connected: usize,
    /// All lost frames over all expected frames of its clients, percent.
    pub loss_percent: f64,
    /// RFC 3550 jitter over its receiving clients, ms (avg).
    pub jitter_ms: f64,
    /// Largest drift delay of its clients, ms.
    pub drift_max_ms: f64,
    /// 5th percentile MOS of its clients.
    pub mos_p5: f64,
    /// Share of its clients with perfect delivery (0..1).
    pub perfect_share: f64,
    /// Fewest packets per second one of its clients received.
    pub packets_per_second_min: f64,
}

/// Calls that moved between nodes: a drain handed a room over (`moved`),
/// or a node closed a call, and the client rejoined through the cluster.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HandoverSummary {
    /// Moves begun (a client can move more than once).
    pub moves: u64,
    /// Moves completed: the client joined again, with the same identity.
    pub rejoins: u64,
    /// Of those, through a `moved` ticket (the page's way); the others
    /// joined through a node with the run's token (a call closed by its
    /// node, or no ticket).
    pub ticket_rejoins: u64,
    /// Clients that moved at least once.
    pub clients_moved: usize,
    /// Clients that could not rejoin (every try failed): lost calls.
    pub lost_calls: usize,
    /// Clients still rejoining when the figures were taken.
    pub rejoining: usize,
    /// Gaps measured (completed moves whose new call delivered audio; moves
    /// in a row with no audio between them make one gap).
    pub gaps: usize,
    /// Audio gap per move, ms: from the last packet before to the first after (median).
    pub gap_p50_ms: Option<f64>,
    /// 95th percentile of the gap, ms.
    pub gap_p95_ms: Option<f64>,
    /// Longest gap, ms.
    pub gap_max_ms: Option<f64>,
}

impl HandoverSummary {
    fn of(clients: &[ClientSnapshot]) -> Self {
        let mut gaps: Vec<f64> = clients.iter().flat_map(|c| c.gaps_ms.iter().copied()).collect();
        gaps.sort_by(f64::total_cmp);
        let moves: u64 = clients.iter().map(|c| u64::from(c.moves)).sum();
        let rejoins: u64 = clients.iter().map(|c| u64::from(c.rejoins)).sum();
        Self {
            moves,
            rejoins,
            ticket_rejoins: clients.iter().map(|c| u64::from(c.ticket_rejoins)).sum(),
            clients_moved: clients.iter().filter(|c| c.moves > 0).count(),
            lost_calls: clients.iter().filter(|c| c.lost_call).count(),
            rejoining: clients.iter().filter(|c| !c.lost_call && c.moves > c.rejoins).count(),
            gaps: gaps.len(),
            gap_p50_ms: percentile(&gaps, 0.5),
            gap_p95_ms: percentile(&gaps, 0.95),
            gap_max_ms: gaps.last().copied(),
        }
    }

    /// One line for the text summary.
    pub fn to_text(&self) -> String {
        let ms = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:.0}"));
        format!(
            "hand-over: {} moves of {} clients, {} rejoined ({} with the moved ticket), {} lost calls, {} rejoining | audio gap per move ms p50/p95/max {}/{}/{} ({} gaps)",
            self.moves,
            self.clients_moved,
            self.rejoins,
            self.ticket_rejoins,
            self.lost_calls,
            self.rejoining,
            ms(self.gap_p50_ms),
            ms(self.gap_p95_ms),
            ms(self.gap_max_ms),
            self.gaps
        )
    }
}

/// The room WebSockets' event traffic (clients that hold one).
#[derive(Debug, Clone, Default, Serialize)]
pub struct WsSummary {
    /// Sockets opened (joins through a WebSocket).
    pub sockets: usize,
    /// Still open.
    pub open: usize,
    /// Sockets that received the `room` snapshot.
    pub snapshots: usize,
    /// Messages received per socket per second.
    pub messages_per_second: Stat,
    /// Payload bytes received per socket per second.
    pub bytes_per_second: Stat,
    /// Messages received by all sockets (in the window once it has begun).
    pub messages: u64,
    /// Payload bytes received by all sockets.
    pub bytes: u64,
}

/// One client at the end, with its MOS.
#[derive(Debug, Clone, Serialize)]
pub struct ClientReport {
    /// Its figures.
    #[serde(flatten)]
    pub figures: ClientSnapshot,
    /// Its MOS (E-model on the run's median mouth-to-ear plus its drift,
    /// its jitter and its loss).
    pub mos: f64,
    /// Whether it received every frame.
    pub perfect: bool,
}

/// The settings of a run, as reported.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigEcho {
    /// Server API.
    pub url: String,
    /// Room (the base name with several rooms).
    pub room: String,
    /// How clients were split into rooms.
    pub layout: String,
    /// Rooms.
    pub rooms: usize,
    /// Rooms with probes.
    pub probe_rooms: usize,
    /// Clients joined through and held the room's WebSocket.
    pub websocket: bool,
    /// Share of clients sending no audio level.
    pub no_level_share: f64,
    /// Share of clients over ICE-TCP (the rest over UDP).
    pub tcp_share: f64,
    /// Participants.
    pub clients: usize,
    /// Join interval, ms.
    pub cint_ms: u64,
    /// Run time, s (0: until stopped).
    pub life_s: f64,
    /// Warm-up after the last join, s.
    pub warmup_s: f64,
    /// Talker share.
    pub talkers: f64,
    /// What silent clients send.
    pub silence: SilenceMode,
    /// Probe talkers.
    pub probe_talkers: usize,
    /// Probe listeners.
    pub probe_listeners: usize,
    /// Marker period, ms.
    pub marker_period_ms: u64,
    /// Generator threads.
    pub threads: usize,
    /// Seed.
    pub seed: u64,
}

/// Everything a load run reports at its end (also written as JSON).
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// What was run.
    pub config: ConfigEcho,
    /// The final summary.
    pub summary: Summary,
    /// Every client.
    pub clients: Vec<ClientReport>,
    /// Every measured mouth-to-ear latency, ms.
    pub latencies_ms: Vec<f64>,
    /// Per node of a cluster (the API addresses that answered the joins).
    pub nodes: Vec<crate::model::NodeSummary>,
    /// Mouth-to-ear by where talker and listener joined (runs across nodes).
    pub latency_by_node: Option<NodeLatency>,
}

/// What a summary is computed from.
pub(crate) struct RunState<'a> {
    pub(crate) cfg: &'a LoadConfig,
    pub(crate) start: Instant,
    pub(crate) now: Instant,
    pub(crate) window_start: Option<Instant>,
    pub(crate) views: &'a [ThreadView],
    /// The rooms' names and planned sizes.
    pub(crate) room_names: &'a [String],
    pub(crate) room_sizes: &'a [usize],
    /// Join failures: index, room, role, error.
    pub(crate) failed: Vec<(usize, usize, Role, String)>,
    pub(crate) total: usize,
    pub(crate) markers: &'a [MarkerSent],
    pub(crate) detections: &'a [Detection],
    pub(crate) cpu: Option<CpuUse>,
    pub(crate) threads: usize,
}

/// The `q`-quantile (0..1) of sorted values by nearest rank.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// Mouth-to-ear latencies in ms (`None`: missed) of every marker × decoding
/// client pair that can be judged at `now`.
fn latencies(s: &RunState<'_>, clients: &[ClientSnapshot]) -> Vec<Option<f64>> {
    latency_pairs(s, clients).into_iter().map(|(_, _, l)| l).collect()
}

/// [`latencies`] with each pair's probe talker and listener (client indices).
fn latency_pairs(s: &RunState<'_>, clients: &[ClientSnapshot]) -> Vec<(usize, usize, Option<f64>)> {
    let mut heard: HashMap<(usize, usize), Vec<Instant>> = HashMap::new();
    for d in s.detections {
        heard.entry((d.listener, d.probe)).or_default().push(d.at);
    }
    for v in heard.values_mut() {
        v.sort();
    }
    let decoders: Vec<&ClientSnapshot> =
        clients.iter().filter(|c| matches!(c.role, Role::ProbeTalker | Role::ProbeListener)).collect();
    // Probes are heard in their own room only.
    let mut out = Vec::new();
    for m in s.markers {
        if s.window_start.is_some_and(|w| m.at < w) || m.at + MATCH_WINDOW > s.now {
            continue;
        }
        for c in &decoders {
            if c.index == m.client || c.room != m.room || c.connected_at.is_none_or(|t| t > m.at) {
                continue;
            }
            let times = heard.get(&(c.index, m.probe)).map_or(&[][..], Vec::as_slice);
            let from = m.at.checked_sub(MATCH_EARLY).unwrap_or(m.at);
            let i = times.partition_point(|&t| t < from);
            let hit = times.get(i).filter(|&&t| t <= m.at + MATCH_WINDOW);
            out.push((
                m.client,
                c.index,
                hit.map(|&t| {
                    if t >= m.at { (t - m.at).as_secs_f64() * 1000.0 } else { -((m.at - t).as_secs_f64() * 1000.0) }
                }),
            ));
        }
    }
    out
}

/// The latency figures of some marker × listener pairs.
fn latency_stat(lat: &[Option<f64>]) -> LatencyStat {
    let heard: Vec<f64> = lat.iter().flatten().copied().collect();
    let mut with_missed: Vec<f64> = lat.iter().map(|l| l.unwrap_or(f64::INFINITY)).collect();
    with_missed.sort_by(f64::total_cmp);
    LatencyStat {
        pairs: lat.len(),
        missed: lat.iter().filter(|l| l.is_none()).count(),
        ms: Stat::of(heard.iter().copied()),
        p50_ms: percentile(&with_missed, 0.5),
        p95_ms: percentile(&with_missed, 0.95),
    }
}

/// Mouth-to-ear of a run across nodes, split by where the probe talker
/// joined against where its listener did (`node_of`: a client's node):
/// `(same node, another node)`; pairs whose nodes are unknown are left out.
pub(crate) fn latency_by_node(
    s: &RunState<'_>,
    node_of: impl Fn(usize) -> Option<std::net::SocketAddr>,
) -> NodeLatency {
    let clients = all_clients(s);
    let (mut same, mut other) = (Vec::new(), Vec::new());
    for (talker, listener, l) in latency_pairs(s, &clients) {
        match (node_of(talker), node_of(listener)) {
            (Some(a), Some(b)) if a == b => same.push(l),
            (Some(_), Some(_)) => other.push(l),
            _ => {}
        }
    }
    NodeLatency { same_node: latency_stat(&same), other_node: latency_stat(&other) }
}

/// Mouth-to-ear in a room across nodes: pairs whose probe talker and
/// listener joined on the same node, and on different nodes.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NodeLatency {
    /// Talker and listener on one node.
    pub same_node: LatencyStat,
    /// Talker and listener on different nodes (the talker's frames cross the mesh).
    pub other_node: LatencyStat,
}

impl NodeLatency {
    /// One line: p50/p95 (pairs, missed) for each kind of pair.
    pub fn to_text(&self) -> String {
        let one = |l: &LatencyStat| {
            let ms = |v: Option<f64>| {
                v.map_or("-".to_owned(), |v| if v.is_finite() { format!("{v:.1}") } else { "missed".to_owned() })
            };
            format!("p50/p95 {}/{} ms ({} pairs, {} missed)", ms(l.p50_ms), ms(l.p95_ms), l.pairs, l.missed)
        };
        format!(
            "mouth-to-ear, talker on the listener's node: {}; on another node: {}",
            one(&self.same_node),
            one(&self.other_node)
        )
    }
}

fn is_perfect(c: &ClientSnapshot) -> bool {
    c.state == ClientState::Connected
        && c.received > 0
        && c.lost == 0
        && c.frames_covered + PERFECT_SLACK_FRAMES >= c.frames_due
}

fn client_mos(c: &ClientSnapshot, one_way_ms: f64) -> f64 {
    if c.received == 0 {
        return mos(one_way_ms, 0.0, 100.0);
    }
    mos(one_way_ms + c.drift_ms.max(0.0), c.jitter_ms, c.loss_percent)
}

/// The clients known so far (joined ones from the threads, failed joins).
fn all_clients(s: &RunState<'_>) -> Vec<ClientSnapshot> {
    let mut clients: Vec<ClientSnapshot> = s.views.iter().flat_map(|v| v.clients.iter().cloned()).collect();
    for (index, room, role, error) in &s.failed {
        clients.push(ClientSnapshot {
            index: *index,
            room: *room,
            level: true,
            ws: None,
            role: *role,
            state: ClientState::JoinFailed,
            connect_ms: None,
            sent: 0,
            received: 0,
            expected: 0,
            lost: 0,
            loss_percent: 100.0,
            jitter_ms: 0.0,
            drift_ms: 0.0,
            max_drift_ms: 0.0,
            packets_per_second: 0.0,
            frames_due: 0,
            frames_covered: 0,
            own_marker_peak: None,
            markers_heard: 0,
            moves: 0,
            rejoins: 0,
            ticket_rejoins: 0,
            lost_call: false,
            gaps_ms: Vec::new(),
            error: Some(error.clone()),
            connected_at: None,
            lean_receive: (0, 0),
        });
    }
    clients.sort_by_key(|c| c.index);
    clients
}

fn summarize_clients(s: &RunState<'_>, clients: &[ClientSnapshot], lat: &[Option<f64>]) -> Summary {
    let count = |st: ClientState| clients.iter().filter(|c| c.state == st).count();
    let joined: Vec<&ClientSnapshot> = clients.iter().filter(|c| c.state != ClientState::JoinFailed).collect();
    let receiving: Vec<&&ClientSnapshot> = joined.iter().filter(|c| c.received > 0).collect();

    let mut heard: Vec<f64> = lat.iter().flatten().copied().collect();
    heard.sort_by(f64::total_cmp);
    let latency = latency_stat(lat);
    let one_way = percentile(&heard, 0.5).unwrap_or(0.0);
    let mut mos_all: Vec<f64> = clients.iter().map(|c| client_mos(c, one_way)).collect();
    mos_all.sort_by(f64::total_cmp);

    let frames: Vec<f64> = joined.iter().map(|c| c.received as f64).collect();
    let mean = frames.iter().sum::<f64>() / frames.len().max(1) as f64;
    let var = frames.iter().map(|f| (f - mean).powi(2)).sum::<f64>() / frames.len().max(1) as f64;
    let (lost, expected): (u64, u64) = joined.iter().fold((0, 0), |(l, e), c| (l + c.lost, e + c.expected));

    let mut lateness = Lateness::default();
    for v in s.views {
        lateness.merge(&v.lateness);
    }
    let cpu = s.cpu.clone().unwrap_or_default();
    let busiest =
        cpu.generator_threads.iter().filter(|(n, _)| n.starts_with("load-")).map(|(_, v)| *v).reduce(f64::max);
    let generator = GeneratorHealth {
        threads: s.threads,
        cpu_cores: cpu.generator_cores,
        us_per_client_tick: cpu
            .generator_cores
            .filter(|_| !joined.is_empty())
            .map(|c| c * 1e6 / 50.0 / joined.len() as f64),
        busiest_thread: busiest,
        slots: lateness.count(),
        lateness_p50_ms: lateness.quantile_ms(0.5),
        lateness_p99_ms: lateness.quantile_ms(0.99),
        lateness_max_ms: lateness.max_ms(),
        receive_path: if s.cfg.rtc_receive { "rtc" } else { "lean" },
        lean_received: clients.iter().map(|c| c.lean_receive.0).sum(),
        lean_dropped: clients.iter().map(|c| c.lean_receive.1).sum(),
    };
    let connected = count(ClientState::Connected);
    let mut invalid_reasons = Vec::new();
    if generator.lateness_p99_ms > MAX_P99_LATENESS_MS {
        invalid_reasons.push(format!(
            "generator send ticks late: p99 {:.1} ms > {MAX_P99_LATENESS_MS} ms",
            generator.lateness_p99_ms
        ));
    }
    if let Some(b) = busiest.filter(|&b| b > MAX_THREAD_BUSY) {
        invalid_reasons.push(format!(
            "a generator thread was {:.0} % busy (> {:.0} %)",
            100.0 * b,
            100.0 * MAX_THREAD_BUSY
        ));
    }
    let mut warnings = Vec::new();
    if let Some(m) = cpu.machine_busy.filter(|&m| m > MACHINE_SATURATED) {
        warnings.push(format!("the machine was {:.0} % busy: server and generator compete for CPU", 100.0 * m));
    }
    if latency.pairs == 0 && s.window_start.is_some() {
        warnings.push("no mouth-to-ear latency measured (no probe marker could be judged yet)".into());
    }
    let role_count = |r: Role| clients.iter().filter(|c| c.role == r).count();
    let rooms = room_summaries(s, clients, one_way);
    let worst_room = rooms
        .iter()
        .min_by(|a, b| a.mos_p5.total_cmp(&b.mos_p5).then(b.loss_percent.total_cmp(&a.loss_percent)))
        .map(|r| r.room);
    let ws = ws_summary(clients);
    let handover = HandoverSummary::of(clients);
    Summary {
        elapsed_s: s.now.saturating_duration_since(s.start).as_secs_f64(),
        window_s: s.window_start.map_or(0.0, |w| s.now.saturating_duration_since(w).as_secs_f64()),
        clients: s.total,
        joining: s.total.saturating_sub(clients.len()),
        join_failed: count(ClientState::JoinFailed),
        join_errors: s.failed.iter().fold(BTreeMap::new(), |mut m, (_, _, _, why)| {
            *m.entry(why.clone()).or_insert(0) += 1;
            m
        }),
        connecting: count(ClientState::Connecting),
        connected,
        closed: count(ClientState::Closed),
        roles: [
            role_count(Role::Talker),
            role_count(Role::Silent),
            role_count(Role::ProbeTalker),
            role_count(Role::ProbeListener),
        ],
        connect_ms: Stat::of(clients.iter().filter_map(|c| c.connect_ms)),
        drift_ms: Stat::of(receiving.iter().map(|c| c.drift_ms)),
        latency,
        packets_per_second: Stat::of(joined.iter().map(|c| c.packets_per_second)),
        loss_percent: Stat::of(joined.iter().map(|c| c.loss_percent)),
        loss_total_percent: if expected == 0 { 0.0 } else { 100.0 * lost as f64 / expected as f64 },
        jitter_ms: Stat::of(receiving.iter().map(|c| c.jitter_ms)),
        mos_one_way_ms: one_way,
        mos_p5: percentile(&mos_all, 0.05).unwrap_or(0.0),
        mos_p50: percentile(&mos_all, 0.5).unwrap_or(0.0),
        frames_stddev: var.sqrt(),
        perfect_share: if clients.is_empty() {
            0.0
        } else {
            clients.iter().filter(|c| is_perfect(c)).count() as f64 / s.total.max(clients.len()) as f64
        },
        self_echo: clients.iter().filter(|c| c.own_marker_peak.is_some_and(|p| p > SELF_ECHO_THRESHOLD)).count(),
        markers_sent: s.markers.iter().filter(|m| s.window_start.is_none_or(|w| m.at >= w)).count(),
        without_level: clients.iter().filter(|c| !c.level && c.state != ClientState::JoinFailed).count(),
        rooms,
        worst_room,
        ws,
        handover,
        generator,
        server_cpu_cores: cpu.server_cores,
        server_us_per_participant_tick: cpu
            .server_cores
            .filter(|_| connected > 0)
            .map(|c| c * 1e6 / 50.0 / connected as f64),
        server_threads: cpu.server_threads.iter().take(6).cloned().collect(),
        machine_busy: cpu.machine_busy,
        server_udp_drops: cpu.server_udp_drops,
        valid: invalid_reasons.is_empty(),
        invalid_reasons,
        warnings,
    }
}

fn room_summaries(s: &RunState<'_>, clients: &[ClientSnapshot], one_way: f64) -> Vec<RoomSummary> {
    let mut by_room: Vec<Vec<&ClientSnapshot>> = vec![Vec::new(); s.room_sizes.len()];
    for c in clients {
        if let Some(v) = by_room.get_mut(c.room) {
            v.push(c);
        }
    }
    by_room
        .iter()
        .enumerate()
        .map(|(r, members)| {
            let size = s.room_sizes[r];
            let joined: Vec<&&ClientSnapshot> = members.iter().filter(|c| c.state != ClientState::JoinFailed).collect();
            let receiving: Vec<&&&ClientSnapshot> = joined.iter().filter(|c| c.received > 0).collect();
            let (lost, expected) = joined.iter().fold((0u64, 0u64), |(l, e), c| (l + c.lost, e + c.expected));
            // Clients not joined yet score as receiving nothing, like failed ones.
            let mut mos_all: Vec<f64> = members.iter().map(|c| client_mos(c, one_way)).collect();
            mos_all.extend(std::iter::repeat_n(mos(one_way, 0.0, 100.0), size.saturating_sub(members.len())));
            mos_all.sort_by(f64::total_cmp);
            RoomSummary {
                room: r,
                name: s.room_names.get(r).cloned().unwrap_or_default(),
                size,
                connected: members.iter().filter(|c| c.state == ClientState::Connected).count(),
                loss_percent: if expected == 0 { 0.0 } else { 100.0 * lost as f64 / expected as f64 },
                jitter_ms: Stat::of(receiving.iter().map(|c| c.jitter_ms)).avg,
                drift_max_ms: Stat::of(receiving.iter().map(|c| c.drift_ms)).max,
                mos_p5: percentile(&mos_all, 0.05).unwrap_or(0.0),
                perfect_share: members.iter().filter(|c| is_perfect(c)).count() as f64 / size.max(1) as f64,
                packets_per_second_min: Stat::of(joined.iter().map(|c| c.packets_per_second)).min,
            }
        })
        .collect()
}

fn ws_summary(clients: &[ClientSnapshot]) -> Option<WsSummary> {
    let sockets: Vec<&crate::model::WsFigures> = clients.iter().filter_map(|c| c.ws.as_ref()).collect();
    if sockets.is_empty() {
        return None;
    }
    Some(WsSummary {
        sockets: sockets.len(),
        open: sockets.iter().filter(|w| w.open).count(),
        snapshots: sockets.iter().filter(|w| w.snapshot).count(),
        messages_per_second: Stat::of(sockets.iter().map(|w| w.messages_per_second)),
        bytes_per_second: Stat::of(sockets.iter().map(|w| w.bytes_per_second)),
        messages: sockets.iter().map(|w| w.messages).sum(),
        bytes: sockets.iter().map(|w| w.bytes).sum(),
    })
}

/// The summary of a run at `s.now`.
pub(crate) fn summarize(s: &RunState<'_>) -> Summary {
    let clients = all_clients(s);
    let lat = latencies(s, &clients);
    summarize_clients(s, &clients, &lat)
}

/// The final report of a run.
pub(crate) fn final_report(s: &RunState<'_>) -> LoadReport {
    let clients = all_clients(s);
    let lat = latencies(s, &clients);
    let summary = summarize_clients(s, &clients, &lat);
    let cfg = s.cfg;
    LoadReport {
        config: ConfigEcho {
            url: cfg.http.origin_of(cfg.api).to_string(),
            room: cfg.room.clone(),
            layout: cfg.rooms.to_string(),
            rooms: s.room_sizes.len(),
            probe_rooms: cfg.probe_rooms,
            websocket: cfg.websocket,
            no_level_share: cfg.no_level_share,
            tcp_share: cfg.tcp_share,
            clients: cfg.clients,
            cint_ms: cfg.join_interval.as_millis() as u64,
            life_s: cfg.life.map_or(0.0, |l| l.as_secs_f64()),
            warmup_s: cfg.warmup.as_secs_f64(),
            talkers: cfg.talkers,
            silence: cfg.silence,
            probe_talkers: cfg.probe_talkers,
            probe_listeners: cfg.probe_listeners,
            marker_period_ms: cfg.marker_period.as_millis() as u64,
            threads: s.threads,
            seed: cfg.seed,
        },
        clients: clients
            .into_iter()
            .map(|c| ClientReport { mos: client_mos(&c, summary.mos_one_way_ms), perfect: is_perfect(&c), figures: c })
            .collect(),
        latencies_ms: lat.iter().flatten().copied().collect(),
        nodes: Vec::new(),
        latency_by_node: None,
        summary,
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "unknown".into(), |v| format!("{v:.digits$}"))
}

impl Summary {
    /// The summary as a few lines of text.
    pub fn to_text(&self) -> String {
        let mut t = String::new();
        let phase = if self.window_s > 0.0 {
            format!("window {:.1}s", self.window_s)
        } else {
            "warming up (figures since connect)".into()
        };
        let _ = writeln!(
            t,
            "[{:>7.1}s] {phase} | clients {}: connected {}, connecting {}, joining {}, failed {}, closed {} | connect ms avg/max {:.0}/{:.0}",
            self.elapsed_s,
            self.clients,
            self.connected,
            self.connecting,
            self.joining,
            self.join_failed,
            self.closed,
            self.connect_ms.avg,
            self.connect_ms.max
        );
        if !self.join_errors.is_empty() {
            let why: Vec<String> = self.join_errors.iter().map(|(e, n)| format!("{n} × {e}")).collect();
            let _ = writeln!(t, "  joins failed: {}", why.join("; "));
        }
        let l = &self.latency;
        let _ = writeln!(
            t,
            "  delay (drift) ms avg/min/max {:.1}/{:.1}/{:.1} | mouth-to-ear ms avg/min/max {:.1}/{:.1}/{:.1} p95 {} ({} pairs, {} missed)",
            self.drift_ms.avg,
            self.drift_ms.min,
            self.drift_ms.max,
            l.ms.avg,
            l.ms.min,
            l.ms.max,
            l.p95_ms.map_or_else(|| "-".into(), |v| if v.is_finite() { format!("{v:.1}") } else { "missed".into() }),
            l.pairs,
            l.missed
        );
        let _ = writeln!(
            t,
            "  packets/s avg/min/max {:.1}/{:.1}/{:.1} | loss % avg/min/max {:.2}/{:.2}/{:.2} (all {:.3}) | jitter ms avg/min/max {:.2}/{:.2}/{:.2}",
            self.packets_per_second.avg,
            self.packets_per_second.min,
            self.packets_per_second.max,
            self.loss_percent.avg,
            self.loss_percent.min,
            self.loss_percent.max,
            self.loss_total_percent,
            self.jitter_ms.avg,
            self.jitter_ms.min,
            self.jitter_ms.max
        );
        let _ = writeln!(
            t,
            "  MOS p5 {:.2} p50 {:.2} | frames/client stddev {:.1} | perfect delivery {:.1} % | self-echo {}",
            self.mos_p5,
            self.mos_p50,
            self.frames_stddev,
            100.0 * self.perfect_share,
            self.self_echo
        );
        let g = &self.generator;
        let _ = write!(
            t,
            "  generator CPU {} cores = {} µs/client/tick (busiest thread {} %, receive {}: {} lean, {} dropped), send lateness ms p50/p99/max {:.2}/{:.2}/{:.2} | server CPU {} cores, {} µs/participant/tick, media socket drops {}",
            opt(g.cpu_cores, 2),
            opt(g.us_per_client_tick, 1),
            opt(g.busiest_thread.map(|b| b * 100.0), 0),
            g.receive_path,
            g.lean_received,
            g.lean_dropped,
            g.lateness_p50_ms,
            g.lateness_p99_ms,
            g.lateness_max_ms,
            opt(self.server_cpu_cores, 2),
            opt(self.server_us_per_participant_tick, 2),
            self.server_udp_drops.map_or_else(|| "unknown".into(), |d| d.to_string())
        );
        if self.rooms.len() > 1
            && let Some(w) = self.worst_room.and_then(|w| self.rooms.get(w))
        {
            let _ = write!(
                t,
                "\n  {} rooms | worst room {} ({} of {} connected): p5 MOS {:.2}, loss {:.3} %, jitter {:.2} ms, drift max {:.1} ms, perfect {:.1} %",
                self.rooms.len(),
                w.name,
                w.connected,
                w.size,
                w.mos_p5,
                w.loss_percent,
                w.jitter_ms,
                w.drift_max_ms,
                100.0 * w.perfect_share
            );
        }
        if let Some(ws) = &self.ws {
            let _ = write!(
                t,
                "\n  WebSockets {} (open {}, room snapshot {}): messages/socket/s avg/max {:.2}/{:.2}, bytes/socket/s avg/max {:.0}/{:.0} ({} messages, {} bytes) | without level {}",
                ws.sockets,
                ws.open,
                ws.snapshots,
                ws.messages_per_second.avg,
                ws.messages_per_second.max,
                ws.bytes_per_second.avg,
                ws.bytes_per_second.max,
                ws.messages,
                ws.bytes,
                self.without_level
            );
        } else if self.without_level > 0 {
            let _ = write!(t, "\n  without level {}", self.without_level);
        }
        if self.handover.moves > 0 || self.handover.lost_calls > 0 {
            let _ = write!(t, "\n  {}", self.handover.to_text());
        }
        if !self.valid {
            let _ = write!(t, "\n  INVALID: {}", self.invalid_reasons.join("; "));
        }
        for w in &self.warnings {
            let _ = write!(t, "\n  warning: {w}");
        }
        t
    }
}

impl LoadReport {
    /// The per-room table; at most `limit` rows, worst p5 MOS first when cut.
    pub fn rooms_text(&self, limit: usize) -> String {
        let mut rows: Vec<&RoomSummary> = self.summary.rooms.iter().collect();
        if rows.len() > limit {
            rows.sort_by(|a, b| a.mos_p5.total_cmp(&b.mos_p5).then(b.loss_percent.total_cmp(&a.loss_percent)));
            rows.truncate(limit);
        }
        let mut t = String::new();
        let _ = writeln!(
            t,
            "{:<20} {:>6} {:>9} {:>7} {:>7} {:>9} {:>6} {:>8} {:>7}",
            "room", "size", "connected", "loss%", "jit ms", "drift ms", "p5 MOS", "perfect%", "min pps"
        );
        for r in rows {
            let _ = writeln!(
                t,
                "{:<20} {:>6} {:>9} {:>7.3} {:>7.2} {:>9.1} {:>6.2} {:>8.1} {:>7.1}",
                r.name,
                r.size,
                r.connected,
                r.loss_percent,
                r.jitter_ms,
                r.drift_max_ms,
                r.mos_p5,
                100.0 * r.perfect_share,
                r.packets_per_second_min
            );
        }
        if self.summary.rooms.len() > limit {
            let _ = writeln!(
                t,
                "({limit} worst by p5 MOS of {} rooms; all are in the JSON report)",
                self.summary.rooms.len()
            );
        }
        if let Some(w) = self.summary.worst_room.and_then(|w| self.summary.rooms.get(w)) {
            let _ = writeln!(t, "worst room: {} (p5 MOS {:.2}, loss {:.3} %)", w.name, w.mos_p5, w.loss_percent);
        }
        t
    }

    /// Per-client details as a table; at most `limit` rows, worst MOS first
    /// when cut.
    pub fn details_text(&self, limit: usize) -> String {
        let mut rows: Vec<&ClientReport> = self.clients.iter().collect();
        if rows.len() > limit {
            rows.sort_by(|a, b| a.mos.total_cmp(&b.mos));
            rows.truncate(limit);
        }
        let mut t = String::new();
        let _ = writeln!(
            t,
            "{:>5} {:>5} {:<14} {:<11} {:>8} {:>7} {:>7} {:>6} {:>7} {:>8} {:>8} {:>5} {:>7}",
            "#",
            "room",
            "role",
            "state",
            "connect",
            "rx",
            "pkt/s",
            "loss%",
            "jit ms",
            "drift ms",
            "max ms",
            "MOS",
            "perfect"
        );
        for c in rows {
            let f = &c.figures;
            let _ = writeln!(
                t,
                "{:>5} {:>5} {:<14} {:<11} {:>8} {:>7} {:>7.1} {:>6.2} {:>7.2} {:>8.1} {:>8.1} {:>5.2} {:>7}",
                f.index,
                f.room,
                f.role.to_string(),
                f.state.to_string(),
                f.connect_ms.map_or_else(|| "-".into(), |m| format!("{m:.0}ms")),
                f.received,
                f.packets_per_second,
                f.loss_percent,
                f.jitter_ms,
                f.drift_ms,
                f.max_drift_ms,
                c.mos,
                if c.perfect { "yes" } else { "no" }
            );
        }
        if self.clients.len() > limit {
            let _ = writeln!(t, "({limit} worst by MOS of {} clients; all are in the JSON report)", self.clients.len());
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.05), Some(5.0));
        assert_eq!(percentile(&v, 0.5), Some(50.0));
        assert_eq!(percentile(&v, 0.95), Some(95.0));
        assert_eq!(percentile(&v, 1.0), Some(100.0));
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(percentile(&[3.0], 0.05), Some(3.0));
    }

    #[test]
    fn stat_over_values() {
        let s = Stat::of([1.0, 2.0, 6.0]);
        assert_eq!((s.avg, s.min, s.max), (3.0, 1.0, 6.0));
    }
}
