//! The per-speaker feed (`GET /v1/rooms/{room}/speakers`) with real WebRTC
//! talkers: two speakers with their own tones and a silent listener. The
//! feed names each speaker once, then carries each one's own frames (who is
//! in a frame is asserted by decoding it: alice's frames carry her 440 Hz
//! and not bob's 660 Hz, and the other way round); the listener sends none.
//! Only a room's admin opens it, at most `limits.speaker_feeds_per_room` at
//! once; it ends (1000) when the room is deleted, (4001) when its token
//! expires unless a fresh one came, and (4408) when its reader stops
//! answering pings; while open it holds a connection slot.

mod common;

use std::collections::HashMap;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{start_with, test_config};
use tungstenite::client::IntoClientRequest;
use tutti_client::{JoinAs, Requester, ToneClient, request_as, run_until};
use tutti_mix::{Decoder, FRAME_SAMPLES, goertzel};
use tutti_server::auth::Grant;

type Feed = tungstenite::WebSocket<TcpStream>;

/// Opens the feed with `token` in the Authorization header: the socket, or the refusal's status.
fn open(api: SocketAddr, room: &str, token: &str) -> Result<Feed, u16> {
    let mut request = format!("ws://{api}/v1/rooms/{room}/speakers").into_client_request().expect("request");
    request.headers_mut().insert("authorization", format!("Bearer {token}").parse().expect("header"));
    let stream = TcpStream::connect(api).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    match tungstenite::client(request, stream) {
        Ok((ws, _)) => {
            ws.get_ref().set_read_timeout(Some(Duration::from_millis(5))).expect("timeout");
            Ok(ws)
        }
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(r))) => Err(r.status().as_u16()),
        Err(e) => panic!("handshake: {e}"),
    }
}

/// What the feed said: speakers named (id → identity), frames per id (tick, level, Opus), and a close code.
#[derive(Default)]
struct Heard {
    names: HashMap<u64, String>,
    frames: HashMap<u64, Vec<(u64, u8, Vec<u8>)>>,
    closed: Option<u16>,
}

/// Reads the feed for `dur` while the clients keep talking.
fn read(feed: &mut Feed, clients: &mut [&mut ToneClient], dur: Duration, heard: &mut Heard) {
    let end = Instant::now() + dur;
    while Instant::now() < end && heard.closed.is_none() {
        let now = Instant::now();
        for c in clients.iter_mut() {
            c.pump(now);
        }
        match feed.read() {
            Ok(tungstenite::Message::Text(t)) => {
                let v: serde_json::Value = serde_json::from_str(t.as_str()).expect("JSON");
                if v["type"] == "speaker" {
                    let id = v["id"].as_u64().expect("id");
                    assert!(!heard.frames.contains_key(&id), "named before its first frame: {v}");
                    heard.names.insert(id, v["identity"].as_str().unwrap_or_default().to_owned());
                }
            }
            Ok(tungstenite::Message::Binary(b)) => {
                assert!(b.len() > 17, "a header and a frame: {} bytes", b.len());
                let id = u64::from_be_bytes(b[0..8].try_into().expect("8 bytes"));
                let tick = u64::from_be_bytes(b[8..16].try_into().expect("8 bytes"));
                assert!(heard.names.contains_key(&id), "frame of {id}, never named");
                heard.frames.entry(id).or_default().push((tick, b[16], b[17..].to_vec()));
            }
            Ok(tungstenite::Message::Close(f)) => heard.closed = Some(f.map_or(1005, |f| u16::from(f.code))),
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => panic!("feed: {e}"),
        }
    }
}

/// The amplitude of `freq` in a speaker's decoded frames.
fn tone(frames: &[(u64, u8, Vec<u8>)], freq: f32) -> f32 {
    let mut dec = Decoder::new().expect("decoder");
    let mut pcm = Vec::new();
    let mut frame = [0.0f32; FRAME_SAMPLES];
    for (_, _, opus) in frames {
        if dec.decode(opus, &mut frame).is_ok() {
            pcm.extend_from_slice(&frame);
        }
    }
    goertzel(&pcm, freq)
}

#[test]
fn the_speaker_feed_carries_each_speakers_own_frames_named() {
    let mut cfg = test_config();
    cfg.auth.disabled = false;
    cfg.auth.secret = "speaker-feed-test-secret-0123456789abcdef".to_owned();
    cfg.limits.speaker_feeds_per_room = 1;
    let (_rt, server) = start_with(cfg);
    let api = server.http_addr();
    let mint = |g: &Grant| server.mint_token(g, Duration::from_secs(600)).expect("token");
    let admin = mint(&Grant::admin("ops"));
    let r =
        request_as(api, &Requester::token(&admin), "POST", "/v1/rooms", Some("application/json"), br#"{"id":"cap"}"#)
            .expect("API");
    assert_eq!(r.status, 201, "{}", r.body);

    let join = |who: &str, freq: f32| {
        let token = mint(&Grant::participant("cap", who));
        ToneClient::join_as(api, &Requester::token(&token), "cap", freq, JoinAs::Whip).expect("join")
    };
    let (mut alice, mut bob, mut lou) = (join("alice", 440.0), join("bob", 660.0), join("lou", 880.0));
    lou.talking = false;
    assert!(
        run_until(&mut [&mut alice, &mut bob, &mut lou], Instant::now() + Duration::from_secs(10), |c| c
            .iter()
            .all(|c| c.connected)),
        "the three are connected"
    );

    // Not an admin of the room: refused. An admin: the feed; a second one beyond the limit: 429.
    assert_eq!(open(api, "cap", &mint(&Grant::participant("cap", "eve"))).err(), Some(403));
    assert_eq!(open(api, "nope", &admin).err(), Some(404));
    let mut feed = open(api, "cap", &admin).expect("the feed opens");
    assert_eq!(open(api, "cap", &admin).err(), Some(429), "one feed at a time here");

    let mut heard = Heard::default();
    read(&mut feed, &mut [&mut alice, &mut bob, &mut lou], Duration::from_secs(3), &mut heard);
    let id_of = |who: &str| heard.names.iter().find(|(_, n)| n.as_str() == who).map(|(id, _)| *id);
    let (a, b) = (id_of("alice").expect("alice named"), id_of("bob").expect("bob named"));
    assert!(id_of("lou").is_none(), "the listener sends nothing, so is never a speaker: {:?}", heard.names);
    let (fa, fb) = (&heard.frames[&a], &heard.frames[&b]);
    println!("frames: alice {}, bob {}", fa.len(), fb.len());
    assert!(fa.len() > 50 && fb.len() > 50, "about 50 frames a second each: {} {}", fa.len(), fb.len());
    // Each speaker's frames are their own voice, not the mix.
    let (a440, a660, b440, b660) = (tone(fa, 440.0), tone(fa, 660.0), tone(fb, 440.0), tone(fb, 660.0));
    println!("alice's frames: 440 Hz {a440:.4}, 660 Hz {a660:.4}; bob's: 440 Hz {b440:.4}, 660 Hz {b660:.4}");
    assert!(a440 > 0.01 && a440 > 10.0 * a660, "alice's frames carry her tone only");
    assert!(b660 > 0.01 && b660 > 10.0 * b440, "bob's frames carry his tone only");
    // Ticks go up per speaker, and a talking tone has a level (127 is silence).
    for frames in [fa, fb] {
        assert!(frames.windows(2).all(|w| w[1].0 > w[0].0), "ticks in order");
        let levelled = frames.iter().filter(|f| f.1 < 127).count();
        assert!(levelled * 10 >= frames.len() * 9, "levels: {levelled} of {}", frames.len());
    }

    // The room goes: the feed ends with 1000.
    let r = request_as(api, &Requester::token(&admin), "DELETE", "/v1/rooms/cap", None, b"").expect("API");
    assert_eq!(r.status, 204, "{}", r.body);
    read(&mut feed, &mut [&mut alice, &mut bob, &mut lou], Duration::from_secs(5), &mut heard);
    assert_eq!(heard.closed, Some(1000), "the feed closes with the room");
}

/// A server with auth on, a room `r` in it, and a way to mint tokens.
fn feed_server(tune: impl FnOnce(&mut tutti_server::Config)) -> (tokio::runtime::Runtime, tutti_server::Server) {
    let mut cfg = test_config();
    cfg.auth.disabled = false;
    cfg.auth.secret = "speaker-feed-test-secret-0123456789abcdef".to_owned();
    tune(&mut cfg);
    let (rt, server) = start_with(cfg);
    let admin = server.mint_token(&Grant::admin("ops"), Duration::from_secs(600)).expect("token");
    let r = request_as(
        server.http_addr(),
        &Requester::token(&admin),
        "POST",
        "/v1/rooms",
        Some("application/json"),
        br#"{"id":"r"}"#,
    )
    .expect("API");
    assert_eq!(r.status, 201, "{}", r.body);
    (rt, server)
}

/// The feed's messages until it closes or `within` passes (the close code, if any, last).
fn until_closed(feed: &mut Feed, within: Duration) -> (Vec<serde_json::Value>, Option<u16>) {
    let mut heard = Vec::new();
    let end = Instant::now() + within;
    while Instant::now() < end {
        match feed.read() {
            Ok(tungstenite::Message::Text(t)) => heard.push(serde_json::from_str(t.as_str()).expect("JSON")),
            Ok(tungstenite::Message::Close(f)) => return (heard, Some(f.map_or(1005, |f| u16::from(f.code)))),
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => panic!("feed: {e}"),
        }
    }
    (heard, None)
}

#[test]
fn the_feed_ends_with_its_token_unless_given_a_fresh_one() {
    let (_rt, server) = feed_server(|_| {});
    let api = server.http_addr();
    let mint = |g: &Grant, secs: u64| server.mint_token(g, Duration::from_secs(secs)).expect("token");
    // A token of 2 s: the feed closes with 4001 at its expiry.
    let mut feed = open(api, "r", &mint(&Grant::admin("agent"), 2)).expect("feed opens");
    let (_, closed) = until_closed(&mut feed, Duration::from_secs(6));
    assert_eq!(closed, Some(4001), "closed at the token's expiry");

    // A fresh token before the expiry keeps it open; one that is no admin's of the room is refused.
    let mut feed = open(api, "r", &mint(&Grant::admin("agent"), 2)).expect("feed opens");
    let send = |feed: &mut Feed, token: &str| {
        let msg = serde_json::json!({"type": "token", "token": token}).to_string();
        feed.send(tungstenite::Message::Text(msg.into())).expect("send");
    };
    send(&mut feed, &mint(&Grant::participant("r", "agent"), 600));
    send(&mut feed, &mint(&Grant::admin("agent"), 600));
    let (heard, closed) = until_closed(&mut feed, Duration::from_secs(4));
    assert_eq!(closed, None, "still open past the first token's expiry: {heard:?}");
    assert_eq!(heard.len(), 2, "{heard:?}");
    assert_eq!(
        (&heard[0]["type"], &heard[0]["code"]),
        (&serde_json::json!("error"), &serde_json::json!("token_refused"))
    );
    assert_eq!(heard[1]["type"], "token_accepted", "{heard:?}");
}

#[test]
fn an_idle_feed_is_closed_and_an_open_one_holds_a_connection_slot() {
    let (_rt, server) = feed_server(|cfg| {
        cfg.limits.ws_idle_timeout_seconds = 1.5;
        cfg.limits.max_connections = 2;
    });
    let api = server.http_addr();
    let admin = server.mint_token(&Grant::admin("agent"), Duration::from_secs(600)).expect("token");
    let health = || tutti_client::request(api, "GET", "/healthz", None, b"").map(|r| r.status).unwrap_or(0);

    // Two open feeds hold both connection slots: a third connection is refused.
    let mut first = open(api, "r", &admin).expect("feed opens");
    let second = open(api, "r", &admin).expect("feed opens");
    assert_ne!(health(), 200, "the feeds hold their connections' slots");

    // The second never answers the pings (nothing reads it): it is closed
    // with 4408 (read raw: the server's close frame, 0x88, code 0x1138).
    let mut raw = second.into_inner();
    raw.set_read_timeout(Some(Duration::from_millis(200))).expect("timeout");
    let (mut bytes, mut buf, end) = (Vec::new(), [0u8; 512], Instant::now() + Duration::from_secs(8));
    while Instant::now() < end {
        match std::io::Read::read(&mut raw, &mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
        // The first keeps reading, so it answers the pings and stays.
        let _ = until_closed(&mut first, Duration::from_millis(10));
    }
    assert!(bytes.windows(4).any(|w| w[0] == 0x88 && w[2..] == [0x11, 0x38]), "a 4408 close: {bytes:?}");
    // Its slot is free again; the first, answering, is still open.
    let end = Instant::now() + Duration::from_secs(5);
    while health() != 200 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(health(), 200, "the closed feed's slot is free");
    let (_, closed) = until_closed(&mut first, Duration::from_millis(500));
    assert_eq!(closed, None, "a feed that answers its pings stays open");
}
