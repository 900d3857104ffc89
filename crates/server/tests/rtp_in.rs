//! RTP in: a plain RTP/AVP participant (as a SIP gateway bridges a phone
//! caller) joins through the API. Debian's `ffmpeg` sends a 600 Hz tone as
//! plain RTP, relayed from the offered address as a symmetric gateway sends
//! it; a real WebRTC participant (440 Hz) in the same room hears it, and the
//! plain participant's mix, read from a UDP socket and decoded with
//! libopus, holds the 440 Hz tone and not its own 600 Hz. Leaving via
//! DELETE stops its mix. Plain offers are refused (403 `rtp_in_forbidden`)
//! when not configured or from untrusted addresses, malformed ones are 400,
//! and a plain participant that sends nothing times out like any peer.
//!
//! Which packets count: a packet from another port of the gateway's IP,
//! sent before the gateway's first, takes nothing over (the offered address
//! wins, and the hijacker's tone is never heard); an offer with
//! `a=direction:active` (comedia) is latched to the port it sends from, and
//! its mix goes there.

mod common;
mod ops_tools;

use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Ws, create_room, http, room, scrape, series, start_with, test_config};
use ops_tools::{ensure_tool, run};
use tutti_client::{JoinAs, ToneClient, run_until};

fn plain_offer(ip: &str, port: u16, pt: u8) -> String {
    format!(
        "v=0\r\no=gw 1 1 IN IP4 {ip}\r\ns=call\r\nc=IN IP4 {ip}\r\nt=0 0\r\n\
         m=audio {port} RTP/AVP {pt} 101\r\na=rtpmap:{pt} opus/48000/2\r\na=rtpmap:101 telephone-event/8000\r\n"
    )
}

/// The `m=audio` port of an answer.
fn answer_port(sdp: &str) -> u16 {
    let line = sdp.lines().find(|l| l.starts_with("m=audio ")).expect("an m=audio line in the answer");
    line.split_whitespace().nth(1).and_then(|p| p.parse().ok()).expect("a port")
}

fn join_plain(api: SocketAddr, room: &str, offer: &str) -> tutti_client::Response {
    http(api, "POST", &format!("/v1/rooms/{room}/participants"), Some("application/sdp"), offer.as_bytes())
}

#[test]
fn ffmpeg_tone_reaches_a_webrtc_peer_and_the_plain_participant_hears_the_room() {
    let ffmpeg = ensure_tool("ffmpeg", "ffmpeg");
    let mut cfg = test_config();
    cfg.rtp_in.trusted = vec!["127.0.0.0/8".into()];
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "sip");
    let mut webrtc = ToneClient::join(api, "sip", 440.0, JoinAs::Whip).expect("a WebRTC participant joins");

    // The plain participant receives its mix on this socket (the offer's c=/m= address).
    let rx = UdpSocket::bind("127.0.0.1:0").expect("bind loopback");
    rx.set_nonblocking(true).expect("nonblocking");
    let offer = plain_offer("127.0.0.1", rx.local_addr().expect("bound").port(), 111);
    let r = join_plain(api, "sip", &offer);
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("application/sdp"));
    let location = r.header("location").expect("a Location").to_owned();
    assert!(r.body.contains("RTP/AVP 111") && r.body.contains("a=rtpmap:111 opus/48000/2"), "{}", r.body);
    assert!(r.body.contains("c=IN IP4 127.0.0.1"), "{}", r.body);
    let plain_port = answer_port(&r.body);
    assert_ne!(plain_port, server.media_addr().port(), "plain RTP has a port of its own");
    let members = room(api, "sip")["participants"].as_array().expect("participants").len();
    assert_eq!(members, 2);

    // ffmpeg: 600 Hz as Opus over plain RTP, to a relay that sends it on from the offered address
    // (as a symmetric gateway does); its RTCP goes the same way and is ignored.
    let relay = UdpSocket::bind("127.0.0.1:0").expect("bind loopback");
    relay.set_read_timeout(Some(Duration::from_millis(100))).expect("timeout");
    let relay_port = relay.local_addr().expect("bound").port();
    let out = rx.try_clone().expect("a clone");
    let relaying = std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        let end = Instant::now() + Duration::from_secs(30);
        // Ends when ffmpeg has been silent for a second (or at the bound).
        let mut last = Instant::now();
        while Instant::now() < end && last.elapsed() < Duration::from_secs(1) {
            if let Ok(n) = relay.recv(&mut buf) {
                last = Instant::now();
                let _ = out.send_to(&buf[..n], ("127.0.0.1", plain_port));
            }
        }
    });
    let mut cmd = Command::new(&ffmpeg);
    cmd.args(["-hide_banner", "-loglevel", "error", "-re", "-f", "lavfi", "-i", "sine=frequency=600:duration=6"])
        .args(["-c:a", "libopus", "-b:a", "48k", "-ac", "1", "-ar", "48000", "-payload_type", "111", "-f", "rtp"])
        .arg(format!("rtp://127.0.0.1:{relay_port}?rtcpport={relay_port}"));
    let sender = std::thread::spawn(move || run(&mut cmd, "ffmpeg", Duration::from_secs(30)));

    let mut got: Vec<(u16, u32, Vec<u8>)> = Vec::new();
    let mut from_server = true;
    let mut buf = [0u8; 1500];
    let mut refs = [&mut webrtc];
    let started = Instant::now();
    let done = run_until(&mut refs, started + Duration::from_secs(20), |cs| {
        while let Ok((n, from)) = rx.recv_from(&mut buf) {
            from_server &= from.port() == plain_port;
            if n > 12 {
                let p = &buf[..n];
                got.push((
                    u16::from_be_bytes([p[2], p[3]]),
                    u32::from_be_bytes([p[4], p[5], p[6], p[7]]),
                    p[12..].to_vec(),
                ));
            }
        }
        cs[0].heard.len() >= 200 && got.len() >= 200
    });
    assert!(done, "within 20 s: WebRTC heard {} packets, the plain participant got {}", webrtc.heard.len(), got.len());
    assert!(from_server, "the mix comes from the plain RTP port");

    // The WebRTC participant hears ffmpeg's tone (judged on the last 2 s), not its own.
    let since = Instant::now() - Duration::from_secs(2);
    let (hears600, hears440) = (webrtc.hears(600.0, since), webrtc.hears(440.0, since));
    // The plain participant's mix, decoded: the WebRTC tone, not its own.
    let mut dec = opus::Decoder::new(48_000, opus::Channels::Mono).expect("an Opus decoder");
    let mut pcm = Vec::new();
    for (_, _, payload) in &got[got.len() - 100..] {
        let mut out = [0f32; 960];
        if let Ok(n) = dec.decode_float(payload, &mut out, false) {
            pcm.extend_from_slice(&out[..n]);
        }
    }
    let (mix440, mix600) = (tutti_mix::goertzel(&pcm, 440.0), tutti_mix::goertzel(&pcm, 600.0));
    eprintln!(
        "WebRTC hears 600 Hz {hears600:.3}, 440 Hz {hears440:.3}; plain hears 440 Hz {mix440:.3}, 600 Hz {mix600:.3}"
    );
    assert!(hears600 > 0.08, "the WebRTC participant hears ffmpeg's 600 Hz only at {hears600}");
    assert!(hears440 < 0.01, "the WebRTC participant hears itself at {hears440}");
    // (Measured 0.06 to 0.2 of the 0.2 sent, run to run; silence would be ~0. With
    // `room.passthrough = false` it is 0.199 every time: the spread is the mix switching between the
    // encoded mix and the WebRTC participant's forwarded frames, ticks where the unlevelled ffmpeg
    // stream is not selected as a speaker; each switch is a decoder discontinuity.)
    assert!(mix440 > 0.03, "the plain participant hears the WebRTC 440 Hz only at {mix440}");
    assert!(mix600 < 0.01, "the plain participant hears itself at {mix600}");
    // RTP out: one stream, sequence numbers one apart, timestamps on the 960-sample grid.
    let tail = &got[got.len() - 50..];
    assert!(tail.windows(2).all(|w| w[1].0 == w[0].0.wrapping_add(1)), "sequence numbers go up by one");
    assert!(tail.windows(2).all(|w| w[1].1.wrapping_sub(w[0].1) % 960 == 0), "timestamps step by ticks");

    if let Some(m) = server.metrics_addr() {
        let s = scrape(m);
        let get = |name: &str, labels: &[(&str, &str)]| s.get(&series(name, labels)).copied().unwrap_or(0.0);
        // (Metrics are process-wide: the other test's servers may add theirs.)
        assert!(get("tutti_rtp_in_participants", &[]) >= 1.0);
        assert!(get("tutti_rtp_in_packets_received_total", &[]) >= 100.0);
        assert!(get("tutti_rtp_in_packets_sent_total", &[]) >= 200.0);
        assert!(get("tutti_rtp_in_rejected_total", &[("reason", "rtcp")]) >= 1.0, "ffmpeg's RTCP is counted, ignored");
        eprintln!(
            "rtp-in thread: {:.3} s of CPU for {} packets in and {} out ({:.1} s since the plain join)",
            get("tutti_thread_cpu_seconds_total", &[("thread", "rtp-in")]),
            get("tutti_rtp_in_packets_received_total", &[]),
            get("tutti_rtp_in_packets_sent_total", &[]),
            started.elapsed().as_secs_f64()
        );
    }

    // Leaving through the API stops the mix.
    let mut ws = Ws::connect(api, "sip");
    let r = http(api, "DELETE", &location, None, b"");
    assert_eq!(r.status, 204, "{}", r.body);
    ws.wait_for(Duration::from_secs(5), |e| e["type"] == "left" && e["reason"] == "left");
    let mut refs = [&mut webrtc];
    run_until(&mut refs, Instant::now() + Duration::from_millis(300), |_| false);
    while rx.recv_from(&mut buf).is_ok() {}
    let mut after = 0;
    run_until(&mut refs, Instant::now() + Duration::from_millis(500), |_| {
        while rx.recv_from(&mut buf).is_ok() {
            after += 1;
        }
        false
    });
    assert_eq!(after, 0, "no mix after leaving");
    assert_eq!(room(api, "sip")["participants"].as_array().expect("participants").len(), 1);
    let _ = sender.join();
    let _ = relaying.join();
    rt.block_on(server.shutdown());
}

/// Sends `frames` as plain RTP (payload type 111) from `socket` to `to`, one every 20 ms from `start`.
fn send_tone(socket: &UdpSocket, to: SocketAddr, frames: &[Vec<u8>], ssrc: u32, start: Instant) {
    let mut pkt = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let due = start + Duration::from_millis(20 * i as u64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        pkt.clear();
        pkt.extend_from_slice(&[0x80, 111]);
        pkt.extend_from_slice(&(i as u16).to_be_bytes());
        pkt.extend_from_slice(&(960 * i as u32).to_be_bytes());
        pkt.extend_from_slice(&ssrc.to_be_bytes());
        pkt.extend_from_slice(f);
        let _ = socket.send_to(&pkt, to);
    }
}

/// Mix packets waiting on `socket` from `from_port`: how many.
fn drain_mix(socket: &UdpSocket, from_port: u16) -> usize {
    let mut buf = [0u8; 1500];
    let mut n = 0;
    while let Ok((len, from)) = socket.recv_from(&mut buf) {
        n += usize::from(from.port() == from_port && len > 12);
    }
    n
}

#[test]
fn the_offered_address_wins_over_a_hijacker_and_comedia_latches_only_when_asked() {
    let mut cfg = test_config();
    cfg.rtp_in.trusted = vec!["127.0.0.0/8".into()];
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "gw");
    let mut webrtc = ToneClient::join(api, "gw", 440.0, JoinAs::Whip).expect("a WebRTC participant joins");

    // A gateway that sends from the address it offers (no a=direction: strict).
    let gw = UdpSocket::bind("127.0.0.1:0").expect("bind loopback");
    gw.set_nonblocking(true).expect("nonblocking");
    let r = join_plain(api, "gw", &plain_offer("127.0.0.1", gw.local_addr().expect("bound").port(), 111));
    assert_eq!(r.status, 201, "{}", r.body);
    let plain_port = answer_port(&r.body);
    let plain: SocketAddr = ([127, 0, 0, 1], plain_port).into();
    // A gateway behind NAT: it offers port 9 on 127.0.0.3 with a=direction:active, and sends from another port.
    let nat = UdpSocket::bind("127.0.0.3:0").expect("bind 127.0.0.3");
    nat.set_nonblocking(true).expect("nonblocking");
    let comedia = plain_offer("127.0.0.3", 9, 111).replace("m=audio", "a=direction:active\r\nm=audio");
    let r = join_plain(api, "gw", &comedia);
    assert_eq!(r.status, 201, "{}", r.body);
    // Another port of the first gateway's IP: one packet before the gateway's first, then a tone of its own.
    let hijacker = UdpSocket::bind("127.0.0.1:0").expect("bind loopback");
    hijacker.set_nonblocking(true).expect("nonblocking");
    let evil = ops_tools::tone_frames(900.0, 200);
    send_tone(&hijacker, plain, &evil[..1], 0xBAD, Instant::now());
    std::thread::sleep(Duration::from_millis(100));

    let start = Instant::now() + Duration::from_millis(50);
    let senders: Vec<_> = [
        (gw.try_clone().expect("clone"), 600.0, 1u32),
        (nat.try_clone().expect("clone"), 800.0, 2),
        (hijacker.try_clone().expect("clone"), 900.0, 3),
    ]
    .into_iter()
    .map(|(socket, freq, ssrc)| {
        let frames = ops_tools::tone_frames(freq, 200);
        std::thread::spawn(move || send_tone(&socket, plain, &frames, ssrc, start))
    })
    .collect();
    let (mut to_gw, mut to_nat, mut to_hijacker) = (0, 0, 0);
    let mut refs = [&mut webrtc];
    run_until(&mut refs, start + Duration::from_millis(3800), |_| {
        to_gw += drain_mix(&gw, plain_port);
        to_nat += drain_mix(&nat, plain_port);
        to_hijacker += drain_mix(&hijacker, plain_port);
        false
    });
    for s in senders {
        let _ = s.join();
    }
    let since = Instant::now() - Duration::from_millis(2500);
    let [gw600, nat800, evil900] = [600.0, 800.0, 900.0].map(|f| webrtc.hears(f, since));
    eprintln!(
        "WebRTC hears the gateway {gw600:.3}, the comedia gateway {nat800:.3}, the hijacker {evil900:.3}; mix packets: gateway {to_gw}, comedia {to_nat}, hijacker {to_hijacker}"
    );
    assert!(gw600 > 0.03, "the gateway is not heard ({gw600}): its packets were dropped");
    assert!(evil900 < 0.01, "the hijacker is heard ({evil900})");
    assert!(nat800 > 0.03, "the comedia gateway is not heard ({nat800}): it was not latched");
    assert!(to_gw >= 50, "the gateway gets its mix at its offered address: {to_gw}");
    assert!(to_nat >= 50, "the comedia gateway gets its mix where it sends from: {to_nat}");
    assert_eq!(to_hijacker, 0, "the hijacker gets nothing");
    if let Some(m) = server.metrics_addr() {
        let s = scrape(m);
        let source = s.get(&series("tutti_rtp_in_rejected_total", &[("reason", "source")])).copied().unwrap_or(0.0);
        assert!(source >= 100.0, "the hijacker's packets are counted as from no participant: {source}");
    }
    rt.block_on(server.shutdown());
}

#[test]
fn plain_offers_are_refused_unless_trusted_and_silent_ones_time_out() {
    // Not configured: refused, whatever the address.
    let (rt, server) = start_with(test_config());
    let api = server.http_addr();
    create_room(api, "closed");
    let r = join_plain(api, "closed", &plain_offer("127.0.0.1", 40_000, 111));
    assert_eq!((r.status, r.code()), (403, "rtp_in_forbidden".to_owned()), "{}", r.body);
    assert_eq!(room(api, "closed")["participants"].as_array().expect("participants").len(), 0);
    rt.block_on(server.shutdown());

    // Trusted only 10.0.0.0/8: the API client 127.0.0.1 is not.
    let mut cfg = test_config();
    cfg.rtp_in.trusted = vec!["10.0.0.0/8".into()];
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "lan");
    let r = join_plain(api, "lan", &plain_offer("10.0.0.9", 40_000, 111));
    assert_eq!((r.status, r.code()), (403, "rtp_in_forbidden".to_owned()), "{}", r.body);
    rt.block_on(server.shutdown());

    // Trusted loopback, peer timeout 1 s.
    let mut cfg = test_config();
    cfg.rtp_in.trusted = vec!["127.0.0.0/8".into()];
    cfg.peer_timeout_seconds = 1.0;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "gw");
    // The offer may not aim the mix outside the trusted networks.
    let r = join_plain(api, "gw", &plain_offer("192.0.2.1", 40_000, 111));
    assert_eq!((r.status, r.code()), (403, "rtp_in_forbidden".to_owned()), "{}", r.body);
    // Malformed plain offers: 400 bad_sdp, each saying why.
    for (bad, why) in [
        (plain_offer("127.0.0.1", 0, 111), "port 0"),
        ("v=0\r\nc=IN IP4 127.0.0.1\r\nm=audio 4000 RTP/AVP 18\r\na=rtpmap:18 G729/8000\r\n".to_owned(), "PCMA"),
        ("v=0\r\nm=audio 4000 RTP/AVP 111\r\na=rtpmap:111 opus/48000/2\r\n".to_owned(), "c="),
    ] {
        let r = join_plain(api, "gw", &bad);
        assert_eq!((r.status, r.code()), (400, "bad_sdp".to_owned()), "{}", r.body);
        assert!(r.body.contains(why), "{why}: {}", r.body);
    }
    assert_eq!(room(api, "gw")["participants"].as_array().expect("participants").len(), 0);
    // JSON joins take plain offers too; garbage at the plain port changes nothing.
    let mut ws = Ws::connect(api, "gw");
    let body = serde_json::json!({ "sdp": plain_offer("127.0.0.1", 40_002, 111), "name": "phone" }).to_string();
    let r = http(api, "POST", "/v1/rooms/gw/participants", Some("application/json"), body.as_bytes());
    assert_eq!(r.status, 201, "{}", r.body);
    let answer: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    let port = answer_port(answer["sdp"].as_str().expect("sdp"));
    let joined = ws.wait_for(Duration::from_secs(5), |e| e["type"] == "joined");
    assert_eq!(joined["name"], "phone");
    let stray = UdpSocket::bind("127.0.0.2:0").expect("bind 127.0.0.2");
    for i in 0..20u8 {
        let _ = stray.send_to(&[0x80, 111, 0, i, 0, 0, 0, 0, 1, 2, 3, 4, 9, 9], ("127.0.0.1", port));
        let _ = stray.send_to(&[i; 5], ("127.0.0.1", port));
    }
    // A symmetric gateway (sends from the port it offered, payload type 96) that keeps talking.
    let gw = UdpSocket::bind("127.0.0.1:0").expect("bind loopback");
    let offer = plain_offer("127.0.0.1", gw.local_addr().expect("bound").port(), 96);
    let r = join_plain(api, "gw", &offer);
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(r.body.contains("RTP/AVP 96"), "{}", r.body);
    let gateway: u64 = r.header("location").and_then(|l| l.rsplit('/').next()?.parse().ok()).expect("an id");
    let frames = ops_tools::tone_frames(700.0, 250);
    let mut pkt = Vec::new();
    let start = Instant::now();
    let mut left = None;
    for (i, f) in frames.iter().enumerate() {
        let due = start + Duration::from_millis(20 * i as u64);
        while Instant::now() < due {
            if left.is_none() {
                left = ws.try_next().filter(|e| e["type"] == "left");
            } else {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        pkt.clear();
        pkt.extend_from_slice(&[0x80, 96]);
        pkt.extend_from_slice(&(i as u16).to_be_bytes());
        pkt.extend_from_slice(&(960 * i as u32).to_be_bytes());
        pkt.extend_from_slice(&0x6A7E_0001u32.to_be_bytes());
        pkt.extend_from_slice(f);
        gw.send_to(&pkt, ("127.0.0.1", port)).expect("send");
        if i % 50 == 0 {
            // Comfort noise (payload type 13, not offered): not audio, dropped and counted.
            // (A telephone-event the offer names, 101, is a key: see tests/sip.rs.)
            let _ = gw.send_to(&[0x80, 13, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 40], ("127.0.0.1", port));
        }
        if left.is_some() && i >= 100 {
            break;
        }
    }
    // The silent one is removed after the peer timeout, like a silent WebRTC peer; the gateway stays.
    let left = left.expect("the silent plain participant left within 5 s");
    assert_eq!(left["reason"], "timed_out");
    let members = room(api, "gw")["participants"].clone();
    let members = members.as_array().expect("participants");
    assert_eq!(members.len(), 1, "{members:?}");
    assert_eq!(members[0]["id"].as_u64(), Some(gateway));
    let r = http(api, "DELETE", &format!("/v1/rooms/gw/participants/{gateway}"), None, b"");
    assert_eq!(r.status, 204, "{}", r.body);
    if let Some(m) = server.metrics_addr() {
        let s = scrape(m);
        let get = |labels: &[(&str, &str)]| s.get(&series("tutti_rtp_in_rejected_total", labels)).copied();
        assert!(get(&[("reason", "source")]).unwrap_or(0.0) >= 20.0, "stray packets counted");
        assert!(get(&[("reason", "malformed")]).unwrap_or(0.0) >= 20.0, "garbage counted");
        assert!(get(&[("reason", "forbidden")]).unwrap_or(0.0) >= 1.0, "the refused join counted");
        assert!(get(&[("reason", "payload_type")]).unwrap_or(0.0) >= 2.0, "comfort noise counted");
        let received = s.get("tutti_rtp_in_packets_received_total").copied().unwrap_or(0.0);
        assert!(received >= 100.0, "the gateway's packets were taken: {received}");
    }
    // The WebSocket join takes WebRTC offers only: a plain one is a clear error there.
    let mut ws = Ws::connect(api, "gw");
    ws.send(serde_json::json!({ "type": "join", "sdp": plain_offer("127.0.0.1", 40_004, 111) }));
    let e = ws.wait_for(Duration::from_secs(5), |e| e["type"] == "error");
    assert_eq!(e["code"], "bad_sdp", "{e}");
    assert_eq!(room(api, "gw")["participants"].as_array().expect("participants").len(), 0);
    // A gateway that offers G.711 only (PCMU, then PCMA) is answered PCMU (transcoded at the leg: tests/sip.rs).
    let g711 = "v=0\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 40006 RTP/AVP 0 8 101\r\n\
                a=rtpmap:101 telephone-event/8000\r\n";
    let r = join_plain(api, "gw", g711);
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(r.body.contains(" RTP/AVP 0 101\r\na=rtpmap:0 PCMU/8000\r\n"), "{}", r.body);
    rt.block_on(server.shutdown());
}
