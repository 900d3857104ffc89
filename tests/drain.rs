//! A deploy is not an outage: `tutti serve` told to stop (SIGTERM, or an
//! admin's `POST /v1/node/drain`) drains first. On one node: calls in
//! progress go on, no new room is made, `/readyz` says `draining`, and the
//! process exits once its last participant has left, or when
//! `drain_seconds` runs out; a second signal stops it at once. In a
//! cluster (real redis-server, two nodes on 127.0.0.2 and .3): the
//! draining node hands its room to the other node, its WebSocket client is
//! told `moved` (with a ticket) and its WHIP clients are closed; all of
//! them rejoin on the other node with the same identity and hear each other
//! again, and the drained node exits.

#![allow(clippy::unwrap_used)]

mod common;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::cluster::{Node, Redis, SECRET, json, send, shared_ports, until_they_hear};
use nix::sys::signal::{Signal, kill};
use tutti_client::{JoinAs, Requester, ToneClient, request_as, run_until};
use tutti_mix::goertzel;
use tutti_server::auth::{Auth, Grant, unix_now};

type Socket = tungstenite::WebSocket<TcpStream>;

/// A room WebSocket with `token` (events only, until it joins).
fn socket(api: SocketAddr, room: &str, token: &str) -> Socket {
    let stream = TcpStream::connect(api).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let (ws, _) = tungstenite::client(format!("ws://{api}/v1/rooms/{room}/ws?token={token}"), stream).expect("upgrade");
    ws.get_ref().set_read_timeout(Some(Duration::from_millis(5))).expect("timeout");
    ws
}

/// Reads what arrived on `ws` (without waiting) and returns the first
/// message (or event inside an `events` batch) of type `kind`.
fn poll_for(ws: &mut Socket, kind: &str) -> Option<serde_json::Value> {
    loop {
        match ws.read() {
            Ok(tungstenite::Message::Text(t)) => {
                let v: serde_json::Value = serde_json::from_str(t.as_str()).expect("JSON");
                if v["type"] == kind {
                    return Some(v);
                }
                if let Some(e) = v["events"].as_array().and_then(|es| es.iter().find(|e| e["type"] == kind)) {
                    return Some(e.clone());
                }
            }
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
            {
                return None;
            }
            Err(e) => panic!("WebSocket failed: {e}"),
        }
    }
}

/// Pumps `clients` until `ws` gets a message of type `kind`, for at most `within`.
fn wait_for(ws: &mut Socket, kind: &str, clients: &mut [&mut ToneClient], within: Duration) -> serde_json::Value {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = poll_for(ws, kind) {
            return v;
        }
        assert!(Instant::now() < deadline, "no `{kind}` on the WebSocket within {within:?}");
        run_until(clients, Instant::now() + Duration::from_millis(20), |_| false);
    }
}

/// Whether the process has exited: its status, if so.
fn exited(child: &mut std::process::Child) -> Option<std::process::ExitStatus> {
    child.try_wait().expect("wait")
}

#[test]
fn a_draining_node_keeps_its_calls_takes_no_new_room_and_exits_once_empty() {
    let mut served = common::serve(&[
        "--http",
        "127.0.0.1:0",
        "--media",
        "127.0.0.1:0",
        "--metrics",
        "off",
        "--set",
        "drain_seconds=60",
        "--set",
        "shutdown_timeout_seconds=3",
    ]);
    let api = served.api;
    let token = served.banner_token();
    let admin = Requester::token(&token);
    let r = request_as(api, &admin, "POST", "/v1/rooms", Some("application/json"), br#"{"id":"call"}"#).unwrap();
    assert_eq!(r.status, 201, "{}", r.body);
    let mut ws = socket(api, "call", &token);
    let mut a = ToneClient::join_as(api, &admin, "call", 440.0, JoinAs::Whip).expect("join");
    let mut b = ToneClient::join_as(api, &admin, "call", 660.0, JoinAs::Json).expect("join");
    assert!(until_they_hear(&mut [&mut a, &mut b], Duration::from_secs(15)), "the call is up");

    kill(served.pid(), Signal::SIGTERM).expect("SIGTERM");
    let signalled = Instant::now();
    // Subscribers hear that the node drains, and until when at the latest.
    let draining = wait_for(&mut ws, "draining", &mut [&mut a, &mut b], Duration::from_secs(5));
    let deadline = draining["deadline"].as_u64().expect("a deadline");
    assert!((unix_now() + 55..=unix_now() + 61).contains(&deadline), "deadline {deadline} ≈ now + 60 s");
    // Load balancers stop sending: /readyz says why.
    let r = request_as(api, &Requester::default(), "GET", "/readyz", None, b"").unwrap();
    assert_eq!((r.status, r.code()), (503, "draining".to_owned()), "{}", r.body);
    // No new room here...
    let r = request_as(api, &admin, "POST", "/v1/rooms", Some("application/json"), br#"{"id":"new"}"#).unwrap();
    assert_eq!((r.status, r.code()), (503, "draining".to_owned()), "{}", r.body);
    let r = request_as(api, &admin, "GET", "/v1/node", None, b"").unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(json(&r)["draining"], true, "{}", r.body);
    assert_eq!(json(&r)["participants"], 2, "{}", r.body);
    // ...but the call goes on, and someone who drops out may come back.
    assert!(until_they_hear(&mut [&mut a, &mut b], Duration::from_secs(10)), "the call goes on while draining");
    let mut c = ToneClient::join_as(api, &admin, "call", 880.0, JoinAs::Whip).expect("a rejoin into the call");
    assert!(until_they_hear(&mut [&mut c, &mut a], Duration::from_secs(10)), "the newcomer is in the call");
    assert!(exited(&mut served.child).is_none(), "still running {:?} after SIGTERM", signalled.elapsed());

    // Everyone leaves: the node goes, at once and cleanly.
    for client in [&a, &b, &c] {
        let r = request_as(api, &admin, "DELETE", &client.location, None, b"").unwrap();
        assert_eq!(r.status, 204, "{}", r.body);
    }
    let left = Instant::now();
    let status = loop {
        if let Some(status) = exited(&mut served.child) {
            break status;
        }
        assert!(left.elapsed() < Duration::from_secs(5), "still running 5 s after the last participant left");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit status {status}");
    eprintln!("exited {:?} after the last participant left", left.elapsed());
    let logs = served.logs();
    assert!(logs.contains("drained: no participant left"), "{logs}");
    assert!(!logs.contains("panicked"), "{logs}");
}

#[test]
fn the_drain_ends_at_its_time_and_a_second_signal_stops_at_once() {
    let auth = Auth::new(SECRET).expect("secret");
    let admin = auth.mint(&Grant::admin("ops"), Duration::from_secs(600), unix_now()).unwrap();
    let guest = auth.mint(&Grant::participant("call", "guest"), Duration::from_secs(600), unix_now()).unwrap();
    let start = |drain: &str| {
        let served = common::serve(&[
            "--set",
            &format!("auth.secret={SECRET}"),
            "--http",
            "127.0.0.1:0",
            "--media",
            "127.0.0.1:0",
            "--metrics",
            "off",
            "--set",
            &format!("drain_seconds={drain}"),
            "--set",
            "shutdown_timeout_seconds=2",
        ]);
        let r = request_as(
            served.api,
            &Requester::token(&admin),
            "POST",
            "/v1/rooms",
            Some("application/json"),
            br#"{"id":"call"}"#,
        )
        .unwrap();
        assert_eq!(r.status, 201, "{}", r.body);
        served
    };

    // The API drains a node that gets no signal; only an admin of every room may.
    let mut served = start("2");
    let api = served.api;
    let mut a = ToneClient::join_as(api, &Requester::token(&guest), "call", 440.0, JoinAs::Whip).expect("join");
    assert!(run_until(&mut [&mut a], Instant::now() + Duration::from_secs(10), |c| c[0].heard.len() > 10));
    let r = request_as(api, &Requester::token(&guest), "POST", "/v1/node/drain", None, b"").unwrap();
    assert_eq!(r.status, 403, "{}", r.body);
    let r = request_as(api, &Requester::token(&admin), "POST", "/v1/node/drain", None, b"").unwrap();
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(json(&r)["draining"], true, "{}", r.body);
    let asked = Instant::now();
    // The participant stays: the drain time (2 s) ends it, then the shutdown (≤ 2 s).
    let done = run_until(&mut [&mut a], asked + Duration::from_secs(8), |c| c[0].closed);
    assert!(done, "the participant's peer was closed when the drain time ran out");
    let status = loop {
        if let Some(status) = exited(&mut served.child) {
            break status;
        }
        assert!(asked.elapsed() < Duration::from_secs(8), "still running 8 s after a drain of 2 s");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit status {status}");
    assert!(asked.elapsed() >= Duration::from_millis(1_500), "it waited for the drain: {:?}", asked.elapsed());
    let logs = served.logs();
    assert!(logs.contains("the drain time ran out with participants still here"), "{logs}");

    // A second signal does not wait for the drain (60 s).
    let mut served = start("60");
    let api = served.api;
    let mut a = ToneClient::join_as(api, &Requester::token(&guest), "call", 440.0, JoinAs::Whip).expect("join");
    assert!(run_until(&mut [&mut a], Instant::now() + Duration::from_secs(10), |c| c[0].heard.len() > 10));
    kill(served.pid(), Signal::SIGTERM).expect("SIGTERM");
    std::thread::sleep(Duration::from_millis(500));
    assert!(exited(&mut served.child).is_none(), "the first signal drains");
    kill(served.pid(), Signal::SIGINT).expect("SIGINT");
    let second = Instant::now();
    let status = loop {
        if let Some(status) = exited(&mut served.child) {
            break status;
        }
        assert!(second.elapsed() < Duration::from_secs(4), "still running 4 s after a second signal");
        run_until(&mut [&mut a], Instant::now() + Duration::from_millis(20), |_| false);
    };
    assert!(status.success(), "exit status {status}");
    assert!(served.logs().contains("second signal: stopping now"));
}

/// When `client` heard `freq` (arrival times of the frames that carry it) since `since`.
fn tone_times(client: &ToneClient, freq: f32, since: Instant) -> Vec<Instant> {
    let frames: Vec<Instant> = client.heard.iter().map(|(at, _)| *at).filter(|at| *at >= since).collect();
    let pcm = client.heard_since(since);
    pcm.chunks_exact(960).zip(frames).filter(|(f, _)| goertzel(f, freq) > 0.03).map(|(_, at)| at).collect()
}

/// How long `before` (the client's old call) and `after` (its new one) left
/// a gap in hearing `freq`: from the last frame with it in the old call to
/// the first in the new one.
fn gap(before: &ToneClient, after: &ToneClient, freq: f32, since: Instant) -> Duration {
    let last = tone_times(before, freq, since).last().copied().unwrap_or(since);
    let first = tone_times(after, freq, last).first().copied().expect("heard again");
    first.saturating_duration_since(last)
}

#[test]
fn a_draining_cluster_node_hands_its_room_over_and_every_client_rejoins() {
    let redis = Redis::start();
    let ports = shared_ports();
    let drain = [("TUTTI_DRAIN_SECONDS", "30")];
    let mut nodes = [Node::start_with(2, ports, &redis, &drain), Node::start_with(3, ports, &redis, &drain)];
    for n in &nodes {
        n.wait_ready();
    }
    let auth = Auth::new(SECRET).expect("secret");
    let admin = auth.mint(&Grant::admin("ops"), Duration::from_secs(600), unix_now()).unwrap();
    let token =
        |who: &str| auth.mint(&Grant::participant("moving", who), Duration::from_secs(600), unix_now()).unwrap();
    let (ann, bob, cat) = (token("ann"), token("bob"), token("cat"));

    let (r, at) = send(nodes[0].api, &admin, "POST", "/v1/rooms", r#"{"id":"moving","max_participants":7}"#);
    assert_eq!(r.status, 201, "{}", r.body);
    let from = nodes.iter().position(|n| n.api == at).unwrap();
    let to = 1 - from;
    let (old, new) = (nodes[from].api, nodes[to].api);

    // ann and bob join over WHIP, cat over the room's WebSocket.
    let mut a = ToneClient::join_as(old, &Requester::token(&ann), "moving", 440.0, JoinAs::Whip).expect("join");
    let mut b = ToneClient::join_as(old, &Requester::token(&bob), "moving", 660.0, JoinAs::Whip).expect("join");
    let mut ws = socket(old, "moving", &cat);
    let (mut c, offer) = ToneClient::offer(880.0).expect("offer");
    ws.send(tungstenite::Message::text(serde_json::json!({"type": "join", "sdp": offer, "name": "cat"}).to_string()))
        .unwrap();
    let answer = wait_for(&mut ws, "answer", &mut [&mut a, &mut b], Duration::from_secs(10));
    c.accept_answer(answer["sdp"].as_str().unwrap(), answer["id"].as_u64().unwrap()).unwrap();
    assert!(until_they_hear(&mut [&mut a, &mut c], Duration::from_secs(15)), "the call is up");
    assert!(until_they_hear(&mut [&mut b, &mut c], Duration::from_secs(15)), "bob is in it: {}", b.connected);

    let r = request_as(old, &Requester::token(&admin), "POST", "/v1/node/drain", None, b"").unwrap();
    assert_eq!(r.status, 202, "{}", r.body);
    let drained = Instant::now();

    // The socket is told where the room went, with a ticket for it.
    let moved = wait_for(&mut ws, "moved", &mut [&mut a, &mut b, &mut c], Duration::from_secs(10));
    assert_eq!(moved["node"], nodes[to].id.as_str(), "{moved}");
    assert_eq!(moved["api_url"], format!("http://{new}").as_str(), "{moved}");
    assert_eq!(moved["reason"], "drain", "{moved}");
    assert!(moved["ticket"].as_str().is_some_and(|t| !t.is_empty()), "{moved}");
    // The WHIP clients were closed (DTLS close_notify): they rejoin through
    // a node of the cluster, with their own tokens, and are sent to the room.
    let closed =
        run_until(&mut [&mut a, &mut b, &mut c], drained + Duration::from_secs(10), |cs| cs[0].closed && cs[1].closed);
    assert!(
        closed,
        "the WHIP clients' peers were closed: {:?}",
        [&a, &b].map(|x| (x.closed, x.heard.last().map(|h| h.0.saturating_duration_since(drained))))
    );
    let rejoin = Instant::now();
    let (mut a2, _) = ToneClient::join_following(old, &Requester::token(&ann), "moving", 440.0, JoinAs::Whip, 2)
        .expect("ann rejoins");
    let (mut b2, _) = ToneClient::join_following(new, &Requester::token(&bob), "moving", 660.0, JoinAs::Whip, 2)
        .expect("bob rejoins");
    // cat joins at the new node first, then leaves the old one (no gap for her).
    let mut ws2 = socket(new, "moving", &cat);
    let (mut c2, offer) = ToneClient::offer(880.0).expect("offer");
    ws2.send(tungstenite::Message::text(serde_json::json!({"type": "join", "sdp": offer, "name": "cat"}).to_string()))
        .unwrap();
    let answer = wait_for(&mut ws2, "answer", &mut [&mut a2, &mut b2, &mut c], Duration::from_secs(10));
    c2.accept_answer(answer["sdp"].as_str().unwrap(), answer["id"].as_u64().unwrap()).unwrap();
    assert!(until_they_hear(&mut [&mut a2, &mut c2], Duration::from_secs(15)), "ann and cat hear each other there");
    assert!(until_they_hear(&mut [&mut b2, &mut c2], Duration::from_secs(15)), "bob and cat hear each other there");
    // The gap each one heard in the others across the hand-over (a WHIP
    // client rejoins when its peer is closed; cat joins before she leaves).
    let since = drained - Duration::from_secs(2);
    let gaps = [
        ("ann hears cat", gap(&a, &a2, c.freq, since)),
        ("bob hears cat", gap(&b, &b2, c.freq, since)),
        ("cat hears ann", gap(&c, &c2, a.freq, since)),
        ("cat hears bob", gap(&c, &c2, b.freq, since)),
    ];
    eprintln!("hand-over gaps: {gaps:?} (rejoins began {:?} after the drain)", rejoin - drained);
    for (who, gap) in gaps {
        assert!(gap < Duration::from_secs(5), "{who}: a gap of {gap:?} across the hand-over");
    }
    ws.close(None).unwrap();
    c.close();

    // The same identities, in the room on the new node.
    let r = request_as(new, &Requester::token(&admin), "GET", "/v1/rooms/moving", None, b"").unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let room = json(&r);
    assert_eq!(room["room"]["node"], nodes[to].id.as_str(), "{room}");
    let mut who: Vec<&str> =
        room["participants"].as_array().unwrap().iter().filter_map(|p| p["identity"].as_str()).collect();
    who.sort_unstable();
    assert_eq!(who, ["ann", "bob", "cat"], "{room}");
    assert_eq!(room["room"]["max_participants"], 7, "the room's settings moved with it: {room}");

    // The drained node, empty, exits.
    let child = nodes[from].child.as_mut().unwrap();
    let status = loop {
        if let Some(status) = exited(child) {
            break status;
        }
        assert!(drained.elapsed() < Duration::from_secs(25), "the drained node still runs");
        run_until(&mut [&mut a2, &mut b2, &mut c2], Instant::now() + Duration::from_millis(50), |_| false);
    };
    assert!(status.success(), "exit status {status}");
    nodes[from].child = None;
}
