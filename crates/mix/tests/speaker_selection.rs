//! Speaker selection: top-K, hysteresis, hold, mute, talking events.

mod common;

use common::ToneParticipant;
use tutti_mix::{MixPool, ParticipantId, Room, RoomConfig, SpeakerLimit, TalkEvent, TickReport};

/// Sends one packet per client with the given RFC 6464 levels (None = no
/// packet this tick) and runs the tick.
fn step(room: &mut Room, pool: &MixPool, clients: &mut [ToneParticipant], t: u64, levels: &[Option<u8>]) -> TickReport {
    for (c, level) in clients.iter_mut().zip(levels) {
        let mut packet = c.next_packet(0.1);
        if let Some(level) = level {
            packet.level = Some(*level);
            room.push_packet(c.id, packet).expect("in room");
        }
    }
    room.tick(pool, t)
}

fn setup(cfg: RoomConfig, n: u64) -> (MixPool, Room, Vec<ToneParticipant>) {
    let pool = MixPool::new(2).expect("pool");
    let mut room = Room::new(cfg).expect("room");
    let clients: Vec<ToneParticipant> = (1..=n).map(|i| ToneParticipant::new(i, 300.0 + 100.0 * i as f32)).collect();
    for c in &clients {
        room.add_participant(c.id).expect("join");
    }
    (pool, room, clients)
}

fn speakers(r: &TickReport) -> Vec<ParticipantId> {
    r.speakers.iter().map(|s| s.id).collect()
}

#[test]
fn the_k_loudest_are_selected() {
    let cfg = RoomConfig { max_speakers: SpeakerLimit::Top(2), ..Default::default() };
    let (pool, mut room, mut clients) = setup(cfg, 5);
    let levels = [Some(40), Some(20), Some(60), Some(30), Some(127)];
    let mut last = None;
    for t in 0..10 {
        last = Some(step(&mut room, &pool, &mut clients, t, &levels));
    }
    let mut got = speakers(&last.expect("ran"));
    got.sort();
    assert_eq!(got, vec![ParticipantId(2), ParticipantId(4)]);
}

#[test]
fn hysteresis_keeps_the_speaker_until_a_challenger_is_clearly_louder() {
    let cfg = RoomConfig { max_speakers: SpeakerLimit::Top(1), hysteresis_db: 6.0, ..Default::default() };
    let (pool, mut room, mut clients) = setup(cfg, 2);
    let (a, b) = (ParticipantId(1), ParticipantId(2));
    let mut t = 0;
    for _ in 0..10 {
        step(&mut room, &pool, &mut clients, t, &[Some(30), Some(127)]);
        t += 1;
    }
    assert_eq!(room.speakers().collect::<Vec<_>>(), vec![a]);
    // 3 dB louder: below the 6 dB margin, A keeps the floor.
    for _ in 0..30 {
        let r = step(&mut room, &pool, &mut clients, t, &[Some(30), Some(27)]);
        assert_eq!(speakers(&r), vec![a], "tick {t}: no flapping at +3 dB");
        t += 1;
    }
    // 10 dB louder: B takes over (after the jitter buffer's prefetch).
    let mut switched_at = None;
    for _ in 0..5 {
        let r = step(&mut room, &pool, &mut clients, t, &[Some(30), Some(20)]);
        if speakers(&r) == vec![b] && switched_at.is_none() {
            switched_at = Some(t);
        }
        t += 1;
    }
    assert!(switched_at.is_some(), "B selected at +10 dB");
}

#[test]
fn hold_keeps_a_pausing_speaker_then_releases_them() {
    let hold = 10;
    let cfg = RoomConfig { max_speakers: SpeakerLimit::Top(1), hold_ticks: hold, ..Default::default() };
    let (pool, mut room, mut clients) = setup(cfg, 1);
    let a = ParticipantId(1);
    let mut events = Vec::new();
    let mut selected_ticks = 0;
    for t in 0..60u64 {
        // Talks for 20 ticks, then sends silence (level 127).
        let level = if t < 20 { 30 } else { 127 };
        let r = step(&mut room, &pool, &mut clients, t, &[Some(level)]);
        if speakers(&r) == vec![a] {
            selected_ticks += 1;
        }
        events.extend(r.events.iter().map(|e| (t, *e)));
    }
    let started: Vec<_> = events.iter().filter(|(_, e)| *e == TalkEvent::Started(a)).collect();
    let stopped: Vec<_> = events.iter().filter(|(_, e)| *e == TalkEvent::Stopped(a)).collect();
    assert_eq!(started.len(), 1, "one talkspurt: {events:?}");
    assert_eq!(stopped.len(), 1, "{events:?}");
    // The last active frame (sent at tick 19) plays one tick later; the
    // speaker is held `hold` more ticks and released on the next.
    let (start_t, stop_t) = (started[0].0, stopped[0].0);
    assert_eq!(stop_t - start_t, 20 + u64::from(hold), "start {start_t} stop {stop_t}");
    assert_eq!(selected_ticks, stop_t - start_t, "selected exactly while talking or held");
    assert!(!room.is_talking(a).expect("in room"));
}

#[test]
fn a_muted_loud_participant_is_never_selected_nor_decoded() {
    let cfg = RoomConfig { max_speakers: SpeakerLimit::Top(1), ..Default::default() };
    let (pool, mut room, mut clients) = setup(cfg, 2);
    let (loud, quiet) = (ParticipantId(1), ParticipantId(2));
    room.set_muted(loud, true).expect("mute");
    for t in 0..30 {
        let r = step(&mut room, &pool, &mut clients, t, &[Some(0), Some(50)]);
        assert!(!speakers(&r).contains(&loud), "tick {t}");
        assert!(room.payload_for(loud).is_some(), "a muted participant still hears the room");
    }
    assert_eq!(room.speakers().collect::<Vec<_>>(), vec![quiet]);
    assert_eq!(room.participant_stats(loud).expect("stats").decoded, 0);
    // Unmuted, the loud participant takes the floor.
    room.set_muted(loud, false).expect("unmute");
    for t in 30..35 {
        step(&mut room, &pool, &mut clients, t, &[Some(0), Some(50)]);
    }
    assert_eq!(room.speakers().collect::<Vec<_>>(), vec![loud]);
    // Muting a current speaker removes them at once.
    room.set_muted(loud, true).expect("mute");
    let r = step(&mut room, &pool, &mut clients, 35, &[Some(0), Some(50)]);
    assert!(!speakers(&r).contains(&loud));
    assert!(r.events.contains(&TalkEvent::Stopped(loud)));
}

#[test]
fn all_selects_every_active_participant() {
    let cfg = RoomConfig { max_speakers: SpeakerLimit::All, ..Default::default() };
    let (pool, mut room, mut clients) = setup(cfg, 8);
    let mut levels = vec![Some(40); 8];
    levels[7] = Some(127);
    let mut last = None;
    for t in 0..5 {
        last = Some(step(&mut room, &pool, &mut clients, t, &levels));
    }
    let last = last.expect("ran");
    assert_eq!(last.speakers.len(), 7);
    assert_eq!(last.encodes, 8);
}

#[test]
fn leaving_frees_the_speaker_slot() {
    let cfg = RoomConfig { max_speakers: SpeakerLimit::Top(1), ..Default::default() };
    let (pool, mut room, mut clients) = setup(cfg, 2);
    for t in 0..5 {
        step(&mut room, &pool, &mut clients, t, &[Some(10), Some(40)]);
    }
    assert_eq!(room.speakers().collect::<Vec<_>>(), vec![ParticipantId(1)]);
    room.remove_participant(ParticipantId(1)).expect("leave");
    assert!(room.remove_participant(ParticipantId(1)).is_err(), "second leave is an error");
    let mut rest = clients.split_off(1);
    let r = step(&mut room, &pool, &mut rest, 5, &[Some(40)]);
    assert_eq!(speakers(&r), vec![ParticipantId(2)]);
    assert_eq!(r.participants, 1);
}

#[test]
fn the_speaker_limit_and_room_size_change_at_runtime() {
    let cfg = RoomConfig { max_speakers: SpeakerLimit::Top(3), max_participants: 5, ..Default::default() };
    let (pool, mut room, mut clients) = setup(cfg, 4);
    let levels = [Some(40), Some(20), Some(60), Some(30)];
    let mut t = 0;
    for _ in 0..10 {
        step(&mut room, &pool, &mut clients, t, &levels);
        t += 1;
    }
    assert_eq!(room.speakers().count(), 3);
    // Down to one: the weakest leave at the next tick, the loudest stays.
    room.set_max_speakers(SpeakerLimit::Top(1)).expect("valid");
    let r = step(&mut room, &pool, &mut clients, t, &levels);
    t += 1;
    assert_eq!(speakers(&r), vec![ParticipantId(2)]);
    // Up to four: every talker is mixed again.
    room.set_max_speakers(SpeakerLimit::Top(4)).expect("valid");
    for _ in 0..3 {
        step(&mut room, &pool, &mut clients, t, &levels);
        t += 1;
    }
    assert_eq!(room.speakers().count(), 4);
    assert!(room.set_max_speakers(SpeakerLimit::Top(0)).is_err(), "zero speakers refused");
    assert_eq!(room.config().max_speakers, SpeakerLimit::Top(4), "a refused limit changes nothing");
    // A smaller room keeps who is in, refuses newcomers.
    room.set_max_participants(4).expect("valid");
    assert_eq!(room.len(), 4);
    assert!(room.add_participant(ParticipantId(99)).is_err(), "full at the new size");
    assert!(room.set_max_participants(0).is_err());
}
