//! A room across nodes, in the directory: joins spread over three nodes on
//! a real Redis (`room_spread = "always"` and `"when_full"`), the span
//! lists the members at the lease's epoch with the mesh addresses of their
//! signed records (a forged record's address is never used), a redirected
//! join joins the span without fencing the owner, and a member leaves.

#![allow(clippy::unwrap_used)]

mod common;

use common::{RedisServer, SECRET, TestRedis, config};
use tutti_cluster::{Cluster, JoinPlacement, Load, Placement, RoomSpread};

async fn node(redis: &RedisServer, id: &str, spread: RoomSpread, mesh_port: u16) -> Cluster {
    let cfg = tutti_cluster::ClusterConfig {
        room_spread: spread,
        mesh_addr: format!("127.0.0.9:{mesh_port}"),
        ..config(redis, id)
    };
    Cluster::start(cfg, SECRET).await.expect("start cluster node")
}

fn members(span: &tutti_cluster::Span) -> Vec<(&str, u64, Option<String>)> {
    span.members.iter().map(|m| (m.node_id.as_str(), m.epoch, m.mesh_addr.map(|a| a.to_string()))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_spread_over_the_nodes_and_the_span_names_their_mesh_addresses() {
    let redis = RedisServer::start();
    let a = node(&redis, "a", RoomSpread::Always, 7001).await;
    let b = node(&redis, "b", RoomSpread::Always, 7002).await;
    let c = node(&redis, "c", RoomSpread::WhenFull, 7003).await;
    assert_eq!(a.claim("r", None).await.unwrap(), Placement::Local { epoch: 1, new: true });
    a.join_spans(&[("r".into(), 1)]).await.unwrap();

    // b: every node is empty; a tie stays where the join is: b joins the span.
    assert_eq!(b.place_join("r", false).await.unwrap(), JoinPlacement::Here { epoch: 1, owner: false });
    // a: b has a join pending now, a and c tie: it stays on a, the owner.
    assert_eq!(a.place_join("r", false).await.unwrap(), JoinPlacement::Here { epoch: 1, owner: true });
    let span = a.spans(&["r".into()]).await.unwrap().pop().unwrap();
    assert_eq!(span.lease, Some(("a".into(), 1)));
    assert_eq!(
        members(&span),
        [("a", 1, Some("127.0.0.9:7001".into())), ("b", 1, Some("127.0.0.9:7002".into()))],
        "members at the lease's epoch, with their signed records' mesh addresses"
    );
    // Loaded nodes are passed over: a join through b goes to c, the emptiest.
    a.set_load(Load { participants: 30, ..Load::default() });
    b.set_load(Load { participants: 20, ..Load::default() });
    a.heartbeat().await.unwrap();
    b.heartbeat().await.unwrap();
    match b.place_join("r", false).await.unwrap() {
        JoinPlacement::Elsewhere(node) => {
            assert_eq!((node.node_id.as_str(), node.epoch, node.api_url.as_str()), ("c", 1, "http://c.test:8080"))
        }
        other => panic!("expected a redirect to c, got {other:?}"),
    }
    // The redirected join arrives at c (ticketed): c joins the span, a stays the owner, unfenced.
    assert_eq!(c.place_join("r", true).await.unwrap(), JoinPlacement::Here { epoch: 1, owner: false });
    assert_eq!(a.owned_epoch("r"), Some(1));
    assert_eq!(a.renew_leases().await.unwrap(), Vec::new(), "nobody fenced the owner");
    let span = c.spans(&["r".into()]).await.unwrap().pop().unwrap();
    assert_eq!(span.members.iter().map(|m| m.node_id.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);

    // A record written by hand (no valid signature) naming a mesh address is never a member.
    redis.command(&["HSET", "tutti:node:evil", "api_url", "http://evil", "state", "serving", "mesh_addr", "6.6.6.6:1"]);
    redis.command(&["SADD", "tutti:nodes", "evil"]);
    redis.command(&["HSET", "tutti:span:r", "evil", "1"]);
    let span = b.spans(&["r".into()]).await.unwrap().pop().unwrap();
    assert!(span.members.iter().all(|m| m.node_id != "evil"), "{span:?}");

    // when_full: c sends a join of a room whose owner has room to the owner …
    assert_eq!(a.claim("w", None).await.unwrap(), Placement::Local { epoch: 1, new: true });
    assert!(matches!(c.place_join("w", false).await.unwrap(), JoinPlacement::Elsewhere(o) if o.node_id == "a"));
    // … and once the owner is full, elsewhere (here: c itself or b, never a).
    a.set_load(Load { busiest_thread_cpu: 1.0, ..Load::default() });
    a.heartbeat().await.unwrap();
    match c.place_join("w", false).await.unwrap() {
        JoinPlacement::Here { epoch: 1, owner: false } => {}
        JoinPlacement::Elsewhere(o) => assert_eq!(o.node_id, "b"),
        other => panic!("a full owner took the join: {other:?}"),
    }

    // when_full: an owner with room keeps a join; full by its own count (its
    // record not saying so yet), it sends a fresh join on, but keeps a redirected one.
    assert_eq!(c.claim("f", None).await.unwrap(), Placement::Local { epoch: 1, new: true });
    assert_eq!(c.place_join("f", false).await.unwrap(), JoinPlacement::Here { epoch: 1, owner: true });
    assert!(
        matches!(c.place_join_when_full("f", false).await.unwrap(), JoinPlacement::Elsewhere(o) if o.node_id == "b")
    );
    assert_eq!(c.place_join_when_full("f", true).await.unwrap(), JoinPlacement::Here { epoch: 1, owner: true });

    // A member leaves; a span of a room nobody holds lists no lease.
    b.leave_span("r").await.unwrap();
    let span = a.spans(&["r".into(), "nobody".into()]).await.unwrap();
    assert_eq!(span[0].members.iter().map(|m| m.node_id.as_str()).collect::<Vec<_>>(), ["a", "c"]);
    assert_eq!((span[1].lease.clone(), span[1].members.len()), (None, 0));
    // The span key expires by itself (three lease TTLs after its last rewrite).
    let ttl = redis.command(&["PTTL", "tutti:span:r"]);
    assert!(matches!(ttl, redis::Value::Int(ms) if ms > 0 && ms <= 12_000), "{ttl:?}");
    for n in [a, b, c] {
        n.shutdown().await.unwrap();
    }
}
