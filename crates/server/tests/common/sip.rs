//! Helpers of the SIP tests (tests/sip*.rs): a server with the SIP edge
//! and a talker in a room, baresip dialling in, tone analysis of what it
//! heard, a raw SIP caller on a UDP socket (requests, responses, headers). Included with
//! `#[path = "common/sip.rs"] mod sip_common;` by a test that declares
//! `mod common;` and `mod ops_tools;` (not a part of `common`: most tests
//! have no use for baresip).
#![allow(dead_code)]

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{create_room, room, scrape, series, start_with, test_config};
use crate::ops_tools::{ensure_tool, temp_dir};
use tutti_client::{JoinAs, ToneClient, run_until};
use tutti_server::Config;

/// Test settings with the SIP edge on a loopback port, trusting loopback
/// for SIP (`sip_trusted`) and for the callers' RTP.
pub fn sip_config(sip_trusted: &str) -> Config {
    let mut cfg = test_config();
    cfg.rtp_in.trusted = vec!["127.0.0.0/8".into()];
    cfg.sip.enabled = true;
    cfg.sip.listen = "127.0.0.1:0".parse().expect("addr");
    cfg.sip.trusted = vec![sip_trusted.into()];
    cfg
}

/// The names of the room's participants.
pub fn roster(api: SocketAddr, id: &str) -> Vec<String> {
    room(api, id)["participants"]
        .as_array()
        .expect("participants")
        .iter()
        .map(|p| p["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Waits up to `within` for `ok` on the room's roster.
pub fn wait_roster(api: SocketAddr, id: &str, within: Duration, ok: impl Fn(&[String]) -> bool) -> Vec<String> {
    let end = Instant::now() + within;
    loop {
        let names = roster(api, id);
        if ok(&names) || Instant::now() > end {
            return names;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A mono WAV at `rate` Hz of `seconds` of `freq` Hz at amplitude 0.3.
pub fn write_tone(path: &Path, freq: f32, seconds: u32, rate: u32) {
    let spec =
        hound::WavSpec { channels: 1, sample_rate: rate, bits_per_sample: 16, sample_format: hound::SampleFormat::Int };
    let mut w = hound::WavWriter::create(path, spec).expect("create the WAV");
    for i in 0..rate * seconds {
        let x = 0.3 * (std::f32::consts::TAU * freq * i as f32 / rate as f32).sin();
        w.write_sample((x * 32767.0) as i16).expect("write a sample");
    }
    w.finalize().expect("finish the WAV");
}

/// Amplitude of `freq` in the last `seconds` of a WAV (first channel), at its own rate.
pub fn wav_tone(path: &Path, freq: f32, seconds: f32) -> f32 {
    let mut r = hound::WavReader::open(path).expect("a WAV");
    let spec = r.spec();
    let ch = usize::from(spec.channels);
    let all: Vec<f32> = r.samples::<i16>().step_by(ch).map(|s| f32::from(s.unwrap_or(0)) / 32768.0).collect();
    let n = ((seconds * spec.sample_rate as f32) as usize).min(all.len());
    // goertzel reads at 48 kHz: scale the frequency to the file's rate.
    tutti_mix::goertzel(&all[all.len() - n..], freq * 48_000.0 / spec.sample_rate as f32)
}

pub fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").and_then(|s| s.local_addr()).map(|a| a.port()).expect("a free port")
}

/// A port for baresip's `sip_listen` on `ip`: it binds UDP and TCP there
/// and TLS on the next port, so all of them must be free (a clash once
/// failed a test with "SIP/TLS transport failed: Address already in use").
pub fn free_sip_port(ip: &str) -> u16 {
    for _ in 0..100 {
        let port = free_udp_port();
        let Some(next) = port.checked_add(1) else { continue };
        let free = std::net::TcpListener::bind((ip, port)).is_ok()
            && std::net::TcpListener::bind((ip, next)).is_ok()
            && UdpSocket::bind((ip, port)).is_ok();
        if free {
            return port;
        }
    }
    panic!("no port with its next one free on {ip}")
}

/// Where baresip calls from (its SIP and RTP address) and what its account
/// line adds (digest credentials, `;auth_user=…;auth_pass=…`).
pub struct Caller<'a> {
    pub ip: &'a str,
    pub account: &'a str,
}

/// baresip on 127.0.0.1 without credentials.
pub const LOCAL: Caller<'static> = Caller { ip: "127.0.0.1", account: "" };

/// A baresip call to a room: its directory (config, tone, log, dumps), its
/// process and its UDP console's port.
pub struct Baresip {
    pub dir: std::path::PathBuf,
    pub child: std::process::Child,
    pub cons_port: u16,
}

impl Baresip {
    /// baresip with codec module `module` only (`opus.so`, `g711.so`),
    /// offering `codecs` (its account's `audio_codecs`) at `rate` Hz: dials
    /// `room` at `sip`, plays a 600 Hz WAV, dumps what it hears (sndfile),
    /// quits (BYE) after `call_seconds`; from `caller`.
    pub fn dial(
        sip: SocketAddr,
        room: &str,
        module: &str,
        codecs: &str,
        rate: u32,
        call_seconds: u32,
        caller: &Caller,
    ) -> Self {
        let uri = format!("sip:{room}@{sip}");
        Self::call(&uri, "", module, codecs, rate, call_seconds, caller)
    }

    /// [`Baresip::dial`] to `uri` (`sip:standup@…;transport=tcp`), with
    /// `extra` lines in its config (`sip_cafile …`).
    pub fn call(
        uri: &str,
        extra: &str,
        module: &str,
        codecs: &str,
        rate: u32,
        call_seconds: u32,
        caller: &Caller,
    ) -> Self {
        let baresip = ensure_tool("baresip", "baresip-core");
        let dir = temp_dir("baresip");
        let dumps = dir.join("dumps");
        std::fs::create_dir_all(&dumps).expect("a dump directory");
        write_tone(&dir.join("tone.wav"), 600.0, 30, rate);
        // baresip's UDP console (`cons`): a datagram's characters are keys, a key in a call is sent as RFC 4733.
        let cons_port = free_udp_port();
        let config = format!(
            "poll_method epoll\nsip_listen {ip}:{port}\nnet_interface {ip}\n\
             audio_player aubridge,sink\naudio_source aufile,{tone}\naudio_alert aubridge,alert\n\
             ausrc_srate {rate}\nausrc_channels 1\nauplay_srate {rate}\nauplay_channels 1\n\
             rtp_ports 30000-30100\nopus_stereo no\nopus_sprop_stereo no\nsnd_path {dumps}\n\
             module_path /usr/lib/baresip/modules\nmodule aufile.so\nmodule aubridge.so\nmodule {module}\n\
             module sndfile.so\nmodule srtp.so\nmodule cons.so\ncons_listen 127.0.0.1:{cons}\n\
             module_app account.so\nmodule_app menu.so\n{extra}",
            ip = caller.ip,
            port = free_sip_port(caller.ip),
            cons = cons_port,
            tone = dir.join("tone.wav").display(),
            dumps = dumps.display(),
        );
        std::fs::write(dir.join("config"), config).expect("write baresip's config");
        std::fs::write(
            dir.join("accounts"),
            format!("<sip:caller@{}>;regint=0;audio_codecs={codecs}{}\n", caller.ip, caller.account),
        )
        .expect("write baresip's accounts");
        let mut cmd = Command::new(&baresip);
        cmd.arg("-f")
            .arg(&dir)
            .args(["-e", &format!("/dial {uri}"), "-t", &call_seconds.to_string()])
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(dir.join("baresip.log")).expect("a log file"))
            .stderr(std::process::Stdio::null());
        let child = cmd.spawn().expect("baresip starts");
        Self { dir, child, cons_port }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("baresip.log")).unwrap_or_default()
    }

    /// Waits (running `webrtc`) until baresip quits, up to `within`.
    pub fn wait(&mut self, webrtc: &mut ToneClient, within: Duration) {
        let mut refs = [webrtc];
        let child = &mut self.child;
        run_until(&mut refs, Instant::now() + within, |_| !matches!(child.try_wait(), Ok(None)));
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            panic!("baresip did not quit in {within:?}\n{}", self.log());
        }
    }

    /// The amplitudes of 440 Hz and 600 Hz in the last 3 s of what baresip heard (sndfile's decoded dump).
    pub fn heard(&self) -> (f32, f32) {
        let dump = self.dump();
        (wav_tone(&dump, 440.0, 3.0), wav_tone(&dump, 600.0, 3.0))
    }

    /// sndfile's decoded dump: what baresip heard.
    pub fn dump(&self) -> std::path::PathBuf {
        let dumps = self.dir.join("dumps");
        std::fs::read_dir(&dumps)
            .expect("the dump directory")
            .flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().contains("dec"))
            .unwrap_or_else(|| panic!("no decoded dump in {}\nbaresip:\n{}", dumps.display(), self.log()))
    }
}

impl Drop for Baresip {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Its tone and dumps are a few MB: not left behind in the temporary directory.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits up to 6 s (running `webrtc`) for it to hear 600 Hz over the last 2 s; returns the amplitude.
pub fn hears_600(webrtc: &mut ToneClient) -> f32 {
    let mut refs = [webrtc];
    run_until(&mut refs, Instant::now() + Duration::from_secs(6), |cs| {
        cs[0].hears(600.0, Instant::now() - Duration::from_secs(2)) > 0.05
    });
    refs[0].hears(600.0, Instant::now() - Duration::from_secs(2))
}

/// The attributes of the participant named `caller` in room `id`, and the room's listing.
pub fn caller_attributes(api: SocketAddr, id: &str) -> (serde_json::Value, serde_json::Value) {
    let listed = room(api, id);
    let caller = listed["participants"].as_array().into_iter().flatten().find(|p| p["name"] == "caller").cloned();
    (caller.map(|c| c["attributes"].clone()).unwrap_or_default(), listed)
}

/// The call talks both ways: `webrtc` hears baresip's 600 Hz, and once
/// baresip quits (after `call_seconds`), what it heard holds the room's
/// 440 Hz and not its own 600 Hz. `who` names the caller in the messages.
pub fn talks_both_ways(baresip: &mut Baresip, webrtc: &mut ToneClient, call_seconds: u32, who: &str) {
    let hears600 = hears_600(webrtc);
    assert!(hears600 > 0.05, "the WebRTC participant hears {who} at {hears600}\n{}", baresip.log());
    baresip.wait(webrtc, Duration::from_secs(u64::from(call_seconds) + 5));
    let (mix440, mix600) = baresip.heard();
    eprintln!("{who}: WebRTC hears 600 Hz {hears600:.3}; baresip heard 440 Hz {mix440:.3}, 600 Hz {mix600:.3}");
    assert!(mix440 > 0.03, "{who} hears the WebRTC 440 Hz only at {mix440}");
    assert!(mix600 < 0.01, "{who} hears itself at {mix600}");
}

/// A server with the SIP edge, room `id` and a WebRTC participant in it
/// playing 440 Hz; the API's and the SIP edge's addresses.
pub fn room_with_talker(
    id: &str,
) -> (tokio::runtime::Runtime, tutti_server::Server, SocketAddr, SocketAddr, ToneClient) {
    room_with_talker_on(sip_config("127.0.0.0/8"), id)
}

/// [`room_with_talker`] on a server with `cfg`.
pub fn room_with_talker_on(
    cfg: Config,
    id: &str,
) -> (tokio::runtime::Runtime, tutti_server::Server, SocketAddr, SocketAddr, ToneClient) {
    let (rt, server) = start_with(cfg);
    let (api, sip) = (server.http_addr(), server.sip_addr().expect("the SIP edge is on"));
    create_room(api, id);
    let webrtc = ToneClient::join(api, id, 440.0, JoinAs::Whip).expect("a WebRTC participant joins");
    (rt, server, api, sip, webrtc)
}

/// Settings with one inbound trunk and no `[sip] trusted`: `carrier`, from
/// 127.0.0.1 only, digest credentials `acme` / `s3cret`, numbers `standup`
/// and `lobby` only.
pub fn trunk_config() -> Config {
    let mut cfg = sip_config("127.0.0.1/32");
    cfg.sip.trusted.clear();
    cfg.sip.trunks = vec![tutti_server::TrunkConfig {
        name: "carrier".into(),
        networks: vec!["127.0.0.1/32".into()],
        username: "acme".into(),
        password: "s3cret".into(),
        numbers: vec!["standup".into(), "lobby".into()],
        // Debian's baresip (libre 1.x) gives up on a SHA-256 challenge: MD5 only.
        digest: vec!["MD5".into()],
        ..tutti_server::TrunkConfig::default()
    }];
    cfg
}

/// The trunk's credentials on baresip's account line.
pub const GOOD: &str = ";auth_user=acme;auth_pass=s3cret";

/// `tutti_sip_refused_total{reason}` now (0 when not yet counted).
pub fn refused(server: &tutti_server::Server, reason: &str) -> f64 {
    let m = server.metrics_addr().expect("test servers export metrics");
    scrape(m).get(&series("tutti_sip_refused_total", &[("reason", reason)])).copied().unwrap_or(0.0)
}

/// Waits up to 8 s for baresip's log to hold `status` (`403 Forbidden`: its call closed with it).
pub fn closed_with(baresip: &Baresip, status: &str) -> String {
    let end = Instant::now() + Duration::from_secs(8);
    while Instant::now() < end && !baresip.log().contains(status) {
        std::thread::sleep(Duration::from_millis(100));
    }
    baresip.log()
}

/// A SIP request from the test's UDP socket.
pub fn request(method: &str, ruri: &str, local: SocketAddr, call: &str, sdp: &str) -> String {
    let ctype = if sdp.is_empty() { String::new() } else { "Content-Type: application/sdp\r\n".to_owned() };
    format!(
        "{method} {ruri} SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bK{call};rport\r\nMax-Forwards: 70\r\n\
         From: <sip:probe@{ip}>;tag=t{call}\r\nTo: <{ruri}>\r\nCall-ID: {call}@test\r\nCSeq: 1 {method}\r\n\
         Contact: <sip:probe@{local}>\r\n{ctype}Content-Length: {len}\r\n\r\n{sdp}",
        ip = local.ip(),
        len = sdp.len(),
    )
}

/// The status codes of the responses to `call` within `within` (the last one final).
pub fn statuses(socket: &UdpSocket, call: &str, within: Duration) -> Vec<u16> {
    let end = Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < end {
        let Ok(n) = socket.recv(&mut buf) else { continue };
        let text = String::from_utf8_lossy(&buf[..n]);
        if !text.contains(&format!("Call-ID: {call}@test")) && !text.contains(&format!("i: {call}@test")) {
            continue;
        }
        if let Some(code) = text.strip_prefix("SIP/2.0 ").and_then(|t| t.get(..3)).and_then(|c| c.parse().ok()) {
            got.push(code);
            if code >= 200 {
                break;
            }
        }
    }
    got
}

/// The first message within `within` that `want` takes.
pub fn receive(socket: &UdpSocket, within: Duration, want: impl Fn(&str) -> bool) -> Option<String> {
    let end = Instant::now() + within;
    let mut buf = [0u8; 4096];
    while Instant::now() < end {
        let Ok(n) = socket.recv(&mut buf) else { continue };
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        if want(&text) {
            return Some(text);
        }
    }
    None
}

/// The next request `method` tutti sends (a BYE), within `within`.
pub fn next_request(socket: &UdpSocket, method: &str, within: Duration) -> Option<String> {
    receive(socket, within, |text| text.starts_with(&format!("{method} ")))
}

/// A header's value in a SIP message (full name or compact form).
pub fn header<'a>(msg: &'a str, name: &str, compact: &str) -> &'a str {
    msg.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim().eq_ignore_ascii_case(name) || k.trim().eq_ignore_ascii_case(compact)).then_some(v.trim())
        })
        .unwrap_or_default()
}

/// The final response to `call`'s INVITE, whole.
pub fn final_response(socket: &UdpSocket, call: &str, within: Duration) -> Option<String> {
    receive(socket, within, |text| {
        text.starts_with("SIP/2.0 ")
            && !text.starts_with("SIP/2.0 1")
            && header(text, "Call-ID", "i") == format!("{call}@test")
            && header(text, "CSeq", "").ends_with("INVITE")
    })
}

/// The in-dialog request `method` (CSeq `seq`) of `call` after a 200 whose To carries tutti's tag.
pub fn in_dialog(method: &str, local: SocketAddr, call: &str, to: &str, seq: u32) -> String {
    format!(
        "{method} sip:tutti@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bK{call}{method}{seq};rport\r\n\
         Max-Forwards: 70\r\nFrom: <sip:probe@{ip}>;tag=t{call}\r\nTo: {to}\r\nCall-ID: {call}@test\r\n\
         CSeq: {seq} {method}\r\nContent-Length: 0\r\n\r\n",
        ip = local.ip(),
    )
}

pub fn ask(socket: &UdpSocket, to: SocketAddr, method: &str, ruri: &str, call: &str, sdp: &str) -> Vec<u16> {
    let local = socket.local_addr().expect("bound");
    socket.send_to(request(method, ruri, local, call, sdp).as_bytes(), to).expect("send");
    statuses(socket, call, Duration::from_secs(3))
}

pub fn offer(codec: &str, port: u16) -> String {
    format!(
        "v=0\r\no=t 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
         m=audio {port} RTP/AVP 96\r\na=rtpmap:96 {codec}\r\n"
    )
}

/// A server (`cfg`), a room `id`, and the test's UDP socket (the caller).
pub fn raw_caller(cfg: Config, id: &str) -> (tokio::runtime::Runtime, tutti_server::Server, UdpSocket) {
    let (rt, server) = start_with(cfg);
    create_room(server.http_addr(), id);
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket.set_read_timeout(Some(Duration::from_millis(100))).expect("timeout");
    (rt, server, socket)
}

/// A re-INVITE of `call` (CSeq `seq`) carrying `sdp`.
pub fn reinvite(local: SocketAddr, call: &str, to: &str, seq: u32, sdp: &str) -> String {
    in_dialog_with("INVITE", local, call, to, seq, "", sdp)
}

/// The in-dialog request `method` of `call` with `extra` headers (each
/// ending in CRLF) and `sdp` (none when empty).
pub fn in_dialog_with(
    method: &str,
    local: SocketAddr,
    call: &str,
    to: &str,
    seq: u32,
    extra: &str,
    sdp: &str,
) -> String {
    let head = in_dialog(method, local, call, to, seq);
    let head = head.trim_end_matches("Content-Length: 0\r\n\r\n");
    let ctype = if sdp.is_empty() { "" } else { "Content-Type: application/sdp\r\n" };
    format!("{head}Contact: <sip:probe@{local}>\r\n{extra}{ctype}Content-Length: {}\r\n\r\n{sdp}", sdp.len())
}

/// Presses `keys` on baresip's UDP console (each held 200 ms, then released:
/// sent as RFC 4733), running `webrtc` meanwhile.
pub fn press_on_baresip(baresip: &Baresip, keys: &str, webrtc: &mut ToneClient) {
    let console = UdpSocket::bind("127.0.0.1:0").expect("bind");
    for key in keys.bytes() {
        for datagram in [&[key][..], &[0x04]] {
            console.send_to(datagram, ("127.0.0.1", baresip.cons_port)).expect("send a key");
            let mut refs = [&mut *webrtc];
            run_until(&mut refs, Instant::now() + Duration::from_millis(200), |_| false);
        }
    }
}

/// Runs `webrtc` until baresip's call is answered (its log says so), up to 10 s.
pub fn answered(baresip: &Baresip, webrtc: &mut ToneClient) -> bool {
    let mut refs = [webrtc];
    run_until(&mut refs, Instant::now() + Duration::from_secs(10), |_| baresip.log().contains("established"));
    baresip.log().contains("established")
}

/// RMS of what baresip heard (sndfile's decoded dump), and the amplitude of 440 Hz in all of it.
pub fn heard_energy(baresip: &Baresip) -> (f32, f32) {
    let dump = baresip.dump();
    let mut r = hound::WavReader::open(&dump).expect("a WAV");
    let all: Vec<f32> = r.samples::<i16>().map(|s| f32::from(s.unwrap_or(0)) / 32768.0).collect();
    let rms = (all.iter().map(|x| x * x).sum::<f32>() / all.len().max(1) as f32).sqrt();
    let seconds = all.len() as f32 / r.spec().sample_rate as f32;
    (rms, wav_tone(&dump, 440.0, seconds))
}

/// baresip with codec `module` offering `codecs` at `rate` Hz enters a wrong
/// PIN twice (prompts heard, BYE, never a participant), then the right one
/// (joins, talks both ways); `who` names it in the messages.
pub fn pin_wrong_then_right(module: &str, codecs: &str, rate: u32, who: &str) {
    let mut cfg = sip_config("127.0.0.0/8");
    cfg.sip.pin = true;
    cfg.sip.pins = vec!["4711=standup".into()];
    cfg.sip.pin_attempts = 2;
    cfg.sip.pin_digit_timeout_seconds = 5;
    let (rt, server, api, sip, mut webrtc) = room_with_talker_on(cfg, "standup");

    // Wrong, twice: "enter", "not valid", "enter", "not valid", "goodbye", BYE.
    let wrong = Baresip::dial(sip, "conference", module, codecs, rate, 60, &LOCAL);
    assert!(answered(&wrong, &mut webrtc), "a PIN call is answered at once:\n{}", wrong.log());
    press_on_baresip(&wrong, "12#", &mut webrtc);
    press_on_baresip(&wrong, "99#", &mut webrtc);
    let mut most = 0;
    let end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < end && !wrong.log().contains("session closed") {
        most = most.max(roster(api, "standup").len());
        let mut refs = [&mut webrtc];
        run_until(&mut refs, Instant::now() + Duration::from_millis(200), |_| false);
    }
    assert!(wrong.log().contains("session closed"), "tutti hangs up after the tries:\n{}", wrong.log());
    assert_eq!(most, 1, "a caller without the right PIN is never a participant");
    // At least: the metrics are the test process's, and the other codec's test may count too.
    assert!(refused(&server, "pin") >= 1.0, "the hang-up is counted");
    let (rms, room440) = heard_energy(&wrong);
    eprintln!("{who} with a wrong PIN heard RMS {rms:.4}, 440 Hz {room440:.4}");
    assert!(rms > 0.01, "the caller hears the spoken prompts (RMS {rms})");
    assert!(room440 < 0.01, "and never the room ({room440})");
    drop(wrong);

    // Right: it joins, hears the room's 440 Hz, and the WebRTC participant hears its 600 Hz.
    let call_seconds = 22;
    let mut right = Baresip::dial(sip, "conference", module, codecs, rate, call_seconds, &LOCAL);
    assert!(answered(&right, &mut webrtc), "{}", right.log());
    assert_eq!(roster(api, "standup").len(), 1, "answered, not yet a participant");
    press_on_baresip(&right, "4711#", &mut webrtc);
    let names = wait_roster(api, "standup", Duration::from_secs(12), |n| n.len() == 2);
    assert_eq!(names.len(), 2, "the right PIN joins its room: {names:?}\nbaresip:\n{}", right.log());
    talks_both_ways(&mut right, &mut webrtc, call_seconds, who);
    rt.block_on(server.shutdown());
}

/// Calls `room` at `sip` from `socket` (call `call`), offering a new RTP
/// socket with `media` (the m=audio line's formats, then its attributes);
/// acknowledges the 200. Returns the answer, its To, the RTP socket and the
/// answer's media port.
pub fn call_in(
    socket: &UdpSocket,
    sip: SocketAddr,
    room: &str,
    call: &str,
    media: &str,
) -> (String, String, UdpSocket, u16) {
    let local = socket.local_addr().expect("bound");
    let rtp = UdpSocket::bind("127.0.0.1:0").expect("bind an RTP socket");
    let port = rtp.local_addr().expect("bound").port();
    let sdp = format!(
        "v=0\r\no=t 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio {port} RTP/AVP {media}"
    );
    socket.send_to(request("INVITE", &format!("sip:{room}@{sip}"), local, call, &sdp).as_bytes(), sip).expect("send");
    let ok = final_response(socket, call, Duration::from_secs(3)).expect("a final answer");
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
    let to = header(&ok, "To", "t").to_owned();
    socket.send_to(in_dialog("ACK", local, call, &to, 1).as_bytes(), sip).expect("send");
    let port = media_port(&ok);
    (ok, to, rtp, port)
}

/// The m=audio port of an answer.
pub fn media_port(answer: &str) -> u16 {
    answer
        .lines()
        .find_map(|l| l.strip_prefix("m=audio "))
        .and_then(|l| l.split(' ').next())
        .and_then(|p| p.parse().ok())
        .expect("the answer's m=audio port")
}
