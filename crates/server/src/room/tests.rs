//! Room operations and peer routing, tick by tick, without sockets or
//! threads: real offers from real `ClientPeer`s, real accepted peers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::broadcast::error::TryRecvError;
use tutti_mix::{ParticipantId, RoomConfig, SpeakerLimit};
use tutti_rtc::PeerId;

use super::event::EventBatch;
use super::*;

fn config(participants: usize, speakers: usize) -> RoomConfig {
    RoomConfig { max_participants: participants, max_speakers: SpeakerLimit::Top(speakers), ..RoomConfig::default() }
}

fn rooms() -> Rooms {
    Rooms::new(config(3, 5), 2, 5).expect("valid defaults")
}

fn acceptor() -> tutti_rtc::Acceptor {
    tutti_rtc::Acceptor::new(SocketAddr::from(([127, 0, 0, 1], 4000)), Duration::from_secs(10)).expect("acceptor")
}

/// A peer accepted from a real client offer, and its server ufrag.
fn joiner(acceptor: &tutti_rtc::Acceptor, name: &str, listen_only: bool) -> (Joiner, String) {
    let now = Instant::now();
    let (_client, offer) =
        tutti_rtc::ClientPeer::new(SocketAddr::from(([127, 0, 0, 1], 50_000)), now).expect("client offer");
    let (peer, _answer) = acceptor.accept(&offer, now).expect("accepted");
    let ufrag = peer.ufrag().to_owned();
    (
        Joiner {
            peer,
            name: name.to_owned(),
            identity: format!("id-{}", name.trim_end_matches('\u{7}')),
            listen_only,
            admin: Default::default(),
            attributes: Default::default(),
            stereo: false,
        },
        ufrag,
    )
}

/// What subscribers get once the room's next batch goes out (also the
/// stage's tests).
pub(super) fn events(room: &Room, rx: &mut tokio::sync::broadcast::Receiver<Arc<EventBatch>>) -> Vec<RoomEvent> {
    room.flush_events();
    let mut out = Vec::new();
    loop {
        match rx.try_recv() {
            Ok(batch) => out.extend(batch.events.iter().cloned()),
            Err(TryRecvError::Empty | TryRecvError::Closed) => return out,
            Err(TryRecvError::Lagged(_)) => {}
        }
    }
}

#[test]
fn rooms_are_created_found_refused_and_deleted() {
    let rooms = rooms();
    assert_eq!(rooms.create("a b", None, None).err(), Some(RoomError::BadRoomId));
    assert!(matches!(rooms.create("x", None, Some(0)), Err(RoomError::BadRoomConfig(_))));
    let a = rooms.create("a", Some(2), None).expect("created");
    assert_eq!((a.max_participants(), a.max_speakers()), (2, 5));
    assert_eq!(rooms.create("a", None, None).err(), Some(RoomError::RoomExists("a".into())));
    rooms.create("b", None, None).expect("created");
    assert_eq!(rooms.create("c", None, None).err(), Some(RoomError::TooManyRooms(2)));
    assert_eq!(rooms.get("zzz").err(), Some(RoomError::NoRoom("zzz".into())));
    assert!(rooms.delete("a").expect("deleted").is_empty(), "nobody to close");
    assert_eq!(rooms.delete("a").err(), Some(RoomError::NoRoom("a".into())));
    assert!(rooms.get("b").is_ok());
    assert_ne!(rooms.fresh_name(), rooms.fresh_name());
}

#[test]
fn a_join_is_registered_told_and_claimed_by_the_first_io_thread() {
    let (rooms, acc) = (rooms(), acceptor());
    let room = rooms.create("r", None, None).expect("room");
    room.flush_events();
    let mut rx = room.subscribe();
    let (j, ufrag) = joiner(&acc, "alice\u{7}", false);
    let id = rooms.join(&room, j, Instant::now()).expect("joined");
    assert_eq!(rooms.participants(), 1);
    assert_eq!(rooms.registry_sizes(), (1, 1), "registered, waiting for its first check");
    let m = room.member_list();
    assert_eq!((m[0].id, m[0].name.as_str(), m[0].identity.as_str()), (id, "alice", "id-alice"), "name cleaned");
    assert_eq!(
        events(&room, &mut rx),
        vec![RoomEvent::Joined { id, name: "alice".into(), attributes: Default::default() }]
    );

    assert!(matches!(rooms.claim("no-such-ufrag", 0), Claim::Unknown));
    match rooms.claim(&ufrag, 1) {
        Claim::Adopt { peer, room: r, listen_only } => {
            assert_eq!(peer.id().0, id);
            assert_eq!(r.key, room.key);
            assert!(!listen_only.get());
        }
        _ => panic!("the first check adopts"),
    }
    assert_eq!(rooms.registry_sizes(), (1, 0));
    // A later check for it reaching another thread's socket is forwarded to
    // its owner (that thread remembers the client's address itself).
    assert!(matches!(rooms.claim(&ufrag, 0), Claim::Forward(1)));
    // Its owner never asks again, but if it did, there is nothing to adopt.
    assert!(matches!(rooms.claim(&ufrag, 1), Claim::Unknown));

    // Leaving closes it on its owner and forgets everything about it.
    let effect = rooms.leave(&room, id, LeaveReason::Left).expect("left");
    assert_eq!(effect, Some(Effect::ClosePeer { peer: PeerId(id), io: 1 }));
    assert_eq!(rooms.registry_sizes(), (0, 0));
    assert_eq!(rooms.participants(), 0);
    assert_eq!(rooms.leave(&room, id, LeaveReason::Left), Err(RoomError::NoParticipant(id)));
    assert_eq!(events(&room, &mut rx), vec![RoomEvent::Left { id, reason: "left" }]);
}

#[test]
fn a_peer_never_adopted_leaves_without_an_effect() {
    let (rooms, acc) = (rooms(), acceptor());
    let room = rooms.create("r", None, None).expect("room");
    let (j, _) = joiner(&acc, "", false);
    let id = rooms.join(&room, j, Instant::now()).expect("joined");
    assert_eq!(room.member_list()[0].name, "id-", "no name: the identity");
    assert_eq!(rooms.leave(&room, id, LeaveReason::Left), Ok(None));
}

#[test]
fn mute_is_told_only_when_it_changes_and_listen_only_stays_muted() {
    let (rooms, acc) = (rooms(), acceptor());
    let room = rooms.create("r", None, None).expect("room");
    let (j, _) = joiner(&acc, "s", false);
    let speaker = rooms.join(&room, j, Instant::now()).expect("joined");
    let (j, _) = joiner(&acc, "l", true);
    let listener = rooms.join(&room, j, Instant::now()).expect("joined");
    room.flush_events();
    let mut rx = room.subscribe();
    rooms.set_muted(&room, speaker, true).expect("muted");
    rooms.set_muted(&room, speaker, true).expect("still muted");
    rooms.set_muted(&room, speaker, false).expect("unmuted");
    assert_eq!(
        events(&room, &mut rx),
        vec![RoomEvent::Muted { id: speaker, muted: true }, RoomEvent::Muted { id: speaker, muted: false }]
    );
    assert_eq!(rooms.set_muted(&room, listener, false), Err(RoomError::ListenOnly(listener)));
    assert!(room.member_list().iter().find(|m| m.id == listener).is_some_and(|m| m.muted && m.listen_only));
    assert_eq!(rooms.set_muted(&room, 999, true), Err(RoomError::NoParticipant(999)));
    assert!(matches!(rooms.set_gain(&room, speaker, 99.0), Err(RoomError::BadValue(_))));
    assert!(matches!(rooms.set_gain(&room, speaker, f32::NAN), Err(RoomError::BadValue(_))));
    assert_eq!(rooms.set_gain(&room, speaker, 1.5), Ok(()));
    assert_eq!(rooms.set_gain(&room, 999, 1.0), Err(RoomError::NoParticipant(999)));
}

#[test]
fn full_rooms_full_servers_deleted_rooms_and_shutdown_refuse_joins() {
    let (rooms, acc) = (rooms(), acceptor());
    let small = rooms.create("small", Some(1), None).expect("room");
    rooms.join(&small, joiner(&acc, "a", false).0, Instant::now()).expect("joined");
    let full = rooms.join(&small, joiner(&acc, "b", false).0, Instant::now());
    assert_eq!(full, Err(RoomError::RoomFull { room: "small".into(), max: 1 }));
    let big = rooms.create("big", None, None).expect("room");
    for n in 0..3 {
        rooms.join(&big, joiner(&acc, &format!("p{n}"), false).0, Instant::now()).expect("joined");
    }
    // The server holds 5 at most: 4 now, one more fits (in another room).
    assert_eq!(rooms.participants(), 4);
    let effects = rooms.delete("big").expect("deleted");
    assert!(effects.is_empty(), "none was adopted");
    assert_eq!(rooms.participants(), 1);
    assert_eq!(rooms.check_space(&big), Err(RoomError::NoRoom("big".into())), "a deleted room takes nobody");
    small.flush_events();
    let mut rx = small.subscribe();
    rooms.shut_down("bye");
    assert_eq!(rooms.check_space(&small), Err(RoomError::ShuttingDown));
    assert!(rooms.is_closing());
    assert_eq!(events(&small, &mut rx), vec![RoomEvent::Shutdown { message: "bye".into() }]);
}

#[test]
fn the_server_wide_participant_cap_holds_across_rooms() {
    let (rooms, acc) = (Rooms::new(config(10, 5), 4, 2).expect("rooms"), acceptor());
    let a = rooms.create("a", None, None).expect("room");
    let b = rooms.create("b", None, None).expect("room");
    rooms.join(&a, joiner(&acc, "1", false).0, Instant::now()).expect("joined");
    rooms.join(&b, joiner(&acc, "2", false).0, Instant::now()).expect("joined");
    assert_eq!(rooms.join(&a, joiner(&acc, "3", false).0, Instant::now()), Err(RoomError::TooManyParticipants(2)));
}

#[test]
fn deleting_a_room_closes_adopted_peers_where_they_are() {
    let (rooms, acc) = (rooms(), acceptor());
    let room = rooms.create("r", None, None).expect("room");
    let (j, ufrag) = joiner(&acc, "a", false);
    let id = rooms.join(&room, j, Instant::now()).expect("joined");
    assert!(matches!(rooms.claim(&ufrag, 3), Claim::Adopt { .. }));
    room.flush_events();
    let mut rx = room.subscribe();
    let effects = rooms.delete("r").expect("deleted");
    assert_eq!(effects, vec![Effect::ClosePeer { peer: PeerId(id), io: 3 }]);
    assert_eq!(events(&room, &mut rx), vec![RoomEvent::Left { id, reason: "room_closed" }, RoomEvent::RoomClosed]);
    assert!(room.is_closed());
}

#[test]
fn peers_whose_ice_never_starts_expire() {
    let (rooms, acc) = (rooms(), acceptor());
    let room = rooms.create("r", None, None).expect("room");
    let t0 = Instant::now();
    let id = rooms.join(&room, joiner(&acc, "a", false).0, t0).expect("joined");
    room.flush_events();
    let mut rx = room.subscribe();
    rooms.expire_pending(t0 + Duration::from_secs(5), Duration::from_secs(10));
    assert_eq!(rooms.participants(), 1, "not yet");
    rooms.expire_pending(t0 + Duration::from_secs(11), Duration::from_secs(10));
    assert_eq!(rooms.participants(), 0);
    assert_eq!(events(&room, &mut rx), vec![RoomEvent::Left { id, reason: "timed_out" }]);
    assert_eq!(rooms.registry_sizes(), (0, 0));
}

#[test]
fn a_tick_feeds_listeners_one_shared_payload_and_keeps_sources_for_csrcs() {
    let (rooms, acc) = (rooms(), acceptor());
    let room = rooms.create("r", None, None).expect("room");
    let pool = tutti_mix::MixPool::new(1).expect("pool");
    assert!(room.tick(Some(&pool), 0, 0).is_none(), "an empty room has nothing to tick");
    let a = rooms.join(&room, joiner(&acc, "a", false).0, Instant::now()).expect("joined");
    let b = rooms.join(&room, joiner(&acc, "b", false).0, Instant::now()).expect("joined");
    room.set_source(ParticipantId(a), 0xA11CE);
    let mut enc = tutti_mix::Encoder::new(&tutti_mix::EncoderConfig::default()).expect("encoder");
    let mut speaker_seen = false;
    for t in 0..20u16 {
        let pcm = tutti_mix::tone(440.0, 0.3, u64::from(t) * tutti_mix::FRAME_SAMPLES as u64);
        let packet =
            tutti_mix::Packet { seq: t, timestamp: u32::from(t) * 960, payload: enc.encode(&pcm), level: Some(10) };
        room.deliver(&mut vec![(ParticipantId(a), packet)]);
        let (mix, _) = room.tick(Some(&pool), u64::from(t), 0).expect("a mix");
        assert_eq!(mix.key, room.key);
        if let Some((id, own)) = mix.speakers.first() {
            speaker_seen = true;
            assert_eq!(id.0, a);
            assert!(own.contributors.is_empty(), "a speaker's own feed names nobody else");
            let heard = mix.feed_for(ParticipantId(b));
            assert_eq!(heard.contributors.iter().map(|c| c.ssrc).collect::<Vec<_>>(), vec![0xA11CE]);
            assert_eq!(heard.level, Some(10));
        }
    }
    assert!(speaker_seen, "a talked loud enough to be selected");
    assert_eq!(room.speaker_ids(), vec![a]);
}

#[test]
fn a_ticks_events_go_out_as_one_batch_serialized_once_and_filtered_by_kind() {
    let (rooms, acc) = (rooms(), acceptor());
    let room = rooms.create("r", None, None).expect("room");
    room.flush_events();
    let mut rx = room.subscribe();
    let a = rooms.join(&room, joiner(&acc, "a", false).0, Instant::now()).expect("joined");
    let b = rooms.join(&room, joiner(&acc, "b", false).0, Instant::now()).expect("joined");
    rooms.set_muted(&room, a, true).expect("muted");
    assert!(rx.try_recv().is_err(), "nothing goes out before the tick");
    // Ticked inline (no pool), as the clock ticks a light load.
    let _ = room.tick(None, 0, 0);
    let batch = rx.try_recv().expect("one batch per tick");
    assert!(rx.try_recv().is_err(), "and only one");
    assert_eq!(batch.events.len(), 3);
    let all: serde_json::Value = serde_json::from_slice(&batch.json).expect("JSON");
    assert_eq!(all["type"], "events");
    assert_eq!(all["events"][1], serde_json::json!({ "type": "joined", "id": b, "name": "b" }));
    let muted_only = batch.for_kinds(EventKinds::parse("muted").expect("kinds")).expect("one for it");
    let v: serde_json::Value = serde_json::from_slice(&muted_only).expect("JSON");
    assert_eq!(v["events"], serde_json::json!([{ "type": "muted", "id": a, "muted": true }]));
    assert!(batch.for_kinds(EventKinds::parse("talking").expect("kinds")).is_none(), "nothing for it");
    assert!(EventKinds::parse("joined,dance").expect_err("unknown").contains("'dance'"));
    // An empty tick sends nothing; the last words go at once.
    let _ = room.tick(None, 1, 0);
    assert!(rx.try_recv().is_err());
    rooms.delete("r").expect("deleted");
    let last = rx.try_recv().expect("at once");
    assert!(last.events.contains(&RoomEvent::RoomClosed));
    assert!(EventKinds::parse("").expect("none").wants(&RoomEvent::RoomClosed), "always sent");
}

#[test]
fn a_silent_rooms_mix_sends_nothing_between_its_dtx_frames() {
    let (rooms, acc) = (rooms(), acceptor());
    let room = rooms.create("r", None, None).expect("room");
    rooms.join(&room, joiner(&acc, "a", false).0, Instant::now()).expect("joined");
    rooms.join(&room, joiner(&acc, "b", false).0, Instant::now()).expect("joined");
    let mut silent = 0;
    for t in 0..tutti_mix::DTX_INTERVAL_TICKS * 2 {
        let (mix, _) = room.tick(None, t, 0).expect("a mix");
        let dtx = !mix.listeners.payload.is_empty();
        assert_eq!(mix.sends_nothing(), !dtx, "tick {t}");
        silent += usize::from(mix.sends_nothing());
    }
    assert!(silent > 0, "most ticks of a silent room send nothing");
    assert!(silent < 2 * tutti_mix::DTX_INTERVAL_TICKS as usize, "but its DTX frames go out");
}

#[test]
fn a_busy_rooms_batches_go_out_at_most_once_per_interval() {
    use super::event::EVENT_INTERVAL_TICKS;
    let (rooms, acc) = (rooms(), acceptor());
    let room = rooms.create("r", None, None).expect("room");
    room.flush_events();
    let mut rx = room.subscribe();
    let a = rooms.join(&room, joiner(&acc, "a", false).0, Instant::now()).expect("joined");
    // The first batch after a quiet spell goes at the next tick.
    let _ = room.tick(None, 100, 0);
    assert!(rx.try_recv().expect("at once").events.contains(&RoomEvent::Joined {
        id: a,
        name: "a".into(),
        attributes: Default::default()
    }));
    // Something every tick (hands up and down): batches at most every interval.
    let mut batches = Vec::new();
    for t in 101..101 + 4 * EVENT_INTERVAL_TICKS {
        rooms.set_hand(&room, a, t % 2 == 0).expect("hand");
        let _ = room.tick(None, t, 0);
        while let Ok(batch) = rx.try_recv() {
            batches.push((t, batch));
        }
    }
    assert_eq!(
        batches.len(),
        4,
        "one per {EVENT_INTERVAL_TICKS} ticks: {:?}",
        batches.iter().map(|b| b.0).collect::<Vec<_>>()
    );
    for pair in batches.windows(2) {
        assert!(pair[1].0 - pair[0].0 >= EVENT_INTERVAL_TICKS, "ticks {} and {}", pair[0].0, pair[1].0);
    }
    // Nothing is lost: every hand event of an interval is in its batch, in order.
    assert!(batches[1].1.events.len() > 1, "{:?}", batches[1].1.events);
    // The last words do not wait.
    rooms.set_hand(&room, a, true).expect("hand");
    rooms.delete("r").expect("deleted");
    let last = rx.try_recv().expect("at once");
    assert_eq!(last.events.last(), Some(&RoomEvent::RoomClosed));
}

#[test]
fn talking_changes_are_coalesced_within_an_interval() {
    let mut out = event::Outbox::default();
    out.push(RoomEvent::Joined { id: 1, name: "a".into(), attributes: Default::default() });
    // 1 starts, stops and starts again; 2 starts and stops (a blip); 3 stops.
    for e in [(1, true), (2, true), (1, false), (2, false), (1, true), (3, false)] {
        out.push(RoomEvent::Talking { id: e.0, talking: e.1 });
    }
    out.push(RoomEvent::Talking { id: 4, talking: true });
    out.push(RoomEvent::Left { id: 4, reason: "left" });
    assert!(out.due(0));
    let events = out.take(Some(0));
    assert_eq!(
        events,
        vec![
            RoomEvent::Joined { id: 1, name: "a".into(), attributes: Default::default() },
            RoomEvent::Left { id: 4, reason: "left" },
            RoomEvent::Talking { id: 1, talking: true },
            RoomEvent::Talking { id: 3, talking: false },
        ],
        "joined before talking; a blip and the talking of someone gone are not told"
    );
    out.push(RoomEvent::Talking { id: 1, talking: false });
    assert!(!out.due(event::EVENT_INTERVAL_TICKS - 1), "not before the interval");
    assert!(out.due(event::EVENT_INTERVAL_TICKS));
    // The last words carry no talking.
    out.push(RoomEvent::RoomClosed);
    assert_eq!(out.take(None), vec![RoomEvent::RoomClosed]);
}

#[test]
fn a_batch_is_rendered_once_per_set_of_kinds_and_shared() {
    let batch = EventBatch::new(vec![
        RoomEvent::Joined { id: 1, name: "a".into(), attributes: Default::default() },
        RoomEvent::Talking { id: 1, talking: true },
    ]);
    let all = batch.for_kinds(EventKinds::ALL).expect("all");
    assert_eq!(all.as_ptr(), batch.json.as_ptr(), "the shared buffer, not a copy");
    let talking = EventKinds::parse("talking").expect("kinds");
    let (x, y) = (batch.for_kinds(talking).expect("talking"), batch.for_kinds(talking).expect("talking"));
    assert_eq!(x.as_ptr(), y.as_ptr(), "a subset is rendered once for every socket that asks for it");
    let v: serde_json::Value = serde_json::from_slice(&x).expect("JSON");
    assert_eq!(v["events"], serde_json::json!([{ "type": "talking", "id": 1, "talking": true }]));
    let both = EventKinds::parse("joined,talking").expect("kinds");
    assert_eq!(batch.for_kinds(both).expect("both").as_ptr(), batch.json.as_ptr(), "everything in it: the shared one");
    assert!(batch.for_kinds(EventKinds::parse("").expect("none")).is_none(), "nothing for a socket that wants nothing");
    assert_eq!(batch.renders(), 2, "the full batch and the talking subset");
}
