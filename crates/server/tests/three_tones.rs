//! Three real WebRTC clients join one room over the HTTP API (two
//! WHIP-style, one with JSON); each hears the other two tones and not its
//! own. Garbage sprayed on the media port mid-call changes nothing.

mod common;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use common::{create_room, room, start};
use tutti_client::{JoinAs, ToneClient, run_until};

#[test]
fn each_participant_hears_the_other_two_and_not_themselves() {
    let (rt, server) = start();
    let api = server.http_addr();
    create_room(api, "trio");
    let mut clients: Vec<ToneClient> = [(440.0, JoinAs::Whip), (660.0, JoinAs::Whip), (880.0, JoinAs::Json)]
        .into_iter()
        .map(|(f, how)| ToneClient::join(api, "trio", f, how).expect("join"))
        .collect();
    assert!(clients.iter().all(|c| c.location.starts_with("/v1/rooms/trio/participants/")));
    let names: Vec<String> = room(api, "trio")["participants"]
        .as_array()
        .expect("participants")
        .iter()
        .map(|p| p["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(names.len(), 3);
    assert!(names.contains(&"880 Hz".to_owned()), "the JSON join's name is kept: {names:?}");

    let attacker = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let mut refs: Vec<&mut ToneClient> = clients.iter_mut().collect();
    // Each sends 4 s of its tone once connected; garbage after 1 s.
    let mut sprayed = false;
    let done = run_until(&mut refs, Instant::now() + Duration::from_secs(30), |cs| {
        if !sprayed && cs.iter().all(|c| c.sent >= 50) {
            for i in 0..100u8 {
                let _ = attacker.send_to(&[i; 64], server.media_addr());
            }
            sprayed = true;
        }
        cs.iter().all(|c| c.sent >= 200 && c.heard.len() >= 190)
    });
    assert!(
        done,
        "every client sent 200 frames and heard 190: {:?}",
        clients.iter().map(|c| c.heard.len()).collect::<Vec<_>>()
    );
    assert!(server.media_stats().unrouted >= 100, "garbage counted as unrouted: {:?}", server.media_stats());

    for c in &clients {
        // Judge the middle of the call, when all three were talking.
        let (first, last) = (c.heard[0].0, c.heard[c.heard.len() - 1].0);
        let since = first + (last - first) / 4;
        for other in &clients {
            let amp = c.hears(other.freq, since);
            if other.freq == c.freq {
                assert!(amp < 0.01, "{} Hz client hears itself at {amp}", c.freq);
            } else {
                assert!(amp > 0.08, "{} Hz client hears {} Hz only at {amp}", c.freq, other.freq);
            }
        }
        // RFC 6465: the mix names its sources, never the receiver itself.
        let mixed = &c.heard[c.heard.len() - 1].1.contributors;
        assert_eq!(mixed.len(), 2, "{} Hz client's mix has two contributors: {mixed:?}", c.freq);
        assert!(mixed.iter().all(|m| m.level < 127), "contributors carry their levels: {mixed:?}");
    }
    rt.block_on(server.shutdown());
}
