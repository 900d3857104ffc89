//! Participant attributes over real WebRTC peers, real tokens and real
//! WebSockets: set by the token (the `attributes` claim), by an admin
//! (`PATCH …/participants/{id}`) and by the participant itself (the same
//! route, and the socket's `set_attributes`); seen by another participant
//! in the roster, the snapshot and an `attributes_changed` event; refused
//! past each bound (400 `bad_attributes`), on a reserved key set by the
//! participant itself (403 `reserved_attribute`), and on someone else's
//! participant (403 `forbidden`). A refused change changes nothing. (Across
//! the nodes of a spread room: the root package's `tests/mesh_roster.rs`.)

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{Ws, call, refused, start_with, test_config};
use serde_json::json;
use tutti_client::{JoinAs, Requester, ToneClient, run_until};
use tutti_server::auth::{Auth, Grant, unix_now};

const SECRET: &str = "the attributes test's secret: thirty-two bytes or more";
const HOUR: Duration = Duration::from_secs(3600);
const WAIT: Duration = Duration::from_secs(10);
const ROOM: &str = "attrs";

/// A server with tokens on (this file's secret), and the key to mint them.
fn start_authed() -> (tokio::runtime::Runtime, tutti_server::Server, Auth) {
    let mut cfg = test_config();
    cfg.auth.disabled = false;
    cfg.auth.secret = SECRET.to_owned();
    let (rt, server) = start_with(cfg);
    (rt, server, Auth::new(SECRET).expect("secret"))
}

fn with(grant: Grant, pairs: &[(&str, &str)]) -> Grant {
    let attributes = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    Grant { attributes, ..grant }
}

fn attributes(v: &serde_json::Value) -> BTreeMap<String, String> {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("attributes {v}: {e}"))
}

fn set(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// Participant `id` as `GET /v1/rooms/{room}` lists it.
fn listed(api: SocketAddr, token: &str, id: u64) -> serde_json::Value {
    let r = call(api, token, "GET", &format!("/v1/rooms/{ROOM}"), "");
    assert_eq!(r.status, 200, "{}", r.body);
    let body: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    body["participants"].as_array().into_iter().flatten().find(|m| m["id"] == id).cloned().expect("listed")
}

#[test]
fn attributes_come_from_the_token_an_admin_and_the_participant_within_their_bounds() {
    let mut cfg = test_config();
    cfg.auth.disabled = false;
    cfg.auth.secret = SECRET.to_owned();
    // Room for the refusals below: the rate is not what this test is about.
    cfg.limits.participant_updates_per_second = 100.0;
    cfg.limits.participant_update_burst = 100;
    let (_rt, server) = start_with(cfg);
    let api = server.http_addr();
    let auth = Auth::new(SECRET).expect("secret");
    let mint = |g: Grant| auth.mint(&g, HOUR, unix_now()).expect("mint");
    let admin = mint(Grant::admin("host"));
    let alice_t = mint(with(Grant::participant(ROOM, "alice"), &[("role", "speaker"), ("tutti.badge", "staff")]));
    let bob_t = mint(Grant::participant(ROOM, "bob"));
    assert_eq!(call(api, &admin, "POST", "/v1/rooms", &json!({ "id": ROOM }).to_string()).status, 201);

    let mut alice =
        ToneClient::join_as(api, &Requester::token(&alice_t), ROOM, 440.0, JoinAs::Whip).expect("alice joins");
    let mut bob = ToneClient::join_as(api, &Requester::token(&bob_t), ROOM, 660.0, JoinAs::Json).expect("bob joins");
    let (alice_id, bob_id) = (alice.id, bob.id);
    let up = run_until(&mut [&mut alice, &mut bob], Instant::now() + Duration::from_secs(20), |cs| {
        cs.iter().all(|c| c.heard.len() > 10)
    });
    assert!(up, "both connected");

    // The token's attributes, reserved key included (the backend set it), seen by bob.
    let from_token = set(&[("role", "speaker"), ("tutti.badge", "staff")]);
    assert_eq!(attributes(&listed(api, &bob_t, alice_id)["attributes"]), from_token, "in the roster");
    assert_eq!(attributes(&listed(api, &bob_t, bob_id)["attributes"]), set(&[]), "none for a token without");
    let mut bob_ws = Ws::connect_to(api, &format!("/v1/rooms/{ROOM}/ws?token={bob_t}"));
    let snapshot = bob_ws.wait_for(WAIT, |v| v["type"] == "room");
    let in_snapshot = snapshot["participants"].as_array().expect("participants").iter().find(|m| m["id"] == alice_id);
    assert_eq!(attributes(&in_snapshot.expect("alice in the snapshot")["attributes"]), from_token, "{snapshot}");

    // A joiner's `joined` event carries its token's attributes.
    let carol_t = mint(with(Grant::listener(ROOM, "carol"), &[("role", "audience")]));
    let carol = ToneClient::join_as(api, &Requester::token(&carol_t), ROOM, 880.0, JoinAs::Whip).expect("carol");
    let joined = bob_ws.wait_for(WAIT, |v| v["type"] == "joined" && v["id"] == carol.id);
    assert_eq!(attributes(&joined["attributes"]), set(&[("role", "audience")]), "{joined}");

    // Alice changes her own over her socket: bob's socket is told the whole set.
    let mut alice_ws = Ws::connect_to(api, &format!("/v1/rooms/{ROOM}/ws?token={alice_t}"));
    alice_ws.wait_for(WAIT, |v| v["type"] == "room");
    alice_ws.send(json!({"type": "set_attributes", "id": alice_id, "attributes": {"mood": "calm", "role": null}}));
    let changed = bob_ws.wait_for(WAIT, |v| v["type"] == "attributes_changed" && v["id"] == alice_id);
    let now = set(&[("mood", "calm"), ("tutti.badge", "staff")]);
    assert_eq!(attributes(&changed["attributes"]), now, "{changed}");
    // A reserved key is not hers to set, over the socket or the route.
    alice_ws.send(json!({"type": "set_attributes", "id": alice_id, "attributes": {"sip.caller": "+15550100"}}));
    let err = alice_ws.wait_for(WAIT, |v| v["type"] == "error");
    assert_eq!(err["code"], "reserved_attribute", "{err}");
    let alice_url = format!("/v1/rooms/{ROOM}/participants/{alice_id}");
    let r = call(api, &alice_t, "PATCH", &alice_url, r#"{"attributes":{"tutti.badge":null}}"#);
    refused(&r, 403, "reserved_attribute", "removing a reserved key is changing it");
    // Nor is bob's.
    let bob_url = format!("/v1/rooms/{ROOM}/participants/{bob_id}");
    refused(&call(api, &alice_t, "PATCH", &bob_url, r#"{"attributes":{"x":"y"}}"#), 403, "forbidden", "another's");

    // Each bound, and a refused change changes nothing (not even the fields beside it).
    let many: serde_json::Map<String, serde_json::Value> = (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
    let cases = [
        (json!({ "attributes": many }), "17 keys"),
        (json!({"attributes": {"k".repeat(65): "v"}}), "a 65-byte key"),
        (json!({"attributes": {"bad key": "v"}}), "a space in a key"),
        (json!({"attributes": {"bio": "v".repeat(1025)}}), "a 1,025-byte value"),
        (json!({"attributes": {"bio": "line\nbreak"}}), "a control character"),
        (
            json!({"attributes": (0..5).map(|i| (format!("k{i}"), json!("v".repeat(1000)))).collect::<serde_json::Map<_, _>>()}),
            "over 4,096 bytes in all",
        ),
        (json!({"hand": true, "attributes": {"bio": "v".repeat(1025)}}), "beside a hand"),
    ];
    for (body, what) in cases {
        refused(&call(api, &alice_t, "PATCH", &alice_url, &body.to_string()), 400, "bad_attributes", what);
    }
    let alice_now = listed(api, &bob_t, alice_id);
    assert_eq!(attributes(&alice_now["attributes"]), now, "nothing changed: {alice_now}");
    assert_eq!(alice_now["hand"], false, "the hand beside a refused set stayed down");

    // Her own, by the route: the answer has the whole set.
    let r = call(api, &alice_t, "PATCH", &alice_url, r#"{"attributes":{"seat":"4"}}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    let body: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    let now = set(&[("mood", "calm"), ("seat", "4"), ("tutti.badge", "staff")]);
    assert_eq!(attributes(&body["attributes"]), now, "{body}");
    let told = bob_ws.wait_for(WAIT, |v| v["type"] == "attributes_changed" && v["id"] == alice_id);
    assert_eq!(attributes(&told["attributes"]), now, "{told}");

    // An admin sets a reserved key on bob; both sockets hear of it.
    let r = call(api, &admin, "PATCH", &bob_url, r#"{"attributes":{"sip.caller":"+15550100"}}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    let changed = alice_ws.wait_for(WAIT, |v| v["type"] == "attributes_changed" && v["id"] == bob_id);
    assert_eq!(attributes(&changed["attributes"]), set(&[("sip.caller", "+15550100")]), "{changed}");
    assert_eq!(attributes(&listed(api, &alice_t, bob_id)["attributes"]), set(&[("sip.caller", "+15550100")]));
    bob_ws.wait_for(WAIT, |v| v["type"] == "attributes_changed" && v["id"] == bob_id);
    // Nothing changed: no event (the next one bob's socket gets is about something else).
    let r = call(api, &admin, "PATCH", &bob_url, r#"{"attributes":{"sip.caller":"+15550100"}}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(call(api, &alice_t, "PATCH", &alice_url, r#"{"hand":true}"#).status, 200);
    let next = bob_ws.wait_for(WAIT, |v| v["type"] == "hand" || v["type"] == "attributes_changed");
    assert_eq!(next["type"], "hand", "an unchanged set is not told: {next}");
}

/// A participant's attributes in its webhooks: `participant_joined` has its
/// token's, `participant_attributes_changed` the whole set after a change,
/// at a real HTTP receiver.
#[test]
fn webhooks_carry_a_participants_attributes() {
    use std::sync::{Arc, Mutex};
    let rt = tutti_server::api_runtime(2).expect("runtime");
    let got: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let sink = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: axum::body::Bytes| {
            let sink = sink.clone();
            async move {
                if let Ok(v) = serde_json::from_slice(&body) {
                    sink.lock().expect("not poisoned").push(v);
                }
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
    let hooks = listener.local_addr().expect("addr");
    rt.spawn(async move { axum::serve(listener, app).await });
    let mut cfg = test_config();
    cfg.auth.disabled = false;
    cfg.auth.secret = SECRET.to_owned();
    cfg.webhooks.urls = vec![format!("http://{hooks}/hook")];
    let server = rt.block_on(tutti_server::Server::start(cfg)).expect("server starts");
    let api = server.http_addr();
    let auth = Auth::new(SECRET).expect("secret");
    let admin = auth.mint(&Grant::admin("host"), HOUR, unix_now()).expect("mint");
    let alice_t = auth.mint(&with(Grant::participant(ROOM, "alice"), &[("role", "guest")]), HOUR, unix_now());
    assert_eq!(call(api, &admin, "POST", "/v1/rooms", &json!({ "id": ROOM }).to_string()).status, 201);
    let alice = ToneClient::join_as(api, &Requester::token(&alice_t.expect("mint")), ROOM, 440.0, JoinAs::Whip)
        .expect("alice joins");
    let url = format!("/v1/rooms/{ROOM}/participants/{}", alice.id);
    assert_eq!(call(api, &admin, "PATCH", &url, r#"{"attributes":{"seat":"1"}}"#).status, 200);
    let find = |kind: &str| got.lock().expect("not poisoned").iter().find(|e| e["event"] == kind).cloned();
    let deadline = Instant::now() + WAIT;
    while find("participant_attributes_changed").is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let joined = find("participant_joined").expect("participant_joined");
    assert_eq!(attributes(&joined["participant"]["attributes"]), set(&[("role", "guest")]), "{joined}");
    let changed = find("participant_attributes_changed").expect("participant_attributes_changed");
    assert_eq!(attributes(&changed["participant"]["attributes"]), set(&[("role", "guest"), ("seat", "1")]));
    assert_eq!(changed["participant"]["identity"], "alice", "{changed}");
    drop(server);
}

/// A room switched to spatial at run time seats everyone already in it:
/// each gets the `tutti.seat` its identity gives (the token's own seat
/// kept), told to the room as `attributes_changed`.
#[test]
fn a_room_switched_to_spatial_seats_everyone_in_it() {
    let (_rt, server, auth) = start_authed();
    let api = server.http_addr();
    let mint = |g: Grant| auth.mint(&g, HOUR, unix_now()).expect("mint");
    let admin = mint(Grant::admin("host"));
    let r = call(api, &admin, "POST", "/v1/rooms", &format!(r#"{{"id":"{ROOM}"}}"#));
    assert_eq!(r.status, 201, "{}", r.body);
    let alice_t = mint(Grant::participant(ROOM, "alice"));
    let bob_t = mint(with(Grant::participant(ROOM, "bob"), &[("tutti.seat", "-3")]));
    let alice = ToneClient::join_as(api, &Requester::token(&alice_t), ROOM, 440.0, JoinAs::Whip).expect("alice joins");
    let bob = ToneClient::join_as(api, &Requester::token(&bob_t), ROOM, 660.0, JoinAs::Whip).expect("bob joins");
    assert!(attributes(&listed(api, &admin, alice.id)["attributes"]).is_empty(), "no seat before");
    let mut ws = Ws::connect_to(api, &format!("/v1/rooms/{ROOM}/ws?token={admin}"));
    ws.wait_for(WAIT, |v| v["type"] == "room");

    let r = call(api, &admin, "PATCH", &format!("/v1/rooms/{ROOM}"), r#"{"spatial":true}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains(r#""spatial":true"#), "{}", r.body);
    let alice_seat = tutti_mix::default_seat(b"alice").to_string();
    assert_eq!(attributes(&listed(api, &admin, alice.id)["attributes"]), set(&[("tutti.seat", &alice_seat)]));
    assert_eq!(attributes(&listed(api, &admin, bob.id)["attributes"]), set(&[("tutti.seat", "-3")]), "bob's own kept");
    let told = ws.wait_for(WAIT, |v| v["type"] == "attributes_changed" && v["id"] == alice.id);
    assert_eq!(attributes(&told["attributes"]), set(&[("tutti.seat", &alice_seat)]));
}

/// A room switched to binaural at run time (`"spatial":"binaural"`, beside
/// `true`/`false`): the summary says the mode, everyone is seated, the
/// peers (mono WebRTC clients) go on hearing each other and not
/// themselves; a mode that does not exist is refused and changes nothing.
#[test]
fn a_room_switched_to_binaural_keeps_its_peers_hearing_each_other() {
    let (_rt, server, auth) = start_authed();
    let api = server.http_addr();
    let mint = |g: Grant| auth.mint(&g, HOUR, unix_now()).expect("mint");
    let admin = mint(Grant::admin("host"));
    let r = call(api, &admin, "POST", "/v1/rooms", &format!(r#"{{"id":"{ROOM}","spatial":"panned"}}"#));
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(r.body.contains(r#""spatial":true,"spatial_mode":"panned""#), "{}", r.body);
    let alice_t = mint(Grant::participant(ROOM, "alice"));
    let bob_t = mint(Grant::participant(ROOM, "bob"));
    let mut alice =
        ToneClient::join_as(api, &Requester::token(&alice_t), ROOM, 440.0, JoinAs::Whip).expect("alice joins");
    let mut bob = ToneClient::join_as(api, &Requester::token(&bob_t), ROOM, 660.0, JoinAs::Whip).expect("bob joins");

    let r = call(api, &admin, "PATCH", &format!("/v1/rooms/{ROOM}"), r#"{"spatial":"binaural"}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains(r#""spatial":true,"spatial_mode":"binaural""#), "{}", r.body);
    let r = call(api, &admin, "GET", &format!("/v1/rooms/{ROOM}"), "");
    assert!(r.body.contains(r#""spatial_mode":"binaural""#), "{}", r.body);
    assert!(attributes(&listed(api, &admin, alice.id)["attributes"]).contains_key("tutti.seat"), "seated");

    let since = Instant::now();
    let heard = run_until(&mut [&mut alice, &mut bob], since + Duration::from_secs(20), |cs| {
        cs[0].hears(660.0, since) > 0.05 && cs[1].hears(440.0, since) > 0.05
    });
    assert!(heard, "alice hears bob {}, bob hears alice {}", alice.hears(660.0, since), bob.hears(440.0, since));
    assert!(alice.hears(440.0, since) < 0.02, "alice hears herself: {}", alice.hears(440.0, since));

    let r = call(api, &admin, "PATCH", &format!("/v1/rooms/{ROOM}"), r#"{"spatial":"hrtf"}"#);
    refused(&r, 400, "bad_json", "an unknown spatial mode");
    assert!(r.body.contains("binaural"), "the error names the modes: {}", r.body);
    let r = call(api, &admin, "GET", &format!("/v1/rooms/{ROOM}"), "");
    assert!(r.body.contains(r#""spatial_mode":"binaural""#), "unchanged: {}", r.body);
    let r = call(api, &admin, "PATCH", &format!("/v1/rooms/{ROOM}"), r#"{"spatial":false}"#);
    assert!(r.body.contains(r#""spatial":false,"spatial_mode":"off""#), "{}", r.body);
}
