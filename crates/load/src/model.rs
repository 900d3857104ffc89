//! What a load run is and what it observed: its configuration, the roles
//! of its clients, and the snapshots the `load-N` threads publish. The
//! generator (which runs clients) and the report (which scores them) both
//! read these; neither imports the other's internals.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::cpu::CpuSource;
use std::fmt;

/// Lateness histogram resolution.
const LATENESS_BUCKET_US: u64 = 50;
/// Lateness histogram range (beyond: the last bucket).
const LATENESS_BUCKETS: usize = 4_000;

/// One size of a room-size mix.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct SizeShare {
    /// Participants per room.
    pub size: usize,
    /// Percent of the rooms that have this size.
    pub percent: f64,
}

/// How a run's clients are split into rooms.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum RoomLayout {
    /// Everyone in one room, named as configured.
    #[default]
    Single,
    /// This many rooms of (nearly) equal size.
    Count(usize),
    /// Rooms drawn from a size mix.
    Mix(Vec<SizeShare>),
}

impl fmt::Display for RoomLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Single => write!(f, "one room"),
            Self::Count(r) => write!(f, "{r} rooms of equal size"),
            Self::Mix(m) => {
                let parts: Vec<String> = m.iter().map(|s| format!("{}:{}", s.size, s.percent)).collect();
                write!(f, "room sizes {}", parts.join(","))
            }
        }
    }
}

/// What silent participants send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum SilenceMode {
    /// Opus DTX, as tutti's answer asks (`usedtx=1`) and browsers then do:
    /// while silent, one frame marked level 127 every 400 ms, and the
    /// timestamps of the frames not sent skipped. The default.
    Dtx,
    /// An Opus frame of silence every 20 ms, marked level 127: a client that
    /// ignores the answer's DTX request (a browser's default without it).
    Frames,
}

/// What a simulated participant does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Follows the P.59 talk model with the speech clip.
    Talker,
    /// Sends silence.
    Silent,
    /// Sends silence and, every marker period, a loud marker burst; decodes
    /// what it receives to check it never hears itself.
    ProbeTalker,
    /// Sends silence; decodes its mix to detect the probes' markers.
    ProbeListener,
}

/// Where a simulated participant is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientState {
    /// Not joined yet.
    Joining,
    /// The join request failed.
    JoinFailed,
    /// Joined; ICE/DTLS in progress.
    Connecting,
    /// ICE and DTLS up.
    Connected,
    /// Closed or failed after joining.
    Closed,
}

/// Everything a load run is told.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// The server's HTTP API.
    pub api: SocketAddr,
    /// How the API is reached: `http://` or `https://` (its name and the
    /// trusted roots), for `api` and every node a redirect names.
    pub http: tutti_client::Client,
    /// The room (created if missing); with several rooms, their names are `<room>-<i>` (i from 0).
    pub room: String,
    /// How the clients are split into rooms.
    pub rooms: RoomLayout,
    /// Rooms that get probe talkers and listeners (the largest; see [`crate::rooms`]).
    pub probe_rooms: usize,
    /// Every client holds the room's WebSocket and joins through it (`join`
    /// message), as the browser page does; false: joins over REST, no socket.
    pub websocket: bool,
    /// Share of clients (0..1) whose packets carry no RFC 6464 audio level
    /// (probe talkers always carry one).
    pub no_level_share: f64,
    /// Share of clients (0..1) that offer only ICE-TCP (RFC 6544: an active
    /// TCP candidate, media framed per RFC 4571 on one TCP connection), as
    /// browsers on networks that drop UDP; the rest use UDP.
    pub tcp_share: f64,
    /// Clients read received audio through webrtc-rs's whole pipeline
    /// instead of tutti's lean SRTP receive (`--rtc-receive`, for A/B runs).
    pub rtc_receive: bool,
    /// An access token (admin for the room, or `*`), sent as `Authorization: Bearer`.
    pub token: Option<String>,
    /// Participants.
    pub clients: usize,
    /// Time between joins.
    pub join_interval: Duration,
    /// Run time from the start; `None` until stopped.
    pub life: Option<Duration>,
    /// Figures are measured from this long after the last join.
    pub warmup: Duration,
    /// When set, the run ends this long after the measurement window began
    /// (whatever `life` says).
    pub window: Option<Duration>,
    /// Time between summaries.
    pub summary_interval: Duration,
    /// Share of participants that talk (0..1).
    pub talkers: f64,
    /// What silent participants send.
    pub silence: SilenceMode,
    /// Probe talkers (at most [`MAX_PROBES`]).
    pub probe_talkers: usize,
    /// Probe listeners.
    pub probe_listeners: usize,
    /// Time between one probe's markers.
    pub marker_period: Duration,
    /// Generator threads (`load-0`, …).
    pub threads: usize,
    /// Seed of the talk patterns.
    pub seed: u64,
    /// The speech clip (48 kHz mono); `None`: synthesized speech-like signal.
    pub speech: Option<Vec<f32>>,
    /// Where the server's CPU is read.
    pub server_cpu: CpuSource,
    /// Leave with DELETE at the end (besides closing each peer).
    pub leave: bool,
    /// Create every room with `"record": true` (the server records it from the first join).
    pub record: bool,
    /// With `record`: also a file per speaker (`POST …/recording {"per_speaker": true}`).
    pub record_per_speaker: bool,
    /// Tries of one rejoin when a client's call moves (a cluster's `moved`,
    /// or its call closed by its node) before the call counts as lost;
    /// 0: a closed call stays closed and `moved` is not followed.
    pub rejoin_attempts: u32,
}

impl LoadConfig {
    /// Defaults for `clients` participants against `api`.
    pub fn new(api: SocketAddr, clients: usize) -> Self {
        Self {
            api,
            http: tutti_client::Client::plain(),
            room: "load".into(),
            rooms: RoomLayout::Single,
            probe_rooms: 1,
            websocket: true,
            no_level_share: 0.0,
            tcp_share: 0.0,
            rtc_receive: false,
            token: None,
            clients,
            join_interval: Duration::from_millis(20),
            life: Some(Duration::from_secs(30)),
            warmup: Duration::from_secs(2),
            window: None,
            summary_interval: Duration::from_secs(5),
            talkers: 0.1,
            silence: SilenceMode::Dtx,
            probe_talkers: 3,
            probe_listeners: 8,
            marker_period: Duration::from_millis(2500),
            threads: 2,
            seed: 1,
            speech: None,
            server_cpu: CpuSource::Unknown,
            leave: true,
            record: false,
            record_per_speaker: false,
            rejoin_attempts: 0,
        }
    }
}

/// A marker a probe talker sent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MarkerSent {
    pub(crate) room: usize,
    pub(crate) probe: usize,
    pub(crate) client: usize,
    pub(crate) at: Instant,
}

/// A marker onset a decoding client heard.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Detection {
    pub(crate) listener: usize,
    pub(crate) probe: usize,
    pub(crate) at: Instant,
}

/// One client's figures, as its thread last published them.
#[derive(Debug, Clone, Serialize)]
pub struct ClientSnapshot {
    /// Join order, from 0.
    pub index: usize,
    /// Its room (index into the run's rooms).
    pub room: usize,
    /// Whether its packets carry an RFC 6464 audio level.
    pub level: bool,
    /// What it does.
    pub role: Role,
    /// Where it is.
    pub state: ClientState,
    /// Milliseconds from the join request to ICE+DTLS up.
    pub connect_ms: Option<f64>,
    /// Frames sent (in the measurement window once it has begun).
    pub sent: u64,
    /// Distinct frames received in time.
    pub received: u64,
    /// Frames the received sequence span holds.
    pub expected: u64,
    /// Frames lost (gaps not filled within the reorder window).
    pub lost: u64,
    /// Lost in percent of expected; 100 when nothing arrived.
    pub loss_percent: f64,
    /// RFC 3550 jitter, ms.
    pub jitter_ms: f64,
    /// Drift delay at the latest packet, ms.
    pub drift_ms: f64,
    /// Largest drift delay, ms.
    pub max_drift_ms: f64,
    /// Frames received per second.
    pub packets_per_second: f64,
    /// Frames a 20 ms clock would have delivered over the same time.
    pub frames_due: u64,
    /// Frames its stream covered in that time: the RTP timestamp progress
    /// from the first packet to the last, plus the quiet stretches before
    /// the first and after the last, up to one DTX interval each (a server
    /// in DTX sends a frame every 400 ms and skips the timestamps between).
    pub frames_covered: u64,
    /// For decoding clients: the loudest its own marker frequency was heard
    /// (probe talkers; self-echo above the threshold).
    pub own_marker_peak: Option<f32>,
    /// Marker onsets this client heard.
    pub markers_heard: u64,
    /// Times its call moved: its room handed to another node (`moved`), or
    /// its call closed by its node.
    pub moves: u32,
    /// Moves after which it joined again (through the cluster, same identity).
    pub rejoins: u32,
    /// Of those, through the `moved` ticket (redeemed at the new node's
    /// `/v1/rooms/{room}/enter`, as the page does).
    pub ticket_rejoins: u32,
    /// It could not rejoin: its call is lost.
    pub lost_call: bool,
    /// The audio gap of each completed move, ms: from the last packet
    /// received before the move to the first received after (moves in a row
    /// with no audio between them make one gap).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gaps_ms: Vec<f64>,
    /// Its room WebSocket, when it holds one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ws: Option<WsFigures>,
    /// Error message of a failed join.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When it connected (for matching markers).
    #[serde(skip)]
    pub(crate) connected_at: Option<Instant>,
    /// Packets its peer read on the lean receive path, and dropped there.
    #[serde(skip)]
    pub(crate) lean_receive: (u64, u64),
}

/// What one client's room WebSocket received.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WsFigures {
    /// Still open (no close, no error).
    pub open: bool,
    /// The `room` snapshot arrived (at any time since the socket opened).
    pub snapshot: bool,
    /// Messages received (text and binary; in the measurement window once it has begun).
    pub messages: u64,
    /// Payload bytes of those messages.
    pub bytes: u64,
    /// Messages per second over the same time.
    pub messages_per_second: f64,
    /// Payload bytes per second over the same time.
    pub bytes_per_second: f64,
    /// Why it closed, when it did on an error or a close frame.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closed: Option<String>,
}

/// Send-tick lateness: how late a thread's 1 ms send slots fire.
#[derive(Debug, Clone)]
pub struct Lateness {
    buckets: Vec<u64>,
    count: u64,
    max_us: u64,
}

impl Default for Lateness {
    fn default() -> Self {
        Self { buckets: vec![0; LATENESS_BUCKETS], count: 0, max_us: 0 }
    }
}

impl Lateness {
    /// Records one slot fired `late` after it was due.
    pub fn record(&mut self, late: Duration) {
        let us = late.as_micros().min(u128::from(u64::MAX)) as u64;
        let i = ((us / LATENESS_BUCKET_US) as usize).min(LATENESS_BUCKETS - 1);
        self.buckets[i] += 1;
        self.count += 1;
        self.max_us = self.max_us.max(us);
    }

    /// Adds another histogram in.
    pub fn merge(&mut self, other: &Lateness) {
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
        self.count += other.count;
        self.max_us = self.max_us.max(other.max_us);
    }

    /// Slots recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The `q`-quantile (0..1) in ms (bucket upper bound), 0 when empty.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let upper = (i as u64 + 1) * LATENESS_BUCKET_US;
                return upper.min(self.max_us.max(LATENESS_BUCKET_US)) as f64 / 1000.0;
            }
        }
        self.max_us as f64 / 1000.0
    }

    /// The latest slot, in ms.
    pub fn max_ms(&self) -> f64 {
        self.max_us as f64 / 1000.0
    }
}

/// What each thread publishes.
#[derive(Debug, Clone, Default)]
pub(crate) struct ThreadView {
    pub(crate) clients: Vec<ClientSnapshot>,
    pub(crate) lateness: Lateness,
}

/// Join times of one kind (API request to answer), ms.
#[derive(Debug, Clone, Default, Serialize)]
pub struct JoinTimes {
    /// Joins.
    pub count: usize,
    /// Median, ms.
    pub p50_ms: f64,
    /// 95th percentile, ms.
    pub p95_ms: f64,
}

/// One node's share of a run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NodeSummary {
    /// The node's API address.
    pub api: String,
    /// Its node id, as its API named it.
    pub node: Option<String>,
    /// Rooms it held.
    pub rooms: usize,
    /// Clients that joined on it.
    pub participants: usize,
    /// Of those, connected at the end.
    pub connected: usize,
    /// Joins answered without a redirect (the client asked this node).
    pub direct: JoinTimes,
    /// Joins that reached it through a redirect.
    pub redirected: JoinTimes,
    /// Lost frames over expected frames of its clients, percent.
    pub loss_percent: f64,
    /// 5th percentile MOS of its clients.
    pub mos_p5: f64,
    /// PID of the node's process, when it runs on this machine.
    pub pid: Option<u32>,
    /// Its CPU over the measurement window, in cores (local nodes only).
    pub cpu_cores: Option<f64>,
}

/// Plain words for the reports (not Rust's debug names).
impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Talker => "talker",
            Self::Silent => "silent",
            Self::ProbeTalker => "probe talker",
            Self::ProbeListener => "probe listener",
        })
    }
}

impl std::fmt::Display for ClientState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Joining => "joining",
            Self::JoinFailed => "join failed",
            Self::Connecting => "connecting",
            Self::Connected => "connected",
            Self::Closed => "closed",
        })
    }
}

impl std::fmt::Display for SilenceMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Dtx => "DTX (a frame every 400 ms)",
            Self::Frames => "silence frames every 20 ms",
        })
    }
}
