//! A real Prometheus server (Debian's package) scrapes a running tutti under
//! a small load of real WebRTC talkers, with the shipped scrape config and
//! alert rules; through Prometheus's query API, per-thread CPU is there for
//! every thread role with plausible values, the rules load, every query of
//! the Grafana dashboard runs, and `promtool check metrics` finds nothing to
//! lint.
//!
//! Needs `prometheus` and `promtool` on PATH. When they are missing and the
//! test runs as root with apt-get, it installs Debian's `prometheus` package
//! itself; otherwise it fails and says how to install it.

mod common;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{http, start};
use tutti_client::request;
use tutti_client::{JoinAs, ToneClient};

const INSTALL_HINT: &str = "this test needs the Prometheus server and promtool on PATH: on Debian, as root, \
                            `apt-get update && apt-get install -y prometheus`";

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| p.is_file())
}

fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|ids| ids.split_whitespace().next()) == Some("0")
}

/// `prometheus` and `promtool`, installed from Debian's package when missing
/// (root with apt-get only).
fn prometheus_binaries() -> (PathBuf, PathBuf) {
    if let (Some(server), Some(tool)) = (on_path("prometheus"), on_path("promtool")) {
        return (server, tool);
    }
    assert!(is_root() && on_path("apt-get").is_some(), "{INSTALL_HINT}");
    for args in [&["update"][..], &["install", "-y", "--no-install-recommends", "prometheus"][..]] {
        let status = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("running apt-get {args:?}: {e}; {INSTALL_HINT}"));
        assert!(status.success(), "apt-get {args:?} failed: {status}; {INSTALL_HINT}");
    }
    match (on_path("prometheus"), on_path("promtool")) {
        (Some(server), Some(tool)) => (server, tool),
        _ => panic!("apt-get installed prometheus but it is not on PATH; {INSTALL_HINT}"),
    }
}

/// Kills the Prometheus server (the child this test started) however the test ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An instant query: each series' labels and value. Empty until Prometheus answers.
fn query(prometheus: SocketAddr, promql: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let path = format!("/api/v1/query?query={}", url_encode(promql));
    let Ok(r) = request(prometheus, "GET", &path, None, b"") else { return Vec::new() };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&r.body) else { return Vec::new() };
    assert_eq!(v["status"], "success", "{promql}: {}", r.body);
    let results = v["data"]["result"].as_array().cloned().unwrap_or_default();
    results
        .iter()
        .map(|s| {
            let labels = serde_json::from_value(s["metric"].clone()).expect("labels");
            let value = s["value"][1].as_str().and_then(|v| v.parse().ok()).expect("a value");
            (labels, value)
        })
        .collect()
}

/// Values by the `thread` label.
fn by_thread(series: Vec<(BTreeMap<String, String>, f64)>) -> BTreeMap<String, f64> {
    series.into_iter().filter_map(|(labels, v)| Some((labels.get("thread")?.clone(), v))).collect()
}

/// The shipped config, pointed at this server, scraping every second.
fn write_config(dir: &Path, metrics: SocketAddr) -> PathBuf {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus");
    let shipped = std::fs::read_to_string(deploy.join("prometheus.yml")).expect("deploy/prometheus/prometheus.yml");
    for needle in ["\"127.0.0.1:9464\"", "scrape_interval: 5s", "evaluation_interval: 5s"] {
        assert!(shipped.contains(needle), "deploy/prometheus/prometheus.yml no longer has {needle}");
    }
    let config = shipped
        .replace("\"127.0.0.1:9464\"", &format!("\"{metrics}\""))
        .replace("scrape_interval: 5s", "scrape_interval: 1s")
        .replace("evaluation_interval: 5s", "evaluation_interval: 1s");
    std::fs::copy(deploy.join("alerts.yml"), dir.join("alerts.yml")).expect("copy alerts.yml");
    let path = dir.join("prometheus.yml");
    std::fs::write(&path, config).expect("write config");
    path
}

#[test]
fn prometheus_sees_every_thread_by_name() {
    let (server_bin, promtool) = prometheus_binaries();
    let (rt, server) = start();
    let api = server.http_addr();
    let metrics = server.metrics_addr().expect("metrics are on");

    // A small real load: four talkers in one room.
    assert_eq!(http(api, "POST", "/v1/rooms", Some("application/json"), br#"{"id":"load"}"#).status, 201);
    let freqs = [330.0, 440.0, 550.0, 660.0];
    let mut clients: Vec<ToneClient> =
        freqs.iter().map(|&f| ToneClient::join(api, "load", f, JoinAs::Whip).expect("join")).collect();

    let dir = std::env::temp_dir().join(format!("tutti-prometheus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = write_config(&dir, metrics);
    let prometheus: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let log = std::fs::File::create(dir.join("prometheus.log")).expect("log file");
    let child = Command::new(&server_bin)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address={prometheus}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", server_bin.display()));
    let running = Running(child);

    // Talk while Prometheus starts and scrapes, until it holds 8 s of
    // samples (bounded: 60 s).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut next_check = Instant::now();
    let mut scraped = 0.0;
    while scraped < 8.0 {
        assert!(
            Instant::now() < deadline,
            "Prometheus did not scrape tutti for 8 s within 60 s (samples: {scraped}); its log: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        let now = Instant::now();
        for c in &mut clients {
            c.pump(now);
        }
        if now >= next_check {
            next_check = now + Duration::from_millis(500);
            scraped = query(prometheus, r#"count_over_time(up{job="tutti"}[10s])"#).first().map_or(0.0, |s| s.1);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(clients.iter().all(|c| c.heard.len() > 100), "the load is real: everyone hears the mix");

    let up = query(prometheus, r#"up{job="tutti"}"#);
    assert_eq!(up.first().map(|s| s.1), Some(1.0), "{up:?}");

    // Every thread role has its series, named by thread.
    let cpu = by_thread(query(prometheus, r#"tutti_thread_cpu_seconds_total{job="tutti"}"#));
    for thread in ["mix-0", "mix-1", "mix-clock", "io-0"] {
        assert!(cpu.contains_key(thread), "no series for {thread}: {cpu:?}");
    }
    assert!(cpu.keys().any(|t| t.starts_with("api-")), "no api-* series: {cpu:?}");
    assert!(cpu.values().all(|v| v.is_finite() && *v >= 0.0), "{cpu:?}");

    // Rates are plausible: no thread above one core; the mixer works under load.
    let rates = by_thread(query(prometheus, r#"rate(tutti_thread_cpu_seconds_total{job="tutti"}[5s])"#));
    for (thread, rate) in &rates {
        let cores = if thread == "api-blocking" { 4.0 } else { 1.0 };
        assert!((0.0..=cores + 0.1).contains(rate), "{thread} at {rate} cores: {rates:?}");
    }
    // A light load is mixed on mix-clock itself; heavy ticks go to mix-N.
    let mix: f64 = ["mix-0", "mix-1", "mix-clock"].iter().map(|t| rates.get(*t).copied().unwrap_or(0.0)).sum();
    assert!(mix > 0.0, "the mixer works under load: {rates:?}");
    // The threads add up to the process (threads that came and went between
    // scrapes are the only gap).
    eprintln!("per-thread CPU, cores over the last 5 s: {rates:?}");
    let threads: f64 = rates.values().sum();
    let process = query(prometheus, r#"rate(process_cpu_seconds_total{job="tutti"}[5s])"#);
    let process = process.first().map(|s| s.1).expect("process_cpu_seconds_total is scraped");
    assert!((threads - process).abs() <= 0.1 + 0.1 * process, "threads {threads} vs process {process} cores");

    // The shipped alert rules loaded and evaluate without error.
    let r = request(prometheus, "GET", "/api/v1/rules", None, b"").expect("rules");
    let v: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    let rules: Vec<&serde_json::Value> = v["data"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .collect();
    let names: Vec<&str> = rules.iter().filter_map(|r| r["name"].as_str()).collect();
    for alert in ["TuttiThreadSaturated", "TuttiMixerTickOverruns", "TuttiHighReceiveLoss", "TuttiJoinFailures"] {
        assert!(names.contains(&alert), "{alert} not loaded: {names:?}");
    }
    assert!(rules.iter().all(|r| r["health"] != "err"), "a rule fails to evaluate: {}", r.body);
    let firing: Vec<&str> =
        rules.iter().filter(|r| r["state"] == "firing").filter_map(|r| r["name"].as_str()).collect();
    assert!(firing.is_empty(), "a healthy small call fires {firing:?}");

    // Every query of the Grafana dashboard runs on this Prometheus (with
    // Grafana's variables filled in), and the key panels have data.
    let dashboard = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana/tutti.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dashboard).expect("deploy/grafana/tutti.json")).expect("JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    for panel in panels.iter().filter(|p| p["type"] != "row") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("expr");
            let promql = expr.replace("$__rate_interval", "5s").replace("$instance", ".*");
            let series = query(prometheus, &promql); // asserts the query is valid
            let title = panel["title"].as_str().unwrap_or_default();
            if ["CPU per thread", "Mixer tick duration", "Participants", "Media packets"]
                .iter()
                .any(|t| title.starts_with(t))
            {
                assert!(!series.is_empty(), "panel '{title}' has no data: {promql}");
            }
        }
    }

    // promtool lints the exposition itself.
    let body = http(metrics, "GET", "/metrics", None, b"").body;
    let mut lint = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    lint.stdin.take().expect("stdin").write_all(body.as_bytes()).expect("write");
    let out = lint.wait_with_output().expect("promtool runs");
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    drop(running);
    rt.block_on(server.shutdown());
    let _ = std::fs::remove_dir_all(&dir);
}
