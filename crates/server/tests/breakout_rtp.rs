//! A breakout of a plain RTP participant (a phone caller bridged by a
//! gateway): Debian's `ffmpeg` sends a 600 Hz tone as Opus over plain RTP,
//! relayed from the offered address as a symmetric gateway sends it, and the
//! room's mix for it, sent back to that address, is decoded here with
//! libopus. Real WebRTC tone peers: 440 and 330 Hz in room `a`, 880 Hz in
//! room `b`, and one in `c`, which holds one participant.
//!
//! Before the move the caller hears `a` (440, 330) and not `b` (880), and
//! `a` hears it. A move into the full `c` is refused (409 `room_full`) and
//! changes nothing: it still hears `a` and `a` still hears it. Moved to `b`:
//! it hears 880 and not 440 or 330, `b` hears it and `a` no longer does
//! (while `a`'s two still hear each other); both rooms are told (`left`
//! with reason `moved_room`, `joined`), and so is a webhook receiver. The
//! RTP session is the same: no new offer, the mix still comes from the same
//! server port with the same SSRC, sequence numbers one apart and
//! timestamps on the same tick grid across the move. Moved back with
//! `"speak": false`, it hears `a` and nobody hears it.

mod common;
mod ops_tools;

use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Ws, create_room, http, test_config};
use ops_tools::ensure_tool;
use serde_json::{Value, json};
use tutti_client::{JoinAs, ToneClient, run_until};

/// Goertzel amplitude above which a tone is heard (as in tests/whisper_rtp.rs).
const HEARD: f32 = 0.01;
/// ... and below which it is not.
const NOT_HEARD: f32 = 0.005;
/// The caller's tone.
const CALLER: f32 = 600.0;
/// Room `a`'s talkers, `b`'s, and the one filling `c`.
const A: [f32; 2] = [440.0, 330.0];
const B: f32 = 880.0;
const C: f32 = 1000.0;
const WAIT: Duration = Duration::from_secs(10);

/// What the caller's offered address receives: the mix, decoded as it arrives.
struct Mix {
    rx: UdpSocket,
    dec: opus::Decoder,
    /// Each packet: when it arrived, where from, its SSRC, sequence number and timestamp, the decoded PCM.
    frames: Vec<(Instant, SocketAddr, u32, u16, u32, Vec<f32>)>,
}

impl Mix {
    fn drain(&mut self) {
        let mut buf = [0u8; 1500];
        while let Ok((n, from)) = self.rx.recv_from(&mut buf) {
            let p = &buf[..n];
            if n <= 12 {
                continue;
            }
            let seq = u16::from_be_bytes([p[2], p[3]]);
            let ts = u32::from_be_bytes([p[4], p[5], p[6], p[7]]);
            let ssrc = u32::from_be_bytes([p[8], p[9], p[10], p[11]]);
            let mut out = [0f32; 960];
            let pcm = match self.dec.decode_float(&p[12..], &mut out, false) {
                Ok(k) => out[..k].to_vec(),
                Err(_) => Vec::new(),
            };
            self.frames.push((Instant::now(), from, ssrc, seq, ts, pcm));
        }
    }

    /// How loud `freq` is in what arrived after `since`.
    fn hears(&self, freq: f32, since: Instant) -> f32 {
        let pcm: Vec<f32> = self.frames.iter().filter(|f| f.0 >= since).flat_map(|f| f.5.iter().copied()).collect();
        tutti_mix::goertzel(&pcm, freq)
    }
}

/// Pumps the WebRTC peers and reads the caller's mix until `deadline` or `done`.
fn pump(
    clients: &mut [ToneClient],
    mix: &mut Mix,
    deadline: Instant,
    mut done: impl FnMut(&[&mut ToneClient], &Mix) -> bool,
) -> bool {
    let mut refs: Vec<&mut ToneClient> = clients.iter_mut().collect();
    run_until(&mut refs, deadline, |cs| {
        mix.drain();
        done(cs, mix)
    })
}

/// Ends ffmpeg (and the relay) however the test ends.
struct Caller {
    ffmpeg: Child,
    stop: Arc<AtomicBool>,
}

impl Drop for Caller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.ffmpeg.kill();
        let _ = self.ffmpeg.wait();
    }
}

fn post(api: SocketAddr, path: &str, body: Value) -> (u16, Value) {
    let r = http(api, "POST", path, Some("application/json"), body.to_string().as_bytes());
    (r.status, serde_json::from_str(&r.body).unwrap_or(Value::Null))
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

fn members(api: SocketAddr, room: &str) -> Vec<u64> {
    let r = common::room(api, room);
    r["participants"].as_array().into_iter().flatten().filter_map(|m| m["id"].as_u64()).collect()
}

#[test]
fn an_ffmpeg_caller_moved_to_another_room_hears_and_is_heard_only_there() {
    let ffmpeg = ensure_tool("ffmpeg", "ffmpeg");
    // A webhook receiver (axum, on loopback): every body it gets.
    let rt = tutti_server::api_runtime(2).expect("runtime");
    let hooked: Arc<Mutex<Vec<Value>>> = Arc::default();
    let app = {
        let hooked = hooked.clone();
        axum::Router::new().route(
            "/hook",
            axum::routing::post(move |body: axum::body::Bytes| {
                let hooked = hooked.clone();
                async move {
                    hooked.lock().expect("not poisoned").push(serde_json::from_slice(&body).unwrap_or(Value::Null));
                    axum::http::StatusCode::OK
                }
            }),
        )
    };
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
    let hooks = listener.local_addr().expect("addr");
    rt.spawn(async move { axum::serve(listener, app).await });
    let mut cfg = test_config();
    cfg.rtp_in.trusted = vec!["127.0.0.0/8".into()];
    cfg.webhooks.urls = vec![format!("http://{hooks}/hook")];
    cfg.webhooks.secret = "the breakout_rtp webhook secret, 32 bytes or more".to_owned();
    let server = rt.block_on(tutti_server::Server::start(cfg)).expect("server starts");
    let api = server.http_addr();
    create_room(api, "a");
    create_room(api, "b");
    let (s, body) = post(api, "/v1/rooms", json!({ "id": "c", "max_participants": 1 }));
    assert_eq!(s, 201, "{body}");
    let mut watch_a = Ws::connect(api, "a");
    let mut watch_b = Ws::connect(api, "b");
    // 0, 1: room a; 2: room b; 3: room c (full with it).
    let mut clients: Vec<ToneClient> = [("a", A[0]), ("a", A[1]), ("b", B), ("c", C)]
        .into_iter()
        .map(|(room, f)| ToneClient::join(api, room, f, JoinAs::Whip).expect("a WebRTC participant joins"))
        .collect();

    // The caller: a plain RTP participant of `a` whose offered address is `rx`.
    let rx = UdpSocket::bind("127.0.0.1:0").expect("bind loopback");
    rx.set_nonblocking(true).expect("nonblocking");
    let offer = format!(
        "v=0\r\no=gw 1 1 IN IP4 127.0.0.1\r\ns=call\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
         m=audio {} RTP/AVP 111\r\na=rtpmap:111 opus/48000/2\r\n",
        rx.local_addr().expect("bound").port()
    );
    let r = http(api, "POST", "/v1/rooms/a/participants", Some("application/sdp"), offer.as_bytes());
    assert_eq!(r.status, 201, "{}", r.body);
    let caller: u64 = r.header("location").and_then(|l| l.rsplit('/').next()?.parse().ok()).expect("an id");
    let plain_port = {
        let line = r.body.lines().find(|l| l.starts_with("m=audio ")).expect("an m=audio line");
        line.split_whitespace().nth(1).and_then(|p| p.parse::<u16>().ok()).expect("a port")
    };
    let out = rx.try_clone().expect("a clone");
    let mut mix =
        Mix { rx, dec: opus::Decoder::new(48_000, opus::Channels::Mono).expect("an Opus decoder"), frames: Vec::new() };

    // ffmpeg → relay → the plain port, from the offered address (a symmetric gateway).
    let relay = UdpSocket::bind("127.0.0.1:0").expect("bind loopback");
    relay.set_read_timeout(Some(Duration::from_millis(100))).expect("timeout");
    let relay_port = relay.local_addr().expect("bound").port();
    let stop = Arc::new(AtomicBool::new(false));
    let relaying = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 1500];
            let end = Instant::now() + Duration::from_secs(60);
            while Instant::now() < end && !stop.load(Ordering::Relaxed) {
                if let Ok(n) = relay.recv(&mut buf) {
                    let _ = out.send_to(&buf[..n], ("127.0.0.1", plain_port));
                }
            }
        })
    };
    let child = Command::new(&ffmpeg)
        .args(["-hide_banner", "-loglevel", "error", "-re", "-f", "lavfi", "-i", "sine=frequency=600:duration=50"])
        .args(["-c:a", "libopus", "-b:a", "48k", "-ac", "1", "-ar", "48000", "-payload_type", "111", "-f", "rtp"])
        .arg(format!("rtp://127.0.0.1:{relay_port}?rtcpport={relay_port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("ffmpeg starts");
    let guard = Caller { ffmpeg: child, stop };

    // Everyone up: a's talkers hear the caller, the caller hears a.
    let up = pump(&mut clients, &mut mix, Instant::now() + Duration::from_secs(20), |cs, mix| {
        let since = Instant::now() - Duration::from_millis(1000);
        cs[..2].iter().all(|c| c.hears(CALLER, since) > HEARD)
            && A.iter().all(|&f| mix.hears(f, since) > HEARD)
            && cs[2].connected
            && cs[3].connected
    });
    let since = Instant::now() - Duration::from_millis(1000);
    assert!(
        up,
        "within 20 s: a's talkers hear the caller ({:?}) and the caller hears them ({:?}; {} packets)",
        clients.iter().map(|c| c.hears(CALLER, since)).collect::<Vec<_>>(),
        A.iter().map(|&f| mix.hears(f, since)).collect::<Vec<_>>(),
        mix.frames.len()
    );

    // What each one hears over the next `window`.
    let listen = |clients: &mut [ToneClient], mix: &mut Mix, window: Duration, what: &str| {
        let since = Instant::now();
        pump(clients, mix, since + window, |_, _| false);
        let caller_hears: Vec<f32> = [A[0], A[1], B].iter().map(|&f| mix.hears(f, since)).collect();
        let hear_caller: Vec<f32> = clients.iter().map(|c| c.hears(CALLER, since)).collect();
        eprintln!(
            "{what}: the caller hears 440/330/880 at {caller_hears:.4?}; a, a, b, c hear it at {hear_caller:.4?}"
        );
        (caller_hears, hear_caller)
    };
    let (hears, heard_by) = listen(&mut clients, &mut mix, Duration::from_secs(2), "in a");
    assert!(hears[0] > HEARD && hears[1] > HEARD, "the caller hears a's talkers: {hears:?}");
    assert!(hears[2] < NOT_HEARD, "the caller must not hear b's talker: {hears:?}");
    assert!(heard_by[0] > HEARD && heard_by[1] > HEARD, "a hears the caller: {heard_by:?}");
    assert!(heard_by[2] < NOT_HEARD && heard_by[3] < NOT_HEARD, "b and c must not hear the caller: {heard_by:?}");

    // Into the full room: refused, nothing changes.
    let (s, body) = post(api, &format!("/v1/rooms/a/participants/{caller}/move"), json!({ "to": "c" }));
    assert_eq!((s, body["code"].as_str()), (409, Some("room_full")), "{body}");
    assert!(members(api, "a").contains(&caller) && members(api, "c").len() == 1);
    let (hears, heard_by) = listen(&mut clients, &mut mix, Duration::from_secs(2), "after a refused move");
    assert!(hears[0] > HEARD && hears[1] > HEARD, "the caller still hears a: {hears:?}");
    assert!(hears[2] < NOT_HEARD, "the caller must not hear b's talker: {hears:?}");
    assert!(heard_by[0] > HEARD && heard_by[1] > HEARD, "a still hears the caller: {heard_by:?}");
    assert!(heard_by[2] < NOT_HEARD && heard_by[3] < NOT_HEARD, "b and c must not hear the caller: {heard_by:?}");

    // The move a → b: no new offer; the same id.
    let (s, body) = post(api, &format!("/v1/rooms/a/participants/{caller}/move"), json!({ "to": "b" }));
    assert_eq!(s, 200, "{body}");
    assert_eq!(body, json!({ "id": caller, "from": "a", "to": "b", "speak": true }));
    let moved_at = Instant::now();
    // How soon it hears b's talker (over a 200 ms window, pumped in 20 ms steps).
    let mut took = None;
    pump(&mut clients, &mut mix, moved_at + Duration::from_secs(3), |_, mix| {
        if mix.hears(B, Instant::now() - Duration::from_millis(200)) > HEARD {
            took = Some(moved_at.elapsed());
        }
        took.is_some()
    });
    let took = took.expect("the caller hears b's talker within 3 s of the move");
    eprintln!("the caller heard b's talker {took:?} after the move answered");
    {
        let mut refs: Vec<&mut ToneClient> = clients.iter_mut().collect();
        let left = watch_a.wait_pumping(WAIT, &mut refs, |m| m["type"] == "left" && m["id"] == caller);
        assert_eq!(left["reason"], "moved_room", "{left}");
        watch_b.wait_pumping(WAIT, &mut refs, |m| m["type"] == "joined" && m["id"] == caller);
    }
    // Webhooks likewise: left `a` (moved_room), joined `b`, the same participant.
    let deadline = Instant::now() + WAIT;
    let caller_id = caller.to_string(); // (a string in webhook bodies)
    let moved = loop {
        let mine: Vec<Value> = hooked
            .lock()
            .expect("not poisoned")
            .iter()
            .filter(|e| e["participant"]["id"] == caller_id.as_str())
            .cloned()
            .collect();
        if mine.len() >= 3 || Instant::now() > deadline {
            break mine;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // (Each room's webhooks go out on their own: `b`'s joined may come before `a`'s left.)
    let mut seen: Vec<(&str, &str, &str)> =
        moved.iter().map(|e| (text(&e["event"]), text(&e["room"]), text(&e["reason"]))).collect();
    seen.sort_unstable();
    assert_eq!(
        seen,
        [("participant_joined", "a", ""), ("participant_joined", "b", ""), ("participant_left", "a", "moved_room")],
        "{moved:?}"
    );
    assert!(members(api, "b").contains(&caller), "listed in b with the same id");
    assert!(!members(api, "a").contains(&caller));
    // From 500 ms after the move on.
    pump(&mut clients, &mut mix, moved_at + Duration::from_millis(500), |_, _| false);
    let (hears, heard_by) = listen(&mut clients, &mut mix, Duration::from_secs(2), "in b");
    assert!(hears[2] > HEARD, "the caller hears b's talker: {hears:?}");
    assert!(hears[0] < NOT_HEARD && hears[1] < NOT_HEARD, "the caller must no longer hear a: {hears:?}");
    assert!(heard_by[2] > HEARD, "b hears the caller: {heard_by:?}");
    assert!(heard_by[0] < NOT_HEARD && heard_by[1] < NOT_HEARD, "a must no longer hear the caller: {heard_by:?}");
    assert!(heard_by[3] < NOT_HEARD, "c must not hear the caller: {heard_by:?}");
    let since = Instant::now() - Duration::from_secs(2);
    assert!(clients[0].hears(A[1], since) > HEARD, "a goes on: its talkers hear each other");

    // One RTP session throughout: the same server port, SSRC, and sequence numbers one apart.
    assert!(mix.frames.iter().all(|f| f.1.port() == plain_port), "the mix always comes from the plain RTP port");
    let ssrc = mix.frames[0].2;
    assert!(mix.frames.iter().all(|f| f.2 == ssrc), "one SSRC before and after the move");
    let around: Vec<(u16, u32)> = mix
        .frames
        .iter()
        .filter(|f| f.0 + Duration::from_millis(500) >= moved_at && f.0 <= moved_at + Duration::from_millis(500))
        .map(|f| (f.3, f.4))
        .collect();
    assert!(around.len() > 30, "the mix went on across the move: {} packets", around.len());
    assert!(around.windows(2).all(|w| w[1].0 == w[0].0.wrapping_add(1)), "sequence numbers one apart: {around:?}");
    // Both rooms tick on the one clock: the timestamps go on by whole ticks
    // from the same offset (a tick the loaded clock skipped is a gap of a few).
    let steps: Vec<u32> = around.windows(2).map(|w| w[1].1.wrapping_sub(w[0].1)).collect();
    assert!(steps.iter().all(|&d| d > 0 && d % 960 == 0 && d <= 960 * 50), "timestamps step by ticks: {steps:?}");

    // Back to `a` as a listener (the move's `speak`): it hears a, nobody hears it.
    let (s, body) = post(api, &format!("/v1/rooms/b/participants/{caller}/move"), json!({ "to": "a", "speak": false }));
    assert_eq!((s, body["speak"].as_bool()), (200, Some(false)), "{body}");
    let back_at = Instant::now();
    pump(&mut clients, &mut mix, back_at + Duration::from_millis(500), |_, _| false);
    let (hears, heard_by) = listen(&mut clients, &mut mix, Duration::from_secs(2), "back in a, listening");
    assert!(hears[0] > HEARD && hears[1] > HEARD, "the caller hears a again: {hears:?}");
    assert!(hears[2] < NOT_HEARD, "the caller must no longer hear b: {hears:?}");
    assert!(heard_by.iter().all(|&h| h < NOT_HEARD), "nobody may hear a listener: {heard_by:?}");

    let r = http(api, "DELETE", &format!("/v1/rooms/a/participants/{caller}"), None, b"");
    assert_eq!(r.status, 204, "{}", r.body);
    drop(guard);
    let _ = relaying.join();
    rt.block_on(server.shutdown());
}
