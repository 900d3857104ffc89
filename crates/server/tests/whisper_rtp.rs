//! A whisper whose speaker is a plain RTP participant (a phone caller
//! bridged by a gateway): Debian's `ffmpeg` sends a 600 Hz tone as Opus over
//! plain RTP, relayed from the offered address as in tests/rtp_in.rs. A
//! WebRTC participant in the channel hears the caller, one outside it does
//! not (it still hears the room); closing the channel lets it hear the
//! caller again.

mod common;
mod ops_tools;

use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Ws, create_room, http, start_with, test_config};
use ops_tools::{ensure_tool, run};
use serde_json::{Value, json};
use tutti_client::{JoinAs, ToneClient, run_for, run_until};

/// Goertzel amplitude above which a tone is heard (as in tests/whisper.rs).
const HEARD: f32 = 0.01;
/// ... and below which it is not.
const NOT_HEARD: f32 = 0.005;
/// The caller's tone.
const CALLER: f32 = 600.0;

fn send(api: SocketAddr, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let bytes = body.map(|b| b.to_string()).unwrap_or_default();
    let ct = (!bytes.is_empty()).then_some("application/json");
    let r = http(api, method, path, ct, bytes.as_bytes());
    (r.status, serde_json::from_str(&r.body).unwrap_or(Value::Null))
}

#[test]
fn an_ffmpeg_caller_whispers_to_one_webrtc_peer_and_the_other_does_not_hear_it() {
    let ffmpeg = ensure_tool("ffmpeg", "ffmpeg");
    let mut cfg = test_config();
    cfg.rtp_in.trusted = vec!["127.0.0.0/8".into()];
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "line");
    let mut ws = Ws::connect(api, "line");
    // In: in the channel as a listener. Out: outside it. Both talk, so each hears the other (the room).
    let mut clients: Vec<ToneClient> = [440.0, 880.0]
        .into_iter()
        .map(|f| ToneClient::join(api, "line", f, JoinAs::Whip).expect("a WebRTC participant joins"))
        .collect();
    let (inside, outside) = (0, 1);

    // The caller: a plain RTP participant whose offered address is `rx` (its mix arrives there, unread).
    let rx = UdpSocket::bind("127.0.0.1:0").expect("bind loopback");
    let offer = format!(
        "v=0\r\no=gw 1 1 IN IP4 127.0.0.1\r\ns=call\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
         m=audio {} RTP/AVP 111\r\na=rtpmap:111 opus/48000/2\r\n",
        rx.local_addr().expect("bound").port()
    );
    let r = http(api, "POST", "/v1/rooms/line/participants", Some("application/sdp"), offer.as_bytes());
    assert_eq!(r.status, 201, "{}", r.body);
    let caller: u64 = r.header("location").and_then(|l| l.rsplit('/').next()?.parse().ok()).expect("an id");
    let plain_port = {
        let line = r.body.lines().find(|l| l.starts_with("m=audio ")).expect("an m=audio line");
        line.split_whitespace().nth(1).and_then(|p| p.parse::<u16>().ok()).expect("a port")
    };
    {
        let mut refs: Vec<&mut ToneClient> = clients.iter_mut().collect();
        assert!(
            run_until(&mut refs, Instant::now() + Duration::from_secs(15), |cs| cs.iter().all(|c| c.heard.len() >= 25)),
            "both WebRTC participants connected and hear"
        );
    }

    // ffmpeg → relay → the plain port, from the offered address (a symmetric gateway).
    let relay = UdpSocket::bind("127.0.0.1:0").expect("bind loopback");
    relay.set_read_timeout(Some(Duration::from_millis(100))).expect("timeout");
    let relay_port = relay.local_addr().expect("bound").port();
    let out = rx.try_clone().expect("a clone");
    let relaying = std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        let end = Instant::now() + Duration::from_secs(30);
        // Ends when ffmpeg has been silent for a second after its first packet (or at the bound).
        let mut last: Option<Instant> = None;
        while Instant::now() < end && last.is_none_or(|t| t.elapsed() < Duration::from_secs(1)) {
            if let Ok(n) = relay.recv(&mut buf) {
                last = Some(Instant::now());
                let _ = out.send_to(&buf[..n], ("127.0.0.1", plain_port));
            }
        }
    });
    let mut cmd = Command::new(&ffmpeg);
    cmd.args(["-hide_banner", "-loglevel", "error", "-re", "-f", "lavfi", "-i", "sine=frequency=600:duration=14"])
        .args(["-c:a", "libopus", "-b:a", "48k", "-ac", "1", "-ar", "48000", "-payload_type", "111", "-f", "rtp"])
        .arg(format!("rtp://127.0.0.1:{relay_port}?rtcpport={relay_port}"));
    let sender = std::thread::spawn(move || run(&mut cmd, "ffmpeg", Duration::from_secs(30)));

    // Before any whisper, both hear the caller (so "not heard" below means the channel, not a dead line).
    {
        let mut refs: Vec<&mut ToneClient> = clients.iter_mut().collect();
        let deadline = Instant::now() + Duration::from_secs(8);
        let heard = |cs: &[&mut ToneClient]| {
            let since = Instant::now() - Duration::from_millis(1000);
            cs.iter().map(|c| c.hears(CALLER, since)).collect::<Vec<_>>()
        };
        // (Checked every half second: `hears` decodes what arrived.)
        while Instant::now() < deadline && !heard(&refs).iter().all(|&a| a > HEARD) {
            run_for(&mut refs, Duration::from_millis(500));
        }
        let levels = heard(&refs);
        assert!(levels.iter().all(|&a| a > HEARD), "both hear the caller before the whisper: {levels:?}");
    }

    let ids = [clients[inside].id, clients[outside].id];
    let (status, ch) =
        send(api, "POST", "/v1/rooms/line/whispers", Some(json!({"speakers": [caller], "listeners": [ids[inside]]})));
    assert_eq!(status, 201, "{ch}");
    let id = ch["id"].as_u64().expect("an id");
    {
        let mut refs: Vec<&mut ToneClient> = clients.iter_mut().collect();
        let opened = ws.wait_pumping(Duration::from_secs(5), &mut refs, |v| v["type"] == "whisper_opened");
        assert_eq!((opened["speakers"].clone(), opened["listeners"].clone()), (json!([caller]), json!([ids[inside]])));
        run_for(&mut refs, Duration::from_millis(500));
    }
    let since = Instant::now();
    {
        let mut refs: Vec<&mut ToneClient> = clients.iter_mut().collect();
        run_for(&mut refs, Duration::from_secs(3));
    }
    let hears = |who: usize, f: f32| clients[who].hears(f, since);
    eprintln!(
        "whisper open: in hears the caller {:.4}, out hears the caller {:.4}, out hears in {:.4}",
        hears(inside, CALLER),
        hears(outside, CALLER),
        hears(outside, 440.0)
    );
    assert!(hears(inside, CALLER) > HEARD, "the listener hears the caller: {}", hears(inside, CALLER));
    assert!(hears(inside, 880.0) > HEARD, "the listener hears the room: {}", hears(inside, 880.0));
    assert!(hears(outside, CALLER) < NOT_HEARD, "the outsider must not hear the caller: {}", hears(outside, CALLER));
    assert!(hears(outside, 440.0) > HEARD, "the outsider hears the room: {}", hears(outside, 440.0));

    // Closed: the outsider hears the caller again.
    let (s, closed) = send(api, "DELETE", &format!("/v1/rooms/line/whispers/{id}"), None);
    assert_eq!(s, 200, "{closed}");
    {
        let mut refs: Vec<&mut ToneClient> = clients.iter_mut().collect();
        let ev = ws.wait_pumping(Duration::from_secs(5), &mut refs, |v| v["type"] == "whisper_closed");
        assert_eq!(ev["reason"], "closed");
        run_for(&mut refs, Duration::from_millis(500));
    }
    let since = Instant::now();
    {
        let mut refs: Vec<&mut ToneClient> = clients.iter_mut().collect();
        run_for(&mut refs, Duration::from_secs(2));
    }
    let after = clients[outside].hears(CALLER, since);
    eprintln!("whisper closed: out hears the caller {after:.4}");
    assert!(after > HEARD, "the outsider hears the caller after the close: {after}");

    let _ = http(api, "DELETE", &format!("/v1/rooms/line/participants/{caller}"), None, b"");
    let _ = sender.join();
    let _ = relaying.join();
    rt.block_on(server.shutdown());
}
