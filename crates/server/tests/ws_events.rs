//! The WebSocket: one participant joins through it, an observer receives
//! the room's events as they happen (joined, talking started and stopped,
//! muted, left), and bad messages get clear errors.

mod common;

use std::time::{Duration, Instant};

use common::{Ws, create_room, http, room, start};
use serde_json::json;
use tutti_client::{JoinAs, ToneClient, run_for, run_until};

const WAIT: Duration = Duration::from_secs(10);

/// Pumps the clients while waiting for an observer message.
fn wait_event(
    ws: &mut Ws,
    clients: &mut [&mut ToneClient],
    want: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    ws.wait_pumping(WAIT, clients, want)
}

#[test]
fn room_events_reach_websocket_subscribers() {
    let (rt, server) = start();
    let api = server.http_addr();
    create_room(api, "ws");
    assert_eq!(http(api, "GET", "/v1/rooms/nowhere/ws", None, b"").code(), "room_not_found");
    assert_eq!(http(api, "GET", "/v1/rooms/ws/ws", None, b"").code(), "websocket_required");
    assert_eq!(http(api, "GET", "/v1/rooms/ws/ws?events=joined,dance", None, b"").code(), "bad_events");
    // A socket that wants mutes only, and one that narrows itself to leaves later.
    let mut mutes_only = Ws::connect_to(api, "/v1/rooms/ws/ws?events=muted");
    let mut narrowed = Ws::connect(api, "ws");
    narrowed.wait_for(WAIT, |v| v["type"] == "room");
    narrowed.send(json!({ "type": "subscribe", "events": ["left", "nope"] }));
    assert_eq!(narrowed.wait_for(WAIT, |v| v["type"] == "error")["code"], "bad_events");
    narrowed.send(json!({ "type": "subscribe", "events": ["left"] }));

    let mut observer = Ws::connect(api, "ws");
    let first = observer.wait_for(WAIT, |v| v["type"] == "room");
    assert_eq!(first["participants"], json!([]));

    // Alice joins through the WebSocket.
    let mut alice_ws = Ws::connect(api, "ws");
    alice_ws.wait_for(WAIT, |v| v["type"] == "room");
    let (mut alice, offer) = ToneClient::offer(440.0).expect("offer");
    alice_ws.send(json!({ "type": "join", "sdp": offer, "name": "alice" }));
    let answer = alice_ws.wait_for(WAIT, |v| v["type"] == "answer");
    let alice_id = answer["id"].as_u64().expect("id");
    alice.accept_answer(answer["sdp"].as_str().expect("sdp"), alice_id).expect("answer");
    alice_ws.send(json!({ "type": "join", "sdp": "v=0" }));
    assert_eq!(alice_ws.wait_for(WAIT, |v| v["type"] == "error")["code"], "already_joined");
    alice_ws.send(json!({ "type": "dance" }));
    assert_eq!(alice_ws.wait_for(WAIT, |v| v["type"] == "error")["code"], "bad_message");

    // Bob joins over HTTP, silent at first.
    let mut bob = ToneClient::join(api, "ws", 660.0, JoinAs::Whip).expect("join");
    bob.talking = false;
    let bob_id = bob.id;
    let joined = observer.wait_for(WAIT, |v| v["type"] == "joined" && v["id"] == alice_id);
    assert_eq!(joined["name"], "alice");
    observer.wait_for(WAIT, |v| v["type"] == "joined" && v["id"] == bob.id);

    // Alice's tone starts: talking. It stops (silence, level 127): after the hold, not talking.
    let mut both = [&mut alice, &mut bob];
    wait_event(&mut observer, &mut both, |v| v == &json!({ "type": "talking", "id": alice_id, "talking": true }));
    assert!(
        run_until(&mut both, Instant::now() + WAIT, |cs| cs[1].heard.len() > 50),
        "bob hears the room (alice joined through the WebSocket)"
    );
    let since = Instant::now();
    run_for(&mut both, Duration::from_millis(500));
    assert!(both[1].hears(440.0, since) > 0.05, "bob hears alice's tone");
    // She falls silent the way a browser does with the DTX tutti asks for.
    both[0].talking = false;
    both[0].dtx = true;
    wait_event(&mut observer, &mut both, |v| v == &json!({ "type": "talking", "id": alice_id, "talking": false }));
    both[1].talking = true;
    wait_event(&mut observer, &mut both, |v| v == &json!({ "type": "talking", "id": bob_id, "talking": true }));

    // Alice mutes herself over her socket.
    alice_ws.send(json!({ "type": "mute", "muted": true }));
    let mut both = [&mut alice, &mut bob];
    wait_event(&mut observer, &mut both, |v| v == &json!({ "type": "muted", "id": alice_id, "muted": true }));
    let listed = room(api, "ws")["participants"].as_array().cloned().unwrap_or_default();
    assert!(listed.iter().any(|p| p["id"] == alice_id && p["muted"] == true && p["connected"] == true), "{listed:?}");

    // Closing her socket is leaving.
    drop(alice_ws);
    wait_event(&mut observer, &mut both, |v| v == &json!({ "type": "left", "id": alice_id, "reason": "left" }));
    // The filtered sockets saw only their kinds, the batches cut to them.
    let seen = |ws: &mut Ws| {
        let mut kinds = Vec::new();
        while let Some(v) = ws.try_next() {
            if v.is_null() {
                break;
            }
            kinds.push(v["type"].as_str().unwrap_or("").to_owned());
        }
        kinds
    };
    let mutes = seen(&mut mutes_only);
    assert_eq!(mutes.first().map(String::as_str), Some("room"), "{mutes:?}");
    assert!(mutes[1..].iter().all(|k| k == "muted") && mutes.len() >= 2, "{mutes:?}");
    let lefts = seen(&mut narrowed);
    assert!(lefts.iter().all(|k| k == "left") && !lefts.is_empty(), "{lefts:?}");
    assert!(run_until(&mut both, Instant::now() + WAIT, |cs| cs[0].closed), "alice's peer is closed");
    assert_eq!(room(api, "ws")["participants"].as_array().map(Vec::len), Some(1));

    // Deleting the room tells the observer and ends its stream.
    assert_eq!(http(api, "DELETE", "/v1/rooms/ws", None, b"").status, 204);
    observer.wait_for(WAIT, |v| v["type"] == "room_closed");
    rt.block_on(server.shutdown());
}
