//! Room events published by a room's owner reach watchers on another node,
//! in order, and again after Redis restarts.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{RedisServer, start, wait_for};
use tokio::sync::broadcast::error::TryRecvError;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn room_events_reach_watchers_on_other_nodes() {
    let mut redis = RedisServer::start();
    let (a, b) = (start(&redis, "a").await, start(&redis, "b").await);
    let mut watcher = a.watch("r").await.unwrap();
    let mut other_room = a.watch("s").await.unwrap();
    assert_eq!(a.stats().rooms_watched, 2);

    let sent = Instant::now();
    for i in 0..3 {
        b.publish_event("r", format!(r#"{{"type":"joined","id":{i}}}"#));
    }
    for i in 0..3 {
        let e = tokio::time::timeout(Duration::from_secs(2), watcher.recv()).await.expect("in time").unwrap();
        assert_eq!((e.room.as_str(), e.origin.as_str()), ("r", "b"));
        assert_eq!(e.event, format!(r#"{{"type":"joined","id":{i}}}"#));
    }
    println!("3 events relayed in {:?}", sent.elapsed());
    assert_eq!(other_room.try_recv(), Err(TryRecvError::Empty), "events of r do not reach watchers of s");
    // A node's own events are not relayed back to it.
    a.publish_event("r", "mine".into());
    b.publish_event("r", "theirs".into());
    let e = tokio::time::timeout(Duration::from_secs(2), watcher.recv()).await.expect("in time").unwrap();
    assert_eq!(e.event, "theirs");

    // Redis restarts: the subscription comes back by itself.
    redis.restart();
    wait_for(Duration::from_secs(8), || async { a.nodes().await.is_ok_and(|n| n.len() == 2) })
        .await
        .expect("nodes back");
    let back = wait_for(Duration::from_secs(6), || {
        b.publish_event("r", "after restart".into());
        let got = matches!(watcher.try_recv(), Ok(e) if e.event == "after restart");
        async move { got }
    })
    .await
    .expect("events flow again after Redis restarts");
    println!("events flow again {back:?} after the nodes re-registered");

    // Dropping the last receiver ends the subscription (at the next heartbeat).
    drop(watcher);
    drop(other_room);
    wait_for(Duration::from_secs(3), || async { a.stats().rooms_watched == 0 }).await.expect("unsubscribed");
    let s = b.stats();
    assert!(s.events_published_total >= 5, "{s:?}");
    assert!(a.stats().events_delivered_total >= 4);
}
