//! A participant that joined over the WebSocket survives losing it: a new
//! socket resumes it with the key its answer carried (as the page does
//! after a network change, beside its ICE restart), while the call goes on.
//! A lost socket not resumed within `limits.ws_resume_seconds` leaves; a
//! socket closed with a close frame leaves at once.

mod common;

use std::time::{Duration, Instant};

use common::{Ws, create_room, room, start_with, test_config};
use serde_json::{Value, json};
use tutti_client::{JoinAs, ToneClient, run_for, run_until};

const ROOM: &str = "resume";
const GRACE: f64 = 2.0;
const WAIT: Duration = Duration::from_secs(10);

fn members(api: std::net::SocketAddr) -> Vec<u64> {
    room(api, ROOM)["participants"].as_array().into_iter().flatten().filter_map(|p| p["id"].as_u64()).collect()
}

/// Joins a tone client through a socket: (client, participant id, resume key).
fn join_over(ws: &mut Ws, freq: f32) -> (ToneClient, u64, String) {
    let (mut client, offer) = ToneClient::offer(freq).expect("offer");
    ws.send(json!({ "type": "join", "sdp": offer }));
    let answer = ws.wait_for(WAIT, |v| v["type"] == "answer" || v["type"] == "error");
    assert_eq!(answer["type"], "answer", "{answer}");
    let id = answer["id"].as_u64().expect("id");
    client.accept_answer(answer["sdp"].as_str().expect("sdp"), id).expect("answer applied");
    (client, id, answer["resume"].as_str().expect("a resume key").to_owned())
}

/// Events seen by `ws` while the clients run for `d`.
fn events_during(ws: &mut Ws, clients: &mut [&mut ToneClient], d: Duration) -> Vec<Value> {
    let end = Instant::now() + d;
    let mut seen = Vec::new();
    while Instant::now() < end {
        run_for(clients, Duration::from_millis(20));
        while let Some(v) = ws.try_next() {
            if v.is_null() {
                break;
            }
            seen.push(v);
        }
    }
    seen
}

#[test]
fn a_lost_socket_is_resumed_and_an_unclaimed_one_leaves_after_the_grace_period() {
    let mut cfg = test_config();
    cfg.limits.ws_resume_seconds = GRACE;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, ROOM);
    let mut observer = Ws::connect(api, ROOM);
    let mut first = Ws::connect(api, ROOM);
    let (mut alice, alice_id, key) = join_over(&mut first, 440.0);
    let mut bob = ToneClient::join(api, ROOM, 660.0, JoinAs::Whip).expect("bob joins");
    assert!(
        run_until(&mut [&mut alice, &mut bob], Instant::now() + WAIT, |cs| cs.iter().all(|c| c.heard.len() >= 50)),
        "both connected"
    );

    // The socket is lost (no close frame): alice stays, and is still heard.
    drop(first);
    let since = Instant::now();
    let seen = events_during(&mut observer, &mut [&mut alice, &mut bob], Duration::from_secs(1));
    assert!(!seen.iter().any(|e| e["type"] == "left"), "no leave while the grace period runs: {seen:?}");
    assert_eq!(members(api).len(), 2);
    assert!(bob.hears(440.0, since) > 0.05, "bob still hears alice: {}", bob.hears(440.0, since));

    // A new socket: a wrong key is refused, the right one takes her back.
    let mut second = Ws::connect(api, ROOM);
    second.send(json!({ "type": "resume", "id": alice_id, "key": "0123" }));
    let refused = second.wait_for(WAIT, |v| v["type"] == "error");
    assert_eq!(refused["code"], "resume_failed", "{refused}");
    second.send(json!({ "type": "resume", "id": alice_id, "key": key }));
    let resumed = second.wait_for(WAIT, |v| v["type"] == "resumed" || v["type"] == "error");
    assert_eq!(resumed, json!({ "type": "resumed", "id": alice_id }));
    // Past the grace period: still in the room, and the new socket speaks for her.
    let seen = events_during(&mut observer, &mut [&mut alice, &mut bob], Duration::from_secs_f64(GRACE + 0.5));
    assert!(!seen.iter().any(|e| e["type"] == "left"), "resumed: no leave: {seen:?}");
    assert_eq!(members(api).len(), 2);
    second.send(json!({ "type": "mute", "muted": true }));
    observer.wait_for(WAIT, |v| v == &json!({ "type": "muted", "id": alice_id, "muted": true }));

    // Lost again and not resumed: she leaves once the grace period ends.
    drop(second);
    let lost = Instant::now();
    let left = observer.wait_for(WAIT, |v| v["type"] == "left");
    let after = lost.elapsed();
    assert_eq!(left, json!({ "type": "left", "id": alice_id, "reason": "left" }));
    assert!(after >= Duration::from_secs_f64(GRACE - 0.1), "not before the grace period: {after:?}");
    assert!(run_until(&mut [&mut alice], Instant::now() + WAIT, |cs| cs[0].closed), "her peer is closed");
    let mut late = Ws::connect(api, ROOM);
    late.send(json!({ "type": "resume", "id": alice_id, "key": key }));
    assert_eq!(late.wait_for(WAIT, |v| v["type"] == "error")["code"], "resume_failed", "too late");

    // A socket closed on purpose (a close frame) leaves at once.
    let mut third = Ws::connect(api, ROOM);
    let (mut carol, carol_id, _) = join_over(&mut third, 880.0);
    assert!(run_until(&mut [&mut carol, &mut bob], Instant::now() + WAIT, |cs| cs[0].connected), "carol connected");
    let closed = Instant::now();
    third.close();
    let left = observer.wait_for(WAIT, |v| v["type"] == "left");
    assert_eq!(left, json!({ "type": "left", "id": carol_id, "reason": "left" }));
    assert!(closed.elapsed() < Duration::from_secs_f64(GRACE), "at once, not after the grace: {:?}", closed.elapsed());
    assert_eq!(members(api), vec![bob.id]);
    rt.block_on(server.shutdown());
}
