//! The stage's operations on a real room with real accepted peers, without
//! sockets or threads.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tutti_mix::{RoomConfig, SpeakerLimit};

use super::super::tests::events;
use super::super::{Joiner, LeaveReason, Room, RoomError, RoomEvent, Rooms};
use super::RoomUpdate;
use crate::sync::lock;

fn rooms() -> Rooms {
    let cfg = RoomConfig { max_participants: 10, max_speakers: SpeakerLimit::Top(5), ..RoomConfig::default() };
    Rooms::new(cfg, 2, 20).expect("valid defaults")
}

/// Peers of one acceptor (one per test process: peer ids are unique across it).
fn acceptor() -> &'static tutti_rtc::Acceptor {
    static ACCEPTOR: std::sync::OnceLock<tutti_rtc::Acceptor> = std::sync::OnceLock::new();
    ACCEPTOR.get_or_init(|| {
        tutti_rtc::Acceptor::new(SocketAddr::from(([127, 0, 0, 1], 4000)), Duration::from_secs(10)).expect("acceptor")
    })
}

fn joiner(identity: &str, listen_only: bool, admin: bool) -> Joiner {
    let now = Instant::now();
    let acceptor = acceptor();
    let (_client, offer) =
        tutti_rtc::ClientPeer::new(SocketAddr::from(([127, 0, 0, 1], 50_000)), now).expect("client offer");
    let (peer, _answer) = acceptor.accept(&offer, now).expect("accepted");
    Joiner {
        peer,
        name: String::new(),
        identity: identity.to_owned(),
        listen_only,
        admin: if admin { crate::room::Admin::OfRoom } else { crate::room::Admin::No },
        attributes: Default::default(),
        stereo: false,
    }
}

/// (listen_only, muted, hand, the I/O thread's gate) of a member.
fn state(room: &Room, id: u64) -> (bool, bool, bool, bool) {
    let members = lock(&room.members);
    let m = members.get(&id).expect("member");
    (m.listen_only, m.muted, m.hand, m.gate.get())
}

#[test]
fn speak_is_granted_and_revoked_at_runtime_with_hands_lowered_on_grant() {
    let rooms = rooms();
    let room = rooms.create("stage", None, None).expect("room");
    let mut rx = room.subscribe();
    let lena = rooms.join(&room, joiner("lena", true, false), Instant::now()).expect("join");
    assert_eq!(state(&room, lena), (true, true, false, true), "listen-only: muted, gate closed");
    events(&room, &mut rx);

    assert_eq!(rooms.set_hand(&room, lena, true), Ok(true));
    assert_eq!(rooms.set_hand(&room, lena, true), Ok(false), "raised twice: no change");
    assert_eq!(events(&room, &mut rx), vec![RoomEvent::Hand { id: lena, raised: true }]);
    // A listener cannot unmute itself before the grant.
    assert_eq!(rooms.set_muted(&room, lena, false), Err(RoomError::ListenOnly(lena)));

    assert_eq!(rooms.set_speak(&room, lena, true), Ok(true));
    assert_eq!(state(&room, lena), (false, false, false, false), "granted: unmuted, gate open, hand down");
    assert_eq!(
        events(&room, &mut rx),
        vec![
            RoomEvent::Permissions { id: lena, speak: true },
            RoomEvent::Muted { id: lena, muted: false },
            RoomEvent::Hand { id: lena, raised: false },
        ]
    );
    assert_eq!(rooms.set_speak(&room, lena, true), Ok(false), "granted twice: no change, no event");
    assert!(events(&room, &mut rx).is_empty());
    // A speaker mutes and unmutes itself as any other.
    rooms.set_muted(&room, lena, true).expect("mute");
    rooms.set_muted(&room, lena, false).expect("unmute");
    events(&room, &mut rx);

    assert_eq!(rooms.set_speak(&room, lena, false), Ok(true));
    assert_eq!(state(&room, lena), (true, true, false, true), "revoked: muted, gate closed");
    assert_eq!(
        events(&room, &mut rx),
        vec![RoomEvent::Permissions { id: lena, speak: false }, RoomEvent::Muted { id: lena, muted: true }]
    );
    assert_eq!(rooms.set_muted(&room, lena, false), Err(RoomError::ListenOnly(lena)));
    assert_eq!(rooms.set_speak(&room, 999, true), Err(RoomError::NoParticipant(999)));
    assert_eq!(rooms.set_hand(&room, 999, true), Err(RoomError::NoParticipant(999)));
}

#[test]
fn a_patch_locks_resizes_and_mutes_all_but_admins() {
    let rooms = rooms();
    let room = rooms.create("town-hall", None, None).expect("room");
    let host = rooms.join(&room, joiner("host", false, true), Instant::now()).expect("join");
    let a = rooms.join(&room, joiner("a", false, false), Instant::now()).expect("join");
    let b = rooms.join(&room, joiner("b", false, false), Instant::now()).expect("join");
    let lena = rooms.join(&room, joiner("lena", true, false), Instant::now()).expect("join");
    rooms.set_muted(&room, b, true).expect("b mutes itself");
    let mut rx = room.subscribe();
    events(&room, &mut rx);

    // Bad values change nothing, not even the valid ones beside them.
    for bad in [
        RoomUpdate { max_participants: Some(0), locked: Some(true), ..RoomUpdate::default() },
        RoomUpdate { max_speakers: Some(0), ..RoomUpdate::default() },
        RoomUpdate { max_speakers: Some(17), max_participants: Some(5), ..RoomUpdate::default() },
        RoomUpdate { max_participants: Some(1_000_000), ..RoomUpdate::default() },
    ] {
        assert!(matches!(rooms.update_room(&room, bad), Err(RoomError::BadValue(_))), "{bad:?}");
    }
    assert!(!room.is_locked());
    assert_eq!((room.max_participants(), room.max_speakers()), (10, 5));
    assert!(events(&room, &mut rx).is_empty());

    let update = RoomUpdate { locked: Some(true), max_speakers: Some(2), ..RoomUpdate::default() };
    assert_eq!(rooms.update_room(&room, update), Ok(0));
    assert_eq!(
        events(&room, &mut rx),
        vec![RoomEvent::RoomUpdated { locked: true, max_participants: 10, max_speakers: 2 }]
    );
    assert_eq!(rooms.admit(&room, "late", "", Instant::now()), Err(RoomError::Locked("town-hall".into())));
    assert!(matches!(rooms.join(&room, joiner("late", false, true), Instant::now()), Err(RoomError::Locked(_))));
    rooms.update_room(&room, RoomUpdate { locked: Some(false), ..RoomUpdate::default() }).expect("unlock");
    assert_eq!(rooms.admit(&room, "late", "", Instant::now()), Ok(()));
    // Smaller than the room is now: nobody leaves, nobody new comes in.
    rooms.update_room(&room, RoomUpdate { max_participants: Some(3), ..RoomUpdate::default() }).expect("resize");
    assert_eq!(room.len(), 4);
    assert!(matches!(rooms.check_space(&room), Err(RoomError::RoomFull { max: 3, .. })));
    events(&room, &mut rx);

    // Mute all: a (unmuted, no admin) is muted; b and lena were muted; the host is spared.
    assert_eq!(rooms.update_room(&room, RoomUpdate { mute_all: true, ..RoomUpdate::default() }), Ok(1));
    assert_eq!(events(&room, &mut rx), vec![RoomEvent::Muted { id: a, muted: true }, RoomEvent::MutedAll { count: 1 }]);
    let muted: Vec<(u64, bool)> = room.member_list().iter().map(|m| (m.id, m.muted)).collect();
    assert_eq!(muted, vec![(host, false), (a, true), (b, true), (lena, true)]);
    // A participant with the right to speak may unmute itself afterwards.
    assert_eq!(rooms.set_muted(&room, a, false), Ok(()));
}

#[test]
fn a_kick_with_a_ban_keeps_the_identity_out_until_it_ends() {
    let rooms = rooms();
    let room = rooms.create("r", None, None).expect("room");
    let now = Instant::now();
    let troll = rooms.join(&room, joiner("troll", false, false), now).expect("join");
    let other = rooms.join(&room, joiner("fine", false, false), now).expect("join");
    let mut rx = room.subscribe();
    events(&room, &mut rx);

    // A bad ban is refused and the participant stays.
    for bad in [Duration::ZERO, Duration::from_secs(super::MAX_BAN_SECONDS + 1)] {
        assert!(matches!(rooms.kick(&room, troll, Some(bad), now), Err(RoomError::BadValue(_))));
    }
    assert_eq!(room.len(), 2);

    let effect = rooms.kick(&room, troll, Some(Duration::from_secs(60)), now).expect("kicked");
    assert_eq!(effect, None, "never adopted by an I/O thread: nothing to close there");
    assert_eq!(events(&room, &mut rx), vec![RoomEvent::Left { id: troll, reason: LeaveReason::Kicked.as_str() }]);
    assert_eq!(rooms.bans(&room, now), 1);
    assert_eq!(rooms.admit(&room, "troll", "", now + Duration::from_millis(100)), Err(RoomError::Banned(60)));
    assert_eq!(rooms.admit(&room, "troll", "another name", now + Duration::from_secs(59)), Err(RoomError::Banned(1)));
    assert!(matches!(rooms.join(&room, joiner("troll", false, false), now), Err(RoomError::Banned(_))));
    assert_eq!(rooms.admit(&room, "someone", "troll", now), Ok(()), "a ban is by identity, not by name");
    // After the ban, the identity is welcome again (and the ban forgotten).
    assert_eq!(rooms.admit(&room, "troll", "", now + Duration::from_secs(61)), Ok(()));
    assert_eq!(rooms.bans(&room, now + Duration::from_secs(61)), 0);

    // Gone already: no identity to ban.
    assert_eq!(rooms.kick(&room, troll, Some(Duration::from_secs(60)), now), Err(RoomError::NoParticipant(troll)));
    // A kick without a ban: out, welcome back at once.
    rooms.kick(&room, other, None, now).expect("kicked");
    assert_eq!(rooms.admit(&room, "fine", "", now), Ok(()));
    assert_eq!(rooms.bans(&room, now), 0);
}

#[test]
fn without_an_identity_a_ban_goes_by_display_name() {
    let rooms = rooms();
    let room = rooms.create("open", None, None).expect("room");
    let now = Instant::now();
    let mut j = joiner("", false, true);
    j.name = "mallory".into();
    let id = rooms.join(&room, j, now).expect("join");
    rooms.kick(&room, id, Some(Duration::from_secs(5)), now).expect("kicked");
    assert_eq!(rooms.admit(&room, "", "mallory", now), Err(RoomError::Banned(5)));
    assert_eq!(rooms.admit(&room, "", "alice", now), Ok(()));
}

#[test]
fn a_drain_carries_the_lock_and_bans_and_lets_the_room_back_in() {
    let (old, new) = (rooms(), rooms());
    let room = old.create("carried", None, None).expect("room");
    let now = Instant::now();
    let ann = old.join(&room, joiner("ann", false, false), now).expect("join");
    let eve = old.join(&room, joiner("eve", false, false), now).expect("join");
    old.kick(&room, eve, Some(Duration::from_secs(600)), now).expect("kicked");
    let update = RoomUpdate { locked: Some(true), ..RoomUpdate::default() };
    old.update_room(&room, update).expect("locked");
    let carried = old.carry_stage(&room, 1_000_030, now, 1_000_000);
    assert!(carried.locked);
    assert_eq!(carried.bans, vec![("id:eve".to_owned(), 1_000_600)]);
    assert_eq!(carried.returning, vec!["id:ann".to_owned()], "ann was in the room: {ann}");

    // Through JSON (the room's stored config), as the new node reads it.
    let carried: super::CarriedStage =
        serde_json::from_str(&serde_json::to_string(&carried).expect("JSON")).expect("read back");
    let there = new.create("carried", None, None).expect("room");
    new.restore_stage(&there, &carried, now, 1_000_000);
    assert!(there.is_locked());
    assert_eq!(new.bans(&there, now), 1);
    assert_eq!(new.admit(&there, "ann", "", now), Ok(()), "ann comes back through the lock");
    assert_eq!(new.admit(&there, "zed", "", now), Err(RoomError::Locked("carried".into())), "a newcomer does not");
    assert_eq!(new.admit(&there, "eve", "", now), Err(RoomError::Locked("carried".into())));
    // Until the drain's deadline only.
    let later = now + Duration::from_secs(31);
    assert_eq!(new.admit(&there, "ann", "", later), Err(RoomError::Locked("carried".into())));
    // Unlocked, the ban still holds.
    new.update_room(&there, RoomUpdate { locked: Some(false), ..RoomUpdate::default() }).expect("unlocked");
    assert!(matches!(new.admit(&there, "eve", "", later), Err(RoomError::Banned(s)) if s > 500));

    // Stale (past its deadline), or from Redis with keys nobody makes: left out.
    let other = new.create("stale", None, None).expect("room");
    new.restore_stage(&other, &carried, now, 1_000_031);
    assert!(!other.is_locked());
    let forged = super::CarriedStage {
        until: 2_000_000,
        locked: false,
        bans: vec![("id:".to_owned() + &"x".repeat(600), 1_000_600), ("id:old".to_owned(), 999_999)],
        returning: Vec::new(),
    };
    new.restore_stage(&other, &forged, now, 1_000_000);
    assert_eq!(new.bans(&other, now), 0, "too long a key, and a ban already over");
}
