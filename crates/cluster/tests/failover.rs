//! The owner of a room dies (its tasks stop, nothing released): after the
//! node TTL its room goes to another node at a higher epoch, and the old
//! owner's next renewal reports it fenced.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{RedisServer, start, wait_for};
use tutti_cluster::Placement;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_owners_room_is_placed_again_and_the_owner_is_fenced() {
    let redis = RedisServer::start();
    let (a, b, c) = (start(&redis, "a").await, start(&redis, "b").await, start(&redis, "c").await);
    let mut fenced_rx = a.take_fenced().expect("first take");
    assert!(a.take_fenced().is_none());

    assert_eq!(a.claim("r", None).await.unwrap(), Placement::Local { epoch: 1, new: true });
    assert_eq!(a.claim("q", None).await.unwrap(), Placement::Local { epoch: 1, new: true });
    // Renewals keep the lease past its TTL (4 s) while a lives.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    match b.place("r", None).await.unwrap() {
        Placement::Remote(o) => assert_eq!((o.node_id.as_str(), o.epoch), ("a", 1)),
        other => panic!("a still owns r, got {other:?}"),
    }
    assert!(a.stats().renewals_total >= 1);

    // "kill -9": the heartbeat task stops, nothing is released.
    a.abandon();
    let killed = Instant::now();
    match c.place("r", None).await.unwrap() {
        Placement::Remote(o) => assert_eq!(o.node_id, "a", "a's entry lives until its TTL"),
        other => panic!("unexpected {other:?}"),
    }
    let gone = wait_for(Duration::from_secs(5), || async { b.nodes().await.unwrap().iter().all(|n| n.id != "a") })
        .await
        .expect("a's registry entry lapses within its TTL");
    println!("a's entry lapsed {gone:?} after the kill (node TTL 2 s, heartbeat 0.5 s)");
    assert!(killed.elapsed() <= Duration::from_millis(2600), "node TTL is 2 s");

    let new_owner = match c.place("r", None).await.unwrap() {
        Placement::Local { epoch, new } => {
            assert_eq!((epoch, new), (2, true));
            "c".to_owned()
        }
        Placement::Remote(o) => {
            assert_eq!(o.epoch, 2, "a new claim raises the epoch");
            o.node_id
        }
    };
    assert_ne!(new_owner, "a");
    println!("r re-placed on {new_owner} at epoch 2, {:?} after the kill", killed.elapsed());
    let located = b.locate("r").await.unwrap().expect("owner");
    assert_eq!((located.node_id.as_str(), located.epoch), (new_owner.as_str(), 2));

    // a comes back to life (a paused process). A claim that finds another
    // holder of a room a held fences it at once…
    match b.place("q", None).await.unwrap() {
        Placement::Local { epoch, new } => assert_eq!((epoch, new), (2, true)),
        Placement::Remote(o) => assert_eq!(o.epoch, 2),
    }
    assert!(matches!(a.claim("q", None).await.unwrap(), Placement::Remote(o) if o.epoch == 2 && o.node_id != "a"));
    let q = fenced_rx.try_recv().unwrap();
    assert_eq!((q.room.as_str(), q.epoch), ("q", 1));
    assert_eq!(a.owned_epoch("q"), None);
    // … and so does its renewal.
    assert_eq!(a.owned_epoch("r"), Some(1));
    let fenced = a.renew_leases().await.unwrap();
    assert_eq!(fenced.len(), 1);
    assert_eq!((fenced[0].room.as_str(), fenced[0].epoch), ("r", 1));
    assert!(fenced[0].holder.starts_with(&new_owner), "holder {}", fenced[0].holder);
    assert_eq!(fenced_rx.try_recv().unwrap(), fenced[0]);
    assert_eq!(a.owned_epoch("r"), None);
    assert_eq!(a.stats().fenced_total, 2);
    // Its release is now a no-op, and does not disturb the new owner.
    assert!(!a.release("r").await.unwrap());
    assert_eq!(b.locate("r").await.unwrap().expect("owner").node_id, new_owner);
    // b notices at its next heartbeats (every 0.5 s here).
    let noticed = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while b.stats().nodes_lost_total == 0 && tokio::time::Instant::now() < noticed {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(b.stats().nodes_lost_total >= 1, "b saw a disappear");
}
