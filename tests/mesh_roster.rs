//! One room across three nodes, seen whole from each: three `tutti serve`
//! processes on 127.0.0.2, .3 and .4 and a real `redis-server`,
//! `cluster.room_spread = "always"`, a talker on each node (real WebRTC,
//! tones).
//!
//! - `GET /v1/rooms/{room}` on every node lists all three participants,
//!   each with its node (and connected: no event says so, the roster
//!   follows it anyway), and counts them.
//! - A roster entry forged straight into Redis, for a node outside the
//!   room's span or for another node's participant, is not listed (counted).
//! - A room WebSocket opened on A: its snapshot has all three; then a
//!   `joined` for a fourth participant joining on C, a `talking` naming
//!   that talker's real id (as A's mixer hears it, not its mixer-internal
//!   id), and a `left` when B's participant leaves.
//!
//! Joins are placed on a chosen node with a redirect ticket minted here
//! (as the node that redirects would mint it).

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::cluster::{Redis, SECRET, join_placed, join_placed_with, json, metric, send, spread_nodes, ticket_for};
use tutti_client::{Requester, ToneClient, request_as, run_for, run_until};
use tutti_cluster::{TICKET_PURPOSE, TicketKey, derive_key};
use tutti_server::auth::{Auth, Grant, unix_now};

const ROOM: &str = "roster";
const FREQS: [f32; 4] = [440.0, 660.0, 990.0, 1320.0];

/// The participants `GET /v1/rooms/{room}` on `api` lists: id → node.
fn listed(api: SocketAddr, token: &str) -> (BTreeMap<u64, String>, serde_json::Value) {
    let (ids, body, _) = listed_connected(api, token);
    (ids, body)
}

/// [`listed`], and whether every participant listed is connected.
fn listed_connected(api: SocketAddr, token: &str) -> (BTreeMap<u64, String>, serde_json::Value, bool) {
    let r = request_as(api, &Requester::token(token), "GET", &format!("/v1/rooms/{ROOM}"), None, b"").expect("GET");
    assert_eq!(r.status, 200, "{}", r.body);
    let body = json(&r);
    let ids = body["participants"]
        .as_array()
        .expect("participants")
        .iter()
        .map(|p| (p["id"].as_u64().expect("id"), p["node"].as_str().unwrap_or("none").to_owned()))
        .collect();
    let connected = body["participants"].as_array().expect("participants").iter().all(|p| p["connected"] == true);
    (ids, body, connected)
}

/// A room socket on `api`, reading without blocking (so that the tone
/// clients can be pumped meanwhile).
/// A room socket on the node at `api` whose id is `node`: it names its node
/// (as a page placed there does), so that `room_spread = "always"` does not
/// place it afresh on another node (a `moved`).
fn open_ws(api: SocketAddr, room: &str, node: &str, token: &str) -> tungstenite::WebSocket<TcpStream> {
    let stream = TcpStream::connect(api).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    let url = format!("ws://{api}/v1/rooms/{room}/ws?token={token}&node={node}");
    let (ws, _) = tungstenite::client(url, stream).expect("upgrade");
    ws
}

/// The JSON messages waiting on `ws` (none if nothing came).
fn drain(ws: &mut tungstenite::WebSocket<TcpStream>) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    loop {
        match ws.read() {
            Ok(tungstenite::Message::Text(t)) => out.push(serde_json::from_str(t.as_str()).expect("JSON")),
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
            {
                return out;
            }
            Err(e) => panic!("room socket failed: {e}"),
        }
    }
}

/// Pumps `clients`, gathering the socket's events, until `done` holds for
/// them (checked every 50 ms) or `within`.
fn events_until(
    clients: &mut [ToneClient],
    ws: &mut tungstenite::WebSocket<TcpStream>,
    seen: &mut Vec<serde_json::Value>,
    within: Duration,
    done: impl Fn(&[serde_json::Value]) -> bool,
) -> bool {
    let mut refs: Vec<&mut ToneClient> = clients.iter_mut().collect();
    let mut last = Instant::now();
    run_until(&mut refs, Instant::now() + within, |_| {
        if last.elapsed() < Duration::from_millis(50) {
            return false;
        }
        last = Instant::now();
        for m in drain(ws) {
            if m["type"] == "events" {
                seen.extend(m["events"].as_array().cloned().unwrap_or_default());
            }
        }
        done(seen)
    })
}

fn has(events: &[serde_json::Value], kind: &str, id: u64, extra: Option<(&str, bool)>) -> bool {
    events.iter().any(|e| {
        e["type"] == kind && e["id"].as_u64() == Some(id) && extra.is_none_or(|(k, v)| e[k].as_bool() == Some(v))
    })
}

#[test]
fn a_spread_rooms_participants_and_events_are_seen_from_every_node() {
    let t0 = Instant::now();
    let redis = Redis::start();
    let nodes = spread_nodes(&redis);
    let (a, b, c) = (nodes[0].api, nodes[1].api, nodes[2].api);
    let auth = Auth::new(SECRET).expect("secret");
    let admin = auth.mint(&Grant::admin("ops"), Duration::from_secs(600), unix_now()).expect("token");
    // The room created on A (a create redirected there), K = 5: every talker is selected.
    let create =
        format!("/v1/rooms?room={ROOM}&ticket={}", ticket_for(ROOM, "ops", false, true, ("POST", "/v1/rooms")));
    let r = request_as(a, &Requester::default(), "POST", &create, Some("application/json"), br#"{"max_speakers":5}"#)
        .expect("create answers");
    assert_eq!(r.status, 201, "{}", r.body);

    // A talker on each node.
    let mut all: Vec<ToneClient> = [(a, "talker-a"), (b, "talker-b"), (c, "talker-c")]
        .iter()
        .zip(FREQS)
        .map(|(&(api, who), f)| join_placed(api, ROOM, who, f).unwrap_or_else(|e| panic!("{who}: {e:?}")))
        .collect();
    let want: BTreeMap<u64, String> = all.iter().zip(&nodes).map(|(cl, n)| (cl.id, n.id.clone())).collect();
    eprintln!("participants: {want:?} ({:?} in)", t0.elapsed());

    // Every node lists all three, each with its node.
    for node in &nodes {
        let asked = Instant::now();
        let mut got = (BTreeMap::new(), serde_json::Value::Null, false);
        {
            let mut refs: Vec<&mut ToneClient> = all.iter_mut().collect();
            run_until(&mut refs, asked + Duration::from_secs(10), |_| {
                got = listed_connected(node.api, &admin);
                got.0 == want && got.2
            });
        }
        assert_eq!(got.0, want, "{} lists every node's participants: {}", node.id, got.1);
        assert!(got.2, "{} shows every participant connected, the other nodes' too: {}", node.id, got.1);
        assert_eq!(got.1["room"]["participants"], 3, "{}", got.1);
        eprintln!("{} lists all three after {:?}", node.id, asked.elapsed());
    }

    // Forged entries: a node outside the span, and, in B's own roster, a
    // participant of A's number (B's roster names B's participants only)
    // and a phantom of B's own number shown as an admin (not signed by B).
    let (id_a, id_b) = (all[0].id, all[1].id);
    let forged_outsider = (99u64 << 32) | 1;
    let entry = |id: u64| format!(r#"{{"id":{id},"name":"forged","identity":"x","muted":false}}"#);
    redis.cli(&["HSET", &format!("tutti:roster:{ROOM}:node-9"), &forged_outsider.to_string(), &entry(forged_outsider)]);
    let forged_in_b = id_a + 1000;
    redis.cli(&[
        "HSET",
        &format!("tutti:roster:{ROOM}:{}", nodes[1].id),
        &forged_in_b.to_string(),
        &entry(forged_in_b),
    ]);
    let phantom = id_b + 1000;
    let phantom_entry = format!(r#"{{"id":{phantom},"name":"phantom","identity":"x","muted":false,"admin":true}}"#);
    redis.cli(&["HSET", &format!("tutti:roster:{ROOM}:{}", nodes[1].id), &phantom.to_string(), &phantom_entry]);
    let refused_before = metric(&nodes[0], "tutti_cluster_roster_refused_total");
    // Read again once the shared read (250 ms) is stale: until A counts the forged entry.
    let mut last = (BTreeMap::new(), serde_json::Value::Null);
    let counted = {
        let mut refs: Vec<&mut ToneClient> = all.iter_mut().collect();
        run_until(&mut refs, Instant::now() + Duration::from_secs(5), |_| {
            last = listed(a, &admin);
            metric(&nodes[0], "tutti_cluster_roster_refused_total") > refused_before
        })
    };
    assert!(counted, "the forged entry in B's roster is counted as refused");
    assert_eq!(last.0, want, "forged entries are not listed: {}", last.1);

    // A room socket on A: a snapshot of all three.
    let mut ws = open_ws(a, ROOM, &nodes[0].id, &admin);
    let snapshot: serde_json::Value = loop {
        match ws.read().expect("snapshot") {
            tungstenite::Message::Text(t) => break serde_json::from_str(t.as_str()).expect("JSON"),
            _ => continue,
        }
    };
    assert_eq!(snapshot["type"], "room", "{snapshot}");
    let in_snapshot: BTreeMap<u64, String> = snapshot["participants"]
        .as_array()
        .expect("participants")
        .iter()
        .map(|p| (p["id"].as_u64().expect("id"), p["node"].as_str().unwrap_or("none").to_owned()))
        .collect();
    assert_eq!(in_snapshot, want, "the snapshot has every node's participants: {snapshot}");
    // And names the other nodes, where its clients go if A is lost.
    let mut others: Vec<&str> =
        snapshot["nodes"].as_array().expect("nodes").iter().filter_map(|n| n["api_url"].as_str()).collect();
    others.sort_unstable();
    assert_eq!(others, [format!("http://{b}"), format!("http://{c}")], "{snapshot}");
    ws.get_mut().set_nonblocking(true).expect("non-blocking");

    // A fourth participant joins on C: `joined`, then its talking, by its real id.
    let joined_at = Instant::now();
    all.push(join_placed(c, ROOM, "talker-d", FREQS[3]).expect("talker-d on C"));
    let id_d = all[3].id;
    assert_eq!(id_d >> 32, all[2].id >> 32, "talker-d has C's node number");
    let mut seen = Vec::new();
    let ok = events_until(&mut all, &mut ws, &mut seen, Duration::from_secs(15), |s| {
        has(s, "joined", id_d, None) && has(s, "talking", id_d, Some(("talking", true)))
    });
    assert!(ok, "A's socket hears of C's new talker joining and talking by its id {id_d}: {seen:?}");
    eprintln!("joined and talking on C seen on A after {:?}", joined_at.elapsed());
    let foreign_ids: Vec<u64> = seen.iter().filter_map(|e| e["id"].as_u64()).filter(|id| *id >= 1 << 51).collect();
    assert!(foreign_ids.is_empty(), "no mixer-internal id reaches a socket: {foreign_ids:?}");

    // B's talker leaves (its DELETE sent to A, redirected to B): `left` on A's socket.
    let left_at = Instant::now();
    let location = all[1].location.clone();
    let (r, at) = send(a, &admin, "DELETE", &location, "");
    assert_eq!((r.status, at), (204, b), "{}", r.body);
    let ok = events_until(&mut all, &mut ws, &mut seen, Duration::from_secs(10), |s| has(s, "left", id_b, None));
    assert!(ok, "A's socket hears of B's talker leaving: {seen:?}");
    eprintln!("left on B seen on A after {:?}", left_at.elapsed());
    let joins = seen.iter().filter(|e| e["type"] == "joined" && e["id"].as_u64() == Some(id_d)).count();
    assert_eq!(joins, 1, "one joined per participant, not one per node: {seen:?}");

    // And the listing follows: B's talker gone, C's second one there.
    let mut want = want;
    want.remove(&id_b);
    want.insert(id_d, nodes[2].id.clone());
    let mut got = BTreeMap::new();
    {
        let mut refs: Vec<&mut ToneClient> = all.iter_mut().collect();
        run_until(&mut refs, Instant::now() + Duration::from_secs(10), |_| {
            got = listed(a, &admin).0;
            got == want
        });
    }
    assert_eq!(got, want, "A's listing follows the other nodes' joins and leaves");

    // A page sent to C for a room C does not host (a `moved` ticket): C's
    // `/enter` hosts the room before the page's socket comes, so that the
    // socket stays on C.
    let other = "roster-enter";
    let create =
        format!("/v1/rooms?room={other}&ticket={}", ticket_for(other, "ops", false, true, ("POST", "/v1/rooms")));
    let r = request_as(a, &Requester::default(), "POST", &create, Some("application/json"), b"{}").expect("create");
    assert_eq!(r.status, 201, "{}", r.body);
    let hosted = |api| {
        json(&request_as(api, &Requester::token(&admin), "GET", "/v1/node", None, b"").expect("GET"))["rooms"].as_u64()
    };
    let before = hosted(c);
    let enter = format!("/v1/rooms/{other}/enter");
    // As a `moved` mints it: the socket's grant, with its token's expiry.
    let key = TicketKey::new(&derive_key(common::cluster::CLUSTER_SECRET.as_bytes(), TICKET_PURPOSE), 30);
    let grants =
        serde_json::json!({"room": other, "speak": true, "listen": true, "admin": false, "exp": unix_now() + 600});
    let ticket = key.mint(other, "page", grants, ("GET", &enter), unix_now()).expect("ticket").0;
    let path = format!("{enter}?ticket={ticket}");
    let r = request_as(c, &Requester::default(), "GET", &path, None, b"").expect("enter");
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(
        r.header("location").is_some_and(|l| l.contains(&format!("room={other}")) && l.contains("#token=")),
        "{:?}",
        r.header("location")
    );
    assert_eq!(hosted(c), before.map(|n| n + 1), "C hosts the room after the page's enter");
    eprintln!("done in {:?}", t0.elapsed());
}

/// Participant attributes in a spread room: those a join brings (its
/// token's, carried by the redirect ticket to the node it is placed on) are
/// listed on every node, and a change on the participant's node (an admin's
/// `PATCH`, sent to another node and redirected) reaches another node's room
/// socket as `attributes_changed` and its listing. A data message sent on
/// one node reaches a socket on another.
#[test]
fn attributes_and_data_messages_are_seen_from_every_node_of_a_spread_room() {
    const ROOM: &str = "attributes";
    let redis = Redis::start();
    let nodes = spread_nodes(&redis);
    let (a, b) = (nodes[0].api, nodes[1].api);
    let auth = Auth::new(SECRET).expect("secret");
    let admin = auth.mint(&Grant::admin("ops"), Duration::from_secs(600), unix_now()).expect("token");
    let create =
        format!("/v1/rooms?room={ROOM}&ticket={}", ticket_for(ROOM, "ops", false, true, ("POST", "/v1/rooms")));
    let r = request_as(a, &Requester::default(), "POST", &create, Some("application/json"), b"{}").expect("create");
    assert_eq!(r.status, 201, "{}", r.body);
    let grants = |role: &str| serde_json::json!({"room": ROOM, "speak": true, "listen": true, "admin": false, "attributes": {"role": role}});
    let mut all = vec![
        join_placed_with(a, ROOM, "guest-a", grants("guest"), FREQS[0]).expect("on A"),
        join_placed_with(b, ROOM, "host-b", grants("host"), FREQS[1]).expect("on B"),
    ];
    let id_b = all[1].id;
    let attributes_on = |api: SocketAddr, id: u64| {
        let r =
            request_as(api, &Requester::token(&admin), "GET", &format!("/v1/rooms/{ROOM}"), None, b"").expect("GET");
        let body = json(&r);
        body["participants"].as_array().into_iter().flatten().find(|p| p["id"] == id).map(|p| p["attributes"].clone())
    };
    let mut seen_on_a = None;
    {
        let mut refs: Vec<&mut ToneClient> = all.iter_mut().collect();
        run_until(&mut refs, Instant::now() + Duration::from_secs(10), |_| {
            seen_on_a = attributes_on(a, id_b);
            seen_on_a.is_some()
        });
    }
    assert_eq!(seen_on_a, Some(serde_json::json!({"role": "host"})), "A lists B's participant with its attributes");

    // A room socket on A; the admin's change sent to A, done on B.
    let mut ws = open_ws(a, ROOM, &nodes[0].id, &admin);
    ws.get_mut().set_nonblocking(true).expect("non-blocking");
    let path = format!("/v1/rooms/{ROOM}/participants/{id_b}");
    let (r, at) = send(a, &admin, "PATCH", &path, r#"{"attributes":{"seat":"2"}}"#);
    assert_eq!((r.status, at), (200, b), "{}", r.body);
    let want = serde_json::json!({"role": "host", "seat": "2"});
    let mut seen = Vec::new();
    let told = events_until(&mut all, &mut ws, &mut seen, Duration::from_secs(10), |s| {
        s.iter().any(|e| e["type"] == "attributes_changed" && e["id"] == id_b && e["attributes"] == want)
    });
    assert!(told, "A's socket is told B's participant's attributes: {seen:?}");
    let mut listed_now = None;
    {
        let mut refs: Vec<&mut ToneClient> = all.iter_mut().collect();
        run_until(&mut refs, Instant::now() + Duration::from_secs(10), |_| {
            listed_now = attributes_on(a, id_b);
            listed_now.as_ref() == Some(&want)
        });
    }
    assert_eq!(listed_now, Some(want), "A's listing follows");

    // A data message sent on A reaches a room socket on B (relayed), once.
    let mut ws_b = open_ws(b, ROOM, &nodes[1].id, &admin);
    ws_b.get_mut().set_nonblocking(true).expect("non-blocking");
    std::thread::sleep(Duration::from_millis(300));
    let (r, at) = send(a, &admin, "POST", &format!("/v1/rooms/{ROOM}/data"), r#"{"topic":"notice","payload":"hi"}"#);
    assert_eq!((r.status, at), (202, a), "{}", r.body);
    let mut got = Vec::new();
    {
        let mut refs: Vec<&mut ToneClient> = all.iter_mut().collect();
        run_until(&mut refs, Instant::now() + Duration::from_secs(5), |_| {
            got.extend(drain(&mut ws_b).into_iter().filter(|m| m["type"] == "data"));
            !got.is_empty()
        });
        run_for(&mut refs, Duration::from_millis(500));
    }
    got.extend(drain(&mut ws_b).into_iter().filter(|m| m["type"] == "data"));
    let want = serde_json::json!({"type": "data", "from": null, "topic": "notice", "payload": "hi"});
    assert_eq!(got, [want], "B's socket gets A's data message, once");
}
