//! A stage, over real WebRTC peers, real tokens and real WebSockets: an
//! admin grants a listener the right to speak at runtime (heard within a
//! second, no rejoin) and revokes it; hands go up and down over the
//! WebSocket; `PATCH /v1/rooms/{room}` changes the speaker limit on the
//! running mixer, mutes everyone but the admins and locks the room; a kick
//! with a ban keeps the identity out until the ban ends. Every refusal has
//! its status and stable code.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{Ws, call, refused, scrape, series, start_with, test_config};
use serde_json::json;
use tutti_client::{JoinAs, Requester, ToneClient, run_for, run_until};
use tutti_server::auth::{Auth, Grant, unix_now};

const SECRET: &str = "the stage test's secret: thirty-two bytes or more";
const HOUR: Duration = Duration::from_secs(3600);
const WAIT: Duration = Duration::from_secs(10);
/// Well above a mixed tone's residue, well below a present one (≈0.2 amplitude).
const HEARD: f32 = 0.05;

/// A server with tokens on, and a minter for them.
fn server() -> (tokio::runtime::Runtime, tutti_server::Server, impl Fn(Grant) -> String) {
    let mut cfg = test_config();
    cfg.auth.disabled = false;
    cfg.auth.secret = SECRET.to_owned();
    let (rt, server) = start_with(cfg);
    let auth = Auth::new(SECRET).expect("secret");
    (rt, server, move |g: Grant| auth.mint(&g, HOUR, unix_now()).expect("mint"))
}

fn ws(api: SocketAddr, room: &str, token: &str) -> Ws {
    Ws::connect_to(api, &format!("/v1/rooms/{room}/ws?token={token}"))
}

/// Pumps the clients while waiting for a WebSocket message.
fn wait_ws(
    ws: &mut Ws,
    clients: &mut [&mut ToneClient],
    want: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    ws.wait_pumping(WAIT, clients, want)
}

/// Pumps until every client hears the room.
fn connect_all(clients: &mut [&mut ToneClient]) {
    let up = run_until(clients, Instant::now() + Duration::from_secs(20), |cs| cs.iter().all(|c| c.heard.len() > 25));
    assert!(up, "everyone connected and hears the mix");
}

/// Pumps in 20 ms steps until `listener` hears `freq` over the last 200 ms;
/// the time that took, or `None` within `limit`.
fn onset(clients: &mut [&mut ToneClient], listener: usize, freq: f32, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        run_for(clients, Duration::from_millis(20));
        let window = Instant::now() - Duration::from_millis(200);
        if clients[listener].hears(freq, window) > HEARD {
            return Some(start.elapsed());
        }
    }
    None
}

fn member(api: SocketAddr, token: &str, room: &str, id: u64) -> serde_json::Value {
    let r = call(api, token, "GET", &format!("/v1/rooms/{room}"), "");
    assert_eq!(r.status, 200, "{}", r.body);
    let body: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    body["participants"].as_array().into_iter().flatten().find(|m| m["id"] == id).cloned().expect("listed")
}

#[test]
fn speak_rights_change_at_runtime_and_hands_go_up_and_down() {
    let (rt, server, mint) = server();
    let api = server.http_addr();
    let admin = mint(Grant::admin("host"));
    let alice_t = mint(Grant::participant("stage", "alice"));
    let lena_t = mint(Grant::listener("stage", "lena"));
    assert_eq!(call(api, &admin, "POST", "/v1/rooms", r#"{"id":"stage"}"#).status, 201);
    let mut observer = ws(api, "stage", &admin);
    assert_eq!(observer.wait_for(WAIT, |v| v["type"] == "room")["admin"], true, "the page learns it is an admin's");

    // A listener's answer is sendrecv like anyone's: listen-only is the
    // server's gate, so a grant needs no renegotiation.
    let (_probe, offer) = ToneClient::offer(100.0).expect("offer");
    let probe = call(api, &lena_t, "POST", "/v1/rooms/stage/participants", &offer);
    assert_eq!(probe.status, 201, "{}", probe.body);
    assert!(probe.body.contains("a=sendrecv") && !probe.body.contains("a=recvonly"), "{}", probe.body);
    let probe_url = probe.header("location").expect("Location").to_owned();
    assert_eq!(call(api, &lena_t, "DELETE", &probe_url, "").status, 204, "a listener leaves on its own: not a kick");
    let left = observer.wait_for(WAIT, |v| v["type"] == "left");
    assert_eq!(left["reason"], "left");

    let mut alice = ToneClient::join_as(api, &Requester::token(&alice_t), "stage", 440.0, JoinAs::Whip).expect("join");
    let mut lena = ToneClient::join_as(api, &Requester::token(&lena_t), "stage", 660.0, JoinAs::Json).expect("join");
    let (alice_id, lena_id) = (alice.id, lena.id);
    let lena_url = format!("/v1/rooms/stage/participants/{lena_id}");
    connect_all(&mut [&mut alice, &mut lena]);
    let since = Instant::now();
    let hears_alice = onset(&mut [&mut alice, &mut lena], 1, 440.0, Duration::from_secs(5));
    assert!(hears_alice.is_some(), "the listener hears alice");
    run_for(&mut [&mut alice, &mut lena], Duration::from_millis(1000));
    assert!(alice.hears(660.0, since) < 0.01, "nobody hears the listener yet: {}", alice.hears(660.0, since));

    // Lena raises her hand over a WebSocket of her own (not the one she joined with).
    let mut lena_ws = ws(api, "stage", &lena_t);
    assert_eq!(lena_ws.wait_for(WAIT, |v| v["type"] == "room")["admin"], false);
    lena_ws.send(json!({ "type": "hand", "raised": true }));
    assert_eq!(lena_ws.wait_for(WAIT, |v| v["type"] == "error")["code"], "not_joined", "no participant on this socket");
    lena_ws.send(json!({ "type": "hand", "raised": "yes", "id": lena_id }));
    assert_eq!(lena_ws.wait_for(WAIT, |v| v["type"] == "error")["code"], "bad_message");
    lena_ws.send(json!({ "type": "hand", "raised": true, "id": lena_id }));
    let hand = wait_ws(&mut observer, &mut [&mut alice, &mut lena], |v| v["type"] == "hand");
    assert_eq!(hand, json!({ "type": "hand", "id": lena_id, "raised": true }));
    assert_eq!(member(api, &admin, "stage", lena_id)["hand"], true, "GET room shows the hand");
    // Alice may not lower Lena's hand; nobody's socket was closed for trying.
    let mut alice_ws = ws(api, "stage", &alice_t);
    alice_ws.wait_for(WAIT, |v| v["type"] == "room");
    alice_ws.send(json!({ "type": "hand", "raised": false, "id": lena_id }));
    assert_eq!(alice_ws.wait_for(WAIT, |v| v["type"] == "error")["code"], "forbidden");
    alice_ws.send(json!({ "type": "hand", "raised": true, "id": 999_999 }));
    assert_eq!(alice_ws.wait_for(WAIT, |v| v["type"] == "error")["code"], "forbidden", "no such id: same answer");
    assert_eq!(member(api, &admin, "stage", lena_id)["hand"], true);

    // Hands over REST too: one's own, not another's.
    let alice_url = format!("/v1/rooms/stage/participants/{alice_id}");
    let r = call(api, &alice_t, "PATCH", &alice_url, r#"{"hand":true}"#);
    assert_eq!((r.status, r.body.contains(r#""hand":true"#)), (200, true), "{}", r.body);
    refused(&call(api, &alice_t, "PATCH", &lena_url, r#"{"hand":false}"#), 403, "forbidden", "another's hand");
    assert_eq!(call(api, &alice_t, "PATCH", &alice_url, r#"{"hand":false}"#).status, 200);

    // Only an admin grants: not Lena herself, not Alice.
    refused(&call(api, &lena_t, "PATCH", &lena_url, r#"{"speak":true}"#), 403, "forbidden", "self-grant");
    refused(&call(api, &alice_t, "PATCH", &lena_url, r#"{"speak":true}"#), 403, "forbidden", "peer grants");
    refused(&call(api, &admin, "PATCH", &lena_url, r#"{"speak":1}"#), 400, "bad_json", "speak not a bool");
    refused(
        &call(api, &admin, "PATCH", "/v1/rooms/stage/participants/424242", r#"{"speak":true}"#),
        404,
        "participant_not_found",
        "grant to nobody",
    );

    // Granted: heard within about a second, without rejoining; the hand goes down.
    let r = call(api, &admin, "PATCH", &lena_url, r#"{"speak":true}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    let granted: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    assert_eq!(
        (granted["speak"].clone(), granted["muted"].clone(), granted["hand"].clone()),
        (json!(true), json!(false), json!(false))
    );
    let heard_after = onset(&mut [&mut alice, &mut lena], 0, 660.0, Duration::from_secs(3));
    println!("granted speaker heard after {heard_after:?}");
    let heard_after = heard_after.expect("the granted listener is heard");
    assert!(heard_after <= Duration::from_millis(1500), "heard only after {heard_after:?}");
    let perms = wait_ws(&mut observer, &mut [&mut alice, &mut lena], |v| v["type"] == "permissions");
    assert_eq!(perms, json!({ "type": "permissions", "id": lena_id, "speak": true }));
    let m = member(api, &admin, "stage", lena_id);
    assert_eq!(
        (m["listen_only"].clone(), m["muted"].clone(), m["hand"].clone()),
        (json!(false), json!(false), json!(false))
    );
    run_for(&mut [&mut alice, &mut lena], Duration::from_millis(500));
    let two_way =
        [(0, 660.0), (1, 440.0)].map(|(c, f)| onset(&mut [&mut alice, &mut lena], c, f, Duration::from_secs(5)));
    assert!(two_way.iter().all(Option::is_some), "alice keeps hearing lena, lena still hears alice: {two_way:?}");

    // Revoked: silent again at once, and she cannot unmute herself.
    let dropped = server.media_stats().listen_only_dropped;
    let r = call(api, &admin, "PATCH", &lena_url, r#"{"speak":false}"#);
    assert_eq!((r.status, r.body.contains(r#""speak":false"#)), (200, true), "{}", r.body);
    run_for(&mut [&mut alice, &mut lena], Duration::from_millis(300));
    let since = Instant::now();
    run_for(&mut [&mut alice, &mut lena], Duration::from_millis(1000));
    assert!(alice.hears(660.0, since) < 0.01, "revoked, still heard: {}", alice.hears(660.0, since));
    assert!(server.media_stats().listen_only_dropped > dropped + 25, "her packets are dropped on arrival again");
    refused(&call(api, &lena_t, "PATCH", &lena_url, r#"{"muted":false}"#), 403, "forbidden", "unmute after revoke");
    let perms = wait_ws(&mut observer, &mut [&mut alice, &mut lena], |v| v["type"] == "permissions");
    assert_eq!(perms["speak"], false);

    // An admin lowers a hand over the WebSocket.
    lena_ws.send(json!({ "type": "hand", "raised": true, "id": lena_id }));
    wait_ws(&mut observer, &mut [&mut alice, &mut lena], |v| {
        v["type"] == "hand" && v["id"] == lena_id && v["raised"] == true
    });
    observer.send(json!({ "type": "hand", "raised": false, "id": lena_id }));
    wait_ws(&mut observer, &mut [&mut alice, &mut lena], |v| {
        v["type"] == "hand" && v["id"] == lena_id && v["raised"] == false
    });
    assert_eq!(member(api, &admin, "stage", lena_id)["hand"], false);
    assert!(alice_id != lena_id);

    let m = scrape(server.metrics_addr().expect("metrics are on"));
    for action in ["grant", "revoke", "hand_raised", "hand_lowered"] {
        let n = m.get(&series("tutti_stage_actions_total", &[("action", action)])).copied().unwrap_or(0.0);
        assert!(n >= 1.0, "{action} counted: {n}");
    }
    drop(server);
    drop(rt);
}

#[test]
fn patch_room_and_kick_with_ban() {
    let (rt, server, mint) = server();
    let api = server.http_addr();
    let admin = mint(Grant::admin("host"));
    let alice_t = mint(Grant::participant("hall", "alice"));
    let bob_t = mint(Grant::participant("hall", "bob"));
    let lena_t = mint(Grant::listener("hall", "lena"));
    assert_eq!(call(api, &admin, "POST", "/v1/rooms", r#"{"id":"hall","max_speakers":5}"#).status, 201);
    let mut observer = ws(api, "hall", &admin);
    observer.wait_for(WAIT, |v| v["type"] == "room");
    let join = |token: &str, f: f32| {
        ToneClient::join_as(api, &Requester::token(token), "hall", f, JoinAs::Whip).expect("join")
    };
    let mut host = join(&admin, 440.0);
    let mut alice = join(&alice_t, 660.0);
    let mut bob = join(&bob_t, 880.0);
    let mut lena = join(&lena_t, 1000.0);
    let bob_url = format!("/v1/rooms/hall/participants/{}", bob.id);
    let mut all = [&mut host, &mut alice, &mut bob, &mut lena];
    connect_all(&mut all);
    // The tones the listener hears over the last second, once `want` holds
    // (polled every 200 ms, for at most 8 s: a loaded test machine may
    // glitch a window); the last window's when it never does.
    let heard = |all: &mut [&mut ToneClient], want: &dyn Fn(&[f32]) -> bool| -> Vec<f32> {
        let started = Instant::now();
        run_for(all, Duration::from_millis(1000));
        loop {
            let since = Instant::now() - Duration::from_millis(1000);
            let levels: Vec<f32> = [440.0, 660.0, 880.0].into_iter().map(|f| all[3].hears(f, since)).collect();
            let tones: Vec<f32> =
                [440.0, 660.0, 880.0].into_iter().zip(&levels).filter(|(_, l)| **l > HEARD).map(|(f, _)| f).collect();
            if want(&tones) || started.elapsed() > Duration::from_secs(8) {
                println!("after {:?} the listener hears 440, 660, 880 Hz at {levels:?}", started.elapsed());
                return tones;
            }
            run_for(all, Duration::from_millis(200));
        }
    };
    let three = vec![440.0, 660.0, 880.0];
    assert_eq!(heard(&mut all, &|h| h == three), three, "the listener hears three speakers");

    // Bad changes: refused with a code, nothing changed.
    let patch = |token: &str, body: &str| call(api, token, "PATCH", "/v1/rooms/hall", body);
    refused(&patch(&alice_t, r#"{"locked":true}"#), 403, "forbidden", "not an admin");
    refused(&patch(&admin, r#"{"max_speakers":0}"#), 400, "bad_value", "no speakers");
    refused(&patch(&admin, r#"{"max_speakers":17,"locked":true}"#), 400, "bad_value", "too many speakers");
    refused(&patch(&admin, r#"{"max_participants":0}"#), 400, "bad_value", "empty room");
    refused(&patch(&admin, r#"{"max_participants":-1}"#), 400, "bad_json", "negative");
    refused(&patch(&admin, r#"{"colour":"red"}"#), 400, "bad_json", "unknown field");
    refused(&call(api, &admin, "PATCH", "/v1/rooms/nowhere", r#"{"locked":true}"#), 404, "room_not_found", "no room");
    let r = call(api, &admin, "GET", "/v1/rooms/hall", "");
    let body: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    assert_eq!((body["room"]["locked"].clone(), body["room"]["max_speakers"].clone()), (json!(false), json!(5)));

    // One speaker at a time, on the running mixer; then three again.
    let r = patch(&admin, r#"{"max_speakers":1}"#);
    assert_eq!((r.status, r.body.contains(r#""max_speakers":1"#)), (200, true), "{}", r.body);
    let updated = wait_ws(&mut observer, &mut all, |v| v["type"] == "room_updated");
    assert_eq!((updated["locked"].clone(), updated["max_speakers"].clone()), (json!(false), json!(1)));
    assert_eq!(heard(&mut all, &|h| h.len() == 1).len(), 1, "one speaker mixed");
    assert!(heard(&mut all, &|_| true).len() <= 1, "and no more, a second later");
    assert_eq!(patch(&admin, r#"{"max_speakers":5}"#).status, 200);
    assert_eq!(heard(&mut all, &|h| h.len() == 3).len(), 3, "three speakers mixed again");

    // Mute all: the admin is spared; the others are muted (and told).
    let r = patch(&admin, r#"{"mute_all":true}"#);
    assert_eq!((r.status, r.body.contains(r#""muted":2"#)), (200, true), "{}", r.body);
    let muted_all = wait_ws(&mut observer, &mut all, |v| v["type"] == "muted_all");
    assert_eq!(muted_all["count"], 2, "alice and bob (lena was muted already)");
    assert_eq!(heard(&mut all, &|h| h == [440.0]), vec![440.0], "only the admin is heard");
    assert!(heard(&mut all, &|_| true).iter().all(|f| *f == 440.0), "and nobody else, a second later");
    // Alice may speak: she unmutes herself.
    let alice_url = format!("/v1/rooms/hall/participants/{}", all[1].id);
    assert_eq!(call(api, &alice_t, "PATCH", &alice_url, r#"{"muted":false}"#).status, 200);

    // Full at the new size; locked: nobody new, not even an admin.
    let offer = || ToneClient::offer(100.0).expect("offer").1;
    assert_eq!(patch(&admin, r#"{"max_participants":4}"#).status, 200);
    refused(&call(api, &alice_t, "POST", "/v1/rooms/hall/participants", &offer()), 409, "room_full", "full");
    assert_eq!(patch(&admin, r#"{"max_participants":10,"locked":true}"#).status, 200);
    let updated = wait_ws(&mut observer, &mut all, |v| v["type"] == "room_updated" && v["locked"] == true);
    assert_eq!(updated["max_participants"], 10);
    refused(&call(api, &alice_t, "POST", "/v1/rooms/hall/participants", &offer()), 423, "room_locked", "locked");
    refused(&call(api, &admin, "POST", "/v1/rooms/hall/participants", &offer()), 423, "room_locked", "admin, locked");
    let mut late = ws(api, "hall", &alice_t);
    late.wait_for(WAIT, |v| v["type"] == "room" && v["locked"] == true);
    late.send(json!({ "type": "join", "sdp": offer() }));
    assert_eq!(late.wait_for(WAIT, |v| v["type"] == "error")["code"], "room_locked", "over the WebSocket too");
    assert_eq!(patch(&admin, r#"{"locked":false}"#).status, 200);

    // Kick with a ban: bad bans refused first, bob stays.
    refused(&call(api, &bob_t, "DELETE", &format!("{bob_url}?ban_seconds=60"), ""), 403, "forbidden", "self-ban");
    refused(&call(api, &alice_t, "DELETE", &bob_url, ""), 403, "forbidden", "kick by a participant");
    refused(&call(api, &admin, "DELETE", &format!("{bob_url}?ban_seconds=0"), ""), 400, "bad_value", "zero");
    refused(&call(api, &admin, "DELETE", &format!("{bob_url}?ban_seconds=soon"), ""), 400, "bad_value", "NaN");
    refused(&call(api, &admin, "DELETE", &format!("{bob_url}?ban_seconds=99999999"), ""), 400, "bad_value", "long");
    assert_eq!(call(api, &admin, "DELETE", &format!("{bob_url}?ban_seconds=2"), "").status, 204);
    let left = wait_ws(&mut observer, &mut all, |v| v["type"] == "left");
    assert_eq!(left, json!({ "type": "left", "id": all[2].id, "reason": "kicked" }));
    assert!(run_until(&mut all, Instant::now() + Duration::from_secs(5), |cs| cs[2].closed), "bob's peer closed");
    let banned_at = Instant::now();
    refused(&call(api, &bob_t, "POST", "/v1/rooms/hall/participants", &offer()), 403, "banned", "banned rejoins");
    refused(
        &call(api, &admin, "DELETE", &format!("{bob_url}?ban_seconds=60"), ""),
        404,
        "participant_not_found",
        "gone",
    );
    let r = call(api, &admin, "GET", "/v1/rooms/hall", "");
    assert!(r.body.contains(r#""bans":1"#), "{}", r.body);
    // Others are unaffected; after the ban, bob is welcome again.
    assert_eq!(heard(&mut all, &|h| h == [440.0, 660.0]), vec![440.0, 660.0], "the call goes on");
    std::thread::sleep(Duration::from_secs(2).saturating_sub(banned_at.elapsed()) + Duration::from_millis(200));
    let back = call(api, &bob_t, "POST", "/v1/rooms/hall/participants", &offer());
    assert_eq!(back.status, 201, "{}", back.body);

    let m = scrape(server.metrics_addr().expect("metrics are on"));
    for action in ["lock", "unlock", "resize", "mute_all", "ban", "refused_locked", "refused_banned"] {
        let n = m.get(&series("tutti_stage_actions_total", &[("action", action)])).copied().unwrap_or(0.0);
        assert!(n >= 1.0, "{action} counted: {n}");
    }
    drop(server);
    drop(rt);
}

#[test]
fn a_deaf_participant_hears_no_one_until_it_hears_again() {
    let (_rt, server, mint) = server();
    let api = server.http_addr();
    let admin = mint(Grant::admin("host"));
    let (alice_t, bob_t) = (mint(Grant::participant("quiet", "alice")), mint(Grant::participant("quiet", "bob")));
    assert_eq!(call(api, &admin, "POST", "/v1/rooms", r#"{"id":"quiet"}"#).status, 201);
    let mut observer = ws(api, "quiet", &admin);
    observer.wait_for(WAIT, |v| v["type"] == "room");
    let join = |token: &str, f: f32| {
        ToneClient::join_as(api, &Requester::token(token), "quiet", f, JoinAs::Whip).expect("join")
    };
    let (mut alice, mut bob) = (join(&alice_t, 440.0), join(&bob_t, 660.0));
    connect_all(&mut [&mut alice, &mut bob]);
    let bob_url = format!("/v1/rooms/quiet/participants/{}", bob.id);

    // Someone else may not deafen bob; bob may, and so may an admin.
    refused(&call(api, &alice_t, "PATCH", &bob_url, r#"{"deaf":true}"#), 403, "forbidden", "alice deafens bob");
    let r = call(api, &bob_t, "PATCH", &bob_url, r#"{"deaf":true}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&r.body).expect("JSON")["deaf"], true);
    let told = wait_ws(&mut observer, &mut [&mut alice, &mut bob], |v| v["type"] == "deaf");
    assert_eq!((told["id"].as_u64(), told["deaf"].as_bool()), (Some(bob.id), Some(true)), "{told}");
    assert_eq!(member(api, &admin, "quiet", bob.id)["deaf"], true);

    // Deaf: nothing reaches bob (after what was in flight), while alice still hears him.
    run_for(&mut [&mut alice, &mut bob], Duration::from_millis(300));
    let (since, packets) = (Instant::now(), bob.heard.len());
    run_for(&mut [&mut alice, &mut bob], Duration::from_secs(2));
    assert_eq!(bob.heard.len(), packets, "bob was sent {} packets while deaf", bob.heard.len() - packets);
    assert!(alice.hears(660.0, since) > HEARD, "alice still hears bob");

    // An admin makes him hear again: alice's tone reaches him.
    let r = call(api, &admin, "PATCH", &bob_url, r#"{"deaf":false}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    let back = onset(&mut [&mut alice, &mut bob], 1, 440.0, Duration::from_secs(5));
    assert!(back.is_some(), "bob hears alice again");
    assert_eq!(member(api, &admin, "quiet", bob.id)["deaf"], false);
}
