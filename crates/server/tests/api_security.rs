//! Nothing an unauthorised client can take (issue 25): rooms nobody
//! created, connection slots, sockets past their token, participants per
//! identity, updates per participant, a development server from another
//! site, recordings' paths and disk. Real server, real HTTP and WebSocket,
//! loopback only.

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{create_room, http, start_with, test_config};
use tutti_client::{JoinAs, Requester, Response, ToneClient, request_as};
use tutti_server::auth::{Grant, unix_now};
use tutti_server::{Config, Server};

const SECRET: &str = "api-security-test-secret-0123456789";

fn with_auth(mut cfg: Config) -> Config {
    cfg.auth.disabled = false;
    cfg.auth.secret = SECRET.to_owned();
    cfg
}

fn mint(server: &Server, grant: Grant, ttl: Duration) -> String {
    server.mint_token(&grant, ttl).expect("a token")
}

fn call(api: SocketAddr, token: &str, method: &str, path: &str, ct: Option<&str>, body: &[u8]) -> Response {
    request_as(api, &Requester::token(token), method, path, ct, body).expect("the API answers")
}

fn offer() -> String {
    ToneClient::offer(100.0).expect("offer").1
}

/// A raw HTTP/1.1 exchange: `request` as written, the answer until the server closes.
fn raw(api: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(api).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    s.write_all(request.as_bytes()).expect("write");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// A WebSocket with a token, or the HTTP status the upgrade got.
fn ws(api: SocketAddr, room: &str, token: Option<&str>) -> Result<Sock, u16> {
    let stream = TcpStream::connect(api).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let q = token.map(|t| format!("?token={t}")).unwrap_or_default();
    match tungstenite::client(format!("ws://{api}/v1/rooms/{room}/ws{q}"), stream) {
        Ok((ws, _)) => {
            ws.get_ref().set_read_timeout(Some(Duration::from_millis(20))).expect("timeout");
            Ok(Sock(ws))
        }
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(r))) => Err(r.status().as_u16()),
        Err(e) => panic!("handshake: {e}"),
    }
}

struct Sock(tungstenite::WebSocket<TcpStream>);

impl Sock {
    fn send(&mut self, v: serde_json::Value) {
        self.0.send(tungstenite::Message::text(v.to_string())).expect("send");
    }

    /// Messages (events unbatched) until `want` matches one, the socket
    /// closes (`Err(code)`), or `within` passes (`Err(0)`).
    fn until(&mut self, within: Duration, want: impl Fn(&serde_json::Value) -> bool) -> Result<serde_json::Value, u16> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            match self.0.read() {
                Ok(tungstenite::Message::Text(t)) => {
                    let v: serde_json::Value = serde_json::from_str(t.as_str()).expect("JSON");
                    let items = if v["type"] == "events" {
                        v["events"].as_array().cloned().unwrap_or_default()
                    } else {
                        vec![v]
                    };
                    if let Some(hit) = items.into_iter().find(|i| want(i)) {
                        return Ok(hit);
                    }
                }
                Ok(tungstenite::Message::Close(frame)) => {
                    return Err(frame.map_or(1005, |f| f.code.into()));
                }
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => return Err(1006),
            }
        }
        Err(0)
    }

    /// The close code and reason the server ends with (within `within`).
    fn close_frame(&mut self, within: Duration) -> Option<(u16, String)> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            match self.0.read() {
                Ok(tungstenite::Message::Close(frame)) => {
                    return frame.map(|f| (u16::from(f.code), f.reason.to_string()));
                }
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => return None,
            }
        }
        None
    }
}

/// The issue's case, on one node: with `max_rooms = 8`, joins and bare
/// WebSocket upgrades with a listen-only `*` token create no room, so the
/// admin's creates all succeed; an admin-created room nobody joins is
/// closed after `room.empty_timeout_seconds`, an occupied one stays; and
/// with `room.auto_create` a join does create its room.
#[test]
fn joins_create_no_rooms_and_empty_rooms_are_reaped() {
    let mut cfg = with_auth(Config { max_rooms: 8, ..test_config() });
    cfg.room.empty_timeout_seconds = 1.0;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let admin = mint(&server, Grant::admin("ops"), Duration::from_secs(600));
    let squatter = mint(&server, Grant::listener("*", "squatter"), Duration::from_secs(600));
    for i in 0..8 {
        let r = call(
            api,
            &squatter,
            "POST",
            &format!("/v1/rooms/squat-{i}/participants"),
            Some("application/sdp"),
            offer().as_bytes(),
        );
        assert_eq!((r.status, r.code().as_str()), (404, "room_not_found"), "{}", r.body);
        assert_eq!(ws(api, &format!("sock-{i}"), Some(&squatter)).err(), Some(404), "a bare upgrade creates nothing");
    }
    let rooms = call(api, &admin, "GET", "/v1/rooms", None, b"");
    assert_eq!(rooms.body, "[]", "no room was made");
    // The admin's rooms: "idle" (nobody comes) and "busy" (someone stays).
    for id in ["idle", "busy"] {
        let r =
            call(api, &admin, "POST", "/v1/rooms", Some("application/json"), format!("{{\"id\":\"{id}\"}}").as_bytes());
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let mut watcher = ws(api, "idle", Some(&admin)).expect("a watcher");
    let alice = mint(&server, Grant::participant("busy", "alice"), Duration::from_secs(600));
    let mut client = ToneClient::join_as(api, &Requester::token(&alice), "busy", 440.0, JoinAs::Whip).expect("join");
    let closed = watcher.until(Duration::from_secs(5), |v| v["type"] == "room_closed");
    assert!(closed.is_ok(), "the empty room closed: {closed:?}");
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1500) {
        tutti_client::run_for(&mut [&mut client], Duration::from_millis(20));
    }
    let r = call(api, &admin, "GET", "/v1/rooms/idle", None, b"");
    assert_eq!((r.status, r.code().as_str()), (404, "room_not_found"), "{}", r.body);
    assert_eq!(call(api, &admin, "GET", "/v1/rooms/busy", None, b"").status, 200, "an occupied room stays");
    // Its creator may fill the server to max_rooms: nothing took a slot.
    for i in 0..7 {
        let r =
            call(api, &admin, "POST", "/v1/rooms", Some("application/json"), format!("{{\"id\":\"a{i}\"}}").as_bytes());
        assert_eq!(r.status, 201, "create {i}: {}", r.body);
    }
    client.close();
    rt.block_on(server.shutdown());

    let mut cfg = with_auth(test_config());
    cfg.room.auto_create = true;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let bob = mint(&server, Grant::participant("open", "bob"), Duration::from_secs(600));
    let r = call(api, &bob, "POST", "/v1/rooms/open/participants", Some("application/sdp"), offer().as_bytes());
    assert_eq!(r.status, 201, "room.auto_create: a join creates its room: {}", r.body);
    rt.block_on(server.shutdown());
}

/// 16 connections that send nothing, with `max_connections = 16`, leave
/// `/healthz` answering 200, from their own address and another; an
/// address past its share of busy connections (WebSockets) is refused
/// while another address is served.
#[test]
fn idle_connections_do_not_starve_the_api() {
    let mut cfg = test_config();
    cfg.limits.max_connections = 16;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let idle: Vec<TcpStream> = (0..16).map(|_| TcpStream::connect(api).expect("connect")).collect();
    std::thread::sleep(Duration::from_millis(200));
    for from in ["127.0.0.1", "127.0.0.2"] {
        let who = Requester { token: None, from: Some(from.parse::<IpAddr>().expect("ip")) };
        let r = request_as(api, &who, "GET", "/healthz", None, b"").expect("answered");
        assert_eq!(r.status, 200, "from {from}: {}", r.body);
    }
    drop(idle);
    rt.block_on(server.shutdown());

    // A connection that sends nothing is closed after the header timeout, counted from its accept.
    let mut cfg = test_config();
    cfg.limits.http_header_timeout_seconds = 1.0;
    let (rt, server) = start_with(cfg);
    let mut silent = TcpStream::connect(server.http_addr()).expect("connect");
    silent.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    let t0 = Instant::now();
    let mut buf = [0u8; 64];
    let n = silent.read(&mut buf).unwrap_or(0);
    assert!(t0.elapsed() < Duration::from_secs(3), "closed after {:?} ({n} bytes)", t0.elapsed());
    rt.block_on(server.shutdown());

    let mut cfg = test_config();
    cfg.limits.max_connections = 16;
    cfg.limits.max_connections_per_address = 4;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "r");
    let socks: Vec<Sock> = (0..4).map(|_| ws(api, "r", None).expect("a socket")).collect();
    let r = http(api, "GET", "/healthz", None, b"");
    assert_eq!((r.status, r.code().as_str()), (503, "too_many_connections"), "127.0.0.1 is at its share: {}", r.body);
    let other = Requester { token: None, from: Some("127.0.0.2".parse::<IpAddr>().expect("ip")) };
    let r = request_as(api, &other, "GET", "/healthz", None, b"").expect("answered");
    assert_eq!(r.status, 200, "another address is served: {}", r.body);
    drop(socks);
    let deadline = Instant::now() + Duration::from_secs(5);
    while http(api, "GET", "/healthz", None, b"").status != 200 {
        assert!(Instant::now() < deadline, "the share frees when the sockets close");
        std::thread::sleep(Duration::from_millis(50));
    }
    rt.block_on(server.shutdown());
}

/// One listen-only token holds at most `limits.ws_max_per_identity` sockets.
#[test]
fn sockets_per_identity_are_bounded() {
    let mut cfg = with_auth(test_config());
    cfg.limits.ws_max_per_identity = 2;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let admin = mint(&server, Grant::admin("ops"), Duration::from_secs(600));
    call(api, &admin, "POST", "/v1/rooms", Some("application/json"), br#"{"id":"r"}"#);
    let lena = mint(&server, Grant::listener("*", "lena"), Duration::from_secs(600));
    let a = ws(api, "r", Some(&lena)).expect("one");
    let _b = ws(api, "r", Some(&lena)).expect("two");
    assert_eq!(ws(api, "r", Some(&lena)).err(), Some(429), "a third socket of one identity is refused");
    let other = mint(&server, Grant::listener("*", "max"), Duration::from_secs(600));
    assert!(ws(api, "r", Some(&other)).is_ok(), "another identity is not affected");
    drop(a);
    let deadline = Instant::now() + Duration::from_secs(5);
    while ws(api, "r", Some(&lena)).is_err() {
        assert!(Instant::now() < deadline, "a closed socket gives its place back");
        std::thread::sleep(Duration::from_millis(50));
    }
    rt.block_on(server.shutdown());

    // The issue's case: max_connections = 16 and 16 sockets of one listen-only
    // token: half of them at most, and the API still serves everyone else.
    let mut cfg = with_auth(test_config());
    cfg.limits.max_connections = 16;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let admin = mint(&server, Grant::admin("ops"), Duration::from_secs(600));
    call(api, &admin, "POST", "/v1/rooms", Some("application/json"), br#"{"id":"r"}"#);
    let lena = mint(&server, Grant::listener("*", "lena"), Duration::from_secs(600));
    let results: Vec<Result<Sock, u16>> = (0..16).map(|_| ws(api, "r", Some(&lena))).collect();
    let open = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(open, 8, "half of max_connections");
    assert!(results.iter().filter_map(|r| r.as_ref().err()).all(|s| *s == 429));
    assert_eq!(http(api, "GET", "/healthz", None, b"").status, 200);
    let max = mint(&server, Grant::listener("*", "max"), Duration::from_secs(600));
    assert!(ws(api, "r", Some(&max)).is_ok(), "another listener gets a socket");
    rt.block_on(server.shutdown());
}

/// A socket is warned before its token expires and closed at expiry (4001
/// `token_expired`, its participant leaves with reason `token_expired`),
/// unless it sends a fresh token first; a token for another identity is
/// refused with a clear error and changes nothing.
#[test]
fn sockets_end_with_their_token_unless_refreshed() {
    let (rt, server) = start_with(with_auth(test_config()));
    let api = server.http_addr();
    let admin = mint(&server, Grant::admin("ops"), Duration::from_secs(600));
    call(api, &admin, "POST", "/v1/rooms", Some("application/json"), br#"{"id":"r"}"#);
    let mut observer = ws(api, "r", Some(&admin)).expect("observer");

    // Alice joins over a socket with a 3 s token and never refreshes it.
    let short = mint(&server, Grant::participant("r", "alice"), Duration::from_secs(3));
    let mut alice = ws(api, "r", Some(&short)).expect("alice's socket");
    alice.send(serde_json::json!({ "type": "join", "sdp": offer() }));
    let answer = alice.until(Duration::from_secs(5), |v| v["type"] == "answer").expect("an answer");
    let id = answer["id"].as_u64().expect("id");
    let warned = alice.until(Duration::from_secs(4), |v| v["type"] == "token_expiring").expect("warned");
    assert!(warned["expires_at"].as_u64().is_some_and(|t| t <= unix_now() + 3), "{warned}");
    let closed = alice.close_frame(Duration::from_secs(4));
    assert_eq!(closed, Some((4001, "token_expired".to_owned())), "closed at expiry");
    let left = observer.until(Duration::from_secs(3), |v| v["type"] == "left" && v["id"] == id).expect("left");
    assert_eq!(left["reason"], "token_expired");
    let r = call(api, &short, "GET", "/v1/rooms/r", None, b"");
    assert_eq!(r.status, 401, "and REST says the same");

    // Bob refreshes in time: his socket outlives his first token.
    let bob_short = mint(&server, Grant::participant("r", "bob"), Duration::from_secs(3));
    let mut bob = ws(api, "r", Some(&bob_short)).expect("bob's socket");
    let eve = mint(&server, Grant::participant("r", "eve"), Duration::from_secs(600));
    bob.send(serde_json::json!({ "type": "token", "token": eve }));
    let refused = bob.until(Duration::from_secs(2), |v| v["type"] == "error").expect("refused");
    assert_eq!(refused["code"], "token_refused", "{refused}");
    assert!(refused["message"].as_str().unwrap_or("").contains("identity"), "{refused}");
    bob.until(Duration::from_secs(4), |v| v["type"] == "token_expiring").expect("warned");
    let fresh = mint(&server, Grant::participant("r", "bob"), Duration::from_secs(600));
    bob.send(serde_json::json!({ "type": "token", "token": fresh }));
    let accepted = bob.until(Duration::from_secs(2), |v| v["type"] == "token_accepted").expect("accepted");
    assert!(accepted["expires_at"].as_u64().unwrap_or(0) > unix_now() + 500, "{accepted}");
    // Past the first token's expiry the socket still works.
    std::thread::sleep(Duration::from_millis(2500));
    bob.send(serde_json::json!({ "type": "mute", "muted": true }));
    let e = bob.until(Duration::from_secs(2), |v| v["type"] == "error").expect("an answer");
    assert_eq!(e["code"], "not_joined", "the socket is open and served: {e}");
    rt.block_on(server.shutdown());
}

/// TURN REST credentials from `ice-servers` (and a WHIP join's `Link`
/// headers) expire no later than the token that asked for them.
#[test]
fn turn_credentials_expire_with_the_token() {
    let mut cfg = with_auth(test_config());
    cfg.ice_servers = vec![tutti_server::ice::IceServerEntry {
        urls: vec!["turn:127.0.0.1:3478?transport=udp".into()],
        secret: "coturn-shared-secret".into(),
        ttl_seconds: 86_400,
        ..Default::default()
    }];
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let token = mint(&server, Grant::participant("r", "alice"), Duration::from_secs(120));
    let r = call(api, &token, "GET", "/v1/rooms/r/ice-servers", None, b"");
    assert_eq!(r.status, 200, "{}", r.body);
    let v: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    let user = v["ice_servers"][0]["username"].as_str().expect("a REST username").to_owned();
    let expiry: u64 = user.split(':').next().and_then(|t| t.parse().ok()).expect("expiry:user");
    assert!(expiry <= unix_now() + 120, "the credential outlives the token: {user}");
    assert!(expiry + 5 >= unix_now() + 120, "but lives as long as it: {user}");
    rt.block_on(server.shutdown());
}

/// One identity holds one participant: a second join replaces the first
/// (its socket is closed with 4409 `replaced`, the room hears `left`
/// `replaced`); an admin may hold several. `PATCH …/participants/{id}` is
/// rate limited per participant (429 with Retry-After, JSON).
#[test]
fn one_participant_per_identity_and_updates_are_rate_limited() {
    let mut cfg = with_auth(test_config());
    cfg.limits.participant_updates_per_second = 1.0;
    cfg.limits.participant_update_burst = 3;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let admin = mint(&server, Grant::admin("ops"), Duration::from_secs(600));
    call(api, &admin, "POST", "/v1/rooms", Some("application/json"), br#"{"id":"r"}"#);
    let mut observer = ws(api, "r", Some(&admin)).expect("observer");
    let alice = mint(&server, Grant::participant("r", "alice"), Duration::from_secs(600));

    let mut first = ws(api, "r", Some(&alice)).expect("first socket");
    first.send(serde_json::json!({ "type": "join", "sdp": offer() }));
    let one =
        first.until(Duration::from_secs(5), |v| v["type"] == "answer").expect("answer")["id"].as_u64().expect("id");
    let mut second = ws(api, "r", Some(&alice)).expect("second socket");
    second.send(serde_json::json!({ "type": "join", "sdp": offer() }));
    let two =
        second.until(Duration::from_secs(5), |v| v["type"] == "answer").expect("answer")["id"].as_u64().expect("id");
    assert_ne!(one, two);
    assert_eq!(first.close_frame(Duration::from_secs(3)), Some((4409, "replaced".to_owned())));
    let left = observer.until(Duration::from_secs(3), |v| v["type"] == "left" && v["id"] == one).expect("left");
    assert_eq!(left["reason"], "replaced");
    // And over REST: a third join replaces the second.
    let r = call(api, &alice, "POST", "/v1/rooms/r/participants", Some("application/sdp"), offer().as_bytes());
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(second.close_frame(Duration::from_secs(3)), Some((4409, "replaced".to_owned())));
    let room: serde_json::Value =
        serde_json::from_str(&call(api, &admin, "GET", "/v1/rooms/r", None, b"").body).expect("JSON");
    let alices = room["participants"].as_array().expect("list").iter().filter(|p| p["identity"] == "alice").count();
    assert_eq!(alices, 1, "{room}");
    // An admin may join twice (a bridge, a load generator).
    for _ in 0..2 {
        let r = call(api, &admin, "POST", "/v1/rooms/r/participants", Some("application/sdp"), offer().as_bytes());
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let room: serde_json::Value =
        serde_json::from_str(&call(api, &admin, "GET", "/v1/rooms/r", None, b"").body).expect("JSON");
    assert_eq!(room["participants"].as_array().map(Vec::len), Some(3), "{room}");

    // Hand toggles on alice's participant: a burst of 3, then 429.
    let id =
        room["participants"].as_array().expect("list").iter().find(|p| p["identity"] == "alice").expect("alice")["id"]
            .as_u64()
            .expect("id");
    let path = format!("/v1/rooms/r/participants/{id}");
    for i in 0..3 {
        let body = format!("{{\"hand\":{}}}", i % 2 == 0);
        let r = call(api, &alice, "PATCH", &path, Some("application/json"), body.as_bytes());
        assert_eq!(r.status, 200, "update {i}: {}", r.body);
    }
    let r = call(api, &alice, "PATCH", &path, Some("application/json"), br#"{"hand":false}"#);
    assert_eq!((r.status, r.code().as_str()), (429, "rate_limited"), "{}", r.body);
    assert_eq!(r.header("retry-after"), Some("1"));
    // The participant's own changes do not spend its admins' share: the
    // moderator's mute goes through, and the admins have a burst of their own.
    for i in 0..3 {
        let r = call(api, &admin, "PATCH", &path, Some("application/json"), br#"{"muted":true}"#);
        assert_eq!(r.status, 200, "the admin's change {i} after the participant's burst: {}", r.body);
    }
    let r = call(api, &admin, "PATCH", &path, Some("application/json"), br#"{"muted":true}"#);
    assert_eq!((r.status, r.code().as_str()), (429, "rate_limited"), "{}", r.body);
    std::thread::sleep(Duration::from_millis(1100));
    let r = call(api, &alice, "PATCH", &path, Some("application/json"), br#"{"hand":false}"#);
    assert_eq!(r.status, 200, "a second later: {}", r.body);
    rt.block_on(server.shutdown());
}

/// With auth disabled, a page of another site cannot change anything
/// (Origin), nor can a name rebound to 127.0.0.1 (Host); local pages and
/// tools can.
#[test]
fn development_mode_refuses_other_sites() {
    let (rt, server) = start_with(test_config());
    let api = server.http_addr();
    let post = |host: &str, origin: Option<&str>| {
        let origin = origin.map(|o| format!("Origin: {o}\r\n")).unwrap_or_default();
        raw(
            api,
            &format!(
                "POST /v1/rooms HTTP/1.1\r\nHost: {host}\r\n{origin}Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
            ),
        )
    };
    let evil = post(&api.to_string(), Some("https://evil.example"));
    assert!(evil.starts_with("HTTP/1.1 403") && evil.contains("forbidden_origin"), "{evil}");
    let rebound = post(&format!("evil.example:{}", api.port()), Some(&format!("http://evil.example:{}", api.port())));
    assert!(rebound.starts_with("HTTP/1.1 403") && rebound.contains("bad_host"), "{rebound}");
    let rebound_read =
        raw(api, &format!("GET /v1/rooms HTTP/1.1\r\nHost: evil.example:{}\r\nConnection: close\r\n\r\n", api.port()));
    assert!(rebound_read.starts_with("HTTP/1.1 403"), "reads through a rebound name too: {rebound_read}");
    let upgrade = |origin: &str| {
        raw(
            api,
            &format!(
                "GET /v1/rooms/dev/ws HTTP/1.1\r\nHost: {api}\r\nOrigin: {origin}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                 Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
            ),
        )
    };
    assert_eq!(http(api, "GET", "/v1/rooms", None, b"").body, "[]", "no room was created");
    let local = post(&api.to_string(), Some("http://localhost:3000"));
    assert!(local.starts_with("HTTP/1.1 201"), "a local page may: {local}");
    let tool = post(&format!("localhost:{}", api.port()), None);
    assert!(tool.starts_with("HTTP/1.1 201"), "a tool (no Origin) may: {tool}");
    create_room(api, "dev");
    let socket = upgrade("https://evil.example");
    assert!(socket.starts_with("HTTP/1.1 403") && socket.contains("forbidden_origin"), "{socket}");
    rt.block_on(server.shutdown());
}

fn temp_dir(what: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tutti-apisec-{}-{what}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// By default the recordings directory has a quota (10 GiB): a directory
/// holding more refuses a start (a sparse file stands for old recordings).
#[test]
fn the_recordings_directory_has_a_quota_by_default() {
    let dir = temp_dir("rec-default");
    let mut cfg = with_auth(test_config());
    cfg.recording.dir = dir.display().to_string();
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let admin = mint(&server, Grant::admin("ops"), Duration::from_secs(600));
    call(api, &admin, "POST", "/v1/rooms", Some("application/json"), br#"{"id":"r"}"#);
    let old = std::fs::File::create(dir.join("old.opus")).expect("an old recording");
    old.set_len(11 << 30).expect("sparse");
    let r = call(api, &admin, "POST", "/v1/rooms/r/recording", None, b"");
    assert_eq!((r.status, r.code().as_str()), (507, "recording_quota"), "{}", r.body);
    std::fs::remove_file(dir.join("old.opus")).expect("removed");
    let r = call(api, &admin, "POST", "/v1/rooms/r/recording", None, b"");
    assert_eq!(r.status, 201, "with room again: {}", r.body);
    rt.block_on(server.shutdown());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `GET …/recording` names no server path, to anyone; a directory at its
/// quota refuses a start (507 `recording_quota`, counted), and a recording
/// that reaches it stops (`recording_stopped` reason `quota`).
#[test]
fn recordings_show_no_path_and_keep_to_their_quota() {
    let dir = temp_dir("rec");
    let mut cfg = with_auth(test_config());
    cfg.recording.dir = dir.display().to_string();
    cfg.recording.dir_max_bytes = 40_000;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let admin = mint(&server, Grant::admin("ops"), Duration::from_secs(600));
    call(api, &admin, "POST", "/v1/rooms", Some("application/json"), br#"{"id":"r"}"#);
    std::fs::write(dir.join("old.opus"), vec![0u8; 40_000]).expect("an old recording");
    let r = call(api, &admin, "POST", "/v1/rooms/r/recording", None, b"");
    assert_eq!((r.status, r.code().as_str()), (507, "recording_quota"), "{}", r.body);
    let metrics = server.metrics_addr().expect("metrics");
    let scraped = common::scrape(metrics);
    assert!(scraped.get("tutti_recording_quota_refusals_total").copied().unwrap_or(0.0) >= 1.0, "counted");

    std::fs::write(dir.join("old.opus"), vec![0u8; 30_000]).expect("a smaller old recording");
    let mut observer = ws(api, "r", Some(&admin)).expect("observer");
    let r = call(api, &admin, "POST", "/v1/rooms/r/recording", None, b"");
    assert_eq!(r.status, 201, "{}", r.body);
    let started: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    assert!(started.get("path").is_none() && started["file"].is_string(), "{started}");
    let lena = mint(&server, Grant::listener("r", "lena"), Duration::from_secs(600));
    let shown = call(api, &lena, "GET", "/v1/rooms/r/recording", None, b"");
    assert_eq!(shown.status, 200, "{}", shown.body);
    assert!(!shown.body.contains(&dir.display().to_string()) && !shown.body.contains("\"path\""), "{}", shown.body);
    // Talkers fill the last 10 kB: the recording stops at the quota, the call goes on.
    let mut talkers: Vec<ToneClient> = [440.0f32, 660.0]
        .iter()
        .enumerate()
        .map(|(i, &f)| {
            let t = mint(&server, Grant::participant("r", format!("t{i}")), Duration::from_secs(600));
            ToneClient::join_as(api, &Requester::token(&t), "r", f, JoinAs::Whip).expect("join")
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    let stopped = loop {
        assert!(Instant::now() < deadline, "no recording_stopped within 20 s");
        let mut refs: Vec<&mut ToneClient> = talkers.iter_mut().collect();
        tutti_client::run_for(&mut refs, Duration::from_millis(20));
        if let Ok(v) = observer.until(Duration::from_millis(5), |v| v["type"] == "recording_stopped") {
            break v;
        }
    };
    assert_eq!(stopped["reason"], "quota", "{stopped}");
    let used: u64 =
        std::fs::read_dir(&dir).expect("dir").flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum();
    assert!(used <= 40_000, "the directory holds {used} bytes, over its quota");
    let scraped = common::scrape(metrics);
    let finished = common::series("tutti_recordings_finished_total", &[("reason", "quota")]);
    assert_eq!(scraped.get(&finished).copied(), Some(1.0), "{finished}");
    for t in &mut talkers {
        t.close();
    }
    rt.block_on(server.shutdown());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Keys rotate by id: tokens minted by the server carry the first listed
/// key's id and verify; tokens minted before (plain `auth.secret`, no
/// `kid`) keep verifying; a key that is no longer listed verifies nothing.
#[test]
fn listed_keys_rotate_without_dropping_older_tokens() {
    let mut cfg = with_auth(test_config());
    cfg.auth.keys = vec![
        tutti_server::AuthKey { id: "2026-12".into(), secret: "the december key, thirty-two bytes long".into() },
        tutti_server::AuthKey { id: "2026-11".into(), secret: "the november key, thirty-two bytes long".into() },
    ];
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let grant = Grant::admin("ops");
    let now = unix_now();
    let plain = tutti_server::auth::Auth::new(SECRET).expect("secret").mint(&grant, Duration::from_secs(600), now);
    let november = tutti_server::auth::Auth::with_keys(
        "",
        &[("2026-11".into(), "the november key, thirty-two bytes long".into())],
    )
    .expect("keys")
    .mint(&grant, Duration::from_secs(600), now);
    let october = tutti_server::auth::Auth::with_keys(
        "",
        &[("2026-10".into(), "the october key, thirty-two bytes long!".into())],
    )
    .expect("keys")
    .mint(&grant, Duration::from_secs(600), now);
    let minted = mint(&server, grant, Duration::from_secs(600));
    let header = minted.split('.').next().expect("header");
    assert!(
        String::from_utf8_lossy(&base64_url(header)).contains("\"kid\":\"2026-12\""),
        "the server mints with the first key"
    );
    for (name, token) in [("minted", minted), ("plain", plain.expect("mint")), ("november", november.expect("mint"))] {
        assert_eq!(call(api, &token, "GET", "/v1/rooms", None, b"").status, 200, "{name}");
    }
    let r = call(api, &october.expect("mint"), "GET", "/v1/rooms", None, b"");
    assert_eq!(r.status, 401, "an unlisted key: {}", r.body);
    rt.block_on(server.shutdown());
}

/// base64url without padding, decoded (small, for a JWT header).
fn base64_url(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'-' => 62,
        _ => 63,
    };
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes() {
        acc = (acc << 6) | u32::from(value(c));
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}
