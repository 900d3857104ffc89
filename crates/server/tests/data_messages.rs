//! Data messages over real room sockets, with real WebRTC peers talking
//! meanwhile: a message reaches everyone but its sender (an observer's
//! socket too), one sent to a named participant reaches only it, a
//! sender's messages arrive in the order sent, the backend's
//! (`POST …/data`) come `from: null`; each bound is refused with its code;
//! a flood is cut by the sender's rate limit (one `error`, its socket
//! stays open) while everyone still hears everyone.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{Ws, auth_config, call, minter, refused, start_with};
use serde_json::json;
use tutti_client::{ToneClient, run_for, run_until};
use tutti_server::auth::Grant;

const SECRET: &str = "the data messages test's secret: thirty-two bytes or more";
const WAIT: Duration = Duration::from_secs(10);
const ROOM: &str = "chatty";
/// Well above a mixed tone's residue, well below a present one (≈0.2 amplitude).
const HEARD: f32 = 0.05;

/// A participant joined over its own room socket.
fn join_ws(api: SocketAddr, token: &str, freq: f32) -> (Ws, ToneClient) {
    let mut ws = Ws::connect_to(api, &format!("/v1/rooms/{ROOM}/ws?token={token}"));
    ws.wait_for(WAIT, |m| m["type"] == "room");
    let (mut client, offer) = ToneClient::offer(freq).expect("offer");
    ws.send(json!({ "type": "join", "sdp": offer }));
    let answer = ws.wait_for(WAIT, |m| m["type"] == "answer");
    let id = answer["id"].as_u64().expect("id");
    client.accept_answer(answer["sdp"].as_str().expect("sdp"), id).expect("answer applied");
    (ws, client)
}

/// The next data message on `ws` (other messages skipped), pumping `clients`.
fn next_data(ws: &mut Ws, clients: &mut [&mut ToneClient]) -> serde_json::Value {
    ws.wait_pumping(WAIT, clients, |m| m["type"] == "data")
}

#[test]
fn data_messages_reach_whom_they_are_sent_to_in_order_and_a_flood_touches_no_audio() {
    let (_rt, server) = start_with(auth_config(SECRET));
    let api = server.http_addr();
    let mint = minter(SECRET);
    let admin = mint(Grant::admin("backend"));
    assert_eq!(call(api, &admin, "POST", "/v1/rooms", &json!({ "id": ROOM }).to_string()).status, 201);

    // A socket that has not joined may not send, but hears what is sent to everyone.
    let mut observer = Ws::connect_to(api, &format!("/v1/rooms/{ROOM}/ws?token={admin}"));
    observer.wait_for(WAIT, |m| m["type"] == "room");
    observer.send(json!({"type": "data", "topic": "chat", "payload": "from nobody"}));
    let err = observer.wait_for(WAIT, |m| m["type"] == "error");
    assert_eq!(err["code"], "not_joined", "{err}");

    let (mut alice_ws, mut alice) = join_ws(api, &mint(Grant::participant(ROOM, "alice")), 440.0);
    let (mut bob_ws, mut bob) = join_ws(api, &mint(Grant::participant(ROOM, "bob")), 660.0);
    let (mut carol_ws, mut carol) = join_ws(api, &mint(Grant::participant(ROOM, "carol")), 990.0);
    let (a, b, c) = (alice.id, bob.id, carol.id);
    let up = run_until(&mut [&mut alice, &mut bob, &mut carol], Instant::now() + Duration::from_secs(20), |cs| {
        cs.iter().all(|c| c.heard.len() > 25)
    });
    assert!(up, "everyone connected");

    // To everyone: all but the sender, the observer too.
    alice_ws.send(json!({"type": "data", "topic": "chat", "payload": "hello"}));
    let want = json!({"type": "data", "from": a, "topic": "chat", "payload": "hello"});
    for ws in [&mut bob_ws, &mut carol_ws, &mut observer] {
        assert_eq!(next_data(ws, &mut [&mut alice, &mut bob, &mut carol]), want);
    }
    // To carol only, with a JSON payload; then a marker to everyone: bob's next is the marker.
    alice_ws.send(json!({"type": "data", "topic": "reaction", "payload": {"emoji": "👏"}, "to": [c]}));
    alice_ws.send(json!({"type": "data", "topic": "chat", "payload": "marker"}));
    let got = next_data(&mut carol_ws, &mut [&mut alice, &mut bob, &mut carol]);
    assert_eq!(got, json!({"type": "data", "from": a, "topic": "reaction", "payload": {"emoji": "👏"}}));
    assert_eq!(next_data(&mut bob_ws, &mut [&mut alice, &mut bob, &mut carol])["payload"], "marker", "not bob's");
    assert_eq!(next_data(&mut carol_ws, &mut [&mut alice, &mut bob, &mut carol])["payload"], "marker");

    // In the order sent.
    for i in 0..12 {
        alice_ws.send(json!({"type": "data", "topic": "seq", "payload": i}));
    }
    let seq: Vec<serde_json::Value> =
        (0..12).map(|_| next_data(&mut bob_ws, &mut [&mut alice, &mut bob, &mut carol])["payload"].clone()).collect();
    assert_eq!(seq, (0..12).map(|i| json!(i)).collect::<Vec<_>>(), "one sender's messages keep their order");
    // The sender got none of its own: its socket's next data message is bob's.
    bob_ws.send(json!({"type": "data", "topic": "chat", "payload": "from bob"}));
    let got = next_data(&mut alice_ws, &mut [&mut alice, &mut bob, &mut carol]);
    assert_eq!((got["from"].as_u64(), got["payload"].as_str()), (Some(b), Some("from bob")), "{got}");

    // Bounds.
    let big = "x".repeat(17 * 1024);
    carol_ws.send(json!({"type": "data", "topic": "chat", "payload": big}));
    let err = carol_ws.wait_for(WAIT, |m| m["type"] == "error");
    assert_eq!(err["code"], "bad_value", "{err}");
    assert!(err["message"].as_str().is_some_and(|m| m.contains("limits.data_max_bytes")), "{err}");
    carol_ws.send(json!({"type": "data", "topic": "t".repeat(65), "payload": 1}));
    assert_eq!(carol_ws.wait_for(WAIT, |m| m["type"] == "error")["code"], "bad_value");

    // The backend: an admin's POST, `from` null; a participant's token may not.
    let r =
        call(api, &admin, "POST", &format!("/v1/rooms/{ROOM}/data"), r#"{"topic":"notice","payload":"5 min left"}"#);
    assert_eq!(r.status, 202, "{}", r.body);
    for ws in [&mut alice_ws, &mut bob_ws, &mut carol_ws] {
        let got = next_data(ws, &mut [&mut alice, &mut bob, &mut carol]);
        assert_eq!(got, json!({"type": "data", "from": null, "topic": "notice", "payload": "5 min left"}));
    }
    let path = format!("/v1/rooms/{ROOM}/data");
    let alice_t = mint(Grant::participant(ROOM, "alice"));
    refused(&call(api, &alice_t, "POST", &path, r#"{"topic":"x","payload":1}"#), 403, "forbidden", "a participant");
    let body = json!({"topic": "x", "payload": big}).to_string();
    refused(&call(api, &admin, "POST", &path, &body), 400, "bad_value", "a payload over the bound");
    refused(&call(api, &admin, "POST", &path, r#"{"topic":"x","payload":1,"to":[]}"#), 400, "bad_value", "to: []");

    // A flood from bob: cut at his rate (one error, his socket open), nobody's audio touched.
    let flood_start = Instant::now();
    for i in 0..300 {
        bob_ws.send(json!({"type": "data", "topic": "flood", "payload": i}));
    }
    run_for(&mut [&mut alice, &mut bob, &mut carol], Duration::from_millis(1500));
    let err = bob_ws.wait_pumping(WAIT, &mut [&mut alice, &mut bob, &mut carol], |m| m["type"] == "error");
    assert_eq!(err["code"], "rate_limited", "{err}");
    let mut flood_seen = 0;
    while let Some(m) = carol_ws.try_next() {
        if m["topic"] == "flood" {
            flood_seen += 1;
        }
    }
    assert!((10..=40).contains(&flood_seen), "the burst (20) and a second's rate got through, not 300: {flood_seen}");
    for (who, hears, freq) in [("alice", &alice, 660.0), ("carol", &carol, 660.0), ("bob", &bob, 440.0)] {
        let level = hears.hears(freq, flood_start);
        assert!(level > HEARD, "{who} heard the room through the flood: {level}");
    }
    // Bob's socket stayed open: once his bucket refills, his message goes through.
    run_for(&mut [&mut alice, &mut bob, &mut carol], Duration::from_millis(1200));
    bob_ws.send(json!({"type": "data", "topic": "chat", "payload": "still here"}));
    let got = alice_ws.wait_pumping(WAIT, &mut [&mut alice, &mut bob, &mut carol], |m| {
        m["type"] == "data" && m["payload"] == "still here"
    });
    assert_eq!(got["from"].as_u64(), Some(b));
}
