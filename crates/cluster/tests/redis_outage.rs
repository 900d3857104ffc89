//! Redis dies and comes back (empty: no persistence): operations fail fast
//! with `Unavailable`, local rooms go on, nodes and leases reappear by
//! themselves.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{RedisServer, TestRedis, config, start, wait_for};
use tutti_cluster::{Cluster, ClusterError, Placement, TicketError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_redis_fails_fast_and_recovers_by_itself() {
    let mut redis = RedisServer::start();
    let a = start(&redis, "a").await;
    assert_eq!(a.claim("r", None).await.unwrap(), Placement::Local { epoch: 1, new: true });
    let ticket = a.mint_ticket("r", "alice", serde_json::Value::Null, ("POST", "/v1/rooms/r/whip")).unwrap();

    redis.kill();
    let killed = Instant::now();
    // Each operation fails fast with Unavailable (timed one by one).
    let t = Instant::now();
    assert!(matches!(a.nodes().await, Err(ClusterError::Unavailable(_))));
    assert!(matches!(a.place("other", None).await, Err(ClusterError::Unavailable(_))));
    assert!(matches!(a.list_rooms().await, Err(ClusterError::Unavailable(_))));
    assert!(t.elapsed() < Duration::from_secs(3), "three operations took {:?}", t.elapsed());
    for _ in 0..3 {
        let t = Instant::now();
        let r = a.claim("other", None).await;
        let took = t.elapsed();
        println!("claim with Redis down: {took:?}");
        assert!(matches!(r, Err(ClusterError::Unavailable(_))), "{r:?}");
        assert!(took < Duration::from_secs(1), "Unavailable took {took:?}");
        assert_eq!(r.unwrap_err().retry_after_seconds(), 2);
    }
    let t = Instant::now();
    assert!(matches!(
        a.verify_ticket(&ticket, "r", ("POST", "/v1/rooms/r/whip")).await,
        Err(TicketError::Unavailable(_))
    ));
    assert!(t.elapsed() < Duration::from_secs(1));
    // The room held here goes on: joins to it need no Redis.
    assert_eq!(a.place("r", None).await.unwrap(), Placement::Local { epoch: 1, new: false });
    assert_eq!(a.owned_epoch("r"), Some(1));
    wait_for(Duration::from_secs(3), || async { !a.stats().redis_up }).await.expect("redis_up goes to 0");
    // A node starting while Redis is down starts anyway.
    let b = Cluster::start(config(&redis, "b"), common::SECRET).await.expect("start without Redis");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(a.owned_epoch("r"), Some(1), "leases are not dropped while Redis is away");
    let s = a.stats();
    assert!(s.heartbeat_failures_total >= 1 && s.redis_errors_total >= 5, "{s:?}");
    println!("Redis down for {:?}", killed.elapsed());

    redis.restart();
    let restarted = Instant::now();
    let back = wait_for(Duration::from_secs(8), || async {
        a.nodes().await.is_ok_and(|n| n.iter().map(|n| n.id.as_str()).collect::<Vec<_>>() == ["a", "b"])
    })
    .await
    .expect("both nodes re-register after Redis restarts");
    println!("nodes back {back:?} after the restart");
    // The lease, lost with Redis' data, is restored at the same epoch.
    wait_for(Duration::from_secs(4), || async {
        matches!(redis.command(&["GET", "tutti:lease:r"]), redis::Value::BulkString(ref v) if v == b"a:1")
    })
    .await
    .expect("lease restored");
    let owner = b.locate("r").await.unwrap().expect("r has its owner back");
    assert_eq!((owner.node_id.as_str(), owner.epoch), ("a", 1));
    assert!(a.stats().redis_up);
    assert!(matches!(b.claim("r", None).await.unwrap(), Placement::Remote(o) if o.node_id == "a"));
    println!("lease restored {:?} after the restart", restarted.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_times_out_within_the_op_timeout() {
    let redis = RedisServer::start();
    let a = start(&redis, "a").await;
    assert_eq!(a.claim("r", None).await.unwrap(), Placement::Local { epoch: 1, new: true });

    // SIGSTOP: the TCP connection stays up, nothing answers.
    redis.signal("STOP");
    for _ in 0..2 {
        let t = Instant::now();
        let r = a.locate("other").await;
        let took = t.elapsed();
        println!("locate with Redis frozen: {took:?}");
        assert!(matches!(r, Err(ClusterError::Unavailable(_))), "{r:?}");
        assert!(took >= Duration::from_millis(400) && took < Duration::from_secs(1), "took {took:?}");
    }
    assert_eq!(a.place("r", None).await.unwrap(), Placement::Local { epoch: 1, new: false });
    redis.signal("CONT");
    let back = wait_for(Duration::from_secs(5), || async { a.locate("r").await.is_ok() && a.nodes().await.is_ok() })
        .await
        .expect("works again once Redis answers");
    println!("answers again {back:?} after SIGCONT");
    assert_eq!(owner_of_r_in_listing(&a).await, Some(("a".to_owned(), 1)));
}

async fn owner_of_r_in_listing(a: &Cluster) -> Option<(String, u64)> {
    let nodes = a.nodes().await.ok()?;
    assert_eq!(nodes.len(), 1);
    let rooms = a.list_rooms().await.ok()?;
    rooms.into_iter().find(|r| r.room == "r").and_then(|r| r.owner).map(|o| (o.node_id, o.epoch))
}
