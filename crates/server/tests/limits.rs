//! Every limit on what a client sends is configurable, answered with a
//! clear error, and leaves the server serving: joins per address, rooms,
//! participants, request body, connections, header and request time,
//! WebSocket message size, rate and idle time.

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{create_room, http, start_with, test_config};
use tutti_client::{Requester, request_as};
use tutti_server::{Config, Server};

fn from(ip: &str) -> Requester<'static> {
    Requester { token: None, from: Some(ip.parse::<IpAddr>().expect("ip")) }
}

fn offer() -> String {
    tutti_client::ToneClient::offer(100.0).expect("offer").1
}

#[test]
fn joins_are_rate_limited_per_address() {
    let mut cfg = test_config();
    cfg.limits.join_rate_per_second = 1.0;
    cfg.limits.join_burst = 3;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "r");
    let join = |ip: &str| {
        // Not an offer: the limit is checked first, so no peer is made.
        request_as(api, &from(ip), "POST", "/v1/rooms/r/participants", Some("application/sdp"), b"v=0").expect("API")
    };
    for i in 0..3 {
        assert_eq!(join("127.0.0.3").status, 400, "join {i} is within the burst");
    }
    let r = join("127.0.0.3");
    assert_eq!((r.status, r.code().as_str()), (429, "rate_limited"), "{}", r.body);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(join("127.0.0.4").status, 400, "another address has its own budget");
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(join("127.0.0.3").status, 400, "a second later, one more join");
    assert_eq!(join("127.0.0.3").status, 429);
    rt.block_on(server.shutdown());
}

#[test]
fn rooms_participants_and_bodies_are_bounded() {
    let cfg = Config { max_rooms: 2, max_participants: 1, max_body_bytes: 2048, ..test_config() };
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "one");
    create_room(api, "two");
    let r = http(api, "POST", "/v1/rooms", Some("application/json"), br#"{"id":"three"}"#);
    assert_eq!((r.status, r.code().as_str()), (503, "server_full"), "max_rooms: {}", r.body);
    let join = |room: &str| {
        http(api, "POST", &format!("/v1/rooms/{room}/participants"), Some("application/sdp"), offer().as_bytes())
    };
    assert_eq!(join("one").status, 201);
    let r = join("two");
    assert_eq!((r.status, r.code().as_str()), (503, "server_full"), "max_participants: {}", r.body);
    let r = http(api, "POST", "/v1/rooms", Some("application/json"), &[b' '; 3000]);
    assert_eq!((r.status, r.code().as_str()), (413, "body_too_large"), "max_body_bytes: {}", r.body);
    assert_eq!(http(api, "GET", "/v1/rooms/one", None, b"").status, 200, "still serving");
    rt.block_on(server.shutdown());
}

/// Reads until the peer closes or `within` passes; returns what came and when it closed.
fn read_until_closed(s: &mut TcpStream, within: Duration) -> (String, Option<Duration>) {
    let start = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(50))).expect("timeout");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while start.elapsed() < within {
        match s.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&got).into_owned(), Some(start.elapsed())),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), Some(start.elapsed())),
        }
    }
    (String::from_utf8_lossy(&got).into_owned(), None)
}

#[test]
fn slow_clients_are_timed_out() {
    let mut cfg = test_config();
    cfg.limits.http_header_timeout_seconds = 1.0;
    cfg.limits.http_request_timeout_seconds = 1.0;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();

    // Headers that never end (slowloris): the connection is closed.
    let mut slow = TcpStream::connect(api).expect("connect");
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ").expect("write");
    let (_, closed) = read_until_closed(&mut slow, Duration::from_secs(5));
    let closed = closed.expect("closed within 5 s");
    assert!(closed >= Duration::from_millis(800) && closed < Duration::from_secs(3), "closed after {closed:?}");

    // A body that never arrives: 408.
    let mut slow = TcpStream::connect(api).expect("connect");
    slow.write_all(
        b"POST /v1/rooms HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":",
    )
    .expect("write");
    let (text, _) = read_until_closed(&mut slow, Duration::from_secs(5));
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("request_timeout"), "{text}");
    assert_eq!(http(api, "GET", "/healthz", None, b"").status, 200, "still serving");
    rt.block_on(server.shutdown());
}

#[test]
fn connections_are_capped() {
    let mut cfg = test_config();
    cfg.limits.max_connections = 2;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "cap");
    // Connections in use (WebSockets) hold their slots; idle ones would
    // give theirs up to a newcomer (tests/api_security.rs).
    // The room's creation used a connection of its own: on a busy machine
    // its slot may not be given back yet when the sockets come (503 until it is).
    let busy: Vec<Ws> = (0..2).map(|_| Ws::connect_when_free(api, "cap")).collect();
    std::thread::sleep(Duration::from_millis(200));
    let r = http(api, "GET", "/healthz", None, b"");
    assert_eq!((r.status, r.code().as_str()), (503, "too_many_connections"), "{}", r.body);
    drop(busy);
    let deadline = Instant::now() + Duration::from_secs(5);
    while http(api, "GET", "/healthz", None, b"").status != 200 {
        assert!(Instant::now() < deadline, "a slot frees once a connection closes");
        std::thread::sleep(Duration::from_millis(50));
    }
    rt.block_on(server.shutdown());
}

/// A kept-alive connection that has been answered and sends nothing more
/// gives its slot to a newcomer, as one that never sent a request does:
/// clients that keep connections open cannot hold every slot.
#[test]
fn kept_alive_connections_between_requests_give_their_slots_up() {
    let mut cfg = test_config();
    cfg.limits.max_connections = 2;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let kept: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut s = TcpStream::connect(api).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
            std::io::Write::write_all(&mut s, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").expect("request");
            let mut buf = [0u8; 512];
            let n = std::io::Read::read(&mut s, &mut buf).expect("an answer");
            assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n]));
            s
        })
        .collect();
    // Both slots are held by connections kept alive; a newcomer takes one.
    let r = http(api, "GET", "/healthz", None, b"");
    assert_eq!(r.status, 200, "an idle kept-alive connection gave its slot up: {}", r.body);
    let closed = kept.into_iter().filter_map(|mut s| {
        let mut buf = [0u8; 16];
        s.set_read_timeout(Some(Duration::from_millis(500))).expect("timeout");
        matches!(std::io::Read::read(&mut s, &mut buf), Ok(0)).then_some(())
    });
    assert_eq!(closed.count(), 1, "the oldest of them was closed for it");
    rt.block_on(server.shutdown());
}

struct Ws(tungstenite::WebSocket<TcpStream>);

impl Ws {
    fn connect(api: SocketAddr, room: &str) -> Self {
        Self::try_connect(api, room).expect("WebSocket")
    }

    fn try_connect(
        api: SocketAddr,
        room: &str,
    ) -> Result<Self, Box<tungstenite::HandshakeError<tungstenite::ClientHandshake<TcpStream>>>> {
        let stream = TcpStream::connect(api).expect("connect");
        // A slow handshake (a busy machine) is not a failure; reads after it poll.
        stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        let ws = tungstenite::client(format!("ws://{api}/v1/rooms/{room}/ws"), stream).map_err(Box::new)?.0;
        ws.get_ref().set_read_timeout(Some(Duration::from_millis(20))).expect("timeout");
        Ok(Self(ws))
    }

    /// [`Ws::connect`], retried while the server answers 503 (at most 5 s).
    fn connect_when_free(api: SocketAddr, room: &str) -> Self {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match Self::try_connect(api, room) {
                Ok(ws) => return ws,
                Err(e)
                    if Instant::now() < deadline
                        && matches!(&*e, tungstenite::HandshakeError::Failure(tungstenite::Error::Http(r)) if r.status() == 503) =>
                {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("WebSocket: {e:?}"),
            }
        }
    }

    /// Text messages until the server closes (its close code) or `within` passes.
    fn until_closed(&mut self, within: Duration) -> (Vec<serde_json::Value>, Option<u16>) {
        let mut texts = Vec::new();
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            match self.0.read() {
                Ok(tungstenite::Message::Text(t)) => texts.push(serde_json::from_str(t.as_str()).expect("JSON")),
                Ok(tungstenite::Message::Close(frame)) => return (texts, Some(frame.map_or(1005, |f| f.code.into()))),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => return (texts, Some(1006)),
            }
        }
        (texts, None)
    }
}

fn ws_server() -> (tokio::runtime::Runtime, Server) {
    let mut cfg = test_config();
    cfg.limits.ws_max_message_bytes = 1024;
    cfg.limits.ws_messages_per_second = 5.0;
    cfg.limits.ws_message_burst = 5;
    cfg.limits.ws_idle_timeout_seconds = 1.5;
    let (rt, server) = start_with(cfg);
    create_room(server.http_addr(), "w");
    (rt, server)
}

#[test]
fn websocket_messages_are_bounded_in_size_rate_and_silence() {
    let (rt, server) = ws_server();
    let api = server.http_addr();

    // Too big: closed with 1009.
    let mut big = Ws::connect(api, "w");
    big.0.send(tungstenite::Message::text("x".repeat(4096))).expect("send");
    let (_, code) = big.until_closed(Duration::from_secs(5));
    assert_eq!(code, Some(1009), "closed for the size");

    // A flood: an error, then closed with 1008.
    let mut flood = Ws::connect(api, "w");
    for _ in 0..30 {
        if flood.0.send(tungstenite::Message::text(r#"{"type":"leave"}"#)).is_err() {
            break;
        }
    }
    let (texts, code) = flood.until_closed(Duration::from_secs(5));
    let codes: Vec<&str> = texts.iter().filter_map(|v| v["code"].as_str()).collect();
    assert_eq!(codes.iter().filter(|c| **c == "not_joined").count(), 5, "the burst is served: {codes:?}");
    assert_eq!(codes.last(), Some(&"rate_limited"), "{codes:?}");
    assert_eq!(code, Some(1008));

    // Silent (does not even answer pings): closed with 4408.
    let mut mute = Ws::connect(api, "w");
    std::thread::sleep(Duration::from_millis(2500));
    let started = Instant::now();
    let (_, code) = mute.until_closed(Duration::from_secs(3));
    assert_eq!(code, Some(4408), "closed as idle");
    assert!(started.elapsed() < Duration::from_secs(1), "it was already closed");

    // A live socket (it answers pings while reading) outlives the idle timeout.
    let mut live = Ws::connect(api, "w");
    let (_, code) = live.until_closed(Duration::from_secs(3));
    assert_eq!(code, None, "a socket that answers pings stays open");
    assert_eq!(server.resources().ws_sessions, 1, "the closed sessions are gone");
    rt.block_on(server.shutdown());
}
