//! Three nodes on one real Redis: placement spreads rooms, follows load,
//! eight concurrent claims of one room make one owner, the directory reads
//! the same from every node.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use common::{RedisServer, start, wait_for};
use tutti_cluster::{Load, Placement};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rooms_spread_over_three_nodes_and_follow_load() {
    let redis = RedisServer::start();
    let (a, b, c) = (start(&redis, "a").await, start(&redis, "b").await, start(&redis, "c").await);
    let ids: Vec<String> = a.nodes().await.unwrap().into_iter().map(|n| n.id).collect();
    assert_eq!(ids, ["a", "b", "c"]);

    // 30 rooms created through node a, in a burst.
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    let mut latencies = Vec::new();
    for i in 0..30 {
        let room = format!("room-{i}");
        let t = Instant::now();
        let placement = a.place(&room, Some(r#"{"max_participants":50}"#)).await.unwrap();
        latencies.push(t.elapsed());
        let owner = match placement {
            Placement::Local { epoch, new } => {
                assert_eq!((epoch, new), (1, true));
                "a".to_owned()
            }
            Placement::Remote(owner) => {
                assert_eq!(owner.epoch, 1);
                assert_eq!(owner.api_url, format!("http://{}.test:8080", owner.node_id));
                // The redirected client arrives: the owner's claim finds the lease its own.
                let node = if owner.node_id == "b" { &b } else { &c };
                assert_eq!(node.claim(&room, None).await.unwrap(), Placement::Local { epoch: 1, new: false });
                owner.node_id
            }
        };
        *per_node.entry(owner).or_default() += 1;
    }
    latencies.sort();
    println!("placement of 30 rooms: {per_node:?}; place latency p50 {:?} max {:?}", latencies[15], latencies[29]);
    assert_eq!(per_node.len(), 3, "every node got rooms: {per_node:?}");
    assert!(per_node.values().all(|&n| n >= 5), "uneven spread {per_node:?}");

    // Every node sees the same directory.
    for node in [&a, &b, &c] {
        let rooms = node.list_rooms().await.unwrap();
        assert_eq!(rooms.len(), 30);
        for r in &rooms {
            let owner = r.owner.as_ref().expect("live owner");
            assert!(per_node.contains_key(&owner.node_id));
            assert_eq!(r.recorded_owner.as_deref(), Some(owner.node_id.as_str()));
            assert_eq!(r.config.as_deref(), Some(r#"{"max_participants":50}"#));
        }
    }
    let located = b.locate("room-7").await.unwrap().expect("room-7 has an owner");
    assert_eq!(
        Some(&located),
        c.list_rooms().await.unwrap().iter().find(|r| r.room == "room-7").unwrap().owner.as_ref()
    );

    // Load: a near full, b draining → new rooms go to c (or a only when drawn against b... b is not eligible).
    a.set_load(Load { participants: 95, ..Load::default() });
    a.heartbeat().await.unwrap();
    b.set_draining().await.unwrap();
    let mut to = BTreeMap::new();
    for i in 0..10 {
        let p = b.place(&format!("late-{i}"), None).await.unwrap();
        let id = match p {
            Placement::Local { .. } => "b".to_owned(),
            Placement::Remote(o) => o.node_id,
        };
        *to.entry(id).or_insert(0) += 1;
    }
    println!("with a at 95% and b draining: {to:?}");
    assert_eq!(to.get("b"), None, "a draining node took a room");
    assert!(to.get("c").copied().unwrap_or(0) >= 8, "the light node should take most: {to:?}");

    // The task's registry scan (every heartbeat) counts the live nodes.
    wait_for(Duration::from_secs(2), || async { a.stats().nodes_seen == 3 }).await.expect("a sees 3 nodes");
    let s = a.stats();
    assert!(s.redis_up);
    assert_eq!(s.claims_claimed_total, 30);
    assert!(s.redis_latency_count > 0 && s.redis_errors_total == 0);

    // Shutdown releases leases and leaves the registry.
    let b_rooms = b.owned_rooms().len();
    assert_eq!(b_rooms, per_node["b"]);
    b.shutdown().await.unwrap();
    assert_eq!(a.nodes().await.unwrap().iter().map(|n| n.id.as_str()).collect::<Vec<_>>(), ["a", "c"]);
    assert_eq!(a.list_rooms().await.unwrap().len(), 30 + to.values().sum::<usize>() - b_rooms);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_concurrent_claims_make_one_owner() {
    let redis = RedisServer::start();
    let nodes = [start(&redis, "a").await, start(&redis, "b").await, start(&redis, "c").await];

    for (round, how) in ["claim", "place"].iter().enumerate() {
        let room = format!("hot-{round}");
        let mut tasks = Vec::new();
        for i in 0..8 {
            let node = nodes[i % 3].clone();
            let room = room.clone();
            let how = *how;
            tasks.push(tokio::spawn(async move {
                let t = Instant::now();
                let p = if how == "claim" { node.claim(&room, None).await } else { node.place(&room, None).await };
                (node.node_id().to_owned(), p.unwrap(), t.elapsed())
            }));
        }
        let mut owners = HashSet::new();
        let mut new_claims = 0;
        let mut slowest = Duration::ZERO;
        for t in tasks {
            let (me, p, took) = t.await.unwrap();
            slowest = slowest.max(took);
            match p {
                Placement::Local { epoch, new } => {
                    assert_eq!(epoch, 1);
                    new_claims += usize::from(new);
                    owners.insert(me);
                }
                Placement::Remote(o) => {
                    assert_eq!(o.epoch, 1);
                    owners.insert(o.node_id);
                }
            }
        }
        println!("{how}: 8 concurrent, owners {owners:?}, slowest {slowest:?}");
        assert_eq!(owners.len(), 1, "{how}: more than one owner: {owners:?}");
        if how == &"claim" {
            assert_eq!(new_claims, 1, "exactly one claim takes the epoch");
        }
        let holders: Vec<_> = nodes.iter().filter(|n| n.owned_epoch(&room).is_some()).map(|n| n.node_id()).collect();
        assert!(holders.len() <= 1, "{how}: two nodes think they own {room}: {holders:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_place_and_locate_take_about_a_round_trip() {
    let redis = RedisServer::start();
    let (a, b) = (start(&redis, "a").await, start(&redis, "b").await);
    let pct = |mut v: Vec<Duration>, p: usize| {
        v.sort();
        v[(v.len() * p / 100).min(v.len() - 1)]
    };
    let (mut claim, mut place, mut locate) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..200 {
        let t = Instant::now();
        a.claim(&format!("c-{i}"), None).await.unwrap();
        claim.push(t.elapsed());
        let t = Instant::now();
        b.place(&format!("p-{i}"), None).await.unwrap();
        place.push(t.elapsed());
        let t = Instant::now();
        assert!(b.locate(&format!("c-{i}")).await.unwrap().is_some());
        locate.push(t.elapsed());
    }
    for (what, v) in [("claim", claim), ("place", place), ("locate", locate)] {
        let (p50, p99) = (pct(v.clone(), 50), pct(v, 99));
        println!("{what}: p50 {p50:?} p99 {p99:?} (200 calls, loopback Redis)");
        assert!(p99 < Duration::from_millis(100), "{what} p99 {p99:?}");
    }
}
