//! Recording, webhooks and RTP out on a running server, with real WebRTC
//! peers (`ToneClient`s, each its own tone), a real HTTP webhook receiver
//! (axum, in the test), Debian's ffmpeg receiving the RTP, and the
//! recorded file decoded with libopus.

mod common;
mod ops_tools;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{Ws, create_room, http, start_with, test_config};
use ops_tools::{decode_ogg, ensure_tool, ffprobe_reads_opus, onset_of, run, temp_dir};
use tutti_client::{JoinAs, ToneClient, run_until};

const JSON: Option<&str> = Some("application/json");

fn json(r: &tutti_client::Response) -> serde_json::Value {
    serde_json::from_str(&r.body).unwrap_or(serde_json::Value::Null)
}

/// Joins a client per tone and pumps them until each sent `frames` frames (bounded: 30 s).
fn talk(api: SocketAddr, room: &str, freqs: &[f32], frames: u64) -> Vec<ToneClient> {
    let mut clients: Vec<ToneClient> =
        freqs.iter().map(|&f| ToneClient::join(api, room, f, JoinAs::Whip).expect("join")).collect();
    let mut refs: Vec<&mut ToneClient> = clients.iter_mut().collect();
    let done = run_until(&mut refs, Instant::now() + Duration::from_secs(30), |cs| {
        cs.iter().all(|c| c.sent >= frames && c.heard.len() as u64 >= frames / 2)
    });
    assert!(
        done,
        "every client connected, sent {frames} frames and heard: {:?}",
        refs.iter().map(|c| c.heard.len()).collect::<Vec<_>>()
    );
    clients
}

#[test]
fn a_recorded_room_decodes_to_every_talkers_tone_and_errors_have_codes() {
    let dir = temp_dir("live-rec");
    let mut cfg = test_config();
    cfg.recording.dir = dir.join("files").display().to_string();
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "rec");

    // Errors first: unknown room, not recording.
    let r = http(api, "POST", "/v1/rooms/nope/recording", None, b"");
    assert_eq!((r.status, r.code()), (404, "room_not_found".into()), "{}", r.body);
    let r = http(api, "DELETE", "/v1/rooms/rec/recording", None, b"");
    assert_eq!((r.status, r.code()), (404, "recording_not_found".into()), "{}", r.body);
    assert_eq!(json(&http(api, "GET", "/v1/rooms/rec/recording", None, b""))["active"], false);

    let mut ws = Ws::connect(api, "rec");
    let r = http(api, "POST", "/v1/rooms/rec/recording", None, b"");
    assert_eq!(r.status, 201, "{}", r.body);
    let file = json(&r)["file"].as_str().expect("a file name").to_owned();
    assert!(file.starts_with("rec-") && file.ends_with(".opus"), "{file}");
    let r = http(api, "POST", "/v1/rooms/rec/recording", None, b"");
    assert_eq!((r.status, r.code()), (409, "recording_active".into()), "{}", r.body);
    let started = ws.wait_for(Duration::from_secs(5), |v| v["type"] == "recording_started");
    assert_eq!(started["file"], file.as_str());

    let freqs = [440.0f32, 660.0, 880.0];
    let mut clients = talk(api, "rec", &freqs, 200);
    let state = json(&http(api, "GET", "/v1/rooms/rec/recording", None, b""));
    assert_eq!(state["active"], true, "{state}");
    assert!(state["frames"].as_u64().unwrap_or(0) > 50, "frames are written while the call runs: {state}");

    let r = http(api, "DELETE", "/v1/rooms/rec/recording", None, b"");
    assert_eq!(r.status, 200, "{}", r.body);
    let done = json(&r);
    assert_eq!(done["reason"], "stopped", "{done}");
    // The server's directory is nobody's business over the API: the file name only.
    assert!(done.get("path").is_none(), "no server path in the answer: {done}");
    assert!(state.get("path").is_none(), "no server path in the state: {state}");
    let path = dir.join("files").join(done["file"].as_str().expect("a file name"));
    let bytes = done["bytes"].as_u64().expect("bytes");
    assert_eq!(std::fs::metadata(&path).expect("the file").len(), bytes, "the reported size is the file's");
    assert!(done["duration_seconds"].as_f64().unwrap_or(0.0) > 2.0, "{done}");
    let finished = ws.wait_for(Duration::from_secs(5), |v| v["type"] == "recording_finished");
    assert_eq!((finished["file"].as_str(), finished["reason"].as_str()), (Some(file.as_str()), Some("stopped")));
    let r = http(api, "DELETE", "/v1/rooms/rec/recording", None, b"");
    assert_eq!((r.status, r.code()), (404, "recording_not_found".into()), "{}", r.body);

    // The file: every talker's tone, and not a tone nobody played.
    let pcm = decode_ogg(&path);
    assert!(pcm.len() > 2 * 48_000, "at least 2 s recorded: {} samples", pcm.len());
    let last = &pcm[pcm.len() - 48_000..];
    for f in freqs {
        let a = tutti_mix::goertzel(last, f);
        assert!(a > 0.05, "{f} Hz is in the recording's last second at only {a}");
    }
    let stray = tutti_mix::goertzel(last, 550.0);
    assert!(stray < 0.01, "550 Hz (nobody) at {stray}");
    let probe = run(
        std::process::Command::new(ensure_tool("ffprobe", "ffmpeg")).arg("-hide_banner").arg(&path),
        "ffprobe",
        Duration::from_secs(20),
    )
    .expect("ffprobe reads the file");
    assert!(probe.contains("Audio: opus"), "{probe}");

    // A directory that cannot be made (under a regular file): the recording
    // stops with an event and a metric, the call goes on.
    let r = http(api, "POST", "/v1/rooms", JSON, br#"{"id":"auto","record":true}"#);
    assert_eq!(r.status, 201, "record at creation: {}", r.body);
    let r = http(api, "DELETE", "/v1/rooms/auto/recording", None, b"");
    assert_eq!(r.status, 200, "a room created with record: true records: {}", r.body);
    rt.block_on(server.shutdown());

    let blocker = dir.join("not-a-dir");
    std::fs::write(&blocker, b"x").expect("a file");
    let mut cfg = test_config();
    cfg.recording.dir = blocker.join("sub").display().to_string();
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "disk");
    let mut ws = Ws::connect(api, "disk");
    let mut clients2 = talk(api, "disk", &[500.0, 700.0], 25);
    let r = http(api, "POST", "/v1/rooms/disk/recording", None, b"");
    assert_eq!(r.status, 201, "{}", r.body);
    let stopped = ws.wait_for(Duration::from_secs(5), |v| v["type"] == "recording_stopped");
    assert_eq!(stopped["reason"], "error", "{stopped}");
    assert!(stopped["error"].as_str().unwrap_or("").contains("cannot create"), "{stopped}");
    // The call goes on: both still hear each other after the failure.
    let since = Instant::now();
    let mut refs: Vec<&mut ToneClient> = clients2.iter_mut().collect();
    tutti_client::run_for(&mut refs, Duration::from_secs(1));
    assert!(clients2[0].hears(700.0, since) > 0.05 && clients2[1].hears(500.0, since) > 0.05);
    // The failure is counted (reaped by housekeeping within 250 ms).
    let metrics = server.metrics_addr().expect("metrics on");
    let t = Instant::now();
    loop {
        let m = common::scrape(metrics);
        let failed = m.get("tutti_recordings_finished_total{reason=\"error\"}").copied().unwrap_or(0.0);
        if failed >= 1.0 && m.contains_key("tutti_recordings_active") {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "the failure is counted: {m:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = http(api, "DELETE", "/v1/rooms/disk/recording", None, b"");
    assert_eq!((r.status, r.code()), (404, "recording_not_found".into()), "an ended recording is gone: {}", r.body);
    for c in clients.iter_mut().chain(clients2.iter_mut()) {
        c.close();
    }
    rt.block_on(server.shutdown());

    // With tokens: starting and stopping need an admin token for the room.
    // Recording disabled, RTP out not allowed anywhere: clear errors, at creation too.
    let mut cfg = test_config();
    cfg.auth.disabled = false;
    cfg.auth.secret = "an-outputs-test-secret-of-32-bytes-or-more".to_owned();
    cfg.recording.enabled = false;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let mint = |g: tutti_server::auth::Grant| server.mint_token(&g, Duration::from_secs(600)).expect("a token");
    let (admin, alice) =
        (mint(tutti_server::auth::Grant::admin("ops")), mint(tutti_server::auth::Grant::participant("off", "alice")));
    let call = |token: Option<&str>, method: &str, path: &str, body: &[u8]| {
        let who = tutti_client::Requester { token, from: None };
        tutti_client::request_as(api, &who, method, path, if body.is_empty() { None } else { JSON }, body)
            .expect("the API answers")
    };
    assert_eq!(call(Some(&admin), "POST", "/v1/rooms", br#"{"id":"off"}"#).status, 201);
    let r = call(None, "POST", "/v1/rooms/off/recording", b"");
    assert_eq!((r.status, r.code()), (401, "token_missing".into()), "{}", r.body);
    let r = call(Some(&alice), "POST", "/v1/rooms/off/recording", b"");
    assert_eq!((r.status, r.code()), (403, "forbidden".into()), "a participant may not record: {}", r.body);
    let r = call(Some(&alice), "GET", "/v1/rooms/off/recording", b"");
    assert_eq!(r.status, 200, "a participant may look: {}", r.body);
    let r = call(Some(&admin), "POST", "/v1/rooms/off/recording", b"");
    assert_eq!((r.status, r.code()), (403, "recording_disabled".into()), "{}", r.body);
    let r = call(Some(&admin), "POST", "/v1/rooms", br#"{"id":"off2","record":true}"#);
    assert_eq!((r.status, r.code()), (403, "recording_disabled".into()), "{}", r.body);
    let r = call(Some(&alice), "POST", "/v1/rooms/off/rtp_out", br#"{"address":"127.0.0.1:5004"}"#);
    assert_eq!((r.status, r.code()), (403, "forbidden".into()), "{}", r.body);
    let r = call(Some(&admin), "POST", "/v1/rooms/off/rtp_out", br#"{"address":"127.0.0.1:5004"}"#);
    assert_eq!((r.status, r.code()), (403, "rtp_out_disabled".into()), "{}", r.body);
    let r = call(Some(&admin), "GET", "/v1/rooms/nope/rtp_out", b"");
    assert_eq!((r.status, r.code()), (404, "room_not_found".into()), "{}", r.body);
    rt.block_on(server.shutdown());
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the test's receiver got: (path, Authorization, body).
type Received = Arc<Mutex<Vec<(String, String, Vec<u8>)>>>;

/// A webhook receiver on loopback: `/ok` answers 200, `/fail` 500, `/hang`
/// never, `/slow` 200 after 700 ms (and records the event only then).
fn receiver(rt: &tokio::runtime::Runtime) -> (SocketAddr, Received) {
    use axum::http::{HeaderMap, StatusCode};
    let got: Received = Arc::default();
    let record = |got: Received, path: &'static str| {
        move |headers: HeaderMap, body: axum::body::Bytes| {
            let got = got.clone();
            async move {
                let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                if path == "/slow" {
                    tokio::time::sleep(Duration::from_millis(700)).await;
                }
                got.lock().expect("not poisoned").push((path.to_owned(), auth, body.to_vec()));
                match path {
                    "/fail" => StatusCode::INTERNAL_SERVER_ERROR,
                    "/hang" => {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        StatusCode::OK
                    }
                    _ => StatusCode::OK,
                }
            }
        }
    };
    let app = axum::Router::new()
        .route("/ok", axum::routing::post(record(got.clone(), "/ok")))
        .route("/fail", axum::routing::post(record(got.clone(), "/fail")))
        .route("/hang", axum::routing::post(record(got.clone(), "/hang")))
        .route("/slow", axum::routing::post(record(got.clone(), "/slow")));
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
    let addr = listener.local_addr().expect("addr");
    rt.spawn(async move { axum::serve(listener, app).await });
    (addr, got)
}

#[test]
fn webhooks_reach_a_real_receiver_signed_while_a_hanging_and_a_failing_one_affect_nothing() {
    let secret = "a-webhook-test-secret-of-32-bytes-or-more";
    let mut cfg = test_config();
    cfg.auth.secret = secret.to_owned();
    cfg.recording.dir = temp_dir("live-hooks").display().to_string();
    let rt = tutti_server::api_runtime(2).expect("runtime");
    let (hooks, got) = receiver(&rt);
    cfg.webhooks.urls =
        vec![format!("http://{hooks}/hang"), format!("http://{hooks}/fail"), format!("http://{hooks}/ok")];
    cfg.webhooks.timeout_seconds = 1.0;
    cfg.webhooks.attempts = 2;
    cfg.webhooks.backoff_seconds = 0.1;
    let server = rt.block_on(tutti_server::Server::start(cfg)).expect("server starts");
    let api = server.http_addr();

    let t = Instant::now();
    create_room(api, "hooks");
    let r = http(api, "POST", "/v1/rooms/hooks/recording", None, b"");
    assert_eq!(r.status, 201, "{}", r.body);
    let mut clients = talk(api, "hooks", &[440.0, 880.0], 60);
    let second = clients[1].location.clone();
    let r = http(api, "DELETE", &second, None, b"");
    assert_eq!(r.status, 204, "{}", r.body);
    let r = http(api, "DELETE", "/v1/rooms/hooks/recording", None, b"");
    assert_eq!(r.status, 200, "{}", r.body);
    let r = http(api, "DELETE", "/v1/rooms/hooks", None, b"");
    assert_eq!(r.status, 204, "{}", r.body);
    assert!(t.elapsed() < Duration::from_secs(15), "the API was not slowed: {:?}", t.elapsed());

    // Every event reaches /ok, in order, signed; bounded wait.
    let want = [
        "room_started",
        "participant_joined",
        "participant_joined",
        "participant_left",
        "recording_finished",
        "participant_left",
        "room_finished",
    ];
    let deadline = Instant::now() + Duration::from_secs(10);
    let events = loop {
        let ok: Vec<serde_json::Value> = got
            .lock()
            .expect("not poisoned")
            .iter()
            .filter(|(p, _, _)| p == "/ok")
            .map(|(_, auth, body)| {
                let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs();
                let claims = tutti_server::outputs::webhook::verify(secret.as_bytes(), auth, body, now);
                assert!(claims.is_ok(), "the signature verifies with the secret: {claims:?}");
                assert!(
                    tutti_server::outputs::webhook::verify(b"another-secret-another-secret-xx", auth, body, now)
                        .is_err()
                );
                serde_json::from_slice(body).expect("a JSON body")
            })
            .collect();
        if ok.len() >= want.len() || Instant::now() > deadline {
            break ok;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let names: Vec<&str> = events.iter().map(|e| e["event"].as_str().unwrap_or("")).collect();
    // recording_finished comes from the writer thread, the others from the room's events: only
    // their own order is fixed.
    let mut sorted = names.clone();
    sorted.sort_unstable();
    let mut expected = want.to_vec();
    expected.sort_unstable();
    assert_eq!(sorted, expected, "{events:#?}");
    assert_eq!((names[0], names[names.len() - 1]), ("room_started", "room_finished"), "{names:?}");
    let room_events: Vec<&serde_json::Value> = events.iter().filter(|e| e["event"] != "recording_finished").collect();
    assert_eq!(room_events[3]["reason"], "left", "{room_events:?}");
    assert_eq!(room_events[4]["reason"], "room_closed", "{room_events:?}");
    assert_eq!(room_events[3]["participant"]["id"].as_str(), second.rsplit('/').next(), "the one who left");
    let rec = events.iter().find(|e| e["event"] == "recording_finished").expect("recording_finished");
    assert_eq!(rec["recording"]["reason"], "stopped");
    assert!(rec["recording"]["bytes"].as_u64().unwrap_or(0) > 0, "{rec}");
    assert!(events.iter().all(|e| e["room"] == "hooks"));
    let ids: std::collections::BTreeSet<&str> =
        room_events[1..3].iter().map(|e| e["participant"]["id"].as_str().unwrap_or("")).collect();
    assert_eq!(ids.len(), 2, "two participants: {ids:?}");

    // The failing receiver was tried (and retried); the hanging one timed out; neither held /ok up.
    let stats = server.webhook_stats().expect("webhooks on");
    let tries = |p: &str| got.lock().expect("not poisoned").iter().filter(|(q, _, _)| q == p).count();
    assert!(tries("/fail") >= 2, "the 500 receiver was retried: {}", tries("/fail"));
    assert!(tries("/hang") >= 1);
    assert!(stats.sent >= want.len() as u64, "{stats:?}");
    for c in &mut clients {
        c.close();
    }
    rt.block_on(server.shutdown());
}

/// The events a receiver path has got so far, by name.
fn events_at(got: &Received, path: &str) -> Vec<String> {
    got.lock()
        .expect("not poisoned")
        .iter()
        .filter(|(p, _, _)| p == path)
        .filter_map(|(_, _, body)| serde_json::from_slice::<serde_json::Value>(body).ok())
        .map(|e| e["event"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn a_shutdown_delivers_the_webhooks_it_causes_and_a_hanging_receiver_only_bounds_the_wait() {
    let mut cfg = test_config();
    cfg.auth.secret = "a-webhook-test-secret-of-32-bytes-or-more".to_owned();
    let rt = tutti_server::api_runtime(2).expect("runtime");
    let (hooks, got) = receiver(&rt);
    cfg.webhooks.urls = vec![format!("http://{hooks}/slow"), format!("http://{hooks}/hang")];
    cfg.webhooks.timeout_seconds = 60.0;
    cfg.webhooks.attempts = 1;
    let server = rt.block_on(tutti_server::Server::start(cfg)).expect("server starts");
    let api = server.http_addr();
    create_room(api, "bye");
    let mut clients = talk(api, "bye", &[440.0], 10);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !events_at(&got, "/slow").iter().any(|e| e == "participant_joined") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(events_at(&got, "/slow"), ["room_started", "participant_joined"]);

    // The shutdown closes the room: its participant_left and room_finished
    // (700 ms each at /slow) are delivered before shutdown() returns, as the
    // process exits then. /hang never answers: it costs the wait's bound, no more.
    let t = Instant::now();
    rt.block_on(server.shutdown());
    let took = t.elapsed();
    assert_eq!(
        events_at(&got, "/slow"),
        ["room_started", "participant_joined", "participant_left", "room_finished"],
        "delivered by the time the shutdown returned"
    );
    // It waits for /hang's queue as long as shutdown_timeout_seconds allows (5 s, less 1 s kept for the rest).
    assert!(took >= Duration::from_secs(3), "it waited for /hang's queue: {took:?}");
    assert!(took < Duration::from_secs(6), "but only within the shutdown timeout: {took:?}");
    for c in &mut clients {
        c.close();
    }
}

/// An even loopback UDP port with the next one free too (ffmpeg binds RTP and RTCP).
fn free_port_pair() -> u16 {
    for _ in 0..50 {
        let a = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let port = a.local_addr().expect("addr").port();
        if port.is_multiple_of(2) && port < 65534 && std::net::UdpSocket::bind(("127.0.0.1", port + 1)).is_ok() {
            return port;
        }
    }
    panic!("no free even port pair on loopback in 50 tries");
}

#[test]
fn ffmpeg_receives_a_live_rooms_mix_through_rtp_out() {
    let ffmpeg = ensure_tool("ffmpeg", "ffmpeg");
    let mut cfg = test_config();
    cfg.rtp_out.allowed = vec!["127.0.0.0/8".into()];
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "out");

    let r = http(api, "POST", "/v1/rooms/out/rtp_out", JSON, br#"{"address":"10.0.0.1:5004"}"#);
    assert_eq!((r.status, r.code()), (403, "rtp_out_forbidden".into()), "{}", r.body);
    let r = http(api, "POST", "/v1/rooms/out/rtp_out", JSON, br#"{"address":"nowhere"}"#);
    assert_eq!((r.status, r.code()), (400, "bad_address".into()), "{}", r.body);
    let r = http(api, "DELETE", "/v1/rooms/out/rtp_out", None, b"");
    assert_eq!((r.status, r.code()), (404, "rtp_out_not_found".into()), "{}", r.body);

    let port = free_port_pair();
    let body = serde_json::json!({ "address": format!("127.0.0.1:{port}") }).to_string();
    let r = http(api, "POST", "/v1/rooms/out/rtp_out", JSON, body.as_bytes());
    assert_eq!(r.status, 201, "{}", r.body);
    let sdp = json(&r)["sdp"].as_str().expect("an SDP").to_owned();
    assert!(sdp.contains(&format!("m=audio {port} RTP/AVP 111")) && sdp.contains("opus/48000/2"), "{sdp}");
    let r = http(api, "POST", "/v1/rooms/out/rtp_out", JSON, body.as_bytes());
    assert_eq!((r.status, r.code()), (409, "rtp_out_active".into()), "{}", r.body);

    let dir = temp_dir("live-rtp-out");
    let sdp_path = dir.join("out.sdp");
    std::fs::write(&sdp_path, &sdp).expect("write the SDP");
    let wav = dir.join("out.wav");
    let mut cmd = std::process::Command::new(&ffmpeg);
    cmd.args(["-hide_banner", "-nostdin", "-protocol_whitelist", "file,udp,rtp", "-i"])
        .arg(&sdp_path)
        .args(["-t", "3", "-ac", "1", "-ar", "48000", "-y"])
        .arg(&wav);
    let ffmpeg_run = std::thread::spawn(move || run(&mut cmd, "ffmpeg", Duration::from_secs(40)));
    let mut clients = talk(api, "out", &[440.0, 880.0], 250);
    let out = ffmpeg_run.join().expect("the ffmpeg thread");
    if let Err(e) = out {
        panic!("ffmpeg: {e}");
    }
    let state = json(&http(api, "GET", "/v1/rooms/out/rtp_out", None, b""));
    assert!(state["packets"].as_u64().unwrap_or(0) > 100, "{state}");
    let r = http(api, "DELETE", "/v1/rooms/out/rtp_out", None, b"");
    assert_eq!(r.status, 200, "{}", r.body);

    let mut reader = hound::WavReader::open(&wav).expect("ffmpeg wrote a WAV");
    let pcm: Vec<f32> = reader.samples::<i16>().map(|s| f32::from(s.unwrap_or(0)) / 32768.0).collect();
    assert!(pcm.len() > 48_000 * 2, "ffmpeg decoded {} samples", pcm.len());
    let tail = &pcm[pcm.len() - 48_000..];
    let (a440, a880, stray) =
        (tutti_mix::goertzel(tail, 440.0), tutti_mix::goertzel(tail, 880.0), tutti_mix::goertzel(tail, 550.0));
    eprintln!("ffmpeg heard 440 Hz {a440:.3}, 880 Hz {a880:.3}, 550 Hz {stray:.3}");
    assert!(a440 > 0.05 && a880 > 0.05 && stray < 0.01, "440 {a440} / 880 {a880} / 550 {stray}");
    for c in &mut clients {
        c.close();
    }
    rt.block_on(server.shutdown());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A recording per speaker, with real peers: alice talks from the start,
/// bob a second later; the room's mix and one file per speaker come out,
/// each read by Debian's `ffprobe`, and the sidecar's offsets put each
/// speaker's first voiced frame where the mix has it (±40 ms).
#[test]
fn a_per_speaker_recording_leaves_a_file_per_speaker_placed_on_the_rooms_timeline() {
    let dir = temp_dir("tracks");
    let mut cfg = test_config();
    cfg.recording.dir = dir.display().to_string();
    let (_rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "pod");
    let mut alice = ToneClient::join(api, "pod", 440.0, JoinAs::Whip).expect("alice");
    let mut bob = ToneClient::join(api, "pod", 660.0, JoinAs::Whip).expect("bob");
    bob.talking = false;
    let up = run_until(&mut [&mut alice, &mut bob], Instant::now() + Duration::from_secs(20), |cs| {
        cs.iter().all(|c| c.heard.len() > 10)
    });
    assert!(up, "both connected");

    let r = http(api, "POST", "/v1/rooms/pod/recording", Some("application/json"), br#"{"per_speaker": ["x"]}"#);
    assert_eq!((r.status, r.code()), (400, "bad_value".into()), "a list of participant ids: {}", r.body);
    let r = http(api, "POST", "/v1/rooms/pod/recording", Some("application/json"), br#"{"per_speaker": "yes"}"#);
    assert_eq!((r.status, r.code()), (400, "bad_value".into()), "{}", r.body);
    let r = http(api, "POST", "/v1/rooms/pod/recording", Some("application/json"), br#"{"per_speaker": true}"#);
    assert_eq!(r.status, 201, "{}", r.body);
    tutti_client::run_for(&mut [&mut alice, &mut bob], Duration::from_millis(1000));
    bob.talking = true;
    tutti_client::run_for(&mut [&mut alice, &mut bob], Duration::from_millis(1500));
    let r = http(api, "DELETE", "/v1/rooms/pod/recording", None, b"");
    assert_eq!(r.status, 200, "{}", r.body);
    let stopped = json(&r);
    let sidecar_name = stopped["sidecar"].as_str().unwrap_or_else(|| panic!("a sidecar: {stopped}"));
    let sidecar: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join(sidecar_name)).expect("the sidecar")).expect("JSON");
    let tracks = sidecar["tracks"].as_array().cloned().unwrap_or_default();
    assert_eq!(tracks.len(), 2, "a file per speaker: {sidecar}");

    // Every file is Ogg/Opus that ffprobe reads; the writers close them within a moment.
    let mix_file = dir.join(sidecar["mix"]["file"].as_str().expect("the mix's file"));
    let files: Vec<std::path::PathBuf> =
        tracks.iter().map(|t| dir.join(t["file"].as_str().expect("file"))).chain([mix_file.clone()]).collect();
    ffprobe_reads_opus(&files);

    // Each speaker's first voiced frame, placed by the sidecar, against the mix.
    let mix = decode_ogg(&mix_file);
    let mix_offset = sidecar["mix"]["offset_seconds"].as_f64().expect("the mix's offset");
    for (who, freq) in [("alice", 440.0), ("bob", 660.0)] {
        let track = tracks
            .iter()
            .find(|t| onset_of(&decode_ogg(&dir.join(t["file"].as_str().unwrap_or(""))), freq, 0.05).is_some())
            .unwrap_or_else(|| panic!("{who}'s track: {sidecar}"));
        let pcm = decode_ogg(&dir.join(track["file"].as_str().unwrap_or("")));
        let in_track = onset_of(&pcm, freq, 0.05).expect("voiced") + track["offset_seconds"].as_f64().expect("offset");
        let in_mix = onset_of(&mix, freq, 0.05).unwrap_or_else(|| panic!("{who} in the mix")) + mix_offset;
        eprintln!("{who}: first voiced at {in_track:.3} s by its track, {in_mix:.3} s in the mix");
        assert!((in_track - in_mix).abs() <= 0.04, "{who}: track {in_track:.3} s against mix {in_mix:.3} s");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
