//! Whisper channels through real Opus: who hears whom, and what it costs.
//! A coach whispers to one participant: that participant hears the room and
//! the coach, the coach hears the room, everyone else hears the room only.
//! The encodes grow with the channels that have a whisperer talking, never
//! with their listeners.

mod common;

use common::{ToneParticipant, run, tail};
use tutti_mix::{
    ChannelId, Delivery, MAX_CHANNELS, MixError, MixMode, MixPool, ParticipantId, Room, RoomConfig, SpeakerLimit,
    goertzel,
};

fn hears(c: &ToneParticipant, freq: f32) -> f32 {
    goertzel(tail(&c.heard, 1.0), freq)
}

fn room_of(clients: &[ToneParticipant], k: usize) -> Room {
    let cfg = RoomConfig { max_speakers: SpeakerLimit::Top(k), ..Default::default() };
    let mut room = Room::new(cfg).expect("room");
    for c in clients {
        room.add_participant(c.id).expect("join");
    }
    room
}

#[test]
fn a_coach_is_heard_by_the_one_they_whisper_to_and_nobody_else() {
    let pool = MixPool::new(2).expect("pool");
    // A and P talk in the room, C coaches P, L and M listen.
    let (a, p, c, l, m) = (0, 1, 2, 3, 4);
    let mut clients: Vec<ToneParticipant> = [440.0, 660.0, 880.0, 1100.0, 1320.0]
        .iter()
        .enumerate()
        .map(|(i, f)| ToneParticipant::new(i as u64 + 1, *f))
        .collect();
    let mut room = room_of(&clients, 5);
    room.open_channel(ChannelId(7), &[clients[c].id], &[clients[p].id]).expect("open");
    let talks = |i: usize, _| if i == a || i == p || i == c { 0.2 } else { 0.0 };
    let reports = run(&mut room, &pool, &mut clients, 0, 100, talks);
    let last = reports.last().expect("ticks");
    assert_eq!(last.speakers.len(), 3, "the coach is selected among the room's K");
    // Room mix, A − A, P − P (+ C), C − C (+ room), and the channel's room + C.
    assert_eq!(last.encodes, 5, "{last:?}");
    assert_eq!(last.whisper_encodes, 1);

    let coach = clients[c].freq;
    for (who, label) in [(l, "a listener"), (m, "another listener"), (a, "the other room speaker")] {
        assert!(hears(&clients[who], coach) < 0.01, "{label} hears the coach at {}", hears(&clients[who], coach));
        assert!(hears(&clients[who], 660.0) > 0.05 || who == p, "{label} hears P");
    }
    assert!(hears(&clients[l], 440.0) > 0.05 && hears(&clients[l], 660.0) > 0.05, "listeners hear the room");
    assert!(hears(&clients[p], coach) > 0.05, "P hears the coach: {}", hears(&clients[p], coach));
    assert!(hears(&clients[p], 440.0) > 0.05, "P hears the room");
    assert!(hears(&clients[p], 660.0) < 0.01, "P does not hear themselves");
    assert!(hears(&clients[c], 440.0) > 0.05 && hears(&clients[c], 660.0) > 0.05, "the coach hears the room");
    assert!(hears(&clients[c], coach) < 0.01, "the coach does not hear themselves");

    // Closed: the coach is heard by everyone again.
    room.close_channel(ChannelId(7)).expect("close");
    let reports = run(&mut room, &pool, &mut clients, 100, 100, talks);
    assert_eq!(reports.last().expect("ticks").whisper_encodes, 0);
    for who in [l, m, a, p] {
        assert!(hears(&clients[who], coach) > 0.05, "{who} hears the coach after the close");
    }
    assert_eq!(
        room.close_channel(ChannelId(7)).expect_err("closed already").to_string(),
        MixError::UnknownChannel(7).to_string()
    );
}

#[test]
fn a_whisper_over_a_forwarded_speaker_leaves_the_room_forwarded() {
    let pool = MixPool::new(1).expect("pool");
    // A talks alone in the room (forwarded); C whispers to P (silent).
    let mut clients: Vec<ToneParticipant> =
        [440.0, 660.0, 880.0, 1100.0].iter().enumerate().map(|(i, f)| ToneParticipant::new(i as u64 + 1, *f)).collect();
    let (a, p, c, l) = (0, 1, 2, 3);
    let mut room = room_of(&clients, 5);
    room.open_channel(ChannelId(1), &[clients[c].id], &[clients[p].id]).expect("open");
    let reports = run(&mut room, &pool, &mut clients, 0, 100, |i, _| if i == a || i == c { 0.2 } else { 0.0 });
    let last = reports.last().expect("ticks");
    assert_eq!(last.mode, MixMode::Forward(clients[a].id), "the room forwards its one speaker");
    assert!(matches!(room.delivery_for(clients[l].id), Some(Delivery::Forward { .. })));
    // P's room + C, and C's room (A) without themselves.
    assert_eq!(last.encodes, 2, "{last:?}");
    assert!(hears(&clients[l], 440.0) > 0.05 && hears(&clients[l], 880.0) < 0.01);
    assert!(hears(&clients[p], 440.0) > 0.05 && hears(&clients[p], 880.0) > 0.05);
    assert!(hears(&clients[c], 440.0) > 0.05 && hears(&clients[c], 880.0) < 0.01);
}

#[test]
fn a_whisper_into_a_silent_room_is_heard_by_its_channel_only() {
    let pool = MixPool::new(1).expect("pool");
    let mut clients: Vec<ToneParticipant> =
        [440.0, 660.0, 880.0].iter().enumerate().map(|(i, f)| ToneParticipant::new(i as u64 + 1, *f)).collect();
    let mut room = room_of(&clients, 5);
    let (c, p, l) = (0, 1, 2);
    room.open_channel(ChannelId(1), &[clients[c].id], &[clients[p].id]).expect("open");
    let reports = run(&mut room, &pool, &mut clients, 0, 100, |i, _| if i == c { 0.2 } else { 0.0 });
    let last = reports.last().expect("ticks");
    assert_eq!(last.mode, MixMode::Silent, "the room hears nobody");
    assert_eq!(last.encodes, 1, "only the channel's mix: {last:?}");
    assert!(hears(&clients[p], 440.0) > 0.05);
    assert!(hears(&clients[l], 440.0) < 0.01, "the listener outside hears nothing");
    assert!(matches!(room.delivery_for(clients[c].id), Some(Delivery::Nothing | Delivery::Dtx(_))));
}

/// Two room talkers, `channels` channels each with one talking whisperer and
/// `listeners` silent listeners (ids only: they send nothing).
fn encodes_with(channels: u64, listeners: u64) -> (usize, usize) {
    let pool = MixPool::new(1).expect("pool");
    let mut talkers: Vec<ToneParticipant> =
        (0..2 + channels).map(|i| ToneParticipant::new(i + 1, 300.0 + 100.0 * i as f32)).collect();
    let mut room = room_of(&talkers, 8);
    let mut next = 1_000;
    for ch in 0..channels {
        let ids: Vec<ParticipantId> = (0..listeners)
            .map(|_| {
                next += 1;
                room.add_participant(ParticipantId(next)).expect("join");
                ParticipantId(next)
            })
            .collect();
        room.open_channel(ChannelId(ch), &[talkers[2 + ch as usize].id], &ids).expect("open");
    }
    let reports = run(&mut room, &pool, &mut talkers, 0, 30, |_, _| 0.2);
    let last = reports.last().expect("ticks");
    // Every listener of a channel is sent the same bytes.
    for ch in 0..channels {
        let shared: Vec<_> = room
            .deliveries()
            .filter(|(id, _)| id.0 > 1_000 && (id.0 - 1_001) / listeners == ch)
            .map(|(_, d)| d.payload().as_ptr())
            .collect();
        assert!(shared.windows(2).all(|w| w[0] == w[1]), "channel {ch}'s listeners share one payload");
    }
    (last.encodes, last.whisper_encodes)
}

#[test]
fn encodes_grow_with_channels_not_with_listeners() {
    for channels in [0u64, 1, 4] {
        let few = encodes_with(channels, 1);
        let many = encodes_with(channels, 40);
        assert_eq!(few, many, "{channels} channels: 1 or 40 listeners each cost the same");
        let k = 2 + channels as usize;
        // 1 room mix + K N-minus-self (whisperers included) + 1 per channel.
        assert_eq!(few, (1 + k + channels as usize, channels as usize), "{channels} channels");
    }
}

#[test]
fn a_channel_whose_whisperers_are_silent_costs_nothing() {
    let pool = MixPool::new(1).expect("pool");
    let mut clients: Vec<ToneParticipant> =
        [440.0, 660.0, 880.0, 1100.0].iter().enumerate().map(|(i, f)| ToneParticipant::new(i as u64 + 1, *f)).collect();
    let mut room = room_of(&clients, 5);
    room.open_channel(ChannelId(3), &[clients[2].id], &[clients[3].id]).expect("open");
    let reports = run(&mut room, &pool, &mut clients, 0, 50, |i, _| if i < 2 { 0.2 } else { 0.0 });
    let last = reports.last().expect("ticks");
    assert_eq!((last.encodes, last.whisper_encodes), (3, 0));
    let room_mix = room.listener_delivery().payload().as_ptr();
    assert_eq!(room.payload_for(clients[3].id).expect("in").as_ptr(), room_mix, "the listener gets the room's mix");
}

#[test]
fn bad_channel_changes_are_refused_and_change_nothing() {
    let mut room = Room::new(RoomConfig::default()).expect("room");
    for id in 1..=4 {
        room.add_participant(ParticipantId(id)).expect("join");
    }
    room.add_source(ParticipantId(99)).expect("source");
    room.open_channel(ChannelId(1), &[ParticipantId(1)], &[ParticipantId(2)]).expect("open");
    let err = room.open_channel(ChannelId(2), &[ParticipantId(3)], &[ParticipantId(2)]).expect_err("refused");
    assert!(matches!(err, MixError::InChannel(ParticipantId(2))), "{err}");
    let err = room.open_channel(ChannelId(2), &[ParticipantId(3)], &[ParticipantId(42)]).expect_err("refused");
    assert!(matches!(err, MixError::UnknownParticipant(ParticipantId(42))), "{err}");
    let err = room.open_channel(ChannelId(2), &[ParticipantId(99)], &[ParticipantId(3)]).expect_err("refused");
    assert!(matches!(err, MixError::UnknownParticipant(_)), "a source whispers to nobody: {err}");
    assert_eq!(room.channels().count(), 1, "refused changes open nothing");
    assert_eq!(room.channel_of(ParticipantId(3)), None);
    // A change of channel 1 keeps it, with its new members.
    room.open_channel(ChannelId(1), &[ParticipantId(1)], &[ParticipantId(3)]).expect("change");
    assert_eq!(room.channel_of(ParticipantId(2)), None);
    assert_eq!(room.channel_of(ParticipantId(3)), Some((ChannelId(1), false)));
    assert_eq!(room.channel_of(ParticipantId(1)), Some((ChannelId(1), true)));
    room.remove_participant(ParticipantId(3)).expect("leave");
    assert_eq!(room.channels().collect::<Vec<_>>(), vec![(ChannelId(1), 1)]);
    for n in 2..MAX_CHANNELS as u64 + 1 {
        room.open_channel(ChannelId(n), &[], &[]).expect("an empty channel is bounded too");
    }
    let err = room.open_channel(ChannelId(1_000), &[], &[]).expect_err("refused");
    assert!(matches!(err, MixError::TooManyChannels(MAX_CHANNELS)), "{err}");
}
