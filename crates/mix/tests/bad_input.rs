//! Bad input from one participant is counted and skipped: no panic, and the
//! others' call goes on unaffected.

mod common;

use bytes::Bytes;
use common::{ToneParticipant, room_with, run, tail};
use tutti_mix::{MixError, MixPool, Packet, ParticipantId, PushOutcome, Room, RoomConfig, goertzel};

#[test]
fn garbage_from_one_participant_does_not_disturb_the_others() {
    let pool = MixPool::new(2).expect("pool");
    let mut clients = vec![ToneParticipant::new(1, 440.0), ToneParticipant::new(2, 660.0)];
    let bad = ParticipantId(99);
    let mut room = room_with(&clients, &[bad]);

    // A 40 ms Opus packet: valid, but not the 20 ms tutti mixes.
    let mut enc = opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Voip).expect("encoder");
    let long = Bytes::from(enc.encode_vec_float(&[0.1; 1920], 1500).expect("encode"));
    let garbage: Vec<(Bytes, Option<u8>)> = vec![
        (Bytes::from_static(&[0x03, 0x00]), Some(0)), // code-3 packet with zero frames: invalid
        (Bytes::from_static(&[0xFF; 3]), Some(0)),    // truncated
        (Bytes::from_static(&[0x03, 0x00]), None),    // invalid, and no level: decoded to measure
        (long.clone(), Some(0)),
        (long, None),
        (Bytes::from(vec![0xAB; 400]), Some(5)),
    ];
    let mut seq = 0u16;
    for t in 0..100u64 {
        // The bad participant sends garbage, loud, every tick; some with absurd timestamps.
        let (payload, level) = garbage[t as usize % garbage.len()].clone();
        let timestamp = if t % 7 == 3 { 0xDEAD_BEEF } else { u32::from(seq) * 960 };
        let _ = room.push_packet(bad, Packet { seq, timestamp, payload, level });
        seq = seq.wrapping_add(1);
        run(&mut room, &pool, &mut clients, t, 1, |_, _| 0.2);
    }

    let stats = room.participant_stats(bad).expect("stats");
    assert!(stats.decode_errors > 20, "garbage counted: {stats:?}");
    assert!(stats.jitter.bad_timestamp > 5, "absurd timestamps counted: {stats:?}");
    for (me, other) in [(0, 1), (1, 0)] {
        let heard = tail(&clients[me].heard, 1.0);
        assert!(goertzel(heard, clients[other].freq) > 0.1, "client {me} still hears client {other}");
        assert!(goertzel(heard, clients[me].freq) < 0.01, "client {me} does not hear itself");
        let s = room.participant_stats(clients[me].id).expect("stats");
        assert_eq!(s.decode_errors + s.jitter.bad_timestamp + s.jitter.lost, 0, "{s:?}");
    }
}

#[test]
fn empty_and_oversized_payloads_are_rejected_at_the_door() {
    let mut room = Room::new(RoomConfig::default()).expect("room");
    let id = ParticipantId(1);
    room.add_participant(id).expect("join");
    let empty = Packet { seq: 1, timestamp: 960, payload: Bytes::new(), level: None };
    assert_eq!(room.push_packet(id, empty).expect("in room"), PushOutcome::Malformed);
    let huge = Packet { seq: 2, timestamp: 1920, payload: Bytes::from(vec![0u8; 5000]), level: None };
    assert_eq!(room.push_packet(id, huge).expect("in room"), PushOutcome::Malformed);
    assert_eq!(room.participant_stats(id).expect("stats").jitter.malformed, 2);
}

#[test]
fn unknown_participants_and_bad_settings_are_errors_not_panics() {
    let pool = MixPool::new(1).expect("pool");
    let mut room = Room::new(RoomConfig { max_participants: 2, ..Default::default() }).expect("room");
    let ghost = ParticipantId(7);
    let packet = Packet { seq: 0, timestamp: 0, payload: Bytes::from_static(&[0xF8]), level: None };
    assert!(matches!(room.push_packet(ghost, packet), Err(MixError::UnknownParticipant(_))));
    assert!(matches!(room.set_muted(ghost, true), Err(MixError::UnknownParticipant(_))));
    room.add_participant(ParticipantId(1)).expect("join");
    assert!(matches!(room.add_participant(ParticipantId(1)), Err(MixError::DuplicateParticipant(_))));
    room.add_participant(ParticipantId(2)).expect("join");
    assert!(matches!(room.add_participant(ParticipantId(3)), Err(MixError::RoomFull(2))));
    for gain in [f32::NAN, -1.0, 100.0] {
        assert!(room.set_gain(ParticipantId(1), gain).is_err(), "gain {gain}");
    }
    // A repeated tick number is ignored rather than run twice.
    room.tick(&pool, 5);
    let again = room.tick(&pool, 5);
    assert_eq!(again.encodes, 0);
}
