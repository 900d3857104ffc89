//! A rolling rotation of `cluster.secret` without a split, with a real
//! redis-server and three in-process nodes spreading every room
//! (`room_spread = "always"`): node A already on the new cluster secret
//! with the old one in `cluster.previous_secrets`, node B still signing
//! with the old one (the new one listed: the roll's first step), node C on
//! an unrelated secret. Joins through A spread a room over A and B (a
//! redirect to B with a ticket under the new secret, records, configs,
//! rosters and control messages read across the two secrets), and a talker
//! on A and one on B hear each other through the mesh (each node sealing
//! under its own secret, opening the other's). No join goes to C. Before
//! `cluster.previous_secrets`, nodes on two secrets did not trust each
//! other and no room spread over them.

mod common;

use std::collections::HashSet;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::time::{Duration, Instant};

use common::start_with;
use tutti_client::redis::RedisServer;
use tutti_client::{Requester, ToneClient, request_following, run_for, run_until};
use tutti_server::auth::Grant;

const AUTH_SECRET: &str = "cluster-rotation-test-token-secret-0123";
const OLD: &str = "the-cluster-secret-rolled-out-0123456789";
const NEW: &str = "the-cluster-secret-rolled-in-9876543210";
const UNRELATED: &str = "an-unrelated-cluster-secret-abcdefghijk";

/// Node `id` on free loopback ports, spreading rooms, signing with
/// `secret` and accepting `previous`.
fn node(
    redis: &RedisServer,
    id: &str,
    secret: &str,
    previous: &[&str],
) -> (tokio::runtime::Runtime, tutti_server::Server) {
    let http = TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr");
    let media = UdpSocket::bind("127.0.0.1:0").expect("port").local_addr().expect("addr");
    let mut cfg = tutti_server::Config { http, media, ..common::test_config() };
    cfg.auth.disabled = false;
    cfg.auth.secret = AUTH_SECRET.to_owned();
    cfg.room.empty_timeout_seconds = 0.0;
    // The media port was found free for UDP only: no ICE-TCP listener on it.
    cfg.media_tcp = false;
    let c = &mut cfg.cluster;
    c.redis_url = format!("redis://127.0.0.1:{}/0", redis.port);
    (c.node_id, c.secret) = (id.to_owned(), secret.to_owned());
    c.previous_secrets = previous.iter().map(|s| (*s).to_owned()).collect();
    (c.api_url, c.media_addr) = (format!("http://{http}"), media.to_string());
    (c.heartbeat_interval_seconds, c.node_ttl_seconds) = (0.5, 2.0);
    // Debug builds on a busy machine tick slowly: a 20 ms budget would count the node full.
    (c.tick_budget_seconds, c.capacity) = (1.0, 100);
    c.room_spread = tutti_cluster::RoomSpread::Always;
    start_with(cfg)
}

/// Joins `room` through `api` with a WHIP offer, following a redirect;
/// the client and the node (API address) that took it.
fn join_at(api: SocketAddr, token: &str, room: &str, freq: f32) -> (ToneClient, SocketAddr) {
    let (mut client, offer) = ToneClient::offer(freq).expect("offer");
    let path = format!("/v1/rooms/{room}/participants");
    let (r, at, _) =
        request_following(api, &Requester::token(token), "POST", &path, Some("application/sdp"), offer.as_bytes(), 2)
            .expect("the API answers");
    assert_eq!(r.status, 201, "join through {api}: {}", r.body);
    client.location = r.header("location").unwrap_or_default().to_owned();
    let id = client.location.rsplit('/').next().and_then(|s| s.parse().ok()).unwrap_or(0);
    client.accept_answer(&r.body, id).expect("answer");
    (client, at)
}

#[test]
fn a_cluster_secret_rolls_without_a_split_and_another_cluster_stays_out() {
    let redis = RedisServer::start();
    let nodes = [
        node(&redis, "node-a", NEW, &[OLD]),
        node(&redis, "node-b", OLD, &[NEW]),
        node(&redis, "node-c", UNRELATED, &[]),
    ];
    let [a, b, c] = [0, 1, 2].map(|i| nodes[i].1.http_addr());
    let admin = nodes[0].1.mint_token(&Grant::admin("ops"), Duration::from_secs(600)).expect("token");
    // Heartbeats: every node has read the others' records.
    std::thread::sleep(Duration::from_secs(2));
    let body = br#"{"id":"roll","max_speakers":4}"#;
    let (r, _, _) =
        request_following(a, &Requester::token(&admin), "POST", "/v1/rooms", Some("application/json"), body, 2)
            .expect("the API answers");
    assert_eq!(r.status, 201, "{}", r.body);

    // Four talkers through A: each goes to the least loaded node A trusts,
    // so the room spreads over A and B (a redirect to B), never onto C.
    let mut clients = Vec::new();
    let mut hosts = Vec::new();
    for f in [440.0, 660.0, 990.0, 1320.0] {
        let (client, at) = join_at(a, &admin, "roll", f);
        clients.push(client);
        hosts.push(at);
        let mut refs: Vec<&mut ToneClient> = clients.iter_mut().collect();
        run_for(&mut refs, Duration::from_millis(300));
    }
    let used: HashSet<SocketAddr> = hosts.iter().copied().collect();
    assert!(!used.contains(&c), "a join went to C, on an unrelated secret: {hosts:?}");
    assert_eq!(used, HashSet::from([a, b]), "the room spreads over A and B: {hosts:?} (A {a}, B {b})");

    // A talker on A and one on B hear each other through the mesh.
    let on_a = hosts.iter().position(|&h| h == a).expect("a talker on A");
    let on_b = hosts.iter().position(|&h| h == b).expect("a talker on B");
    let (fa, fb) = (clients[on_a].freq, clients[on_b].freq);
    let started = Instant::now();
    let heard = {
        let mut refs: Vec<&mut ToneClient> = clients.iter_mut().collect();
        run_until(&mut refs, started + Duration::from_secs(45), |cs| {
            let since = Instant::now() - Duration::from_millis(1500);
            started.elapsed() > Duration::from_secs(2)
                && cs[on_a].hears(fb, since) > 0.05
                && cs[on_b].hears(fa, since) > 0.05
        })
    };
    let since = Instant::now() - Duration::from_millis(1500);
    assert!(
        heard,
        "within 45 s (a busy debug build) the talkers on A and B hear each other: A's hears {:.3}, B's hears {:.3}",
        clients[on_a].hears(fb, since),
        clients[on_b].hears(fa, since)
    );
    for (rt, server) in nodes {
        rt.block_on(server.shutdown());
    }
}
