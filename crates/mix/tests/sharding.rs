//! The result of a tick does not depend on how the room is sharded or on
//! the pool's size, and the pool's threads carry their role's name.

mod common;

use common::ToneParticipant;
use tutti_mix::{MixPool, Room, RoomConfig};

fn payloads(shard_size: usize, threads: usize) -> Vec<Vec<u8>> {
    let pool = MixPool::new(threads).expect("pool");
    let mut room = Room::new(RoomConfig { shard_size, ..Default::default() }).expect("room");
    let mut clients: Vec<ToneParticipant> = (0..40).map(|i| ToneParticipant::new(i, 200.0 + 37.0 * i as f32)).collect();
    for c in &clients {
        room.add_participant(c.id).expect("join");
    }
    let mut out = Vec::new();
    for t in 0..30u64 {
        for (i, c) in clients.iter_mut().enumerate() {
            // Every 5th participant talks, each at its own level (no ties).
            let mut packet = c.next_packet(if i % 5 == 0 { 0.05 + 0.01 * i as f32 } else { 0.0 });
            if i % 5 == 0 {
                packet.level = Some(10 + i as u8);
            }
            room.push_packet(c.id, packet).expect("in room");
        }
        room.tick(&pool, t);
        out.extend(clients.iter().map(|c| room.payload_for(c.id).expect("payload").to_vec()));
    }
    out
}

#[test]
fn sharding_and_pool_size_do_not_change_the_output() {
    let reference = payloads(1_000, 1);
    assert_eq!(payloads(1, 2), reference, "one participant per shard, two threads");
    assert_eq!(payloads(7, 2), reference, "uneven shards");
}

#[test]
fn pool_threads_are_named_by_role() {
    let pool = MixPool::new(2).expect("pool");
    assert_eq!(pool.threads(), 2);
    let mut names: Vec<String> =
        pool.install(|| rayon::broadcast(|_| std::thread::current().name().unwrap_or("unnamed").to_owned()));
    names.sort();
    assert_eq!(names, vec!["mix-0", "mix-1"]);
}

#[test]
fn rooms_share_one_pool_and_never_hear_each_other() {
    use tutti_mix::goertzel;
    let pool = MixPool::new(2).expect("pool");
    let mut rooms =
        vec![Room::new(RoomConfig::default()).expect("room"), Room::new(RoomConfig::default()).expect("room")];
    // Room 0: 440 and 550 Hz. Room 1: 880 and 990 Hz.
    let mut clients = [
        vec![ToneParticipant::new(1, 440.0), ToneParticipant::new(2, 550.0)],
        vec![ToneParticipant::new(1, 880.0), ToneParticipant::new(2, 990.0)],
    ];
    for (room, members) in rooms.iter_mut().zip(&clients) {
        for c in members {
            room.add_participant(c.id).expect("join"); // same ids in both rooms: rooms are separate
        }
    }
    for t in 0..60 {
        for (room, members) in rooms.iter_mut().zip(clients.iter_mut()) {
            for c in members.iter_mut() {
                let packet = c.next_packet(0.2);
                room.push_packet(c.id, packet).expect("in room");
            }
        }
        let reports = pool.tick_rooms(&mut rooms, t);
        assert_eq!(reports.len(), 2);
        for (room, members) in rooms.iter().zip(clients.iter_mut()) {
            for c in members.iter_mut() {
                c.receive(room);
            }
        }
    }
    let heard = common::tail(&clients[0][0].heard, 0.6);
    assert!(goertzel(heard, 550.0) > 0.1, "hears its room-mate");
    for foreign in [880.0, 990.0] {
        assert!(goertzel(heard, foreign) < 0.005, "hears room 1's {foreign} Hz");
    }
    let heard = common::tail(&clients[1][1].heard, 0.6);
    assert!(goertzel(heard, 880.0) > 0.1 && goertzel(heard, 440.0) < 0.005 && goertzel(heard, 550.0) < 0.005);
}
