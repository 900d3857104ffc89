//! A server on ephemeral loopback ports, requests to it, and a WebSocket client.
#![allow(dead_code, missing_docs)]

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use tutti_client::{Response, request};
use tutti_server::{Config, Server};

pub fn http(addr: SocketAddr, method: &str, path: &str, content_type: Option<&str>, body: &[u8]) -> Response {
    request(addr, method, path, content_type, body).expect("the API answers")
}

/// A request with `token`; a body is JSON, or SDP when it starts with `v=0`.
pub fn call(api: SocketAddr, token: &str, method: &str, path: &str, body: &str) -> Response {
    let ct = (!body.is_empty()).then_some(if body.starts_with("v=0") { "application/sdp" } else { "application/json" });
    tutti_client::request_as(api, &tutti_client::Requester::token(token), method, path, ct, body.as_bytes())
        .expect("the API answers")
}

/// Asserts a refusal's status and code; `what` names the case.
pub fn refused(r: &Response, status: u16, code: &str, what: &str) {
    assert_eq!((r.status, r.code().as_str()), (status, code), "{what}: {}", r.body);
}

/// The settings tests run with: ephemeral loopback ports (metrics too), 2 mix
/// and 2 I/O threads, no tokens (auth disabled: allowed on loopback), no join
/// rate limit (every test client comes from 127.0.0.1). Tests of auth and
/// limits turn them back on.
pub fn test_config() -> Config {
    let mut cfg = Config {
        http: "127.0.0.1:0".parse().expect("addr"),
        media: "127.0.0.1:0".parse().expect("addr"),
        metrics: "127.0.0.1:0".to_owned(),
        mix_threads: 2,
        io_threads: 2,
        ..Config::default()
    };
    cfg.auth.disabled = true;
    cfg.limits.join_rate_per_second = 0.0;
    // A dropped test socket leaves at once (tests of resuming set it).
    cfg.limits.ws_resume_seconds = 0.0;
    cfg
}

/// A server on ephemeral loopback ports, and the runtime it runs on.
/// [`test_config`] with access tokens on, signed with `secret`.
pub fn auth_config(secret: &str) -> Config {
    let mut cfg = test_config();
    cfg.auth.disabled = false;
    cfg.auth.secret = secret.to_owned();
    cfg
}

/// Mints hour-long tokens signed with `secret`.
pub fn minter(secret: &str) -> impl Fn(tutti_server::auth::Grant) -> String {
    let auth = tutti_server::auth::Auth::new(secret).expect("secret");
    move |g| auth.mint(&g, Duration::from_secs(3600), tutti_server::auth::unix_now()).expect("mint")
}

pub fn start() -> (tokio::runtime::Runtime, Server) {
    start_with(test_config())
}

pub fn start_with(cfg: Config) -> (tokio::runtime::Runtime, Server) {
    // Named like `tutti serve`'s, so per-thread metrics show `api-N`.
    let rt = tutti_server::api_runtime(2).expect("runtime");
    let server = rt.block_on(Server::start(cfg)).expect("server starts");
    (rt, server)
}

pub fn create_room(api: SocketAddr, id: &str) {
    let body = serde_json::json!({ "id": id }).to_string();
    let r = http(api, "POST", "/v1/rooms", Some("application/json"), body.as_bytes());
    assert_eq!(r.status, 201, "{}", r.body);
}

/// The room as `GET /v1/rooms/{room}` shows it.
pub fn room(api: SocketAddr, id: &str) -> serde_json::Value {
    serde_json::from_str(&http(api, "GET", &format!("/v1/rooms/{id}"), None, b"").body).expect("JSON")
}

/// A blocking WebSocket client on a room's event stream. The events of a
/// tick come batched (`{"type":"events","events":[…]}`); this client hands
/// them out one by one, as messages of their own.
pub struct Ws(tungstenite::WebSocket<TcpStream>, std::collections::VecDeque<serde_json::Value>);

impl Ws {
    pub fn connect(api: SocketAddr, room: &str) -> Self {
        Self::connect_to(api, &format!("/v1/rooms/{room}/ws"))
    }

    /// A socket on `path` (with its query, e.g. `?events=muted`).
    pub fn connect_to(api: SocketAddr, path: &str) -> Self {
        let stream = TcpStream::connect(api).expect("connect");
        // A slow handshake (a busy machine) is not a failure; reads after it poll.
        stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        let (ws, _) = tungstenite::client(format!("ws://{api}{path}"), stream).expect("WebSocket handshake");
        ws.get_ref().set_read_timeout(Some(Duration::from_millis(20))).expect("timeout");
        Self(ws, Default::default())
    }

    /// Closes with a close frame (the client means to go), and waits briefly for the server's.
    pub fn close(&mut self) {
        let _ = self.0.close(None);
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            match self.0.read() {
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => break,
            }
        }
    }

    pub fn send(&mut self, value: serde_json::Value) {
        self.0.send(tungstenite::Message::text(value.to_string())).expect("send");
    }

    /// The next message, if one arrives within 20 ms. `Some(Null)` once closed.
    pub fn try_next(&mut self) -> Option<serde_json::Value> {
        if let Some(v) = self.1.pop_front() {
            return Some(v);
        }
        match self.0.read() {
            Ok(tungstenite::Message::Text(t)) => {
                let v: serde_json::Value = serde_json::from_str(t.as_str()).ok()?;
                if v["type"] != "events" {
                    return Some(v);
                }
                self.1.extend(v["events"].as_array().into_iter().flatten().cloned());
                self.1.pop_front()
            }
            Ok(tungstenite::Message::Close(_)) => Some(serde_json::Value::Null),
            Ok(_) => None,
            Err(tungstenite::Error::Io(e))
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
            {
                None
            }
            Err(_) => Some(serde_json::Value::Null),
        }
    }

    /// Reads until a message satisfies `want`, pumping `clients` (their
    /// media keeps flowing) meanwhile; panics after `timeout`.
    pub fn wait_pumping(
        &mut self,
        timeout: Duration,
        clients: &mut [&mut tutti_client::ToneClient],
        want: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            tutti_client::run_for(clients, Duration::from_millis(5));
            if let Some(v) = self.try_next()
                && want(&v)
            {
                return v;
            }
        }
        panic!("no such WebSocket message within {timeout:?}");
    }

    /// Reads until a message satisfies `want` or `timeout` passes.
    pub fn wait_for(&mut self, timeout: Duration, want: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(v) = self.try_next()
                && want(&v)
            {
                return v;
            }
        }
        panic!("no such WebSocket message within {timeout:?}");
    }
}
/// One scrape of a Prometheus text exposition: samples by series, each
/// series written `name{k="v",…}` with its labels sorted (`name` alone when
/// it has none).
pub fn scrape(metrics: SocketAddr) -> std::collections::BTreeMap<String, f64> {
    let r = http(metrics, "GET", "/metrics", None, b"");
    assert_eq!(r.status, 200, "{}", r.body);
    parse_exposition(&r.body)
}

/// Parses the text format (no escaped quotes or commas inside label values).
pub fn parse_exposition(text: &str) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').expect("a sample line is `series value`");
        let value: f64 = value.parse().expect("a number");
        let key = match series.split_once('{') {
            Some((name, labels)) => {
                let mut labels: Vec<&str> = labels.trim_end_matches('}').split(',').collect();
                labels.sort_unstable();
                format!("{name}{{{}}}", labels.join(","))
            }
            None => series.to_owned(),
        };
        out.insert(key, value);
    }
    out
}

/// The key [`scrape`] gives a series.
pub fn series(name: &str, labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return name.to_owned();
    }
    let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    labels.sort_unstable();
    format!("{name}{{{}}}", labels.join(","))
}

/// The secret of the nodes [`cluster_node`] starts.
pub const MOVE_SECRET: &str = "cluster-node-test-secret-0123456789abcdef";

/// One node of a cluster in this process, on `ip` (a loopback address of
/// its own, so that its origin differs from the other nodes'), with short
/// timings; auth on with [`MOVE_SECRET`].
pub fn cluster_node(
    ip: [u8; 4],
    id: &str,
    redis: &tutti_client::redis::RedisServer,
) -> (tokio::runtime::Runtime, Server) {
    start_with(cluster_node_config(ip, id, redis))
}

/// The config [`cluster_node`] starts a node with (free ports on `ip`).
pub fn cluster_node_config(ip: [u8; 4], id: &str, redis: &tutti_client::redis::RedisServer) -> Config {
    let any = SocketAddr::from((ip, 0));
    let http_port = std::net::TcpListener::bind(any).and_then(|l| l.local_addr()).expect("a port").port();
    let media_port = std::net::UdpSocket::bind(any).and_then(|s| s.local_addr()).expect("a port").port();
    let mut cfg = test_config();
    cfg.http = SocketAddr::from((ip, http_port));
    cfg.media = SocketAddr::from((ip, media_port));
    cfg.metrics = String::new();
    (cfg.mix_threads, cfg.io_threads) = (1, 1);
    cfg.auth.disabled = false;
    cfg.auth.secret = MOVE_SECRET.to_owned();
    cfg.cluster.redis_url = redis.url();
    cfg.cluster.node_id = id.to_owned();
    cfg.cluster.api_url = format!("http://{}", cfg.http);
    cfg.cluster.media_addr = cfg.media.to_string();
    cfg.cluster.heartbeat_interval_seconds = 0.5;
    cfg.cluster.node_ttl_seconds = 2.0;
    // Debug builds on a busy machine tick slowly: a 20 ms budget would count the node full.
    cfg.cluster.tick_budget_seconds = 1.0;
    cfg.cluster.capacity = 100;
    cfg
}

/// A join of `room` placed on the [`cluster_node`] at `api`: a WHIP offer
/// with a redirect ticket carrying `grants` (`{"room", "speak", "listen",
/// "admin"}`), as a node sending the join there would mint it.
pub fn join_placed(
    api: SocketAddr,
    room: &str,
    identity: &str,
    grants: &serde_json::Value,
    freq: f32,
) -> tutti_client::ToneClient {
    join_placed_offering(api, room, identity, grants, freq, |offer| offer)
}

/// [`join_placed`] with the client's offer changed by `edit` first (e.g.
/// asking for stereo Opus).
pub fn join_placed_offering(
    api: SocketAddr,
    room: &str,
    identity: &str,
    grants: &serde_json::Value,
    freq: f32,
    edit: impl FnOnce(String) -> String,
) -> tutti_client::ToneClient {
    use tutti_cluster::{TICKET_PURPOSE, TicketKey, derive_key};
    let path = format!("/v1/rooms/{room}/participants");
    let key = TicketKey::new(&derive_key(MOVE_SECRET.as_bytes(), TICKET_PURPOSE), 30);
    let ticket =
        key.mint(room, identity, grants.clone(), ("POST", &path), tutti_server::auth::unix_now()).expect("a ticket").0;
    let (mut client, offer) = tutti_client::ToneClient::offer(freq).expect("an offer");
    let offer = edit(offer);
    let as_ticket = format!("{path}?ticket={ticket}");
    let r = tutti_client::request_as(
        api,
        &tutti_client::Requester::default(),
        "POST",
        &as_ticket,
        Some("application/sdp"),
        offer.as_bytes(),
    )
    .expect("the join answers");
    assert_eq!(r.status, 201, "{identity} joins on {api}: {}", r.body);
    client.location = r.header("location").unwrap_or_default().to_owned();
    let id = client.location.rsplit('/').next().and_then(|s| s.parse().ok()).unwrap_or(0);
    client.accept_answer(&r.body, id).expect("the answer");
    client
}

/// Once every node of `apis` answers, `create` is tried (every 200 ms, for
/// 15 s at most) until it gives a value (an error: what it was answered).
fn when_nodes_answer<T>(apis: &[SocketAddr], admin: &str, mut create: impl FnMut() -> Result<T, String>) -> T {
    use tutti_client::{Requester, request_as};
    let as_admin = Requester::token(admin);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let up = apis
            .iter()
            .all(|api| request_as(*api, &as_admin, "GET", "/v1/node", None, b"").is_ok_and(|r| r.status == 200));
        if up {
            match create() {
                Ok(made) => return made,
                Err(answer) => assert!(Instant::now() < deadline, "no node took the room: {answer}"),
            }
        }
        assert!(Instant::now() < deadline, "the nodes did not start");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Creates a room with its options (the JSON `body`) once every node of
/// `apis` answers: through the first, following its `307` to the node the
/// directory places the room on (so that node makes it with the body).
/// Returns the index of the node that holds it.
pub fn cluster_room_made(apis: &[SocketAddr], admin: &str, body: &str) -> usize {
    use tutti_client::{Requester, request_following};
    let as_admin = Requester::token(admin);
    let json = Some("application/json");
    when_nodes_answer(apis, admin, || {
        let (r, at, _) =
            request_following(apis[0], &as_admin, "POST", "/v1/rooms", json, body.as_bytes(), 2).expect("API");
        match r.status {
            201 => Ok(apis.iter().position(|a| *a == at).unwrap_or_else(|| panic!("{at} is not ours"))),
            _ => Err(format!("{} {}", r.status, r.body)),
        }
    })
}

/// Creates `room` (the JSON `body`) through the first of `apis` once every
/// node answers, and returns the index of the node that holds it.
pub fn cluster_room(apis: &[SocketAddr], admin: &str, room: &str, body: &str) -> usize {
    use tutti_client::{Requester, request_as};
    let as_admin = Requester::token(admin);
    when_nodes_answer(apis, admin, || {
        let r = request_as(apis[0], &as_admin, "POST", "/v1/rooms", Some("application/json"), body.as_bytes())
            .expect("API");
        // Made here (201), or placed on another node (307 to it).
        match r.status {
            201 | 307 => Ok(()),
            _ => Err(format!("{} {}", r.status, r.body)),
        }
    });
    // The node a GET names (whichever node answers it), by its id.
    let r = request_as(apis[0], &as_admin, "GET", &format!("/v1/rooms/{room}"), None, b"").expect("API");
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap_or_default();
    let owner = if r.status == 200 { &body["room"]["node"] } else { &body["node"] };
    let owner = owner.as_str().unwrap_or_else(|| panic!("no node holds the room: {} {}", r.status, r.body)).to_owned();
    let id = |api: &SocketAddr| {
        let r = request_as(*api, &as_admin, "GET", "/v1/node", None, b"").expect("API");
        serde_json::from_str::<serde_json::Value>(&r.body).unwrap_or_default()["node"].as_str().map(str::to_owned)
    };
    apis.iter().position(|a| id(a).as_deref() == Some(owner.as_str())).unwrap_or_else(|| panic!("{owner} is not ours"))
}

/// A fresh directory of its own (`tag`: tests run side by side) holding
/// `hold.opus`, a tone of `hz` for `playback.hold_music`.
pub fn hold_music_dir(tag: &str, hz: f32) -> std::path::PathBuf {
    let (hold, _) = tutti_server::outputs::ogg::tone_file(hz, 100).expect("tone file");
    let dir = std::env::temp_dir().join(format!("tutti-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("hold.opus"), hold).expect("write");
    dir
}
