//! Three `tutti serve` processes on 127.0.0.2, .3 and .4 (same ports) and
//! a real `redis-server` (Debian's, installed when missing), as an operator
//! runs a cluster on one machine. One test, in phases, since the nodes take
//! a while to start: rooms created through one node spread over all three;
//! a WHIP join through a non-owner follows the 307 and hears the room (real
//! WebRTC, tones); eight concurrent creates of one room give one owner; a
//! node frozen (SIGSTOP) past its TTL loses its room and, resumed, closes
//! its copy (fencing); a WebSocket on a non-owner says `moved`, then
//! relays the room's events from the owner (`joined`, `left`);
//! `kill -9` of the owner mid-call: clients that rejoin through the other
//! nodes hear each other again within seconds; Redis killed mid-call: the
//! call keeps its audio, a cross-node join gets 503 with Retry-After, and
//! all recovers when Redis restarts. And a cluster that trusts no one:
//! Redis with a password, a node record written by hand redirects nobody,
//! redirect tickets carry the least grant for one request, the `moved`
//! message carries a single-use ticket rather than the token, and a relay
//! socket refuses a 2 MiB message as a local one does.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use common::cluster::{Node, Redis, SECRET, holder, join, json, send, shared_ports, until_they_hear};
use tutti_client::{Requester, ToneClient, request_as, run_until, split_location};
use tutti_server::auth::{Auth, Grant, unix_now};

/// One cluster at a time: each test runs three nodes and a Redis.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn three_nodes_place_redirect_fail_over_and_ride_out_a_redis_outage() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let test_start = Instant::now();
    let mut redis = Redis::start();
    let ports = shared_ports();
    let mut nodes: Vec<Node> = (2..=4).map(|n| Node::start(n, ports, &redis)).collect();
    for n in &nodes {
        n.wait_ready();
    }
    let auth = Auth::new(SECRET).expect("secret");
    let admin = auth.mint(&Grant::admin("test"), Duration::from_secs(600), unix_now()).expect("token");
    let apis: Vec<SocketAddr> = nodes.iter().map(|n| n.api).collect();
    let node_of = |addr: SocketAddr| nodes.iter().position(|n| n.api == addr).expect("a node's address");

    // 1. Rooms created through one node spread over all three.
    let mut placed = Vec::new();
    for i in 0..12 {
        let (r, at) = send(apis[0], &admin, "POST", "/v1/rooms", &format!(r#"{{"id":"spread-{i}"}}"#));
        assert_eq!(r.status, 201, "create spread-{i}: {}", r.body);
        assert_eq!(json(&r)["node"].as_str(), Some(nodes[node_of(at)].id.as_str()), "the answer names its node");
        placed.push(node_of(at));
    }
    let used: BTreeSet<usize> = placed.iter().copied().collect();
    assert_eq!(used.len(), 3, "12 rooms spread over the three nodes: {placed:?}");
    // Any node lists every room and says which node holds it.
    let r = request_as(apis[1], &Requester::token(&admin), "GET", "/v1/rooms", None, b"").expect("list");
    assert_eq!(r.status, 200, "{}", r.body);
    let listed = json(&r);
    for (i, &n) in placed.iter().enumerate() {
        let entry = listed.as_array().unwrap().iter().find(|e| e["id"] == format!("spread-{i}"));
        let entry = entry.unwrap_or_else(|| panic!("spread-{i} listed on node 1: {listed}"));
        assert_eq!(entry["node"].as_str(), Some(nodes[n].id.as_str()), "spread-{i}: {entry}");
        assert_eq!(holder(apis[(n + 1) % 3], &admin, &format!("spread-{i}")).as_deref(), Some(nodes[n].id.as_str()));
    }

    // Each node exports the cluster's figures.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let m = request_as(nodes[0].metrics, &Requester::default(), "GET", "/metrics", None, b"").expect("metrics");
        let value = |name: &str| {
            m.body.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse::<f64>().ok())
        };
        let (seen, redirects, up) =
            (value("tutti_cluster_nodes"), value("tutti_cluster_redirects_total"), value("tutti_cluster_redis_up"));
        let expected = placed.iter().filter(|&&n| n != 0).count() as f64;
        if seen == Some(3.0) && redirects == Some(expected) && up == Some(1.0) {
            break;
        }
        assert!(Instant::now() < deadline, "nodes {seen:?}, redirects {redirects:?} (want {expected}), up {up:?}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // 2. Eight concurrent creates of one room, through all three nodes: one owner.
    let results: Vec<(u16, SocketAddr)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let (api, admin) = (apis[i % 3], admin.clone());
                s.spawn(move || {
                    let (r, at) = send(api, &admin, "POST", "/v1/rooms", r#"{"id":"race"}"#);
                    (r.status, at)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let created: Vec<_> = results.iter().filter(|(s, _)| *s == 201).collect();
    assert_eq!(created.len(), 1, "exactly one create wins: {results:?}");
    assert!(results.iter().all(|(s, _)| *s == 201 || *s == 409), "the others find it exists: {results:?}");
    let race_owner = nodes[node_of(created[0].1)].id.clone();
    for &api in &apis {
        assert_eq!(holder(api, &admin, "race").as_deref(), Some(race_owner.as_str()), "every node agrees");
    }

    // 3. A WHIP join through a non-owner follows the 307 and hears the room.
    // Created with its own config (kept in Redis: a fail-over hosts it with it, not the defaults).
    let call_config = r#"{"id":"call","max_participants":40,"max_speakers":3}"#;
    let (r, at) = send(apis[0], &admin, "POST", "/v1/rooms", call_config);
    assert_eq!(r.status, 201, "{}", r.body);
    let owner = node_of(at);
    let other = (owner + 1) % 3;
    // Join time, through a redirect and direct (alternated, five each; these clients leave at once).
    let (mut redirected, mut direct) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        redirected.push(join(apis[other], &admin, "call", 300.0, Duration::ZERO).2);
        direct.push(join(apis[owner], &admin, "call", 300.0, Duration::ZERO).2);
    }
    redirected.sort();
    direct.sort();
    eprintln!("join time (median of 5): through a redirect {:?}, direct {:?}", redirected[2], direct[2]);
    eprintln!("  all: redirected {redirected:?}, direct {direct:?}");
    let (mut a, hops_a, _) = join(apis[other], &admin, "call", 440.0, Duration::ZERO);
    let (mut b, hops_b, _) = join(apis[owner], &admin, "call", 660.0, Duration::ZERO);
    assert_eq!((hops_a, hops_b), (1, 0), "one redirect through the non-owner, none at the owner");
    assert!(until_they_hear(&mut [&mut a, &mut b], Duration::from_secs(15)), "the two tones hear each other");
    // A WebSocket on a non-owner says where the room is, and closes.
    let stream = TcpStream::connect(apis[other]).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    let (mut ws, _) =
        tungstenite::client(format!("ws://{}/v1/rooms/call/ws?token={admin}", apis[other]), stream).expect("WebSocket");
    let moved = match ws.read().expect("a message") {
        tungstenite::Message::Text(t) => serde_json::from_str::<serde_json::Value>(t.as_str()).expect("JSON"),
        m => panic!("not text: {m:?}"),
    };
    assert_eq!(moved["type"], "moved", "{moved}");
    assert_eq!(moved["api_url"].as_str(), Some(format!("http://{}", apis[owner]).as_str()), "{moved}");
    // … and stays open, relaying the room's events from the owner: a
    // participant joining and leaving there is heard of here.
    let (mut watcher, _, _) = join(apis[owner], &admin, "call", 1300.0, Duration::ZERO);
    let id = watcher.id;
    let mut next_event = |kind: &str| {
        for _ in 0..200 {
            let msg = match ws.read() {
                Ok(tungstenite::Message::Text(t)) => {
                    serde_json::from_str::<serde_json::Value>(t.as_str()).expect("JSON")
                }
                Ok(tungstenite::Message::Close(f)) => panic!("relayed socket closed: {f:?}"),
                Ok(_) => continue,
                Err(e) => panic!("no '{kind}' event for participant {id} relayed within 5 s: {e}"),
            };
            let events = msg["events"].as_array().cloned().unwrap_or_default();
            if msg["type"] == "events" && events.iter().any(|e| e["type"] == kind && e["id"] == id) {
                return;
            }
        }
        panic!("no '{kind}' event among 200 messages");
    };
    next_event("joined");
    let left = request_as(apis[owner], &Requester::token(&admin), "DELETE", &watcher.location, None, b"");
    assert!(left.expect("API").status < 300, "the participant leaves");
    next_event("left");
    watcher.close();
    ws.send(tungstenite::Message::text(r#"{"type":"mute","muted":true}"#)).expect("send");
    let refused = loop {
        match ws.read().expect("an answer") {
            tungstenite::Message::Text(t) => {
                let v = serde_json::from_str::<serde_json::Value>(t.as_str()).expect("JSON");
                if v["type"] == "error" {
                    break v;
                }
            }
            m => panic!("not text: {m:?}"),
        }
    };
    assert_eq!(refused["code"], "room_elsewhere", "{refused}");
    drop(ws);
    // The room's other routes follow it too: a 307 from the non-owner, then
    // the owner answers (its outputs, a participant's PATCH).
    for (path, status) in [("/v1/rooms/call/recording", 200), ("/v1/rooms/call/rtp_out", 404)] {
        let r = request_as(apis[other], &Requester::token(&admin), "GET", path, None, b"").expect("API");
        assert_eq!((r.status, r.code().as_str()), (307, "room_elsewhere"), "{path}: {}", r.body);
        let (r, at) = send(apis[other], &admin, "GET", path, "");
        assert_eq!((r.status, at), (status, apis[owner]), "{path}: {}", r.body);
    }
    let (r, at) = send(apis[other], &admin, "PATCH", &b.location, r#"{"muted":true}"#);
    assert!(r.status < 300 && at == apis[owner], "PATCH {}: {} {}", b.location, r.status, r.body);
    // A redirect's ticket is single-use.
    let (_, offer) = ToneClient::offer(880.0).expect("offer");
    let path = "/v1/rooms/call/participants";
    let r = request_as(apis[other], &Requester::token(&admin), "POST", path, Some("application/sdp"), offer.as_bytes())
        .expect("API");
    assert_eq!(r.status, 307, "{}", r.body);
    let (to, with_ticket) = split_location(r.header("location").unwrap()).unwrap();
    assert_eq!(to, apis[owner]);
    let first = request_as(to, &Requester::default(), "POST", &with_ticket, Some("application/sdp"), offer.as_bytes());
    assert_eq!(first.expect("API").status, 201, "the ticket stands in for the token");
    let again = request_as(to, &Requester::default(), "POST", &with_ticket, Some("application/sdp"), offer.as_bytes());
    let again = again.expect("API");
    assert_eq!((again.status, again.code().as_str()), (401, "bad_ticket"), "replayed: {}", again.body);

    // Fencing: a node frozen past its TTL (SIGSTOP) loses its room to the
    // next join elsewhere; resumed, it finds the lease taken and closes its copy.
    let (r, at) = send(apis[1], &admin, "POST", "/v1/rooms", r#"{"id":"fence"}"#);
    assert_eq!(r.status, 201, "{}", r.body);
    let frozen = node_of(at);
    let (e, _, _) = join(apis[frozen], &admin, "fence", 500.0, Duration::ZERO);
    let signal = |sig: &str, n: usize| {
        let pid = nodes[n].child.as_ref().expect("running").id().to_string();
        assert!(Command::new("kill").args([sig, &pid]).status().expect("kill").success());
    };
    signal("-STOP", frozen);
    std::thread::sleep(Duration::from_millis(2500));
    let via = (frozen + 1) % 3;
    let (f, _, _) = join(apis[via], &admin, "fence", 600.0, Duration::from_secs(10));
    let taker = holder(apis[via], &admin, "fence").expect("fence is held");
    assert_ne!(taker, nodes[frozen].id, "placed again on a live node");
    signal("-CONT", frozen);
    let deadline = Instant::now() + Duration::from_secs(10);
    while holder(apis[frozen], &admin, "fence").as_deref() != Some(taker.as_str()) {
        assert!(Instant::now() < deadline, "the resumed node closes its fenced copy within 10 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop((e, f));

    // 4. kill -9 of the owner mid-call: rejoining through the others works within seconds.
    let killed_at = Instant::now();
    nodes[owner].kill9();
    drop((a, b));
    let survivors: Vec<usize> = (0..3).filter(|&n| n != owner).collect();
    let (mut a, _, _) = join(apis[survivors[0]], &admin, "call", 440.0, Duration::from_secs(15));
    let (mut b, _, _) = join(apis[survivors[1]], &admin, "call", 660.0, Duration::from_secs(15));
    assert!(until_they_hear(&mut [&mut a, &mut b], Duration::from_secs(15)), "heard again after fail-over");
    let failover = killed_at.elapsed();
    eprintln!("kill -9 of the owner to both clients hearing each other again: {failover:?}");
    assert!(failover < Duration::from_secs(20), "fail-over took {failover:?}");
    let new_owner = holder(apis[survivors[0]], &admin, "call").expect("call is held");
    let host = survivors.iter().copied().find(|&n| nodes[n].id == new_owner).expect("a survivor holds it");
    let r = request_as(apis[host], &Requester::token(&admin), "GET", "/v1/rooms/call", None, b"").expect("API");
    let placed_again = json(&r)["room"].clone();
    assert_eq!(
        (placed_again["max_participants"].as_u64(), placed_again["max_speakers"].as_u64()),
        (Some(40), Some(3)),
        "placed again with the config it was created with: {placed_again}"
    );
    let elsewhere = survivors.iter().copied().find(|&n| n != host).expect("two survivors");

    // 5. Redis killed mid-call: no audio lost, cross-node joins get 503, all recovers.
    redis.kill();
    assert!(until_they_hear(&mut [&mut a, &mut b], Duration::from_secs(5)), "the call keeps its audio without Redis");
    let before = (a.heard.len(), b.heard.len());
    let t = Instant::now();
    run_until(&mut [&mut a, &mut b], t + Duration::from_secs(2), |_| false);
    let frames = (a.heard.len() - before.0, b.heard.len() - before.1);
    assert!(frames.0 >= 90 && frames.1 >= 90, "about 100 frames in 2 s without Redis: {frames:?}");
    let (_, offer) = ToneClient::offer(880.0).expect("offer");
    let r =
        request_as(apis[elsewhere], &Requester::token(&admin), "POST", path, Some("application/sdp"), offer.as_bytes())
            .expect("API");
    assert_eq!((r.status, r.code().as_str()), (503, "cluster_unavailable"), "{}", r.body);
    assert!(r.header("retry-after").is_some_and(|v| v.parse::<u32>().is_ok()), "503 says when to retry");
    // A join to the room where it is hosted needs no Redis.
    let (mut c, hops, _) = join(apis[host], &admin, "call", 880.0, Duration::ZERO);
    assert_eq!(hops, 0);
    redis.spawn();
    // The owner writes its lease back; then a join through the other node is redirected again.
    let deadline = Instant::now() + Duration::from_secs(15);
    while holder(apis[elsewhere], &admin, "call").as_deref() != Some(new_owner.as_str()) {
        assert!(Instant::now() < deadline, "the directory knows the call's owner again within 15 s");
        run_until(&mut [&mut a, &mut b, &mut c], Instant::now() + Duration::from_millis(200), |_| false);
    }
    let (mut d, hops, _) = join(apis[elsewhere], &admin, "call", 1100.0, Duration::from_secs(5));
    assert_eq!(hops, 1, "redirected to the owner again");
    assert!(
        until_they_hear(&mut [&mut a, &mut d], Duration::from_secs(15)),
        "a new join hears the call after Redis returns"
    );
    drop((b, c));

    // SIGTERM: the node leaves the directory (the other one sees it go).
    let pid = nodes[elsewhere].child.as_ref().expect("running").id();
    let status = Command::new("kill").args(["-TERM", &pid.to_string()]).status().expect("kill");
    assert!(status.success());
    let exited = nodes[elsewhere].child.as_mut().expect("running").wait().expect("wait");
    assert!(exited.success(), "exits cleanly on SIGTERM: {exited}");
    nodes[elsewhere].child = None;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let m = request_as(nodes[host].metrics, &Requester::default(), "GET", "/metrics", None, b"").expect("metrics");
        if m.body.lines().any(|l| l == "tutti_cluster_nodes 1") {
            break;
        }
        assert!(Instant::now() < deadline, "the survivor sees one node within 5 s");
        run_until(&mut [&mut a, &mut d], Instant::now() + Duration::from_millis(200), |_| false);
    }
    // The call on the survivor never noticed.
    assert!(until_they_hear(&mut [&mut a, &mut d], Duration::from_secs(5)), "the call goes on");
    let took = test_start.elapsed();
    eprintln!("cluster test took {took:?}");
    assert!(took < Duration::from_secs(90), "bounded: {took:?}");
}

/// `tutti load` given one node's URL: rooms are created and joined through
/// that node, following the 307s (REST) and `moved` (WebSocket) to the
/// owners; the report's per-node figures add up to the run's, every node
/// got rooms, and the audio is fine on each.
#[test]
fn a_load_run_through_one_node_spreads_over_all_three() {
    use tutti_load::{CpuSource, LoadConfig, RoomLayout, run};
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let redis = Redis::start();
    let ports = shared_ports();
    let nodes: Vec<Node> = (2..=4).map(|n| Node::start(n, ports, &redis)).collect();
    for n in &nodes {
        n.wait_ready();
    }
    let auth = Auth::new(SECRET).expect("secret");
    let admin = auth.mint(&Grant::admin("test"), Duration::from_secs(600), unix_now()).expect("token");

    let mut load = LoadConfig::new(nodes[0].api, 30);
    load.room = "spread".into();
    load.rooms = RoomLayout::Count(10);
    load.websocket = true;
    load.token = Some(admin);
    load.join_interval = Duration::from_millis(20);
    load.warmup = Duration::from_secs(1);
    load.window = Some(Duration::from_secs(4));
    load.life = Some(Duration::from_secs(40));
    load.probe_talkers = 1;
    load.probe_listeners = 1;
    load.talkers = 0.3;
    load.server_cpu = CpuSource::Unknown;
    let report = run(&load, &AtomicBool::new(false), &mut |_| {}).expect("the run completes");
    let s = &report.summary;
    let table = tutti_load::nodes_text(&report.nodes);
    println!("{}\n{table}", s.to_text());
    assert_eq!((s.connected, s.join_failed), (30, 0), "every client joined and connected\n{table}");
    assert_eq!(report.nodes.len(), 3, "three nodes answered joins\n{table}");
    for (n, node) in report.nodes.iter().zip(&nodes) {
        assert_eq!(n.api, node.api.to_string(), "in address order");
        assert!(n.rooms > 0 && n.participants > 0, "every node holds rooms: {table}");
        assert_eq!(n.node.as_deref(), Some(node.id.as_str()), "named by its API");
        assert_eq!(n.connected, n.participants, "{table}");
        assert!(n.pid.is_some() && n.cpu_cores.is_some_and(|c| c > 0.0), "a local node's CPU is read: {table}");
        assert!(n.loss_percent <= 2.0 && n.mos_p5 >= 1.0, "audio on {}: {table}", n.api);
        // Node .2 is the one asked: its joins are direct, the others' redirected.
        let (direct, redirected) = (n.direct.count, n.redirected.count);
        if n.api == nodes[0].api.to_string() {
            assert_eq!((direct, redirected), (n.participants, 0), "{table}");
        } else {
            assert_eq!((direct, redirected), (0, n.participants), "{table}");
            assert!(n.redirected.p50_ms > 0.0);
        }
    }
    assert_eq!(report.nodes.iter().map(|n| n.rooms).sum::<usize>(), 10, "{table}");
    assert_eq!(report.nodes.iter().map(|n| n.participants).sum::<usize>(), 30, "{table}");
    assert!(s.loss_total_percent <= 2.0, "{}", s.to_text());
    let json = serde_json::to_string(&report).expect("JSON");
    assert!(json.contains("\"redirected\"") && json.contains("\"cpu_cores\""));
}

/// The JSON payload of a ticket or token (`payload.signature` or `header.payload.signature`).
fn payload(credential: &str, index: usize) -> serde_json::Value {
    use base64::Engine as _;
    let part = credential.split('.').nth(index).expect("a dotted credential");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(part).expect("base64url");
    serde_json::from_slice(&bytes).expect("JSON")
}

/// The `ticket` query parameter of a Location.
fn ticket_of(location: &str) -> String {
    let (_, query) = location.split_once('?').expect("a query");
    let t = query.split('&').find_map(|p| p.strip_prefix("ticket=")).expect("a ticket");
    t.to_owned()
}

/// Opens `ws://api/v1/rooms/{room}/ws?token=…`: the socket, or the HTTP status that refused it.
fn open_ws(api: SocketAddr, room: &str, token: &str) -> Result<tungstenite::WebSocket<TcpStream>, u16> {
    let stream = TcpStream::connect(api).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    match tungstenite::client(format!("ws://{api}/v1/rooms/{room}/ws?token={token}"), stream) {
        Ok((ws, _)) => Ok(ws),
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(r))) => Err(r.status().as_u16()),
        Err(e) => panic!("WebSocket handshake: {e}"),
    }
}

fn read_json(ws: &mut tungstenite::WebSocket<TcpStream>) -> serde_json::Value {
    match ws.read().expect("a message") {
        tungstenite::Message::Text(t) => serde_json::from_str(t.as_str()).expect("JSON"),
        m => panic!("not text: {m:?}"),
    }
}

/// Two nodes on a Redis with a password: what a Redis writer, a stolen
/// ticket or a relayed socket can no longer do.
#[test]
fn a_cluster_that_trusts_no_one() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let redis = Redis::with_password("a redis password from a secret");
    let ports = shared_ports();
    let nodes: Vec<Node> = (2..=3).map(|n| Node::start(n, ports, &redis)).collect();
    for n in &nodes {
        n.wait_ready();
    }
    let auth = Auth::new(SECRET).expect("secret");
    let admin = auth.mint(&Grant::admin("ops"), Duration::from_secs(600), unix_now()).expect("token");
    let apis: Vec<SocketAddr> = nodes.iter().map(|n| n.api).collect();

    // 0. A node with a wrong Redis password does not start, and says why.
    let free = |ip: &str| TcpListener::bind((ip, 0)).unwrap().local_addr().unwrap().port();
    let out = Command::new(env!("CARGO_BIN_EXE_tutti"))
        .args(["serve", "--http", &format!("127.0.0.5:{}", free("127.0.0.5"))])
        .args([
            "--media",
            &format!("127.0.0.5:{}", UdpSocket::bind("127.0.0.5:0").unwrap().local_addr().unwrap().port()),
        ])
        .args(["--metrics", &format!("127.0.0.5:{}", free("127.0.0.5"))])
        .env("TUTTI_AUTH_SECRET", SECRET)
        .env("TUTTI_CLUSTER_REDIS_URL", format!("redis://127.0.0.1:{}/0", redis.port))
        .env("TUTTI_CLUSTER_REDIS_PASSWORD", "not the password")
        .env("TUTTI_CLUSTER_API_URL", "http://127.0.0.5:1")
        .env("TUTTI_CLUSTER_MEDIA_ADDR", "127.0.0.5:1")
        .stdin(Stdio::null())
        .output()
        .expect("tutti serve runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a node with a wrong Redis password exits");
    assert!(stderr.contains("Redis refused this node") && stderr.contains("redis_password"), "{stderr}");

    // 1. A node record and a lease written by hand: nobody is sent there.
    let evil = "http://127.0.0.9:9";
    let ttl = "600000";
    let record = [
        "HSET",
        "tutti:node:evil",
        "api_url",
        evil,
        "media_addr",
        "127.0.0.9:9",
        "state",
        "serving",
        "participants",
        "0",
        "capacity",
        "1000",
        "cpu",
        "0",
        "tick_p99_seconds",
        "0",
        "placements",
        "0",
    ];
    redis.cli(&record);
    redis.cli(&["PEXPIRE", "tutti:node:evil", ttl]);
    redis.cli(&["SADD", "tutti:nodes", "evil"]);
    redis.cli(&["SET", "tutti:lease:victim", "evil:7", "PX", ttl]);
    // As an admin's create leaves it, but with a config the writer cannot
    // sign: it does not make the room exist for a join (404), which so
    // places nothing and follows no forged lease.
    redis.cli(&["HSET", "tutti:room:victim", "owner", "evil", "epoch", "7", "config", "{}"]);
    redis.cli(&["SADD", "tutti:rooms", "victim"]);
    let (_, offer) = ToneClient::offer(440.0).expect("offer");
    for &api in &apis {
        let whip = request_as(
            api,
            &Requester::token(&admin),
            "POST",
            "/v1/rooms/victim/participants",
            Some("application/sdp"),
            offer.as_bytes(),
        )
        .expect("API");
        assert_ne!(whip.status, 307, "a WHIP join is not redirected to a forged node: {}", whip.body);
        assert!(whip.header("location").is_none_or(|l| !l.contains("127.0.0.9")), "{:?}", whip.header("location"));
        assert_eq!((whip.status, whip.code().as_str()), (404, "room_not_found"), "{}", whip.body);
        let page = open_ws(api, "victim", &admin);
        assert_eq!(page.err(), Some(404), "no WebSocket `moved` to a forged node: no room");
        let get = request_as(api, &Requester::token(&admin), "GET", "/v1/rooms/victim", None, b"").expect("API");
        assert!(!get.body.contains("127.0.0.9"), "the forged URL is not shown: {}", get.body);
        let delete = request_as(api, &Requester::token(&admin), "DELETE", "/v1/rooms/victim", None, b"").expect("API");
        assert_ne!(delete.status, 307, "{}", delete.body);
    }
    // Counted (exported every second).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let m = request_as(nodes[0].metrics, &Requester::default(), "GET", "/metrics", None, b"").expect("metrics");
        let rejected = m.body.lines().find_map(|l| l.strip_prefix("tutti_cluster_node_records_rejected_total "));
        if rejected.and_then(|v| v.parse::<f64>().ok()).is_some_and(|v| v >= 1.0) {
            break;
        }
        assert!(Instant::now() < deadline, "rejected records counted: {rejected:?}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // A room on the second node, created through the first.
    let mut room = None;
    for i in 0..20 {
        let (r, at) = send(apis[0], &admin, "POST", "/v1/rooms", &format!(r#"{{"id":"trust-{i}"}}"#));
        assert_eq!(r.status, 201, "{}", r.body);
        if at == apis[1] {
            room = Some(format!("trust-{i}"));
            break;
        }
    }
    let room = room.expect("one of 20 rooms lands on the second node");

    // 2. An admin's DELETE through the first node: a ticket for that DELETE only, admin for that room only.
    let path = format!("/v1/rooms/{room}");
    let r = request_as(apis[0], &Requester::token(&admin), "DELETE", &path, None, b"").expect("API");
    assert_eq!(r.status, 307, "{}", r.body);
    let ticket = ticket_of(r.header("location").expect("Location"));
    let claims = payload(&ticket, 0);
    assert_eq!((claims["method"].as_str(), claims["path"].as_str()), (Some("DELETE"), Some(path.as_str())), "{claims}");
    assert_eq!(claims["grants"]["room"].as_str(), Some(room.as_str()), "never '*': {claims}");
    assert_eq!(
        (
            claims["grants"]["admin"].as_bool(),
            claims["grants"]["speak"].as_bool(),
            claims["grants"]["listen"].as_bool()
        ),
        (Some(true), Some(false), Some(false)),
        "{claims}"
    );
    let anon = Requester::default();
    for (method, other) in
        [("POST", format!("{path}/recording")), ("PATCH", path.clone()), ("DELETE", format!("{path}/recording"))]
    {
        let r =
            request_as(apis[1], &anon, method, &format!("{other}?ticket={ticket}"), Some("application/json"), b"{}")
                .expect("API");
        assert_eq!(
            (r.status, r.code().as_str()),
            (401, "bad_ticket"),
            "{method} {other} with a DELETE's ticket: {}",
            r.body
        );
    }
    // An admin's WHIP join is redirected with a moderator's grant for that room and request only.
    let join_path = format!("/v1/rooms/{room}/participants");
    let r =
        request_as(apis[0], &Requester::token(&admin), "POST", &join_path, Some("application/sdp"), offer.as_bytes())
            .expect("API");
    assert_eq!(r.status, 307, "{}", r.body);
    let join_claims = payload(&ticket_of(r.header("location").expect("Location")), 0);
    assert_eq!(join_claims["grants"]["admin"].as_bool(), Some(true), "an admin joins as a moderator: {join_claims}");
    assert_eq!(join_claims["grants"]["room"].as_str(), Some(room.as_str()), "that room only: {join_claims}");
    assert_eq!(join_claims["grants"]["listen"].as_bool(), Some(true), "{join_claims}");

    // 3. A page's socket on the first node: `moved` with a single-use ticket, not the token.
    let alice = auth.mint(&Grant::participant("*", "alice"), Duration::from_secs(600), unix_now()).expect("token");
    let alice_exp = payload(&alice, 1)["exp"].as_u64().expect("exp");
    let mut ws = open_ws(apis[0], &room, &alice).expect("a relayed socket");
    let moved = read_json(&mut ws);
    assert_eq!(moved["type"], "moved", "{moved}");
    assert_eq!(moved["api_url"].as_str(), Some(format!("http://{}", apis[1]).as_str()), "{moved}");
    assert!(!moved.to_string().contains(&alice), "the bearer token is not in the message: {moved}");
    let moved_ticket = moved["ticket"].as_str().expect("a ticket").to_owned();
    let enter = format!("/v1/rooms/{room}/enter?ticket={moved_ticket}&name=Alice%20B");
    let r = request_as(apis[1], &anon, "GET", &enter, None, b"").expect("API");
    assert_eq!(r.status, 303, "the owner takes the ticket: {}", r.body);
    let page = r.header("location").expect("Location").to_owned();
    // Naming the node (rooms spread by default: the page's socket stays there).
    assert!(
        page.starts_with("/?name=Alice%20B&node=node-") && page.contains(&format!("&room={room}#token=")),
        "to the page, same origin: {page}"
    );
    let token = page.rsplit_once("token=").expect("a token").1;
    let got = auth.verify(token, unix_now()).expect("a valid token");
    assert_eq!(got, Grant::participant(room.as_str(), "alice"), "this room only, the same identity");
    assert!(payload(token, 1)["exp"].as_u64().expect("exp") <= alice_exp, "not outliving the original");
    let again = request_as(apis[1], &anon, "GET", &enter, None, b"").expect("API");
    assert_eq!((again.status, again.code().as_str()), (401, "bad_ticket"), "single use: {}", again.body);

    // 3b. What a Redis writer publishes on the room's channel is checked
    // before a relayed socket gets it: a forged `moved` (alone or inside a
    // batch), a 1.1 MiB batch and a plausible event (unsigned) are dropped;
    // the owner's next event goes on.
    let mut watcher = open_ws(apis[0], &room, &alice).expect("a relayed socket");
    assert_eq!(read_json(&mut watcher)["type"], "moved");
    let channel = format!("tutti:events:{room}");
    let forged_moved = format!(
        r#"evil
{{"type":"moved","room":"{room}","node":"evil","api_url":"{evil}","ticket":"x"}}"#
    );
    redis.cli(&["PUBLISH", &channel, &forged_moved]);
    let inner_moved = format!(
        r#"evil
{{"type":"events","events":[{{"type":"moved","api_url":"{evil}"}}]}}"#
    );
    redis.cli(&["PUBLISH", &channel, &inner_moved]);
    let huge = "return redis.call('PUBLISH', KEYS[1], ARGV[1] .. string.rep('x', 1100000) .. ARGV[2])";
    redis.cli(&[
        "EVAL",
        huge,
        "1",
        &channel,
        "evil\n{\"type\":\"events\",\"events\":[{\"type\":\"shutdown\",\"message\":\"",
        "\"}]}",
    ]);
    let marker = r#"evil
{"type":"events","events":[{"type":"hand","id":7,"raised":true}]}"#;
    redis.cli(&["PUBLISH", &channel, marker]);
    let lock = |locked: bool| {
        let body = format!(r#"{{"locked":{locked}}}"#);
        let path = format!("/v1/rooms/{room}");
        let r =
            request_as(apis[1], &Requester::token(&admin), "PATCH", &path, Some("application/json"), body.as_bytes())
                .expect("API");
        assert_eq!(r.status, 200, "{}", r.body);
    };
    lock(true);
    let next = read_json(&mut watcher);
    assert_eq!(
        (&next["events"][0]["type"], &next["events"][0]["locked"]),
        (&serde_json::json!("room_updated"), &serde_json::json!(true)),
        "the forged moved, the huge batch and the unsigned event are not relayed: {next}"
    );
    lock(false);
    drop(watcher);

    // 4. The relayed socket refuses a 2 MiB message (1009), as a local one does.
    // It stops reading at the frame's header, so the kernel may answer the
    // rest of the client's write with a reset before the close frame is
    // read: either way the connection ends and nothing was answered.
    let refused = |e: &tungstenite::Error| {
        matches!(e, tungstenite::Error::Io(io) if matches!(io.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionAborted))
    };
    let closed = match ws.send(tungstenite::Message::text("x".repeat(2 << 20))) {
        Err(e) if refused(&e) => Err(e),
        Err(e) => panic!("send 2 MiB: {e}"),
        Ok(()) => loop {
            match ws.read() {
                Ok(tungstenite::Message::Close(frame)) => break Ok(frame.map(|f| u16::from(f.code))),
                Ok(tungstenite::Message::Text(t)) => {
                    assert!(!t.as_str().contains("room_elsewhere"), "the 2 MiB message was read: {t}");
                }
                Ok(_) => {}
                Err(e) if refused(&e) => break Err(e),
                Err(e) => panic!("no close frame after a 2 MiB message: {e}"),
            }
        },
    };
    assert!(matches!(closed, Ok(Some(1009)) | Err(_)), "closed with 1009 (message too big) or reset: {closed:?}");

    // … and a flood of small messages as a local one does: rate_limited, then 1008.
    let mut ws = open_ws(apis[0], &room, &alice).expect("a relayed socket");
    assert_eq!(read_json(&mut ws)["type"], "moved");
    for _ in 0..40 {
        if ws.send(tungstenite::Message::text(r#"{"type":"mute","muted":true}"#)).is_err() {
            break;
        }
    }
    let (mut limited, mut code) = (false, None);
    for _ in 0..100 {
        match ws.read() {
            Ok(tungstenite::Message::Text(t)) => limited |= t.as_str().contains("rate_limited"),
            Ok(tungstenite::Message::Close(frame)) => {
                code = frame.map(|f| u16::from(f.code));
                break;
            }
            Ok(_) => {}
            Err(e) => panic!("no close after a flood: {e}"),
        }
    }
    assert!(limited, "the flood is answered rate_limited");
    assert_eq!(code, Some(1008), "closed with 1008 (message rate)");
}
