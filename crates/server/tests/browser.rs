//! tutti's own web page in real browsers: two headless Chromium processes
//! (each with a fake microphone playing its own tone from a WAV file) and
//! one Rust WebRTC client join one room. Chromium's WebRTC stack talks to
//! tutti's: each page, through a WebAudio analyser on its received track,
//! hears the other two tones and not its own; the talking indicators light
//! up from the WebSocket events; a third page finds the room full and a
//! fourth is refused the microphone, each told so in a sentence; mute
//! silences a page for the others; a raised hand shows on the other page,
//! whose moderator controls lower it and lock the room; leave leaves.
//! A screenshot of the call is written to `target/browser-test/call.png`.
//!
//! Prerequisites are ensured here, never skipped: Debian's `chromium` (run
//! as root, the test installs it with apt-get when /usr/bin/chromium is
//! missing), Node.js with npm (`npm ci` of the pinned playwright-core into
//! `target/browser-test/node`). The page is driven by
//! `tests/browser/driver.js`; it reports what it measured as JSON lines,
//! and this test asserts.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{http, start_with, test_config};
use serde_json::{Value, json};
use tutti_client::{JoinAs, ToneClient, run_until};
use tutti_mix::{Decoder, FRAME_SAMPLES, goertzel};

const CHROMIUM: &str = "/usr/bin/chromium";
const ROOM: &str = "browser";
/// Page "alice" (default voice processing), page "bob" (processing off), the Rust client.
const ALICE_HZ: f32 = 500.0;
const BOB_HZ: f32 = 700.0;
const RUST_HZ: f32 = 900.0;
/// A frequency nobody sends: the noise floor.
const CONTROL_HZ: f32 = 1300.0;
/// FFT magnitudes (dB, as AnalyserNode reports them) above which a tone is
/// heard, and below which it is absent. Heard tones measure about −45 dB
/// (alice's, through Chromium's noise suppression) to −25 dB. Where nobody
/// sends, the mix measures −75 to −100 dB: Opus's coding noise, shaped
/// around the tones that are there (up to −70 dB next to two loud tones).
/// A page hearing itself would see its own tone near its sending level.
const HEARD_DB: f64 = -60.0;
const ABSENT_DB: f64 = -55.0;
/// How far below the quieter of the two tones it hears a page's own tone must be.
const OWN_MARGIN_DB: f64 = 20.0;
/// The same for the Rust client (Goertzel amplitude of the decoded mix).
const HEARD_AMP: f32 = 0.01;
const ABSENT_AMP: f32 = 0.005;

/// `target/browser-test`.
fn out_dir() -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("CARGO_TARGET_TMPDIR is target/tmp");
    target.join("browser-test")
}

/// Reads a pipe to its end on a thread.
fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_string(&mut s);
        }
        s
    })
}

/// Runs a command to its end, or kills it after `timeout`. Returns its output, or why it failed.
fn run(cmd: &mut Command, what: &str, timeout: Duration) -> Result<String, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{what}: could not start: {e}"))?;
    let (out, err) = (drain(child.stdout.take()), drain(child.stderr.take()));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what}: still running after {timeout:?}, killed"));
            }
            Err(e) => return Err(format!("{what}: {e}")),
        }
    };
    let text = format!("{}{}", out.join().unwrap_or_default(), err.join().unwrap_or_default());
    if status.success() { Ok(text) } else { Err(format!("{what} failed ({status}):\n{text}")) }
}

/// Debian's Chromium, installed with apt-get when missing and we are root.
fn ensure_chromium() -> PathBuf {
    let path = PathBuf::from(CHROMIUM);
    if path.exists() {
        return path;
    }
    let root = run(Command::new("id").arg("-u"), "id -u", Duration::from_secs(10)).is_ok_and(|uid| uid.trim() == "0");
    assert!(
        root,
        "the browser test needs Chromium at {CHROMIUM}: install it (Debian: `sudo apt-get install -y chromium`), \
         or run the tests as root and the test installs it"
    );
    eprintln!("browser test: {CHROMIUM} is missing, installing Debian's chromium with apt-get (about a minute)");
    let apt = |args: &[&str], what: &str| {
        let mut cmd = Command::new("apt-get");
        cmd.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        if let Err(e) = run(&mut cmd, what, Duration::from_secs(600)) {
            panic!("installing Chromium failed: {e}");
        }
    };
    apt(&["update"], "apt-get update");
    apt(&["install", "-y", "chromium"], "apt-get install -y chromium");
    assert!(path.exists(), "apt-get installed chromium, but {CHROMIUM} is still missing");
    path
}

/// playwright-core, as pinned by tests/browser/package-lock.json, in
/// `target/browser-test/node` (installed once, again when the lock changes),
/// with the driver beside it.
fn ensure_playwright(out: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    let dir = out.join("node");
    std::fs::create_dir_all(&dir).expect("create target/browser-test/node");
    let lock = std::fs::read(src.join("package-lock.json")).expect("tests/browser/package-lock.json");
    let current = dir.join("node_modules/playwright-core/package.json").exists()
        && std::fs::read(dir.join("package-lock.json")).is_ok_and(|l| l == lock);
    for file in ["package.json", "package-lock.json", "driver.js"] {
        std::fs::copy(src.join(file), dir.join(file)).unwrap_or_else(|e| panic!("copy {file}: {e}"));
    }
    if !current {
        let npm = run(Command::new("npm").arg("--version"), "npm --version", Duration::from_secs(30));
        assert!(npm.is_ok(), "the browser test needs Node.js 20+ with npm (Debian: `apt-get install -y nodejs npm`)");
        let mut cmd = Command::new("npm");
        cmd.args(["ci", "--no-audit", "--no-fund"]).current_dir(&dir);
        if let Err(e) = run(&mut cmd, "npm ci (playwright-core)", Duration::from_secs(300)) {
            panic!("{e}");
        }
    }
    dir
}

/// A loopable WAV (48 kHz mono 16-bit): a whole number of cycles of `freq`.
fn write_tone_wav(path: &Path, freq: f32, seconds: u32) {
    let rate = 48_000u32;
    let n = rate * seconds;
    let mut b = Vec::with_capacity(44 + 2 * n as usize);
    b.extend_from_slice(b"RIFF");
    b.extend_from_slice(&(36 + 2 * n).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt ");
    b.extend_from_slice(&16u32.to_le_bytes()); // fmt chunk size
    b.extend_from_slice(&1u16.to_le_bytes()); // PCM
    b.extend_from_slice(&1u16.to_le_bytes()); // mono
    b.extend_from_slice(&rate.to_le_bytes());
    b.extend_from_slice(&(rate * 2).to_le_bytes()); // bytes per second
    b.extend_from_slice(&2u16.to_le_bytes()); // bytes per frame
    b.extend_from_slice(&16u16.to_le_bytes()); // bits per sample
    b.extend_from_slice(b"data");
    b.extend_from_slice(&(2 * n).to_le_bytes());
    for i in 0..n {
        let phase = std::f64::consts::TAU * f64::from(freq) * f64::from(i) / f64::from(rate);
        let sample = (0.3 * phase.sin() * f64::from(i16::MAX)).round() as i16;
        b.extend_from_slice(&sample.to_le_bytes());
    }
    std::fs::write(path, b).expect("write WAV");
}

/// How loud `freq` is in what `client` received between `from` and `to`.
fn heard_between(client: &ToneClient, freq: f32, from: Instant, to: Instant) -> f32 {
    let mut dec = Decoder::new().expect("decoder");
    let mut pcm = Vec::new();
    let mut frame = [0.0f32; FRAME_SAMPLES];
    for (at, p) in &client.heard {
        if *at >= from && *at < to && dec.decode(&p.payload, &mut frame).is_ok() {
            pcm.extend_from_slice(&frame);
        }
    }
    goertzel(&pcm, freq)
}

/// Kills the driver (and so its browsers) if the test ends early.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A JSON array of strings.
fn names(v: &Value) -> Vec<&str> {
    v.as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
}

/// The magnitude (dB) a page measured at `freq`.
fn db(heard: &Value, freq: f32) -> f64 {
    heard[format!("{freq}")].as_f64().unwrap_or_else(|| panic!("no measurement at {freq} Hz in {heard}"))
}

#[test]
fn two_chromium_pages_and_a_rust_client_hear_each_other_not_themselves() {
    let t0 = Instant::now();
    let out = out_dir();
    std::fs::create_dir_all(&out).expect("create target/browser-test");
    let chromium = ensure_chromium();
    let node_dir = ensure_playwright(&out);
    let ready = t0.elapsed();
    let (alice_wav, bob_wav) = (out.join("tone-500.wav"), out.join("tone-700.wav"));
    write_tone_wav(&alice_wav, ALICE_HZ, 2);
    write_tone_wav(&bob_wav, BOB_HZ, 2);

    let (rt, server) = start_with(test_config());
    let api = server.http_addr();
    let media = server.media_addr();
    let body = json!({ "id": ROOM, "max_participants": 3 }).to_string();
    assert_eq!(http(api, "POST", "/v1/rooms", Some("application/json"), body.as_bytes()).status, 201);

    // The Rust participant joins first and keeps sending its tone throughout.
    let mut rust = ToneClient::join(api, ROOM, RUST_HZ, JoinAs::Json).expect("the Rust client joins");
    assert!(run_until(&mut [&mut rust], Instant::now() + Duration::from_secs(10), |c| c[0].connected), "connects");

    let config = json!({
        "base": format!("http://{api}/"),
        "room": ROOM,
        "chromium": chromium,
        "out": out,
        "pages": [
            { "name": "alice", "wav": alice_wav, "processing": true },
            { "name": "bob", "wav": bob_wav, "processing": false },
        ],
        "others": ["900 Hz"],
        "tones": [ALICE_HZ, BOB_HZ, RUST_HZ],
        "control": CONTROL_HZ,
        "settleMs": 1500,
        "measureMs": 2000,
        "waitMs": 20000,
        "roomFull": true,
        "micDenied": "no-microphone",
    });
    let mut child = Command::new("node")
        .arg(node_dir.join("driver.js"))
        .arg(config.to_string())
        .current_dir(&node_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node starts the driver");
    let stdout = child.stdout.take().expect("stdout");
    let stderr = drain(child.stderr.take());
    let mut driver = Driver(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });

    // Pump the Rust client while the driver works; note when each step was reached.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut marks: HashMap<String, Instant> = HashMap::new();
    let mut result = Value::Null;
    let mut failure = None;
    loop {
        let now = Instant::now();
        rust.pump(now);
        match rx.try_recv() {
            Ok(line) => match line.strip_prefix("@@").and_then(|j| serde_json::from_str::<Value>(j).ok()) {
                Some(msg) => {
                    let event = msg["event"].as_str().unwrap_or_default().to_owned();
                    if event == "done" {
                        result = msg["result"].clone();
                    } else if event == "failed" {
                        failure = Some(msg["message"].to_string());
                    }
                    marks.insert(event, now);
                }
                None => eprintln!("driver: {line}"),
            },
            Err(mpsc::TryRecvError::Empty) => std::thread::sleep(Duration::from_millis(1)),
            Err(mpsc::TryRecvError::Disconnected) => break,
        }
        assert!(now < deadline, "the browser driver did not finish within 120 s; marks: {marks:?}");
    }
    let status = driver.0.wait().expect("driver exit");
    let log = stderr.join().unwrap_or_default();
    std::fs::write(out.join("driver.log"), &log).expect("write driver.log");
    assert!(
        status.success() && failure.is_none() && result.is_object(),
        "the browser driver failed ({status}): {failure:?}\n{log}"
    );
    std::fs::write(out.join("result.json"), serde_json::to_string_pretty(&result).unwrap_or_default())
        .expect("write result.json");

    // What Chromium offered and what it agreed to.
    let offer = result["offer"].as_str().unwrap_or_default();
    let answer = result["answer"].as_str().unwrap_or_default();
    assert!(offer.contains("opus/48000/2") && offer.contains("useinbandfec=1"), "{offer}");
    assert!(
        answer.contains("a=ice-lite") && answer.contains("urn:ietf:params:rtp-hdrext:ssrc-audio-level"),
        "{answer}"
    );
    for (name, page) in result["pages"].as_object().expect("pages") {
        let t = &page["transport"];
        assert_eq!(t["remote"], format!("udp {media} host"), "{name} reaches the server's one host candidate: {t}");
        assert_eq!(t["iceRole"], "controlling", "{name}: {t}");
        assert!(t["codec"].as_str().is_some_and(|c| c.starts_with("audio/opus/48000/2")), "{name}: {t}");
        assert!(t["packetsReceived"].as_u64().is_some_and(|n| n > 100), "{name} received the mix: {t}");
        println!("{name}: {t}");
    }

    // Each page hears the other two, not itself.
    let heard_a = &result["pages"]["alice"]["heard"];
    let heard_b = &result["pages"]["bob"]["heard"];
    println!("alice (default voice processing) hears: {heard_a}");
    println!("bob (voice processing off) hears: {heard_b}");
    for (name, heard, own, others) in
        [("alice", heard_a, ALICE_HZ, [BOB_HZ, RUST_HZ]), ("bob", heard_b, BOB_HZ, [ALICE_HZ, RUST_HZ])]
    {
        for f in others {
            assert!(db(heard, f) > HEARD_DB, "{name} does not hear {f} Hz: {heard}");
        }
        let quieter = db(heard, others[0]).min(db(heard, others[1]));
        assert!(
            db(heard, own) < ABSENT_DB && db(heard, own) < quieter - OWN_MARGIN_DB,
            "{name} hears its own {own} Hz tone: {heard}"
        );
        assert!(db(heard, CONTROL_HZ) < ABSENT_DB, "{name}'s noise floor: {heard}");
    }

    // The Rust client heard both pages, not itself.
    let (from, to) = (marks["measure_start"], marks["measure_end"]);
    let amp = |f| heard_between(&rust, f, from, to);
    println!(
        "the Rust client hears: {ALICE_HZ} Hz {:.4}, {BOB_HZ} Hz {:.4}, own {:.4}",
        amp(ALICE_HZ),
        amp(BOB_HZ),
        amp(RUST_HZ)
    );
    assert!(amp(ALICE_HZ) > HEARD_AMP && amp(BOB_HZ) > HEARD_AMP, "the Rust client hears both pages");
    assert!(amp(RUST_HZ) < ABSENT_AMP, "the Rust client does not hear itself");

    // The page lists everyone and shows the others talking.
    let listed = names(&result["listed"]);
    assert_eq!(listed.len(), 3, "{listed:?}");
    for name in ["alice", "bob", "900 Hz"] {
        assert!(listed.contains(&name), "{name} is listed: {listed:?}");
    }
    let mut talking = names(&result["talkingIndicators"]);
    talking.sort_unstable();
    assert_eq!(talking, ["900 Hz", "bob"], "alice's page shows the others talking");
    let screenshot = out.join("call.png");
    let size = std::fs::metadata(&screenshot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 10_000, "a screenshot of the call ({size} bytes)");
    println!("screenshot of the call: {}", screenshot.display());

    // A fourth person finds the room full, in words.
    let full = &result["roomFull"];
    assert_eq!(full["state"]["error"]["code"], "room_full", "{full}");
    let shown = full["shown"].as_str().unwrap_or_default();
    assert!(shown.contains("is full"), "the page says the room is full: {shown:?}");

    // Someone who refuses the microphone is told so; the room their link named was created.
    let denied = &result["micDenied"];
    assert_eq!(denied["state"]["error"]["code"], "mic_denied", "{denied}");
    let shown = denied["shown"].as_str().unwrap_or_default();
    assert!(shown.contains("Microphone access was denied"), "the page says the microphone was refused: {shown:?}");
    assert_eq!(http(api, "GET", "/v1/rooms/no-microphone", None, b"").status, 200, "the page created its room");

    // Muted, alice is silent for bob and the Rust client; unmuted, heard again.
    let muted = &result["mutedHeardB"];
    assert!(db(muted, ALICE_HZ) < ABSENT_DB, "bob still hears alice while she is muted: {muted}");
    assert!(db(muted, RUST_HZ) > HEARD_DB, "bob still hears the Rust client: {muted}");
    assert_eq!(result["muteButton"], json!({ "text": "Unmute", "pressed": "true" }));
    let (from, to) = (marks["muted_start"], marks["muted_end"]);
    assert!(heard_between(&rust, ALICE_HZ, from, to) < ABSENT_AMP, "the Rust client hears muted alice");
    assert!(heard_between(&rust, BOB_HZ, from, to) > HEARD_AMP, "the Rust client hears bob");
    let unmuted = &result["unmutedHeardB"];
    assert!(db(unmuted, ALICE_HZ) > HEARD_DB, "bob hears alice again once she unmutes: {unmuted}");

    // The stage: a raised hand shows, a moderator lowers it and locks the room.
    let stage = &result["stage"];
    assert_eq!(stage["adminBar"], true, "a moderator's page shows its controls: {stage}");
    assert_eq!(stage["handTag"], true, "alice's page shows bob's hand: {stage}");
    assert_eq!(stage["handButton"], "Lower hand", "{stage}");
    assert_eq!(stage["actions"], json!(["revoke", "lower", "kick", "ban"]), "{stage}");
    assert_eq!(stage["lockButton"], "Unlock room", "{stage}");

    // Leaving.
    let after = &result["afterLeave"];
    assert_eq!(after["a"]["phase"], "left", "{after}");
    let mut left = names(&after["b"]);
    left.sort_unstable();
    assert_eq!(left, ["900 Hz", "bob"], "bob's page no longer lists alice: {after}");
    assert!(after["notice"].as_str().is_some_and(|n| n.contains("You left")), "{after}");

    rust.close();
    rt.block_on(server.shutdown());
    println!(
        "browser test: {:.1} s in all ({:.1} s making sure Chromium and playwright-core are there; driver {} s; Chromium {})",
        t0.elapsed().as_secs_f64(),
        ready.as_secs_f64(),
        result["seconds"],
        result["chromium"],
    );
}
