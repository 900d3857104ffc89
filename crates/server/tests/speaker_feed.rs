//! The per-speaker feed (`GET /v1/rooms/{room}/speakers`) with real WebRTC
//! talkers: two speakers with their own tones and a silent listener. The
//! feed names each speaker once, then carries each one's own frames (who is
//! in a frame is asserted by decoding it: alice's frames carry her 440 Hz
//! and not bob's 660 Hz, and the other way round); the listener sends none.
//! Only a room's admin opens it, at most `limits.speaker_feeds_per_room` at
//! once; it ends (1000) when the room is deleted.

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
