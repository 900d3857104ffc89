//! Node numbers and room control on a real Redis: every node takes a
//! number of its own (wrapping, skipping the numbers live nodes hold) and
//! publishes it in its signed record; a control message one node of a
//! room's span publishes reaches the other members at the same epoch, not
//! the sender, not a node of another epoch (refused, counted), not a node
//! that does not host the room; a message with a bad tag is refused and
//! counted by every node.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{RedisServer, SECRET, TestRedis, config};
use tutti_cluster::{Cluster, ControlRefusal, MAX_NODE_NUMBER, Placement, RoomSpread};

async fn node(redis: &RedisServer, id: &str) -> Cluster {
    let cfg = tutti_cluster::ClusterConfig { room_spread: RoomSpread::Always, ..config(redis, id) };
    Cluster::start(cfg, SECRET).await.expect("start cluster node")
}

fn refused(c: &Cluster, reason: ControlRefusal) -> u64 {
    c.stats().control_refused_total[reason.index()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_numbers_are_unique_signed_and_wrap_past_live_ones() {
    let redis = RedisServer::start();
    let a = node(&redis, "a").await;
    let b = node(&redis, "b").await;
    assert_eq!((a.node_number(), b.node_number()), (1, 2));
    let numbers: Vec<(String, Option<u32>)> = a.nodes().await.unwrap().into_iter().map(|n| (n.id, n.number)).collect();
    assert_eq!(numbers, [("a".to_owned(), Some(1)), ("b".to_owned(), Some(2))], "in the signed records");
    // The counter near its end: the next node takes the last number, the one
    // after wraps to 1 and 2, held by a and b, and takes 3.
    redis.command(&["SET", "tutti:node_numbers", &(MAX_NODE_NUMBER - 1).to_string()]);
    let c = node(&redis, "c").await;
    let d = node(&redis, "d").await;
    assert_eq!((c.node_number(), d.node_number()), (MAX_NODE_NUMBER, 3));
    // A number written into a record by hand makes the record unsigned:
    // ignored (b stopped, so that its next heartbeat does not write it back).
    b.abandon();
    redis.command(&["HSET", "tutti:node:b", "number", "9"]);
    let ids: Vec<String> = a.nodes().await.unwrap().into_iter().map(|n| n.id).collect();
    assert!(!ids.contains(&"b".to_owned()), "a record whose number changed is not trusted: {ids:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_reaches_the_other_members_of_the_span_at_its_epoch() {
    let redis = RedisServer::start();
    let a = node(&redis, "a").await;
    let b = node(&redis, "b").await;
    let c = node(&redis, "c").await;
    let stranger = node(&redis, "d").await;
    let (mut at_a, mut at_b, mut at_c, mut at_d) = (
        a.take_control().unwrap(),
        b.take_control().unwrap(),
        c.take_control().unwrap(),
        stranger.take_control().unwrap(),
    );
    assert!(a.take_control().is_none(), "once");
    assert_eq!(a.claim("r", None).await.unwrap(), Placement::Local { epoch: 1, new: true });
    b.join_spans(&[("r".into(), 1)]).await.unwrap();
    // c thinks the room is at another epoch (an old copy).
    c.join_spans(&[("r".into(), 9)]).await.unwrap();
    assert!(!stranger.publish_control("r", serde_json::json!({})), "a node hosting no copy publishes nothing");

    assert!(a.publish_control("r", serde_json::json!({"kind": "update", "locked": true})));
    let got = tokio::time::timeout(Duration::from_secs(3), at_b.recv()).await.expect("in time").expect("a message");
    assert_eq!((got.room.as_str(), got.epoch, got.origin.as_str()), ("r", 1, "a"));
    assert_eq!(got.body["locked"], true);
    // c refuses it (another epoch) and counts it; a (the sender) and d (no copy) skip it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while refused(&c, ControlRefusal::Epoch) == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(refused(&c, ControlRefusal::Epoch), 1);
    for rx in [&mut at_a, &mut at_c, &mut at_d] {
        assert!(rx.try_recv().is_err(), "nothing for the sender, a node of another epoch, or a stranger");
    }
    assert_eq!(a.stats().control_refused_total, [0; 7], "its own message is not a refusal");

    // A message written into Redis by hand: refused by every node, counted, never delivered.
    let forged = "eyJyb29tIjoiciJ9.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    assert_eq!(redis.command(&["PUBLISH", "tutti:control", forged]), redis::Value::Int(4));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while [&a, &b, &c, &stranger].iter().any(|n| refused(n, ControlRefusal::BadTag) == 0)
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for n in [&a, &b, &c, &stranger] {
        assert_eq!(refused(n, ControlRefusal::BadTag), 1, "{}", n.node_id());
    }
    assert!(at_b.try_recv().is_err(), "the forged message is not delivered");
    assert!(a.stats().control_published_total >= 1);
}
