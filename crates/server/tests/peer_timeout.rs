//! A participant that vanishes without hanging up (its process killed, its
//! network gone) is removed after the peer timeout, and so is one that
//! joined but never started ICE. Everything they held is freed.

mod common;

use std::time::{Duration, Instant};

use common::{Ws, create_room, http, room, start_with, test_config};
use tutti_client::{JoinAs, ToneClient, run_until};
use tutti_server::Config;

#[test]
fn vanished_participants_are_removed_after_the_timeout() {
    let cfg = Config { peer_timeout_seconds: 2.0, ..test_config() };
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "t");
    let mut observer = Ws::connect(api, "t");

    let mut stays = ToneClient::join(api, "t", 440.0, JoinAs::Whip).expect("join");
    let mut vanishes = ToneClient::join(api, "t", 660.0, JoinAs::Whip).expect("join");
    // Joins, but never sends an ICE check.
    let (_silent, offer) = ToneClient::offer(880.0).expect("offer");
    let r = http(api, "POST", "/v1/rooms/t/participants", Some("application/sdp"), offer.as_bytes());
    assert_eq!(r.status, 201);
    let never: u64 = r.header("location").and_then(|l| l.rsplit('/').next()?.parse().ok()).expect("id");

    let mut both = [&mut stays, &mut vanishes];
    assert!(run_until(&mut both, Instant::now() + Duration::from_secs(10), |cs| cs.iter().all(|c| c.heard.len() > 10)));
    assert_eq!(server.media_stats().peers, 2);
    let gone_at = Instant::now();
    // From now on only `stays` is driven: `vanishes` sends nothing, answers nothing.
    let mut one = [&mut stays];
    let mut left = Vec::new();
    run_until(&mut one, Instant::now() + Duration::from_secs(8), |_| {
        while let Some(v) = observer.try_next() {
            if v["type"] == "left" {
                left.push((
                    v["id"].as_u64().unwrap_or(0),
                    v["reason"].as_str().unwrap_or("").to_owned(),
                    gone_at.elapsed(),
                ));
            }
        }
        left.len() >= 2
    });
    let ids: Vec<u64> = left.iter().map(|l| l.0).collect();
    assert!(ids.contains(&vanishes.id) && ids.contains(&never), "both removed: {left:?}");
    for (_, reason, after) in &left {
        assert_eq!(reason, "timed_out");
        assert!(
            *after < Duration::from_secs(5),
            "removed within the 2 s timeout plus a tick of housekeeping: {after:?}"
        );
    }
    let listed = room(api, "t")["participants"].as_array().cloned().unwrap_or_default();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["id"], stays.id);
    assert_eq!(server.participants(), 1);
    assert_eq!(server.media_stats().peers, 1, "the vanished peer's state is freed");
    assert_eq!(server.media_stats().peers_timed_out, 1);
    let held = server.resources();
    assert_eq!(
        (held.participants, held.registered_peers, held.pending_peers, held.io_peers, held.forwarded_addresses),
        (1, 1, 0, 1, 0),
        "only the participant who stayed holds anything: {held:?}"
    );
    // The one that never connected (an answer applied too late): asking about
    // it says what happened, not a bare 404.
    let late =
        http(api, "PATCH", &format!("/v1/rooms/t/participants/{never}"), Some("application/sdp"), offer.as_bytes());
    assert_eq!((late.status, late.code().as_str()), (410, "participant_left"), "{}", late.body);
    assert!(late.body.contains("timed_out") && late.body.contains("peer_timeout_seconds"), "{}", late.body);
    let r = http(api, "DELETE", &format!("/v1/rooms/t/participants/{never}"), None, b"");
    assert_eq!(r.code(), "participant_left", "{}", r.body);
    let r = http(api, "DELETE", "/v1/rooms/t/participants/987654", None, b"");
    assert_eq!(r.code(), "participant_not_found", "one that never was: {}", r.body);
    rt.block_on(server.shutdown());
}

/// A participant that hangs up over DTLS only (close_notify, no REST leave,
/// as a WebRTC client closing its connection does) leaves at once, with
/// reason `left`, not at the peer timeout.
#[test]
fn a_close_notify_leaves_at_once() {
    let cfg = Config { peer_timeout_seconds: 10.0, ..test_config() };
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "h");
    let mut observer = Ws::connect(api, "h");
    let mut stays = ToneClient::join(api, "h", 440.0, JoinAs::Whip).expect("join");
    let mut hangs_up = ToneClient::join(api, "h", 660.0, JoinAs::Whip).expect("join");
    let mut both = [&mut stays, &mut hangs_up];
    assert!(run_until(&mut both, Instant::now() + Duration::from_secs(10), |cs| cs.iter().all(|c| c.heard.len() > 10)));
    let closed_at = Instant::now();
    hangs_up.close();
    let mut left = None;
    let mut one = [&mut stays];
    run_until(&mut one, Instant::now() + Duration::from_secs(8), |_| {
        while let Some(v) = observer.try_next() {
            if v["type"] == "left" && v["id"].as_u64() == Some(hangs_up.id) {
                left = Some((v["reason"].as_str().unwrap_or("").to_owned(), closed_at.elapsed()));
            }
        }
        left.is_some()
    });
    let (reason, after) = left.expect("the participant that hung up left");
    println!("left {after:?} after its close_notify, reason {reason}");
    assert!(after < Duration::from_secs(2), "at once, not at the 10 s peer timeout: {after:?}");
    assert_ne!(reason, "timed_out");
    assert_eq!(server.participants(), 1);
    rt.block_on(server.shutdown());
}
