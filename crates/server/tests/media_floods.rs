//! The media port under floods from the network, during a real call (two
//! WebRTC participants, 440 Hz and 660 Hz, each hearing the other):
//!
//! 1. forged ICE checks naming both participants' server ufrags (taken from
//!    their answers, as anyone on the path sees them), with a MESSAGE-INTEGRITY
//!    of random bytes, from 128 loopback source addresses: none of them is
//!    learnt as a route (each peer keeps at most `tutti_rtc::MAX_ROUTES`),
//!    all are counted as forged, and the call goes on;
//! 2. unroutable garbage (random bytes, RTP-looking packets, ICE checks for
//!    ufrags nobody has) from as many addresses: dropped and counted on the
//!    I/O threads without one look in the shared peer registry (its claim
//!    counter stays still), and the call goes on.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use common::{create_room, http, start_with, test_config};
use tutti_client::{ToneClient, run_until};

/// Joins `room` as a tone client; returns it and the server ufrag of its answer.
fn join(api: SocketAddr, room: &str, freq: f32) -> (ToneClient, String) {
    let (mut client, offer) = ToneClient::offer(freq).expect("an offer");
    let r = http(api, "POST", &format!("/v1/rooms/{room}/participants"), Some("application/sdp"), offer.as_bytes());
    assert_eq!(r.status, 201, "{}", r.body);
    client.location = r.header("location").expect("a Location").to_owned();
    let id = client.location.rsplit('/').next().and_then(|s| s.parse().ok()).expect("an id");
    client.accept_answer(&r.body, id).expect("the answer applies");
    let ufrag = r.body.lines().find_map(|l| l.trim_end().strip_prefix("a=ice-ufrag:")).expect("a ufrag").to_owned();
    (client, ufrag)
}

/// 128 sockets on 127.0.0.2 to 127.0.0.9: as many source addresses.
fn flooders() -> Vec<UdpSocket> {
    (2..10u8)
        .flat_map(|ip| (0..16).map(move |_| UdpSocket::bind((std::net::Ipv4Addr::new(127, 0, 0, ip), 0))))
        .map(|s| s.expect("bind a loopback address"))
        .collect()
}

/// A Binding request as a browser's check, USERNAME `username`, with a
/// MESSAGE-INTEGRITY of `seed`-derived bytes: well-formed, but signed with
/// nobody's password.
fn forged_check(username: &str, seed: u32) -> Vec<u8> {
    let mut body = Vec::new();
    let mut attr = |kind: u16, value: &[u8]| {
        body.extend_from_slice(&kind.to_be_bytes());
        body.extend_from_slice(&(value.len() as u16).to_be_bytes());
        body.extend_from_slice(value);
        while body.len() % 4 != 0 {
            body.push(0);
        }
    };
    attr(0x0006, username.as_bytes());
    attr(0x0025, &[]); // USE-CANDIDATE
    attr(0x802A, &u64::from(seed).to_be_bytes()); // ICE-CONTROLLING
    attr(0x0024, &1_853_817_087u32.to_be_bytes()); // PRIORITY
    let mac: Vec<u8> = (0..20u32).map(|i| (seed.wrapping_mul(2_654_435_761).wrapping_add(i * 97) >> 8) as u8).collect();
    attr(0x0008, &mac);
    let mut m = vec![0x00, 0x01];
    m.extend_from_slice(&(body.len() as u16).to_be_bytes());
    m.extend_from_slice(&[0x21, 0x12, 0xA4, 0x42]);
    m.extend_from_slice(&seed.to_be_bytes());
    m.extend_from_slice(&[7; 8]);
    m.extend_from_slice(&body);
    m
}

/// Runs the clients for `d` while `flood` is called every 20 ms; returns how many datagrams it sent.
fn run_flooding(clients: &mut [&mut ToneClient], d: Duration, mut flood: impl FnMut(u32) -> usize) -> usize {
    let (end, mut next, mut round, mut sent) = (Instant::now() + d, Instant::now(), 0u32, 0);
    run_until(clients, end, |_| {
        if Instant::now() >= next {
            next += Duration::from_millis(20);
            sent += flood(round);
            round += 1;
        }
        false
    });
    sent
}

/// Both participants hear each other's tone (judged on the last second), never their own.
fn assert_call_is_fine(a: &ToneClient, b: &ToneClient, when: &str) {
    let since = Instant::now() - Duration::from_secs(1);
    let (a_hears_b, a_hears_a) = (a.hears(660.0, since), a.hears(440.0, since));
    let (b_hears_a, b_hears_b) = (b.hears(440.0, since), b.hears(660.0, since));
    eprintln!(
        "{when}: A hears B {a_hears_b:.3} (itself {a_hears_a:.3}), B hears A {b_hears_a:.3} (itself {b_hears_b:.3})"
    );
    assert!(a_hears_b > 0.05 && b_hears_a > 0.05, "{when}: the call's audio is gone");
    assert!(a_hears_a < 0.01 && b_hears_b < 0.01, "{when}: a participant hears itself");
}

#[test]
fn forged_checks_route_nothing_and_garbage_never_reaches_the_registry_while_a_call_goes_on() {
    let (rt, server) = start_with(test_config());
    let api = server.http_addr();
    let media = server.media_addr();
    create_room(api, "flood");
    let (mut a, ufrag_a) = join(api, "flood", 440.0);
    let (mut b, ufrag_b) = join(api, "flood", 660.0);
    let mut both = [&mut a, &mut b];
    let heard = run_until(&mut both, Instant::now() + Duration::from_secs(15), |cs| {
        cs.iter().all(|c| c.connected && c.heard.len() >= 100)
    });
    assert!(heard, "the call is up within 15 s");
    assert_call_is_fine(&a, &b, "before the floods");
    let socks = flooders();
    let before = server.media_stats();
    assert_eq!(before.peers, 2);
    assert!(before.routes >= 2 && before.routes <= 2 * tutti_rtc::MAX_ROUTES as u64, "{before:?}");

    // 1. Forged checks naming both peers, from 128 addresses, for 2 s.
    let names = [format!("{ufrag_a}:evil"), format!("{ufrag_b}:evil")];
    let mut both = [&mut a, &mut b];
    let forged = run_flooding(&mut both, Duration::from_secs(2), |round| {
        let mut n = 0;
        for (i, s) in socks.iter().enumerate() {
            let name = &names[i % 2];
            n += usize::from(s.send_to(&forged_check(name, round * 1000 + i as u32), media).is_ok());
        }
        n
    });
    let after = server.media_stats();
    eprintln!("{forged} forged checks sent; before {before:?}\nafter {after:?}");
    assert!(after.forged_checks - before.forged_checks >= forged as u64 / 2, "forged checks are counted as such");
    assert_eq!(after.routes, before.routes, "not one route learnt from a forged check");
    assert!(after.routes <= 2 * tutti_rtc::MAX_ROUTES as u64);
    assert_eq!(after.registry_claims, before.registry_claims, "forged checks stop at their I/O thread");
    assert_eq!((after.peers, after.peers_failed, after.peers_timed_out), (2, 0, 0));
    assert_call_is_fine(&a, &b, "after forged checks");

    // 2. Garbage from the same addresses, for 2 s: random bytes, RTP-looking
    // packets, checks for a ufrag in our form that nobody has, and for one
    // in no form of ours.
    let before = after;
    let mut both = [&mut a, &mut b];
    let mut seed = 0x2545_F491u32;
    let garbage = run_flooding(&mut both, Duration::from_secs(2), |round| {
        let mut n = 0;
        for (i, s) in socks.iter().enumerate() {
            let data = match (round as usize + i) % 4 {
                0 => (0..40 + i % 100)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 17;
                        seed ^= seed << 5;
                        seed as u8
                    })
                    .collect(),
                1 => {
                    let mut p = vec![0x80, 111, 0, round as u8, 0, 0, 0, 9, 1, 2, 3, 4];
                    p.extend_from_slice(&[0xF8; 60]);
                    p
                }
                2 => forged_check("t7fffffffabcdef:x", round + i as u32),
                _ => forged_check("nobody-here:x", round + i as u32),
            };
            n += usize::from(s.send_to(&data, media).is_ok());
        }
        n
    });
    let after = server.media_stats();
    eprintln!("{garbage} datagrams of garbage sent; after {after:?}");
    assert!(after.unrouted - before.unrouted >= garbage as u64 / 2, "garbage is dropped and counted");
    assert_eq!(after.registry_claims, before.registry_claims, "no garbage reached the shared registry");
    assert_eq!(after.routes, before.routes);
    assert_eq!(after.forwarded_addresses, before.forwarded_addresses);
    assert_eq!((after.peers, after.peers_failed, after.peers_timed_out), (2, 0, 0));
    assert_call_is_fine(&a, &b, "after garbage");
    rt.block_on(server.shutdown());
}
