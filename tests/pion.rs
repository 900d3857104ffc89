//! An independent WebRTC stack against `tutti serve` as a user runs it:
//! pion (Go), the client of `benches/pion/`, joins by REST and through the
//! room's WebSocket, sends Opus with RFC 6464 levels and DTX as a browser
//! does, and receives the room. Everything else that talks to the server in
//! the tests is ours (webrtc-rs, `tutti load`) or a browser; this is the
//! stack many other servers and clients are built on.
//!
//! Needs Go (CI machines have it; `.ci/run` checks) and `opusenc` (Debian's
//! opus-tools, which `.ci/run` installs).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use nix::sys::signal::{Signal, kill};
use serde_json::Value;

fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{what}: {}\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    stdout
}

/// `benches/pion` built into `dir`.
fn client(dir: &Path) -> PathBuf {
    let bin = dir.join("pion-load");
    run(
        Command::new("go")
            .args(["build", "-o"])
            .arg(&bin)
            .arg(".")
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/pion")),
        "go build (benches/pion)",
    );
    bin
}

/// The talkers' voice: `examples/audio/alice.wav` as Ogg Opus, 20 ms frames
/// (opusenc from Debian's opus-tools, installed with apt-get when missing: as root).
fn voice(dir: &Path) -> PathBuf {
    if Command::new("opusenc").arg("--version").output().is_err() {
        run(
            Command::new("apt-get").args(["install", "-y", "--no-install-recommends", "opus-tools"]),
            "apt-get install opus-tools",
        );
    }
    let opus = dir.join("voice.opus");
    let wav = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/audio/alice.wav");
    run(
        Command::new("opusenc").args(["--quiet", "--framesize", "20", "--bitrate", "32"]).arg(wav).arg(&opus),
        "opusenc",
    );
    opus
}

#[test]
fn pion_clients_join_by_rest_and_by_socket_send_levels_and_hear_the_room() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pion");
    std::fs::create_dir_all(&dir).expect("target/tmp/pion");
    let (bin, opus) = (client(&dir), voice(&dir));
    let (served, metrics) = common::serve_open_with_metrics(&[]);
    let url = format!("http://{}", served.api);

    for (how, ws) in [("rest", false), ("ws", true)] {
        // Six clients in a room of their own, three of them talkers: by REST
        // they talk all the time (the room is never silent), through sockets
        // in P.59 spurts (so the sockets have something to tell).
        let mut cmd = Command::new(&bin);
        cmd.args(["-url", &url, "-n", "6", "-talkers", "0.5", "-life", "9s", "-warmup", "3s", "-json", "-prefix", how])
            .arg("-opus")
            .arg(&opus)
            .arg(if ws { "-ws" } else { "-always" });
        let out = run(&mut cmd, &format!("pion-load ({how})"));
        println!("{how}:\n{out}");
        let last = out.lines().last().unwrap_or_default();
        let r: Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("{how}: no JSON summary ({e}): {out}"));
        let f = |k: &str| r[k].as_f64().unwrap_or(-1.0);
        assert_eq!(
            (r["connected"].as_u64(), r["failed"].as_u64()),
            (Some(6), Some(0)),
            "{how}: every client connected: {r}"
        );
        assert!(f("window_s") > 5.0, "{how}: {r}");
        // Two or three talk at any time: everyone gets a mix every 20 ms. In
        // spurts the room is sometimes silent (DTX: one frame in 20), and a
        // lone talker is sent nothing.
        let floor = if ws { 5.0 } else { 45.0 };
        assert!(f("packets_per_client_per_s") > floor, "{how}: every client receives the room: {r}");
        assert!(f("loss_percent") < 1.0, "{how}: loopback loses nothing: {r}");
        // Every packet the server sends says how loud it is (the level pion negotiated).
        assert!(f("levelled_share") > 0.99, "{how}: the server's packets carry RFC 6464 levels: {r}");
        if ws {
            assert_eq!(r["ws_clients"].as_u64(), Some(6), "{r}");
            assert!(f("ws_messages_per_client_per_s") > 0.0, "the sockets hear who talks: {r}");
        }
    }

    // Each call outlived RETIRE_AFTER (half a second) well before its window: the
    // figures above were carried by tutti-rtc alone, webrtc-rs's peers
    // retired (pion's own DTLS, SRTCP and consent checks against ours).
    let retired = common::metric(metrics, "tutti_media_retired_peers_total");
    assert_eq!(retired, 12.0, "every pion client's peer was retired once up");

    kill(served.pid(), Signal::SIGTERM).expect("SIGTERM");
    let logs = served.logs();
    assert!(!logs.contains("panicked"), "the server panicked:\n{logs}");
}
