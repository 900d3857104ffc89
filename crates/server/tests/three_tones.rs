//! Three real WebRTC clients join one room over the HTTP API; each hears the
//! other two tones and not its own. Garbage on the media port changes nothing.

mod common;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use common::{Join, ToneClient, http, start};
use tutti_mix::{FRAME_SAMPLES, goertzel};

#[test]
fn each_participant_hears_the_other_two_and_not_themselves() {
    let (rt, server) = start();
    let api = server.http_addr();
    let r = http(api, "POST", "/v1/rooms", Some("application/json"), br#"{"id":"trio"}"#);
    assert_eq!(r.status, 201, "{}", r.body);

    // One joins with JSON, the others WHIP-style.
    let mut clients = vec![
        ToneClient::join(api, "trio", 440.0, Join::Whip),
        ToneClient::join(api, "trio", 660.0, Join::Whip),
        ToneClient::join(api, "trio", 880.0, Join::Json { name: "carol" }),
    ];
    let room: serde_json::Value =
        serde_json::from_str(&http(api, "GET", "/v1/rooms/trio", None, b"").body).expect("JSON");
    assert_eq!(room["participants"].as_array().map(Vec::len), Some(3));

    let attacker = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let mut buf = vec![0u8; 2048];
    let mut attacked = false;
    let start = Instant::now();
    let limit = start + Duration::from_secs(30);
    // Each client sends 4 s of its tone once connected.
    while Instant::now() < limit && clients.iter().any(|c| c.sent < 200 || c.heard.len() < 190) {
        let now = Instant::now();
        for c in &mut clients {
            c.pump(&mut buf, now, 200);
            if c.sent == 50 && c.freq == 440.0 && !attacked {
                attacked = true;
                for i in 0..100u8 {
                    let _ = attacker.send_to(&[i; 64], server.media_addr());
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
