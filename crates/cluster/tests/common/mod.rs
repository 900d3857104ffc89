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
    pub dir: PathBuf,
    child: Option<Child>,
    /// Further `redis-server` arguments (a password, TLS).
    extra: Vec<String>,
    /// Listening with TLS only (`--tls-port`): `rediss://` URLs.
    tls: bool,
}

impl RedisServer {
    pub fn start() -> Self {
        Self::start_with(Vec::new(), false)
    }

    /// With a password (`requirepass`): clients must `AUTH`.
    pub fn with_password(password: &str) -> Self {
        Self::start_with(vec!["--requirepass".into(), password.into()], false)
    }

    /// TLS only, with a certificate for 127.0.0.1 signed by a fresh CA (rcgen)
    /// and a password; the CA's PEM file is at [`RedisServer::ca_file`].
    pub fn with_tls(password: &str) -> Self {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.distinguished_name.push(DnType::CommonName, "tutti test CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).expect("CA certificate");
        let key = KeyPair::generate().expect("server key");
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("server params");
        params.distinguished_name.push(DnType::CommonName, "127.0.0.1");
        let cert = params.signed_by(&key, &Issuer::new(ca_params, ca_key)).expect("server certificate");
        let dir = Self::fresh_dir("tls");
        let write = |name: &str, text: String| {
            let path = dir.join(name);
            std::fs::write(&path, text).expect("write a PEM file");
            path.to_str().expect("utf-8 path").to_owned()
        };
        let (ca_file, cert_file, key_file) =
            (write("ca.pem", ca.pem()), write("cert.pem", cert.pem()), write("key.pem", key.serialize_pem()));
        let extra = [
            "--tls-cert-file",
            &cert_file,
            "--tls-key-file",
            &key_file,
            "--tls-ca-cert-file",
            &ca_file,
            "--tls-auth-clients",
            "no",
            "--requirepass",
            password,
        ];
        Self::start_with(extra.iter().map(|s| (*s).to_owned()).collect(), true)
    }

    fn fresh_dir(what: &str) -> PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("tutti-cluster-{what}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    /// The CA file written by [`RedisServer::with_tls`].
    pub fn ca_file(&self) -> String {
        let tls_dir = self.extra.iter().skip_while(|a| *a != "--tls-ca-cert-file").nth(1);
        tls_dir.cloned().expect("a TLS server")
    }

    fn start_with(extra: Vec<String>, tls: bool) -> Self {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
            l.local_addr().expect("local addr").port()
        };
        let dir = std::env::temp_dir().join(format!("tutti-cluster-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut server = Self { port, dir, child: None, extra, tls };
        server.spawn();
        server
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}/0", self.port)
    }

    fn spawn(&mut self) {
        let port = self.port.to_string();
        let ports = if self.tls { vec!["--port", "0", "--tls-port", &port] } else { vec!["--port", &port] };
        let child = Command::new(redis_server_binary())
            .args(ports)
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(&self.extra)
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
        if self.tls {
            // Listening is enough: the TLS handshake is the tests' business.
            return true;
        }
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        let mut buf = [0u8; 7];
        // `+PONG`, or `-NOAUTH` from a server with a password: either way it answers.
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && (&buf == b"+PONG\r\n" || buf[0] == b'-')
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
