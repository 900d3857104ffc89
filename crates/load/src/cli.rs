//! `tutti load` and `tutti capacity`: flags, output, and the local server
//! that `tutti capacity` starts when it is given no `--url`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tutti_client::{Client, Origin};

use crate::LoadError;
use crate::capacity::{self, SearchPolicy, Slo, TrialFigures, TrialRunner};
use crate::cpu::CpuSource;
use crate::generator::{self, Progress};
use crate::model::RoomLayout;
use crate::model::{LoadConfig, SilenceMode};
use crate::rooms;

/// Flags shared by `tutti load` and `tutti capacity`: the fleet's shape.
#[derive(Debug, Clone, clap::Args)]
pub struct FleetArgs {
    /// Spread the participants over R rooms named `<room>-0` … of (nearly)
    /// equal size (the first N mod R rooms hold one more); joins go
    /// round-robin over the rooms.
    #[arg(long, conflicts_with = "room_sizes")]
    pub rooms: Option<usize>,
    /// A room-size mix, SIZE:PERCENT of rooms (percents add up to 100), e.g.
    /// `2:30,10:50,100:15,1000:5`: rooms are drawn in those proportions
    /// (smooth weighted round-robin), each filled to its size, until N is
    /// reached; the last room holds the rest.
    #[arg(long, value_parser = parse_mix)]
    pub room_sizes: Option<RoomLayout>,
    /// Rooms that get the probe talkers and listeners (the largest rooms;
    /// mouth-to-ear is measured there).
    #[arg(long, default_value_t = 1)]
    pub probe_rooms: usize,
    /// Join over REST and hold no WebSocket (default: every client joins
    /// through the room's WebSocket and keeps it open, as the browser page does).
    #[arg(long)]
    pub no_ws: bool,
    /// Share (0 to 1) of clients whose packets carry no RFC 6464 audio level
    /// (the server must then decode them to measure them); probe talkers always carry one.
    #[arg(long, default_value_t = 0.0)]
    pub no_level_share: f64,
    /// How clients reach the media port: `udp`, `tcp` (ICE-TCP only: an
    /// active TCP candidate, as a browser whose network drops UDP) or
    /// `mixed[:SHARE]`, SHARE (0 to 1, default 0.5) of the clients over TCP.
    #[arg(long, default_value = "udp", value_parser = parse_transport)]
    pub transport: f64,
    /// Clients read the server's audio through webrtc-rs's whole receive
    /// pipeline instead of tutti's lean SRTP receive (for A/B runs of the
    /// generator's own cost; the report's `receive_path` says which).
    #[arg(long)]
    pub rtc_receive: bool,
}

/// `udp` → 0, `tcp` → 1, `mixed` → 0.5, `mixed:0.2` → 0.2: the share of clients over TCP.
pub fn parse_transport(text: &str) -> Result<f64, String> {
    let share = match text {
        "udp" => 0.0,
        "tcp" => 1.0,
        "mixed" => 0.5,
        _ => text
            .strip_prefix("mixed:")
            .and_then(|s| s.parse::<f64>().ok())
            .ok_or_else(|| format!("'{text}': expected udp, tcp, mixed or mixed:SHARE"))?,
    };
    if (0.0..=1.0).contains(&share) { Ok(share) } else { Err(format!("the TCP share must be 0 to 1, not {share}")) }
}

fn parse_mix(text: &str) -> Result<RoomLayout, String> {
    rooms::parse_room_sizes(text).map(RoomLayout::Mix)
}

impl FleetArgs {
    /// The room layout these flags ask for.
    pub fn layout(&self) -> RoomLayout {
        match (&self.rooms, &self.room_sizes) {
            (Some(r), _) => RoomLayout::Count(*r),
            (None, Some(m)) => m.clone(),
            (None, None) => RoomLayout::Single,
        }
    }

    fn apply(&self, cfg: &mut LoadConfig) -> Result<(), LoadError> {
        if !(0.0..=1.0).contains(&self.no_level_share) {
            return Err(LoadError::Config(format!("--no-level-share must be 0 to 1, not {}", self.no_level_share)));
        }
        if self.rooms == Some(0) {
            return Err(LoadError::Config("--rooms must be at least 1".into()));
        }
        cfg.rooms = self.layout();
        cfg.probe_rooms = self.probe_rooms;
        cfg.websocket = !self.no_ws;
        cfg.no_level_share = self.no_level_share;
        cfg.tcp_share = self.transport;
        cfg.rtc_receive = self.rtc_receive;
        Ok(())
    }
}

/// The token from `--token`/`TUTTI_TOKEN`, or else from the old `TOKEN`
/// (what `tutti serve`'s banner once exported), with a deprecation line.
fn token_or_old_env(token: Option<String>) -> Option<String> {
    token.or_else(|| {
        let old = std::env::var("TOKEN").ok().filter(|t| !t.is_empty())?;
        eprintln!("warning: TOKEN is deprecated; set TUTTI_TOKEN instead (same value)");
        Some(old)
    })
}

/// `tutti load`: N simulated participants against a running server.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// The server's HTTP API: `http://HOST:PORT`, or `https://HOST[:PORT]`
    /// behind a TLS proxy (the room WebSockets are then `wss://`).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// A PEM file of CA certificates trusted for `https://` besides the
    /// system's (e.g. the CA of a self-signed deployment).
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// An admin access token for the room (or `*`), e.g. the one `tutti serve` prints.
    #[arg(long, env = "TUTTI_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Participants.
    #[arg(short = 'n', long = "clients", default_value_t = 100)]
    pub clients: usize,
    /// Milliseconds between joins.
    #[arg(long, default_value_t = 20)]
    pub cint: u64,
    /// Run time in seconds from the start; 0 = until Ctrl-C.
    #[arg(long, default_value_t = 30)]
    pub life: u64,
    /// Milliseconds between summaries.
    #[arg(long, default_value_t = 5000)]
    pub sint: u64,
    /// The room (created if missing); with several rooms, the base of their names (`<room>-<i>`).
    #[arg(long, default_value = "load")]
    pub room: String,
    /// The fleet's shape.
    #[command(flatten)]
    pub fleet: FleetArgs,
    /// Share of participants that talk (ITU-T P.59 on/off); the others send silence.
    #[arg(long, default_value_t = 0.1)]
    pub talkers: f64,
    /// What silent participants send: `dtx` (one level-127 frame every 400 ms, as browsers do with tutti's `usedtx=1` answer) or `frames` (a silence frame every 20 ms).
    #[arg(long, value_enum, default_value_t = SilenceMode::Dtx)]
    pub silence: SilenceMode,
    /// Write the JSON report here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Print the JSON report on stdout (everything else goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// The quality bar of the verdict.
    #[command(flatten)]
    pub slo: SloArgs,
    /// Seconds after the last join before figures are measured.
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Probe talkers (marker tones; at most 6).
    #[arg(long, default_value_t = 3)]
    pub probes: usize,
    /// Probe listeners (decode their mix to time the markers).
    #[arg(long, default_value_t = 8)]
    pub probe_listeners: usize,
    /// Milliseconds between one probe's markers.
    #[arg(long, default_value_t = 2500)]
    pub marker_period: u64,
    /// Generator threads (`load-0`, …).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Seed of the talk patterns.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Speech clip, 48 kHz mono WAV (default: a synthesized speech-like signal).
    #[arg(long)]
    pub clip: Option<PathBuf>,
    /// The server's Prometheus endpoint, for its CPU (process_cpu_seconds_total).
    #[arg(long)]
    pub metrics_url: Option<String>,
    /// PID of a local server process, for its CPU from /proc.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Per-client rows printed at the end (the worst by MOS when there are more).
    #[arg(long, default_value_t = 50)]
    pub details: usize,
    /// Per-room rows printed at the end (the worst by p5 MOS when there are more).
    #[arg(long, default_value_t = 30)]
    pub room_details: usize,
    /// Create every room with `"record": true`: the server records each from its first join.
    #[arg(long)]
    pub record: bool,
    /// Record every room with a file per speaker beside the mix (implies `--record`).
    #[arg(long)]
    pub record_per_speaker: bool,
    /// Listen for the server's webhooks on this address (e.g. 127.0.0.1:9100) and
    /// print how many of each event arrived; start `tutti serve` with
    /// `--set 'webhooks.urls=["http://127.0.0.1:9100/"]'` and an `auth.secret`.
    #[arg(long)]
    pub webhook_listen: Option<SocketAddr>,
    /// When a client's call moves (a cluster node drains: the room's
    /// WebSocket says `moved`, or the node closes the call), it rejoins the
    /// room through the cluster with the same identity: at most this many
    /// tries (250 ms, 500 ms, 1 s, then 2 s apart), then its call counts as
    /// lost. 0: a closed call stays closed.
    #[arg(long, default_value_t = 8)]
    pub rejoin_attempts: u32,
}

/// `tutti capacity`: the largest room that meets the SLO.
#[derive(Debug, Clone, clap::Args)]
pub struct CapacityArgs {
    /// A running server's HTTP API (`http://` or `https://`); without it a local server is started.
    #[arg(long)]
    pub url: Option<String>,
    /// A PEM file of CA certificates trusted for an `https://` --url besides the system's.
    #[arg(long, requires = "url")]
    pub ca_file: Option<PathBuf>,
    /// An admin access token (`*`) for the server at --url.
    #[arg(long, env = "TUTTI_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The remote server's Prometheus endpoint, for its CPU.
    #[arg(long)]
    pub metrics_url: Option<String>,
    /// Mixer threads of the local server (0 = one per core).
    #[arg(long, default_value_t = 0)]
    pub server_mix_threads: usize,
    /// Extra argument for the local `tutti serve` (repeatable), e.g. `--server-arg=--metrics --server-arg=off`.
    #[arg(long, allow_hyphen_values = true)]
    pub server_arg: Vec<String>,
    /// Pin the local server to one core and the generator to another (the
    /// first two CPUs this process may use; the server through `taskset`), so
    /// the capacity found is the server's per core, not the box's.
    #[arg(long, conflicts_with = "url")]
    pub pin: bool,
    /// Share of participants that talk.
    #[arg(long, default_value_t = 0.1)]
    pub talkers: f64,
    /// What silent participants send.
    #[arg(long, value_enum, default_value_t = SilenceMode::Dtx)]
    pub silence: SilenceMode,
    /// Search the largest total of participants in rooms of S (a trial of N
    /// runs ⌈N/S⌉ rooms, the last one holding the rest): the mix `S:100`.
    #[arg(long, conflicts_with_all = ["rooms", "room_sizes"])]
    pub room_size: Option<usize>,
    /// The fleet's shape (each trial splits its N this way).
    #[command(flatten)]
    pub fleet: FleetArgs,
    /// First N of the ramp.
    #[arg(long, default_value_t = 100)]
    pub start: usize,
    /// Largest N tried.
    #[arg(long, default_value_t = 4000)]
    pub max: usize,
    /// Measurement window of ramp and search trials, seconds.
    #[arg(long, default_value_t = 10)]
    pub short: u64,
    /// Measurement window of the confirming trial, seconds.
    #[arg(long, default_value_t = 30)]
    pub full: u64,
    /// Warm-up after the last join of each trial, seconds.
    #[arg(long, default_value_t = 3.0)]
    pub warmup: f64,
    /// Milliseconds between joins.
    #[arg(long, default_value_t = 2)]
    pub cint: u64,
    /// Stop bisecting when the gap is at most this percent of N.
    #[arg(long, default_value_t = 5.0)]
    pub resolution: f64,
    /// Most ramp and search trials.
    #[arg(long, default_value_t = 14)]
    pub max_trials: usize,
    /// The quality bar.
    #[command(flatten)]
    pub slo: SloArgs,
    /// Probe talkers.
    #[arg(long, default_value_t = 3)]
    pub probes: usize,
    /// Probe listeners.
    #[arg(long, default_value_t = 8)]
    pub probe_listeners: usize,
    /// Generator threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Where the table (capacity.md), the JSON report and the plot (capacity.svg) go.
    #[arg(long, default_value = "tutti-capacity")]
    pub out: PathBuf,
    /// Print each trial's summary.
    #[arg(long)]
    pub verbose: bool,
}

/// `http://host:port[/path]`, `https://host[:port][/path]` (or `host:port`,
/// plain http) as its origin (the host resolved) and path.
pub fn parse_url(url: &str) -> Result<(Origin, String), LoadError> {
    let full = if url.contains("://") { url.to_owned() } else { format!("http://{url}") };
    Origin::parse(&full).map_err(|e| LoadError::Config(e.to_string()))
}

/// The client of a run: the system's roots and `--ca-file`'s, and `origin`
/// (an `https://` one reached over TLS under its name).
fn client(ca_file: Option<&std::path::Path>, origin: &Origin) -> Result<Client, LoadError> {
    let http = Client::new(ca_file).map_err(|e| LoadError::Config(e.to_string()))?;
    http.add_origin(origin);
    Ok(http)
}

/// A flag that Ctrl-C (SIGINT) or SIGTERM sets.
pub fn stop_on_signal() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    let spawned = std::thread::Builder::new().name("signals".into()).spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        rt.block_on(async {
            #[cfg(unix)]
            {
                use tokio::signal::unix::{SignalKind, signal};
                if let Ok(mut term) = signal(SignalKind::terminate()) {
                    tokio::select! {
                        _ = tokio::signal::ctrl_c() => {}
                        _ = term.recv() => {}
                    }
                } else {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
            #[cfg(not(unix))]
            let _ = tokio::signal::ctrl_c().await;
        });
        f.store(true, Ordering::Relaxed);
    });
    if spawned.is_err() {
        eprintln!("tutti: could not watch for Ctrl-C; the run stops at --life");
    }
    flag
}

/// Where the server's CPU is read: `--server-pid`, else `--metrics-url`,
/// else the process listening on `server` when it runs on this machine.
fn cpu_source(
    http: &Client,
    server: std::net::SocketAddr,
    metrics_url: Option<&str>,
    pid: Option<u32>,
) -> Result<CpuSource, LoadError> {
    if let Some(pid) = pid {
        return Ok(CpuSource::Process(pid));
    }
    if metrics_url.is_none()
        && let Some(pid) = crate::cpu::local_listener_pid(server)
    {
        return Ok(CpuSource::Process(pid));
    }
    match metrics_url {
        Some(u) => {
            let (origin, path) = parse_url(u)?;
            let path = if path == "/" { "/metrics".to_owned() } else { path };
            Ok(CpuSource::Metrics { origin, path, http: http.clone() })
        }
        None => Ok(CpuSource::Unknown),
    }
}

fn write_file(path: &std::path::Path, text: &str) -> Result<(), LoadError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| LoadError::Io(format!("{}: {e}", dir.display())))?;
    }
    std::fs::write(path, text).map_err(|e| LoadError::Io(format!("{}: {e}", path.display())))
}

/// The quality bar (SLO) a run is judged against: `tutti load`'s verdict
/// and `tutti capacity`'s search.
#[derive(Debug, Clone, clap::Args)]
pub struct SloArgs {
    /// SLO: least p5 MOS.
    #[arg(long, default_value_t = 4.0)]
    pub min_mos: f64,
    /// SLO: most loss, percent.
    #[arg(long, default_value_t = 1.0)]
    pub max_loss: f64,
    /// SLO: most p95 mouth-to-ear, ms.
    #[arg(long, default_value_t = 150.0)]
    pub max_latency: f64,
    /// SLO: least share of clients with perfect delivery, percent.
    #[arg(long, default_value_t = 99.0)]
    pub min_perfect: f64,
}

impl SloArgs {
    /// As the search and the verdict take it.
    pub fn slo(&self) -> Slo {
        Slo {
            min_mos_p5: self.min_mos,
            max_loss_percent: self.max_loss,
            max_latency_p95_ms: self.max_latency,
            min_perfect_share: self.min_perfect / 100.0,
        }
    }
}

/// How a load run ended, against the SLO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The run was valid and met the SLO; nobody lost a call.
    Pass,
    /// It was valid and missed: what failed.
    Fail(Vec<String>),
    /// The generator could not keep its schedule: its figures say more about it than the server.
    Invalid(Vec<String>),
}

impl Verdict {
    /// The verdict of a final summary of `clients` participants.
    pub fn of(summary: &crate::report::Summary, clients: usize, slo: &Slo) -> Self {
        if !summary.valid {
            return Self::Invalid(summary.invalid_reasons.clone());
        }
        // Valid here: the SLO's own INVALID entry cannot be among them.
        let mut failed = slo.violations(&TrialFigures::from_summary(clients, summary));
        if summary.connected < clients {
            failed.push(format!("{} of {clients} participants connected at the end", summary.connected));
        }
        if summary.handover.lost_calls > 0 {
            failed.push(format!("{} lost their call in a hand-over", summary.handover.lost_calls));
        }
        if failed.is_empty() { Self::Pass } else { Self::Fail(failed) }
    }

    /// One line: `PASS: …`, `FAIL: …` or `INVALID: …`.
    pub fn line(&self, summary: &crate::report::Summary) -> String {
        match self {
            Self::Pass => format!(
                "PASS: {} participants, p5 MOS {:.2}, loss {:.2} %, p95 mouth-to-ear {}; {}",
                summary.connected,
                summary.mos_p5,
                summary.loss_total_percent,
                summary.latency.p95_ms.map_or("not measured".into(), |l| format!("{l:.0} ms")),
                if summary.warnings.is_empty() {
                    "a valid run".to_owned()
                } else {
                    format!("a valid run, but weaker: {}", summary.warnings.join("; "))
                }
            ),
            Self::Fail(why) => format!("FAIL: {}", why.join("; ")),
            Self::Invalid(why) => format!("INVALID: {}", why.join("; ")),
        }
    }
}

/// Runs `tutti load`. Returns its verdict against the SLO.
pub fn run_load(args: &LoadArgs) -> Result<Verdict, LoadError> {
    let (origin, _) = parse_url(&args.url)?;
    let mut cfg = LoadConfig::new(origin.addr(), args.clients);
    cfg.http = client(args.ca_file.as_deref(), &origin)?;
    cfg.room = args.room.clone();
    args.fleet.apply(&mut cfg)?;
    let sizes = rooms::sizes(&cfg).map_err(LoadError::Config)?;
    cfg.join_interval = Duration::from_millis(args.cint);
    cfg.life = (args.life > 0).then(|| Duration::from_secs(args.life));
    cfg.summary_interval = Duration::from_millis(args.sint.max(100));
    cfg.talkers = args.talkers;
    cfg.silence = args.silence;
    cfg.token = token_or_old_env(args.token.clone());
    cfg.warmup = Duration::from_secs_f64(args.warmup.max(0.0));
    cfg.probe_talkers = args.probes;
    cfg.probe_listeners = args.probe_listeners;
    cfg.marker_period = Duration::from_millis(args.marker_period.max(500));
    cfg.threads = args.threads;
    cfg.seed = args.seed;
    cfg.speech = args.clip.as_deref().map(crate::audio::read_wav).transpose()?;
    cfg.server_cpu = cpu_source(&cfg.http, origin.addr(), args.metrics_url.as_deref(), args.server_pid)?;
    cfg.record = args.record || args.record_per_speaker;
    cfg.record_per_speaker = args.record_per_speaker;
    cfg.rejoin_attempts = args.rejoin_attempts;
    let hooks = args.webhook_listen.map(crate::webhooks::Receiver::start).transpose()?;
    if let Some(h) = &hooks {
        println!("webhook receiver on http://{}/", h.addr());
    }
    // The human report: on stdout, or on stderr when stdout carries the JSON.
    macro_rules! say {
        ($($t:tt)*) => {
            if args.json { eprintln!($($t)*) } else { println!($($t)*) }
        };
    }
    let stop = stop_on_signal();
    say!(
        "tutti load: {} participants into {} ({} rooms '{}'…) at {} ({} ms apart), {:.0} % talkers, silence as {}, {:.0} % without level, {:.0} % over TCP, {}, {} threads; server CPU from {}",
        cfg.clients,
        cfg.rooms,
        sizes.len(),
        rooms::name(&cfg, 0, sizes.len()),
        args.url,
        args.cint,
        100.0 * cfg.talkers,
        cfg.silence,
        100.0 * cfg.no_level_share,
        100.0 * cfg.tcp_share,
        if cfg.websocket { "joins and events over each room's WebSocket" } else { "REST joins, no WebSocket" },
        cfg.threads,
        cfg.server_cpu.describe()
    );
    let bar = indicatif::ProgressBar::new(cfg.clients as u64).with_style(
        indicatif::ProgressStyle::with_template("joining {bar:40} {pos}/{len} joined, {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let report = generator::run(&cfg, &stop, &mut |p| match p {
        Progress::Joining { joined, failed, total } => {
            // A bar on a terminal; a line now and then elsewhere (a log, CI).
            if bar.is_hidden() {
                say!("joining: {joined}/{total} joined, {failed} failed");
            }
            bar.set_length(total as u64);
            bar.set_position(joined as u64);
            bar.set_message(format!("{failed} failed"));
            if joined + failed >= total {
                bar.finish_and_clear();
            }
        }
        Progress::Summary(s) => {
            bar.suspend(|| say!("{}", s.to_text()));
        }
    })?;
    bar.finish_and_clear();
    say!("\n== final summary ==\n{}", report.summary.to_text());
    if let Some(h) = &hooks {
        // The rooms' last events (left, room_finished) come after the run: give them a moment.
        std::thread::sleep(Duration::from_secs(1));
        say!("\n== webhooks received ==\n{}", h.counts_text());
    }
    say!("\n== clients ==\n{}", report.details_text(args.details));
    if report.summary.rooms.len() > 1 {
        say!("\n== rooms ==\n{}", report.rooms_text(args.room_details));
    }
    if report.nodes.len() > 1 {
        say!("\n== nodes ==\n{}", crate::nodes::nodes_text(&report.nodes));
    }
    if let Some(by_node) = &report.latency_by_node {
        say!("{}", by_node.to_text());
    }
    let json = serde_json::to_string_pretty(&report).map_err(|e| LoadError::Io(e.to_string()))?;
    if let Some(path) = &args.report {
        write_file(path, &json)?;
        say!("JSON report: {}", path.display());
    }
    let verdict = Verdict::of(&report.summary, cfg.clients, &args.slo.slo());
    say!("\n{}", verdict.line(&report.summary));
    if args.json {
        println!("{json}");
    }
    Ok(verdict)
}

/// A `tutti serve` child process, killed when dropped.
struct LocalServer {
    child: Child,
    api: SocketAddr,
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port(udp: bool) -> Result<u16, LoadError> {
    let port = if udp {
        std::net::UdpSocket::bind("127.0.0.1:0").and_then(|s| s.local_addr())
    } else {
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|s| s.local_addr())
    };
    port.map(|a| a.port()).map_err(|e| LoadError::Io(format!("finding a free port: {e}")))
}

/// The local server's connection cap, whole and per address: above what
/// any search holds (`--max` defaults to 4,000 clients, one WebSocket each).
const LOCAL_MAX_CONNECTIONS: usize = 100_000;

/// How `tutti capacity` starts its local server.
#[derive(Debug, Clone, Default)]
struct Launch {
    /// `--mix-threads` (0 = one per core it may use).
    mix_threads: usize,
    /// Extra `tutti serve` arguments.
    extra: Vec<String>,
    /// The CPU it is pinned to (`taskset -c`), if any.
    cpu: Option<usize>,
}

/// Starts of a local server that exited before it was ready (a port taken
/// between its pick and the server's bind), each on other ports.
const START_ATTEMPTS: usize = 3;

impl LocalServer {
    /// Starts this executable's `serve` on free loopback ports and waits
    /// for /readyz. A free port can be taken by another process before the
    /// server binds it, and the server then exits at once: it is started
    /// again on other ports, up to [`START_ATTEMPTS`] times in all.
    fn start(launch: &Launch) -> Result<Self, LoadError> {
        let mut attempt = 1;
        loop {
            match Self::start_once(launch) {
                Ok(server) => return Ok(server),
                Err((true, e)) if attempt < START_ATTEMPTS => {
                    eprintln!("  the local server did not start ({e}); trying other ports");
                    attempt += 1;
                }
                Err((_, e)) => return Err(e),
            }
        }
    }

    /// One start; the error says whether the server exited before it was ready.
    fn start_once(launch: &Launch) -> Result<Self, (bool, LoadError)> {
        let fatal = |e: LoadError| (false, e);
        let exe =
            std::env::current_exe().map_err(|e| fatal(LoadError::Server(format!("finding the tutti binary: {e}"))))?;
        let api = SocketAddr::from(([127, 0, 0, 1], free_port(false).map_err(fatal)?));
        let media = SocketAddr::from(([127, 0, 0, 1], free_port(true).map_err(fatal)?));
        let metrics = SocketAddr::from(([127, 0, 0, 1], free_port(false).map_err(fatal)?));
        let (mix_threads, extra) = (launch.mix_threads, &launch.extra);
        let mut command = match launch.cpu {
            // Every thread the server starts inherits the mask.
            Some(cpu) => {
                let mut c = Command::new("taskset");
                c.args(["-c", &cpu.to_string()]).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        let child = command
            .args(["serve", "--http", &api.to_string(), "--media", &media.to_string()])
            .args(["--mix-threads", &mix_threads.to_string()])
            .args(["--metrics", &metrics.to_string()])
            .args(["--set", "log.filter=warn,rtc_dtls=error"])
            // Loopback only: every simulated client comes from 127.0.0.1, so
            // no tokens, no per-address join rate limit, and no per-address
            // share of the connections (each client holds its WebSocket).
            .args(["--set", "auth.disabled=true", "--set", "limits.join_rate_per_second=0"])
            .args(["--set", &format!("limits.max_connections={LOCAL_MAX_CONNECTIONS}")])
            .args(["--set", &format!("limits.max_connections_per_address={LOCAL_MAX_CONNECTIONS}")])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| match launch.cpu {
                Some(_) if e.kind() == std::io::ErrorKind::NotFound => LoadError::Server(
                    "--pin starts the server through `taskset`, which is not installed (Debian: util-linux)".into(),
                ),
                _ => LoadError::Server(format!("starting tutti serve: {e}")),
            })
            .map_err(fatal)?;
        let mut server = Self { child, api };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(r) = tutti_client::request(api, "GET", "/readyz", None, b"")
                && r.status == 200
            {
                return Ok(server);
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err((true, LoadError::Server(format!("tutti serve exited: {status}"))));
            }
            if Instant::now() > deadline {
                return Err(fatal(LoadError::Server("tutti serve was not ready within 20 s".into())));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Runs trials with the real generator, a fresh room each.
pub struct LoadRunner {
    /// Settings every trial starts from (clients and room are set per trial).
    pub base: LoadConfig,
    /// Stops a trial early.
    pub stop: Arc<AtomicBool>,
    /// Print each trial's final summary.
    pub verbose: bool,
    trial: usize,
    /// The local server, its settings, and how often it was restarted.
    local: Option<(LocalServer, Launch)>,
    restarts: usize,
}

/// Restarts of a local server that died between trials, before giving up.
const MAX_RESTARTS: usize = 3;

impl LoadRunner {
    /// A runner from `base`.
    pub fn new(base: LoadConfig, stop: Arc<AtomicBool>, verbose: bool) -> Self {
        Self { base, stop, verbose, trial: 0, local: None, restarts: 0 }
    }

    /// Makes sure the local server (if any) is still running; a server that
    /// died (killed from outside, crashed) is reported and started anew.
    fn check_local(&mut self) -> Result<(), LoadError> {
        let Some((server, launch)) = &mut self.local else { return Ok(()) };
        let status = match server.child.try_wait() {
            Ok(None) => return Ok(()),
            Ok(Some(status)) => status.to_string(),
            Err(e) => e.to_string(),
        };
        if self.restarts >= MAX_RESTARTS {
            return Err(LoadError::Server(format!("the local server exited ({status}) {MAX_RESTARTS} times")));
        }
        self.restarts += 1;
        println!("  the local server (pid {}) exited ({status}); starting another", server.child.id());
        let fresh = LocalServer::start(launch)?;
        self.base.api = fresh.api;
        self.base.server_cpu = CpuSource::Process(fresh.child.id());
        println!("  local server (pid {}) on http://{}", fresh.child.id(), fresh.api);
        *server = fresh;
        Ok(())
    }
}

impl TrialRunner for LoadRunner {
    fn run(&mut self, n: usize, window: Duration) -> Result<TrialFigures, LoadError> {
        self.check_local()?;
        self.trial += 1;
        let mut cfg = self.base.clone();
        cfg.clients = n;
        cfg.room = format!("capacity-{}-{n}", self.trial);
        let names: Vec<String> = match rooms::sizes(&cfg) {
            Ok(sizes) => (0..sizes.len()).map(|r| rooms::name(&cfg, r, sizes.len())).collect(),
            Err(e) => return Err(LoadError::Config(format!("N = {n}: {e}"))),
        };
        // Joins take n · cint plus the requests themselves: run until the window has passed.
        cfg.life = None;
        cfg.window = Some(window);
        cfg.leave = false;
        println!("trial {}: N = {n} in {} room(s), window {} s …", self.trial, names.len(), window.as_secs());
        let joined_at = Instant::now();
        let report = generator::run(&cfg, &self.stop, &mut |p| {
            if let Progress::Joining { joined, failed, total } = p
                && joined + failed == total
            {
                println!("  joined {joined}/{total} in {:.1} s ({failed} failed)", joined_at.elapsed().as_secs_f64());
            }
        });
        // The rooms go whatever happened; their peers are closed by the server.
        for room in &names {
            let path = format!("/v1/rooms/{room}");
            // On a cluster, through a redirect to the room's node.
            let _ = cfg.http.request_following(
                cfg.api,
                &crate::generator::caller(cfg.token.as_deref()),
                "DELETE",
                &path,
                None,
                b"",
                2,
            );
        }
        if self.local.as_mut().is_some_and(|(s, _)| !matches!(s.child.try_wait(), Ok(None))) {
            // The server died during the trial: its figures mean nothing; run it again.
            self.check_local()?;
            self.trial -= 1;
            return self.run(n, window);
        }
        let report = report?;
        if self.stop.load(Ordering::Relaxed) {
            return Err(LoadError::Stopped);
        }
        if self.verbose {
            println!("{}", report.summary.to_text());
        }
        if report.nodes.len() > 1 {
            println!("{}", crate::nodes::nodes_text(&report.nodes));
        }
        if let Some(by_node) = &report.latency_by_node {
            println!("{}", by_node.to_text());
        }
        // Let the server finish closing the old room's peers before the next trial.
        std::thread::sleep(Duration::from_secs(2));
        Ok(TrialFigures::from_summary(n, &report.summary))
    }
}

/// The first two CPUs this process may use: the server's and the
/// generator's. Pins the calling thread (and so every thread it starts
/// after) to the second.
fn pin_cores() -> Result<(usize, usize), LoadError> {
    use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
    use nix::unistd::Pid;
    let allowed =
        sched_getaffinity(Pid::from_raw(0)).map_err(|e| LoadError::Io(format!("reading the CPU mask: {e}")))?;
    let cpus: Vec<usize> = (0..CpuSet::count()).filter(|&c| allowed.is_set(c).unwrap_or(false)).take(2).collect();
    let [server, generator] = cpus[..] else {
        return Err(LoadError::Config(format!(
            "--pin needs two CPUs to put the server and the generator on; this process may use {}",
            cpus.len()
        )));
    };
    let mut mask = CpuSet::new();
    mask.set(generator).map_err(|e| LoadError::Io(format!("CPU {generator}: {e}")))?;
    sched_setaffinity(Pid::from_raw(0), &mask)
        .map_err(|e| LoadError::Io(format!("pinning the generator to CPU {generator}: {e}")))?;
    Ok((server, generator))
}

/// Runs `tutti capacity`. Returns whether some N met the SLO.
pub fn run_capacity(args: &CapacityArgs) -> Result<bool, LoadError> {
    let stop = stop_on_signal();
    let mut local = None;
    let mut launch = Launch { mix_threads: args.server_mix_threads, extra: args.server_arg.clone(), cpu: None };
    let pinned = if args.pin {
        let (server, generator) = pin_cores()?;
        launch.cpu = Some(server);
        println!("tutti capacity: the server is pinned to CPU {server}, this generator to CPU {generator}");
        Some(crate::capacity::Pinning { server_cpu: server, generator_cpu: generator })
    } else {
        None
    };
    let (api, http, server_cpu) = match &args.url {
        Some(url) => {
            let (origin, _) = parse_url(url)?;
            let http = client(args.ca_file.as_deref(), &origin)?;
            let cpu = cpu_source(&http, origin.addr(), args.metrics_url.as_deref(), None)?;
            (origin.addr(), http, cpu)
        }
        None => {
            let server = LocalServer::start(&launch)?;
            let source = CpuSource::Process(server.child.id());
            let api = server.api;
            println!("tutti capacity: started a local server (pid {}) on http://{api}", server.child.id());
            local = Some(server);
            (api, Client::plain(), source)
        }
    };
    let mut base = LoadConfig::new(api, 1);
    base.http = http;
    args.fleet.apply(&mut base)?;
    if let Some(s) = args.room_size {
        if s == 0 || s > rooms::MAX_ROOM_SIZE {
            return Err(LoadError::Config(format!("--room-size must be 1 to {}", rooms::MAX_ROOM_SIZE)));
        }
        base.rooms = RoomLayout::Mix(vec![crate::model::SizeShare { size: s, percent: 100.0 }]);
    }
    base.join_interval = Duration::from_millis(args.cint);
    base.warmup = Duration::from_secs_f64(args.warmup.max(0.0));
    base.talkers = args.talkers;
    base.silence = args.silence;
    base.token = token_or_old_env(args.token.clone());
    base.probe_talkers = args.probes;
    base.probe_listeners = args.probe_listeners;
    base.threads = args.threads;
    base.server_cpu = server_cpu.clone();
    base.summary_interval = Duration::from_secs(3600);
    // R rooms need at least R participants.
    let least = if let RoomLayout::Count(r) = base.rooms { r } else { 1 };
    let policy = SearchPolicy {
        start: args.start.max(least),
        max: args.max.max(1),
        resolution: (args.resolution / 100.0).clamp(0.001, 0.5),
        short_window: Duration::from_secs(args.short.max(2)),
        full_window: Duration::from_secs(args.full.max(2)),
        max_trials: args.max_trials.max(1),
        ..SearchPolicy::default()
    };
    let slo = args.slo.slo();
    println!(
        "tutti capacity: SLO p5 MOS ≥ {}, loss ≤ {} % (overall and in the worst room), p95 mouth-to-ear ≤ {} ms, perfect delivery ≥ {} %, no self-echo; {}; {:.0} % talkers, {:.0} % without level, {}; server CPU from {}",
        slo.min_mos_p5,
        slo.max_loss_percent,
        slo.max_latency_p95_ms,
        100.0 * slo.min_perfect_share,
        base.rooms,
        100.0 * args.talkers,
        100.0 * base.no_level_share,
        if base.websocket { "WebSockets on" } else { "no WebSockets" },
        server_cpu.describe()
    );
    let mut runner = LoadRunner::new(base, stop.clone(), args.verbose);
    runner.local = local.map(|s| (s, launch.clone()));
    let mut result = capacity::search(&policy, &slo, &mut runner, &|| stop.load(Ordering::Relaxed), &mut |t| {
        let f = &t.figures;
        println!(
            "  {} N = {}: {} | p5 MOS {:.2} (worst room {:.2}), loss {:.3} % (worst room {:.3} %), m2e p95 {} ms, perfect {:.1} %, server {} µs/participant/tick, generator {} cores{}",
            t.phase,
            f.n,
            if t.pass { "PASS" } else { "FAIL" },
            f.mos_p5,
            f.worst_room_mos_p5,
            f.loss_percent,
            f.worst_room_loss_percent,
            f.latency_p95_ms.map_or("-".into(), |l| if l.is_finite() { format!("{l:.0}") } else { "missed".into() }),
            100.0 * f.perfect_share,
            f.server_us_per_participant_tick.map_or("unknown".into(), |v| format!("{v:.1}")),
            f.generator_cpu_cores.map_or("?".into(), |v| format!("{v:.2}")),
            if t.pass { String::new() } else { format!(" ({})", t.violations.join("; ")) }
        );
    })?;
    drop(runner);
    result.pinned = pinned;
    let table = result.table();
    println!("\n{}\n\n{table}", result.headline());
    let md = format!("# tutti capacity\n\n```text\n{}\n```\n\n{table}", result.headline());
    write_file(&args.out.join("capacity.md"), &md)?;
    let json = serde_json::to_string_pretty(&result).map_err(|e| LoadError::Io(e.to_string()))?;
    write_file(&args.out.join("capacity.json"), &json)?;
    write_file(&args.out.join("capacity.svg"), &result.svg())?;
    println!("wrote {}/capacity.{{md,json,svg}}", args.out.display());
    Ok(result.max_n.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_names_a_tcp_share() {
        assert_eq!(parse_transport("udp"), Ok(0.0));
        assert_eq!(parse_transport("tcp"), Ok(1.0));
        assert_eq!(parse_transport("mixed"), Ok(0.5));
        assert_eq!(parse_transport("mixed:0.2"), Ok(0.2));
        assert!(parse_transport("mixed:2").is_err());
        assert!(parse_transport("quic").is_err());
    }

    #[test]
    fn urls() {
        let (a, p) = parse_url("http://127.0.0.1:8080").expect("url");
        assert_eq!((a.addr().port(), a.is_tls(), p.as_str()), (8080, false, "/"));
        let (a, p) = parse_url("127.0.0.2:9/metrics").expect("url");
        assert_eq!((a.addr().to_string().as_str(), p.as_str()), ("127.0.0.2:9", "/metrics"));
        let (a, _) = parse_url("https://127.0.0.1:8443").expect("https");
        assert_eq!((a.is_tls(), a.ws_url("/w").as_str()), (true, "wss://127.0.0.1:8443/w"));
        let e = parse_url("ftp://127.0.0.1:1").expect_err("no ftp").to_string();
        assert!(e.contains("unknown scheme"), "{e}");
    }

    #[derive(clap::Parser)]
    struct Load {
        #[command(flatten)]
        args: LoadArgs,
    }

    #[derive(clap::Parser)]
    struct Capacity {
        #[command(flatten)]
        args: CapacityArgs,
    }

    #[test]
    fn recording_and_webhook_flags() {
        use clap::Parser;
        let l = Load::try_parse_from(["load", "--record", "--webhook-listen", "127.0.0.1:9100"]).expect("valid");
        assert!(l.args.record);
        assert_eq!(l.args.webhook_listen, Some("127.0.0.1:9100".parse().expect("addr")));
        let l = Load::try_parse_from(["load"]).expect("valid");
        assert!(!l.args.record && l.args.webhook_listen.is_none(), "both off by default");
        assert!(!l.args.record_per_speaker, "off by default");
        let l = Load::try_parse_from(["load", "--record-per-speaker"]).expect("valid");
        assert!(l.args.record_per_speaker);
        assert!(Load::try_parse_from(["load", "--webhook-listen", "localhost"]).is_err(), "an address, not a name");
    }

    #[test]
    fn fleet_flags() {
        use clap::Parser;
        let l = Load::try_parse_from(["load", "--rooms", "20", "--no-ws", "--no-level-share", "0.5"]).expect("valid");
        assert_eq!(l.args.fleet.layout(), RoomLayout::Count(20));
        assert!(l.args.fleet.no_ws);
        let mut cfg = LoadConfig::new("127.0.0.1:1".parse().expect("addr"), 100);
        l.args.fleet.apply(&mut cfg).expect("valid");
        assert!(!cfg.websocket && cfg.no_level_share == 0.5 && cfg.rooms == RoomLayout::Count(20));
        let l = Load::try_parse_from(["load", "--room-sizes", "2:30,10:70"]).expect("valid");
        assert!(matches!(l.args.fleet.layout(), RoomLayout::Mix(m) if m.len() == 2));
        assert!(LoadConfig::new("127.0.0.1:1".parse().expect("addr"), 1).websocket, "WebSockets are on by default");
        assert!(!cfg.rtc_receive, "the lean receive path by default");
        let l = Load::try_parse_from(["load", "--rtc-receive"]).expect("valid");
        l.args.fleet.apply(&mut cfg).expect("valid");
        assert!(cfg.rtc_receive, "--rtc-receive puts the clients on webrtc-rs's receive");
        // Bad input: a clear error, no panic.
        let e = Load::try_parse_from(["load", "--room-sizes", "2:30,10:50"]).err().expect("refused").to_string();
        assert!(e.contains("add up to 80"), "{e}");
        assert!(Load::try_parse_from(["load", "--rooms", "2", "--room-sizes", "2:100"]).is_err());
        let l = Load::try_parse_from(["load", "--no-level-share", "1.5"]).expect("parses");
        assert!(l.args.fleet.apply(&mut cfg).is_err());
        let c = Capacity::try_parse_from(["capacity", "--room-size", "10"]).expect("valid");
        assert_eq!(c.args.room_size, Some(10));
        assert!(Capacity::try_parse_from(["capacity", "--room-size", "10", "--rooms", "3"]).is_err());
    }
}
