//! A cluster that trusts no one: Redis with a password and TLS, and node
//! records that redirect nobody unless signed with the cluster's key. Real
//! `redis-server` processes (Debian's, built with TLS), on loopback.

#![allow(clippy::unwrap_used)]

mod common;

use common::{RedisServer, SECRET, TestRedis, config};
use tutti_cluster::{Cluster, ClusterConfig, ClusterError, Placement};

const PASSWORD: &str = "correct horse battery staple";

async fn refused(cfg: ClusterConfig) -> String {
    match Cluster::start(cfg, SECRET).await {
        Err(e @ ClusterError::Refused(_)) => e.to_string(),
        Err(e) => panic!("expected a refusal at start, got {e}"),
        Ok(_) => panic!("expected a refusal at start, the node started"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_protected_redis_refuses_a_wrong_password_at_start_and_takes_the_right_one() {
    let redis = RedisServer::with_password(PASSWORD);
    // No password, then a wrong one: a clear error at start, not a node retrying for ever.
    let message = refused(config(&redis, "a")).await;
    assert!(message.contains("redis_password"), "the error says what to check: {message}");
    let message = refused(ClusterConfig { redis_password: "wrong".into(), ..config(&redis, "a") }).await;
    println!("wrong password: {message}");

    // The password in the URL, or (kept out of the URL) in its own key.
    let in_url = ClusterConfig {
        redis_url: format!("redis://:{}@127.0.0.1:{}/0", PASSWORD.replace(' ', "%20"), redis.port),
        ..config(&redis, "a")
    };
    let a = Cluster::start(in_url, SECRET).await.expect("the password in the URL works");
    let b = Cluster::start(ClusterConfig { redis_password: PASSWORD.into(), ..config(&redis, "b") }, SECRET)
        .await
        .expect("cluster.redis_password works");
    let ids: Vec<String> = a.nodes().await.unwrap().into_iter().map(|n| n.id).collect();
    assert_eq!(ids, ["a", "b"]);
    // Events travel over the second (pub/sub) connection, which authenticates too.
    let mut events = b.watch("r1").await.expect("watch");
    assert!(matches!(a.claim("r1", None).await.unwrap(), Placement::Local { .. }));
    a.publish_event("r1", r#"{"type":"events"}"#.into());
    let got = tokio::time::timeout(std::time::Duration::from_secs(3), events.recv()).await;
    assert!(matches!(got, Ok(Ok(_))), "an event crosses an authenticated pub/sub connection: {got:?}");
    assert!(matches!(b.place("r1", None).await.unwrap(), Placement::Remote(o) if o.node_id == "a"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_with_a_custom_ca_works_and_an_unknown_ca_is_refused() {
    let redis = RedisServer::with_tls(PASSWORD);
    let tls = |id: &str| ClusterConfig {
        redis_password: PASSWORD.into(),
        redis_ca_file: redis.ca_file(),
        ..config(&redis, id)
    };
    assert!(tls("a").redis_url.starts_with("rediss://"));
    let a = Cluster::start(tls("a"), SECRET).await.expect("rediss:// with the CA file");
    let b = Cluster::start(tls("b"), SECRET).await.expect("rediss:// with the CA file");
    let mut events = b.watch("r1").await.expect("watch over TLS");
    assert!(matches!(a.claim("r1", None).await.unwrap(), Placement::Local { .. }));
    a.publish_event("r1", r#"{"type":"events"}"#.into());
    let got = tokio::time::timeout(std::time::Duration::from_secs(3), events.recv()).await;
    assert!(matches!(got, Ok(Ok(_))), "an event crosses TLS: {got:?}");
    assert!(matches!(b.place("r1", None).await.unwrap(), Placement::Remote(o) if o.node_id == "a"));
    assert!(b.stats().redis_up);

    // Without the CA file the server's certificate chains to nothing the system trusts.
    let message = refused(ClusterConfig { redis_ca_file: String::new(), ..tls("c") }).await;
    assert!(message.contains("certificate"), "{message}");
    // A CA file with a plain redis:// URL is a configuration error.
    let plain = ClusterConfig { redis_url: format!("redis://127.0.0.1:{}/0", redis.port), ..tls("c") };
    assert!(matches!(plain.validate(), Err(ClusterError::Config { field: "redis_ca_file", .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_records_written_by_hand_or_under_another_secret_redirect_nobody() {
    let redis = RedisServer::start();
    let a = common::start(&redis, "a").await;
    // A Redis writer adds a node of its own and leases a room to it.
    let forged = [
        "HSET",
        "tutti:node:evil",
        "api_url",
        "http://evil.example:8080",
        "media_addr",
        "203.0.113.9:3478",
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
        "sig",
        "AAAA",
    ];
    redis.command(&forged);
    redis.command(&["PEXPIRE", "tutti:node:evil", "600000"]);
    redis.command(&["SADD", "tutti:nodes", "evil"]);
    redis.command(&["SET", "tutti:lease:victim", "evil:7", "PX", "600000"]);
    redis.command(&["HSET", "tutti:room:victim", "owner", "evil", "epoch", "7"]);
    // … and copies node a's genuine, signed record under another id, with its URL changed.
    redis.command(&["COPY", "tutti:node:a", "tutti:node:copy"]);
    redis.command(&["HSET", "tutti:node:copy", "api_url", "http://evil.example:8080"]);
    redis.command(&["PEXPIRE", "tutti:node:copy", "600000"]);
    redis.command(&["SADD", "tutti:nodes", "copy"]);
    redis.command(&["SET", "tutti:lease:victim2", "copy:3", "PX", "600000"]);

    // A node of another cluster (another secret) on the same Redis and prefix.
    let other =
        Cluster::start(config(&redis, "stranger"), b"a different secret of 32 bytes or more").await.expect("start");

    for room in ["victim", "victim2"] {
        assert_eq!(a.locate(room).await.unwrap(), None, "{room}: a forged owner is no owner");
        for result in [a.place(room, None).await, a.claim(room, None).await] {
            assert!(matches!(result, Err(ClusterError::Untrusted(_))), "{room}: never a redirect: {result:?}");
        }
    }
    let ids: Vec<String> = a.nodes().await.unwrap().into_iter().map(|n| n.id).collect();
    assert_eq!(ids, ["a"], "only signed records count as nodes");
    for i in 0..20 {
        let p = a.place(&format!("fresh-{i}"), None).await.unwrap();
        assert!(matches!(p, Placement::Local { .. }), "nothing is placed on a forged or foreign node: {p:?}");
    }
    assert!(a.list_rooms().await.unwrap().iter().all(|r| r.owner.as_ref().is_none_or(|o| o.node_id == "a")));
    let rejected = a.stats().node_records_rejected_total;
    assert!(rejected >= 3, "rejections are counted: {rejected}");
    assert!(
        a.stats()
            .samples()
            .iter()
            .any(|s| s.name == "tutti_cluster_node_records_rejected_total" && s.value == rejected as f64)
    );
    drop(other);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_record_outside_the_allowed_urls_redirects_nobody() {
    let redis = RedisServer::start();
    let allowed = vec!["http://*.test:8080".to_owned()];
    let a = Cluster::start(ClusterConfig { allowed_api_urls: allowed.clone(), ..config(&redis, "a") }, SECRET)
        .await
        .expect("a's own URL matches");
    // Same secret (its records are signed), but a URL outside the rules.
    let odd = Cluster::start(
        ClusterConfig { api_url: "http://b.elsewhere.example:8080".into(), ..config(&redis, "b") },
        SECRET,
    )
    .await
    .expect("start");
    let c = common::start(&redis, "c").await;
    let ids: Vec<String> = a.nodes().await.unwrap().into_iter().map(|n| n.id).collect();
    assert_eq!(ids, ["a", "c"], "b's URL is not allowed");
    assert!(matches!(odd.claim("held-by-b", None).await.unwrap(), Placement::Local { .. }));
    assert_eq!(a.locate("held-by-b").await.unwrap(), None);
    assert!(matches!(a.place("held-by-b", None).await, Err(ClusterError::Untrusted(_))));
    assert!(
        matches!(c.place("held-by-b", None).await.unwrap(), Placement::Remote(o) if o.node_id == "b"),
        "c has no rules"
    );
    assert!(a.stats().node_records_rejected_total >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_record_replayed_after_the_node_ttl_redirects_nobody() {
    let redis = RedisServer::start();
    let a = common::start(&redis, "a").await;
    let b = common::start(&redis, "b").await;
    // A Redis writer keeps b's genuine, signed record …
    redis.command(&["COPY", "tutti:node:b", "tutti:saved"]);
    redis.command(&["PERSIST", "tutti:saved"]);
    b.shutdown().await.expect("b leaves");
    drop(b);
    // … and puts it back once b is gone for longer than the node TTL (2 s).
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    redis.command(&["COPY", "tutti:saved", "tutti:node:b", "REPLACE"]);
    redis.command(&["PEXPIRE", "tutti:node:b", "600000"]);
    redis.command(&["SADD", "tutti:nodes", "b"]);
    redis.command(&["SET", "tutti:lease:victim", "b:3", "PX", "600000"]);
    let ids: Vec<String> = a.nodes().await.unwrap().into_iter().map(|n| n.id).collect();
    assert_eq!(ids, ["a"], "a replayed record is no node");
    assert_eq!(a.locate("victim").await.unwrap(), None, "a replayed owner is no owner");
    assert!(a.stats().node_records_rejected_total >= 1, "counted");
}

/// Node `id` with a heartbeat every `heartbeat` seconds (TTLs 10 s, the same
/// on every node: a record is fresh for the reader's `node_ttl_seconds`).
async fn start_beating(redis: &RedisServer, id: &str, heartbeat: f64) -> Cluster {
    let cfg = ClusterConfig {
        heartbeat_interval_seconds: heartbeat,
        node_ttl_seconds: 10.0,
        lease_ttl_seconds: 10.0,
        ..config(redis, id)
    };
    Cluster::start(cfg, SECRET).await.expect("start cluster node")
}

/// Node `a` (a heartbeat every 5 s: it does not write its number key back
/// while the test starts another), and, as a writer to Redis would, its
/// number key deleted and the counter wound back, so that the next `INCR`
/// gives `a`'s number again.
async fn a_with_its_number_given_away(redis: &RedisServer) -> (Cluster, u32) {
    let a = start_beating(redis, "a", 5.0).await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let number = a.node_number();
    redis.command(&["DEL", &format!("tutti:number:{number}")]);
    redis.command(&["SET", "tutti:node_numbers", &(number - 1).to_string()]);
    (a, number)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_number_given_out_again_through_redis_is_skipped_at_start() {
    let redis = RedisServer::start();
    let (a, taken) = a_with_its_number_given_away(&redis).await;
    let b = start_beating(&redis, "b", 5.0).await;
    assert_ne!(b.node_number(), taken, "b did not take a's number, named in a's signed record");
    assert_eq!(b.stats().node_number_conflicts_total, 1, "the skipped number is counted");
    let mut numbers: Vec<(String, Option<u32>)> =
        a.nodes().await.unwrap().into_iter().map(|n| (n.id, n.number)).collect();
    numbers.sort();
    assert_eq!(numbers, [("a".into(), Some(taken)), ("b".into(), Some(b.node_number()))], "both serve");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_number_shared_with_a_live_node_is_reported() {
    let redis = RedisServer::start();
    let (a, taken) = a_with_its_number_given_away(&redis).await;
    // The writer deletes a's record too: b, starting, sees no node with that number …
    redis.command(&["DEL", "tutti:node:a"]);
    let b = start_beating(&redis, "b", 0.5).await;
    assert_eq!(b.node_number(), taken, "with no record naming it, the number is free");
    // … until a's next heartbeat writes its record back: b's registry scan finds the clash.
    a.heartbeat().await.unwrap();
    let seen =
        common::wait_for(std::time::Duration::from_secs(3), || async { b.stats().node_number_conflicts_total == 1 })
            .await;
    assert!(seen.is_some(), "b reports the clash");
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(b.stats().node_number_conflicts_total, 1, "once per clash, not once per scan");
    assert_eq!(a.nodes().await.unwrap().len(), 2, "both still serve");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_config_written_or_moved_by_hand_is_never_applied() {
    let redis = RedisServer::start();
    let a = common::start(&redis, "a").await;
    let genuine = r#"{"max_participants":5}"#;
    assert!(matches!(a.claim("real", Some(genuine)).await.unwrap(), Placement::Local { .. }));
    assert_eq!(a.room_config("real").await.unwrap().as_deref(), Some(genuine), "a node's own config reads back");
    // A writer to Redis: a config of its own, and the genuine one (with its signature) copied to another room.
    let forged = r#"{"max_participants":1,"handover":{"locked":true}}"#;
    redis.command(&["HSET", "tutti:room:forged", "config", forged, "config_sig", "AAAA"]);
    redis.command(&["SADD", "tutti:rooms", "forged"]);
    redis.command(&["COPY", "tutti:room:real", "tutti:room:copied"]);
    redis.command(&["SADD", "tutti:rooms", "copied"]);
    assert_eq!(a.room_config("forged").await.unwrap(), None, "a config signed by nobody");
    assert_eq!(a.room_config("copied").await.unwrap(), None, "another room's config");
    assert_eq!(a.stats().room_configs_rejected_total, 2, "counted");
    let listed: Vec<(String, Option<String>)> =
        a.list_rooms().await.unwrap().into_iter().map(|r| (r.room, r.config)).collect();
    assert_eq!(
        listed,
        [("copied".into(), None), ("forged".into(), None), ("real".into(), Some(genuine.into()))],
        "the listing shows only signed configs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn room_events_published_by_hand_or_replayed_reach_no_watcher() {
    use std::time::Duration;
    let redis = RedisServer::start();
    let (a, b) = (common::start(&redis, "a").await, common::start(&redis, "b").await);
    let mut watcher = a.watch("r").await.unwrap();
    // A writer to Redis listens on the room's channel and keeps one of b's genuine events.
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let url = redis.url();
    let listener = std::thread::spawn(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let mut pubsub = con.as_pubsub();
        pubsub.subscribe("tutti:events:r").unwrap();
        pubsub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        ready_tx.send(()).unwrap();
        pubsub.get_message().unwrap().get_payload::<String>().unwrap()
    });
    ready.recv().unwrap();
    b.publish_event("r", r#"{"type":"joined","id":1}"#.into());
    let genuine = listener.join().unwrap();
    let e = tokio::time::timeout(Duration::from_secs(2), watcher.recv()).await.expect("in time").unwrap();
    assert_eq!((e.origin.as_str(), e.event.as_str()), ("b", r#"{"type":"joined","id":1}"#), "b's own gets through");

    // Then speaks for b: unsigned, with a made-up signature, and b's signature on another event.
    let moved = r#"{"type":"moved","url":"http://evil.example"}"#;
    let (origin, stamp) = genuine.split('\n').zip(genuine.split('\n').skip(1)).next().unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    for forged in
        [format!("{origin}\n{moved}"), format!("b\n{now} AAAA\n{moved}"), format!("{origin}\n{stamp}\n{moved}")]
    {
        redis.command(&["PUBLISH", "tutti:events:r", &forged]);
    }
    // And puts b's genuine event back once it is older than the node TTL (2 s).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    redis.command(&["PUBLISH", "tutti:events:r", &genuine]);
    b.publish_event("r", r#"{"type":"left","id":1}"#.into());
    let e = tokio::time::timeout(Duration::from_secs(2), watcher.recv()).await.expect("in time").unwrap();
    assert_eq!(e.event, r#"{"type":"left","id":1}"#, "nothing forged nor replayed came before b's next event");
    assert_eq!(a.stats().events_refused_total, 4, "each counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roster_entries_written_by_hand_are_refused() {
    use tutti_cluster::RosterWrite;
    let redis = RedisServer::start();
    let (a, b) = (common::start(&redis, "a").await, common::start(&redis, "b").await);
    let base = u64::from(b.node_number()) << 32;
    let members = [("b".to_owned(), b.node_number())];
    let entry = |id: u64, name: &str| (id, format!(r#"{{"id":{id},"name":"{name}"}}"#));
    for room in ["r", "s"] {
        let whole =
            RosterWrite { room: room.into(), full: true, upserts: vec![entry(base + 1, "ann")], removals: vec![] };
        b.write_rosters(&[whole]).await.unwrap();
    }
    let read = a.rosters("r", &members, 10).await.unwrap();
    assert_eq!((read.entries.len(), read.refused), (1, 0), "b's own entry is read");

    // A writer to Redis adds a phantom of b's number (an admin), changes ann,
    // and copies another room's genuine entry in.
    let roster = "tutti:roster:r:b";
    let phantom = format!(r#"{{"id":{},"name":"phantom","admin":true}}"#, base + 9);
    redis.command(&["HSET", roster, &(base + 9).to_string(), &phantom]);
    let genuine: String = redis::from_redis_value(redis.command(&["HGET", roster, &(base + 1).to_string()])).unwrap();
    let changed = genuine.replace(r#""name":"ann""#, r#""name":"ann","admin":true"#);
    assert_ne!(changed, genuine);
    let other: String =
        redis::from_redis_value(redis.command(&["HGET", "tutti:roster:s:b", &(base + 1).to_string()])).unwrap();
    redis.command(&["HSET", roster, &(base + 1).to_string(), &changed]);
    redis.command(&[
        "HSET",
        roster,
        &(base + 2).to_string(),
        &other.replace(&(base + 1).to_string(), &(base + 2).to_string()),
    ]);
    redis.command(&["HSET", "tutti:roster:s:b", &(base + 3).to_string(), &other]);
    let read = a.rosters("r", &members, 10).await.unwrap();
    assert!(read.entries.is_empty(), "nothing forged is read: {:?}", read.entries);
    assert_eq!(read.refused, 3, "each counted");
    let read = a.rosters("s", &members, 10).await.unwrap();
    assert_eq!((read.entries.len(), read.refused), (1, 1), "an entry moved to another id is refused");

    // b's next full write puts its roster right.
    let whole = RosterWrite { room: "r".into(), full: true, upserts: vec![entry(base + 1, "ann")], removals: vec![] };
    b.write_rosters(&[whole]).await.unwrap();
    let read = a.rosters("r", &members, 10).await.unwrap();
    assert_eq!((read.entries.len(), read.refused), (1, 0));
    assert_eq!(read.entries[0].summary["name"], "ann");
}
