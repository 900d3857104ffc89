//! `examples/speaker_feed.rs` against a real server: two WebRTC talkers
//! with their own tones; the example writes one Ogg/Opus file per speaker
//! until the room is deleted; each file, decoded by ffmpeg (Debian's,
//! installed when missing), carries its own speaker's tone and not the
//! other's.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tutti_client::{JoinAs, Requester, ToneClient, request_as, run_for, run_until};
use tutti_mix::goertzel;
use tutti_server::auth::Grant;

/// The example's binary, built by `cargo test` beside this test's.
fn example() -> PathBuf {
    let exe = std::env::current_exe().expect("this test's path");
    let debug = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>");
    let path = debug.join("examples/speaker_feed");
    assert!(path.exists(), "{} is missing: `cargo test` builds the examples", path.display());
    path
}

/// ffmpeg, installing Debian's package when it is missing.
fn ffmpeg() -> PathBuf {
    tutti_client::process::ensure_debian_package("/usr/bin/ffmpeg", "ffmpeg")
}

/// A file's audio, decoded to 48 kHz mono samples by ffmpeg.
fn decode(file: &std::path::Path) -> Vec<f32> {
    let out = Command::new(ffmpeg())
        .args(["-v", "error", "-i"])
        .arg(file)
        .args(["-f", "f32le", "-ac", "1", "-ar", "48000", "-"])
        .stdin(Stdio::null())
        .output()
        .expect("ffmpeg runs");
    assert!(out.status.success(), "ffmpeg {}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
    out.stdout.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

#[test]
fn the_example_writes_one_file_per_speaker_with_that_speakers_voice() {
    let (_rt, server, admin) = common::loopback_server();
    let api = server.http_addr();
    let as_admin = Requester::token(&admin);
    let r = request_as(api, &as_admin, "POST", "/v1/rooms", Some("application/json"), br#"{"id":"cap"}"#).expect("API");
    assert_eq!(r.status, 201, "{}", r.body);
    let join = |who: &str, freq: f32| {
        let token = server.mint_token(&Grant::participant("cap", who), Duration::from_secs(600)).expect("token");
        ToneClient::join_as(api, &Requester::token(&token), "cap", freq, JoinAs::Whip).expect("join")
    };
    let (mut alice, mut bob) = (join("alice", 440.0), join("bob", 660.0));
    assert!(run_until(&mut [&mut alice, &mut bob], Instant::now() + Duration::from_secs(10), |c| c
        .iter()
        .all(|c| c.connected)));

    let dir = std::env::temp_dir().join(format!("tutti-speaker-feed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut child = Command::new(example())
        .args([&api.to_string(), "cap"])
        .arg(&dir)
        .env("TUTTI_TOKEN", &admin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the example starts");
    run_for(&mut [&mut alice, &mut bob], Duration::from_secs(3));
    // The room goes: the feed closes, the example finishes its files and exits.
    let r = request_as(api, &as_admin, "DELETE", "/v1/rooms/cap", None, b"").expect("API");
    assert_eq!(r.status, 204, "{}", r.body);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the example did not exit when the room closed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().expect("output");
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(status.success(), "the example failed: {printed}");
    println!("{printed}");

    let mut files: Vec<PathBuf> =
        std::fs::read_dir(&dir).expect("its directory").map(|e| e.expect("entry").path()).collect();
    files.sort();
    let names: Vec<String> =
        files.iter().map(|f| f.file_name().unwrap_or_default().to_string_lossy().into_owned()).collect();
    assert_eq!(names.len(), 2, "one file per speaker: {names:?}");
    assert!(names[0].starts_with("alice-") && names[1].starts_with("bob-"), "{names:?}");
    for (file, own, other) in [(&files[0], 440.0, 660.0), (&files[1], 660.0, 440.0)] {
        let pcm = decode(file);
        assert!(pcm.len() > 48_000 * 2, "{}: {} samples", file.display(), pcm.len());
        let (mine, theirs) = (goertzel(&pcm, own), goertzel(&pcm, other));
        println!("{}: {own} Hz {mine:.4}, {other} Hz {theirs:.4}", file.display());
        assert!(mine > 0.01 && mine > 10.0 * theirs, "{}: its own speaker's voice only", file.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
