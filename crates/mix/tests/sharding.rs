//! The result of a tick does not depend on how the room is sharded or on
//! the pool's size, and the pool's threads carry their role's name.

mod common;

use common::ToneClient;
use tutti_mix::{MixPool, Room, RoomConfig};

fn payloads(shard_size: usize, threads: usize) -> Vec<Vec<u8>> {
    let pool = MixPool::new(threads).expect("pool");
    let mut room = Room::new(RoomConfig { shard_size, ..Default::default() }).expect("room");
    let mut clients: Vec<ToneClient> = (0..40).map(|i| ToneClient::new(i, 200.0 + 37.0 * i as f32)).collect();
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
