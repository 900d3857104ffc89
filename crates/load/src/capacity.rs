//! The capacity search: the largest room that meets a quality bar (the SLO).
//!
//! Ramp (N doubles from `start`) with short trials until one fails, then
//! binary search between the last pass and the first failure down to a
//! resolution, then a full-length trial to confirm; if it fails, step down
//! and confirm again. Each trial joins N fresh clients into a fresh room,
//! warms up, then measures over its window. The policy is generic over a
//! [`TrialRunner`], so it can be tested against a fake server.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::LoadError;
use crate::report::Summary;

/// The quality bar a room must meet.
#[derive(Debug, Clone, Serialize)]
pub struct Slo {
    /// Least 5th-percentile MOS. Default 4.0.
    pub min_mos_p5: f64,
    /// Most loss over all clients, percent. Default 1.
    pub max_loss_percent: f64,
    /// Most 95th-percentile mouth-to-ear latency, ms (a missed marker counts
    /// as infinitely late). Default 150.
    pub max_latency_p95_ms: f64,
    /// Least share of clients with perfect delivery. Default 0.99.
    pub min_perfect_share: f64,
}

impl Default for Slo {
    fn default() -> Self {
        Self { min_mos_p5: 4.0, max_loss_percent: 1.0, max_latency_p95_ms: 150.0, min_perfect_share: 0.99 }
    }
}

/// The figures of one trial that the SLO and the report use.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TrialFigures {
    /// Participants asked for.
    pub n: usize,
    /// Connected at the end.
    pub connected: usize,
    /// Rooms of the trial.
    pub rooms: usize,
    /// The worst room (lowest p5 MOS, then most loss).
    pub worst_room: Option<String>,
    /// Its p5 MOS (the overall figure for a single room).
    pub worst_room_mos_p5: f64,
    /// Its loss, percent.
    pub worst_room_loss_percent: f64,
    /// 5th-percentile MOS.
    pub mos_p5: f64,
    /// Loss over all clients, percent.
    pub loss_percent: f64,
    /// 95th-percentile mouth-to-ear latency, ms (`None`: none measured;
    /// infinite: some marker missed).
    pub latency_p95_ms: Option<f64>,
    /// Median mouth-to-ear latency, ms.
    pub latency_p50_ms: Option<f64>,
    /// Largest drift delay over clients, ms.
    pub drift_max_ms: f64,
    /// Share of clients with perfect delivery.
    pub perfect_share: f64,
    /// Probe talkers that heard themselves.
    pub self_echo: usize,
    /// Whether the generator kept up.
    pub valid: bool,
    /// Why not.
    pub invalid_reasons: Vec<String>,
    /// Server CPU, cores.
    pub server_cpu_cores: Option<f64>,
    /// Server CPU per participant per 20 ms tick, µs.
    pub server_us_per_participant_tick: Option<f64>,
    /// The server's busiest threads, share of a core.
    pub server_threads: Vec<(String, f64)>,
    /// Generator CPU, cores.
    pub generator_cpu_cores: Option<f64>,
    /// Generator p99 send lateness, ms.
    pub lateness_p99_ms: f64,
    /// Machine busy (0..1).
    pub machine_busy: Option<f64>,
    /// Datagrams dropped on the server's media socket (local server).
    pub server_udp_drops: Option<u64>,
}

impl TrialFigures {
    /// The figures of a load run's final summary.
    pub fn from_summary(n: usize, s: &Summary) -> Self {
        let worst = s.worst_room.and_then(|w| s.rooms.get(w));
        Self {
            n,
            connected: s.connected,
            rooms: s.rooms.len(),
            worst_room: worst.map(|w| w.name.clone()),
            worst_room_mos_p5: worst.map_or(s.mos_p5, |w| w.mos_p5),
            worst_room_loss_percent: worst.map_or(s.loss_total_percent, |w| w.loss_percent),
            mos_p5: s.mos_p5,
            loss_percent: s.loss_total_percent,
            latency_p95_ms: s.latency.p95_ms,
            latency_p50_ms: s.latency.p50_ms,
            drift_max_ms: s.drift_ms.max,
            perfect_share: s.perfect_share,
            self_echo: s.self_echo,
            valid: s.valid,
            invalid_reasons: s.invalid_reasons.clone(),
            server_cpu_cores: s.server_cpu_cores,
            server_us_per_participant_tick: s.server_us_per_participant_tick,
            server_threads: s.server_threads.clone(),
            generator_cpu_cores: s.generator.cpu_cores,
            lateness_p99_ms: s.generator.lateness_p99_ms,
            machine_busy: s.machine_busy,
            server_udp_drops: s.server_udp_drops,
        }
    }
}

impl Slo {
    /// What `f` violates (empty: it meets the SLO). An invalid run violates
    /// it too: its figures say more about the generator than the server.
    pub fn violations(&self, f: &TrialFigures) -> Vec<String> {
        let mut v = Vec::new();
        if f.mos_p5 < self.min_mos_p5 {
            v.push(format!("p5 MOS {:.2} < {}", f.mos_p5, self.min_mos_p5));
        }
        if f.loss_percent > self.max_loss_percent {
            v.push(format!("loss {:.2} % > {} %", f.loss_percent, self.max_loss_percent));
        }
        // With several rooms, the worst room must meet the MOS and loss bars
        // too (perfect delivery is judged overall: in a room of 2, one late
        // frame would be half the room).
        if f.rooms > 1 {
            let name = f.worst_room.as_deref().unwrap_or("?");
            if f.worst_room_mos_p5 < self.min_mos_p5 {
                v.push(format!("worst room {name}: p5 MOS {:.2} < {}", f.worst_room_mos_p5, self.min_mos_p5));
            }
            if f.worst_room_loss_percent > self.max_loss_percent {
                v.push(format!(
                    "worst room {name}: loss {:.2} % > {} %",
                    f.worst_room_loss_percent, self.max_loss_percent
                ));
            }
        }
        match f.latency_p95_ms {
            None => v.push("mouth-to-ear not measured".into()),
            Some(l) if !l.is_finite() => v.push("markers missed (p95 mouth-to-ear unbounded)".into()),
            Some(l) if l > self.max_latency_p95_ms => {
                v.push(format!("p95 mouth-to-ear {l:.0} ms > {} ms", self.max_latency_p95_ms))
            }
            Some(_) => {}
        }
        if f.perfect_share < self.min_perfect_share {
            v.push(format!(
                "perfect delivery {:.2} % < {:.2} %",
                100.0 * f.perfect_share,
                100.0 * self.min_perfect_share
            ));
        }
        if f.self_echo > 0 {
            v.push(format!("{} probe(s) heard themselves", f.self_echo));
        }
        if !f.valid {
            v.push(format!("INVALID (the generator did not keep its schedule): {}", f.invalid_reasons.join("; ")));
        }
        v
    }
}

/// Runs one trial of `n` participants measured over `window`.
pub trait TrialRunner {
    /// Runs it and returns its figures.
    fn run(&mut self, n: usize, window: Duration) -> Result<TrialFigures, LoadError>;
}

/// How the search proceeds.
#[derive(Debug, Clone, Serialize)]
pub struct SearchPolicy {
    /// First N of the ramp. Default 100.
    pub start: usize,
    /// Largest N tried. Default 4 000.
    pub max: usize,
    /// The ramp multiplies N by this. Default 2.
    pub growth: f64,
    /// The binary search stops when the gap is at most this share of N … Default 0.05.
    pub resolution: f64,
    /// … or this many participants, whichever is more. Default 10.
    pub min_step: usize,
    /// Measurement window of ramp and search trials. Default 10 s.
    pub short_window: Duration,
    /// Measurement window of the confirming trial. Default 30 s.
    pub full_window: Duration,
    /// Most short trials. Default 14.
    pub max_trials: usize,
    /// Most confirming trials. Default 3.
    pub max_confirms: usize,
    /// An invalid (generator-bound) failing trial is run again this many
    /// times before it counts: on a shared machine a burst of someone else's
    /// work can starve the generator for a while. Default 1.
    pub retry_invalid: usize,
}

impl Default for SearchPolicy {
    fn default() -> Self {
        Self {
            start: 100,
            max: 4_000,
            growth: 2.0,
            resolution: 0.05,
            min_step: 10,
            short_window: Duration::from_secs(10),
            full_window: Duration::from_secs(30),
            max_trials: 14,
            max_confirms: 3,
            retry_invalid: 1,
        }
    }
}

/// Which phase a trial belonged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Doubling N.
    Ramp,
    /// Bisecting.
    Search,
    /// Full-length confirmation.
    Confirm,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Ramp => "ramp",
            Self::Search => "search",
            Self::Confirm => "confirm",
        })
    }
}

/// One trial and its verdict.
#[derive(Debug, Clone, Serialize)]
pub struct Trial {
    /// Phase.
    pub phase: Phase,
    /// Measurement window, s.
    pub window_s: f64,
    /// Wall time of the whole trial (joins, warm-up, window, teardown), s.
    pub took_s: f64,
    /// Whether it met the SLO.
    pub pass: bool,
    /// What it violated.
    pub violations: Vec<String>,
    /// Its figures.
    pub figures: TrialFigures,
}

/// The outcome of a search.
#[derive(Debug, Clone, Serialize)]
pub struct CapacityResult {
    /// The largest N confirmed by a full-length trial (`None`: none passed).
    pub max_n: Option<usize>,
    /// The confirming trial's figures.
    pub at_max: Option<TrialFigures>,
    /// The largest N any trial passed at (short trials included): an upper
    /// hint when the confirmation failed.
    pub best_pass: Option<usize>,
    /// Whether a failure that bounded the search was the generator's (then
    /// the server's capacity is at least `max_n`, possibly more).
    pub limited_by_generator: bool,
    /// The SLO.
    pub slo: Slo,
    /// The policy.
    pub policy: SearchPolicy,
    /// Every trial, in order.
    pub trials: Vec<Trial>,
    /// Wall time of the whole search, s.
    pub elapsed_s: f64,
    /// Where the server and the generator were pinned (`--pin`): then the
    /// server had one core, and its capacity is participants per core.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinned: Option<Pinning>,
}

/// `tutti capacity --pin`: the CPU of each side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Pinning {
    /// The local server's CPU (all its threads).
    pub server_cpu: usize,
    /// The generator's CPU.
    pub generator_cpu: usize,
}

/// Searches the largest N meeting `slo`. `stop` is polled between trials.
pub fn search(
    policy: &SearchPolicy,
    slo: &Slo,
    runner: &mut dyn TrialRunner,
    stop: &dyn Fn() -> bool,
    on_trial: &mut dyn FnMut(&Trial),
) -> Result<CapacityResult, LoadError> {
    let started = Instant::now();
    let mut trials: Vec<Trial> = Vec::new();
    let mut run = |n: usize, phase: Phase, trials: &mut Vec<Trial>| -> Result<bool, LoadError> {
        if stop() {
            return Err(LoadError::Stopped);
        }
        let window = if phase == Phase::Confirm { policy.full_window } else { policy.short_window };
        let mut attempt = 0;
        loop {
            let t0 = Instant::now();
            let figures = runner.run(n, window)?;
            let violations = slo.violations(&figures);
            let trial = Trial {
                phase,
                window_s: window.as_secs_f64(),
                took_s: t0.elapsed().as_secs_f64(),
                pass: violations.is_empty(),
                violations,
                figures,
            };
            on_trial(&trial);
            let (pass, valid) = (trial.pass, trial.figures.valid);
            trials.push(trial);
            if pass || valid || attempt >= policy.retry_invalid || stop() {
                return Ok(pass);
            }
            attempt += 1;
        }
    };
    let step = |n: usize| ((n as f64 * policy.resolution).ceil() as usize).max(policy.min_step).max(1);
    let max = policy.max.max(1);

    // Ramp.
    let mut lo = 0usize;
    let mut hi: Option<usize> = None;
    let mut n = policy.start.clamp(1, max);
    let mut short = 0;
    while short < policy.max_trials {
        short += 1;
        if run(n, Phase::Ramp, &mut trials)? {
            lo = n;
            if n >= max {
                break;
            }
            n = ((n as f64 * policy.growth.max(1.1)).ceil() as usize).min(max);
        } else {
            hi = Some(n);
            break;
        }
    }
    // Bisect.
    if let Some(mut h) = hi {
        while short < policy.max_trials && h - lo > step(lo.max(policy.min_step)) {
            short += 1;
            let mid = lo + (h - lo) / 2;
            if run(mid, Phase::Search, &mut trials)? {
                lo = mid;
            } else {
                h = mid;
            }
        }
    }
    // Confirm, stepping down on failure.
    let mut max_n = None;
    let mut candidate = lo;
    for _ in 0..policy.max_confirms {
        if candidate == 0 {
            break;
        }
        if run(candidate, Phase::Confirm, &mut trials)? {
            max_n = Some(candidate);
            break;
        }
        candidate = candidate.saturating_sub(step(candidate).max(candidate / 10));
    }
    let at_max = max_n.and_then(|m| {
        trials.iter().rev().find(|t| t.phase == Phase::Confirm && t.figures.n == m && t.pass).map(|t| t.figures.clone())
    });
    let best_pass = trials.iter().filter(|t| t.pass).map(|t| t.figures.n).max();
    let bound = max_n.unwrap_or(0);
    // The search was bounded by the generator when the smallest N that
    // failed above the result only ever failed as INVALID.
    let first_fail = trials.iter().filter(|t| !t.pass && t.figures.n > bound).map(|t| t.figures.n).min();
    let limited_by_generator =
        first_fail.is_some_and(|n| trials.iter().filter(|t| t.figures.n == n && !t.pass).all(|t| !t.figures.valid));
    Ok(CapacityResult {
        max_n,
        at_max,
        best_pass,
        limited_by_generator,
        slo: slo.clone(),
        policy: policy.clone(),
        trials,
        elapsed_s: started.elapsed().as_secs_f64(),
        pinned: None,
    })
}

/// One trial in a plot panel.
struct Point {
    x: f64,
    y: f64,
    /// A confirming trial.
    big: bool,
    valid: bool,
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let p = 10f64.powf(raw.max(1.0).log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * p).find(|&s| s >= raw).unwrap_or(10.0 * p)
}

fn opt(v: Option<f64>, digits: usize) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.digits$}"),
        Some(_) => "missed".into(),
        None => "-".into(),
    }
}

impl CapacityResult {
    /// Every trial as a Markdown table.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "| # | phase | N | rooms | window s | took s | p5 MOS | worst room p5 MOS | loss % | worst room loss % | m2e p50 ms | m2e p95 ms | max drift ms | perfect % | self-echo | server CPU cores | server µs/participant/tick | server socket drops | machine busy % | generator CPU cores | gen p99 late ms | valid | verdict |"
        );
        let _ = writeln!(
            t,
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"
        );
        for (i, tr) in self.trials.iter().enumerate() {
            let f = &tr.figures;
            let _ = writeln!(
                t,
                "| {} | {} | {} | {} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} | {:.3} | {} | {} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {} | {:.1} | {} | {} |",
                i + 1,
                tr.phase,
                f.n,
                f.rooms,
                tr.window_s,
                tr.took_s,
                f.mos_p5,
                f.worst_room_mos_p5,
                f.loss_percent,
                f.worst_room_loss_percent,
                opt(f.latency_p50_ms, 0),
                opt(f.latency_p95_ms, 0),
                f.drift_max_ms,
                100.0 * f.perfect_share,
                f.self_echo,
                opt(f.server_cpu_cores, 2),
                opt(f.server_us_per_participant_tick, 1),
                f.server_udp_drops.map_or_else(|| "-".into(), |d| d.to_string()),
                opt(f.machine_busy.map(|m| 100.0 * m), 0),
                opt(f.generator_cpu_cores, 2),
                f.lateness_p99_ms,
                if f.valid { "yes" } else { "NO" },
                if tr.pass { "pass".to_owned() } else { format!("fail: {}", tr.violations.join("; ")) }
            );
        }
        t
    }

    /// The headline: max N, CPU at it, search time.
    pub fn headline(&self) -> String {
        let mut t = String::new();
        match (self.max_n, &self.at_max) {
            (Some(n), Some(f)) => {
                let place = if f.rooms > 1 { format!("in {} rooms", f.rooms) } else { "in one room".to_owned() };
                let _ = writeln!(t, "capacity: {n} participants {place} meet the SLO");
                let _ = writeln!(
                    t,
                    "  at N = {n}: server CPU {} cores = {} µs per participant per 20 ms tick; generator CPU {} cores = {} µs per client per tick; p5 MOS {:.2}, loss {:.3} %, mouth-to-ear p50/p95 {}/{} ms, perfect delivery {:.1} %",
                    opt(f.server_cpu_cores, 2),
                    opt(f.server_us_per_participant_tick, 2),
                    opt(f.generator_cpu_cores, 2),
                    opt(f.generator_cpu_cores.map(|c| c * 1e6 / 50.0 / n.max(1) as f64), 1),
                    f.mos_p5,
                    f.loss_percent,
                    opt(f.latency_p50_ms, 0),
                    opt(f.latency_p95_ms, 0),
                    100.0 * f.perfect_share
                );
                if let Some(p) = self.pinned {
                    let _ = writeln!(
                        t,
                        "  pinned: the server on CPU {} alone, the generator on CPU {}: {n} participants per server core",
                        p.server_cpu, p.generator_cpu
                    );
                }
                if !f.server_threads.is_empty() {
                    let threads: Vec<String> =
                        f.server_threads.iter().map(|(n, v)| format!("{n} {:.0} %", 100.0 * v)).collect();
                    let _ = writeln!(t, "  server threads (share of one core): {}", threads.join(", "));
                }
            }
            _ => {
                let _ = writeln!(t, "capacity: no N was confirmed by a full-length trial");
            }
        }
        if let Some(b) = self.best_pass.filter(|&b| Some(b) != self.max_n) {
            let _ = writeln!(t, "  the largest N that passed a (short) trial: {b}");
        }
        if self.limited_by_generator {
            let _ = writeln!(
                t,
                "  NOTE: a failing trial above it was INVALID (the generator did not keep its schedule, starved or saturated): the server may hold more than this"
            );
        }
        let _ = write!(t, "  search took {:.0} s ({} trials)", self.elapsed_s, self.trials.len());
        t
    }

    /// A plot of quality and CPU against N, as SVG: four panels (p5 MOS,
    /// p95 mouth-to-ear, loss and perfect delivery, CPU), one point per trial
    /// (confirming trials drawn larger), SLO bounds dashed.
    pub fn svg(&self) -> String {
        let mut pts: Vec<&Trial> = self.trials.iter().collect();
        pts.sort_by_key(|t| t.figures.n);
        let xmax = pts.iter().map(|t| t.figures.n).max().unwrap_or(1).max(1) as f64 * 1.05;
        let xstep = nice_step(xmax / 5.0);
        let finite = |v: Option<f64>| v.filter(|x| x.is_finite());
        let lat_cap = 400.0;
        type Series<'a> = (&'a str, &'a str, Vec<Point>);
        type Panel<'a> = (String, f64, f64, Option<f64>, Vec<Series<'a>>);
        let series = |f: &dyn Fn(&TrialFigures) -> Option<f64>| -> Vec<Point> {
            pts.iter()
                .filter_map(|t| {
                    f(&t.figures).map(|y| Point {
                        x: t.figures.n as f64,
                        y,
                        big: t.phase == Phase::Confirm,
                        valid: t.figures.valid,
                    })
                })
                .collect()
        };
        let panels: Vec<Panel<'_>> = vec![
            (
                "p5 MOS".into(),
                1.0,
                4.5,
                Some(self.slo.min_mos_p5),
                vec![("p5 MOS", "#1f77b4", series(&|f| Some(f.mos_p5)))],
            ),
            (
                format!("p95 mouth-to-ear, ms (missed markers at {lat_cap:.0})"),
                0.0,
                lat_cap,
                Some(self.slo.max_latency_p95_ms),
                vec![
                    ("p95", "#d62728", series(&|f| f.latency_p95_ms.map(|l| l.min(lat_cap)))),
                    ("p50", "#ff9896", series(&|f| finite(f.latency_p50_ms).map(|l| l.min(lat_cap)))),
                ],
            ),
            (
                "loss % and imperfect delivery % (capped at 10)".into(),
                0.0,
                10.0,
                Some(self.slo.max_loss_percent),
                vec![
                    ("loss %", "#9467bd", series(&|f| Some(f.loss_percent.min(10.0)))),
                    ("imperfect %", "#8c564b", series(&|f| Some((100.0 * (1.0 - f.perfect_share)).min(10.0)))),
                ],
            ),
            (
                "CPU, cores".into(),
                0.0,
                2.0f64.max(
                    pts.iter()
                        .flat_map(|t| [t.figures.server_cpu_cores, t.figures.generator_cpu_cores])
                        .flatten()
                        .fold(0.0, f64::max)
                        * 1.1,
                ),
                None,
                vec![
                    ("server", "#2ca02c", series(&|f| f.server_cpu_cores)),
                    ("generator", "#7f7f7f", series(&|f| f.generator_cpu_cores)),
                ],
            ),
        ];
        let (w, h) = (960.0, 720.0);
        let (pw, ph) = (400.0, 250.0);
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11">"#
        );
        let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let title = match self.max_n {
            Some(n) => format!(
                "tutti capacity: {n} participants meet the SLO ({} trials, {:.0} s)",
                self.trials.len(),
                self.elapsed_s
            ),
            None => format!("tutti capacity: no N confirmed ({} trials)", self.trials.len()),
        };
        let _ = writeln!(s, r#"<text x="{}" y="24" text-anchor="middle" font-size="15">{title}</text>"#, w / 2.0);
        for (k, (name, ymin, ymax, slo, ser)) in panels.iter().enumerate() {
            let x0 = 70.0 + (k % 2) as f64 * (pw + 80.0);
            let y0 = 60.0 + (k / 2) as f64 * (ph + 80.0);
            let sx = |x: f64| x0 + x / xmax * pw;
            let sy = |y: f64| y0 + ph - (y.clamp(*ymin, *ymax) - ymin) / (ymax - ymin) * ph;
            let _ = writeln!(s, r##"<rect x="{x0}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>"##);
            let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">{name}</text>"#, x0 + pw / 2.0, y0 - 8.0);
            for i in 0..=4 {
                let y = ymin + (ymax - ymin) * f64::from(i) / 4.0;
                let _ = writeln!(
                    s,
                    r##"<line x1="{x0}" x2="{}" y1="{yy}" y2="{yy}" stroke="#eee"/><text x="{}" y="{}" text-anchor="end">{y:.1}</text>"##,
                    x0 + pw,
                    x0 - 5.0,
                    sy(y) + 4.0,
                    yy = sy(y)
                );
            }
            let mut x = 0.0;
            while x <= xmax {
                let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">{x:.0}</text>"#, sx(x), y0 + ph + 15.0);
                x += xstep;
            }
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="middle">participants N</text>"#,
                x0 + pw / 2.0,
                y0 + ph + 30.0
            );
            if let Some(v) = slo {
                let _ = writeln!(
                    s,
                    r##"<line x1="{x0}" x2="{}" y1="{y}" y2="{y}" stroke="#000" stroke-dasharray="5,4"/><text x="{}" y="{}" text-anchor="end">SLO</text>"##,
                    x0 + pw,
                    x0 + pw - 4.0,
                    sy(*v) - 4.0,
                    y = sy(*v)
                );
            }
            for (j, (label, color, points)) in ser.iter().enumerate() {
                // The line joins the latest trial at each N (points are sorted by N, then by time).
                let mut latest: Vec<&Point> = Vec::new();
                for p in points {
                    match latest.last_mut() {
                        Some(last) if last.x == p.x => *last = p,
                        _ => latest.push(p),
                    }
                }
                let line: Vec<String> = latest.iter().map(|p| format!("{:.1},{:.1}", sx(p.x), sy(p.y))).collect();
                if line.len() > 1 {
                    let _ = writeln!(
                        s,
                        r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="1.5"/>"#,
                        line.join(" ")
                    );
                }
                for p in points {
                    let r = if p.big { 5.0 } else { 3.0 };
                    let fill = if p.valid { color } else { "white" };
                    let _ = writeln!(
                        s,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="{r}" fill="{fill}" stroke="{color}" stroke-width="1.5"/>"#,
                        sx(p.x),
                        sy(p.y)
                    );
                }
                let ly = y0 + 14.0 + 14.0 * j as f64;
                let _ = writeln!(
                    s,
                    r#"<rect x="{}" y="{}" width="10" height="10" fill="{color}"/><text x="{}" y="{}">{label}</text>"#,
                    x0 + 8.0,
                    ly - 9.0,
                    x0 + 22.0,
                    ly
                );
            }
            if let Some(n) = self.max_n {
                let _ = writeln!(
                    s,
                    r##"<line x1="{x}" x2="{x}" y1="{y0}" y2="{}" stroke="#2ca02c" stroke-dasharray="2,3"/>"##,
                    y0 + ph,
                    x = sx(n as f64)
                );
            }
        }
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{}" text-anchor="middle" fill="#555">large dots: full-length confirming trials; hollow: INVALID (generator off schedule); lines join the latest trial at each N; dotted green: the capacity found</text>"##,
            w / 2.0,
            h - 12.0
        );
        s.push_str("</svg>\n");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server whose quality falls past `short_limit` participants (past
    /// `full_limit` in long trials), and whose generator is the bottleneck
    /// past `generator_limit`.
    struct Fake {
        short_limit: usize,
        full_limit: usize,
        generator_limit: usize,
        log: Vec<(usize, Duration)>,
    }

    impl TrialRunner for Fake {
        fn run(&mut self, n: usize, window: Duration) -> Result<TrialFigures, LoadError> {
            self.log.push((n, window));
            let limit = if window >= Duration::from_secs(30) { self.full_limit } else { self.short_limit };
            let good = n <= limit;
            Ok(TrialFigures {
                n,
                connected: n,
                mos_p5: if good { 4.3 } else { 3.2 },
                loss_percent: if good { 0.0 } else { 3.0 },
                latency_p95_ms: Some(if good { 70.0 } else { 400.0 }),
                latency_p50_ms: Some(60.0),
                perfect_share: if good { 1.0 } else { 0.5 },
                valid: n <= self.generator_limit,
                server_cpu_cores: Some(n as f64 / 1000.0),
                ..TrialFigures::default()
            })
        }
    }

    fn fake(short_limit: usize, full_limit: usize) -> Fake {
        Fake { short_limit, full_limit, generator_limit: usize::MAX, log: Vec::new() }
    }

    fn run(f: &mut Fake) -> CapacityResult {
        search(&SearchPolicy::default(), &Slo::default(), f, &|| false, &mut |_| {}).expect("search")
    }

    #[test]
    fn ramps_bisects_and_confirms() {
        let mut f = fake(1234, 1234);
        let r = run(&mut f);
        let n = r.max_n.expect("found");
        assert!((1234 - 1234 / 20 - 1..=1234).contains(&n), "{n}");
        let ns: Vec<usize> = f.log.iter().map(|(n, _)| *n).collect();
        assert_eq!(&ns[..5], &[100, 200, 400, 800, 1600]);
        assert_eq!(f.log.last().map(|l| l.1), Some(Duration::from_secs(30)));
        assert_eq!(r.trials.iter().filter(|t| t.phase == Phase::Confirm).count(), 1);
        assert!(!r.limited_by_generator);
        assert!(r.table().lines().count() == r.trials.len() + 2);
        let svg = r.svg();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        // Left for a look: the plot of a known search.
        let _ = std::fs::write(std::env::temp_dir().join("tutti-capacity-fake.svg"), &svg);
        assert!(r.headline().contains(&format!("capacity: {n}")));
    }

    #[test]
    fn a_failed_confirmation_steps_down() {
        let mut f = fake(1234, 1100);
        let r = run(&mut f);
        let n = r.max_n.expect("found");
        assert!((1000..=1100).contains(&n), "{n}");
        assert!(r.trials.iter().filter(|t| t.phase == Phase::Confirm).count() >= 2);
    }

    #[test]
    fn first_trial_failing_searches_below() {
        let mut f = fake(37, 37);
        let r = run(&mut f);
        let n = r.max_n.expect("found");
        assert!((27..=37).contains(&n), "{n}");
    }

    #[test]
    fn nothing_passes() {
        let mut f = fake(0, 0);
        let r = run(&mut f);
        assert_eq!(r.max_n, None);
        assert!(r.trials.len() <= SearchPolicy::default().max_trials + SearchPolicy::default().max_confirms);
    }

    #[test]
    fn a_generator_bound_failure_is_flagged() {
        let mut f = fake(5000, 5000);
        f.generator_limit = 700;
        let r = run(&mut f);
        let _ = std::fs::write(std::env::temp_dir().join("tutti-capacity-fake-invalid.svg"), r.svg());
        // Each invalid failure was tried twice.
        let invalid = r.trials.iter().filter(|t| !t.figures.valid).count();
        assert_eq!(invalid % 2, 0);
        assert!(f.log.windows(2).any(|w| w[0] == w[1]));
        let n = r.max_n.expect("found");
        assert!(n <= 700, "{n}");
        assert!(r.limited_by_generator);
        assert!(r.trials.iter().any(|t| t.violations.iter().any(|v| v.contains("INVALID"))));
    }

    #[test]
    fn the_cap_is_respected() {
        let mut f = fake(usize::MAX, usize::MAX);
        let policy = SearchPolicy { max: 500, ..SearchPolicy::default() };
        let r = search(&policy, &Slo::default(), &mut f, &|| false, &mut |_| {}).expect("search");
        assert_eq!(r.max_n, Some(500));
        assert!(f.log.iter().all(|(n, _)| *n <= 500));
    }

    #[test]
    fn slo_violations_are_named() {
        let slo = Slo::default();
        let good = TrialFigures {
            mos_p5: 4.3,
            latency_p95_ms: Some(80.0),
            perfect_share: 1.0,
            valid: true,
            ..TrialFigures::default()
        };
        assert!(slo.violations(&good).is_empty());
        let missed = TrialFigures { latency_p95_ms: Some(f64::INFINITY), ..good.clone() };
        assert_eq!(slo.violations(&missed).len(), 1);
        let echo = TrialFigures { self_echo: 1, ..good.clone() };
        assert!(slo.violations(&echo)[0].contains("heard themselves"));
        let unmeasured = TrialFigures { latency_p95_ms: None, ..good.clone() };
        assert!(slo.violations(&unmeasured)[0].contains("not measured"));
        // Several rooms: the worst room must meet the MOS and loss bars too.
        let fleet = TrialFigures {
            rooms: 20,
            worst_room: Some("capacity-1-200-7".into()),
            worst_room_mos_p5: 4.2,
            ..good.clone()
        };
        assert!(slo.violations(&fleet).is_empty());
        let bad_room = TrialFigures { worst_room_mos_p5: 2.0, worst_room_loss_percent: 5.0, ..fleet };
        let v = slo.violations(&bad_room);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].contains("worst room capacity-1-200-7: p5 MOS 2.00"), "{v:?}");
        assert!(v[1].contains("loss 5.00 %"), "{v:?}");
        // One room: its figures are the overall ones, judged once.
        let single = TrialFigures { rooms: 1, worst_room_mos_p5: 2.0, ..good };
        assert!(slo.violations(&single).is_empty());
    }
}
