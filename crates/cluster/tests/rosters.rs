//! Rosters of a spread room on a real Redis: a node writes its own
//! (whole, then changes), another reads it back with the node's number from
//! its signed record; a roster over the cap is not read at all; a node
//! leaving the span takes its roster with it; a full write drops what
//! Redis held before.

#![allow(clippy::unwrap_used)]

mod common;

use common::{RedisServer, SECRET, TestRedis, config};
use tutti_cluster::{Cluster, RoomSpread, RosterWrite};

async fn node(redis: &RedisServer, id: &str) -> Cluster {
    let cfg = tutti_cluster::ClusterConfig { room_spread: RoomSpread::Always, ..config(redis, id) };
    Cluster::start(cfg, SECRET).await.expect("start cluster node")
}

fn summary(id: u64, name: &str) -> (u64, String) {
    (id, format!(r#"{{"id":{id},"name":"{name}"}}"#))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_roster_is_read_back_by_another_within_its_bounds() {
    let redis = RedisServer::start();
    let a = node(&redis, "a").await;
    let b = node(&redis, "b").await;
    let base = u64::from(b.node_number()) << 32;
    let members = vec![("b".to_owned(), b.node_number())];
    b.join_spans(&[("r".into(), 1)]).await.unwrap();

    let whole = RosterWrite {
        room: "r".into(),
        full: true,
        upserts: vec![summary(base + 1, "ann"), summary(base + 2, "bob")],
        removals: vec![],
    };
    b.write_rosters(&[whole]).await.unwrap();
    let read = a.rosters("r", &members, 10).await.unwrap();
    assert_eq!(
        read.entries.iter().map(|e| (e.node_id.as_str(), e.id)).collect::<Vec<_>>(),
        [("b", base + 1), ("b", base + 2)]
    );
    assert_eq!((read.entries[0].summary["name"].as_str(), read.refused), (Some("ann"), 0));
    assert!(b.rosters("r", &members, 10).await.unwrap().entries.is_empty(), "a node never reads its own");
    let ttl: i64 = redis::from_redis_value(redis.command(&["PTTL", "tutti:roster:r:b"])).unwrap();
    assert!(ttl > 0, "the roster expires with the span membership: {ttl}");

    // Changes: bob leaves, cid joins.
    let change = RosterWrite {
        room: "r".into(),
        full: false,
        upserts: vec![summary(base + 3, "cid")],
        removals: vec![base + 2],
    };
    b.write_rosters(&[change]).await.unwrap();
    let ids: Vec<u64> = a.rosters("r", &members, 10).await.unwrap().entries.iter().map(|e| e.id).collect();
    assert_eq!(ids, [base + 1, base + 3]);

    // Over the cap: not read at all (counted as one refusal).
    let read = a.rosters("r", &members, 1).await.unwrap();
    assert_eq!((read.entries.len(), read.refused), (0, 1));

    // A full write drops what was there (a forged entry included).
    redis.command(&["HSET", "tutti:roster:r:b", &(base + 9).to_string(), &summary(base + 9, "forged").1]);
    let whole = RosterWrite { room: "r".into(), full: true, upserts: vec![summary(base + 1, "ann")], removals: vec![] };
    b.write_rosters(&[whole]).await.unwrap();
    let ids: Vec<u64> = a.rosters("r", &members, 10).await.unwrap().entries.iter().map(|e| e.id).collect();
    assert_eq!(ids, [base + 1]);

    // Leaving the span deletes the roster.
    b.leave_span("r").await.unwrap();
    let exists: i64 = redis::from_redis_value(redis.command(&["EXISTS", "tutti:roster:r:b"])).unwrap();
    assert_eq!(exists, 0);
    assert!(a.rosters("r", &members, 10).await.unwrap().entries.is_empty());
}
