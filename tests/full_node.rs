//! A node at its `max_participants` sends a join of a spread room to
//! another node of the cluster, as a join past `cluster.capacity` goes,
//! rather than refusing it with `503 server_full` (issue 40, item 6): two
//! real nodes on a real Redis, and the caller hears the room.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::cluster::{Node, Redis, SECRET, join_placed, send, shared_ports, until_they_hear};
use tutti_client::{JoinAs, Requester, ToneClient};
use tutti_server::auth::{Auth, Grant, unix_now};

#[test]
fn a_full_node_sends_a_join_to_a_node_with_room() {
    let redis = Redis::start();
    let ports = shared_ports();
    // Node A holds two people (far below `cluster.capacity`, 100 in tests); node B more.
    let spread = ("TUTTI_CLUSTER_ROOM_SPREAD", "when_full");
    let a = Node::start_with(2, ports, &redis, &[spread, ("TUTTI_MAX_PARTICIPANTS", "2")]);
    let b = Node::start_with(3, ports, &redis, &[spread]);
    a.wait_ready();
    b.wait_ready();
    let admin = Auth::new(SECRET).unwrap().mint(&Grant::admin("ops"), Duration::from_secs(600), unix_now()).unwrap();
    let (r, _) = send(a.api, &admin, "POST", "/v1/rooms", r#"{"id":"hall"}"#);
    assert_eq!(r.status, 201, "{}", r.body);
    // Two people on A (placed there, as a redirect would): A is full.
    let mut first = join_placed(a.api, "hall", "first", 440.0).unwrap();
    let _second = join_placed(a.api, "hall", "second", 550.0).unwrap();

    // A fresh join through A goes to B (one redirect), not 503 server_full …
    let joined = ToneClient::join_following(a.api, &Requester::token(&admin), "hall", 660.0, JoinAs::Whip, 2);
    let (mut third, hops) = joined.unwrap_or_else(|e| panic!("the join through a full node was refused: {e}"));
    assert_eq!(hops, 1, "placed on the other node");
    let on = |n: &Node| common::cluster::json(&send(n.api, &admin, "GET", "/v1/node", "").0)["participants"].clone();
    assert_eq!((on(&a), on(&b)), (serde_json::json!(2), serde_json::json!(1)), "two on A, the third on B");
    // … where the room reaches it over the mesh: the first caller and the third hear each other.
    assert!(
        until_they_hear(&mut [&mut first, &mut third], Duration::from_secs(15)),
        "A's caller and B's hear each other"
    );

    // A join redirected to A with a ticket (a client never bounces) is still refused there, clearly.
    let refused = join_placed(a.api, "hall", "fourth", 770.0).map(|_| ()).unwrap_err();
    assert_eq!(refused.0, 503, "{}", refused.1);
    assert!(refused.1.contains("server_full"), "{}", refused.1);
}
