//! The backend examples (examples/backends/, docs/api/backends.md) against
//! a real `tutti serve`: for Python (PyJWT, in a venv under
//! `target/backends-test/`) and JavaScript (jose, `npm ci` of the committed
//! lock there), tokens minted by the example script create a room and join
//! it (a token under another secret, or already expired, is refused), and
//! the example receiver verifies every webhook the server sends for it
//! (`room_started`, `participant_joined`, `participant_left`,
//! `room_finished`). Real deliveries, captured by a second webhook URL the
//! test listens on, are replayed to the receiver: as they came they are
//! accepted; with the body changed, the claims swapped, the signature cut
//! or no `Authorization` they are answered 401.
//!
//! Needs python3 with venv and Node.js 20+ with npm (Debian: `apt-get
//! install -y python3-venv nodejs npm`; installed with apt-get when missing
//! and running as root), and the packages' registries once (afterwards
//! the venv and node_modules are reused until the pins change).
//!
//! `cargo test -p tutti --test backends`

mod common;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use tutti_client::process::run_bounded as run;
use tutti_client::{Requester, Response, ToneClient, request_as};

/// `auth.secret`: tokens without `kid`.
const AUTH_SECRET: &str = "the backends test's auth secret, 32 bytes or more";
/// `auth.keys`' one entry (the JavaScript run): tokens with `kid` = its id.
const KEY_ID: &str = "2026-12";
const KEY_SECRET: &str = "the backends test's rotated key, 32 bytes or more";
/// `webhooks.secret`: what the receivers verify with.
const WEBHOOK_SECRET: &str = "the backends test's webhook secret, 32 bytes or more";
/// A secret the server does not know.
const WRONG_SECRET: &str = "not the server's secret, though 32 bytes or more";
/// How long the server's webhooks may take to arrive.
const EVENT_WAIT: Duration = Duration::from_secs(20);

/// `target/backends-test`.
fn out_dir() -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("CARGO_TARGET_TMPDIR is target/tmp");
    target.join("backends-test")
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/backends")
}

fn is_root() -> bool {
    run(Command::new("id").arg("-u"), "id -u", Duration::from_secs(10)).is_ok_and(|uid| uid.trim() == "0")
}

/// Installs Debian's `packages` with apt-get (as root), or fails saying what is missing.
fn apt_install(packages: &[&str], why: &str) {
    let list = packages.join(" ");
    assert!(is_root(), "the backends test needs {why} (Debian: `sudo apt-get install -y {list}`), or run it as root");
    eprintln!("backends test: {why} is missing, installing Debian's {list} with apt-get");
    let mut install = vec!["install", "-y"];
    install.extend_from_slice(packages);
    for args in [vec!["update"], install] {
        let mut cmd = Command::new("apt-get");
        cmd.args(&args).env("DEBIAN_FRONTEND", "noninteractive");
        if let Err(e) = run(&mut cmd, "apt-get", Duration::from_secs(600)) {
            panic!("installing {list} failed: {e}");
        }
    }
}

/// The venv's python with requirements.txt installed, in
/// `target/backends-test/venv` (made once, again when the pins change).
fn ensure_python(out: &Path) -> PathBuf {
    let src = examples().join("python");
    let venv = out.join("venv");
    let python = venv.join("bin/python");
    let pins = std::fs::read(src.join("requirements.txt")).expect("examples/backends/python/requirements.txt");
    let installed = venv.join("requirements.txt");
    if python.exists() && std::fs::read(&installed).is_ok_and(|p| p == pins) {
        return python;
    }
    let version = |cmd: &mut Command| run(cmd, "python3 --version", Duration::from_secs(30));
    if version(Command::new("python3").arg("--version")).is_err() {
        apt_install(&["python3", "python3-venv"], "python3");
    }
    let make = || {
        let mut cmd = Command::new("python3");
        cmd.args(["-m", "venv", "--clear"]).arg(&venv);
        run(&mut cmd, "python3 -m venv", Duration::from_secs(120))
    };
    if let Err(e) = make() {
        eprintln!("backends test: {e}");
        apt_install(&["python3-venv"], "python3's venv module");
        make().unwrap_or_else(|e| panic!("{e}"));
    }
    let mut pip = Command::new(venv.join("bin/pip"));
    pip.args(["install", "--disable-pip-version-check", "-q", "-r"]).arg(src.join("requirements.txt"));
    run(&mut pip, "pip install -r requirements.txt", Duration::from_secs(300)).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(&installed, pins).expect("note the installed pins");
    python
}

/// The js example with jose as pinned by its package-lock.json, in
/// `target/backends-test/js` (`npm ci` once, again when the lock changes).
fn ensure_node(out: &Path) -> PathBuf {
    let src = examples().join("js");
    let dir = out.join("js");
    std::fs::create_dir_all(&dir).expect("create target/backends-test/js");
    let lock = std::fs::read(src.join("package-lock.json")).expect("examples/backends/js/package-lock.json");
    let current = dir.join("node_modules/jose/package.json").exists()
        && std::fs::read(dir.join("package-lock.json")).is_ok_and(|l| l == lock);
    for file in ["package.json", "package-lock.json", "mint-token.mjs", "verify-webhook.mjs"] {
        std::fs::copy(src.join(file), dir.join(file)).unwrap_or_else(|e| panic!("copy {file}: {e}"));
    }
    if !current {
        if run(Command::new("npm").arg("--version"), "npm --version", Duration::from_secs(30)).is_err() {
            apt_install(&["nodejs", "npm"], "Node.js 20+ with npm");
        }
        let mut cmd = Command::new("npm");
        cmd.args(["ci", "--no-audit", "--no-fund"]).current_dir(&dir);
        run(&mut cmd, "npm ci (jose)", Duration::from_secs(300)).unwrap_or_else(|e| panic!("{e}"));
    }
    let node = run(Command::new("node").arg("--version"), "node --version", Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("the backends test needs Node.js 20+: {e}"));
    let major: u32 = node.trim().trim_start_matches('v').split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0);
    assert!(major >= 20, "the js example needs Node.js 20+, this is {}", node.trim());
    dir
}

/// One language's two scripts.
struct Backend {
    name: &'static str,
    /// Program and script that mint.
    mint: (PathBuf, PathBuf),
    /// Program and script that receive.
    receive: (PathBuf, PathBuf),
}

impl Backend {
    /// A token from the example: `--perms`, `--ttl`, `--kid` as given.
    fn mint(&self, secret: &str, room: &str, identity: &str, perms: &str, ttl: u64, kid: Option<&str>) -> String {
        let (program, script) = &self.mint;
        let mut cmd = Command::new(program);
        cmd.arg(script).args([room, identity, "--perms", perms, "--ttl", &ttl.to_string()]);
        if let Some(kid) = kid {
            cmd.args(["--kid", kid]);
        }
        cmd.env("TUTTI_AUTH_SECRET", secret);
        let what = format!("{} mint", self.name);
        let token = run(&mut cmd, &what, Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e}"));
        let token = token.trim().to_owned();
        assert_eq!(token.split('.').count(), 3, "{what} printed a JWT: {token:?}");
        token
    }

    /// The example receiver on a free loopback port, verifying with `WEBHOOK_SECRET`.
    fn receiver(&self) -> Receiver {
        let (program, script) = &self.receive;
        let mut child = Command::new(program)
            .arg(script)
            .args(["--host", "127.0.0.1", "--port", "0"])
            .env("TUTTI_WEBHOOKS_SECRET", WEBHOOK_SECRET)
            .env_remove("TUTTI_WEBHOOKS_API_KEY")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{} receiver: {e}", self.name));
        let (tx, events) = mpsc::channel();
        let stdout = child.stdout.take().expect("stdout");
        let (addr_tx, addr_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(first)) = lines.next() {
                let _ = addr_tx.send(first);
            }
            for line in lines.map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (err_tx, rejections) = mpsc::channel();
        let stderr = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if err_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let Ok(first) = addr_rx.recv_timeout(Duration::from_secs(20)) else {
            let _ = child.kill();
            let _ = child.wait();
            let stderr: Vec<String> = rejections.try_iter().collect();
            panic!("{} receiver printed no address: {stderr:#?}", self.name)
        };
        let addr: SocketAddr = first
            .strip_prefix("listening on http://")
            .and_then(|a| a.trim_end_matches('/').parse().ok())
            .unwrap_or_else(|| panic!("{} receiver's first line: {first:?}", self.name));
        Receiver { child, addr, events, rejections }
    }
}

/// A running example receiver: what it printed, line by line.
struct Receiver {
    child: Child,
    addr: SocketAddr,
    /// stdout: one verified event (JSON) a line.
    events: mpsc::Receiver<String>,
    /// stderr: `rejected: <why>` a line.
    rejections: mpsc::Receiver<String>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Receiver {
    /// Verified events until one named `last` (or the wait runs out).
    fn events_until(&self, last: &str) -> Vec<Value> {
        let deadline = Instant::now() + EVENT_WAIT;
        let mut got = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            let Ok(line) = self.events.recv_timeout(left) else { break };
            let event: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON: {line:?}: {e}"));
            let done = event["event"] == last;
            got.push(event);
            if done {
                break;
            }
        }
        got
    }

    /// The next rejection it reports (within 10 s).
    fn rejection(&self) -> Option<String> {
        self.rejections.recv_timeout(Duration::from_secs(10)).ok()
    }
}

/// A second webhook URL: every request it gets, as (Authorization, body), answered 200.
fn capture() -> (SocketAddr, mpsc::Receiver<(String, Vec<u8>)>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // At most 64 deliveries: a run sends a handful.
        for stream in listener.incoming().take(64) {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            if let Some(request) = read_request(&mut stream) {
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                if tx.send(request).is_err() {
                    break;
                }
            }
        }
    });
    (addr, rx)
}

/// One HTTP/1.1 request's Authorization header and body (Content-Length framed).
fn read_request(stream: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).ok().filter(|&n| n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > 64 * 1024 {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    };
    let length: usize = header("content-length")?.parse().ok()?;
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).ok().filter(|&n| n > 0)?;
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(length);
    Some((header("authorization").unwrap_or_default(), body))
}

/// POSTs `body` to the receiver as tutti does (with `authorization`, if any): the status.
fn post(to: SocketAddr, authorization: Option<&str>, body: &[u8]) -> u16 {
    let mut stream = TcpStream::connect(to).expect("the receiver accepts");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let auth = authorization.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    let head = format!(
        "POST / HTTP/1.1\r\nHost: {to}\r\nContent-Type: application/webhook+json\r\nContent-Length: {}\r\n{auth}Connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body)).expect("send");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

fn call(api: SocketAddr, token: &str, method: &str, path: &str, body: &str) -> Response {
    let requester = Requester { token: Some(token), from: None };
    let ct = (!body.is_empty()).then_some(if body.starts_with("v=0") { "application/sdp" } else { "application/json" });
    request_as(api, &requester, method, path, ct, body.as_bytes()).expect("the API answers")
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `tutti serve` on loopback with the test's secrets, webhooks to `urls`
/// and, with `rotated`, `auth.keys` holding (KEY_ID, KEY_SECRET).
fn serve(name: &str, urls: &[String], rotated: bool) -> common::Served {
    let mut config = format!("[auth]\nsecret = {AUTH_SECRET:?}\n");
    if rotated {
        config.push_str(&format!("keys = [{{ id = {KEY_ID:?}, secret = {KEY_SECRET:?} }}]\n"));
    }
    let urls: Vec<String> = urls.iter().map(|u| format!("{u:?}")).collect();
    config.push_str(&format!(
        "\n[webhooks]\nurls = [{}]\nsecret = {WEBHOOK_SECRET:?}\nbackoff_seconds = 0.2\n",
        urls.join(", ")
    ));
    let path = out_dir().join(format!("{name}.toml"));
    std::fs::write(&path, config).expect("write the config");
    let path = path.to_str().expect("utf-8 path").to_owned();
    common::serve(&["--config", &path, "--http", "127.0.0.1:0", "--media", "127.0.0.1:0", "--metrics", "127.0.0.1:0"])
}

fn stop(mut served: common::Served) {
    let _ = nix::sys::signal::kill(served.pid(), nix::sys::signal::Signal::SIGTERM);
    let _ = served.child.wait();
}

/// The whole round for one language.
fn round(backend: &Backend, rotated: bool) {
    let started = Instant::now();
    let room = format!("interop-{}", backend.name);
    let receiver = backend.receiver();
    let (captured_at, captured) = capture();
    let urls = [format!("http://{}/tutti", receiver.addr), format!("http://{captured_at}/copy")];
    let served = serve(backend.name, &urls, rotated);
    let api = served.api;
    // With `auth.keys`, the example mints with the listed key and its id; else with auth.secret.
    let (secret, kid) = if rotated { (KEY_SECRET, Some(KEY_ID)) } else { (AUTH_SECRET, None) };

    // Tokens the example minted: an admin's creates the room, a participant's joins it.
    let admin = backend.mint(secret, &room, "backend", "admin", 600, kid);
    let r = call(api, &admin, "POST", "/v1/rooms", &format!(r#"{{"id":"{room}"}}"#));
    assert_eq!(r.status, 201, "{}: the minted admin token creates the room: {}", backend.name, r.body);
    let alice = backend.mint(secret, &room, "alice", "speak,listen", 600, kid);
    let sdp = ToneClient::offer(440.0).expect("offer").1;
    let path = format!("/v1/rooms/{room}/participants");
    let r = call(api, &alice, "POST", &path, &sdp);
    assert_eq!(r.status, 201, "{}: the minted participant token joins: {}", backend.name, r.body);
    assert!(r.body.starts_with("v=0"), "an SDP answer: {}", r.body);
    let r = call(api, &alice, "GET", &format!("/v1/rooms/{room}"), "");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("\"alice\""), "the room lists alice, the token's sub: {}", r.body);
    // The claims are read as written: a listener's token cannot manage; another room's is refused.
    let r = call(api, &alice, "DELETE", &format!("/v1/rooms/{room}"), "");
    assert_eq!(r.status, 403, "{}: speak+listen is not admin: {}", backend.name, r.body);
    let elsewhere = backend.mint(secret, "another-room", "alice", "speak,listen", 600, kid);
    let r = call(api, &elsewhere, "POST", &path, &sdp);
    assert_eq!((r.status, r.code().as_str()), (403, "wrong_room"), "{}: another room's: {}", backend.name, r.body);

    // Refused: another secret (401 token_invalid), expired (401 token_expired), and,
    // with rotation, the right secret under no or another key id.
    let wrong = backend.mint(WRONG_SECRET, &room, "mallory", "speak,listen", 600, kid);
    let r = call(api, &wrong, "POST", &path, &sdp);
    assert_eq!((r.status, r.code().as_str()), (401, "token_invalid"), "{}: wrong secret: {}", backend.name, r.body);
    let expired = backend.mint(secret, &room, "late", "speak,listen", 0, kid);
    let r = call(api, &expired, "POST", &path, &sdp);
    assert_eq!((r.status, r.code().as_str()), (401, "token_expired"), "{}: ttl 0: {}", backend.name, r.body);
    if rotated {
        let no_kid = backend.mint(KEY_SECRET, &room, "mallory", "speak,listen", 600, None);
        assert_eq!(call(api, &no_kid, "POST", &path, &sdp).status, 401, "a listed key's secret needs its kid");
        let other_kid = backend.mint(KEY_SECRET, &room, "mallory", "speak,listen", 600, Some("2026-11"));
        assert_eq!(call(api, &other_kid, "POST", &path, &sdp).status, 401, "an unknown kid");
        let plain = backend.mint(AUTH_SECRET, &room, "bob", "listen", 600, None);
        assert_eq!(call(api, &plain, "POST", &path, &sdp).status, 201, "auth.secret tokens still verify");
    }

    // Closing the room ends the events.
    let r = call(api, &admin, "DELETE", &format!("/v1/rooms/{room}"), "");
    assert!(r.status < 300, "{}: the admin token deletes the room: {} {}", backend.name, r.status, r.body);

    // The receiver verified every event tutti sent, in order.
    let events = receiver.events_until("room_finished");
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    println!("{}: verified {names:?}", backend.name);
    let refused: Vec<String> = receiver.rejections.try_iter().collect();
    assert!(refused.is_empty(), "{}: tutti's own webhooks all verify: {refused:#?}", backend.name);
    assert_eq!(names.first(), Some(&"room_started"), "{}: {events:#?}", backend.name);
    assert_eq!(names.last(), Some(&"room_finished"), "{}: {events:#?}", backend.name);
    let about_alice = |name: &str| {
        events
            .iter()
            .any(|e| e["event"] == name && e["room"] == room.as_str() && e["participant"]["identity"] == "alice")
    };
    assert!(about_alice("participant_joined"), "{}: {events:#?}", backend.name);
    assert!(about_alice("participant_left"), "{}: {events:#?}", backend.name);
    // No event twice: tutti took each answer as a 2xx (a retry would repeat the id).
    let mut ids: Vec<&str> = events.iter().filter_map(|e| e["id"].as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), events.len(), "{}: each event once: {events:#?}", backend.name);
    let now = unix_now();
    for e in &events {
        assert_eq!(e["room"], room.as_str(), "{e}");
        assert!(e["id"].as_str().is_some_and(|id| !id.is_empty()), "an event id: {e}");
        assert!(e["created_at"].as_u64().is_some_and(|t| t + 60 >= now && t <= now + 60), "created now: {e}");
    }

    // The same deliveries, as the second URL got them: replayed, accepted; tampered, refused.
    let mut copies = Vec::new();
    let deadline = Instant::now() + EVENT_WAIT;
    while copies.len() < events.len() {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else { break };
        let Ok(copy) = captured.recv_timeout(left) else { break };
        copies.push(copy);
    }
    let (token, body) = copies
        .iter()
        .find(|(_, b)| String::from_utf8_lossy(b).contains("\"participant_joined\""))
        .unwrap_or_else(|| panic!("the second URL got participant_joined: {} copies", copies.len()))
        .clone();
    assert_eq!(post(receiver.addr, Some(&token), &body), 200, "{}: a real delivery, replayed", backend.name);
    assert!(receiver.events_until("participant_joined").iter().any(|e| e["event"] == "participant_joined"));

    let text = String::from_utf8(body.clone()).expect("JSON is UTF-8");
    let tampered = text.replace("\"alice\"", "\"mallory\"");
    assert_ne!(tampered, text);
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "the Authorization header is a bare JWT: {token}");
    // Claims naming another delivery's body (sent with that body), under this delivery's signature:
    // only the signature check can catch it.
    let mut claims: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).expect("base64url")).expect("JSON");
    let signed = claims["sha256"].as_str().expect("a sha256 claim").to_owned();
    let (other, other_body) = copies.iter().find(|(t, _)| t != &token).cloned().expect("another delivery");
    let other_hash: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(other.split('.').nth(1).expect("claims")).expect("b64"))
            .expect("JSON");
    claims["sha256"] = other_hash["sha256"].clone();
    assert_ne!(claims["sha256"].as_str(), Some(signed.as_str()));
    let swapped = format!("{}.{}.{}", parts[0], URL_SAFE_NO_PAD.encode(claims.to_string()), parts[2]);
    let cut = format!("{}.{}.{}", parts[0], parts[1], &parts[2][..parts[2].len() - 4]);
    let none = format!("{}.{}.", URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#), parts[1]);
    let cases: [(&str, Option<&str>, &[u8]); 6] = [
        ("a changed body", Some(&token), tampered.as_bytes()),
        ("another event's body", Some(&token), &other_body),
        ("claims swapped under the signature", Some(&swapped), &other_body),
        ("a cut signature", Some(&cut), &body),
        ("alg none", Some(&none), &body),
        ("no Authorization", None, &body),
    ];
    for (what, auth, payload) in cases {
        assert_eq!(post(receiver.addr, auth, payload), 401, "{}: {what} is refused", backend.name);
        let why = receiver.rejection();
        assert!(why.as_deref().is_some_and(|w| w.starts_with("rejected: ")), "{}: {what}: {why:?}", backend.name);
    }
    assert!(receiver.events.try_recv().is_err(), "{}: nothing tampered was printed as verified", backend.name);
    stop(served);
    println!("{}: round in {:.1} s", backend.name, started.elapsed().as_secs_f64());
}

#[test]
fn python_and_javascript_examples_mint_tokens_tutti_accepts_and_verify_its_webhooks() {
    let out = out_dir();
    std::fs::create_dir_all(&out).expect("create target/backends-test");
    let started = Instant::now();
    let python = ensure_python(&out);
    let js = ensure_node(&out);
    println!("set up in {:.1} s", started.elapsed().as_secs_f64());
    let py_src = examples().join("python");
    let py = Backend {
        name: "python",
        mint: (python.clone(), py_src.join("mint_token.py")),
        receive: (python, py_src.join("verify_webhook.py")),
    };
    round(&py, false);
    let node = PathBuf::from("node");
    let js = Backend {
        name: "js",
        mint: (node.clone(), js.join("mint-token.mjs")),
        receive: (node, js.join("verify-webhook.mjs")),
    };
    round(&js, true);
}
