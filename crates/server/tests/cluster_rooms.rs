//! In cluster mode (a real redis-server), any token used to place and host
//! a room that did not exist: a REST join or a bare WebSocket upgrade with a
//! listen-only `*` token. With `max_rooms = 8`, eight such rooms made the
//! admin's next create fail with 503 `server_full` (issue 25). Now only an
//! admin creates rooms (unless `room.auto_create`), and an empty room is
//! closed after `room.empty_timeout_seconds` and released in the directory.
//! And a join right behind a room's `DELETE` leaves the room either gone or
//! hosted with its lease: it used to be hosted here with nobody's lease.

mod common;

use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use common::start_with;
use tutti_client::redis::RedisServer;
use tutti_client::{Requester, Response, ToneClient, request_as};
use tutti_server::Config;
use tutti_server::auth::Grant;

const SECRET: &str = "cluster-rooms-test-secret-0123456789";

fn call(api: SocketAddr, token: &str, method: &str, path: &str, ct: Option<&str>, body: &[u8]) -> Response {
    request_as(api, &Requester::token(token), method, path, ct, body).expect("the API answers")
}

fn upgrade_status(api: SocketAddr, room: &str, token: &str) -> u16 {
    let stream = TcpStream::connect(api).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    match tungstenite::client(format!("ws://{api}/v1/rooms/{room}/ws?token={token}"), stream) {
        Ok(_) => 101,
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(r))) => r.status().as_u16(),
        Err(e) => panic!("handshake: {e}"),
    }
}

/// One cluster node, `node-a`, on free loopback ports, with tokens, on `redis`.
fn node_config(redis: &RedisServer) -> Config {
    let http_port = TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let media_port = UdpSocket::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let mut cfg = Config {
        http: SocketAddr::from(([127, 0, 0, 1], http_port)),
        media: SocketAddr::from(([127, 0, 0, 1], media_port)),
        ..common::test_config()
    };
    cfg.auth.disabled = false;
    cfg.auth.secret = SECRET.to_owned();
    cfg.cluster.redis_url = format!("redis://127.0.0.1:{}/0", redis.port);
    cfg.cluster.node_id = "node-a".to_owned();
    cfg.cluster.api_url = format!("http://127.0.0.1:{http_port}");
    cfg.cluster.media_addr = format!("127.0.0.1:{media_port}");
    cfg.cluster.heartbeat_interval_seconds = 0.5;
    cfg.cluster.node_ttl_seconds = 2.0;
    // Debug builds on a busy machine tick slowly: a 20 ms budget would count the node full.
    cfg.cluster.tick_budget_seconds = 1.0;
    cfg.cluster.capacity = 100;
    cfg
}

#[test]
fn in_a_cluster_only_admins_create_rooms_and_empty_ones_are_released() {
    let redis = RedisServer::start();
    let mut cfg = node_config(&redis);
    cfg.max_rooms = 8;
    cfg.room.empty_timeout_seconds = 1.0;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let admin = server.mint_token(&Grant::admin("ops"), Duration::from_secs(600)).expect("token");
    let squatter = server.mint_token(&Grant::listener("*", "squatter"), Duration::from_secs(600)).expect("token");

    // The node is placeable once its first heartbeat is in Redis.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = call(api, &admin, "POST", "/v1/rooms", Some("application/json"), br#"{"id":"first"}"#);
        if r.status == 201 {
            break;
        }
        assert!(Instant::now() < deadline, "the node never took a room: {} {}", r.status, r.body);
        std::thread::sleep(Duration::from_millis(200));
    }

    for i in 0..8 {
        let offer = ToneClient::offer(100.0).expect("offer").1;
        let path = format!("/v1/rooms/squat-{i}/participants");
        let r = call(api, &squatter, "POST", &path, Some("application/sdp"), offer.as_bytes());
        assert_eq!((r.status, r.code().as_str()), (404, "room_not_found"), "join {i}: {}", r.body);
        assert_eq!(upgrade_status(api, &format!("sock-{i}"), &squatter), 404, "a bare upgrade creates nothing");
    }
    // The admin's creates all succeed: nothing took a slot.
    for i in 1..8 {
        let body = format!("{{\"id\":\"a{i}\"}}");
        let r = call(api, &admin, "POST", "/v1/rooms", Some("application/json"), body.as_bytes());
        assert_eq!(r.status, 201, "create {i}: {}", r.body);
    }
    // Nobody joins them: after the empty timeout every one is closed and
    // released in the directory (no node lists it; a join finds nothing).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = call(api, &admin, "GET", "/v1/rooms", None, b"");
        assert_eq!(r.status, 200, "{}", r.body);
        if r.body == "[]" {
            break;
        }
        assert!(Instant::now() < deadline, "rooms still listed: {}", r.body);
        std::thread::sleep(Duration::from_millis(200));
    }
    let lena = server.mint_token(&Grant::listener("first", "lena"), Duration::from_secs(600)).expect("token");
    let offer = ToneClient::offer(100.0).expect("offer").1;
    let r = call(api, &lena, "POST", "/v1/rooms/first/participants", Some("application/sdp"), offer.as_bytes());
    assert_eq!((r.status, r.code().as_str()), (404, "room_not_found"), "a released room is gone: {}", r.body);
    rt.block_on(server.shutdown());
}

/// A node with `room.auto_create` on, placeable (it took a room
/// `warm-up`), and an admin token.
fn auto_create_node(redis: &RedisServer) -> (tokio::runtime::Runtime, tutti_server::Server, String) {
    let mut cfg = node_config(redis);
    cfg.room.auto_create = true;
    let (rt, server) = start_with(cfg);
    let admin = server.mint_token(&Grant::admin("ops"), Duration::from_secs(600)).expect("token");
    let deadline = Instant::now() + Duration::from_secs(15);
    let body = br#"{"id":"warm-up"}"#;
    while call(server.http_addr(), &admin, "POST", "/v1/rooms", Some("application/json"), body).status != 201 {
        assert!(Instant::now() < deadline, "the node never took a room");
        std::thread::sleep(Duration::from_millis(200));
    }
    (rt, server, admin)
}

/// A join that comes while the room's `DELETE` is still giving its lease
/// back: the node must end either without the room or hosting it with its
/// lease in the directory. The lease used to be given back after the join
/// had made the room again: the node hosted a room nobody owned (other
/// nodes answered 404 for it; a later claim fenced and closed it).
#[test]
fn a_join_racing_a_delete_leaves_the_room_closed_or_owned() {
    let redis = RedisServer::start();
    // A join may make the room again: the race's worst case.
    let (rt, server, admin) = auto_create_node(&redis);
    let api = server.http_addr();
    let create = |room: &str| {
        call(api, &admin, "POST", "/v1/rooms", Some("application/json"), format!("{{\"id\":\"{room}\"}}").as_bytes())
    };

    const ROUNDS: usize = 12;
    let mut rejoined = 0;
    for i in 0..ROUNDS {
        let room = format!("race-{i}");
        assert_eq!(create(&room).status, 201, "create {room}");
        let offer = ToneClient::offer(100.0).expect("offer").1;
        let path = format!("/v1/rooms/{room}/participants");
        // The join right behind the delete, as a client rejoining a room an admin just closed.
        let deleted = call(api, &admin, "DELETE", &format!("/v1/rooms/{room}"), None, b"");
        assert_eq!(deleted.status, 204, "{}", deleted.body);
        let joined = call(api, &admin, "POST", &path, Some("application/sdp"), offer.as_bytes());
        assert!(matches!(joined.status, 201 | 404), "join {room}: {} {}", joined.status, joined.body);
        rejoined += usize::from(joined.status == 201);
    }
    // Every give-back has run by now (each takes a few Redis round trips).
    std::thread::sleep(Duration::from_secs(1));
    for i in 0..ROUNDS {
        let room = format!("race-{i}");
        let hosted = call(api, &admin, "GET", &format!("/v1/rooms/{room}"), None, b"").status == 200;
        let lease = redis.cli(&["GET", &format!("tutti:lease:{room}")]);
        assert_eq!(
            hosted,
            lease.starts_with("node-a:"),
            "{room}: hosted here {hosted}, lease in the directory {lease:?} ({rejoined} of {ROUNDS} joins made their room again)"
        );
    }
    rt.block_on(server.shutdown());
}

/// A join redirected to the node holding the room gets TURN credentials
/// that expire with the caller's token, as a join that was not redirected
/// does: the redirect's ticket carries the token's expiry. They used to get
/// the configured TTL (24 h here).
#[test]
fn a_redirected_join_gets_turn_credentials_no_longer_than_its_token() {
    let redis = RedisServer::start();
    let turn = tutti_server::ice::IceServerEntry {
        urls: vec!["turn:127.0.0.1:3478?transport=udp".into()],
        secret: "tutti and coturn share this".into(),
        ttl_seconds: 86_400,
        ..Default::default()
    };
    let nodes: Vec<_> = ["node-a", "node-b"]
        .iter()
        .map(|id| {
            let mut cfg = node_config(&redis);
            cfg.cluster.node_id = (*id).to_owned();
            cfg.ice_servers = vec![turn.clone()];
            start_with(cfg)
        })
        .collect();
    let apis: Vec<SocketAddr> = nodes.iter().map(|(_, s)| s.http_addr()).collect();
    let admin = nodes[0].1.mint_token(&Grant::admin("ops"), Duration::from_secs(600)).expect("token");
    let deadline = Instant::now() + Duration::from_secs(15);
    let holder = loop {
        let r = call(apis[0], &admin, "POST", "/v1/rooms", Some("application/json"), br#"{"id":"r"}"#);
        if r.status == 201 {
            break apis[0];
        }
        if r.status == 307 {
            break apis[1];
        }
        assert!(Instant::now() < deadline, "no node took the room: {} {}", r.status, r.body);
        std::thread::sleep(Duration::from_millis(200));
    };
    let other = if holder == apis[0] { apis[1] } else { apis[0] };
    if holder == apis[1] {
        // The create was redirected: make it there.
        let r = call(apis[1], &admin, "POST", "/v1/rooms", Some("application/json"), br#"{"id":"r"}"#);
        assert!(r.status == 201 || r.code() == "room_exists", "{} {}", r.status, r.body);
    }
    let token = nodes[0].1.mint_token(&Grant::participant("r", "alice"), Duration::from_secs(600)).expect("token");
    let offer = ToneClient::offer(100.0).expect("offer").1;
    let r = call(other, &token, "POST", "/v1/rooms/r/participants", Some("application/sdp"), offer.as_bytes());
    assert_eq!(r.status, 307, "{}", r.body);
    let location = r.header("location").expect("Location").to_owned();
    let (to, path) = tutti_client::split_location(&location).expect("http Location");
    assert_eq!(to, holder);
    let r =
        request_as(to, &Requester::default(), "POST", &path, Some("application/sdp"), offer.as_bytes()).expect("API");
    assert_eq!(r.status, 201, "{}", r.body);
    let link = r.header("link").expect("a Link header with the TURN server").to_owned();
    let username = link.split("username=\"").nth(1).and_then(|s| s.split('"').next()).expect("username");
    let expiry: u64 = username.split(':').next().and_then(|e| e.parse().ok()).expect("<expiry>:<user>");
    let now = tutti_server::auth::unix_now();
    assert!(expiry <= now + 601, "TURN credentials until {expiry}, the token until ~{}", now + 600);
    assert!(expiry + 5 >= now + 600, "and not much earlier: {expiry}");
    for (rt, server) in nodes {
        rt.block_on(server.shutdown());
    }
}

/// With `cluster.secret` set, the cluster's keys derive from it, not from
/// `auth.secret`: a redirect ticket signed with a key derived from the
/// token secret (what any holder of `auth.secret` could make) is refused,
/// and one the cluster's own secret signs is taken.
#[test]
fn with_its_own_secret_the_cluster_takes_no_ticket_signed_with_the_token_secret() {
    use tutti_cluster::{TICKET_PURPOSE, TicketKey, derive_key};
    const CLUSTER_SECRET: &str = "the cluster's own secret, 32 bytes and more";
    let redis = RedisServer::start();
    let mut cfg = node_config(&redis);
    cfg.cluster.secret = CLUSTER_SECRET.to_owned();
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let admin = server.mint_token(&Grant::admin("ops"), Duration::from_secs(600)).expect("token");
    let deadline = Instant::now() + Duration::from_secs(15);
    while call(api, &admin, "POST", "/v1/rooms", Some("application/json"), br#"{"id":"r"}"#).status != 201 {
        assert!(Instant::now() < deadline, "the node never took the room");
        std::thread::sleep(Duration::from_millis(200));
    }
    let read = |secret: &str| {
        let key = TicketKey::new(&derive_key(secret.as_bytes(), TICKET_PURPOSE), 30);
        let grants = serde_json::json!({"room": "r", "speak": false, "listen": true, "admin": false});
        let join = "/v1/rooms/r/participants";
        let ticket = key.mint("r", "mallory", grants, ("POST", join), tutti_server::auth::unix_now());
        let path = format!("{join}?ticket={}", ticket.expect("ticket").0);
        let offer = ToneClient::offer(100.0).expect("offer").1;
        request_as(api, &Requester::default(), "POST", &path, Some("application/sdp"), offer.as_bytes()).expect("API")
    };
    let forged = read(SECRET);
    assert_eq!((forged.status, forged.code().as_str()), (401, "bad_ticket"), "{}", forged.body);
    let r = read(CLUSTER_SECRET);
    assert_eq!(r.status, 201, "a ticket of the cluster's own key: {}", r.body);
    rt.block_on(server.shutdown());
}

/// The config stored with a room in the directory (limits, and a drain's
/// lock and bans) is applied by the node that hosts the room afresh: one
/// written into Redis by hand (as anyone who can write to Redis could)
/// used to be applied as is. Now only one signed with the cluster's key
/// is: a forged one is ignored (the defaults apply), counted, and the
/// room works.
#[test]
fn a_room_config_written_into_redis_by_hand_is_never_applied() {
    let redis = RedisServer::start();
    let (rt, server, _) = auto_create_node(&redis);
    let api = server.http_addr();
    // One participant at most, locked by a "drain" until 2100, and ana banned.
    let forged = r#"{"max_participants":1,"handover":{"until":4102444800,"locked":true,"bans":[["ana",4102444800]],"returning":[]}}"#;
    redis.cli(&["HSET", "tutti:room:victim", "config", forged, "config_sig", "bm90IGEgc2lnbmF0dXJl"]);
    redis.cli(&["SADD", "tutti:rooms", "victim"]);

    let join = |identity: &str| {
        let token =
            server.mint_token(&Grant::participant("victim", identity), Duration::from_secs(600)).expect("token");
        let offer = ToneClient::offer(100.0).expect("offer").1;
        call(api, &token, "POST", "/v1/rooms/victim/participants", Some("application/sdp"), offer.as_bytes())
    };
    for identity in ["ana", "ben", "cy"] {
        let r = join(identity);
        assert_eq!(r.status, 201, "{identity} joins a room with the defaults: {}", r.body);
    }
    // Counted (the cluster's figures reach /metrics each second).
    let rejected = || {
        let metrics = common::scrape(server.metrics_addr().expect("metrics are on"));
        metrics.get("tutti_cluster_room_configs_rejected_total").copied().unwrap_or(0.0)
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while rejected() < 1.0 {
        assert!(Instant::now() < deadline, "the forged config is counted");
        std::thread::sleep(Duration::from_millis(200));
    }
    rt.block_on(server.shutdown());
}
