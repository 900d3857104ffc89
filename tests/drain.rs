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
    poll_any(ws, &[kind])
}

/// [`poll_for`] the first message of any of `kinds`.
fn poll_any(ws: &mut Socket, kinds: &[&str]) -> Option<serde_json::Value> {
    loop {
        match ws.read() {
            Ok(tungstenite::Message::Text(t)) => {
                let v: serde_json::Value = serde_json::from_str(t.as_str()).expect("JSON");
                let wanted = |v: &serde_json::Value| kinds.iter().any(|k| v["type"] == *k);
                if wanted(&v) {
                    return Some(v);
                }
                if let Some(e) = v["events"].as_array().and_then(|es| es.iter().find(|e| wanted(e))) {
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

/// Waits for `child` to exit successfully within `within` of `since`
/// (`what` says what it should have been done by), calling `meanwhile`
/// between looks (to keep clients going).
fn exits_cleanly(
    child: &mut std::process::Child,
    since: Instant,
    within: Duration,
    what: &str,
    mut meanwhile: impl FnMut(),
) {
    let status = loop {
        if let Some(status) = exited(child) {
            break status;
        }
        assert!(since.elapsed() < within, "still running {within:?} after {what}");
        meanwhile();
    };
    assert!(status.success(), "exit status {status}");
}

fn pause() {
    std::thread::sleep(Duration::from_millis(20));
}

#[test]
fn a_draining_node_keeps_its_calls_takes_no_new_room_and_exits_once_empty() {
    let mut served = common::serve_loopback(&["--set", "drain_seconds=60", "--set", "shutdown_timeout_seconds=3"]);
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
    exits_cleanly(&mut served.child, left, Duration::from_secs(5), "the last participant left", pause);
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
        let served = common::serve_loopback(&[
            "--set",
            &format!("auth.secret={SECRET}"),
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
    exits_cleanly(&mut served.child, asked, Duration::from_secs(8), "a drain of 2 s", pause);
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
    exits_cleanly(&mut served.child, second, Duration::from_secs(4), "a second signal", || {
        run_until(&mut [&mut a], Instant::now() + Duration::from_millis(20), |_| false);
    });
    assert!(served.logs().contains("second signal: stopping now"));
}

/// When `client` heard `freq` (arrival times of the frames that carry it) since `since`.
fn tone_times(client: &ToneClient, freq: f32, since: Instant) -> Vec<Instant> {
    let frames: Vec<Instant> = client.heard.iter().map(|(at, _)| *at).filter(|at| *at >= since).collect();
    let pcm = client.heard_since(since);
    pcm.chunks_exact(960).zip(frames).filter(|(f, _)| goertzel(f, freq) > 0.03).map(|(_, at)| at).collect()
}

/// The share of the frames `client` heard since `since` that carry `freq`.
fn tone_share(client: &ToneClient, freq: f32, since: Instant) -> f64 {
    let frames = client.heard.iter().filter(|(at, _)| *at >= since).count();
    tone_times(client, freq, since).len() as f64 / frames.max(1) as f64
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
    exits_cleanly(child, drained, Duration::from_secs(25), "its drain", || {
        run_until(&mut [&mut a2, &mut b2, &mut c2], Instant::now() + Duration::from_millis(50), |_| false);
    });
    nodes[from].child = None;
}

/// One participant of the rolling restart: its identity and room, its call
/// (replaced on every rejoin) and, when it joined over the WebSocket, its socket.
struct Caller {
    identity: String,
    room: String,
    token: String,
    talker: bool,
    freq: f32,
    client: ToneClient,
    ws: Option<Socket>,
    /// The calls it had before (kept to measure the gaps).
    old: Vec<ToneClient>,
    rejoins: usize,
}

/// Joins over the room's WebSocket through `api` (with `token`), at the
/// node a `moved` names if `api` does not hold the room: the client and its socket.
fn ws_join(api: SocketAddr, room: &str, token: &str, freq: f32) -> (ToneClient, Socket) {
    let mut ws = socket(api, room, token);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match poll_any(&mut ws, &["moved", "room"]) {
            Some(m) if m["type"] == "moved" => {
                let (_, there) = m["api_url"].as_str().unwrap().split_once("://").unwrap();
                return ws_join(there.parse().unwrap(), room, token, freq);
            }
            Some(_) => break,
            None => {}
        }
        assert!(Instant::now() < deadline, "no `room` snapshot on the WebSocket through {api}");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (mut c, offer) = ToneClient::offer(freq).expect("offer");
    c.talking = false;
    ws.send(tungstenite::Message::text(serde_json::json!({"type": "join", "sdp": offer}).to_string())).unwrap();
    let answer = wait_for(&mut ws, "answer", &mut [], Duration::from_secs(10));
    c.accept_answer(answer["sdp"].as_str().unwrap(), answer["id"].as_u64().unwrap()).unwrap();
    (c, ws)
}

impl Caller {
    /// Rejoins through `entry` (any live node) when its call was closed, or
    /// at the node a `moved` names (joining there before leaving here).
    fn follow(&mut self, entry: SocketAddr) {
        let moved = self.ws.as_mut().and_then(|ws| poll_for(ws, "moved"));
        if !self.client.closed && moved.is_none() {
            return;
        }
        let new = match moved {
            Some(m) => {
                let (_, there) = m["api_url"].as_str().unwrap().split_once("://").unwrap();
                let (c, ws) = ws_join(there.parse().unwrap(), &self.room, &self.token, self.freq);
                if let Some(mut old) = self.ws.replace(ws) {
                    let _ = old.close(None);
                }
                c
            }
            None => {
                let how = JoinAs::Whip;
                let mut c =
                    ToneClient::join_following(entry, &Requester::token(&self.token), &self.room, self.freq, how, 2)
                        .map(|(c, _)| c)
                        .unwrap_or_else(|e| panic!("{} rejoins {} through {entry}: {e}", self.identity, self.room));
                c.talking = self.talker;
                c
            }
        };
        let mut old = std::mem::replace(&mut self.client, new);
        old.close();
        self.old.push(old);
        self.rejoins += 1;
    }
}

#[test]
fn a_rolling_restart_of_three_nodes_keeps_every_call() {
    let redis = Redis::start();
    let ports = shared_ports();
    let env = [("TUTTI_DRAIN_SECONDS", "20"), ("TUTTI_CLUSTER_CAPACITY", "1000")];
    let mut nodes: Vec<Node> = (2..=4).map(|n| Node::start_with(n, ports, &redis, &env)).collect();
    for n in &nodes {
        n.wait_ready();
    }
    let auth = Auth::new(SECRET).expect("secret");
    let admin = auth.mint(&Grant::admin("ops"), Duration::from_secs(600), unix_now()).unwrap();
    // Rooms of a talker (its own tone) and listeners, the second of them on
    // the WebSocket: 3 rooms of 3 here; ROLLING_ROOMS and
    // ROLLING_ROOM_SIZE make it bigger for a measurement (release build).
    let setting = |name: &str, default: usize| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let (rooms, size) = (setting("ROLLING_ROOMS", 3), setting("ROLLING_ROOM_SIZE", 3).max(3));
    let mut callers = Vec::new();
    for r in 0..rooms {
        let room = format!("roll-{r}");
        let (resp, _) = send(nodes[r % 3].api, &admin, "POST", "/v1/rooms", &format!(r#"{{"id":"{room}"}}"#));
        assert_eq!(resp.status, 201, "{}", resp.body);
        for k in 0..size {
            let identity = format!("{room}-p{k}");
            let token = auth.mint(&Grant::participant(&room, &identity), Duration::from_secs(600), unix_now()).unwrap();
            let freq = 440.0 + 220.0 * (r % 8) as f32;
            let (client, ws) = if k == 2 {
                let (c, ws) = ws_join(nodes[0].api, &room, &token, freq);
                (c, Some(ws))
            } else {
                let (mut c, _) =
                    ToneClient::join_following(nodes[0].api, &Requester::token(&token), &room, freq, JoinAs::Whip, 2)
                        .expect("join");
                c.talking = k == 0;
                (c, None)
            };
            // The callers in so far keep their calls going while the others join.
            let mut clients: Vec<&mut ToneClient> = callers.iter_mut().map(|c: &mut Caller| &mut c.client).collect();
            run_until(&mut clients, Instant::now() + Duration::from_millis(2), |_| false);
            callers.push(Caller {
                identity,
                room: room.clone(),
                token,
                talker: k == 0,
                freq,
                client,
                ws,
                old: Vec::new(),
                rejoins: 0,
            });
        }
    }
    let pump = |callers: &mut [Caller], for_: Duration| {
        let mut clients: Vec<&mut ToneClient> = callers.iter_mut().map(|c| &mut c.client).collect();
        run_until(&mut clients, Instant::now() + for_, |_| false);
    };
    // Every listener hears its room's talker.
    let heard_all = |callers: &[Caller], since: Instant| {
        callers.iter().filter(|c| !c.talker).all(|c| c.client.hears(c.freq, since) > 0.05)
    };
    let up = Instant::now() + Duration::from_secs(30);
    loop {
        let t0 = Instant::now();
        pump(&mut callers, Duration::from_secs(1));
        if heard_all(&callers, t0) {
            break;
        }
        assert!(Instant::now() < up, "every call is up within 30 s");
        for c in &mut callers {
            if let Some(ws) = c.ws.as_mut() {
                let _ = poll_for(ws, "none"); // answers the server's pings
            }
        }
    }

    let started = Instant::now();
    for n in 0..nodes.len() {
        let entry = nodes[(n + 1) % nodes.len()].api;
        let child = nodes[n].child.as_ref().unwrap();
        kill(nix::unistd::Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            pump(&mut callers, Duration::from_millis(50));
            for c in &mut callers {
                c.follow(entry);
            }
            if let Some(status) = nodes[n].child.as_mut().unwrap().try_wait().unwrap() {
                assert!(status.success(), "{} exit status {status}", nodes[n].id);
                break;
            }
            assert!(Instant::now() < deadline, "{} still runs 30 s after SIGTERM", nodes[n].id);
        }
        nodes[n].child = None;
        // The new version comes up at the same address.
        nodes[n] = Node::start_with(n as u8 + 2, ports, &redis, &env);
        nodes[n].wait_ready();
        for _ in 0..20 {
            pump(&mut callers, Duration::from_millis(50));
            for c in &mut callers {
                c.follow(entry);
            }
        }
    }
    let end = Instant::now();
    pump(&mut callers, Duration::from_secs(3));
    // In the call: connected, and (a listener) its talker's tone in nearly every frame since.
    let in_call = |c: &Caller| {
        let frames = tone_share(&c.client, c.freq, end);
        !c.client.closed && c.client.connected && (c.talker || frames >= 0.9)
    };
    let lost: Vec<&str> = callers.iter().filter(|c| !in_call(c)).map(|c| c.identity.as_str()).collect();
    for c in callers.iter().filter(|c| !in_call(c)) {
        eprintln!(
            "{}: closed {} connected {} rejoins {} frames with the tone {:.2}",
            c.identity,
            c.client.closed,
            c.client.connected,
            c.rejoins,
            tone_share(&c.client, c.freq, end)
        );
    }
    assert!(lost.is_empty(), "lost their call: {lost:?}");
    // Each room is on one node, with its identities, once each.
    for r in 0..rooms {
        let room = format!("roll-{r}");
        let path = format!("/v1/rooms/{room}");
        let (resp, _) = send(nodes[0].api, &admin, "GET", &path, "");
        assert_eq!(resp.status, 200, "{}", resp.body);
        let owner = nodes.iter().find(|n| json(&resp)["room"]["node"] == n.id.as_str()).expect("held by a node");
        let (resp, _) = send(owner.api, &admin, "GET", &path, "");
        let mut who: Vec<String> = json(&resp)["participants"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["identity"].as_str().map(str::to_owned))
            .collect();
        who.sort();
        let mut want: Vec<String> = (0..size).map(|k| format!("{room}-p{k}")).collect();
        want.sort();
        assert_eq!(who, want, "{room}: {}", resp.body);
    }
    // The gaps listeners heard in their talker, one per rejoin.
    let mut gaps: Vec<Duration> = Vec::new();
    for c in callers.iter().filter(|c| !c.talker) {
        let calls: Vec<&ToneClient> = c.old.iter().chain(std::iter::once(&c.client)).collect();
        for pair in calls.windows(2) {
            gaps.push(gap(pair[0], pair[1], c.freq, started));
        }
    }
    gaps.sort();
    let rejoins: usize = callers.iter().map(|c| c.rejoins).sum();
    let at = |q: f64| gaps.get(((gaps.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or_default();
    eprintln!(
        "rolling restart of 3 nodes in {:?}: {} callers, {rejoins} rejoins, 0 lost; listener gaps p50 {:?}, p95 {:?}, max {:?}",
        end - started,
        callers.len(),
        at(0.5),
        at(0.95),
        gaps.last().copied().unwrap_or_default(),
    );
    assert!(rejoins >= 3, "rooms moved: {rejoins} rejoins");
    assert!(at(1.0) < Duration::from_secs(5), "every gap under 5 s: {gaps:?}");
}

/// A `tutti load` process (the real binary), stopped (SIGTERM, then
/// killed) when dropped; it writes its JSON report when it stops.
struct LoadRun {
    child: Option<std::process::Child>,
    report: std::path::PathBuf,
    out: std::path::PathBuf,
}

impl LoadRun {
    /// `tutti load` into `rooms` rooms `<base>-<i>` of `size` clients
    /// through `api`, with `token` (`TUTTI_TOKEN`), until stopped; `extra` flags.
    fn start(
        bin: &std::path::Path,
        api: SocketAddr,
        token: &str,
        base: &str,
        rooms: usize,
        size: usize,
        extra: &[&str],
    ) -> Self {
        let dir = common::cluster::temp_dir("load");
        let (report, out) = (dir.join(format!("{base}.json")), dir.join(format!("{base}.txt")));
        let child = std::process::Command::new(bin)
            .args(["load", "--url", &format!("http://{api}"), "--room", base])
            .args(["--rooms", &rooms.to_string(), "-n", &(rooms * size).to_string()])
            // Until stopped (bounded: 10 min), joins 20 ms apart, summaries every 5 s.
            .args(["--life", "600", "--cint", "20", "--sint", "5000", "--warmup", "1"])
            .args(["--threads", if rooms * size >= 100 { "2" } else { "1" }])
            // ROLLING_TALKERS: the talkers' share (a room nobody talks in gets a
            // DTX frame every 400 ms, so its gaps are known to within that).
            .args(["--talkers", &std::env::var("ROLLING_TALKERS").unwrap_or_else(|_| "0.3".into())])
            .args(["--probes", "1", "--probe-listeners", "2", "--details", "0"])
            .args(["--report", report.to_str().unwrap()])
            .args(extra)
            .env("TUTTI_TOKEN", token)
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("tutti load starts");
        Self { child: Some(child), report, out }
    }

    /// Stops it (SIGTERM: it reports and leaves) and returns its JSON report.
    fn stop(&mut self) -> serde_json::Value {
        let mut child = self.child.take().unwrap();
        kill(nix::unistd::Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "tutti load still runs 60 s after SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        };
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        eprintln!("---- tutti load ({status}) ----\n{text}");
        serde_json::from_str(&std::fs::read_to_string(&self.report).expect("the JSON report")).expect("JSON")
    }
}

impl Drop for LoadRun {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `(identity, name)` of every participant of `room`, asked of the node
/// that holds it (found through `entry`); `None` while no node answers for it.
fn members(entry: SocketAddr, nodes: &[Node], admin: &str, room: &str) -> Option<Vec<(String, String)>> {
    let path = format!("/v1/rooms/{room}");
    let get = |at: SocketAddr, who: &Requester<'_>, path: &str| request_as(at, who, "GET", path, None, b"").ok();
    // Any node answers (a 307 to the owner, with a ticket); the owner lists the participants.
    let mut r = get(entry, &Requester::token(admin), &path)?;
    if r.status == 307 {
        let (at, p) = tutti_client::split_location(r.header("location")?)?;
        r = get(at, &Requester::default(), &p)?;
    }
    let v: serde_json::Value = serde_json::from_str(&r.body).ok()?;
    let owner = nodes.iter().find(|n| v["room"]["node"] == n.id.as_str())?;
    let r = get(owner.api, &Requester::token(admin), &path)?;
    let v: serde_json::Value = serde_json::from_str(&r.body).ok().filter(|_| r.status == 200)?;
    let mut who: Vec<(String, String)> = v["participants"]
        .as_array()?
        .iter()
        .map(|p| (p["identity"].as_str().unwrap_or("").to_owned(), p["name"].as_str().unwrap_or("").to_owned()))
        .collect();
    who.sort();
    Some(who)
}

/// Waits (bounded by `within`) until each room `<base>-<r>` holds its
/// clients: `load-<i>` for every client `i` the report's join order puts
/// there, once each, with the admin's identity. Returns the rooms' lists.
fn until_every_call_is_in(
    entry: SocketAddr,
    nodes: &[Node],
    admin: &str,
    fleets: &[(&str, usize, usize)],
    within: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + within;
    loop {
        let mut wrong = Vec::new();
        for &(base, rooms, size) in fleets {
            // Joins go round-robin over equal rooms: client i is in room i mod rooms.
            for r in 0..rooms {
                let room = format!("{base}-{r}");
                let want: Vec<(String, String)> =
                    (0..size).map(|k| ("ops".to_owned(), format!("load-{}", k * rooms + r))).collect();
                let mut want = want;
                want.sort();
                match members(entry, nodes, admin, &room) {
                    Some(who) if who == want => {}
                    got => wrong.push(format!("{room}: {got:?} (want {want:?})")),
                }
            }
        }
        if wrong.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(wrong.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn a_rolling_restart_of_three_nodes_under_tutti_load_keeps_every_call() {
    // The binary of the nodes and of `tutti load`: this build's, or
    // ROLLING_BIN (e.g. target/release/tutti) for a measurement, with
    // ROLLING_ROOMS rooms of ROLLING_ROOM_SIZE over the room WebSocket and
    // ROLLING_REST_ROOMS more joined over REST (no socket), ROLLING_TALKERS
    // of them talking.
    let bin = std::env::var_os("ROLLING_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_tutti").into());
    let setting = |name: &str, default: usize| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let (rooms, size, rest_rooms) =
        (setting("ROLLING_ROOMS", 2), setting("ROLLING_ROOM_SIZE", 4).max(2), setting("ROLLING_REST_ROOMS", 1));
    let redis = Redis::start();
    let ports = shared_ports();
    let env = [
        ("TUTTI_DRAIN_SECONDS", "20"),
        ("TUTTI_CLUSTER_CAPACITY", "1000"),
        // Every simulated client comes from 127.0.0.1.
        ("TUTTI_LIMITS_MAX_CONNECTIONS_PER_ADDRESS", "10000"),
    ];
    let start = |n: usize| Node::start_bin(&bin, n as u8 + 2, ports, &redis, &env);
    let mut nodes: Vec<Node> = (0..3).map(start).collect();
    for n in &nodes {
        n.wait_ready();
    }
    let auth = Auth::new(SECRET).expect("secret");
    let admin = auth.mint(&Grant::admin("ops"), Duration::from_secs(3600), unix_now()).unwrap();
    let entry = nodes[0].api;
    let mut fleets = vec![("roll-ws", rooms, size)];
    let mut loads = vec![LoadRun::start(&bin, entry, &admin, "roll-ws", rooms, size, &[])];
    if rest_rooms > 0 {
        fleets.push(("roll-rest", rest_rooms, size));
        loads.push(LoadRun::start(&bin, entry, &admin, "roll-rest", rest_rooms, size, &["--no-ws"]));
    }
    let clients: usize = fleets.iter().map(|(_, r, s)| r * s).sum();
    until_every_call_is_in(entry, &nodes, &admin, &fleets, Duration::from_secs(30 + clients as u64 / 5))
        .unwrap_or_else(|e| panic!("the fleet did not join:\n{e}"));
    std::thread::sleep(Duration::from_secs(2));

    // Each node in turn: SIGTERM, its exit (its rooms handed over, its
    // clients moved), the new version at the same address.
    let started = Instant::now();
    for n in 0..nodes.len() {
        let child = nodes[n].child.as_mut().unwrap();
        kill(nix::unistd::Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
        let signalled = Instant::now();
        exits_cleanly(child, signalled, Duration::from_secs(30), "SIGTERM", pause);
        eprintln!("{} drained and exited in {:?}", nodes[n].id, signalled.elapsed());
        nodes[n].child = None;
        nodes[n] = start(n);
        nodes[n].wait_ready();
        // The next node goes once every call is back in.
        until_every_call_is_in(nodes[(n + 1) % 3].api, &nodes, &admin, &fleets, Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("after {} restarted, calls are missing:\n{e}", nodes[n].id));
    }
    eprintln!("rolling restart of 3 nodes in {:?}", started.elapsed());
    // Every client in its call, with the same identity, at the end: and hearing it.
    std::thread::sleep(Duration::from_secs(3));
    until_every_call_is_in(entry, &nodes, &admin, &fleets, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("at the end, calls are missing:\n{e}"));

    let mut gaps_max = 0.0f64;
    for ((base, r, s), load) in fleets.iter().zip(&mut loads) {
        let report = load.stop();
        let sum = &report["summary"];
        let h = &sum["handover"];
        eprintln!("{base}: {h}");
        let n = (r * s) as u64;
        assert_eq!(sum["connected"].as_u64(), Some(n), "{base}: every client connected at the end: {sum}");
        assert_eq!(h["lost_calls"], 0, "{base}: no call lost: {h}");
        assert_eq!(h["rejoining"], 0, "{base}: nobody still rejoining: {h}");
        // Three restarts: each room moved at least twice (off its node, and off the next one's).
        let moves = h["moves"].as_u64().unwrap();
        assert!(moves >= n, "{base}: every client moved at least once: {h}");
        assert_eq!(h["rejoins"].as_u64(), Some(moves), "{base}: every move rejoined: {h}");
        // A gap per move (moves in a row with no audio between them, one),
        // at least one per client that moved.
        let gaps = h["gaps"].as_u64().unwrap();
        assert!(gaps <= moves && gaps >= h["clients_moved"].as_u64().unwrap(), "{base}: gaps measured: {h}");
        // A WebSocket client follows `moved` with its ticket, as the page
        // does; a REST client's call is closed, and it rejoins with its token.
        let tickets = h["ticket_rejoins"].as_u64().unwrap();
        if *base == "roll-ws" {
            assert!(tickets > 0, "{base}: the moved tickets were used: {h}");
        } else {
            assert_eq!(tickets, 0, "{base}: {h}");
        }
        for q in ["gap_p50_ms", "gap_p95_ms", "gap_max_ms"] {
            let v = h[q].as_f64().unwrap_or_else(|| panic!("{base}: no {q}: {h}"));
            assert!((0.0..5_000.0).contains(&v), "{base}: {q} = {v} ms: {h}");
        }
        gaps_max = gaps_max.max(h["gap_max_ms"].as_f64().unwrap());
        // A move is not loss: the clients' streams were rebased across it.
        let loss = sum["loss_total_percent"].as_f64().unwrap();
        assert!(loss < 5.0, "{base}: loss {loss} % across the moves: {sum}");
    }
    eprintln!("rolling restart under tutti load: {clients} clients, 0 lost calls, longest gap {gaps_max:.0} ms");
}

/// `tutti load`'s rejoins are bounded: a client whose call ends and whose
/// room is gone (deleted: there is nothing to rejoin) tries
/// `rejoin_attempts` times, then counts as a lost call, with the reason.
#[test]
fn a_load_client_that_cannot_rejoin_counts_as_a_lost_call() {
    let (rt, server, token) = common::loopback_server();
    let api = server.http_addr();
    let mut load = tutti_load::LoadConfig::new(api, 4);
    load.room = "gone".into();
    load.token = Some(token.clone());
    load.join_interval = Duration::from_millis(10);
    load.warmup = Duration::from_millis(500);
    load.life = Some(Duration::from_secs(6));
    load.probe_talkers = 0;
    load.probe_listeners = 0;
    load.rejoin_attempts = 2;
    let run = std::thread::spawn(move || {
        tutti_load::run(&load, &std::sync::atomic::AtomicBool::new(false), &mut |_| {}).expect("the run completes")
    });
    // Once all four are in, the room goes: their calls end, and nothing can be rejoined.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = request_as(api, &Requester::token(&token), "GET", "/v1/rooms/gone", None, b"").unwrap();
        if r.status == 200 && json(&r)["participants"].as_array().is_some_and(|p| p.len() == 4) {
            break;
        }
        assert!(Instant::now() < deadline, "the four joined: {}", r.body);
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(1));
    let r = request_as(api, &Requester::token(&token), "DELETE", "/v1/rooms/gone", None, b"").unwrap();
    assert_eq!(r.status, 204, "{}", r.body);
    let report = run.join().unwrap();
    let h = &report.summary.handover;
    eprintln!("{}", h.to_text());
    assert_eq!((h.moves, h.rejoins, h.lost_calls, h.rejoining), (4, 0, 4, 0), "{}", report.summary.to_text());
    for c in &report.clients {
        assert!(c.figures.lost_call, "client {}", c.figures.index);
        let why = c.figures.error.as_deref().unwrap_or("");
        assert!(why.contains("2 rejoin tries failed"), "client {}: {why}", c.figures.index);
    }
    rt.block_on(server.shutdown());
}
