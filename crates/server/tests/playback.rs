//! Files played into a room, heard by real WebRTC participants: a file of
//! the playback directory and an upload, each forwarded frame for frame
//! (the listener receives the file's own Opus packets: no decode, no
//! encode) while it plays alone; stopping silences it, looping repeats it;
//! hold music plays to one participant alone and stops when a second
//! joins; bad files, paths out of the directory, oversized uploads and a
//! full room of playbacks get clear JSON errors and break nothing. Files
//! made by Debian's ffmpeg and opusenc play to a plain RTP participant.

mod common;
mod ops_tools;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Ws, create_room, http, start_with, test_config};
use serde_json::{Value, json};
use tutti_client::{JoinAs, ToneClient, run_for};

fn tone_file(freq: f32, frames: usize) -> (Vec<u8>, Vec<Bytes>) {
    tutti_server::outputs::ogg::tone_file(freq, frames).expect("tone file")
}

/// A fresh directory of sound files.
fn sounds_dir(name: &str, files: &[(&str, &[u8])]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tutti-playback-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    for (file, bytes) in files {
        std::fs::write(dir.join(file), bytes).expect("write");
    }
    dir
}

fn post_json(api: SocketAddr, path: &str, body: Value) -> (u16, Value) {
    let r = http(api, "POST", path, Some("application/json"), body.to_string().as_bytes());
    (r.status, serde_json::from_str(&r.body).unwrap_or(Value::Null))
}

fn call(api: SocketAddr, method: &str, path: &str) -> (u16, Value) {
    let r = http(api, method, path, None, b"");
    (r.status, serde_json::from_str(&r.body).unwrap_or(Value::Null))
}

/// A participant that sends silence and listens, connected; `others`
/// are pumped meanwhile (what they hear is stamped when it arrives).
fn listener(api: SocketAddr, room: &str, others: &mut [&mut ToneClient]) -> ToneClient {
    let mut c = ToneClient::join(api, room, 200.0, JoinAs::Whip).expect("join");
    c.talking = false;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !c.connected && Instant::now() < deadline {
        let now = Instant::now();
        c.pump(now);
        others.iter_mut().for_each(|o| o.pump(now));
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(c.connected, "connected");
    c
}

/// Received packets (after `since`) that are byte for byte one of `packets`.
fn identical(c: &ToneClient, packets: &HashSet<Bytes>, since: Instant) -> usize {
    c.heard.iter().filter(|(at, p)| *at >= since && packets.contains(&p.payload)).count()
}

#[test]
fn a_file_is_heard_forwarded_unchanged_then_stopped_and_a_loop_repeats() {
    let (file, packets) = tone_file(523.0, 50);
    let dir = sounds_dir("heard", &[("tone.opus", &file)]);
    let mut cfg = test_config();
    cfg.playback.dir = dir.display().to_string();
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "pb");
    let mut ws = Ws::connect(api, "pb");
    let first = ws.wait_for(Duration::from_secs(5), |v| v["type"] == "room");
    assert_eq!(first["playbacks"], json!([]), "{first}");
    let mut c = listener(api, "pb", &mut []);
    let packets: HashSet<Bytes> = packets.into_iter().collect();

    // Once: one second of 523 Hz, the file's own packets.
    let started = Instant::now();
    let (status, once) = post_json(api, "/v1/rooms/pb/playbacks", json!({ "file": "tone.opus" }));
    assert_eq!(status, 201, "{once}");
    assert_eq!(
        (&once["file"], &once["purpose"], &once["loop"]),
        (&json!("tone.opus"), &json!("announcement"), &json!(false))
    );
    assert_eq!(once["duration_seconds"], 1.0);
    let id = once["id"].as_u64().expect("id");
    assert!(id >= 1 << 52, "a playback id is not a participant's: {id}");
    let ev = ws.wait_pumping(Duration::from_secs(5), &mut [&mut c], |v| v["type"] == "playback_started");
    assert_eq!((&ev["id"], &ev["purpose"], &ev["loop"]), (&json!(id), &json!("announcement"), &json!(false)));
    let ev = ws.wait_pumping(Duration::from_secs(5), &mut [&mut c], |v| v["type"] == "playback_finished");
    assert_eq!((&ev["id"], &ev["file"]), (&json!(id), &json!("tone.opus")));
    run_for(&mut [&mut c], Duration::from_millis(200));
    let amp = c.hears(523.0, started);
    assert!(amp > 0.1, "the listener hears the file: {amp}");
    let same = identical(&c, &packets, started);
    assert!(same >= 40, "forwarded without a decode: {same} of the file's 50 packets arrived unchanged");
    assert!(call(api, "GET", "/v1/rooms/pb/playbacks").1["playbacks"].as_array().is_some_and(Vec::is_empty));
    let room = common::room(api, "pb");
    assert_eq!(room["participants"].as_array().map(Vec::len), Some(1), "a playback is no participant: {room}");

    // Looped: it goes round until stopped, then silence.
    let looped_at = Instant::now();
    let (status, looped) = post_json(api, "/v1/rooms/pb/playbacks", json!({ "file": "tone.opus", "loop": true }));
    assert_eq!(status, 201, "{looped}");
    let id = looped["id"].as_u64().expect("id");
    run_for(&mut [&mut c], Duration::from_millis(2600));
    let (_, list) = call(api, "GET", "/v1/rooms/pb/playbacks");
    let now = &list["playbacks"][0];
    assert_eq!((&now["id"], &now["loop"]), (&json!(id), &json!(true)), "{list}");
    assert!(now["loops"].as_u64().is_some_and(|l| l >= 2), "it went round: {list}");
    let mut late = Ws::connect(api, "pb");
    let snapshot = late.wait_for(Duration::from_secs(5), |v| v["type"] == "room");
    assert_eq!(snapshot["playbacks"][0]["id"], json!(id), "a socket opened now sees what plays: {snapshot}");
    let last_second = Instant::now() - Duration::from_millis(800);
    assert!(c.hears(523.0, last_second) > 0.1, "still heard after its end, looped");
    assert!(identical(&c, &packets, looped_at) >= 100, "two rounds and more of the file's packets");
    let (status, stopped) = call(api, "DELETE", &format!("/v1/rooms/pb/playbacks/{id}"));
    assert_eq!(status, 200, "{stopped}");
    let stop = Instant::now();
    let ev = ws.wait_pumping(Duration::from_secs(5), &mut [&mut c], |v| v["type"] == "playback_stopped");
    assert_eq!((&ev["id"], &ev["reason"]), (&json!(id), &json!("stopped")));
    run_for(&mut [&mut c], Duration::from_millis(800));
    let after = c.hears(523.0, stop + Duration::from_millis(200));
    assert!(after < 0.01, "silent once stopped: {after}");
    assert_eq!(call(api, "DELETE", &format!("/v1/rooms/pb/playbacks/{id}")).0, 404);

    // An upload plays the same way.
    let (tone, up) = tone_file(784.0, 50);
    let up: HashSet<Bytes> = up.into_iter().collect();
    let at = Instant::now();
    let r = http(api, "POST", "/v1/rooms/pb/playbacks", Some("audio/ogg"), &tone);
    assert_eq!(r.status, 201, "{}", r.body);
    let body: Value = serde_json::from_str(&r.body).expect("JSON");
    assert_eq!(body["file"], "upload");
    run_for(&mut [&mut c], Duration::from_millis(1400));
    assert!(c.hears(784.0, at) > 0.1, "the upload is heard");
    assert!(identical(&c, &up, at) >= 40, "and forwarded unchanged");
    let _ = std::fs::remove_dir_all(&dir);
    rt.block_on(server.shutdown());
}

#[test]
fn hold_music_plays_to_one_alone_and_stops_when_a_second_joins() {
    let (hold, _) = tone_file(660.0, 50);
    let (enter, _) = tone_file(880.0, 10);
    let dir = sounds_dir("hold", &[("hold.opus", &hold), ("enter.opus", &enter)]);
    let mut cfg = test_config();
    cfg.playback.dir = dir.display().to_string();
    cfg.playback.hold_music = "hold.opus".to_owned();
    cfg.playback.enter_sound = "enter.opus".to_owned();
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "lobby");
    let mut ws = Ws::connect(api, "lobby");
    assert_eq!(
        call(api, "GET", "/v1/rooms/lobby/sounds").1,
        json!({ "enter": "enter.opus", "leave": null, "hold": "hold.opus" })
    );
    let mut a = listener(api, "lobby", &mut []);
    let ev = ws.wait_pumping(Duration::from_secs(5), &mut [&mut a], |v| v["type"] == "playback_started");
    assert_eq!((&ev["purpose"], &ev["loop"], &ev["file"]), (&json!("hold"), &json!(true), &json!("hold.opus")));
    let alone = Instant::now();
    run_for(&mut [&mut a], Duration::from_millis(1500));
    assert!(a.hears(660.0, alone) > 0.1, "alone: the hold music");
    let joining = Instant::now();
    let mut b = listener(api, "lobby", &mut [&mut a]);
    let joined = Instant::now();
    let ev = ws.wait_pumping(Duration::from_secs(5), &mut [&mut a, &mut b], |v| v["type"] == "playback_stopped");
    assert_eq!(ev["reason"], "joined");
    run_for(&mut [&mut a, &mut b], Duration::from_millis(1500));
    for (who, c) in [("a", &a), ("b", &b)] {
        let amp = c.hears(660.0, joined + Duration::from_millis(300));
        assert!(amp < 0.01, "{who}: no hold music once two are in: {amp}");
    }
    assert!(a.hears(880.0, joining) > 0.05, "a hears the enter sound as b joins");
    let (_, list) = call(api, "GET", "/v1/rooms/lobby/playbacks");
    assert!(list["playbacks"].as_array().is_some_and(Vec::is_empty), "{list}");
    // b leaves (its call closed and its REST leave, as the page does): a is
    // alone again, and the hold music is back.
    b.close();
    let left = http(api, "DELETE", &b.location, None, b"");
    assert!(matches!(left.status, 204 | 404), "b's leave: {} {}", left.status, left.body);
    let ev = ws.wait_pumping(Duration::from_secs(10), &mut [&mut a], |v| v["type"] == "playback_started");
    assert_eq!(ev["purpose"], "hold");
    // A room's own sounds change at run time; a missing file changes nothing.
    let put = |body: Value| {
        let r = http(api, "PUT", "/v1/rooms/lobby/sounds", Some("application/json"), body.to_string().as_bytes());
        (r.status, serde_json::from_str::<Value>(&r.body).unwrap_or(Value::Null))
    };
    let (status, err) = put(json!({ "hold": "nope.opus", "enter": null }));
    assert_eq!((status, &err["code"]), (404, &json!("file_not_found")), "{err}");
    assert_eq!(call(api, "GET", "/v1/rooms/lobby/sounds").1["enter"], "enter.opus", "unchanged");
    let (status, now) = put(json!({ "hold": null }));
    assert_eq!(status, 200, "{now}");
    assert_eq!(now, json!({ "enter": "enter.opus", "leave": null, "hold": null }));
    let ev = ws.wait_pumping(Duration::from_secs(5), &mut [&mut a], |v| v["type"] == "playback_stopped");
    assert_eq!(ev["reason"], "replaced");
    let _ = std::fs::remove_dir_all(&dir);
    rt.block_on(server.shutdown());
}

#[test]
fn bad_files_paths_out_of_the_directory_and_big_uploads_get_clear_errors() {
    let (good, _) = tone_file(440.0, 25);
    let (big, _) = tone_file(440.0, 2000);
    let dir = sounds_dir("bad", &[("good.opus", &good), ("junk.opus", b"RIFF\x24\x00\x00\x00WAVEfmt not ogg at all")]);
    std::fs::write(dir.parent().expect("tmp").join(format!("secret-{}.opus", std::process::id())), &good)
        .expect("outside");
    let mut cfg = test_config();
    cfg.playback.dir = dir.display().to_string();
    cfg.playback.max_file_bytes = 16 * 1024;
    cfg.playback.max_per_room = 2;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "bad");
    let play = |file: &str| post_json(api, "/v1/rooms/bad/playbacks", json!({ "file": file }));
    let outside = format!("../secret-{}.opus", std::process::id());
    for (file, status, code) in [
        (outside.as_str(), 400, "bad_file_name"),
        ("/etc/passwd", 400, "bad_file_name"),
        (".hidden", 400, "bad_file_name"),
        ("", 400, "bad_file_name"),
        ("missing.opus", 404, "file_not_found"),
        ("junk.opus", 422, "bad_audio_file"),
    ] {
        let (got, body) = play(file);
        assert_eq!((got, body["code"].as_str()), (status, Some(code)), "{file:?}: {body}");
        assert!(
            body["message"].as_str().is_some_and(|m| !m.contains(&dir.display().to_string())),
            "no server path: {body}"
        );
    }
    // A link in the directory that leads out of it is no file of it.
    let secret = dir.parent().expect("tmp").join(format!("secret-{}.opus", std::process::id()));
    std::os::unix::fs::symlink(&secret, dir.join("link.opus")).expect("symlink");
    let (got, body) = play("link.opus");
    assert_eq!((got, &body["code"]), (404, &json!("file_not_found")), "{body}");
    std::fs::write(dir.join("big.opus"), &big).expect("big");
    assert_eq!(play("big.opus").1["code"], "file_too_large");
    let upload = |bytes: &[u8]| {
        let r = http(api, "POST", "/v1/rooms/bad/playbacks", Some("audio/ogg"), bytes);
        (r.status, serde_json::from_str::<Value>(&r.body).unwrap_or(Value::Null))
    };
    let (status, body) = upload(&big);
    assert_eq!((status, &body["code"]), (413, &json!("file_too_large")), "{body}");
    // A body larger than the sockets' buffers, sent whole by a client that
    // does not wait for `100 Continue`: the 413 still reaches it (the server
    // reads and drops the rest rather than resetting the connection).
    let (status, body) = upload(&vec![0x4f; 12 << 20]);
    assert_eq!((status, &body["code"]), (413, &json!("file_too_large")), "{body}");
    // A file of tiny frames (1-byte packets: 20 ms each) within the size
    // limit, which would hold ~3× its size in memory: refused as too large,
    // so that a playback holds at most 1.5 × max_file_bytes.
    let tiny = {
        use tutti_server::outputs::ogg::{OggOpusWriter, OpusHead};
        let head = OpusHead { channels: 1, pre_skip: 0, input_rate: 48_000 };
        let mut w = OggOpusWriter::new(Vec::new(), 9, head, "t", &[]).expect("headers");
        for _ in 0..6000 {
            w.push_packet(&[0x08], 960).expect("push");
        }
        w.finish().expect("finish");
        std::mem::take(w.get_mut())
    };
    assert!(tiny.len() < 16 * 1024, "within the file size limit: {} bytes", tiny.len());
    let (status, body) = upload(&tiny);
    assert_eq!((status, &body["code"]), (413, &json!("file_too_large")), "{body}");
    let (status, body) = upload(b"OggS but then nothing of the kind");
    assert_eq!((status, &body["code"]), (422, &json!("bad_audio_file")), "{body}");
    let mut damaged = good.clone();
    let n = damaged.len();
    damaged[n - 20] ^= 0x55;
    let (status, body) = upload(&damaged);
    assert_eq!((status, &body["code"]), (422, &json!("bad_audio_file")), "{body}");
    let r = http(api, "POST", "/v1/rooms/bad/playbacks", Some("text/plain"), b"good.opus");
    assert_eq!((r.status, r.body.contains("unsupported_media_type")), (415, true), "{}", r.body);
    assert_eq!(post_json(api, "/v1/rooms/bad/playbacks", json!({ "file": "good.opus", "x": 1 })).1["code"], "bad_json");
    assert_eq!(post_json(api, "/v1/rooms/nowhere/playbacks", json!({ "file": "good.opus" })).0, 404);
    assert_eq!(call(api, "DELETE", "/v1/rooms/bad/playbacks/abc").1["code"], "bad_value");
    assert_eq!(call(api, "DELETE", "/v1/rooms/bad/playbacks/12").1["code"], "playback_not_found");
    // The limit per room.
    let looped = json!({ "file": "good.opus", "loop": true });
    assert_eq!(post_json(api, "/v1/rooms/bad/playbacks", looped.clone()).0, 201);
    assert_eq!(post_json(api, "/v1/rooms/bad/playbacks", looped.clone()).0, 201);
    let (status, body) = post_json(api, "/v1/rooms/bad/playbacks", looped);
    assert_eq!((status, &body["code"]), (429, &json!("too_many_playbacks")), "{body}");
    // Nothing else is affected: a participant joins and hears the two playing.
    let mut c = listener(api, "bad", &mut []);
    let at = Instant::now();
    run_for(&mut [&mut c], Duration::from_millis(1000));
    assert!(c.hears(440.0, at) > 0.1, "the room plays on");
    let _ = std::fs::remove_file(dir.parent().expect("tmp").join(format!("secret-{}.opus", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir);
    rt.block_on(server.shutdown());
}

#[test]
fn the_playback_settings_are_checked_and_a_missing_sound_stops_the_start() {
    let refused = |key: &str, value: &str| {
        let sets = [(key.to_owned(), value.to_owned())];
        let e = tutti_server::Config::load(None, Vec::<(String, String)>::new(), &sets).expect_err("refused");
        e.to_string()
    };
    assert!(refused("playback.hold_music", "../../etc/passwd").contains("playback.hold_music"));
    assert!(refused("playback.enter_sound", "sub/dir.opus").contains("playback.enter_sound"));
    assert!(refused("playback.max_per_room", "0").contains("playback.max_per_room"));
    assert!(refused("playback.max_file_bytes", "10").contains("playback.max_file_bytes"));
    let dir = sounds_dir("start", &[("junk.opus", b"not an ogg file")]);
    for (name, says) in [("missing.opus", "no file"), ("junk.opus", "Ogg")] {
        let mut cfg = test_config();
        cfg.playback.dir = dir.display().to_string();
        cfg.playback.leave_sound = name.to_owned();
        let rt = tutti_server::api_runtime(1).expect("runtime");
        let e = rt.block_on(tutti_server::Server::start(cfg)).err().expect("the start fails").to_string();
        assert!(e.contains("playback.leave_sound") && e.contains(says), "{name}: {e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_playback_events_reach_a_webhook_receiver() {
    use std::sync::{Arc, Mutex};
    let (file, _) = tone_file(523.0, 10);
    let dir = sounds_dir("hooks", &[("short.opus", &file)]);
    let rt = tutti_server::api_runtime(2).expect("runtime");
    let got: Arc<Mutex<Vec<Value>>> = Arc::default();
    let app = {
        let got = got.clone();
        axum::Router::new().route(
            "/hook",
            axum::routing::post(move |body: axum::body::Bytes| {
                let got = got.clone();
                async move {
                    got.lock().expect("not poisoned").push(serde_json::from_slice(&body).unwrap_or(Value::Null));
                    axum::http::StatusCode::OK
                }
            }),
        )
    };
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
    let hooks = listener.local_addr().expect("addr");
    rt.spawn(async move { axum::serve(listener, app).await });
    let mut cfg = test_config();
    cfg.playback.dir = dir.display().to_string();
    cfg.webhooks.urls = vec![format!("http://{hooks}/hook")];
    cfg.webhooks.secret = "a webhook secret of thirty-two bytes or more".to_owned();
    let server = rt.block_on(tutti_server::Server::start(cfg)).expect("server starts");
    let api = server.http_addr();
    create_room(api, "hooked");
    let (status, started) = post_json(api, "/v1/rooms/hooked/playbacks", json!({ "file": "short.opus" }));
    assert_eq!(status, 201, "{started}");
    let (_, looped) = post_json(api, "/v1/rooms/hooked/playbacks", json!({ "file": "short.opus", "loop": true }));
    let looped = looped["id"].as_u64().expect("id");
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(call(api, "DELETE", &format!("/v1/rooms/hooked/playbacks/{looped}")).0, 200);
    let deadline = Instant::now() + Duration::from_secs(10);
    let events = loop {
        let events: Vec<Value> = got
            .lock()
            .expect("not poisoned")
            .iter()
            .filter(|e| e["event"].as_str().is_some_and(|n| n.starts_with("playback_")))
            .cloned()
            .collect();
        if events.len() >= 4 || Instant::now() > deadline {
            break events;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(names.len(), 4, "{events:?}");
    assert_eq!(names.iter().filter(|n| **n == "playback_started").count(), 2, "{names:?}");
    let finished = events.iter().find(|e| e["event"] == "playback_finished").expect("finished");
    assert_eq!((&finished["room"], &finished["playback"]["id"]), (&json!("hooked"), &started["id"]), "{finished}");
    let stopped = events.iter().find(|e| e["event"] == "playback_stopped").expect("stopped");
    assert_eq!((&stopped["playback"]["id"], &stopped["reason"]), (&json!(looped), &json!("stopped")), "{stopped}");
    let first = events.iter().find(|e| e["event"] == "playback_started").expect("started");
    assert_eq!(
        (&first["playback"]["file"], &first["playback"]["purpose"]),
        (&json!("short.opus"), &json!("announcement"))
    );
    rt.block_on(server.shutdown());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn only_an_admin_of_the_room_plays_files_or_changes_its_sounds() {
    use tutti_client::{Requester, request_as};
    use tutti_server::auth::{Auth, Grant, unix_now};
    const SECRET: &str = "the playback test's secret: 32 bytes and more";
    let (file, _) = tone_file(523.0, 10);
    let dir = sounds_dir("auth", &[("tone.opus", &file)]);
    let mut cfg = test_config();
    cfg.auth.disabled = false;
    cfg.auth.secret = SECRET.to_owned();
    cfg.playback.dir = dir.display().to_string();
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let auth = Auth::new(SECRET).expect("auth");
    let mint = |g: Grant| auth.mint(&g, Duration::from_secs(600), unix_now()).expect("mint");
    let admin = mint(Grant::admin("ops"));
    let room_admin = mint(Grant { admin: true, ..Grant::participant("guarded", "host") });
    let other_admin = mint(Grant { admin: true, ..Grant::participant("elsewhere", "host2") });
    let guest = mint(Grant::participant("guarded", "guest"));
    let as_ = |token: Option<&str>, method: &str, path: &str, body: &str| {
        let ct = (!body.is_empty()).then_some("application/json");
        let r = request_as(api, &Requester { token, from: None }, method, path, ct, body.as_bytes()).expect("answer");
        (r.status, serde_json::from_str::<Value>(&r.body).unwrap_or(Value::Null)["code"].clone())
    };
    assert_eq!(as_(Some(&admin), "POST", "/v1/rooms", r#"{"id":"guarded"}"#).0, 201);
    let play = r#"{"file":"tone.opus"}"#;
    let refused = [
        (None, "POST", "/v1/rooms/guarded/playbacks", play, 401, "token_missing"),
        (Some(guest.as_str()), "POST", "/v1/rooms/guarded/playbacks", play, 403, "forbidden"),
        (Some(guest.as_str()), "GET", "/v1/rooms/guarded/playbacks", "", 403, "forbidden"),
        (Some(guest.as_str()), "PUT", "/v1/rooms/guarded/sounds", r#"{"hold":"tone.opus"}"#, 403, "forbidden"),
        (Some(other_admin.as_str()), "POST", "/v1/rooms/guarded/playbacks", play, 403, "wrong_room"),
        (Some(other_admin.as_str()), "DELETE", "/v1/rooms/guarded/playbacks/1", "", 403, "wrong_room"),
    ];
    for (token, method, path, body, status, code) in refused {
        assert_eq!(as_(token, method, path, body), (status, json!(code)), "{method} {path} with {token:?}");
    }
    let list =
        request_as(api, &Requester::token(&admin), "GET", "/v1/rooms/guarded/playbacks", None, b"").expect("answer");
    assert!(list.body.contains(r#""playbacks":[]"#), "nothing was started: {}", list.body);
    assert_eq!(as_(Some(&room_admin), "POST", "/v1/rooms/guarded/playbacks", play).0, 201, "the room's admin may");
    assert_eq!(as_(Some(&room_admin), "PUT", "/v1/rooms/guarded/sounds", r#"{"enter":"tone.opus"}"#).0, 200);
    let _ = std::fs::remove_dir_all(&dir);
    rt.block_on(server.shutdown());
}

#[test]
fn files_made_by_ffmpeg_and_opusenc_play_to_a_plain_rtp_participant() {
    use std::net::UdpSocket;
    use std::process::Command;
    let ffmpeg = ops_tools::ensure_tool("ffmpeg", "ffmpeg");
    let opusenc = ops_tools::ensure_tool("opusenc", "opus-tools");
    let dir = ops_tools::temp_dir("playback-tools");
    let mut cmd = Command::new(&ffmpeg);
    cmd.args(["-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i", "sine=frequency=700:duration=2"])
        .args(["-c:a", "libopus", "-ac", "1", "-ar", "48000", "-frame_duration", "20"])
        .arg(dir.join("ffmpeg.opus"));
    ops_tools::run(&mut cmd, "ffmpeg", Duration::from_secs(30)).expect("ffmpeg writes an Ogg/Opus file");
    // opusenc takes a WAV: 2 s of 900 Hz, 16-bit, 48 kHz mono.
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 48_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut wav = hound::WavWriter::create(dir.join("tone.wav"), spec).expect("wav");
    for n in 0..96_000 {
        let x = 0.3 * (std::f32::consts::TAU * 900.0 * n as f32 / 48_000.0).sin();
        wav.write_sample((x * 32_767.0) as i16).expect("sample");
    }
    wav.finalize().expect("wav written");
    let mut cmd = Command::new(&opusenc);
    cmd.arg("--quiet").arg(dir.join("tone.wav")).arg(dir.join("opusenc.opus"));
    ops_tools::run(&mut cmd, "opusenc", Duration::from_secs(30)).expect("opusenc writes an Ogg/Opus file");

    let mut cfg = test_config();
    cfg.playback.dir = dir.display().to_string();
    cfg.rtp_in.trusted = vec!["127.0.0.0/8".into()];
    cfg.peer_timeout_seconds = 60.0;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "tools");
    // A plain RTP participant (as a SIP gateway bridges a phone) that only listens.
    let rx = UdpSocket::bind("127.0.0.1:0").expect("bind");
    rx.set_read_timeout(Some(Duration::from_millis(50))).expect("timeout");
    let port = rx.local_addr().expect("bound").port();
    let offer = format!(
        "v=0\r\no=gw 1 1 IN IP4 127.0.0.1\r\ns=call\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
         m=audio {port} RTP/AVP 111\r\na=rtpmap:111 opus/48000/2\r\n"
    );
    let r = http(api, "POST", "/v1/rooms/tools/participants", Some("application/sdp"), offer.as_bytes());
    assert_eq!(r.status, 201, "{}", r.body);
    // ffmpeg's sine has a peak of 1/8, the WAV's 0.3: each is heard at half of that at least.
    for (file, freq, peak) in [("ffmpeg.opus", 700.0, 0.125), ("opusenc.opus", 900.0, 0.3)] {
        let bytes = std::fs::read(dir.join(file)).expect("the tool's file");
        let pages = ops_tools::read_pages(&bytes).expect("Ogg pages");
        let packets: HashSet<Bytes> = ops_tools::packets(&pages).into_iter().skip(2).map(Bytes::from).collect();
        let (status, body) = post_json(api, "/v1/rooms/tools/playbacks", json!({ "file": file }));
        assert_eq!(status, 201, "{file}: {body}");
        let mut got: Vec<Vec<u8>> = Vec::new();
        let mut buf = [0u8; 1500];
        let end = Instant::now() + Duration::from_millis(2400);
        while Instant::now() < end {
            if let Ok(n) = rx.recv(&mut buf)
                && n > 12
            {
                got.push(buf[12..n].to_vec());
            }
        }
        let same = got.iter().filter(|p| packets.contains(&p[..])).count();
        let mut dec = opus::Decoder::new(48_000, opus::Channels::Mono).expect("decoder");
        let mut pcm = Vec::new();
        for p in &got {
            let mut out = [0f32; 960];
            if let Ok(n) = dec.decode_float(p, &mut out, false) {
                pcm.extend_from_slice(&out[..n]);
            }
        }
        let amp = tutti_mix::goertzel(&pcm, freq);
        eprintln!("{file}: {} packets received, {same} of them the file's own; {freq} Hz at {amp:.3}", got.len());
        assert!(amp > peak / 2.0, "{file}: the plain participant hears {freq} Hz only at {amp}");
        assert!(same >= 80, "{file}: forwarded unchanged, {same} of {} packets", got.len());
    }
    let _ = std::fs::remove_dir_all(&dir);
    rt.block_on(server.shutdown());
}
