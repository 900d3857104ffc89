//! A tick's report counts the frames lost, concealed and dropped as late in
//! that tick: summed over a call, they match the participants' own counters
//! (the server exports them as metrics without walking every participant).

mod common;

use std::collections::VecDeque;

use common::{room_with, three_tones};
use tutti_mix::{MixPool, PushOutcome};

#[test]
fn tick_reports_add_up_to_the_participants_counters() {
    let pool = MixPool::new(2).expect("pool");
    let mut clients = three_tones();
    let mut room = room_with(&clients, &[]);
    let mut old = VecDeque::new();
    let (mut lost, mut concealed, mut late, mut late_pushed) = (0u64, 0u64, 0u64, 0u64);
    for t in 0..200u64 {
        for (i, c) in clients.iter_mut().enumerate() {
            let packet = c.next_packet(0.2);
            if i == 1 {
                old.push_back(packet.clone());
                if old.len() > 10 {
                    let stale = old.pop_front().expect("ten held");
                    if t % 25 == 0 {
                        // Its turn passed ten ticks ago.
                        let outcome = room.push_packet(c.id, stale).expect("in room");
                        assert_eq!(outcome, PushOutcome::Late);
                        late_pushed += 1;
                    }
                }
            }
            if i == 0 && t % 10 == 5 {
                continue; // lost on the way
            }
            room.push_packet(c.id, packet).expect("in room");
        }
        let report = room.tick(&pool, t);
        lost += report.lost;
        concealed += report.concealed;
        late += report.late;
    }
    let stats: Vec<_> = clients.iter().map(|c| room.participant_stats(c.id).expect("stats")).collect();
    assert_eq!(lost, stats.iter().map(|s| s.jitter.lost).sum::<u64>());
    assert_eq!(concealed, stats.iter().map(|s| s.concealed).sum::<u64>());
    assert_eq!(late, stats.iter().map(|s| s.jitter.late).sum::<u64>());
    assert_eq!(late, late_pushed);
    assert!(lost >= 15, "every tenth frame of one talker was lost: {lost}");
    // The talker is a selected speaker: each lost frame of theirs is concealed.
    assert_eq!(concealed, lost);
}

/// A selected speaker who pauses (sending nothing, as under DTX) keeps their
/// seat through the hold; their stale decoder is reset once, before the
/// frame that ends the pause, not at every empty tick of it (libopus' reset
/// runs `cpuid`, which costs more than a decode on a VM).
#[test]
fn a_paused_speakers_decoder_is_reset_once_when_they_resume() {
    let pool = MixPool::new(2).expect("pool");
    let mut clients = three_tones();
    let mut room = room_with(&clients, &[]);
    let paused = clients[0].id;
    for t in 0..100u64 {
        for (i, c) in clients.iter_mut().enumerate() {
            // Client 0 sends nothing for 20 ticks (400 ms, inside the 500 ms
            // hold); its sequence numbers go on where they stopped, as DTX's do.
            if i == 0 && (50..70).contains(&t) {
                continue;
            }
            let packet = c.next_packet(0.2);
            room.push_packet(c.id, packet).expect("in room");
        }
        room.tick(&pool, t);
        if t == 69 {
            assert!(room.speakers().any(|id| id == paused), "held through the pause");
            assert_eq!(
                room.participant_stats(paused).expect("stats").decoder_resets,
                0,
                "no reset while nothing arrives"
            );
        }
    }
    let stats = room.participant_stats(paused).expect("stats");
    assert_eq!(stats.decoder_resets, 1, "one reset, before the frame that ended the pause");
    assert!(clients[1..].iter().all(|c| room.participant_stats(c.id).expect("stats").decoder_resets == 0));
}
