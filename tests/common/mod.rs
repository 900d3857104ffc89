//! `tutti serve` as a child process, for the tests that run the binary.
#![allow(dead_code, missing_docs)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::thread::JoinHandle;

use nix::unistd::Pid;

pub mod cluster;

/// A running `tutti serve`: its process, its API address (from the first
/// banner line), the rest of its stdout, and its stderr as it is collected.
pub struct Served {
    pub child: Child,
    pub api: SocketAddr,
    pub stdout: BufReader<ChildStdout>,
    logs: JoinHandle<String>,
}

/// `tutti serve` on ephemeral loopback ports, auth off and no join rate
/// limit, with its metrics on a free loopback port (returned), and `extra`.
pub fn serve_open_with_metrics(extra: &[&str]) -> (Served, SocketAddr) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let metrics: SocketAddr = ([127, 0, 0, 1], port).into();
    let at = metrics.to_string();
    let mut args = vec!["--http", "127.0.0.1:0", "--media", "127.0.0.1:0", "--metrics", &at];
    args.extend_from_slice(&["--set", "auth.disabled=true", "--set", "limits.join_rate_per_second=0"]);
    args.extend_from_slice(extra);
    (serve(&args), metrics)
}

/// The value of the unlabelled metric `name` that `tutti serve` exports at
/// `metrics` (0 when it is not there yet).
pub fn metric(metrics: SocketAddr, name: &str) -> f64 {
    let body = tutti_client::request(metrics, "GET", "/metrics", None, b"").expect("metrics").body;
    let prefix = format!("{name} ");
    body.lines().find_map(|l| l.strip_prefix(prefix.as_str())).and_then(|v| v.trim().parse().ok()).unwrap_or(0.0)
}

/// `tutti serve` on ephemeral loopback ports with its metrics off, and `extra` arguments.
pub fn serve_loopback(extra: &[&str]) -> Served {
    let mut args = vec!["--http", "127.0.0.1:0", "--media", "127.0.0.1:0", "--metrics", "off"];
    args.extend_from_slice(extra);
    serve(&args)
}

/// Starts `tutti serve ARGS…` and reads its banner's first line.
pub fn serve(args: &[&str]) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tutti"))
        .arg("serve")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tutti starts");
    // Read stderr as it comes, so a full pipe never blocks the server.
    let mut stderr = child.stderr.take().expect("stderr");
    let logs = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("banner");
    // "tutti: API on http://127.0.0.1:PORT  media on udp://…"
    let api: SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no API address in {line:?}"));
    Served { child, api, stdout, logs }
}

impl Served {
    pub fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).expect("pid"))
    }

    /// The admin token the banner prints (`export TUTTI_TOKEN=…`) when no secret
    /// is configured.
    pub fn banner_token(&mut self) -> String {
        let mut line = String::new();
        for _ in 0..12 {
            line.clear();
            self.stdout.read_line(&mut line).expect("banner");
            if let Some(t) = line.split("export TUTTI_TOKEN=").nth(1) {
                return t.trim().to_owned();
            }
        }
        panic!("no `export TUTTI_TOKEN=` in the banner (last line {line:?})");
    }

    /// Everything it wrote to stderr (waits for it to exit).
    pub fn logs(self) -> String {
        drop(self.stdout);
        self.logs.join().expect("logs")
    }
}

/// A server in this process on ephemeral loopback ports, auth on as `tutti
/// serve` runs it (every simulated client joins from 127.0.0.1, so no join
/// rate limit), its runtime, and an admin token for it.
pub fn loopback_server() -> (tokio::runtime::Runtime, tutti_server::Server, String) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let mut cfg = tutti_server::Config {
        http: "127.0.0.1:0".parse().expect("addr"),
        media: "127.0.0.1:0".parse().expect("addr"),
        metrics: "127.0.0.1:0".to_owned(),
        mix_threads: 2,
        ..tutti_server::Config::default()
    };
    cfg.limits.join_rate_per_second = 0.0;
    let server = rt.block_on(tutti_server::Server::start(cfg)).expect("server starts");
    let grant = tutti_server::auth::Grant::admin("load-test");
    let token = server.mint_token(&grant, std::time::Duration::from_secs(600)).expect("auth is on");
    (rt, server, token)
}
