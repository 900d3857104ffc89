//! Breakouts over real WebRTC peers, real tokens and real WebSockets: an
//! admin moves a participant from one room to another of the same node
//! (`POST /v1/rooms/{room}/participants/{id}/move`). The same peer goes on
//! (no new offer, no new answer, the same participant id); from then on it
//! hears the new room's talker and not the old room's, the old room no
//! longer hears it and the new room does. Both rooms' sockets are told
//! (`left` with reason `moved_room`, `joined`), and the participant's own
//! socket, opened with a token for the old room only, follows it
//! (`room_changed`, then a snapshot of the new room). Every refusal has its
//! status and stable code, and leaves the participant where it was; in a
//! cluster (a real redis-server), a move to a room on another node says
//! which node holds it. (A plain RTP participant's move: tests/breakout_rtp.rs.)

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{Ws, call, cluster_node, cluster_room, refused, scrape, series, start_with, test_config};
use serde_json::json;
use tutti_client::redis::RedisServer;
use tutti_client::{JoinAs, Requester, Response, ToneClient, run_for, run_until};
use tutti_server::auth::{Auth, Grant, unix_now};

const SECRET: &str = "the breakout test's secret: thirty-two bytes or more";
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

fn move_to(api: SocketAddr, token: &str, room: &str, id: u64, body: serde_json::Value) -> Response {
    call(api, token, "POST", &format!("/v1/rooms/{room}/participants/{id}/move"), &body.to_string())
}

fn ids(api: SocketAddr, token: &str, room: &str) -> Vec<u64> {
    let r = call(api, token, "GET", &format!("/v1/rooms/{room}"), "");
    assert_eq!(r.status, 200, "{}", r.body);
    let body: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    body["participants"].as_array().into_iter().flatten().filter_map(|m| m["id"].as_u64()).collect()
}

#[test]
fn a_moved_participant_keeps_its_connection_and_hears_only_its_new_room() {
    let (rt, server, mint) = server();
    let api = server.http_addr();
    let admin = mint(Grant::admin("host"));
    for id in ["main", "side"] {
        assert_eq!(call(api, &admin, "POST", "/v1/rooms", &json!({ "id": id }).to_string()).status, 201);
    }
    let mut watch_main = ws(api, "main", &admin);
    let mut watch_side = ws(api, "side", &admin);

    // Three talkers in `main` (the 660 Hz one joins over its socket, with a
    // token for `main` only), one in `side`.
    let token = |who: &str, room: &str| mint(Grant::participant(room, who));
    let mut a =
        ToneClient::join_as(api, &Requester::token(&token("a", "main")), "main", 440.0, JoinAs::Whip).expect("join");
    let mut c =
        ToneClient::join_as(api, &Requester::token(&token("c", "main")), "main", 880.0, JoinAs::Json).expect("join");
    let mut d =
        ToneClient::join_as(api, &Requester::token(&token("d", "side")), "side", 330.0, JoinAs::Whip).expect("join");
    let mut own = ws(api, "main", &token("b", "main"));
    own.wait_for(WAIT, |m| m["type"] == "room");
    let (mut b, offer) = ToneClient::offer(660.0).expect("offer");
    own.send(json!({ "type": "join", "sdp": offer }));
    let answer = own.wait_for(WAIT, |m| m["type"] == "answer");
    let id = answer["id"].as_u64().expect("id");
    b.accept_answer(answer["sdp"].as_str().expect("sdp"), id).expect("answer applied");
    {
        let mut all = [&mut a, &mut b, &mut c, &mut d];
        let up = run_until(&mut all, Instant::now() + Duration::from_secs(20), |cs| {
            // d talks alone in side: it is sent nothing (DTX) until b comes.
            cs[..3].iter().all(|c| c.heard.len() > 50) && cs[3].connected && cs[3].sent > 50
        });
        assert!(up, "everyone connected, main hears itself");
        run_for(&mut all, Duration::from_secs(1));
    }
    let before = Instant::now() - Duration::from_millis(600);
    assert!(b.hears(440.0, before) > HEARD && b.hears(880.0, before) > HEARD, "b hears main");
    assert!(b.hears(330.0, before) < 0.01, "b does not hear side yet");
    assert!(a.hears(660.0, before) > HEARD && d.hears(660.0, before) < 0.01, "main hears b, side does not");

    // The move: admin of both rooms; b's grant in `side` is what the move gives.
    let r = move_to(api, &admin, "main", id, json!({ "to": "side" }));
    assert_eq!(r.status, 200, "{}", r.body);
    let done: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    assert_eq!(done, json!({ "id": id, "from": "main", "to": "side", "speak": true }));
    let moved_at = Instant::now();
    // How soon b hears side's talker (over a 200 ms window, pumped in 20 ms steps).
    {
        let mut all = [&mut a, &mut b, &mut c, &mut d];
        let mut took = None;
        while took.is_none() && moved_at.elapsed() < Duration::from_secs(3) {
            run_for(&mut all, Duration::from_millis(20));
            if all[1].hears(330.0, Instant::now() - Duration::from_millis(200)) > HEARD {
                took = Some(moved_at.elapsed());
            }
        }
        let took = took.expect("b hears side within 3 s of the move");
        println!("b heard side's talker {took:?} after the move answered");
    }
    assert_eq!(ids(api, &admin, "main").len(), 2);
    assert!(ids(api, &admin, "side").contains(&id), "b is listed in side, with the same id");

    // Both rooms are told; b's socket follows it.
    {
        let mut all = [&mut a, &mut b, &mut c, &mut d];
        let left = watch_main.wait_pumping(WAIT, &mut all, |m| m["type"] == "left" && m["id"] == id);
        assert_eq!(left["reason"], "moved_room");
        watch_side.wait_pumping(WAIT, &mut all, |m| m["type"] == "joined" && m["id"] == id);
        let left = own.wait_pumping(WAIT, &mut all, |m| m["type"] == "left" && m["id"] == id);
        assert_eq!(left["reason"], "moved_room", "the old room's last word to b's socket");
        let changed = own.wait_pumping(WAIT, &mut all, |m| m["type"] != "events" && m["type"] != "talking");
        assert_eq!(changed, json!({ "type": "room_changed", "room": "side", "from": "main", "id": id }));
        let snapshot = own.wait_pumping(WAIT, &mut all, |_| true);
        assert_eq!((snapshot["type"].as_str(), snapshot["room"].as_str()), (Some("room"), Some("side")), "{snapshot}");
        let listed: Vec<u64> =
            snapshot["participants"].as_array().into_iter().flatten().filter_map(|m| m["id"].as_u64()).collect();
        assert!(listed.contains(&id) && listed.len() == 2, "the snapshot is side's: {snapshot}");
        run_for(&mut all, Duration::from_secs(2));
    }
    let after = moved_at + Duration::from_millis(800);
    assert!(b.hears(330.0, after) > HEARD, "b hears side's talker: {}", b.hears(330.0, after));
    for f in [440.0, 880.0] {
        assert!(b.hears(f, after) < 0.01, "b no longer hears main's {f} Hz: {}", b.hears(f, after));
    }
    assert!(d.hears(660.0, after) > HEARD, "side hears b");
    assert!(a.hears(660.0, after) < 0.01 && c.hears(660.0, after) < 0.01, "main no longer hears b");
    assert!(a.hears(880.0, after) > HEARD, "main goes on");
    // The same connection: b's peer never closed, got no second answer, and
    // its socket still acts for it (a mute in its new room).
    assert!(b.connected && !b.closed, "b's peer is the same, still up");
    own.send(json!({ "type": "mute", "muted": true }));
    {
        let mut all = [&mut a, &mut b, &mut c, &mut d];
        let muted = watch_side.wait_pumping(WAIT, &mut all, |m| m["type"] == "muted" && m["id"] == id);
        assert_eq!(muted["muted"], true);
    }
    while let Some(m) = own.try_next() {
        assert_ne!(m["type"], "answer", "no renegotiation");
    }
    // Its token (for main only) still acts on it in side: the move's grant
    // stands in for it there. Another identity's token for main does not.
    let path = format!("/v1/rooms/side/participants/{id}");
    let r = call(api, &token("b", "main"), "PATCH", &path, r#"{"muted":false}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    refused(
        &call(api, &token("a", "main"), "PATCH", &path, r#"{"muted":true}"#),
        403,
        "wrong_room",
        "another identity",
    );
    refused(&call(api, &token("b", "other"), "PATCH", &path, r#"{"muted":true}"#), 403, "wrong_room", "another room");
    rt.block_on(server.shutdown());
}

#[test]
fn a_refused_move_says_why_and_leaves_the_participant_where_it_was() {
    let (rt, server, mint) = server();
    let api = server.http_addr();
    let admin = mint(Grant::admin("host"));
    for (id, max) in [("a", 10), ("b", 10), ("tiny", 1), ("shut", 10)] {
        let body = json!({ "id": id, "max_participants": max }).to_string();
        assert_eq!(call(api, &admin, "POST", "/v1/rooms", &body).status, 201);
    }
    let mut x =
        ToneClient::join_as(api, &Requester::token(&mint(Grant::participant("a", "x"))), "a", 440.0, JoinAs::Json)
            .expect("join");
    let y = ToneClient::join_as(api, &Requester::token(&admin), "tiny", 660.0, JoinAs::Json).expect("join");
    let id = x.id;
    run_for(&mut [&mut x], Duration::from_millis(200));
    assert_eq!(call(api, &admin, "PATCH", "/v1/rooms/shut", r#"{"locked":true}"#).status, 200);

    let r = move_to(api, &admin, "a", 999_999, json!({ "to": "b" }));
    refused(&r, 404, "participant_not_found", "unknown participant");
    refused(&move_to(api, &admin, "a", id, json!({ "to": "nowhere" })), 404, "room_not_found", "target missing");
    refused(&move_to(api, &admin, "a", id, json!({ "to": "tiny" })), 409, "room_full", "target full");
    refused(&move_to(api, &admin, "a", id, json!({ "to": "shut" })), 423, "room_locked", "target locked");
    refused(&move_to(api, &admin, "a", id, json!({ "to": "a" })), 400, "same_room", "into its own room");
    refused(&move_to(api, &admin, "a", id, json!({ "to": "no room!" })), 400, "bad_room_id", "bad target id");
    refused(&move_to(api, &admin, "a", id, json!({ "room": "b" })), 400, "bad_json", "unknown field");
    refused(&move_to(api, &admin, "nowhere", id, json!({ "to": "b" })), 404, "room_not_found", "source missing");
    // Admin of the source only, of the target only, or a participant.
    let admin_a = mint(Grant { admin: true, ..Grant::participant("a", "host-a") });
    let admin_b = mint(Grant { admin: true, ..Grant::participant("b", "host-b") });
    let own = mint(Grant::participant("a", "x"));
    for (token, who) in [(&admin_a, "admin of a"), (&admin_b, "admin of b"), (&own, "the participant")] {
        refused(&move_to(api, token, "a", id, json!({ "to": "b" })), 403, "forbidden", who);
    }
    // A ban from the target room is a join's.
    let banned =
        ToneClient::join_as(api, &Requester::token(&mint(Grant::participant("b", "x"))), "b", 880.0, JoinAs::Json)
            .expect("join");
    let kick = call(api, &admin, "DELETE", &format!("/v1/rooms/b/participants/{}?ban_seconds=60", banned.id), "");
    assert_eq!(kick.status, 204, "{}", kick.body);
    refused(&move_to(api, &admin, "a", id, json!({ "to": "b" })), 403, "banned", "banned from the target");
    assert_eq!(ids(api, &admin, "a"), vec![id], "still where it was");
    assert_eq!(ids(api, &admin, "tiny"), vec![y.id]);

    // Moved listen-only (the move's grant), and back.
    let r = move_to(api, &admin, "a", id, json!({ "to": "tiny2" }));
    refused(&r, 404, "room_not_found", "not created on a move");
    assert_eq!(call(api, &admin, "POST", "/v1/rooms", r#"{"id":"c"}"#).status, 201);
    let r = move_to(api, &admin, "a", id, json!({ "to": "c", "speak": false }));
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains(r#""speak":false"#), "{}", r.body);
    let r = call(api, &admin, "GET", "/v1/rooms/c", "");
    let c: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    assert_eq!(
        (c["participants"][0]["listen_only"].as_bool(), c["participants"][0]["muted"].as_bool()),
        (Some(true), Some(true))
    );
    assert_eq!(move_to(api, &admin, "c", id, json!({ "to": "a", "speak": true })).status, 200);
    assert_eq!(ids(api, &admin, "a"), vec![id]);

    let m = scrape(server.metrics_addr().expect("metrics are on"));
    let count = |result: &str| m.get(&series("tutti_participant_moves_total", &[("result", result)])).copied();
    // The recorder is the process's: the other tests here count moves too, but no other refusals.
    assert!(count("moved") >= Some(2.0), "{m:?}");
    assert_eq!(count("room_full"), Some(1.0));
    assert_eq!(count("forbidden"), Some(3.0));
    drop((x, y, banned));
    rt.block_on(server.shutdown());
}

/// In a cluster (a real redis-server, two nodes on their own loopback
/// addresses), a move to a room another node holds is refused with where
/// that room is; the participant stays where it was.
#[test]
fn across_nodes_a_move_says_where_the_room_is() {
    let redis = RedisServer::start();
    let nodes = [cluster_node([127, 0, 0, 2], "node-2", &redis), cluster_node([127, 0, 0, 3], "node-3", &redis)];
    let apis = [nodes[0].1.http_addr(), nodes[1].1.http_addr()];
    let admin = nodes[0].1.mint_token(&Grant::admin("ops"), HOUR).expect("token");
    // Rooms until one is on each node (placement picks the lighter of two).
    let mut on: [Option<String>; 2] = [None, None];
    for n in 0..20 {
        let id = format!("r{n}");
        let at = cluster_room(&apis, &admin, &id, &json!({ "id": id }).to_string());
        on[at].get_or_insert(id);
        if on.iter().all(Option::is_some) {
            break;
        }
    }
    let [Some(here), Some(there)] = on else { panic!("the rooms all went to one node") };
    let x = ToneClient::join_as(apis[0], &Requester::token(&admin), &here, 440.0, JoinAs::Json).expect("join");
    let r = move_to(apis[0], &admin, &here, x.id, json!({ "to": there }));
    refused(&r, 409, "room_elsewhere", "a room on another node");
    let body: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    assert_eq!(body["node"], "node-3", "{body}");
    assert_eq!(body["api_url"], format!("http://{}", apis[1]), "{body}");
    assert_eq!(ids(apis[0], &admin, &here), vec![x.id], "still where it was");
    drop(x);
    for (rt, server) in nodes {
        rt.block_on(server.shutdown());
    }
}

/// With `breakout.create_rooms` on, a move to a room that does not exist
/// creates it (the `[room]` defaults) and the participant is its first
/// member: listed there, heard by a talker who joins after it. A refused
/// move creates nothing (or deletes what it created). Off (the default):
/// 404 `room_not_found`, in the test above.
#[test]
fn with_create_rooms_on_a_move_creates_its_room() {
    let mut cfg = test_config();
    cfg.auth.disabled = false;
    cfg.auth.secret = SECRET.to_owned();
    cfg.breakout.create_rooms = true;
    let (rt, server) = start_with(cfg);
    let auth = Auth::new(SECRET).expect("secret");
    let mint = move |g: Grant| auth.mint(&g, HOUR, unix_now()).expect("mint");
    let api = server.http_addr();
    let admin = mint(Grant::admin("host"));
    assert_eq!(call(api, &admin, "POST", "/v1/rooms", r#"{"id":"main"}"#).status, 201);
    let mut b = ToneClient::join_as(
        api,
        &Requester::token(&mint(Grant::participant("main", "b"))),
        "main",
        660.0,
        JoinAs::Json,
    )
    .expect("join");
    let id = b.id;
    run_for(&mut [&mut b], Duration::from_millis(300));
    let mut watch_main = ws(api, "main", &admin);

    // Refused: nothing is created, or what was created goes again.
    let admin_main = mint(Grant { admin: true, ..Grant::participant("main", "host-main") });
    refused(&move_to(api, &admin_main, "main", id, json!({ "to": "fresh" })), 403, "forbidden", "admin of main only");
    refused(&move_to(api, &admin, "main", 999_999, json!({ "to": "ghost" })), 404, "participant_not_found", "nobody");
    for room in ["fresh", "ghost"] {
        refused(&call(api, &admin, "GET", &format!("/v1/rooms/{room}"), ""), 404, "room_not_found", room);
    }

    // The move creates `breakout-1`; b is its member, main is told.
    let r = move_to(api, &admin, "main", id, json!({ "to": "breakout-1" }));
    assert_eq!(r.status, 200, "{}", r.body);
    let done: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    assert_eq!(done, json!({ "id": id, "from": "main", "to": "breakout-1", "speak": true }));
    assert_eq!(ids(api, &admin, "breakout-1"), vec![id], "the new room lists b");
    assert_eq!(ids(api, &admin, "main"), Vec::<u64>::new());
    {
        let mut all = [&mut b];
        let left = watch_main.wait_pumping(WAIT, &mut all, |m| m["type"] == "left" && m["id"] == id);
        assert_eq!(left["reason"], "moved_room");
    }
    // A talker who joins the new room afterwards is announced there and heard by b.
    let mut watch_new = ws(api, "breakout-1", &admin);
    let mut d = ToneClient::join_as(
        api,
        &Requester::token(&mint(Grant::participant("breakout-1", "d"))),
        "breakout-1",
        330.0,
        JoinAs::Whip,
    )
    .expect("d joins the new room");
    let d_id = d.id;
    {
        let mut all = [&mut b, &mut d];
        let joined = watch_new.wait_pumping(WAIT, &mut all, |m| m["type"] == "joined");
        assert_eq!(joined["id"].as_u64(), Some(d_id));
        let heard = run_until(&mut all, Instant::now() + Duration::from_secs(10), |cs| {
            cs[0].hears(330.0, Instant::now() - Duration::from_millis(300)) > HEARD
        });
        assert!(heard, "b hears the talker of the room it was moved into");
    }
    rt.block_on(server.shutdown());
}

/// An admin of the old room only is no admin of the room it is moved to:
/// the new room's mute-all mutes it; an admin of every room stays spared.
#[test]
fn a_moved_room_admin_is_no_admin_of_its_new_room() {
    let (rt, server, mint) = server();
    let api = server.http_addr();
    let admin = mint(Grant::admin("host"));
    for id in ["a", "b"] {
        assert_eq!(call(api, &admin, "POST", "/v1/rooms", &json!({ "id": id }).to_string()).status, 201);
    }
    let admin_a = mint(Grant { admin: true, ..Grant::participant("a", "host-a") });
    let mut of_a = ToneClient::join_as(api, &Requester::token(&admin_a), "a", 440.0, JoinAs::Json).expect("join");
    let mut of_all = ToneClient::join_as(api, &Requester::token(&admin), "a", 660.0, JoinAs::Json).expect("join");
    run_for(&mut [&mut of_a, &mut of_all], Duration::from_millis(200));
    for id in [of_a.id, of_all.id] {
        let r = move_to(api, &admin, "a", id, json!({ "to": "b" }));
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let r = call(api, &admin, "PATCH", "/v1/rooms/b", r#"{"mute_all":true}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    let r = call(api, &admin, "GET", "/v1/rooms/b", "");
    let b: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    let state = |id: u64| {
        let p = b["participants"].as_array().into_iter().flatten().find(|p| p["id"] == id).expect("in b");
        (p["admin"].as_bool(), p["muted"].as_bool())
    };
    assert_eq!(state(of_a.id), (Some(false), Some(true)), "a's admin is muted with b's participants: {b}");
    assert_eq!(state(of_all.id), (Some(true), Some(false)), "an admin of every room is spared: {b}");
    drop((of_a, of_all));
    rt.block_on(server.shutdown());
}
