//! Redirect tickets across nodes: valid once, replay, expiry, tampering
//! and another room refused.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::{RedisServer, SECRET, start};
use tutti_cluster::{TICKET_PURPOSE, TicketError, TicketKey, derive_key, redirect_location};

const WHIP: (&str, &str) = ("POST", "/v1/rooms/r/whip");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickets_are_valid_once_and_only_as_minted() {
    let redis = RedisServer::start();
    let (a, b) = (start(&redis, "a").await, start(&redis, "b").await);
    let grants = serde_json::json!({"room": "r", "publish": true});

    // Minted by the redirecting node a, checked by the owner b.
    let ticket = a.mint_ticket("r", "alice", grants.clone(), WHIP).unwrap();
    let location = redirect_location("http://b.test:8080", "/v1/rooms/r/whip", &ticket);
    assert_eq!(location, format!("http://b.test:8080/v1/rooms/r/whip?ticket={ticket}"));
    let claims = b.verify_ticket(&ticket, "r", WHIP).await.unwrap();
    assert_eq!((claims.identity.as_str(), &claims.grants), ("alice", &grants));
    // Replay, on the owner or on any other node.
    assert_eq!(b.verify_ticket(&ticket, "r", WHIP).await, Err(TicketError::Replayed));
    assert_eq!(a.verify_ticket(&ticket, "r", WHIP).await, Err(TicketError::Replayed));

    // Expired: minted 60 s ago with the cluster's key and a 30 s lifetime.
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let (old, _) = TicketKey::new(&derive_key(SECRET, TICKET_PURPOSE), 30)
        .mint("r", "alice", grants.clone(), WHIP, now - 60)
        .unwrap();
    assert_eq!(b.verify_ticket(&old, "r", WHIP).await, Err(TicketError::Expired));

    // Tampered: one character of the signature changed; or signed with another secret.
    let fresh = a.mint_ticket("r", "alice", grants.clone(), WHIP).unwrap();
    let mut bytes = fresh.clone().into_bytes();
    let last = bytes.len() - 2;
    bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(bytes).unwrap();
    assert_eq!(b.verify_ticket(&tampered, "r", WHIP).await, Err(TicketError::BadSignature));
    let (foreign, _) = TicketKey::new(b"some other cluster's secret, 32 bytes", 30)
        .mint("r", "eve", grants.clone(), WHIP, now)
        .unwrap();
    assert_eq!(b.verify_ticket(&foreign, "r", WHIP).await, Err(TicketError::BadSignature));
    // Another room: refused, and the ticket is not burnt by the refusal.
    assert_eq!(b.verify_ticket(&fresh, "s", WHIP).await, Err(TicketError::WrongRoom));
    // Another request (an admin's DELETE ticket used for anything else): refused, not burnt.
    assert_eq!(b.verify_ticket(&fresh, "r", ("DELETE", "/v1/rooms/r/whip")).await, Err(TicketError::WrongRequest));
    assert_eq!(b.verify_ticket(&fresh, "r", ("POST", "/v1/rooms/r")).await, Err(TicketError::WrongRequest));
    assert!(b.verify_ticket(&fresh, "r", WHIP).await.is_ok());
    assert_eq!(b.verify_ticket("not a ticket", "r", WHIP).await, Err(TicketError::Malformed));
    // The raw auth.secret is not the ticket key: a ticket signed with it is refused.
    let (raw, _) = TicketKey::new(SECRET, 30).mint("r", "alice", grants, WHIP, now).unwrap();
    assert_eq!(b.verify_ticket(&raw, "r", WHIP).await, Err(TicketError::BadSignature));

    let s = b.stats();
    assert_eq!((s.tickets_accepted_total, s.tickets_refused_total), (2, 9));
    assert_eq!(a.stats().tickets_minted_total, 2);
}
