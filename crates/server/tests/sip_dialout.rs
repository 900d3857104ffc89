//! Dial-out with real SIP peers: Debian's baresip (installed with apt-get
//! when missing) waits for calls on loopback behind an `[[sip.outbound]]`
//! trunk, and `POST /v1/rooms/{room}/calls` calls it.
//!
//! - An auto-answering baresip (`answermode=auto`) playing 600 Hz: with
//!   `wait` the API answers 201 with the participant's id once it answered;
//!   the room lists it with its `sip.*` attributes (`direction` outbound),
//!   a WebRTC participant hears its 600 Hz, and when the call reaches its
//!   `max_duration_seconds` tutti hangs up and what baresip heard (its
//!   `sndfile` dump) holds the room's 440 Hz. The room's socket is told
//!   `call_answered`.
//! - A baresip that answers by hand (`answermode=manual`) rings: a call with
//!   a 3 s ringing timeout comes back 504 `no_answer` with `sip_status` 408
//!   (and `call_ringing`, `call_failed` on the room's socket); a call it
//!   rejects (`/hangup` on its console: 486) comes back 409 `callee_busy`
//!   with `sip_status` 486. Nobody joins the room.
//! - Refused at once: an unknown trunk (400), the room's call limit (429);
//!   without the SIP edge, 503 `sip_off`.

mod common;
mod ops_tools;

use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{create_room, room, start_with, test_config};
use ops_tools::{ensure_tool, temp_dir};
use tutti_client::{JoinAs, ToneClient, run_until};
use tutti_server::Config;
use tutti_server::OutboundConfig;

/// A UDP port nobody holds on 127.0.0.1, with TCP on it and on the next
/// port free too (baresip binds UDP and TCP there, TLS on the next one).
fn sip_port() -> u16 {
    (0..100)
        .find_map(|_| {
            let port = UdpSocket::bind("127.0.0.1:0").and_then(|s| s.local_addr()).ok()?.port();
            let next = port.checked_add(1)?;
            let tcp = |p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
            (tcp(port) && tcp(next)).then_some(port)
        })
        .expect("a free SIP port")
}

/// A baresip waiting for calls at `sip:callee@<addr>`: `answermode`
/// `auto` or `manual`; plays 600 Hz, dumps what it hears.
struct Callee {
    dir: std::path::PathBuf,
    child: std::process::Child,
    addr: SocketAddr,
    console: u16,
}

impl Callee {
    fn start(answermode: &str) -> Self {
        let baresip = ensure_tool("baresip", "baresip-core");
        let dir = temp_dir("baresip-callee");
        std::fs::create_dir_all(dir.join("dumps")).expect("a dump directory");
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 48_000,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut wav = hound::WavWriter::create(dir.join("tone.wav"), spec).expect("a WAV");
        for n in 0..48_000 * 40 {
            let phase = std::f32::consts::TAU * 600.0 * n as f32 / 48_000.0;
            wav.write_sample((0.3 * phase.sin() * 32767.0) as i16).expect("a sample");
        }
        wav.finalize().expect("the WAV");
        let addr = SocketAddr::from(([127, 0, 0, 1], sip_port()));
        let console = UdpSocket::bind("127.0.0.1:0").and_then(|s| s.local_addr()).expect("a port").port();
        let config = format!(
            "poll_method epoll\nsip_listen {addr}\nnet_interface 127.0.0.1\n\
             audio_player aubridge,sink\naudio_source aufile,{tone}\naudio_alert aubridge,alert\n\
             ausrc_srate 48000\nausrc_channels 1\nauplay_srate 48000\nauplay_channels 1\n\
             rtp_ports 30200-30300\nopus_stereo no\nopus_sprop_stereo no\nsnd_path {dumps}\n\
             module_path /usr/lib/baresip/modules\nmodule aufile.so\nmodule aubridge.so\nmodule opus.so\n\
             module sndfile.so\nmodule cons.so\ncons_listen 127.0.0.1:{console}\n\
             module_app account.so\nmodule_app menu.so\n",
            tone = dir.join("tone.wav").display(),
            dumps = dir.join("dumps").display(),
        );
        std::fs::write(dir.join("config"), config).expect("baresip's config");
        let account = format!("<sip:callee@127.0.0.1>;regint=0;answermode={answermode};audio_codecs=opus/48000/2\n");
        std::fs::write(dir.join("accounts"), account).expect("baresip's accounts");
        let child = Command::new(&baresip)
            .arg("-f")
            .arg(&dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(dir.join("baresip.log")).expect("a log"))
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("baresip starts");
        let callee = Self { dir, child, addr, console };
        // Listening once its log says so (its modules loaded).
        let end = Instant::now() + Duration::from_secs(10);
        while !callee.log().contains("baresip is ready") && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(100));
        }
        callee
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("baresip.log")).unwrap_or_default()
    }

    /// Types `command` on its console (`/hangup`: rejects a ringing call with 486).
    fn type_command(&self, command: &str) {
        let console = UdpSocket::bind("127.0.0.1:0").expect("bind");
        console.send_to(format!("{command}\n").as_bytes(), ("127.0.0.1", self.console)).expect("send");
    }

    /// The amplitude of `hz` in the last 2 s of what it heard (the decoded dump), once it is written.
    fn heard(&self, hz: f32) -> f32 {
        let dumps = self.dir.join("dumps");
        let dump = std::fs::read_dir(&dumps)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().contains("dec"))
            .unwrap_or_else(|| panic!("no decoded dump\nbaresip:\n{}", self.log()));
        let mut reader = hound::WavReader::open(&dump).expect("a WAV dump");
        let rate = reader.spec().sample_rate as f32;
        let samples: Vec<f32> = reader.samples::<i16>().map(|s| f32::from(s.unwrap_or(0)) / 32768.0).collect();
        let tail = &samples[samples.len().saturating_sub((2.0 * rate) as usize)..];
        tutti_mix::goertzel(tail, hz * 48_000.0 / rate)
    }
}

impl Drop for Callee {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The SIP edge on loopback and an outbound trunk `phones` to `callee`.
fn dialout_config(callee: SocketAddr) -> Config {
    let mut cfg = test_config();
    cfg.rtp_in.trusted = vec!["127.0.0.0/8".into()];
    cfg.sip.enabled = true;
    cfg.sip.listen = "127.0.0.1:0".parse().expect("addr");
    cfg.sip.trusted = vec!["127.0.0.0/8".into()];
    cfg.sip.max_calls_per_room = 2;
    cfg.sip.outbound = vec![OutboundConfig {
        name: "phones".into(),
        address: callee.to_string(),
        from_user: "conference".into(),
        ..OutboundConfig::default()
    }];
    cfg
}

/// `POST /v1/rooms/{room}/calls` with `body`: the status and the JSON answer.
fn dial(api: SocketAddr, room: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
    let path = format!("/v1/rooms/{room}/calls");
    let r = common::http(api, "POST", &path, Some("application/json"), body.to_string().as_bytes());
    (r.status, serde_json::from_str(&r.body).unwrap_or_default())
}

/// Runs `clients` for `d`, gathering the socket's events into `seen`.
fn pump(clients: &mut [&mut ToneClient], ws: &mut common::Ws, seen: &mut Vec<serde_json::Value>, d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        tutti_client::run_for(clients, Duration::from_millis(10));
        while let Some(v) = ws.try_next() {
            seen.push(v);
        }
    }
}

#[test]
fn a_call_out_is_answered_joins_the_room_hears_it_and_ends_at_its_maximum_length() {
    let callee = Callee::start("auto");
    let (rt, server) = start_with(dialout_config(callee.addr));
    let api = server.http_addr();
    create_room(api, "dialout");
    let mut webrtc = ToneClient::join(api, "dialout", 440.0, JoinAs::Whip).expect("a WebRTC participant joins");
    let mut ws = common::Ws::connect(api, "dialout");

    // The POST waits for the answer: run the WebRTC client meanwhile.
    let to = format!("sip:callee@{}", callee.addr);
    let body = serde_json::json!({"to": to, "trunk": "phones", "name": "Callee", "wait": true,
        "max_duration_seconds": 10, "ringing_timeout_seconds": 8});
    let asked = std::thread::spawn(move || dial(api, "dialout", body));
    let mut seen = Vec::new();
    pump(&mut [&mut webrtc], &mut ws, &mut seen, Duration::from_millis(200));
    while !asked.is_finished() {
        pump(&mut [&mut webrtc], &mut ws, &mut seen, Duration::from_millis(100));
    }
    let (status, answer) = asked.join().expect("the request");
    assert_eq!(status, 201, "{answer}\nbaresip:\n{}", callee.log());
    assert_eq!(answer["state"], "answered", "{answer}");
    let id = answer["id"].as_u64().expect("the participant's id");
    let call_id = answer["call_id"].as_str().expect("a call id").to_owned();

    // The callee is in the room, carrying the call's attributes.
    let listed = room(api, "dialout");
    let callee_row = listed["participants"].as_array().into_iter().flatten().find(|p| p["id"] == id).cloned();
    let callee_row = callee_row.unwrap_or_else(|| panic!("participant {id} is listed: {listed}"));
    assert_eq!(callee_row["name"], "Callee", "{listed}");
    let attributes = &callee_row["attributes"];
    assert_eq!(attributes["sip.direction"], "outbound", "{listed}");
    assert_eq!(attributes["sip.trunk"], "phones", "{listed}");
    assert_eq!(attributes["sip.call_id"], call_id.as_str(), "{listed}");
    assert_eq!(attributes["sip.to"], to.as_str(), "{listed}");

    // The WebRTC participant hears the callee's 600 Hz.
    let mut refs = [&mut webrtc];
    run_until(&mut refs, Instant::now() + Duration::from_secs(6), |cs| {
        cs[0].hears(600.0, Instant::now() - Duration::from_secs(2)) > 0.05
    });
    let hears600 = webrtc.hears(600.0, Instant::now() - Duration::from_secs(2));
    assert!(hears600 > 0.05, "the WebRTC participant hears the callee at {hears600}\n{}", callee.log());

    // At max_duration_seconds tutti hangs up: the callee leaves the room.
    let end = Instant::now() + Duration::from_secs(15);
    let in_room = || room(api, "dialout")["participants"].as_array().is_some_and(|p| p.iter().any(|p| p["id"] == id));
    while in_room() && Instant::now() < end {
        pump(&mut [&mut webrtc], &mut ws, &mut seen, Duration::from_millis(200));
    }
    assert!(!in_room(), "the call ends at its maximum length: {}", room(api, "dialout"));
    pump(&mut [&mut webrtc], &mut ws, &mut seen, Duration::from_millis(1000));
    let answered = seen.iter().find(|v| v["type"] == "call_answered");
    assert_eq!(answered.map(|v| (v["id"].clone(), v["call_id"].clone())), Some((id.into(), call_id.into())));

    // What baresip heard holds the room's 440 Hz, not its own 600 Hz.
    let (heard440, heard600) = (callee.heard(440.0), callee.heard(600.0));
    eprintln!("WebRTC hears 600 Hz {hears600:.3}; baresip heard 440 Hz {heard440:.3}, 600 Hz {heard600:.3}");
    assert!(heard440 > 0.03, "baresip hears the room's 440 Hz only at {heard440}\n{}", callee.log());
    assert!(heard600 < 0.01, "baresip hears itself at {heard600}");
    rt.block_on(server.shutdown());
}

#[test]
fn a_call_not_answered_in_time_or_rejected_comes_back_with_its_sip_status() {
    let callee = Callee::start("manual");
    let (rt, server) = start_with(dialout_config(callee.addr));
    let api = server.http_addr();
    create_room(api, "ring");
    let mut ws = common::Ws::connect(api, "ring");
    let to = format!("sip:callee@{}", callee.addr);

    // Refused at once: a trunk that does not exist, digits that are not keys.
    let (status, body) = dial(api, "ring", serde_json::json!({"to": to, "trunk": "nope"}));
    assert_eq!((status, body["code"].as_str()), (400, Some("unknown_trunk")), "{body}");
    let (status, body) = dial(api, "ring", serde_json::json!({"to": to, "trunk": "phones", "digits": "12x"}));
    assert_eq!((status, body["code"].as_str()), (400, Some("bad_digits")), "{body}");

    // Ringing for 3 s, nobody answers: 504 no_answer, SIP 408.
    let started = Instant::now();
    let (status, body) =
        dial(api, "ring", serde_json::json!({"to": to, "trunk": "phones", "wait": true, "ringing_timeout_seconds": 3}));
    assert_eq!(
        (status, body["code"].as_str(), body["sip_status"].as_u64()),
        (504, Some("no_answer"), Some(408)),
        "{body}\n{}",
        callee.log()
    );
    assert!(started.elapsed() >= Duration::from_secs(3), "it rang for its timeout: {:?}", started.elapsed());

    // Rejected by the callee (its /hangup on a ringing call: 486).
    let body = serde_json::json!({"to": to, "trunk": "phones", "wait": true, "ringing_timeout_seconds": 8});
    let asked = std::thread::spawn(move || dial(api, "ring", body));
    std::thread::sleep(Duration::from_millis(1500));
    callee.type_command("/hangup");
    let (status, body) = asked.join().expect("the request");
    assert_eq!(
        (status, body["code"].as_str(), body["sip_status"].as_u64()),
        (409, Some("callee_busy"), Some(486)),
        "{body}\n{}",
        callee.log()
    );

    // Nobody joined; the room's socket was told the calls rang and failed.
    assert_eq!(room(api, "ring")["participants"].as_array().map(Vec::len), Some(0));
    let mut seen = Vec::new();
    pump(&mut [], &mut ws, &mut seen, Duration::from_millis(800));
    let kinds: Vec<&str> = seen.iter().filter_map(|v| v["type"].as_str()).filter(|t| t.starts_with("call_")).collect();
    assert_eq!(kinds, ["call_ringing", "call_failed", "call_ringing", "call_failed"], "{seen:?}");
    let statuses: Vec<u64> =
        seen.iter().filter(|v| v["type"] == "call_failed").filter_map(|v| v["sip_status"].as_u64()).collect();
    assert_eq!(statuses, [408, 486]);
    rt.block_on(server.shutdown());
}

#[test]
fn without_the_sip_edge_dial_out_is_refused() {
    let (rt, server) = start_with(test_config());
    let api = server.http_addr();
    create_room(api, "quiet");
    let (status, body) = dial(api, "quiet", serde_json::json!({"to": "sip:a@127.0.0.1:5999", "trunk": "phones"}));
    assert_eq!((status, body["code"].as_str()), (503, Some("sip_off")), "{body}");
    rt.block_on(server.shutdown());
}
