//! Three participants send 440, 660 and 880 Hz through real Opus; each
//! decoded mix holds the two other tones and not its own.

mod common;

use common::{ToneParticipant, room_with, run, tail, three_tones};
use tutti_mix::{MixPool, Room, RoomConfig, goertzel};

#[test]
fn each_participant_hears_the_others_and_not_themselves() {
    let pool = MixPool::new(2).expect("pool");
    let mut clients = three_tones();
    let mut room = room_with(&clients, &[]);
    let reports = run(&mut room, &pool, &mut clients, 0, 100, |_, _| 0.2);

    let last = reports.last().expect("ticks ran");
    assert_eq!(last.speakers.len(), 3, "all three talkers selected");
    assert_eq!(last.encodes, 4, "K+1 encodes: one shared, one per speaker");
    assert_eq!(last.decodes, 3);

    for c in &clients {
        let heard = tail(&c.heard, 1.0);
        for other in &clients {
            let amp = goertzel(heard, other.freq);
            if other.id == c.id {
                assert!(amp < 0.01, "{} Hz hears its own tone at {amp}", c.freq);
            } else {
                assert!(amp > 0.1, "{} Hz hears {} Hz only at {amp}", c.freq, other.freq);
            }
        }
    }
}

#[test]
fn a_silent_listener_hears_everyone_through_the_shared_stream() {
    let pool = MixPool::new(1).expect("pool");
    let mut clients = three_tones();
    let mut room = room_with(&clients, &[]);
    // Client 3 listens only (sends silence, level 127).
    run(&mut room, &pool, &mut clients, 0, 100, |i, _| if i == 2 { 0.0 } else { 0.2 });
    let listener = &clients[2];
    let heard = tail(&listener.heard, 1.0);
    assert!(goertzel(heard, 440.0) > 0.1 && goertzel(heard, 660.0) > 0.1);
    assert!(room.speakers().all(|id| id != listener.id), "a silent participant is not a speaker");
}

#[test]
fn listeners_share_one_encoded_payload() {
    let pool = MixPool::new(2).expect("pool");
    let mut room = Room::new(RoomConfig { shard_size: 2, ..Default::default() }).expect("room");
    let mut clients: Vec<ToneParticipant> = (0..6).map(|i| ToneParticipant::new(i, 440.0 + 100.0 * i as f32)).collect();
    for c in &clients {
        room.add_participant(c.id).expect("join");
    }
    // Only client 0 talks.
    run(&mut room, &pool, &mut clients, 0, 20, |i, _| if i == 0 { 0.2 } else { 0.0 });
    let talker = room.payload_for(clients[0].id).expect("payload").clone();
    let shared = room.payload_for(clients[1].id).expect("payload").clone();
    assert_ne!(talker, shared, "the talker gets their own N-minus-self stream");
    for c in &clients[1..] {
        let p = room.payload_for(c.id).expect("payload");
        assert_eq!(p.as_ptr(), shared.as_ptr(), "listeners share the same bytes, not copies");
    }
}
