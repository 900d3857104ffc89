//! A real `redis-server` for the tests: installed from Debian when missing,
//! started on a free loopback port in a temporary directory, killed on drop.

#![allow(dead_code, clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tutti_cluster::{Cluster, ClusterConfig};

pub const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef-test";

static INSTALL: Mutex<()> = Mutex::new(());

/// The path of `redis-server`, installing Debian's package when it is missing.
fn redis_server_binary() -> PathBuf {
    let _guard = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    let found = |p: &str| std::path::Path::new(p).exists().then(|| PathBuf::from(p));
    if let Some(p) = found("/usr/bin/redis-server") {
        return p;
    }
    if Command::new("redis-server").arg("--version").output().is_ok_and(|o| o.status.success()) {
        return PathBuf::from("redis-server");
    }
    eprintln!("redis-server missing: installing Debian's package (apt-get)");
    let run = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .unwrap_or_else(|e| panic!("cannot run apt-get {args:?} (are we root on Debian?): {e}"))
    };
    let update = run(&["update"]);
    assert!(update.success(), "apt-get update failed ({update}); install redis-server by hand");
    let install = run(&["install", "-y", "redis-server"]);
    assert!(install.success(), "apt-get install -y redis-server failed ({install}); install it by hand");
    found("/usr/bin/redis-server").expect("redis-server still missing after apt-get install")
}

/// One `redis-server` process; killed (and its directory removed) on drop.
pub struct RedisServer {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl RedisServer {
    pub fn start() -> Self {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
            l.local_addr().expect("local addr").port()
        };
        let dir = std::env::temp_dir().join(format!("tutti-cluster-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut server = Self { port, dir, child: None };
        server.spawn();
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    fn spawn(&mut self) {
        let child = Command::new(redis_server_binary())
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--dir", self.dir.to_str().expect("utf-8 temp dir")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.ping() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {} did not answer PING within 10 s", self.port);
    }

    fn ping(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else { return false };
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    /// Kills the server (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends a signal to the server (`STOP` freezes it: connections stay
    /// open and nothing answers, as with a hung or unreachable host; `CONT`).
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("server running").id().to_string();
        let status = Command::new("kill").args([&format!("-{signal}"), &pid]).status().expect("run kill");
        assert!(status.success(), "kill -{signal} {pid} failed");
    }

    /// Starts it again on the same port (empty: no persistence).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// A plain command over a fresh connection (for checking keys).
    pub fn command(&self, args: &[&str]) -> redis::Value {
        let client = redis::Client::open(self.url()).expect("client");
        let mut con = client.get_connection().expect("connect");
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut con).expect("command")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A node config with short timings (node TTL 2 s) so the tests stay short.
pub fn config(redis: &RedisServer, id: &str) -> ClusterConfig {
    ClusterConfig {
        redis_url: redis.url(),
        node_id: id.into(),
        api_url: format!("http://{id}.test:8080"),
        media_addr: format!("{id}.test:3478"),
        heartbeat_interval_seconds: 0.5,
        node_ttl_seconds: 2.0,
        lease_ttl_seconds: 4.0,
        capacity: 100,
        ..ClusterConfig::default()
    }
}

pub async fn start(redis: &RedisServer, id: &str) -> Cluster {
    Cluster::start(config(redis, id), SECRET).await.expect("start cluster node")
}

/// Polls `check` every 50 ms until it holds or `limit` passes; returns the time it took.
pub async fn wait_for<F, Fut>(limit: Duration, mut check: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while started.elapsed() < limit {
        if check().await {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}
