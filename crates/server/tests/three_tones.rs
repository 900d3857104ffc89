//! Three real WebRTC clients join one room over the HTTP API; each hears the
//! other two tones and not its own. Garbage on the media port changes nothing.

mod common;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{http, start};
use tutti_mix::{FRAME_SAMPLES, goertzel, level_of, tone};
use tutti_rtc::{AudioPacket, ClientEvent, ClientPeer};

struct Client {
    peer: ClientPeer,
    socket: UdpSocket,
    freq: f32,
    encoder: opus::Encoder,
    sent: u64,
    next_send: Option<Instant>,
    heard: Vec<AudioPacket>,
}

#[test]
fn each_participant_hears_the_other_two_and_not_themselves() {
    let (rt, server) = start();
    let api = server.http_addr();
    let r = http(api, "POST", "/v1/rooms", Some("application/json"), br#"{"id":"trio"}"#);
    assert_eq!(r.status, 201, "{}", r.body);

    let mut clients = Vec::new();
    for (i, freq) in [440.0f32, 660.0, 880.0].into_iter().enumerate() {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
        socket.set_nonblocking(true).expect("nonblocking");
        let (mut peer, offer) = ClientPeer::new(socket.local_addr().expect("addr"), Instant::now()).expect("client");
        let answer = if i == 2 {
            // One joins with JSON, the others WHIP-style.
            let body = serde_json::json!({ "sdp": offer, "name": "carol" }).to_string();
            let r = http(api, "POST", "/v1/rooms/trio/participants", Some("application/json"), body.as_bytes());
            assert_eq!(r.status, 201, "{}", r.body);
            let v: serde_json::Value = serde_json::from_str(&r.body).expect("JSON answer");
            v["sdp"].as_str().expect("sdp").to_owned()
        } else {
            let r = http(api, "POST", "/v1/rooms/trio/participants", Some("application/sdp"), offer.as_bytes());
            assert_eq!(r.status, 201, "{}", r.body);
            assert_eq!(r.header("content-type"), Some("application/sdp"));
            assert!(r.header("location").is_some_and(|l| l.starts_with("/v1/rooms/trio/participants/")));
            r.body
        };
        peer.accept_answer(&answer, Instant::now()).expect("answer");
        let encoder = opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Voip).expect("encoder");
        clients.push(Client { peer, socket, freq, encoder, sent: 0, next_send: None, heard: Vec::new() });
    }
    let room: serde_json::Value =
        serde_json::from_str(&http(api, "GET", "/v1/rooms/trio", None, b"").body).expect("JSON");
    assert_eq!(room["participants"].as_array().map(Vec::len), Some(3));

    let attacker = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let mut buf = vec![0u8; 2048];
    let start = Instant::now();
    let limit = start + Duration::from_secs(30);
    // Each client sends 4 s of its tone once connected.
    while Instant::now() < limit && clients.iter().any(|c| c.sent < 200 || c.heard.len() < 190) {
        let now = Instant::now();
        for c in &mut clients {
            c.peer.pump_udp(&c.socket, &mut buf, now).expect("client socket");
            while let Some(event) = c.peer.poll_event() {
                match event {
                    ClientEvent::Connected => c.next_send = Some(now),
                    ClientEvent::Audio(p) => c.heard.push(p),
                    ClientEvent::Closed => panic!("{} Hz client closed", c.freq),
                }
            }
            if let Some(due) = c.next_send
                && now >= due
                && c.sent < 200
            {
                let pcm = tone(c.freq, 0.2, c.sent * FRAME_SAMPLES as u64);
                let payload = Bytes::from(c.encoder.encode_vec_float(&pcm, 1500).expect("encode"));
                c.peer.send_audio(payload, Some(level_of(&pcm)), now).expect("send");
                c.sent += 1;
                c.next_send = Some(due + Duration::from_millis(20));
                if c.sent == 50 && c.freq == 440.0 {
                    for i in 0..100u8 {
                        let _ = attacker.send_to(&[i; 64], server.media_addr());
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }

    for c in &clients {
        assert!(c.heard.len() >= 190, "{} Hz client heard {} packets", c.freq, c.heard.len());
        let mut dec = opus::Decoder::new(48_000, opus::Channels::Mono).expect("decoder");
        let mut pcm = Vec::new();
        for p in &c.heard {
            let mut frame = [0.0f32; FRAME_SAMPLES];
            let n = dec.decode_float(&p.payload, &mut frame, false).expect("the mix is valid Opus");
            pcm.extend_from_slice(&frame[..n]);
        }
        // Judge the middle of the call, when all three were talking.
        let mid = &pcm[pcm.len() / 4..pcm.len() * 3 / 4];
        for other in &clients {
            let amp = goertzel(mid, other.freq);
            if other.freq == c.freq {
                assert!(amp < 0.01, "{} Hz client hears itself at {amp}", c.freq);
            } else {
                assert!(amp > 0.08, "{} Hz client hears {} Hz only at {amp}", c.freq, other.freq);
            }
        }
    }
    assert_eq!(server.tick_overruns(), 0, "the mixer kept time");
    rt.block_on(server.shutdown());
}
