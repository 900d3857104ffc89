//! A real `redis-server` for the cluster tests of every crate: Debian's,
//! installed with apt-get when it is missing (never skipped), started on a
//! free port of 127.0.0.1 in a directory of its own, killed on drop.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::process::{ensure_debian_package, run_bounded};

const BINARY: &str = "/usr/bin/redis-server";

/// `redis-server`'s path, installing Debian's package when it is missing.
pub fn redis_server_binary() -> PathBuf {
    ensure_debian_package(BINARY, "redis-server")
}

/// One `redis-server` process; killed (and its directory removed) on drop.
pub struct RedisServer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its working directory (removed on drop).
    pub dir: PathBuf,
    child: Option<Child>,
    /// `requirepass`, if any.
    pub password: Option<String>,
    /// Further arguments (TLS files).
    pub extra: Vec<String>,
    /// Listening with TLS only (`--tls-port`): `rediss://` URLs.
    tls: bool,
}

impl RedisServer {
    /// Without a password, plain TCP.
    pub fn start() -> Self {
        Self::start_with(None, Vec::new(), false)
    }

    /// With a password (`requirepass`): clients must `AUTH`.
    pub fn with_password(password: &str) -> Self {
        Self::start_with(Some(password), Vec::new(), false)
    }

    /// With further `redis-server` arguments; `tls`: they make it listen
    /// with TLS only on its port (`--tls-port`).
    pub fn start_with(password: Option<&str>, extra: Vec<String>, tls: bool) -> Self {
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
        let dir = fresh_dir(&format!("redis-{port}"));
        let password = password.map(str::to_owned);
        let mut server = Self { port, dir, child: None, password, extra, tls };
        server.spawn();
        server
    }

    /// `redis://127.0.0.1:port/0` (`rediss://` with TLS), without the password.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}/0", self.port)
    }

    /// Starts the process and waits until it answers (10 s at most).
    pub fn spawn(&mut self) {
        let port = self.port.to_string();
        let ports: &[&str] = if self.tls { &["--port", "0", "--tls-port", &port] } else { &["--port", &port] };
        let child = Command::new(redis_server_binary())
            .args(ports)
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(self.password.iter().flat_map(|p| ["--requirepass", p.as_str()]))
            .args(&self.extra)
            .arg("--dir")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.answers() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {} did not answer within 10 s", self.port);
    }

    /// `+PONG`, or `-NOAUTH…` from a server with a password: either way it
    /// answers. (With TLS, listening is enough: the handshake is the test's.)
    fn answers(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else { return false };
        if self.tls {
            return true;
        }
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && (&buf == b"+PONG\r\n" || buf[0] == b'-')
    }

    /// One command through `redis-cli` (installed with redis-server), e.g. a
    /// key written by hand: what it printed.
    pub fn cli(&self, args: &[&str]) -> String {
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-p", &self.port.to_string(), "--no-auth-warning"]);
        if let Some(p) = &self.password {
            cmd.args(["-a", p]);
        }
        match run_bounded(cmd.args(args), "redis-cli", Duration::from_secs(10)) {
            Ok(out) => out.trim().to_owned(),
            Err(e) => panic!("redis-cli {args:?}: {e}"),
        }
    }

    /// Kills the server (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends a signal (`STOP` freezes it: connections stay open and nothing
    /// answers, as with a hung host; `CONT` thaws it).
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("the server runs").id().to_string();
        let status = Command::new("kill").args([&format!("-{signal}"), &pid]).status().expect("run kill");
        assert!(status.success(), "kill -{signal} {pid} failed");
    }

    /// Starts it again on the same port (empty: nothing is persisted).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A new directory under the system's temporary one, unique in this process.
pub fn fresh_dir(what: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("tutti-test-{what}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}
