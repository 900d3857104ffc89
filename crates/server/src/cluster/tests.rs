//! Unit tests of the cluster glue: room locks, redirect tickets, stored configs.

use axum::http::Method;

use super::hosting::StoredConfig;
use super::locks::RoomLocks;
use super::tickets::least_grant;
use crate::auth::Grant;

#[tokio::test]
async fn a_room_lock_is_shared_by_joins_sole_for_a_release_and_kept_only_while_wanted() {
    use std::time::Duration;
    let locks = RoomLocks::default();
    let join = locks.share("r").await;
    let _other_join = locks.share("r").await;
    assert!(locks.try_lock("r").is_none(), "a release waits for the joins");
    let other = locks.try_lock("s").expect("another room's lock is free");
    drop(other);
    assert_eq!(locks.len(), 1, "a room's entry goes with its last holder");
    // A wait given up (its request dropped) leaves nothing behind.
    let gave_up = tokio::time::timeout(Duration::from_millis(20), locks.lock("r")).await;
    assert!(gave_up.is_err(), "the joins still hold it");
    drop((join, _other_join));
    let release = locks.lock("r").await;
    // A join waits for the release, then has the lock.
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move { drop(locks.share("r").await) }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!waiter.is_finished(), "waits while the release holds it");
    drop(release);
    waiter.await.expect("the join has the lock");
    assert_eq!(locks.len(), 0, "no room held or awaited: no entry");
}

#[test]
fn a_redirect_ticket_carries_the_least_grant_its_request_needs() {
    let admin = Grant::admin("ops");
    let g = |method: Method, path: &str| {
        let l = least_grant(&admin, "r", &method, path);
        assert_eq!((l.room.as_str(), l.identity.as_str()), ("r", "ops"), "never '*'");
        (l.speak, l.listen, l.admin)
    };
    // An admin's DELETE of the room: admin for that room, nothing else.
    assert_eq!(g(Method::DELETE, "/v1/rooms/r"), (false, false, true));
    assert_eq!(g(Method::PATCH, "/v1/rooms/r"), (false, false, true));
    assert_eq!(g(Method::POST, "/v1/rooms"), (false, false, true));
    // An admin joining: a moderator of that room (that request only).
    assert_eq!(g(Method::POST, "/v1/rooms/r/participants"), (true, true, true));
    // Acting on a participant may be a kick: all it had, for that path only.
    assert_eq!(g(Method::PATCH, "/v1/rooms/r/participants/7"), (true, true, true));
    // Reads: see, nothing more.
    assert_eq!(g(Method::GET, "/v1/rooms/r/recording"), (false, true, false));
    assert_eq!(g(Method::POST, "/v1/rooms/r/recording"), (false, false, true));
    // The speaker feed: a GET an admin of the room opens (it stays one there).
    assert_eq!(g(Method::GET, "/v1/rooms/r/speakers"), (false, false, true));
    // A listener's join stays a listener's.
    let l = least_grant(&Grant::listener("*", "bob"), "r", &Method::POST, "/v1/rooms/r/participants");
    assert_eq!((l.speak, l.listen, l.admin, l.room.as_str()), (false, true, false, "r"));
}

#[test]
fn a_stored_config_is_read_back_and_bad_ones_take_the_defaults() {
    let c = StoredConfig::parse(Some(r#"{"max_participants":7,"max_speakers":2}"#));
    assert_eq!((c.max_participants, c.max_speakers), (Some(7), Some(2)));
    let c = StoredConfig::parse(Some(r#"{"max_participants":7,"max_speakers":null,"later":1}"#));
    assert_eq!((c.max_participants, c.max_speakers), (Some(7), None));
    let c = StoredConfig::parse(Some(r#"{"spatial":"binaural","moderation":{"wait_for_moderator":true}}"#));
    let options = c.options();
    assert_eq!(options.spatial, Some(crate::room::SpatialMode::Binaural));
    assert!(options.moderation.is_some_and(|m| m.wait_for_moderator && !m.join_muted), "{options:?}");
    assert!(StoredConfig::parse(Some(r#"{"max_participants":7}"#)).options().is_empty());
    assert_eq!(StoredConfig::parse(Some("not json")), StoredConfig::default());
    assert_eq!(StoredConfig::parse(None), StoredConfig::default());
}
