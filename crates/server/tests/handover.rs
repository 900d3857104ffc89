//! A drained node hands its room to another node as the room stands: its
//! limits as changed since it was made, its lock and its bans. Two nodes in
//! this process and a real redis-server: a locked room with a banned
//! identity is handed over; the participant who was in it comes back
//! through the lock on the new node, a newcomer does not, and the banned
//! identity stays out once the room is unlocked there.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{call, cluster_node, cluster_room};
use serde_json::Value;
use tutti_client::redis::RedisServer;
use tutti_client::{JoinAs, Requester, ToneClient, run_until};
use tutti_server::auth::Grant;

fn join(api: SocketAddr, token: &str) -> Result<ToneClient, tutti_client::JoinError> {
    ToneClient::join_following(api, &Requester::token(token), "kept", 440.0, JoinAs::Whip, 2).map(|(c, _)| c)
}

fn refusal(e: tutti_client::JoinError) -> (u16, String) {
    match e {
        tutti_client::JoinError::Refused { status, body } => {
            let v: Value = serde_json::from_str(&body).unwrap_or_default();
            (status, v["code"].as_str().unwrap_or_default().to_owned())
        }
        e => panic!("not a refusal: {e:?}"),
    }
}

#[test]
fn a_handed_over_room_keeps_its_limits_lock_and_bans() {
    let redis = RedisServer::start();
    let nodes = [cluster_node([127, 0, 0, 2], "node-2", &redis), cluster_node([127, 0, 0, 3], "node-3", &redis)];
    let apis = [nodes[0].1.http_addr(), nodes[1].1.http_addr()];
    let mint = |g: &Grant| nodes[0].1.mint_token(g, Duration::from_secs(600)).expect("token");
    let admin = mint(&Grant::admin("ops"));
    let (ann, eve, zed) = (
        mint(&Grant::participant("kept", "ann")),
        mint(&Grant::participant("kept", "eve")),
        mint(&Grant::participant("kept", "zed")),
    );
    let from = cluster_room(&apis, &admin, "kept", r#"{"id":"kept","max_participants":6}"#);
    let (old, new) = (apis[from], apis[1 - from]);

    // ann is in the call; eve is kicked with a ban; then the room is locked
    // and its speaker limit changed.
    let mut a = join(old, &ann).expect("ann joins");
    let e = join(old, &eve).expect("eve joins");
    assert!(run_until(&mut [&mut a], Instant::now() + Duration::from_secs(10), |c| c[0].connected), "connects");
    let room = |api| call(api, &admin, "GET", "/v1/rooms/kept", "");
    let listed: Value = serde_json::from_str(&room(old).body).expect("JSON");
    let eve_id = listed["participants"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["identity"] == "eve").and_then(|p| p["id"].as_u64()));
    let eve_id = eve_id.expect("eve is listed");
    let r = call(old, &admin, "DELETE", &format!("/v1/rooms/kept/participants/{eve_id}?ban_seconds=600"), "");
    assert_eq!(r.status, 204, "{}", r.body);
    drop(e);
    let r = call(old, &admin, "PATCH", "/v1/rooms/kept", r#"{"locked":true,"max_speakers":3}"#);
    assert_eq!(r.status, 200, "{}", r.body);

    // The drain: ann's call is closed; she rejoins through the other node.
    let r = call(old, &admin, "POST", "/v1/node/drain", "");
    assert_eq!(r.status, 202, "{}", r.body);
    assert!(run_until(&mut [&mut a], Instant::now() + Duration::from_secs(10), |c| c[0].closed), "ann's call closed");
    let mut a2 = join(new, &ann).expect("ann comes back through the lock");
    assert!(run_until(&mut [&mut a2], Instant::now() + Duration::from_secs(10), |c| c[0].connected), "connects");

    // The room there, as it stood.
    let r = room(new);
    assert_eq!(r.status, 200, "{}", r.body);
    let there: Value = serde_json::from_str(&r.body).expect("JSON");
    assert_eq!(there["room"]["node"], ["node-2", "node-3"][1 - from], "{there}");
    assert_eq!(there["room"]["locked"], true, "{there}");
    assert_eq!(there["room"]["max_participants"], 6, "{there}");
    assert_eq!(there["room"]["max_speakers"], 3, "{there}");
    assert_eq!(there["bans"], 1, "{there}");

    // Nobody new comes through the lock; unlocked, the ban still holds.
    assert_eq!(refusal(join(new, &zed).expect_err("zed is refused")), (423, "room_locked".to_owned()));
    let r = call(new, &admin, "PATCH", "/v1/rooms/kept", r#"{"locked":false}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(refusal(join(new, &eve).expect_err("eve is refused")), (403, "banned".to_owned()));
    let _z = join(new, &zed).expect("zed joins the unlocked room");
    drop(nodes);
}
