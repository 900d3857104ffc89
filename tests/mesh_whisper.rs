//! A whisper stays a whisper in a room spread over nodes (issue 40, item
//! 1): two `tutti serve` processes (127.0.0.2 and .3) on a real Redis, one
//! room over both, real WebRTC talkers with their own tones. A coach on
//! node A whispers to a participant on A; the participant on node B, who
//! hears the room from both nodes, never hears the coach, while the
//! coach's listener does; once the channel closes, B hears the coach again.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::cluster::{Node, Redis, SECRET, join_placed, send, shared_ports, ticket_for};
use tutti_client::{Requester, ToneClient, request_as, run_until};
use tutti_server::auth::{Auth, Grant, unix_now};

const ROOM: &str = "coaching";
const COACH: f32 = 440.0;
const PUPIL: f32 = 660.0;
const FAR: f32 = 990.0;

/// Pumps the clients until `ok` holds over the last second (or `within` passes).
fn until(clients: &mut [&mut ToneClient], within: Duration, ok: impl Fn(&[&mut ToneClient], Instant) -> bool) -> bool {
    let start = Instant::now();
    run_until(clients, start + within, |cs| {
        let since = Instant::now() - Duration::from_secs(1);
        since > start && ok(cs, since)
    })
}

#[test]
fn a_whisper_is_heard_by_its_listener_only_on_every_node() {
    let redis = Redis::start();
    let ports = shared_ports();
    let spread = [("TUTTI_CLUSTER_ROOM_SPREAD", "always"), ("TUTTI_ROOM_EMPTY_TIMEOUT_SECONDS", "0")];
    let nodes: Vec<Node> = (2..=3).map(|n| Node::start_with(n, ports, &redis, &spread)).collect();
    for n in &nodes {
        n.wait_ready();
    }
    let (a, b) = (nodes[0].api, nodes[1].api);
    let admin = Auth::new(SECRET).unwrap().mint(&Grant::admin("ops"), Duration::from_secs(600), unix_now()).unwrap();
    // The room created on A (a create redirected there): A holds it and its channels.
    let create =
        format!("/v1/rooms?room={ROOM}&ticket={}", ticket_for(ROOM, "ops", false, true, ("POST", "/v1/rooms")));
    let r = request_as(a, &Requester::default(), "POST", &create, Some("application/json"), b"{}").unwrap();
    assert_eq!(r.status, 201, "{}", r.body);
    let mut coach = join_placed(a, ROOM, "coach", COACH).unwrap();
    let mut pupil = join_placed(a, ROOM, "pupil", PUPIL).unwrap();
    let mut far = join_placed(b, ROOM, "far", FAR).unwrap();

    // Before the whisper, the participant on B hears both of A's.
    let hears = |c: &ToneClient, f: f32, since: Instant| c.hears(f, since) > 0.05;
    let silent = |c: &ToneClient, f: f32, since: Instant| c.hears(f, since) < 0.02;
    assert!(
        until(&mut [&mut coach, &mut pupil, &mut far], Duration::from_secs(15), |cs, s| {
            hears(cs[2], COACH, s) && hears(cs[2], PUPIL, s) && hears(cs[1], FAR, s)
        }),
        "the room sounds as one over both nodes"
    );

    // The coach whispers to the pupil.
    let body = format!(r#"{{"speakers":[{}],"listeners":[{}]}}"#, coach.id, pupil.id);
    let (r, _) = send(a, &admin, "POST", &format!("/v1/rooms/{ROOM}/whispers"), &body);
    assert_eq!(r.status, 201, "{}", r.body);
    let channel = common::cluster::json(&r)["id"].clone();
    // The pupil hears the coach; B's participant hears the pupil but never the coach.
    assert!(
        until(&mut [&mut coach, &mut pupil, &mut far], Duration::from_secs(10), |cs, s| {
            hears(cs[1], COACH, s) && hears(cs[2], PUPIL, s) && silent(cs[2], COACH, s)
        }),
        "B's participant hears the coach's whisper: {} (pupil {})",
        far.hears(COACH, Instant::now() - Duration::from_secs(1)),
        pupil.hears(COACH, Instant::now() - Duration::from_secs(1)),
    );
    // And stays so.
    let since = Instant::now();
    tutti_client::run_for(&mut [&mut coach, &mut pupil, &mut far], Duration::from_secs(3));
    assert!(silent(&far, COACH, since), "B's participant heard the whisper: {}", far.hears(COACH, since));
    assert!(hears(&pupil, COACH, since), "the pupil hears the coach");

    // The channel closed, the coach is heard on B again.
    let (r, _) = send(a, &admin, "DELETE", &format!("/v1/rooms/{ROOM}/whispers/{channel}"), "");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        until(&mut [&mut coach, &mut pupil, &mut far], Duration::from_secs(10), |cs, s| hears(cs[2], COACH, s)),
        "the coach is heard on B once the whisper ends"
    );
}
