//! A crowd behind one address (an office's NAT, or every caller behind the
//! TLS proxy) is bounded per person, not by the address it shares: a
//! connection that shows a valid token counts against its identity
//! (`limits.max_connections_per_identity`), and only what has not
//! authenticated counts against its address
//! (`limits.max_connections_per_address`); behind a trusted proxy
//! (`limits.trusted_proxies`) the address is the forwarded client's, for
//! the connection limits and the join rate alike. Refusals say "from your
//! address" and are counted. Real server, real HTTP and WebSockets, every
//! client on loopback; the last test puts Debian's nginx in front, set up
//! as the TLS page's example (TLS aside), clients reaching it from
//! addresses of their own (127.0.0.x).

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{scrape, series, start_with, test_config};
use tutti_client::{Requester, request_as};
use tutti_server::auth::Grant;
use tutti_server::{Config, Server};

const SECRET: &str = "crowd-limits-test-secret-0123456789abcdef";
const REFUSED: &str = "tutti_api_connections_refused_total";

fn with_auth(mut cfg: Config) -> Config {
    cfg.auth.disabled = false;
    cfg.auth.secret = SECRET.to_owned();
    cfg
}

/// A TCP connection to `api` from the loopback address `from`.
fn connect_from(api: SocketAddr, from: &str) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("a socket");
    let local: SocketAddr = format!("{from}:0").parse().expect("an address");
    socket.bind(&local.into()).expect("bind");
    socket.connect_timeout(&api.into(), Duration::from_secs(5)).expect("connect");
    let stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    stream
}

/// Sends `GET path` with `headers` (keep-alive) on `stream` and reads one
/// answer: its status and body (`(0, "")` when the server closed first).
fn get(stream: &mut TcpStream, api: SocketAddr, path: &str, headers: &str) -> (u16, String) {
    let request = format!("GET {path} HTTP/1.1\r\nhost: {api}\r\n{headers}\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return (0, String::new());
    }
    read_answer(stream)
}

/// Starts a request on `stream` that stays in progress: a room's creation
/// whose body (100 bytes announced) never comes (no join: the join rate
/// is not spent). A connection in the middle of a request is never taken
/// over (a kept-alive one between requests is).
fn hold_request(stream: &mut TcpStream, api: SocketAddr, headers: &str) {
    let request = format!(
        "POST /v1/rooms HTTP/1.1\r\nhost: {api}\r\ncontent-type: application/json\r\n\
         content-length: 100\r\n{headers}\r\n{{\"id\":"
    );
    stream.write_all(request.as_bytes()).expect("send");
}

/// One HTTP answer with a `content-length` (or what came before the close).
fn read_answer(stream: &mut TcpStream) -> (u16, String) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    // Bounded: the read timeout ends a silent server, 64 KiB a chatty one.
    while got.len() < 65_536 {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if body.len() >= length {
                let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
                return (status, body.to_owned());
            }
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    (0, String::from_utf8_lossy(&got).into_owned())
}

/// A room WebSocket to `api` from the loopback address `from`, with `query`
/// (e.g. `?token=…`), and its first message; or the upgrade's status and body.
fn socket_from(
    api: SocketAddr,
    from: &str,
    room: &str,
    query: &str,
) -> Result<(tungstenite::WebSocket<TcpStream>, String), (u16, String)> {
    let stream = connect_from(api, from);
    match tungstenite::client(format!("ws://{api}/v1/rooms/{room}/ws{query}"), stream) {
        Ok((mut ws, _)) => {
            let first = match ws.read() {
                Ok(tungstenite::Message::Text(t)) => t.as_str().to_owned(),
                other => panic!("the first message: {other:?}"),
            };
            Ok((ws, first))
        }
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(r))) => Err((
            r.status().as_u16(),
            r.body().as_ref().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default(),
        )),
        Err(e) => panic!("handshake: {e}"),
    }
}

/// A room WebSocket from 127.0.0.1 with `token` (see [`socket_from`]).
fn socket(
    api: SocketAddr,
    room: &str,
    token: &str,
) -> Result<(tungstenite::WebSocket<TcpStream>, String), (u16, String)> {
    socket_from(api, "127.0.0.1", room, &format!("?token={token}"))
}

/// Creates `room` with an admin's token.
fn admin_creates(server: &Server, room: &str) {
    let admin = server.mint_token(&Grant::admin("ops"), Duration::from_secs(600)).expect("a token");
    let body = format!(r#"{{"id":"{room}"}}"#);
    let r = request_as(
        server.http_addr(),
        &Requester::token(&admin),
        "POST",
        "/v1/rooms",
        Some("application/json"),
        body.as_bytes(),
    )
    .expect("API");
    assert_eq!(r.status, 201, "{}", r.body);
}

fn code(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .map(|v| v["code"].as_str().unwrap_or("").to_owned())
        .unwrap_or_default()
}

/// The issue's town hall: 1,000 people behind one address, each with their
/// own token, all get their socket and its first event, with the default
/// limits (256 per address). One identity is bounded by its own share.
#[test]
fn a_thousand_authenticated_sockets_from_one_address_are_all_served() {
    const PEOPLE: usize = 1000;
    const THREADS: usize = 8;
    let (rt, server) = start_with(with_auth(test_config()));
    let api = server.http_addr();
    let ttl = Duration::from_secs(600);
    admin_creates(&server, "townhall");
    let tokens: Vec<String> = (0..PEOPLE)
        .map(|i| server.mint_token(&Grant::listener("townhall", format!("employee-{i}")), ttl).expect("a token"))
        .collect();
    let t0 = Instant::now();
    let sockets: Vec<_> = std::thread::scope(|s| {
        let workers: Vec<_> = tokens
            .chunks(PEOPLE / THREADS)
            .map(|mine| {
                s.spawn(move || {
                    mine.iter()
                        .map(|t| {
                            let (ws, first) = socket(api, "townhall", t).expect("every person gets a socket");
                            assert!(first.contains(r#""type":"room""#), "the first event is the room: {first}");
                            ws
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("a worker")).collect()
    });
    assert_eq!(sockets.len(), PEOPLE);
    eprintln!("{PEOPLE} sockets from 127.0.0.1 open in {:?}", t0.elapsed());
    // Unauthenticated connections from the same address still have the address's whole share.
    let r = request_as(api, &Requester { token: None, from: None }, "GET", "/healthz", None, b"").expect("API");
    assert_eq!(r.status, 200, "{}", r.body);
    drop(sockets);
    rt.block_on(server.shutdown());

    // One identity's share: its own connections, sockets and requests alike.
    let mut cfg = with_auth(test_config());
    cfg.limits.max_connections_per_identity = 3;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    admin_creates(&server, "r");
    let ana = server.mint_token(&Grant::listener("r", "ana"), ttl).expect("a token");
    let mut held: Vec<_> = (0..3).map(|_| socket(api, "r", &ana).expect("within ana's share").0).collect();
    let (status, body) = socket(api, "r", &ana).expect_err("a fourth socket of ana's is refused");
    assert_eq!((status, code(&body).as_str()), (429, "too_many_connections"), "{body}");
    assert!(body.contains("limits.max_connections_per_identity"), "{body}");
    let mut plain = connect_from(api, "127.0.0.1");
    let (status, body) = get(&mut plain, api, "/v1/rooms/r", &format!("authorization: Bearer {ana}\r\n"));
    assert_eq!((status, code(&body).as_str()), (429, "too_many_connections"), "a request counts too: {body}");
    let ben = server.mint_token(&Grant::listener("r", "ben"), ttl).expect("a token");
    assert!(socket(api, "r", &ben).is_ok(), "another identity is not affected");
    held.pop();
    let deadline = Instant::now() + Duration::from_secs(5);
    while socket(api, "r", &ana).is_err() {
        assert!(Instant::now() < deadline, "a closed socket gives its place back");
        std::thread::sleep(Duration::from_millis(50));
    }
    let metrics = server.metrics_addr().expect("metrics on");
    assert!(scrape(metrics).get(&series(REFUSED, &[("limit", "identity")])).copied().unwrap_or(0.0) >= 2.0);
    rt.block_on(server.shutdown());
}

/// 1,000 idle connections from one address keep neither another address
/// nor that address itself out (the oldest idle ones are taken over, at
/// most the address's share stays); a connection kept alive between
/// requests gives way too; connections in the middle of a request fill the
/// address's share, and then the next is told "from your address",
/// counted, while another address is served.
#[test]
fn a_thousand_idle_connections_from_one_address_do_not_take_the_api_down() {
    const IDLE: usize = 1000;
    let cfg = with_auth(test_config());
    let share = cfg.limits.max_connections_per_address;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let mut idle: Vec<TcpStream> = (0..IDLE).map(|_| connect_from(api, "127.0.0.1")).collect();
    for from in ["127.0.0.2", "127.0.0.1"] {
        let mut s = connect_from(api, from);
        let (status, body) = get(&mut s, api, "/healthz", "");
        assert_eq!(status, 200, "from {from}: {body}");
    }
    let ttl = Duration::from_secs(600);
    admin_creates(&server, "r");
    let ana = server.mint_token(&Grant::listener("r", "ana"), ttl).expect("a token");
    assert!(socket(api, "r", &ana).is_ok(), "a person behind the same address gets a socket amid the flood");
    // The server closed every idle connection but the address's share.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for s in &idle {
            s.set_nonblocking(true).expect("nonblocking");
        }
        // Still open: nothing to read yet.
        idle.retain_mut(|s| matches!(s.read(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock));
        if idle.len() <= share {
            break;
        }
        assert!(Instant::now() < deadline, "{} idle connections still open", idle.len());
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(idle);

    // A connection kept alive between requests gives way to a newcomer.
    let mut kept = connect_from(api, "127.0.0.1");
    assert_eq!(get(&mut kept, api, "/healthz", "").0, 200);
    // The address's share held by connections in the middle of a request.
    let mut busy: Vec<TcpStream> = Vec::with_capacity(share);
    for _ in 0..share {
        let mut s = connect_from(api, "127.0.0.1");
        hold_request(&mut s, api, "");
        busy.push(s);
    }
    // Their headers read (each request under way), the share is full.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(get(&mut kept, api, "/healthz", "").0, 0, "the kept-alive connection was closed for one of them");
    let mut late = connect_from(api, "127.0.0.1");
    let (status, body) = read_answer(&mut late);
    assert_eq!((status, code(&body).as_str()), (503, "too_many_connections"), "{body}");
    assert!(body.contains("from your address"), "{body}");
    let mut other = connect_from(api, "127.0.0.2");
    assert_eq!(get(&mut other, api, "/healthz", "").0, 200, "another address is served");
    let metrics = server.metrics_addr().expect("metrics on");
    assert!(scrape(metrics).get(&series(REFUSED, &[("limit", "address")])).copied().unwrap_or(0.0) >= 1.0);
    drop(busy);
    rt.block_on(server.shutdown());
}

/// 127.0.0.1 a trusted proxy; two connections per client address, one join
/// per client address (then one per 100 s).
fn behind_proxy() -> Config {
    let mut cfg = test_config();
    cfg.limits.trusted_proxies = vec!["127.0.0.1".into()];
    cfg.limits.max_connections_per_address = 2;
    cfg.limits.join_rate_per_second = 0.01;
    cfg.limits.join_burst = 1;
    cfg
}

/// A join's status, on a connection to `api` from `from` with `headers`
/// (not an offer: the rate is checked first, so no peer is made).
fn join(api: SocketAddr, from: &str, headers: &str) -> u16 {
    let mut s = connect_from(api, from);
    let request = format!(
        "POST /v1/rooms/r/participants HTTP/1.1\r\nhost: {api}\r\ncontent-type: application/sdp\r\n\
         content-length: 3\r\nconnection: close\r\n{headers}\r\nv=0"
    );
    s.write_all(request.as_bytes()).expect("send");
    read_answer(&mut s).0
}

/// Behind a trusted proxy (127.0.0.1 here, sending `X-Forwarded-For`
/// itself) the per-address connection share and the join rate apply to
/// the forwarded client; an untrusted peer's header (127.0.0.2's) is ignored.
#[test]
fn behind_a_trusted_proxy_the_limits_apply_to_the_forwarded_address() {
    let (rt, server) = start_with(behind_proxy());
    let api = server.http_addr();
    let xff = |client: &str| format!("x-forwarded-for: {client}\r\n");
    // Two connections of one client through the proxy, each in the middle of a request: its share.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = connect_from(api, "127.0.0.1");
        hold_request(&mut s, api, &xff("203.0.113.1"));
        held.push(s);
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut third = connect_from(api, "127.0.0.1");
    let (status, body) = get(&mut third, api, "/healthz", &xff("203.0.113.1"));
    assert_eq!((status, code(&body).as_str()), (503, "too_many_connections"), "{body}");
    assert!(body.contains("from your address"), "{body}");
    for client in ["203.0.113.2", "203.0.113.3"] {
        let mut s = connect_from(api, "127.0.0.1");
        assert_eq!(get(&mut s, api, "/healthz", &xff(client)).0, 200, "{client} has a share of its own");
        held.push(s);
    }
    // An untrusted peer is counted by its own address, whatever it claims.
    for client in ["198.51.100.1", "198.51.100.2"] {
        let mut s = connect_from(api, "127.0.0.2");
        hold_request(&mut s, api, &xff(client));
        held.push(s);
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut s = connect_from(api, "127.0.0.2");
    let (status, body) = get(&mut s, api, "/healthz", &xff("198.51.100.3"));
    assert_eq!((status, code(&body).as_str()), (503, "too_many_connections"), "{body}");
    drop(held);

    // The join rate: one bucket per forwarded client; an untrusted peer's header changes nothing.
    common::create_room(api, "r");
    let join = |from: &str, client: &str| join(api, from, &xff(client));
    // Not an offer: the rate is checked first, so no peer is made.
    assert_eq!(join("127.0.0.1", "192.0.2.1"), 400, "within the burst");
    assert_eq!(join("127.0.0.1", "192.0.2.1"), 429, "192.0.2.1's burst is spent");
    assert_eq!(join("127.0.0.1", "192.0.2.2"), 400, "another client behind the proxy has its own");
    assert_eq!(join("127.0.0.2", "192.0.2.3"), 400, "within 127.0.0.2's burst");
    assert_eq!(join("127.0.0.2", "192.0.2.4"), 429, "127.0.0.2's header is not believed");
    let peer: IpAddr = "127.0.0.1".parse().expect("ip");
    let r = request_as(api, &Requester { token: None, from: Some(peer) }, "GET", "/healthz", None, b"").expect("API");
    assert_eq!(r.status, 200, "the proxy itself, without a header, is served: {}", r.body);
    rt.block_on(server.shutdown());
}

/// Debian's nginx in front of `upstream`, configured as docs/operating/tls.md
/// shows (plain HTTP here: TLS changes nothing tutti sees), on a port of
/// its own on 127.0.0.1; stopped when dropped.
struct Nginx {
    addr: SocketAddr,
    child: std::process::Child,
    _dir: std::path::PathBuf,
}

impl Nginx {
    fn start(upstream: SocketAddr, name: &str) -> Self {
        let nginx = tutti_client::process::ensure_debian_package("/usr/sbin/nginx", "nginx");
        let dir = std::env::temp_dir().join(format!("tutti-crowd-nginx-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("nginx's directory");
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("bound").port();
        let d = dir.display();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 4096; }}\n\
             http {{\n access_log off;\n client_body_temp_path {d}/body;\n proxy_temp_path {d}/proxy;\n\
             fastcgi_temp_path {d}/fastcgi;\n uwsgi_temp_path {d}/uwsgi;\n scgi_temp_path {d}/scgi;\n\
             map $http_upgrade $connection_upgrade {{ default upgrade; '' close; }}\n\
             server {{\n  listen 127.0.0.1:{port};\n  location / {{\n   proxy_pass http://{upstream};\n\
             proxy_http_version 1.1;\n   proxy_set_header Host $http_host;\n\
             proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n\
             proxy_set_header Upgrade $http_upgrade;\n   proxy_set_header Connection $connection_upgrade;\n\
             proxy_read_timeout 120s;\n  }}\n }}\n}}\n"
        );
        let conf_file = dir.join("nginx.conf");
        std::fs::write(&conf_file, conf).expect("nginx.conf");
        let child = std::process::Command::new(nginx)
            .args(["-p", &dir.display().to_string(), "-e", &format!("{d}/error.log"), "-c"])
            .arg(&conf_file)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nginx starts");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let proxy = Self { addr, child, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(addr).is_err() {
            let log = std::fs::read_to_string(proxy._dir.join("error.log")).unwrap_or_default();
            assert!(Instant::now() < deadline, "nginx did not listen within 10 s: {log}");
            std::thread::sleep(Duration::from_millis(50));
        }
        proxy
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self._dir);
    }
}

/// The issue's deployment: every caller behind nginx. With tokens, 300
/// people through it (more than an address's share) all get their socket,
/// the proxy trusted or not. With nginx in `limits.trusted_proxies`, the
/// per-address share and the join rate apply to each client's own address
/// (what nginx appends to `X-Forwarded-For`), so one client past its share
/// is refused "from your address" while the others are served.
#[test]
fn behind_nginx_people_are_bounded_each_not_together() {
    const PEOPLE: usize = 300;
    let (rt, server) = start_with(with_auth(test_config()));
    let proxy = Nginx::start(server.http_addr(), "crowd");
    admin_creates(&server, "townhall");
    let ttl = Duration::from_secs(600);
    let sockets: Vec<_> = (0..PEOPLE)
        .map(|i| {
            let token = server.mint_token(&Grant::listener("townhall", format!("caller-{i}")), ttl).expect("a token");
            let (ws, first) = socket_from(proxy.addr, "127.0.0.1", "townhall", &format!("?token={token}"))
                .unwrap_or_else(|(status, body)| panic!("caller {i} through nginx: {status} {body}"));
            assert!(first.contains(r#""type":"room""#), "{first}");
            ws
        })
        .collect();
    assert_eq!(sockets.len(), PEOPLE);
    drop((sockets, proxy));
    rt.block_on(server.shutdown());

    let (rt, server) = start_with(behind_proxy());
    let proxy = Nginx::start(server.http_addr(), "forwarded");
    common::create_room(server.http_addr(), "r");
    let held: Vec<_> =
        (0..2).map(|_| socket_from(proxy.addr, "127.0.0.2", "r", "").expect("within the share")).collect();
    let (status, body) = socket_from(proxy.addr, "127.0.0.2", "r", "").expect_err("past 127.0.0.2's share");
    assert_eq!((status, code(&body).as_str()), (503, "too_many_connections"), "{body}");
    assert!(body.contains("from your address"), "{body}");
    assert!(socket_from(proxy.addr, "127.0.0.3", "r", "").is_ok(), "another client through the same proxy");
    drop(held);
    let join = |from: &str| join(proxy.addr, from, "");
    assert_eq!(join("127.0.0.4"), 400, "within 127.0.0.4's burst (not an offer: no peer made)");
    assert_eq!(join("127.0.0.4"), 429, "127.0.0.4's burst is spent");
    assert_eq!(join("127.0.0.5"), 400, "127.0.0.5 has its own");
    drop(proxy);
    rt.block_on(server.shutdown());
}
