//! The SIP edge with a real SIP peer: Debian's baresip (installed with
//! apt-get when missing) dials `sip:standup@<tutti>` with Opus over plain
//! RTP. While the call is up the room lists the caller, a WebRTC
//! participant hears baresip's 600 Hz tone, and what baresip heard (its
//! `sndfile` dump) holds the WebRTC participant's 440 Hz; `*6` keyed on
//! baresip's UDP console (`cons`, sent as RFC 4733) mutes the caller and the
//! WebRTC participant stops hearing it; when baresip quits (BYE) the caller
//! leaves the roster. The same with baresip restricted to PCMU (its G.711
//! module only): the WebRTC participant hears it and it hears the room,
//! transcoded at its leg.
//!
//! Trunks: baresip calling with a trunk's digest credentials (its account's
//! `auth_user`/`auth_pass`, no registration) answers the 401 challenge and
//! talks with the room, its call carrying `sip.trunk`; with a wrong password
//! it gets 403 after the one challenge (and a raw INVITE with a wrong
//! response gets 403, not another 401); from 127.0.0.2, outside the trunk's
//! networks, 403; to a number the trunk does not take, 404.
//!
//! And with raw UDP from the test: OPTIONS gets 200 (a dispatcher's health
//! probe), an INVITE from a network outside `[sip] trusted` gets 403
//! (counted), an INVITE with neither Opus nor G.711 gets 488, an INVITE to a room that
//! does not exist 404, and garbage datagrams leave the endpoint answering.
//! BYE both ways: the caller's ends its participant; a participant tutti
//! removes (an admin, the media timeout) gets BYE; a CANCEL right behind the
//! INVITE leaves nobody in the room.
//!
//! The keypad, with a phone made in the test (Opus tone and RFC 4733 keys on
//! its own RTP socket): `telephone-event` is answered, `*6` mutes the phone
//! (the room says so, the WebRTC participant stops hearing its tone) and
//! each key is one `keypad` event on the room socket however often its end
//! is repeated; `*7` by SIP INFO raises its hand; digits sent through
//! `POST …/dtmf` arrive at the phone as RFC 4733 packets. A PCMA phone
//! (no Opus offered, 30 ms packets) is answered PCMA, heard by the WebRTC
//! participant, gets 160-byte packets holding the room's tone, and its
//! `*6` (telephone-event/8000) mutes it.
//!
//! SRTP: a trunk with `srtp = "require"` refuses a plain offer with 488
//! (its `Warning` saying what to offer) and takes baresip with
//! `mediaenc=srtp-mand` (RTP/SAVP, SDES `a=crypto`); while that call is up
//! 10,000 garbage datagrams hit the SIP port (random bytes, truncated and
//! mangled INVITEs, 32 KB headers, INVITEs with garbage SDP), after which
//! OPTIONS is answered, the call talks both ways (the WebRTC participant
//! hears baresip, baresip's last seconds hold the room's tone), no SRTP
//! packet failed, and nothing panicked.

mod common;
mod ops_tools;
#[path = "common/sip.rs"]
mod sip_common;

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{create_room, room, scrape, series, start_with};
use ops_tools::temp_dir;
use tutti_client::{JoinAs, ToneClient, run_until};
use tutti_server::Config;

use sip_common::*;

#[test]
fn baresip_dials_a_room_hears_its_talker_and_hangs_up() {
    let (rt, server, api, sip, mut webrtc) = room_with_talker("standup");

    // baresip: Opus only.
    let call_seconds: u32 = 12;
    let mut baresip = Baresip::dial(sip, "standup", "opus.so", "opus/48000/2", 48_000, call_seconds, &LOCAL);
    let cons_port = baresip.cons_port;
    let log = || baresip.log();

    // (a) The caller is listed while the call is up.
    let names = wait_roster(api, "standup", Duration::from_secs(6), |n| n.len() == 2);
    assert_eq!(names.len(), 2, "the caller joins the roster: {names:?}\nbaresip:\n{}", log());
    assert!(names.iter().any(|n| n == "caller"), "the caller is named by its From user: {names:?}");
    // It carries the call's attributes (reserved `sip.` keys).
    let (attributes, listed) = caller_attributes(api, "standup");
    assert_eq!(attributes["sip.from"], "caller", "{listed}");
    assert_eq!(attributes["sip.to"], "standup", "{listed}");
    assert!(attributes["sip.call_id"].as_str().is_some_and(|c| !c.is_empty()), "{listed}");

    // The WebRTC participant hears baresip's 600 Hz (judged over the last 2 s).
    let hears600 = hears_600(&mut webrtc);
    assert!(
        hears600 > 0.05,
        "the WebRTC participant hears the caller's 600 Hz only at {hears600}\nbaresip:\n{}",
        log()
    );

    // (d) Keys pressed on baresip (*6) mute the caller in the room.
    let console = UdpSocket::bind("127.0.0.1:0").expect("bind");
    // Each key, held 200 ms, then released (baresip's KEYCODE_REL, 0x04: the event's end).
    for key in [b"*", b"6"] {
        for datagram in [&key[..], &[0x04]] {
            console.send_to(datagram, ("127.0.0.1", cons_port)).expect("send a key");
            let mut refs = [&mut webrtc];
            run_until(&mut refs, Instant::now() + Duration::from_millis(200), |_| false);
        }
    }
    let muted = || {
        room(api, "standup")["participants"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["name"] == "caller" && p["muted"] == true)
    };
    let end = Instant::now() + Duration::from_secs(3);
    while !muted() && Instant::now() < end {
        let mut refs = [&mut webrtc];
        run_until(&mut refs, Instant::now() + Duration::from_millis(100), |_| false);
    }
    assert!(muted(), "baresip's *6 mutes it: {}\nbaresip:\n{}", room(api, "standup"), log());
    let mut refs = [&mut webrtc];
    run_until(&mut refs, Instant::now() + Duration::from_millis(1200), |_| false);
    let after = webrtc.hears(600.0, Instant::now() - Duration::from_secs(1));
    assert!(after < 0.01, "muted by its *6, baresip is no longer heard: {after} (was {hears600})");

    // (c) baresip quits after `-t` (BYE): the caller leaves the roster.
    baresip.wait(&mut webrtc, Duration::from_secs(u64::from(call_seconds) + 5));
    let names = wait_roster(api, "standup", Duration::from_secs(5), |n| n.len() == 1);
    assert_eq!(names.len(), 1, "after baresip's BYE the caller left: {names:?}\nbaresip:\n{}", baresip.log());

    // (b) What baresip heard (sndfile's decoded dump) holds the room's 440 Hz, not its own 600 Hz.
    let (mix440, mix600) = baresip.heard();
    eprintln!("WebRTC hears 600 Hz {hears600:.3}; baresip heard 440 Hz {mix440:.3}, 600 Hz {mix600:.3}");
    assert!(mix440 > 0.03, "baresip hears the WebRTC 440 Hz only at {mix440}");
    assert!(mix600 < 0.01, "baresip hears itself at {mix600}");
    rt.block_on(server.shutdown());
}

#[test]
fn baresip_with_pcmu_only_talks_with_the_room() {
    let (rt, server, api, sip, mut webrtc) = room_with_talker("trunk");

    // baresip: the G.711 module only, offering PCMU alone, at 8 kHz.
    let call_seconds: u32 = 8;
    let mut baresip = Baresip::dial(sip, "trunk", "g711.so", "PCMU/8000", 8_000, call_seconds, &LOCAL);
    let names = wait_roster(api, "trunk", Duration::from_secs(6), |n| n.len() == 2);
    assert_eq!(names.len(), 2, "the PCMU caller joins the roster: {names:?}\nbaresip:\n{}", baresip.log());
    assert!(baresip.log().contains("PCMU"), "the call is PCMU:\n{}", baresip.log());

    // Transcoded from and to PCMU (8 kHz) at its leg.
    talks_both_ways(&mut baresip, &mut webrtc, call_seconds, "the PCMU caller");
    rt.block_on(server.shutdown());
}

/// Sends `count` garbage datagrams to `sip` from `socket`, in turn: random
/// bytes, a truncated INVITE to `ruri`, an INVITE with bytes changed, one
/// with a 32 KB header, and a well-formed INVITE (its own Call-ID) whose
/// SDP is garbage.
fn send_garbage(socket: &UdpSocket, sip: SocketAddr, ruri: &str, count: usize) {
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let local = socket.local_addr().expect("bound");
    let good = request("INVITE", ruri, local, "g", &offer("opus/48000/2", 4));
    for i in 0..count {
        let len = (next() % 1400) as usize;
        let datagram: Vec<u8> = match i % 5 {
            0 => (0..len).map(|_| next() as u8).collect(),
            1 => good.as_bytes()[..len.min(good.len())].to_vec(),
            2 => {
                let mut b = good.clone().into_bytes();
                for _ in 0..8 {
                    let at = (next() as usize) % b.len();
                    b[at] = next() as u8;
                }
                b
            }
            3 => good
                .replacen("Max-Forwards: 70\r\n", &format!("X-Huge: {}\r\nMax-Forwards: 70\r\n", "h".repeat(32_000)), 1)
                .into_bytes(),
            _ => {
                let sdp: String = (0..len % 300)
                    .map(|_| char::from(b"v=0\r\nmc a:/RTP/SAVP crypto 0123456789"[(next() % 37) as usize]))
                    .collect();
                request("INVITE", ruri, local, &format!("junk{i}"), &sdp).into_bytes()
            }
        };
        let _ = socket.send_to(&datagram, sip);
    }
}

#[test]
fn options_answered_strangers_refused_and_garbage_survived() {
    let (rt, server, socket) = raw_caller(sip_config("127.0.0.0/8"), "lobby");
    let (api, sip) = (server.http_addr(), server.sip_addr().expect("the SIP edge is on"));
    let ruri = format!("sip:lobby@{sip}");

    assert_eq!(ask(&socket, sip, "OPTIONS", &ruri, "probe1", ""), vec![200], "OPTIONS is answered");
    // Neither Opus nor G.711 (G.729 only): 488, and nobody joined.
    let g729 = ask(&socket, sip, "INVITE", &ruri, "g729", &offer("G729/8000", 40_000));
    assert_eq!(g729, [100, 488], "an offer without Opus, PCMU or PCMA: 100 Trying, then 488");
    // A room that does not exist: 404.
    let missing = ask(&socket, sip, "INVITE", &format!("sip:nowhere@{sip}"), "nowhere", &offer("opus/48000/2", 40_002));
    assert_eq!(missing, [100, 404], "an unknown room: 100 Trying, then 404");
    assert_eq!(roster(api, "lobby").len(), 0, "no participant is left behind");

    // Garbage: random bytes, truncated and broken SIP; the endpoint answers on.
    send_garbage(&socket, sip, &ruri, 600);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(ask(&socket, sip, "OPTIONS", &ruri, "probe2", ""), vec![200], "OPTIONS answered after garbage");
    rt.block_on(server.shutdown());

    // Not from a trusted network (this server trusts 10.0.0.0/8 only): 403, counted.
    let (rt, server) = start_with(sip_config("10.0.0.0/8"));
    let sip = server.sip_addr().expect("the SIP edge is on");
    create_room(server.http_addr(), "lobby");
    let got = ask(&socket, sip, "INVITE", &format!("sip:lobby@{sip}"), "stranger", &offer("opus/48000/2", 40_004));
    assert_eq!(got, vec![403], "an INVITE from an untrusted network");
    assert_eq!(ask(&socket, sip, "OPTIONS", &format!("sip:lobby@{sip}"), "probe3", ""), vec![403]);
    assert_eq!(roster(server.http_addr(), "lobby").len(), 0);
    if let Some(m) = server.metrics_addr() {
        let refused = scrape(m).get(&series("tutti_sip_refused_total", &[("reason", "source")])).copied();
        assert!(refused.unwrap_or(0.0) >= 2.0, "refusals counted: {refused:?}");
    }
    rt.block_on(server.shutdown());
}

#[test]
fn bye_both_ways_and_cancel_leave_nothing_behind() {
    let (rt, server, socket) = raw_caller(sip_config("127.0.0.0/8"), "desk");
    let (api, sip) = (server.http_addr(), server.sip_addr().expect("the SIP edge is on"));
    let local = socket.local_addr().expect("bound");
    let rtp = UdpSocket::bind("127.0.0.1:0").expect("bind an RTP socket");
    let sdp = offer("opus/48000/2", rtp.local_addr().expect("bound").port());
    let ruri = format!("sip:desk@{sip}");

    // A call, answered with tutti's RTP in address, ACKed; the caller's BYE makes it leave.
    socket.send_to(request("INVITE", &ruri, local, "one", &sdp).as_bytes(), sip).expect("send");
    let ok = final_response(&socket, "one", Duration::from_secs(3)).expect("a final answer");
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
    assert!(ok.contains("m=audio ") && ok.contains("opus/48000/2") && ok.contains("c=IN IP4 127.0.0.1"), "{ok}");
    assert!(header(&ok, "Contact", "m").contains(&sip.to_string()), "the Contact names the SIP address: {ok}");
    let to = header(&ok, "To", "t").to_owned();
    assert!(to.contains("tag="), "{to}");
    socket.send_to(in_dialog("ACK", local, "one", &to, 1).as_bytes(), sip).expect("send");
    assert_eq!(wait_roster(api, "desk", Duration::from_secs(3), |n| n.len() == 1), ["probe"]);
    // A keep-alive OPTIONS within the call: 200.
    socket.send_to(in_dialog("OPTIONS", local, "one", &to, 2).as_bytes(), sip).expect("send");
    let ping = receive(&socket, Duration::from_secs(3), |t| header(t, "CSeq", "") == "2 OPTIONS");
    assert!(ping.as_deref().is_some_and(|r| r.starts_with("SIP/2.0 200")), "{ping:?}");
    socket.send_to(in_dialog("BYE", local, "one", &to, 3).as_bytes(), sip).expect("send");
    assert!(wait_roster(api, "desk", Duration::from_secs(3), |n| n.is_empty()).is_empty(), "BYE: the caller left");

    // A call that tutti ends (an admin removes the participant): tutti sends BYE.
    socket.send_to(request("INVITE", &ruri, local, "two", &sdp).as_bytes(), sip).expect("send");
    let ok = final_response(&socket, "two", Duration::from_secs(3)).expect("a final answer");
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
    let to = header(&ok, "To", "t").to_owned();
    socket.send_to(in_dialog("ACK", local, "two", &to, 1).as_bytes(), sip).expect("send");
    assert_eq!(wait_roster(api, "desk", Duration::from_secs(3), |n| n.len() == 1).len(), 1);
    let id = room(api, "desk")["participants"][0]["id"].as_u64().expect("an id");
    let r = common::http(api, "DELETE", &format!("/v1/rooms/desk/participants/{id}"), None, b"");
    assert_eq!(r.status, 204, "{}", r.body);
    let bye = next_request(&socket, "BYE", Duration::from_secs(3)).expect("tutti sends BYE to a removed caller");
    assert_eq!(header(&bye, "Call-ID", "i"), "two@test", "{bye}");

    // CANCEL right behind the INVITE: 487 (or, if the answer won the race, a 200 the
    // caller then ends); either way nobody stays in the room.
    socket.send_to(request("INVITE", &ruri, local, "three", &sdp).as_bytes(), sip).expect("send");
    socket.send_to(request("CANCEL", &ruri, local, "three", "").as_bytes(), sip).expect("send");
    let end = final_response(&socket, "three", Duration::from_secs(3)).expect("a final answer");
    let code = &end[8..11];
    eprintln!("INVITE then CANCEL: {code}");
    if code == "200" {
        let to = header(&end, "To", "t").to_owned();
        socket.send_to(in_dialog("ACK", local, "three", &to, 1).as_bytes(), sip).expect("send");
        socket.send_to(in_dialog("BYE", local, "three", &to, 2).as_bytes(), sip).expect("send");
    } else {
        assert_eq!(code, "487", "{end}");
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(wait_roster(api, "desk", Duration::from_secs(3), |n| n.is_empty()).is_empty(), "nobody left behind");
    rt.block_on(server.shutdown());
}

#[test]
fn a_silent_caller_times_out_and_gets_bye() {
    let mut cfg = sip_config("127.0.0.0/8");
    cfg.peer_timeout_seconds = 1.0;
    let (rt, server, socket) = raw_caller(cfg, "quiet");
    let (api, sip) = (server.http_addr(), server.sip_addr().expect("the SIP edge is on"));
    let local = socket.local_addr().expect("bound");
    // The offer names a port that never sends: the media timeout removes the caller.
    let sdp = offer("opus/48000/2", free_udp_port());
    socket.send_to(request("INVITE", &format!("sip:quiet@{sip}"), local, "mute", &sdp).as_bytes(), sip).expect("send");
    let ok = final_response(&socket, "mute", Duration::from_secs(3)).expect("a final answer");
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
    let to = header(&ok, "To", "t").to_owned();
    socket.send_to(in_dialog("ACK", local, "mute", &to, 1).as_bytes(), sip).expect("send");
    let bye = next_request(&socket, "BYE", Duration::from_secs(5)).expect("tutti sends BYE after the media timeout");
    assert_eq!(header(&bye, "Call-ID", "i"), "mute@test", "{bye}");
    assert!(roster(api, "quiet").is_empty(), "the timed-out caller left");
    rt.block_on(server.shutdown());
}

#[test]
fn a_reinvite_holds_and_resumes_the_call() {
    let (rt, server, socket) = raw_caller(sip_config("127.0.0.0/8"), "hold");
    let (api, sip) = (server.http_addr(), server.sip_addr().expect("the SIP edge is on"));
    let local = socket.local_addr().expect("bound");
    let rtp = UdpSocket::bind("127.0.0.1:0").expect("bind an RTP socket");
    let sdp = offer("opus/48000/2", rtp.local_addr().expect("bound").port());
    socket.send_to(request("INVITE", &format!("sip:hold@{sip}"), local, "h", &sdp).as_bytes(), sip).expect("send");
    let ok = final_response(&socket, "h", Duration::from_secs(3)).expect("a final answer");
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
    let to = header(&ok, "To", "t").to_owned();
    socket.send_to(in_dialog("ACK", local, "h", &to, 1).as_bytes(), sip).expect("send");
    assert_eq!(wait_roster(api, "hold", Duration::from_secs(3), |n| n.len() == 1).len(), 1);
    let muted = || room(api, "hold")["participants"][0]["muted"].as_bool();
    assert_eq!(muted(), Some(false));

    // Hold (sendonly): 200 with recvonly, the caller stays in and is muted.
    for (seq, ask, want, mute) in [
        (2, "a=sendonly\r\n", "a=recvonly", true),
        (4, "a=sendrecv\r\n", "a=sendrecv", false),
        (6, "a=inactive\r\n", "a=inactive", true),
    ] {
        let body = format!("{sdp}{ask}");
        socket.send_to(reinvite(local, "h", &to, seq, &body).as_bytes(), sip).expect("send");
        let cseq = format!("{seq} INVITE");
        let got =
            receive(&socket, Duration::from_secs(3), |t| t.starts_with("SIP/2.0 2") && header(t, "CSeq", "") == cseq)
                .expect("a 200 to the re-INVITE");
        assert!(got.contains(want) && got.contains("m=audio "), "{ask:?} answered {want}: {got}");
        socket.send_to(in_dialog("ACK", local, "h", &to, seq).as_bytes(), sip).expect("send");
        assert_eq!(roster(api, "hold").len(), 1, "the call goes on");
        assert_eq!(muted(), Some(mute), "muted while held, unmuted on resume ({ask:?})");
    }
    rt.block_on(server.shutdown());
}

/// The telephone-event payload type the test's phone offers (at 8000 Hz).
const EVENTS_PT: u8 = 101;

/// A phone made in the test: its call's RTP socket sends a 600 Hz tone as
/// Opus (payload type 96) every 20 ms, or as PCMA (payload type 8) every
/// 30 ms, and RFC 4733 keys; what tutti sends it is read, the
/// telephone-event packets kept, PCMA decoded.
struct Phone {
    rtp: UdpSocket,
    to: SocketAddr,
    /// Its Opus encoder; `None`: it talks PCMA.
    opus: Option<opus::Encoder>,
    seq: u16,
    ts: u32,
    next: Instant,
    phase: f32,
    /// tutti's telephone-event packets: (marker, seq, timestamp, payload).
    events: Vec<(bool, u16, u32, Vec<u8>)>,
    /// tutti's audio packets received.
    audio: usize,
    /// PCMA: the payload sizes tutti sent, and what they held (8 kHz).
    sizes: Vec<usize>,
    heard: Vec<f32>,
}

/// A-law byte to linear, -1.0 to 1.0 (ITU-T G.711: sign, 3-bit exponent, 4-bit mantissa, even bits inverted).
fn alaw(byte: u8) -> f32 {
    let b = byte ^ 0x55;
    let (exp, mant) = (u32::from((b >> 4) & 7), i32::from(b & 0x0F));
    let mag = if exp == 0 { (mant << 4) + 8 } else { ((mant << 4) + 0x108) << (exp - 1) };
    (if b & 0x80 != 0 { mag } else { -mag }) as f32 / 32_768.0
}

/// The A-law byte nearest to `x` (a search of all 256: the test's own encoder).
fn to_alaw(x: f32) -> u8 {
    (0..=255u8).min_by(|a, b| (alaw(*a) - x).abs().total_cmp(&(alaw(*b) - x).abs())).unwrap_or(0xD5)
}

impl Phone {
    fn new(rtp: UdpSocket, to: SocketAddr) -> Self {
        let opus = opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Audio).expect("an encoder");
        Self::with(rtp, to, Some(opus))
    }

    /// A PCMA phone (30 ms packets).
    fn pcma(rtp: UdpSocket, to: SocketAddr) -> Self {
        Self::with(rtp, to, None)
    }

    fn with(rtp: UdpSocket, to: SocketAddr, opus: Option<opus::Encoder>) -> Self {
        rtp.set_nonblocking(true).expect("nonblocking");
        let (seq, ts, next, phase) = (1, 0, Instant::now(), 0.0);
        Self { rtp, to, opus, seq, ts, next, phase, events: Vec::new(), audio: 0, sizes: Vec::new(), heard: Vec::new() }
    }

    fn packet(&mut self, pt: u8, marker: bool, ts: u32, payload: &[u8]) {
        let mut p = vec![0x80, pt | if marker { 0x80 } else { 0 }];
        p.extend_from_slice(&self.seq.to_be_bytes());
        p.extend_from_slice(&ts.to_be_bytes());
        p.extend_from_slice(&0x5EED_u32.to_be_bytes());
        p.extend_from_slice(payload);
        self.seq = self.seq.wrapping_add(1);
        let _ = self.rtp.send_to(&p, self.to);
    }

    /// Sends the frames that are due, reads what arrived.
    fn pump(&mut self) {
        while Instant::now() >= self.next {
            let (rate, samples) = if self.opus.is_some() { (48_000.0, 960) } else { (8_000.0, 240) };
            let frame: Vec<f32> = (0..samples)
                .map(|_| {
                    self.phase = (self.phase + std::f32::consts::TAU * 600.0 / rate) % std::f32::consts::TAU;
                    0.3 * self.phase.sin()
                })
                .collect();
            let ts = self.ts;
            if let Some(opus) = self.opus.as_mut() {
                let pcm: Vec<i16> = frame.iter().map(|x| (x * 32767.0) as i16).collect();
                let mut out = [0u8; 400];
                let n = opus.encode(&pcm, &mut out).expect("encode");
                self.packet(96, false, ts, &out[..n]);
            } else {
                let payload: Vec<u8> = frame.iter().map(|x| to_alaw(*x)).collect();
                self.packet(8, false, ts, &payload);
            }
            self.ts = self.ts.wrapping_add(samples as u32);
            self.next += Duration::from_millis(if self.opus.is_some() { 20 } else { 30 });
        }
        let mut buf = [0u8; 1500];
        while let Ok(n) = self.rtp.recv(&mut buf) {
            if n < 12 {
                continue;
            }
            if buf[1] & 0x7F == EVENTS_PT {
                let seq = u16::from_be_bytes([buf[2], buf[3]]);
                let ts = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
                self.events.push((buf[1] & 0x80 != 0, seq, ts, buf[12..n].to_vec()));
            } else {
                self.audio += 1;
                if self.opus.is_none() && buf[1] & 0x7F == 8 {
                    self.sizes.push(n - 12);
                    self.heard.extend(buf[12..n].iter().map(|b| alaw(*b)));
                }
            }
        }
    }

    /// Presses `key` (event `event`) as RFC 4733 says: packets while it is
    /// held, then the end packet three times, all with the event's start
    /// timestamp.
    fn press(&mut self, event: u8) {
        let start = self.ts;
        for (i, duration) in [160u16, 320, 480].into_iter().enumerate() {
            let [d0, d1] = duration.to_be_bytes();
            self.packet(EVENTS_PT, i == 0, start, &[event, 10, d0, d1]);
        }
        for _ in 0..3 {
            let [d0, d1] = 640u16.to_be_bytes();
            self.packet(EVENTS_PT, false, start, &[event, 0x80 | 10, d0, d1]);
        }
        self.ts = self.ts.wrapping_add(960);
    }
}

/// Runs the phone and the WebRTC clients for `d`, keeping the socket's messages.
fn pump_all(
    phone: &mut Phone,
    clients: &mut [&mut ToneClient],
    ws: &mut common::Ws,
    seen: &mut Vec<serde_json::Value>,
    d: Duration,
) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        phone.pump();
        tutti_client::run_for(clients, Duration::from_millis(5));
        while let Some(v) = ws.try_next() {
            seen.push(v);
        }
    }
}

/// The keys of the `keypad` events seen for participant `id`.
fn keys_of(seen: &[serde_json::Value], id: u64) -> String {
    seen.iter().filter(|v| v["type"] == "keypad" && v["id"] == id).filter_map(|v| v["digit"].as_str()).collect()
}

/// An INFO of `call` carrying `body` as `content_type`.
fn info(local: SocketAddr, call: &str, to: &str, seq: u32, content_type: &str, body: &str) -> String {
    let head = in_dialog("INFO", local, call, to, seq);
    let head = head.trim_end_matches("Content-Length: 0\r\n\r\n");
    format!("{head}Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{body}", body.len())
}

#[test]
fn a_phones_keys_mute_it_raise_its_hand_reach_the_sockets_and_keys_go_back_as_rfc_4733() {
    let (rt, server, socket) = raw_caller(sip_config("127.0.0.0/8"), "keys");
    let (api, sip) = (server.http_addr(), server.sip_addr().expect("the SIP edge is on"));
    let local = socket.local_addr().expect("bound");
    let mut webrtc = ToneClient::join(api, "keys", 440.0, JoinAs::Whip).expect("a WebRTC participant joins");
    let mut ws = common::Ws::connect(api, "keys");
    let mut seen = Vec::new();

    // The offer names telephone-event/8000 beside Opus: the answer takes it.
    let media = format!(
        "96 {EVENTS_PT}\r\na=rtpmap:96 opus/48000/2\r\n\
         a=rtpmap:{EVENTS_PT} telephone-event/8000\r\na=fmtp:{EVENTS_PT} 0-16\r\n"
    );
    let (ok, to, rtp, media_port) = call_in(&socket, sip, "keys", "k", &media);
    assert!(ok.contains(&format!("a=rtpmap:{EVENTS_PT} telephone-event/8000")), "RFC 4733 answered: {ok}");
    assert!(ok.contains(&format!("m=audio {media_port} RTP/AVP 96 {EVENTS_PT}\r\n")), "{ok}");
    let mut phone = Phone::new(rtp, SocketAddr::from(([127, 0, 0, 1], media_port)));

    let participants = || room(api, "keys")["participants"].as_array().cloned().unwrap_or_default();
    let the_phone = || participants().into_iter().find(|p| p["name"] == "probe").unwrap_or_default();
    let mut clients = [&mut webrtc];
    pump_all(&mut phone, &mut clients, &mut ws, &mut seen, Duration::from_millis(500));
    let id = the_phone()["id"].as_u64().expect("the phone is listed");
    let other = participants().into_iter().find_map(|p| p["id"].as_u64().filter(|i| *i != id)).expect("the WebRTC one");

    // The WebRTC participant hears the phone's 600 Hz.
    let end = Instant::now() + Duration::from_secs(8);
    while Instant::now() < end && clients[0].hears(600.0, Instant::now() - Duration::from_secs(1)) < 0.05 {
        pump_all(&mut phone, &mut clients, &mut ws, &mut seen, Duration::from_millis(100));
    }
    let before = clients[0].hears(600.0, Instant::now() - Duration::from_secs(1));
    assert!(before > 0.05, "the WebRTC participant hears the phone at {before}");
    assert_eq!(the_phone()["muted"], false);

    // *6 by RFC 4733 (each end packet sent three times): two keypad events, and the phone is muted.
    phone.press(10);
    pump_all(&mut phone, &mut clients, &mut ws, &mut seen, Duration::from_millis(200));
    phone.press(6);
    pump_all(&mut phone, &mut clients, &mut ws, &mut seen, Duration::from_millis(1500));
    assert_eq!(keys_of(&seen, id), "*6", "one keypad event per key reached the socket: {seen:?}");
    assert_eq!(the_phone()["muted"], true, "*6 mutes the phone: {}", the_phone());
    assert!(seen.iter().any(|v| v["type"] == "muted" && v["id"] == id && v["muted"] == true), "{seen:?}");
    pump_all(&mut phone, &mut clients, &mut ws, &mut seen, Duration::from_secs(1));
    let after = clients[0].hears(600.0, Instant::now() - Duration::from_secs(1));
    assert!(after < 0.01, "muted by *6, the phone is no longer heard: {after} (was {before})");

    // *6 again unmutes; *7 by SIP INFO (dtmf-relay, then dtmf) raises its hand.
    phone.press(10);
    phone.press(6);
    pump_all(&mut phone, &mut clients, &mut ws, &mut seen, Duration::from_millis(800));
    assert_eq!(the_phone()["muted"], false, "*6 again unmutes: {}", the_phone());
    for (seq, (ct, body)) in
        [("application/dtmf-relay", "Signal=*\r\nDuration=160\r\n"), ("application/dtmf", "7")].into_iter().enumerate()
    {
        let seq = 2 + seq as u32;
        socket.send_to(info(local, "k", &to, seq, ct, body).as_bytes(), sip).expect("send");
        let cseq = format!("{seq} INFO");
        let got =
            receive(&socket, Duration::from_secs(3), |t| t.starts_with("SIP/2.0 ") && header(t, "CSeq", "") == cseq);
        assert!(got.as_deref().is_some_and(|r| r.starts_with("SIP/2.0 200")), "INFO {ct}: {got:?}");
    }
    socket.send_to(info(local, "k", &to, 9, "text/plain", "hello").as_bytes(), sip).expect("send");
    let got =
        receive(&socket, Duration::from_secs(3), |t| t.starts_with("SIP/2.0 ") && header(t, "CSeq", "") == "9 INFO");
    assert!(got.as_deref().is_some_and(|r| r.starts_with("SIP/2.0 415")), "another INFO body: {got:?}");
    pump_all(&mut phone, &mut clients, &mut ws, &mut seen, Duration::from_millis(500));
    assert_eq!(keys_of(&seen, id), "*6*6*7");
    assert_eq!(the_phone()["hand"], true, "*7 raises the hand: {}", the_phone());

    // Digits sent to the phone by the API arrive as RFC 4733 packets on its RTP.
    let dtmf = |who: u64, body: &str| {
        let r = common::http(
            api,
            "POST",
            &format!("/v1/rooms/keys/participants/{who}/dtmf"),
            Some("application/json"),
            body.as_bytes(),
        );
        (r.status, serde_json::from_str::<serde_json::Value>(&r.body).unwrap_or_default())
    };
    let (status, body) = dtmf(id, r#"{"digits":"1#"}"#);
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["digits"], "1#");
    let (status, body) = dtmf(id, r#"{"digits":"2"}"#);
    assert_eq!((status, body["code"].as_str()), (409, Some("digits_in_progress")), "one request at a time: {body}");
    for (bad, status, code) in [
        (r#"{"digits":"12x"}"#, 400, "bad_digits"),
        (r#"{"digits":""}"#, 400, "bad_digits"),
        (&*format!(r#"{{"digits":"{}"}}"#, "1".repeat(33)), 400, "bad_digits"),
        (r#"{"keys":"1"}"#, 400, "bad_json"),
    ] {
        let (s, b) = dtmf(id, bad);
        assert_eq!((s, b["code"].as_str()), (status, Some(code)), "{bad}: {b}");
        assert!(b["message"].as_str().is_some_and(|m| !m.is_empty()), "{b}");
    }
    let (s, b) = dtmf(other, r#"{"digits":"1"}"#);
    assert_eq!((s, b["code"].as_str()), (409, Some("not_a_phone_leg")), "a WebRTC participant: {b}");
    let (s, b) = dtmf(999_999, r#"{"digits":"1"}"#);
    assert_eq!((s, b["code"].as_str()), (404, Some("participant_not_found")), "{b}");
    pump_all(&mut phone, &mut clients, &mut ws, &mut seen, Duration::from_millis(800));
    let events = &phone.events;
    let ends: Vec<(u8, u32)> = events.iter().filter(|e| e.3[1] & 0x80 != 0).map(|e| (e.3[0], e.2)).collect();
    assert_eq!(ends.len(), 6, "each digit ends with three end packets: {events:?}");
    assert!(ends[..3].iter().all(|e| *e == ends[0]) && ends[3..].iter().all(|e| *e == ends[3]), "{ends:?}");
    assert_eq!((ends[0].0, ends[3].0), (1, 11), "1 then #: {events:?}");
    assert_ne!(ends[0].1, ends[3].1, "two events, two timestamps");
    let firsts: Vec<_> = events.iter().filter(|e| e.0).map(|e| e.3[0]).collect();
    assert_eq!(firsts, [1, 11], "the marker opens each event: {events:?}");
    // One sequence with the mix: each packet a new number, counting up.
    assert!(events.windows(2).all(|w| (1..1000).contains(&w[1].1.wrapping_sub(w[0].1))), "{events:?}");
    assert!(phone.audio > 0, "the mix kept coming");
    // Once sent, another request is taken.
    let (status, body) = dtmf(id, r#"{"digits":"9"}"#);
    assert_eq!(status, 202, "{body}");
    rt.block_on(server.shutdown());
}

#[test]
fn a_pcma_phone_with_30_ms_packets_talks_with_the_room_and_its_keys_work() {
    let (rt, server, socket) = raw_caller(sip_config("127.0.0.0/8"), "pcma");
    let (api, sip) = (server.http_addr(), server.sip_addr().expect("the SIP edge is on"));
    let mut webrtc = ToneClient::join(api, "pcma", 440.0, JoinAs::Whip).expect("a WebRTC participant joins");
    let mut ws = common::Ws::connect(api, "pcma");
    let mut seen = Vec::new();

    // No Opus: PCMA first, then PCMU, keys at 8000 Hz, 30 ms packets. PCMA is answered, with the keys.
    let media = format!(
        "8 0 {EVENTS_PT}\r\na=rtpmap:8 PCMA/8000\r\na=rtpmap:0 PCMU/8000\r\n\
         a=rtpmap:{EVENTS_PT} telephone-event/8000\r\na=ptime:30\r\n"
    );
    let (ok, _, rtp, port) = call_in(&socket, sip, "pcma", "a", &media);
    let answered = format!("m=audio {port} RTP/AVP 8 {EVENTS_PT}\r\na=rtpmap:8 PCMA/8000\r\n");
    assert!(ok.contains(&answered), "PCMA and the keys answered: {ok}");
    let mut phone = Phone::pcma(rtp, SocketAddr::from(([127, 0, 0, 1], port)));

    // The WebRTC participant hears the phone's 600 Hz.
    let mut clients = [&mut webrtc];
    let end = Instant::now() + Duration::from_secs(8);
    while Instant::now() < end && clients[0].hears(600.0, Instant::now() - Duration::from_secs(1)) < 0.05 {
        pump_all(&mut phone, &mut clients, &mut ws, &mut seen, Duration::from_millis(100));
    }
    let hears600 = clients[0].hears(600.0, Instant::now() - Duration::from_secs(1));
    assert!(hears600 > 0.05, "the WebRTC participant hears the PCMA phone at {hears600}");

    // The phone gets 20 ms of PCMA (160 bytes) a packet, holding the room's 440 Hz, not its own 600 Hz.
    pump_all(&mut phone, &mut clients, &mut ws, &mut seen, Duration::from_secs(2));
    assert!(phone.sizes.len() > 50 && phone.sizes.iter().all(|n| *n == 160), "{:?}", phone.sizes);
    let last = &phone.heard[phone.heard.len().saturating_sub(8_000)..];
    // goertzel reads at 48 kHz: scale the frequencies to 8 kHz.
    let (mix440, mix600) = (tutti_mix::goertzel(last, 440.0 * 6.0), tutti_mix::goertzel(last, 600.0 * 6.0));
    eprintln!("WebRTC hears 600 Hz {hears600:.3}; the PCMA phone heard 440 Hz {mix440:.3}, 600 Hz {mix600:.3}");
    assert!(mix440 > 0.03, "the PCMA phone hears the WebRTC 440 Hz only at {mix440}");
    assert!(mix600 < 0.01, "the PCMA phone hears itself at {mix600}");

    // Its keys (telephone-event/8000 beside G.711): *6 mutes it.
    let id = room(api, "pcma")["participants"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "probe")
        .and_then(|p| p["id"].as_u64())
        .expect("the phone is listed");
    phone.press(10);
    pump_all(&mut phone, &mut clients, &mut ws, &mut seen, Duration::from_millis(200));
    phone.press(6);
    pump_all(&mut phone, &mut clients, &mut ws, &mut seen, Duration::from_millis(1500));
    assert_eq!(keys_of(&seen, id), "*6", "{seen:?}");
    let after = clients[0].hears(600.0, Instant::now() - Duration::from_secs(1));
    assert!(after < 0.01, "muted by *6, the PCMA phone is no longer heard: {after} (was {hears600})");
    rt.block_on(server.shutdown());
}

#[test]
fn baresip_answers_a_trunks_digest_challenge_and_talks() {
    let (rt, server, api, sip, mut webrtc) = room_with_talker_on(trunk_config(), "standup");
    let call_seconds = 12;
    let caller = Caller { ip: "127.0.0.1", account: GOOD };
    let mut baresip = Baresip::dial(sip, "standup", "opus.so", "opus/48000/2", 48_000, call_seconds, &caller);

    let names = wait_roster(api, "standup", Duration::from_secs(6), |n| n.len() == 2);
    assert_eq!(names.len(), 2, "the caller with the trunk's credentials joins: {names:?}\nbaresip:\n{}", baresip.log());
    let (attributes, listed) = caller_attributes(api, "standup");
    assert_eq!(attributes["sip.trunk"], "carrier", "the call names its trunk: {listed}");
    assert!(refused(&server, "challenge") >= 1.0, "the first INVITE was challenged (counted)");
    talks_both_ways(&mut baresip, &mut webrtc, call_seconds, "the trunk's caller");
    rt.block_on(server.shutdown());
}

#[test]
fn a_trunk_refuses_a_wrong_password_a_stranger_and_a_number_it_does_not_take() {
    let (rt, server, socket) = raw_caller(trunk_config(), "standup");
    let (api, sip) = (server.http_addr(), server.sip_addr().expect("the SIP edge is on"));
    create_room(api, "other");
    let ruri = format!("sip:standup@{sip}");

    // Raw: no credentials → 401 with the trunk's one (MD5) challenge; an answer to
    // that nonce with a wrong response → 403, not another 401.
    let local = socket.local_addr().expect("bound");
    socket
        .send_to(request("INVITE", &ruri, local, "noauth", &offer("opus/48000/2", 40_010)).as_bytes(), sip)
        .expect("send");
    let challenge = final_response(&socket, "noauth", Duration::from_secs(3)).expect("a final answer");
    assert!(challenge.starts_with("SIP/2.0 401"), "{challenge}");
    let challenges: Vec<&str> =
        challenge.lines().filter(|l| l.to_ascii_lowercase().starts_with("www-authenticate:")).collect();
    assert_eq!(challenges.len(), 1, "{challenge}");
    assert!(challenges[0].contains("algorithm=MD5"), "{challenge}");
    assert!(challenges.iter().all(|c| c.contains("realm=\"tutti\"") && c.contains("qop=\"auth\"")), "{challenge}");
    let nonce = challenges[0].split("nonce=\"").nth(1).and_then(|r| r.split('"').next()).expect("a nonce");
    let guessed = request("INVITE", &ruri, local, "guess", &offer("opus/48000/2", 40_012)).replace(
        "Max-Forwards: 70\r\n",
        &format!(
            "Max-Forwards: 70\r\nAuthorization: Digest username=\"acme\", realm=\"tutti\", nonce=\"{nonce}\", \
             uri=\"{ruri}\", response=\"0123456789abcdef0123456789abcdef\", algorithm=MD5\r\n"
        ),
    );
    socket.send_to(guessed.as_bytes(), sip).expect("send");
    let answer = final_response(&socket, "guess", Duration::from_secs(3)).expect("a final answer");
    assert!(answer.starts_with("SIP/2.0 403"), "a wrong response is refused, not challenged again: {answer}");

    // baresip with a wrong password: one challenge, then 403.
    let wrong = Caller { ip: "127.0.0.1", account: ";auth_user=acme;auth_pass=guess" };
    let baresip = Baresip::dial(sip, "standup", "opus.so", "opus/48000/2", 48_000, 8, &wrong);
    let log = closed_with(&baresip, "403 Forbidden");
    assert!(log.contains("403 Forbidden"), "baresip with a wrong password is refused with 403:\n{log}");
    drop(baresip);
    // baresip from 127.0.0.2, outside the trunk's networks, with the right password: 403.
    let stranger = Caller { ip: "127.0.0.2", account: GOOD };
    let baresip = Baresip::dial(sip, "standup", "opus.so", "opus/48000/2", 48_000, 8, &stranger);
    let log = closed_with(&baresip, "403 Forbidden");
    assert!(log.contains("403 Forbidden"), "baresip from outside the trunk's networks is refused with 403:\n{log}");
    drop(baresip);
    // The right credentials, a number the trunk does not take: 404.
    let good = Caller { ip: "127.0.0.1", account: GOOD };
    let baresip = Baresip::dial(sip, "other", "opus.so", "opus/48000/2", 48_000, 8, &good);
    let log = closed_with(&baresip, "404 Not Found");
    assert!(log.contains("404 Not Found"), "baresip calling a number the trunk does not take gets 404:\n{log}");
    drop(baresip);

    assert_eq!(roster(api, "standup").len(), 0, "no refused caller joined");
    assert_eq!(roster(api, "other").len(), 0, "no refused caller joined");
    assert!(refused(&server, "credentials") >= 2.0, "the raw and baresip wrong credentials counted");
    assert!(refused(&server, "source") >= 1.0, "the stranger counted");
    assert!(refused(&server, "number") >= 1.0, "the number counted");
    rt.block_on(server.shutdown());
}

/// PIN dispatch with real baresip over PCMU: a wrong PIN (twice, by RFC
/// 4733) hears the spoken prompts and gets a BYE, never in the roster; the
/// right PIN joins the room, hears its talker and is heard.
#[test]
fn baresip_enters_a_pin_wrong_then_right_and_joins_its_room() {
    pin_wrong_then_right("g711.so", "PCMU/8000", 8_000, "the PCMU caller");
}

/// The same over Opus (the prompts' frames sent as they are).
#[test]
fn baresip_over_opus_enters_a_pin_wrong_then_right() {
    pin_wrong_then_right("opus.so", "opus/48000/2", 48_000, "the Opus caller");
}

#[test]
fn a_pin_call_offering_srtp_is_refused_with_488_saying_why() {
    let mut cfg = sip_config("127.0.0.0/8");
    cfg.sip.pin = true;
    cfg.sip.pins = vec!["4711=standup".into()];
    let (rt, server, socket) = raw_caller(cfg, "standup");
    let sip = server.sip_addr().expect("the SIP edge is on");
    let local = socket.local_addr().expect("bound");
    // The number dialled names a room too: a PIN call still takes plain RTP only.
    let savp = offer("opus/48000/2", free_udp_port()).replace("RTP/AVP", "RTP/SAVP")
        + "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz\r\n";
    let invite = request("INVITE", &format!("sip:conference@{sip}"), local, "savp-pin", &savp);
    socket.send_to(invite.as_bytes(), sip).expect("send");
    let refusal = final_response(&socket, "savp-pin", Duration::from_secs(3)).expect("a final answer");
    assert!(refusal.starts_with("SIP/2.0 488"), "an SRTP offer to a PIN call: {refusal}");
    assert!(header(&refusal, "Warning", "").contains("enters a PIN"), "{refusal}");
    assert_eq!(roster(server.http_addr(), "standup").len(), 0, "nobody joined");
    rt.block_on(server.shutdown());
}

/// Two cluster nodes in this process (a real redis-server) on 127.0.0.21
/// and 127.0.0.22, each with the SIP edge on its own address, taking SIP
/// and RTP from loopback; rooms spread as `spread` says.
fn sip_cluster(
    redis: &tutti_client::redis::RedisServer,
    spread: tutti_cluster::RoomSpread,
) -> Vec<(tokio::runtime::Runtime, tutti_server::Server)> {
    [([127, 0, 0, 21], "sip-a"), ([127, 0, 0, 22], "sip-b")]
        .iter()
        .map(|(ip, id)| {
            let mut cfg = common::cluster_node_config(*ip, id, redis);
            cfg.cluster.room_spread = spread;
            cfg.rtp_in.trusted = vec!["127.0.0.0/8".into()];
            cfg.sip.enabled = true;
            cfg.sip.listen = SocketAddr::from((*ip, 0));
            cfg.sip.trusted = vec!["127.0.0.0/8".into()];
            start_with(cfg)
        })
        .collect()
}

/// The names in room `id`'s roster as the node at `api` lists it (all its nodes' participants).
fn cluster_roster(api: SocketAddr, admin: &str, id: &str) -> Vec<String> {
    let r = common::call(api, admin, "GET", &format!("/v1/rooms/{id}"), "");
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap_or_default();
    let names = body["room"]["participants"].as_array().or(body["participants"].as_array()).cloned();
    names.unwrap_or_default().iter().filter_map(|p| p["name"].as_str().map(str::to_owned)).collect()
}

/// The participants hosted on the node at `api` (`GET /v1/node`).
fn hosted_participants(api: SocketAddr, admin: &str) -> u64 {
    let r = common::call(api, admin, "GET", "/v1/node", "");
    let node: serde_json::Value = serde_json::from_str(&r.body).unwrap_or_default();
    node["participants"].as_u64().unwrap_or_else(|| panic!("GET /v1/node: {} {}", r.status, r.body))
}

/// The room `standup` made on one of two SIP cluster nodes (its index
/// returned), a WebRTC talker (440 Hz) joined on that node, and an admin token.
fn cluster_room_with_talker(nodes: &[(tokio::runtime::Runtime, tutti_server::Server)]) -> (usize, ToneClient, String) {
    let apis: Vec<SocketAddr> = nodes.iter().map(|(_, s)| s.http_addr()).collect();
    let admin =
        nodes[0].1.mint_token(&tutti_server::auth::Grant::admin("ops"), Duration::from_secs(600)).expect("a token");
    let owner = common::cluster_room_made(&apis, &admin, r#"{"id":"standup"}"#);
    let grants = serde_json::json!({"room": "standup", "speak": true, "listen": true});
    let talker = common::join_placed(apis[owner], "standup", "talker", &grants, 440.0);
    (owner, talker, admin)
}

/// Waits up to 10 s (running `talker`) for `ok` on the roster as the node at `api` lists it.
fn wait_in_cluster(
    api: SocketAddr,
    admin: &str,
    talker: &mut ToneClient,
    ok: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let names = cluster_roster(api, admin, "standup");
        if ok(&names) || Instant::now() > end {
            return names;
        }
        let mut refs = [&mut *talker];
        run_until(&mut refs, Instant::now() + Duration::from_millis(200), |_| false);
    }
}

/// baresip calls the node of a two-node SIP cluster (rooms spread as
/// `spread`) that does not hold room `standup`: the room lists the caller
/// (on the room's node, which lists every node's participants), the node
/// called hosts `hosted_there` participants, and the caller talks both ways
/// with the room's WebRTC talker (on the room's node).
fn call_the_node_without_the_room(spread: tutti_cluster::RoomSpread, hosted_there: u64, who: &str) {
    let redis = tutti_client::redis::RedisServer::start();
    let nodes = sip_cluster(&redis, spread);
    let (owner, mut talker, admin) = cluster_room_with_talker(&nodes);
    let other = 1 - owner;
    let api = nodes[owner].1.http_addr();
    let sip = nodes[other].1.sip_addr().expect("the SIP edge is on");
    let call_seconds: u32 = 10;
    let mut baresip = Baresip::dial(sip, "standup", "opus.so", "opus/48000/2", 48_000, call_seconds, &LOCAL);
    let names = wait_in_cluster(api, &admin, &mut talker, |n| n.iter().any(|n| n == "caller"));
    assert!(names.iter().any(|n| n == "caller"), "the room lists {who}: {names:?}\n{}", baresip.log());
    let there = hosted_participants(nodes[other].1.http_addr(), &admin);
    assert_eq!(there, hosted_there, "participants on the node called, with {who}");
    talks_both_ways(&mut baresip, &mut talker, call_seconds, who);
    for (rt, server) in nodes {
        rt.block_on(server.shutdown());
    }
}

#[test]
fn in_a_cluster_a_call_to_the_node_without_the_room_is_redirected_to_its_node_and_talks() {
    // 302 to the room's node (its signed record's SIP address); baresip follows it.
    call_the_node_without_the_room(tutti_cluster::RoomSpread::Off, 0, "the redirected caller");
}

#[test]
fn in_a_cluster_whose_rooms_spread_a_call_joins_the_room_on_the_node_it_reached() {
    // Hosted where it arrived (that node joins the room's span); the halves meet over the mesh.
    call_the_node_without_the_room(tutti_cluster::RoomSpread::WhenFull, 1, "the caller on the other node");
}

/// Kamailio (Debian's, installed when missing) on 127.0.0.23 with the
/// documented configuration (deploy/kamailio/kamailio.cfg, unchanged) and a
/// dispatcher list naming `nodes`; its log file is `dir/kamailio.log`.
struct Kamailio {
    child: std::process::Child,
    addr: SocketAddr,
    dir: std::path::PathBuf,
}

impl Kamailio {
    fn start(nodes: &[SocketAddr]) -> Self {
        let kamailio = tutti_client::process::ensure_debian_package("/usr/sbin/kamailio", "kamailio");
        let dir = temp_dir("kamailio");
        let cfg = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kamailio/kamailio.cfg");
        let list: String = nodes.iter().map(|n| format!("1 sip:{n}\n")).collect();
        std::fs::write(dir.join("dispatcher.list"), list).expect("write the dispatcher list");
        let addr = SocketAddr::from(([127, 0, 0, 23], free_sip_port("127.0.0.23")));
        let child = Command::new(kamailio)
            .arg("-f")
            .arg(&cfg)
            .args(["-DD", "-E", "-n", "2", "-Y"])
            .arg(&dir)
            .args(["-A", &format!("LISTEN=udp:{addr}")])
            .args(["-A", &format!("DISPATCHER_LIST=\"{}\"", dir.join("dispatcher.list").display())])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.join("kamailio.log")).expect("a log file"))
            .spawn()
            .expect("kamailio starts");
        Self { child, addr, dir }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("kamailio.log")).unwrap_or_default()
    }
}

impl Drop for Kamailio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn a_call_through_kamailios_dispatcher_reaches_the_rooms_node_and_talks() {
    let redis = tutti_client::redis::RedisServer::start();
    let nodes = sip_cluster(&redis, tutti_cluster::RoomSpread::Off);
    let (owner, mut talker, admin) = cluster_room_with_talker(&nodes);
    let api = nodes[owner].1.http_addr();
    let sips: Vec<SocketAddr> = nodes.iter().map(|(_, s)| s.sip_addr().expect("the SIP edge is on")).collect();
    let kamailio = Kamailio::start(&sips);

    // Kamailio is up once it answers an OPTIONS of its own (it probes the nodes with OPTIONS too).
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket.set_read_timeout(Some(Duration::from_millis(200))).expect("timeout");
    let local = socket.local_addr().expect("addr");
    let up = (0..25).any(|i| {
        let call = format!("kamailio-up-{i}");
        let probe = request("OPTIONS", &format!("sip:{}", kamailio.addr), local, &call, "");
        socket.send_to(probe.as_bytes(), kamailio.addr).expect("send");
        statuses(&socket, &call, Duration::from_millis(400)).contains(&200)
    });
    assert!(up, "Kamailio answers OPTIONS\n{}", kamailio.log());

    // INVITEs of the test's own until the Call-ID's hash picks the node without the
    // room: Kamailio follows its 302, and the room's node answers 200.
    let other = sips[1 - owner].to_string();
    let rtp = UdpSocket::bind("127.0.0.1:0").expect("bind an RTP socket");
    let offer = offer("opus/48000/2", rtp.local_addr().expect("bound").port());
    let ruri = format!("sip:standup@{}", kamailio.addr);
    let redirected = (0..32).find_map(|i| {
        let call = format!("kamailio-{i}");
        let answered = ask(&socket, kamailio.addr, "INVITE", &ruri, &call, &offer);
        let dispatched = format!("call {call}@test for standup to tutti node sip:{other}");
        kamailio.log().contains(&dispatched).then_some((call, answered))
    });
    let (call, answered) = redirected.unwrap_or_else(|| panic!("no INVITE went to {other}\n{}", kamailio.log()));
    assert_eq!(answered.last(), Some(&200), "{call}: {answered:?}\n{}", kamailio.log());
    let followed = format!("call {call}@test for standup follows tutti's 302 to sip:standup@{}", sips[owner]);
    assert!(kamailio.log().contains(&followed), "Kamailio followed the 302\n{}", kamailio.log());

    // baresip calls Kamailio: whichever node the hash picks, the call ends up on the room's node.
    let call_seconds: u32 = 10;
    let mut baresip = Baresip::dial(kamailio.addr, "standup", "opus.so", "opus/48000/2", 48_000, call_seconds, &LOCAL);
    let names = wait_in_cluster(api, &admin, &mut talker, |n| n.iter().any(|n| n == "caller"));
    let logs = || format!("baresip:\n{}\nkamailio:\n{}", baresip.log(), kamailio.log());
    assert!(names.iter().any(|n| n == "caller"), "the caller is in the room: {names:?}\n{}", logs());
    let picked = kamailio.log().lines().rfind(|l| l.contains("to tutti node")).map(str::to_owned);
    eprintln!("Kamailio: {picked:?} (the room is on {})", sips[owner]);
    talks_both_ways(&mut baresip, &mut talker, call_seconds, "the caller through Kamailio");
    drop(kamailio);
    for (rt, server) in nodes {
        rt.block_on(server.shutdown());
    }
}

/// Settings with one trunk that requires SRTP: `secure`, from loopback,
/// no credentials (`[sip] trusted` names no loopback address).
fn srtp_trunk_config() -> Config {
    let mut cfg = sip_config("10.0.0.0/8");
    cfg.sip.trunks = vec![tutti_server::TrunkConfig {
        name: "secure".into(),
        networks: vec!["127.0.0.0/8".into()],
        srtp: Some(tutti_server::SrtpMode::Require),
        ..tutti_server::TrunkConfig::default()
    }];
    cfg
}

/// Panics anywhere in this process since [`count_panics`] was first called.
static PANICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Counts every panic from now on (a server task's too, which would not fail a test by itself).
fn count_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            previous(info);
        }));
    });
}

#[test]
fn a_trunk_requiring_srtp_takes_baresip_with_srtp_through_a_garbage_flood_and_refuses_plain_offers() {
    count_panics();
    let (rt, server, api, sip, mut webrtc) = room_with_talker_on(srtp_trunk_config(), "vault");
    let ruri = format!("sip:vault@{sip}");

    // A plain offer to the trunk: 488, saying what to offer; nobody joins.
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket.set_read_timeout(Some(Duration::from_millis(100))).expect("timeout");
    let local = socket.local_addr().expect("bound");
    let plain = request("INVITE", &ruri, local, "plain", &offer("opus/48000/2", free_udp_port()));
    socket.send_to(plain.as_bytes(), sip).expect("send");
    let refusal = final_response(&socket, "plain", Duration::from_secs(3)).expect("a final answer");
    assert!(refusal.starts_with("SIP/2.0 488"), "a plain offer to a trunk that requires SRTP: {refusal}");
    assert!(header(&refusal, "Warning", "").contains("requires SRTP"), "{refusal}");
    assert!(refused(&server, "media") >= 1.0, "the refusal is counted");

    // baresip with mandatory SDES SRTP (RTP/SAVP, a=crypto): answered, and the call talks.
    let call_seconds = 20;
    let caller = Caller { ip: "127.0.0.1", account: ";mediaenc=srtp-mand" };
    let mut baresip = Baresip::dial(sip, "vault", "opus.so", "opus/48000/2", 48_000, call_seconds, &caller);
    let names = wait_roster(api, "vault", Duration::from_secs(6), |n| n.len() == 2);
    assert_eq!(names.len(), 2, "the SRTP caller joins: {names:?}\nbaresip:\n{}", baresip.log());
    let (attributes, listed) = caller_attributes(api, "vault");
    assert_eq!(attributes["sip.trunk"], "secure", "{listed}");
    let before = hears_600(&mut webrtc);
    assert!(before > 0.05, "the WebRTC participant hears the SRTP caller: {before}\nbaresip:\n{}", baresip.log());

    // 10,000 garbage datagrams on the SIP port while the call is up (from a socket of their own).
    let flood = UdpSocket::bind("127.0.0.1:0").expect("bind");
    send_garbage(&flood, sip, &ruri, 10_000);
    // The endpoint still answers, and the call still talks both ways (judged on what came after the flood).
    // (The flood's 2,000 INVITEs are answered first: give the endpoint time to work through them.)
    let flooded = Instant::now();
    let answered = (0..20).any(|i| ask(&socket, sip, "OPTIONS", &ruri, &format!("after{i}"), "") == [200]);
    eprintln!("OPTIONS answered {:?} after the flood", flooded.elapsed());
    assert!(answered, "OPTIONS answered after the flood");
    let mut refs = [&mut webrtc];
    run_until(&mut refs, Instant::now() + Duration::from_secs(2), |_| false);
    assert_eq!(roster(api, "vault").len(), 2, "the call is still up after the flood");
    talks_both_ways(&mut baresip, &mut webrtc, call_seconds, "the SRTP caller after the flood");
    if let Some(m) = server.metrics_addr() {
        let s = scrape(m);
        let failed = s.get(&series("tutti_rtp_in_rejected_total", &[("reason", "srtp")])).copied().unwrap_or(0.0);
        assert_eq!(failed, 0.0, "every packet of baresip's authenticated");
    }
    assert_eq!(PANICS.load(std::sync::atomic::Ordering::Relaxed), 0, "no panic in the server");
    rt.block_on(server.shutdown());
}
