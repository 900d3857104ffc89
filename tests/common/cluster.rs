//! A cluster on one machine for the tests that run one: a real
//! `redis-server` (Debian's, installed when missing) and `tutti serve`
//! processes on 127.0.0.2, .3 and .4 (same ports), with the requests and
//! tone-client helpers those tests share.
#![allow(dead_code, clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tutti_client::{JoinAs, Requester, Response, ToneClient, request_as, run_until, split_location};

/// The `auth.secret` every node of a test cluster shares.
pub const SECRET: &str = "cluster-test-secret-0123456789abcdef";
/// The `cluster.secret` every node of a test cluster shares (tickets, records, the mesh).
pub const CLUSTER_SECRET: &str = "cluster-test-own-secret-fedcba9876543210";

pub fn temp_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tutti-cluster-test-{}-{what}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A real redis-server (Debian's, installed when missing), shared with the crates' tests.
pub use tutti_client::redis::RedisServer as Redis;

/// One `tutti serve` process; killed on drop, its log printed when the test fails.
pub struct Node {
    pub id: String,
    pub api: SocketAddr,
    pub metrics: SocketAddr,
    pub child: Option<Child>,
    pub log: PathBuf,
}

impl Node {
    pub fn start(n: u8, ports: (u16, u16, u16), redis: &Redis) -> Self {
        Self::start_with(n, ports, redis, &[])
    }

    /// [`Node::start`] with more `TUTTI_*` settings (they win over the test's).
    pub fn start_with(n: u8, ports: (u16, u16, u16), redis: &Redis, env: &[(&str, &str)]) -> Self {
        Self::start_bin(std::path::Path::new(env!("CARGO_BIN_EXE_tutti")), n, ports, redis, env)
    }

    /// [`Node::start_with`] from the `tutti` binary at `bin` (e.g. a release
    /// build, for a measurement).
    pub fn start_bin(
        bin: &std::path::Path,
        n: u8,
        (http_port, metrics_port, media_port): (u16, u16, u16),
        redis: &Redis,
        env: &[(&str, &str)],
    ) -> Self {
        let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, n));
        let api = SocketAddr::new(ip, http_port);
        let id = format!("node-{n}");
        let log = temp_dir("logs").join(format!("{id}.log"));
        let child = Command::new(bin)
            .args(["serve", "--http", &api.to_string(), "--media", &format!("{ip}:{media_port}")])
            .args(["--metrics", &format!("{ip}:{metrics_port}")])
            .env("TUTTI_AUTH_SECRET", SECRET)
            .env("TUTTI_CLUSTER_SECRET", CLUSTER_SECRET)
            .env("TUTTI_CLUSTER_REDIS_URL", format!("redis://127.0.0.1:{}/0", redis.port))
            // The password kept out of the URL, as from a Kubernetes Secret.
            .env("TUTTI_CLUSTER_REDIS_PASSWORD", redis.password.as_deref().unwrap_or(""))
            .env("TUTTI_CLUSTER_NODE_ID", &id)
            .env("TUTTI_CLUSTER_API_URL", format!("http://{api}"))
            .env("TUTTI_CLUSTER_MEDIA_ADDR", format!("{ip}:{media_port}"))
            // Short timings: a dead node is noticed in 2 s.
            .env("TUTTI_CLUSTER_HEARTBEAT_INTERVAL_SECONDS", "0.5")
            .env("TUTTI_CLUSTER_NODE_TTL_SECONDS", "2")
            .env("TUTTI_CLUSTER_LEASE_TTL_SECONDS", "4")
            .env("TUTTI_CLUSTER_CAPACITY", "100")
            // Debug builds on a busy machine tick slowly (10-30 ms p99): a
            // 20 ms budget would count every node full and refuse new rooms.
            .env("TUTTI_CLUSTER_TICK_BUDGET_SECONDS", "1")
            .env("TUTTI_IO_THREADS", "1")
            .env("TUTTI_MIX_THREADS", "1")
            .env("TUTTI_LIMITS_JOIN_RATE_PER_SECOND", "0")
            .env("TUTTI_SHUTDOWN_TIMEOUT_SECONDS", "2")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            // Appended: a node restarted at the same address keeps its earlier log.
            .stderr(std::fs::OpenOptions::new().create(true).append(true).open(&log).expect("log file"))
            .spawn()
            .expect("tutti serve starts");
        Self { id, api, metrics: SocketAddr::new(ip, metrics_port), child: Some(child), log }
    }

    pub fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if request_as(self.api, &Requester::default(), "GET", "/readyz", None, b"").is_ok_and(|r| r.status == 200) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{} not ready within 20 s:\n{}", self.id, std::fs::read_to_string(&self.log).unwrap_or_default());
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill(); // SIGKILL
            let _ = c.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            eprintln!("---- {} log ----\n{}", self.id, std::fs::read_to_string(&self.log).unwrap_or_default());
        }
    }
}

/// Two TCP ports (API, metrics) and a UDP port (media) free on 127.0.0.2, .3 and .4 alike.
pub fn shared_ports() -> (u16, u16, u16) {
    for _ in 0..20 {
        let tcp = TcpListener::bind("127.0.0.2:0").unwrap().local_addr().unwrap().port();
        let metrics = TcpListener::bind("127.0.0.2:0").unwrap().local_addr().unwrap().port();
        let udp = UdpSocket::bind("127.0.0.2:0").unwrap().local_addr().unwrap().port();
        let free = (2..=4).all(|n| {
            let ip = Ipv4Addr::new(127, 0, 0, n);
            tcp != metrics
                && TcpListener::bind((ip, tcp)).is_ok()
                && TcpListener::bind((ip, metrics)).is_ok()
                && UdpSocket::bind((ip, udp)).is_ok()
        });
        if free {
            return (tcp, metrics, udp);
        }
    }
    panic!("no port free on all three loopback addresses");
}

/// One request, following up to two redirects (without the token after
/// the first: the ticket stands in). Returns the answer and the node that gave it.
pub fn send(api: SocketAddr, token: &str, method: &str, path: &str, body: &str) -> (Response, SocketAddr) {
    let (mut addr, mut path) = (api, path.to_owned());
    let mut who = Requester::token(token);
    for _ in 0..3 {
        let r = request_as(addr, &who, method, &path, Some("application/json"), body.as_bytes()).expect("API answers");
        if r.status != 307 {
            return (r, addr);
        }
        (addr, path) = split_location(r.header("location").expect("a 307 has a Location")).expect("http Location");
        who.token = None;
    }
    panic!("more than two redirects for {method} {path}");
}

/// A metric's value from a node's `/metrics`, summed over its label sets
/// (or one label set: `name{label="value"}`).
pub fn metric(node: &Node, name: &str) -> f64 {
    let m = request_as(node.metrics, &Requester::default(), "GET", "/metrics", None, b"").expect("metrics");
    m.body
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

pub fn json(r: &Response) -> serde_json::Value {
    serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", r.body))
}

/// The node holding `room`, by `GET /v1/rooms/{room}` on `api`.
pub fn holder(api: SocketAddr, token: &str, room: &str) -> Option<String> {
    let r = request_as(api, &Requester::token(token), "GET", &format!("/v1/rooms/{room}"), None, b"").ok()?;
    (r.status == 200).then(|| json(&r)["room"]["node"].as_str().map(str::to_owned)).flatten()
}

/// Whether `a` and `b` hear each other's tones (judged over the frames since `since`).
pub fn hear_each_other(a: &ToneClient, b: &ToneClient, since: Instant) -> bool {
    a.hears(b.freq, since) > 0.08 && b.hears(a.freq, since) > 0.08
}

/// Pumps `clients` until each heard 50 new frames and they hear each other.
pub fn until_they_hear(clients: &mut [&mut ToneClient], within: Duration) -> bool {
    let since = Instant::now();
    let start: Vec<usize> = clients.iter().map(|c| c.heard.len()).collect();
    run_until(clients, since + within, |cs| {
        cs.iter().zip(&start).all(|(c, n)| c.heard.len() >= n + 50) && hear_each_other(cs[0], cs[1], since)
    })
}

/// Joins `room` through `api` (retrying while the cluster settles, up to
/// `within`); the client, the redirects followed and the time taken.
pub fn join(api: SocketAddr, token: &str, room: &str, freq: f32, within: Duration) -> (ToneClient, usize, Duration) {
    let deadline = Instant::now() + within;
    loop {
        let t0 = Instant::now();
        match ToneClient::join_following(api, &Requester::token(token), room, freq, JoinAs::Whip, 2) {
            Ok((c, hops)) => return (c, hops, t0.elapsed()),
            Err(e) if Instant::now() < deadline => {
                eprintln!("join {room} via {api}: {e}; retrying");
                std::thread::sleep(Duration::from_millis(250));
            }
            Err(e) => panic!("join {room} via {api} failed for {within:?}: {e}"),
        }
    }
}

/// A redirect ticket for `identity` and one request about `room`, as a
/// node sending the request to another would mint it (a test's way to
/// place a request on the node it chooses).
pub fn ticket_for(room: &str, identity: &str, speak: bool, admin: bool, request: (&str, &str)) -> String {
    let grants = serde_json::json!({"room": room, "speak": speak, "listen": true, "admin": admin});
    ticket_with(room, identity, grants, request)
}

/// A redirect ticket carrying `grants` as they are (a node's `least_grant`).
pub fn ticket_with(room: &str, identity: &str, grants: serde_json::Value, request: (&str, &str)) -> String {
    use tutti_cluster::{TICKET_PURPOSE, TicketKey, derive_key};
    let key = TicketKey::new(&derive_key(CLUSTER_SECRET.as_bytes(), TICKET_PURPOSE), 30);
    key.mint(room, identity, grants, request, tutti_server::auth::unix_now()).expect("ticket").0
}

/// Three nodes on 127.0.0.2, .3 and .4 that spread every room over
/// themselves (`cluster.room_spread = "always"`, rooms closed once empty),
/// ready.
pub fn spread_nodes(redis: &Redis) -> Vec<Node> {
    let ports = shared_ports();
    let spread = [("TUTTI_CLUSTER_ROOM_SPREAD", "always"), ("TUTTI_ROOM_EMPTY_TIMEOUT_SECONDS", "0")];
    let nodes: Vec<Node> = (2..=4).map(|n| Node::start_with(n, ports, redis, &spread)).collect();
    for n in &nodes {
        n.wait_ready();
    }
    nodes
}

/// A join of `room` placed on the node at `api`: a WHIP offer with a
/// redirect ticket; the client, its id taken from the `Location`.
pub fn join_placed(api: SocketAddr, room: &str, identity: &str, freq: f32) -> Result<ToneClient, (u16, String)> {
    join_placed_as(api, room, identity, true, false, freq)
}

/// [`join_placed`] with the ticket's `speak` and `admin` grants.
pub fn join_placed_as(
    api: SocketAddr,
    room: &str,
    identity: &str,
    speak: bool,
    admin: bool,
    freq: f32,
) -> Result<ToneClient, (u16, String)> {
    let grants = serde_json::json!({"room": room, "speak": speak, "listen": true, "admin": admin});
    join_placed_with(api, room, identity, grants, freq)
}

/// [`join_placed`] with a ticket carrying `grants` (attributes, say).
pub fn join_placed_with(
    api: SocketAddr,
    room: &str,
    identity: &str,
    grants: serde_json::Value,
    freq: f32,
) -> Result<ToneClient, (u16, String)> {
    let participants = format!("/v1/rooms/{room}/participants");
    let ticket = ticket_with(room, identity, grants, ("POST", &participants));
    let (mut client, offer) = ToneClient::offer(freq).map_err(|e| (0, e.to_string()))?;
    let path = format!("{participants}?ticket={ticket}");
    let r = request_as(api, &Requester::default(), "POST", &path, Some("application/sdp"), offer.as_bytes())
        .map_err(|e| (0, e.to_string()))?;
    if r.status != 201 {
        return Err((r.status, r.body));
    }
    client.location = r.header("location").unwrap_or_default().to_owned();
    let id = client.location.rsplit('/').next().and_then(|s| s.parse().ok()).unwrap_or(0);
    client.accept_answer(&r.body, id).map_err(|e| (0, e.to_string()))?;
    Ok(client)
}
