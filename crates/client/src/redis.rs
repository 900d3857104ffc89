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

/// Why a redis-server did not start.
enum Start {
    /// It exited (its port was taken, say).
    Exited(String),
    /// It runs but did not answer.
    Silent(String),
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
    ///
    /// A port found free can be taken by another process before
    /// redis-server binds it, which then exits at once: it is started again
    /// on another port, three starts in all.
    pub fn start_with(password: Option<&str>, extra: Vec<String>, tls: bool) -> Self {
        let mut attempt = 1;
        loop {
            let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
            let dir = fresh_dir(&format!("redis-{port}"));
            let password = password.map(str::to_owned);
            let mut server = Self { port, dir, child: None, password, extra: extra.clone(), tls };
            match server.try_spawn() {
                Ok(()) => return server,
                Err(Start::Exited(why)) if attempt < 3 => {
                    eprintln!("redis-server on port {port}: {why}; trying another port");
                    attempt += 1;
                }
                Err(Start::Exited(why) | Start::Silent(why)) => panic!("redis-server on port {port}: {why}"),
            }
        }
    }

    /// `redis://127.0.0.1:port/0` (`rediss://` with TLS), without the password.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}/0", self.port)
    }

    /// Starts the process on its port and waits until it answers (10 s at
    /// most): a restart after [`RedisServer::kill`] keeps the port.
    pub fn spawn(&mut self) {
        if let Err(Start::Exited(why) | Start::Silent(why)) = self.try_spawn() {
            panic!("redis-server on port {}: {why}", self.port);
        }
    }

    fn try_spawn(&mut self) -> Result<(), Start> {
        let port = self.port.to_string();
        let ports: &[&str] = if self.tls { &["--port", "0", "--tls-port", &port] } else { &["--port", &port] };
        let mut child = Command::new(redis_server_binary())
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
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(Start::Exited(format!("exited before it answered ({status})")));
            }
            if self.answers() {
                self.child = Some(child);
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Killed on drop, with the server.
        self.child = Some(child);
        Err(Start::Silent("did not answer within 10 s".into()))
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

#[cfg(test)]
mod tests {
    use super::{RedisServer, Start, fresh_dir};
    use std::net::TcpListener;

    #[test]
    fn a_redis_server_whose_port_is_taken_is_seen_to_exit_and_one_is_started_elsewhere() {
        // Another process's listener on the port redis-server is given.
        let taken = TcpListener::bind("127.0.0.1:0").expect("a port");
        let port = taken.local_addr().expect("addr").port();
        let mut server = RedisServer {
            port,
            dir: fresh_dir("redis-taken"),
            child: None,
            password: None,
            extra: Vec::new(),
            tls: false,
        };
        match server.try_spawn() {
            Err(Start::Exited(why)) => assert!(why.contains("exited"), "{why}"),
            Err(Start::Silent(why)) => panic!("an exit is seen as such, not waited out: {why}"),
            Ok(()) => panic!("redis-server cannot serve on a port another listener holds"),
        }
        // A start on a port of its own answers.
        let fresh = RedisServer::start();
        assert_ne!(fresh.port, port);
        assert!(fresh.answers());
    }
}
