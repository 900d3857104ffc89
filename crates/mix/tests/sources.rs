//! Sources (`Room::add_source`): a file played into a room is heard like a
//! speaker, is sent nothing, costs no N-minus-self encode, does not take a
//! participant's place, and alone is forwarded without a decode.

mod common;

use common::ToneParticipant;
use tutti_mix::{Delivery, MixMode, MixPool, ParticipantId, Room, RoomConfig};

#[test]
fn a_lone_source_is_forwarded_unchanged_without_a_decode_and_is_sent_nothing() {
    let mut room = Room::new(RoomConfig::default()).expect("room");
    let pool = MixPool::new(1).expect("pool");
    let mut file = ToneParticipant::new(1 << 52, 523.0);
    let listener = ParticipantId(1);
    room.add_participant(listener).expect("join");
    room.add_source(file.id).expect("source");
    assert_eq!((room.len(), room.sources()), (2, 1));
    let mut forwarded = 0;
    for t in 0..50 {
        let packet = file.next_packet(0.3);
        room.push_packet(file.id, packet).expect("in room");
        let report = room.tick(&pool, t);
        assert_eq!(report.participants, 1, "a source is not counted as a participant");
        assert_eq!(room.delivery_for(file.id), Some(&Delivery::Nothing), "tick {t}: a source is sent nothing");
        if let MixMode::Forward(from) = report.mode {
            assert_eq!(from, file.id);
            assert_eq!((report.decodes, report.encodes), (0, 0), "tick {t}: forwarded without codec work");
            assert_eq!(report.dtx, 0, "tick {t}: nobody gets DTX (the source is sent nothing)");
            let Some(Delivery::Forward { payload, .. }) = room.delivery_for(listener) else {
                panic!("tick {t}: the listener gets the frame forwarded");
            };
            assert!(!payload.is_empty());
            forwarded += 1;
        }
    }
    assert!(forwarded >= 40, "forwarded {forwarded} of 50 ticks");
}

#[test]
fn with_a_speaker_the_source_is_mixed_and_costs_no_stream_of_its_own() {
    let mut room = Room::new(RoomConfig::default()).expect("room");
    let pool = MixPool::new(1).expect("pool");
    let mut file = ToneParticipant::new(1 << 52, 523.0);
    let mut talker = ToneParticipant::new(1, 440.0);
    let mut listener = ToneParticipant::new(2, 660.0);
    room.add_participant(talker.id).expect("join");
    room.add_participant(listener.id).expect("join");
    room.add_source(file.id).expect("source");
    let mut mixed = 0;
    for t in 0..100 {
        room.push_packet(file.id, file.next_packet(0.3)).expect("in room");
        room.push_packet(talker.id, talker.next_packet(0.3)).expect("in room");
        room.push_packet(listener.id, listener.next_packet(0.0)).expect("in room");
        let report = room.tick(&pool, t);
        assert_eq!(room.delivery_for(file.id), Some(&Delivery::Nothing));
        if report.mode == MixMode::Mix && report.speakers.len() == 2 && report.primes == 0 {
            // The listeners' encode and the talker's N-minus-self: none for the source.
            assert_eq!(report.encodes, 2, "tick {t}");
            mixed += 1;
        }
        if t >= 10 {
            listener.receive(&room);
            talker.receive(&room);
        }
    }
    assert!(mixed >= 80, "mixed {mixed} of 100 ticks");
    let tail = |p: &ToneParticipant| p.heard[p.heard.len() / 2..].to_vec();
    let (l, s) = (tail(&listener), tail(&talker));
    assert!(tutti_mix::goertzel(&l, 523.0) > 0.08, "the listener hears the file");
    assert!(tutti_mix::goertzel(&l, 440.0) > 0.08, "and the talker");
    assert!(tutti_mix::goertzel(&s, 523.0) > 0.08, "the talker hears the file");
    assert!(tutti_mix::goertzel(&s, 440.0) < 0.01, "and not themselves");
}

#[test]
fn sources_take_no_participant_place_and_leave_cleanly() {
    let cfg = RoomConfig { max_participants: 1, ..RoomConfig::default() };
    let mut room = Room::new(cfg).expect("room");
    room.add_source(ParticipantId(1 << 52)).expect("a source in an empty room");
    room.add_participant(ParticipantId(1)).expect("the one place is still free");
    assert!(room.add_participant(ParticipantId(2)).is_err(), "the room is full");
    room.add_source(ParticipantId((1 << 52) + 1)).expect("a second source");
    assert!(room.add_source(ParticipantId(1)).is_err(), "ids are unique across both");
    room.remove_participant(ParticipantId(1 << 52)).expect("removed");
    assert_eq!((room.len(), room.sources()), (2, 1));
    room.remove_participant(ParticipantId((1 << 52) + 1)).expect("removed");
    assert_eq!((room.len(), room.sources()), (1, 0));
}

#[test]
fn a_source_is_heard_over_louder_talkers_when_the_speakers_are_full() {
    let cfg = RoomConfig { max_speakers: tutti_mix::SpeakerLimit::Top(2), ..RoomConfig::default() };
    let mut room = Room::new(cfg).expect("room");
    let pool = MixPool::new(1).expect("pool");
    let mut talkers: Vec<ToneParticipant> =
        (1..=3).map(|i| ToneParticipant::new(i, 300.0 + 100.0 * i as f32)).collect();
    let mut listener = ToneParticipant::new(9, 200.0);
    let mut file = ToneParticipant::new(1 << 52, 523.0);
    for p in talkers.iter().chain([&listener]) {
        room.add_participant(p.id).expect("join");
    }
    let tick = |room: &mut Room, talkers: &mut [ToneParticipant], t: u64| {
        for p in talkers.iter_mut() {
            // Loud: well above the quiet file.
            room.push_packet(p.id, p.next_packet(0.5)).expect("in room");
        }
        room.tick(&pool, t)
    };
    for t in 0..20 {
        tick(&mut room, &mut talkers, t);
    }
    room.add_source(file.id).expect("source");
    for t in 20..120 {
        room.push_packet(file.id, file.next_packet(0.05)).expect("in room");
        room.push_packet(listener.id, listener.next_packet(0.0)).expect("in room");
        let report = tick(&mut room, &mut talkers, t);
        if t >= 25 {
            assert!(report.speakers.iter().any(|s| s.id == file.id), "tick {t}: the file is among the 2 mixed");
            assert_eq!(report.speakers.len(), 2);
        }
        if t >= 60 {
            listener.receive(&room);
        }
    }
    assert!(tutti_mix::goertzel(&listener.heard, 523.0) > 0.02, "the listener hears the quiet file");
}
