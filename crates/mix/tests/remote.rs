//! Remote participants and the selection from outside (issue 27): two
//! rooms stand for two nodes of one room. Each node's local talkers send
//! real Opus; after a tick its `candidates()` (the frames it just played)
//! are handed to the other node's `put_remote_frame` for its next tick, and
//! both nodes get the same `set_selection`, as the mesh does. What each
//! participant hears is decoded with real libopus and measured by tone.

mod common;

use bytes::Bytes;
use common::{ToneParticipant, tail};
use tutti_mix::{
    ChannelId, Delivery, FRAME_SAMPLES, LocalCandidate, MixError, MixMode, MixPool, Packet, ParticipantId, Room,
    RoomConfig, SpeakerLimit, goertzel, level_of, tone,
};

/// Decodes what `id` is sent after the last tick (nothing: concealment, as a receiver does).
fn hear(room: &Room, id: ParticipantId, decoder: &mut opus::Decoder, heard: &mut Vec<f32>) {
    let mut pcm = [0.0f32; FRAME_SAMPLES];
    let payload = room.payload_for(id).expect("in room");
    let n = decoder.decode_float(payload, &mut pcm, false).expect("decodes");
    assert_eq!(n, FRAME_SAMPLES);
    heard.extend_from_slice(&pcm);
}

/// One node: a room, its local tone clients, and its candidates of the last tick.
struct Node {
    room: Room,
    clients: Vec<ToneParticipant>,
    candidates: Vec<LocalCandidate>,
}

impl Node {
    fn new(clients: Vec<ToneParticipant>, remotes: &[ParticipantId]) -> Self {
        let mut room = Room::new(RoomConfig::default()).expect("room");
        for c in &clients {
            room.add_participant(c.id).expect("join");
        }
        for &r in remotes {
            room.add_remote(r).expect("remote");
        }
        Self { room, clients, candidates: Vec::new() }
    }

    /// Hands in the other node's candidates of the previous tick.
    fn put_from(&mut self, other: &[LocalCandidate]) {
        for c in other {
            if let Some(frame) = &c.frame {
                self.room.put_remote_frame(c.id, c.level, frame.clone()).expect("a remote here");
            }
        }
    }

    /// Every local client sends (`amplitude` by id), the room ticks, every client decodes.
    fn tick(&mut self, pool: &MixPool, t: u64, amplitude: impl Fn(ParticipantId) -> f32) -> tutti_mix::TickReport {
        for c in &mut self.clients {
            let packet = c.next_packet(amplitude(c.id));
            self.room.push_packet(c.id, packet).expect("local");
        }
        let report = self.room.tick(pool, t);
        for c in &mut self.clients {
            c.receive(&self.room);
        }
        self.room.candidates(2, &mut self.candidates);
        report
    }
}

#[test]
fn two_nodes_hear_each_other_and_n_minus_self_holds_across_them() {
    let pool = MixPool::new(2).expect("pool");
    let (a, b, c, d) = (ParticipantId(1), ParticipantId(2), ParticipantId(3), ParticipantId(4));
    // Node A: talker a (440 Hz) and listener c; b is on node B.
    let mut node_a = Node::new(vec![ToneParticipant::new(1, 440.0), ToneParticipant::new(3, 550.0)], &[b]);
    // Node B: talker b (660 Hz) and listener d; a is on node A.
    let mut node_b = Node::new(vec![ToneParticipant::new(2, 660.0), ToneParticipant::new(4, 770.0)], &[a]);
    let talks = |id: ParticipantId| if id == a || id == b { 0.2 } else { 0.0 };
    for t in 0..100 {
        let (from_a, from_b) = (node_a.candidates.clone(), node_b.candidates.clone());
        node_a.put_from(&from_b);
        node_b.put_from(&from_a);
        node_a.room.set_selection(Some(vec![a, b]));
        node_b.room.set_selection(Some(vec![a, b]));
        let ra = node_a.tick(&pool, t, talks);
        let rb = node_b.tick(&pool, t, talks);
        // The same speakers (their levels differ: a remote's frame is a tick older).
        let ids = |r: &tutti_mix::TickReport| r.speakers.iter().map(|s| s.id).collect::<Vec<_>>();
        assert_eq!(ids(&ra), ids(&rb), "tick {t}: both nodes mix the same speakers");
        assert_eq!(ra.participants, 2, "a remote is not a participant");
        assert_eq!(node_a.room.delivery_for(b), Some(&Delivery::Nothing), "a remote is sent nothing");
        if t > 5 {
            assert_eq!(ra.mode, MixMode::Mix);
            // A's listener stream and a's own (N-minus-self); none for remote b.
            assert_eq!(ra.encodes, 2, "tick {t}");
            assert_eq!(ra.remote_decodes, 1, "tick {t}: b's frame decoded once on A");
            assert_eq!(ra.concealed, 0, "tick {t}: b's frame arrived every tick");
        }
    }
    let ids: Vec<ParticipantId> = node_a.room.speakers().collect();
    assert_eq!(ids, vec![a, b], "the order given");

    let level = |node: &Node, who: u64, freq: f32| {
        let client = node.clients.iter().find(|c| c.id.0 == who).expect("client");
        goertzel(tail(&client.heard, 1.0), freq)
    };
    // Listeners on both nodes hear both talkers.
    for (node, listener) in [(&node_a, c.0), (&node_b, d.0)] {
        for freq in [440.0, 660.0] {
            let amp = level(node, listener, freq);
            assert!(amp > 0.1, "listener {listener} hears {freq} Hz only at {amp}");
        }
    }
    // Each talker hears the other node's talker and not themselves.
    assert!(level(&node_a, a.0, 660.0) > 0.1, "a hears b across nodes");
    assert!(level(&node_a, a.0, 440.0) < 0.01, "a does not hear a: {}", level(&node_a, a.0, 440.0));
    assert!(level(&node_b, b.0, 440.0) > 0.1, "b hears a across nodes");
    assert!(level(&node_b, b.0, 660.0) < 0.01, "b does not hear b: {}", level(&node_b, b.0, 660.0));
}

#[test]
fn remotes_are_heard_not_sent_not_counted_and_take_no_packets() {
    let pool = MixPool::new(1).expect("pool");
    let cfg = RoomConfig { max_participants: 1, ..RoomConfig::default() };
    let mut room = Room::new(cfg).expect("room");
    let (local, r1, r2) = (ParticipantId(1), ParticipantId(1 << 51), ParticipantId((1 << 51) + 1));
    room.add_participant(local).expect("join");
    room.add_remote(r1).expect("a remote does not take a participant's place");
    room.add_remote(r2).expect("nor does a second");
    assert!(matches!(room.add_remote(r1), Err(MixError::DuplicateParticipant(_))));
    assert!(matches!(room.add_participant(ParticipantId(2)), Err(MixError::RoomFull(1))));
    assert_eq!((room.len(), room.remotes(), room.sources()), (3, 2, 0));
    assert!(room.is_remote(r1) && !room.is_remote(local));

    let packet = Packet { seq: 0, timestamp: 0, payload: Bytes::from_static(&[0xf8, 0xff, 0xfe]), level: Some(30) };
    assert!(matches!(room.push_packet(r1, packet), Err(MixError::Remote(id)) if id == r1));
    assert!(matches!(room.put_remote_frame(local, 30, Bytes::new()), Err(MixError::NotRemote(id)) if id == local));
    assert!(matches!(room.put_remote_frame(ParticipantId(9), 30, Bytes::new()), Err(MixError::UnknownParticipant(_))));
    assert!(matches!(room.open_channel(ChannelId(1), &[r1], &[local]), Err(MixError::UnknownParticipant(_))));

    // Both remotes talk (the mixer's own selection, no set_selection): mixed, sent nothing.
    let mut enc =
        [r1, r2].map(|_| opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Voip).expect("encoder"));
    let mut decoder = opus::Decoder::new(48_000, opus::Channels::Mono).expect("decoder");
    let mut heard = Vec::new();
    for t in 0..60u64 {
        for (n, (id, freq)) in [(r1, 440.0), (r2, 660.0)].into_iter().enumerate() {
            let pcm = tone(freq, 0.2, t * FRAME_SAMPLES as u64);
            let frame = Bytes::from(enc[n].encode_vec_float(&pcm, 1500).expect("encode"));
            room.put_remote_frame(id, level_of(&pcm), frame).expect("remote");
        }
        let report = room.tick(&pool, t);
        assert_eq!(report.participants, 1);
        for (id, delivery) in room.deliveries() {
            if id != local {
                assert_eq!(delivery, &Delivery::Nothing, "tick {t}: remote {id} is sent nothing");
            }
        }
        if t > 2 {
            assert_eq!(report.mode, MixMode::Mix);
            assert_eq!(report.encodes, 1, "tick {t}: the listeners' mix only, no N-minus-self for remotes");
            assert_eq!((report.decodes, report.remote_decodes), (2, 2), "tick {t}");
        }
        hear(&room, local, &mut decoder, &mut heard);
    }
    let heard = tail(&heard, 0.6);
    assert!(goertzel(heard, 440.0) > 0.1 && goertzel(heard, 660.0) > 0.1, "the local listener hears both remotes");

    room.remove_participant(r1).expect("leaves");
    assert_eq!((room.len(), room.remotes()), (2, 1));
    assert!(!room.contains(r1));
    let report = room.tick(&pool, 60);
    assert!(report.speakers.iter().all(|s| s.id != r1), "a removed remote is no speaker");
}

/// A room with three loud local talkers (levels 20, 25, 30) and a quiet one (60).
fn four_talkers(k: usize) -> (Room, Vec<ToneParticipant>) {
    let cfg = RoomConfig { max_speakers: SpeakerLimit::Top(k), ..RoomConfig::default() };
    let mut room = Room::new(cfg).expect("room");
    let clients: Vec<ToneParticipant> = (1..=4).map(|i| ToneParticipant::new(i, 300.0 + 100.0 * i as f32)).collect();
    for c in &clients {
        room.add_participant(c.id).expect("join");
    }
    (room, clients)
}

fn step(room: &mut Room, pool: &MixPool, clients: &mut [ToneParticipant], t: u64) -> tutti_mix::TickReport {
    for (n, c) in clients.iter_mut().enumerate() {
        let mut packet = c.next_packet(0.2);
        packet.level = Some([20, 25, 30, 60][n]);
        room.push_packet(c.id, packet).expect("in room");
    }
    room.tick(pool, t)
}

#[test]
fn an_external_selection_overrides_the_mixers_from_the_next_tick_and_none_restores_it() {
    let pool = MixPool::new(1).expect("pool");
    let (mut room, mut clients) = four_talkers(3);
    let ids = |r: &tutti_mix::TickReport| r.speakers.iter().map(|s| s.id.0).collect::<Vec<u64>>();
    let mut t = 0;
    for _ in 0..10 {
        step(&mut room, &pool, &mut clients, t);
        t += 1;
    }
    let own: Vec<u64> = room.speakers().map(|id| id.0).collect();
    assert_eq!(own, vec![1, 2, 3], "the mixer's own choice: the three loudest");

    // Absent ids and repeats skipped, at most K, in the order given; muted skipped.
    room.set_muted(ParticipantId(2), true).expect("in room");
    let order = [4, 99, 4, 2, 3, 1].map(ParticipantId).to_vec();
    room.set_selection(Some(order));
    assert_eq!(room.speakers().map(|id| id.0).collect::<Vec<_>>(), own, "not before the next tick");
    let report = step(&mut room, &pool, &mut clients, t);
    t += 1;
    assert_eq!(ids(&report), vec![4, 3, 1], "the external choice, muted 2 left out");
    assert_eq!(report.mode, MixMode::Mix);
    // Held across ticks while it stands, whatever the levels say.
    for _ in 0..30 {
        let report = step(&mut room, &pool, &mut clients, t);
        t += 1;
        assert_eq!(ids(&report), vec![4, 3, 1]);
    }
    // A single speaker from outside, and the K the room mixes lowered by shedding.
    room.set_selection(Some(vec![ParticipantId(4)]));
    let report = step(&mut room, &pool, &mut clients, t);
    t += 1;
    assert_eq!(ids(&report), vec![4]);
    room.set_shed_level(4); // at most 2 speakers
    room.set_selection(Some([1, 3, 4].map(ParticipantId).to_vec()));
    let report = step(&mut room, &pool, &mut clients, t);
    t += 1;
    assert_eq!(ids(&report), vec![1, 3], "at most K as shed, the first ones");
    room.set_shed_level(0);

    // None: the mixer selects again from the speakers it has: free seats
    // to the loudest, and the quiet 4 (67 dB) gives way to 3 (97 dB), more
    // than the hysteresis louder.
    room.set_muted(ParticipantId(2), false).expect("in room");
    room.set_selection(Some(vec![ParticipantId(4)]));
    step(&mut room, &pool, &mut clients, t);
    t += 1;
    room.set_selection(None);
    assert!(room.selection().is_none());
    let report = step(&mut room, &pool, &mut clients, t);
    let mut got = ids(&report);
    got.sort_unstable();
    assert_eq!(got, vec![1, 2, 3], "the mixer's own choice again");
}

#[test]
fn a_whisperer_is_never_a_candidate_for_other_nodes() {
    let pool = MixPool::new(1).expect("pool");
    let mut room = Room::new(RoomConfig::default()).expect("room");
    // 1 whispers to 2; 3 talks in the room. All three are loud.
    let mut clients: Vec<ToneParticipant> = (1..=3).map(|i| ToneParticipant::new(i, 300.0 * i as f32)).collect();
    for c in &clients {
        room.add_participant(c.id).expect("join");
    }
    room.open_channel(ChannelId(1), &[ParticipantId(1)], &[ParticipantId(2)]).expect("open");
    let mut out = Vec::new();
    for t in 0..20 {
        for c in clients.iter_mut() {
            let packet = c.next_packet(0.3);
            room.push_packet(c.id, packet).expect("in room");
        }
        room.tick(&pool, t);
    }
    room.candidates(2, &mut out);
    let mut got: Vec<u64> = out.iter().map(|c| c.id.0).collect();
    got.sort_unstable();
    assert_eq!(got, vec![2, 3], "the channel's listener talks in the room; its whisperer stays on this node");
    // Once the channel closes, the former whisperer is a candidate again.
    room.close_channel(ChannelId(1)).expect("close");
    room.candidates(2, &mut out);
    assert!(out.iter().any(|c| c.id.0 == 1), "{:?}", out.iter().map(|c| c.id).collect::<Vec<_>>());
}

#[test]
fn candidates_are_the_loudest_locals_plus_challengers_and_the_selected_with_their_frames() {
    let pool = MixPool::new(1).expect("pool");
    let cfg = RoomConfig { max_speakers: SpeakerLimit::Top(2), ..RoomConfig::default() };
    let mut room = Room::new(cfg).expect("room");
    // Locals 1..=6 at levels 20, 25, 30, 35, 40 and silent (127); 7 muted and loud;
    // a source and a remote, both loud.
    let levels = [20u8, 25, 30, 35, 40, 127, 10];
    let mut clients: Vec<ToneParticipant> =
        (1..=7).map(|i| ToneParticipant::new(i, 200.0 + 100.0 * i as f32)).collect();
    for c in &clients {
        room.add_participant(c.id).expect("join");
    }
    room.set_muted(ParticipantId(7), true).expect("in room");
    let (source, remote) = (ParticipantId(1 << 52), ParticipantId(1 << 51));
    room.add_source(source).expect("source");
    room.add_remote(remote).expect("remote");
    let mut file = ToneParticipant::new(source.0, 900.0);
    let mut out = Vec::new();
    let mut sent: Vec<Vec<Bytes>> = vec![Vec::new(); clients.len()];
    let mut file_sent = Vec::new();
    let remote_frame = Bytes::from(
        opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Voip)
            .expect("encoder")
            .encode_vec_float(&tone(1000.0, 0.2, 0), 1500)
            .expect("encode"),
    );
    for t in 0..30 {
        for (n, c) in clients.iter_mut().enumerate() {
            let mut packet = c.next_packet(if levels[n] == 127 { 0.0 } else { 0.2 });
            packet.level = Some(levels[n]);
            sent[n].push(packet.payload.clone());
            room.push_packet(c.id, packet).expect("in room");
        }
        let packet = file.next_packet(0.2);
        file_sent.push(packet.payload.clone());
        room.push_packet(source, packet).expect("source");
        room.put_remote_frame(remote, 5, remote_frame.clone()).expect("remote");
        // Selected from outside: local 5 (the quietest talker) and the remote.
        room.set_selection(Some(vec![ParticipantId(5), remote]));
        room.tick(&pool, t);
    }
    room.candidates(1, &mut out);
    let got: Vec<(u64, u8, u16, bool)> = out.iter().map(|c| (c.id.0, c.level, c.rank, c.selected)).collect();
    // The source first (a playback ranks above everyone while it sounds, on
    // every node as on its own), then K = 2 loudest + 1 challenger among
    // the rest, then the selected local 5; never 6 (silent), 7 (muted) or
    // the remote. Rank: (127 − level) dB × 256 at a steady level.
    let source_level = got.first().map_or(127, |c| c.1);
    assert_eq!(
        got,
        vec![
            (source.0, source_level, u16::MAX, false),
            (1, 20, 107 * 256, false),
            (2, 25, 102 * 256, false),
            (5, 40, 87 * 256, true)
        ]
    );
    for c in &out {
        let frame = c.frame.as_ref().expect("a frame played this tick");
        if c.id == source {
            assert!(file_sent.contains(frame), "the source's frame is one of the file's, unchanged");
            continue;
        }
        let n = (c.id.0 - 1) as usize;
        assert!(sent[n].contains(frame), "{}: the frame is one it sent, unchanged", c.id);
    }
    // The selected speaker's frame is the one the mixer played this tick.
    let played: Vec<(ParticipantId, Option<Bytes>)> =
        room.speaker_frames().map(|(id, _, f)| (id, f.cloned())).collect();
    let five = played.iter().find(|(id, _)| *id == ParticipantId(5)).expect("selected");
    assert_eq!(five.1, out[3].frame);

    // A selected speaker who stops talking stays a candidate through the
    // hold time, then is left out (so the selection across nodes lets them go).
    let mut last = Vec::new();
    for t in 30..70 {
        for (n, c) in clients.iter_mut().enumerate() {
            let mut packet = c.next_packet(0.0);
            packet.level = Some(if n == 4 { 127 } else { levels[n] });
            room.push_packet(c.id, packet).expect("in room");
        }
        room.set_selection(Some(vec![ParticipantId(5)]));
        room.tick(&pool, t);
        room.candidates(1, &mut out);
        let five = out.iter().find(|c| c.id == ParticipantId(5)).map(|c| (c.level, c.selected));
        last.push(five);
    }
    assert_eq!(last[5], Some((127, true)), "in a pause: still a candidate, selected, silent");
    assert_eq!(*last.last().expect("ticks"), None, "hold expired: left out");
}

#[test]
fn a_lone_remote_speaker_is_forwarded_byte_for_byte() {
    let pool = MixPool::new(1).expect("pool");
    let mut room = Room::new(RoomConfig::default()).expect("room");
    let (l1, l2, r) = (ParticipantId(1), ParticipantId(2), ParticipantId(1 << 51));
    room.add_participant(l1).expect("join");
    room.add_participant(l2).expect("join");
    room.add_remote(r).expect("remote");
    let mut enc = opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Voip).expect("encoder");
    let mut forwarded = 0;
    for t in 0..40u64 {
        let pcm = tone(440.0, 0.2, t * FRAME_SAMPLES as u64);
        let frame = Bytes::from(enc.encode_vec_float(&pcm, 1500).expect("encode"));
        room.set_selection(Some(vec![r]));
        if t == 20 {
            // Lost on the way: a gap the listeners' decoders conceal, no codec work here.
            let report = room.tick(&pool, t);
            assert_eq!(report.mode, MixMode::Forward(r));
            assert_eq!((report.lost, report.decodes, report.encodes), (1, 0, 0));
            assert_eq!(room.delivery_for(l1), Some(&Delivery::Nothing));
            continue;
        }
        room.put_remote_frame(r, level_of(&pcm), frame.clone()).expect("remote");
        let report = room.tick(&pool, t);
        assert_eq!(report.mode, MixMode::Forward(r), "tick {t}");
        assert_eq!((report.decodes, report.encodes), (0, 0), "tick {t}: no codec work");
        for l in [l1, l2] {
            match room.delivery_for(l) {
                Some(Delivery::Forward { from, payload }) => {
                    assert_eq!(*from, r);
                    assert_eq!(payload, &frame, "tick {t}: the bytes put, unchanged");
                    assert_eq!(payload.as_ptr(), frame.as_ptr(), "shared, not copied");
                }
                other => panic!("tick {t}: {other:?}"),
            }
        }
        assert_eq!(report.forwarded, 2);
        forwarded += 1;
    }
    assert_eq!(forwarded, 39);
}

/// What a speaker's frames do is the same whether the speaker is local or
/// remote: one room where speaker S is local and talker T local, one where
/// S is a remote fed exactly the frames the first room played; the
/// listeners' streams must be byte-identical through forward → mix (with
/// the priming from S's recent frames) → forward, and S's frames primed
/// count as remote decodes.
#[test]
fn a_remote_speaker_switches_between_forward_and_mix_exactly_as_a_local_one() {
    let pool = MixPool::new(1).expect("pool");
    let (s, t_id, listener) = (ParticipantId(10), ParticipantId(11), ParticipantId(12));
    let mut local = Room::new(RoomConfig::default()).expect("room");
    let mut remote = Room::new(RoomConfig::default()).expect("room");
    for id in [s, t_id, listener] {
        local.add_participant(id).expect("join");
    }
    for id in [t_id, listener] {
        remote.add_participant(id).expect("join");
    }
    remote.add_remote(s).expect("remote");
    let mut speaker = ToneParticipant::new(s.0, 440.0);
    let mut talker = ToneParticipant::new(t_id.0, 660.0);
    let mut quiet = ToneParticipant::new(listener.0, 0.0);
    // S talks throughout but pauses for 100 ms every 500 ms (so the way back
    // to forwarding finds a pause); T joins in for ticks 40..80.
    let s_talks = |t: u64| t % 25 < 20;
    let selection = |t: u64| if (40..80).contains(&t) { vec![s, t_id] } else { vec![s] };
    let (mut modes, mut primed, mut remote_primes) = (Vec::new(), 0, 0);
    for t in 0..160u64 {
        let sp = speaker.next_packet(if s_talks(t) { 0.3 } else { 0.0 });
        let tp = talker.next_packet(0.2);
        let lp = quiet.next_packet(0.0);
        local.push_packet(s, sp).expect("in");
        for room in [&mut local, &mut remote] {
            room.push_packet(t_id, tp.clone()).expect("in");
            room.push_packet(listener, lp.clone()).expect("in");
            room.set_selection(Some(selection(t)));
        }
        let rl = local.tick(&pool, t);
        // What the local room played of S this tick, handed to the other as a remote frame.
        let (_, level, frame) = local.speaker_frames().find(|(id, _, _)| *id == s).expect("S is selected");
        if let Some(frame) = frame.cloned() {
            remote.put_remote_frame(s, level, frame).expect("remote");
        }
        let rr = remote.tick(&pool, t);
        assert_eq!(rl.mode, rr.mode, "tick {t}");
        assert_eq!(rl.primes, rr.primes, "tick {t}");
        assert_eq!(
            local.listener_payload(),
            remote.listener_payload(),
            "tick {t} ({:?}): the listeners get the same bytes",
            rl.mode
        );
        assert_eq!(local.payload_for(t_id), remote.payload_for(t_id), "tick {t}: T's N-minus-self too");
        assert_eq!(remote.delivery_for(s), Some(&Delivery::Nothing));
        modes.push(rr.mode);
        primed += rr.primes;
        if rr.primes > 0 {
            remote_primes += rr.remote_decodes;
        }
    }
    assert_eq!(modes[30], MixMode::Forward(s));
    assert_eq!(modes[50], MixMode::Mix);
    assert_eq!(modes[150], MixMode::Forward(s), "back to forwarding after T left, in a pause");
    assert!(primed >= 4, "the switch to the mix was primed from the remote's recent frames ({primed})");
    assert!(remote_primes >= 4, "the primes decoded the remote's frames ({remote_primes})");
}

#[test]
fn a_lost_remote_frame_is_concealed_and_a_bad_one_is_silence() {
    let pool = MixPool::new(1).expect("pool");
    let mut room = Room::new(RoomConfig::default()).expect("room");
    let (listener, r1, r2) = (ParticipantId(1), ParticipantId(1 << 51), ParticipantId((1 << 51) + 1));
    room.add_participant(listener).expect("join");
    room.add_remote(r1).expect("remote");
    room.add_remote(r2).expect("remote");
    let mut enc =
        [0, 1].map(|_| opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Voip).expect("encoder"));
    let mut decoder = opus::Decoder::new(48_000, opus::Channels::Mono).expect("decoder");
    let mut heard = Vec::new();
    let (mut concealed, mut errors_seen) = (0, false);
    for t in 0..80u64 {
        room.set_selection(Some(vec![r1, r2]));
        for (n, (id, freq)) in [(r1, 440.0), (r2, 660.0)].into_iter().enumerate() {
            let pcm = tone(freq, 0.2, t * FRAME_SAMPLES as u64);
            let frame = Bytes::from(enc[n].encode_vec_float(&pcm, 1500).expect("encode"));
            match (n, t) {
                // r1's frames of ticks 20..23 are lost on the way.
                (0, 20..23) => {}
                // From tick 40 on, r2's node sends garbage: not Opus, then empty, then huge.
                (1, 40..) => {
                    let bad = match t % 3 {
                        0 => Bytes::from_static(&[0xff; 7]),
                        1 => Bytes::new(),
                        _ => Bytes::from(vec![0x0b; 5000]),
                    };
                    room.put_remote_frame(id, 20, bad).expect("remote");
                }
                _ => room.put_remote_frame(id, level_of(&pcm), frame).expect("remote"),
            }
        }
        let report = room.tick(&pool, t);
        if (20..23).contains(&t) {
            assert_eq!(report.concealed, 1, "tick {t}: r1's lost frame concealed");
            assert_eq!(report.lost, 1, "tick {t}");
        }
        concealed += report.concealed;
        assert_eq!(report.mode, MixMode::Mix, "tick {t}: still mixing both");
        if t >= 40 {
            assert_eq!(report.remote_decodes, 1, "tick {t}: only r1's frame decodes");
            errors_seen = true;
        }
        hear(&room, listener, &mut decoder, &mut heard);
    }
    assert_eq!(concealed, 3);
    assert!(errors_seen);
    let stats = room.participant_stats(r2).expect("in room");
    assert_eq!(stats.decode_errors, 40, "every bad frame counted");
    assert_eq!(room.participant_stats(r1).expect("in room").concealed, 3);
    // r1 still heard, r2 heard as silence.
    let tail = tail(&heard, 0.5);
    assert!(goertzel(tail, 440.0) > 0.1, "r1 heard: {}", goertzel(tail, 440.0));
    assert!(goertzel(tail, 660.0) < 0.01, "r2's garbage is silence: {}", goertzel(tail, 660.0));
}

#[test]
fn a_bad_frame_of_a_forwarded_remote_is_a_gap_and_counted() {
    let pool = MixPool::new(1).expect("pool");
    let mut room = Room::new(RoomConfig::default()).expect("room");
    let (listener, r) = (ParticipantId(1), ParticipantId(1 << 51));
    room.add_participant(listener).expect("join");
    room.add_remote(r).expect("remote");
    room.set_selection(Some(vec![r]));
    let mut enc = opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Voip).expect("encoder");
    for t in 0..10u64 {
        let pcm = tone(440.0, 0.2, t * FRAME_SAMPLES as u64);
        let frame = Bytes::from(enc.encode_vec_float(&pcm, 1500).expect("encode"));
        let frame = if t == 5 { Bytes::from_static(&[0xff, 0xff, 0xff]) } else { frame };
        let report = {
            room.put_remote_frame(r, level_of(&pcm), frame).expect("remote");
            room.tick(&pool, t)
        };
        assert_eq!(report.mode, MixMode::Forward(r));
        let d = room.delivery_for(listener).expect("in room");
        assert_eq!(d.is_nothing(), t == 5, "tick {t}: {d:?}");
    }
    assert_eq!(room.participant_stats(r).expect("in room").decode_errors, 1);
}

/// A remote speaker and a local whisper channel in one room: the remote is
/// heard by everyone (room and channel), the coach only by the one they
/// whisper to; the remote is decoded once a tick, whoever hears it.
#[test]
fn a_remote_speaker_is_heard_through_whisper_channels_too() {
    let pool = MixPool::new(2).expect("pool");
    let mut room = Room::new(RoomConfig::default()).expect("room");
    let remote = ParticipantId(1 << 51);
    // Coach (880 Hz) whispers to P; L listens to the room only.
    let mut coach = ToneParticipant::new(1, 880.0);
    let mut p = ToneParticipant::new(2, 550.0);
    let mut l = ToneParticipant::new(3, 770.0);
    for c in [&coach, &p, &l] {
        room.add_participant(c.id).expect("join");
    }
    room.add_remote(remote).expect("remote");
    room.open_channel(ChannelId(1), &[coach.id], &[p.id]).expect("open");
    let mut enc = opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Voip).expect("encoder");
    for t in 0..100u64 {
        let pcm = tone(440.0, 0.2, t * FRAME_SAMPLES as u64);
        let frame = Bytes::from(enc.encode_vec_float(&pcm, 1500).expect("encode"));
        room.put_remote_frame(remote, level_of(&pcm), frame).expect("remote");
        room.set_selection(Some(vec![remote, coach.id]));
        room.push_packet(coach.id, coach.next_packet(0.2)).expect("in");
        room.push_packet(p.id, p.next_packet(0.0)).expect("in");
        room.push_packet(l.id, l.next_packet(0.0)).expect("in");
        let report = room.tick(&pool, t);
        if t > 5 {
            assert_eq!(report.remote_decodes, 1, "tick {t}: the remote decoded once");
            assert_eq!(report.whisper_encodes, 1, "tick {t}");
        }
        for c in [&mut coach, &mut p, &mut l] {
            c.receive(&room);
        }
    }
    let hears = |c: &ToneParticipant, f: f32| goertzel(tail(&c.heard, 1.0), f);
    assert!(hears(&l, 440.0) > 0.1, "L hears the remote");
    assert!(hears(&l, 880.0) < 0.01, "L does not hear the coach");
    assert!(hears(&p, 440.0) > 0.1 && hears(&p, 880.0) > 0.1, "P hears the remote and the coach");
    assert!(hears(&coach, 440.0) > 0.1 && hears(&coach, 880.0) < 0.01, "the coach hears the remote, not themselves");
}

mod properties {
    use bytes::Bytes;
    use proptest::prelude::*;
    use tutti_mix::{Packet, ParticipantId, Room, RoomConfig, SpeakerLimit};

    proptest! {
        /// `candidates()`: locals only, never muted, loudest first; every
        /// selected local still talking is in; the others are the loudest
        /// non-silent locals, at most K + extra of them counted with the
        /// selected ones, and none left out is louder than one kept.
        #[test]
        fn candidates_are_the_loudest_usable_locals(
            k in 1usize..5,
            extra in 0usize..3,
            levels in prop::collection::vec(prop_oneof![Just(127u8), 0u8..127], 12),
            muted in prop::collection::vec(any::<bool>(), 12),
            selection in prop::collection::vec(0u64..16, 0..6),
        ) {
            let cfg = RoomConfig { max_speakers: SpeakerLimit::Top(k), ..RoomConfig::default() };
            let silence = cfg.silence_level;
            let mut room = Room::new(cfg).expect("room");
            for id in 0..12 {
                room.add_participant(ParticipantId(id)).expect("join");
                room.set_muted(ParticipantId(id), muted[id as usize]).expect("in room");
            }
            for id in 12..16 {
                room.add_remote(ParticipantId(id)).expect("remote");
            }
            room.set_selection(Some(selection.iter().copied().map(ParticipantId).collect()));
            let mut out = Vec::new();
            for t in 0..4u64 {
                for id in 0..12u64 {
                    let payload = Bytes::from_static(&[0xf8, 0xff, 0xfe]);
                    let packet = Packet { seq: t as u16, timestamp: t as u32 * 960, payload, level: Some(levels[id as usize]) };
                    room.push_packet(ParticipantId(id), packet).expect("in room");
                }
                room.tick_inline(t);
            }
            room.candidates(extra, &mut out);
            let selected: Vec<u64> = room.speakers().map(|id| id.0).collect();
            for w in out.windows(2) {
                prop_assert!(w[0].rank >= w[1].rank, "loudest first");
            }
            for c in &out {
                prop_assert!(c.id.0 < 12 && !muted[c.id.0 as usize], "{} is a usable local", c.id);
                prop_assert_eq!(c.selected, selected.contains(&c.id.0));
                prop_assert!(c.selected || c.level < silence, "{} is silent", c.id);
            }
            for &s in selected.iter().filter(|&&s| s < 12) {
                if room.is_talking(ParticipantId(s)).expect("in room") {
                    prop_assert!(out.iter().any(|c| c.id.0 == s), "selected {} kept", s);
                }
            }
            // The K + extra first by (rank, then id) are kept; beyond them, only the selected.
            let keep = k + extra;
            let before = |r: u16, id: u64| out.iter().filter(|c| (c.rank, std::cmp::Reverse(c.id.0)) > (r, std::cmp::Reverse(id))).count();
            for (n, c) in out.iter().enumerate() {
                if !c.selected {
                    prop_assert!(n < keep, "{} kept beyond K + extra", c.id);
                }
            }
            for id in 0..12u64 {
                let usable = !muted[id as usize] && levels[id as usize] < silence && !selected.contains(&id);
                if usable && !out.iter().any(|c| c.id.0 == id) {
                    let rank = u16::from(127 - levels[id as usize]) * 256;
                    prop_assert!(before(rank, id) >= keep, "{} left out with room to spare", id);
                }
            }
        }
    }

    proptest! {
        /// Whatever ids are given (absent, repeated, muted, local or remote),
        /// the speakers after the next tick are the first K usable ones, in
        /// the order given, and nobody else.
        #[test]
        fn an_external_selection_is_the_first_k_usable_ids_in_order(
            k in 1usize..5,
            steps in prop::collection::vec(
                (prop::collection::vec(0u64..12, 0..8), prop::collection::vec(any::<bool>(), 10)),
                1..8,
            ),
        ) {
            let cfg = RoomConfig { max_speakers: SpeakerLimit::Top(k), ..RoomConfig::default() };
            let mut room = Room::new(cfg).expect("room");
            // 0..6 local, 6..10 remote, 10 and 11 not in the room.
            for id in 0..6 {
                room.add_participant(ParticipantId(id)).expect("join");
            }
            for id in 6..10 {
                room.add_remote(ParticipantId(id)).expect("remote");
            }
            for (t, (ids, muted)) in steps.into_iter().enumerate() {
                for (id, &m) in muted.iter().enumerate() {
                    room.set_muted(ParticipantId(id as u64), m).expect("in room");
                }
                let mut want: Vec<u64> = Vec::new();
                for &id in &ids {
                    if id < 10 && !muted[id as usize] && !want.contains(&id) && want.len() < k {
                        want.push(id);
                    }
                }
                room.set_selection(Some(ids.into_iter().map(ParticipantId).collect()));
                let report = room.tick_inline(t as u64);
                let got: Vec<u64> = report.speakers.iter().map(|s| s.id.0).collect();
                prop_assert_eq!(&got, &want);
                let now: Vec<u64> = room.speakers().map(|id| id.0).collect();
                prop_assert_eq!(now, want);
            }
        }
    }
}

/// With `fill_free_seats` (as the mesh sets it), a local talker's first
/// frame is mixed on its own node in the tick it arrives, although the
/// selection from outside (made of the candidates of the tick before) does
/// not name it yet; its candidate is not flagged selected (the next
/// selection across nodes decides), and a remote, a muted local or a full
/// set never gets such a seat. Without it the first frame is not played.
#[test]
fn a_local_talkers_first_frame_takes_a_free_seat_on_its_own_node() {
    let pool = MixPool::new(1).expect("pool");
    for fill in [true, false] {
        let cfg = RoomConfig { max_speakers: SpeakerLimit::Top(2), ..RoomConfig::default() };
        let mut room = Room::new(cfg).expect("room");
        let mut talker = ToneParticipant::new(1, 440.0);
        let mut listener = ToneParticipant::new(2, 660.0);
        let mut muted = ToneParticipant::new(3, 880.0);
        for c in [&talker, &listener, &muted] {
            room.add_participant(c.id).expect("join");
        }
        room.set_muted(muted.id, true).expect("in room");
        let remote = ParticipantId(1 << 51);
        room.add_remote(remote).expect("remote");
        room.fill_free_seats(fill);
        let mut candidates = Vec::new();
        let (mut onset, mut first) = (None, None);
        for t in 0..12u64 {
            // The selection across nodes names nobody until the talker's
            // candidate of the tick before says it talks (as the mesh does).
            let named: Vec<ParticipantId> = candidates
                .iter()
                .filter(|c: &&LocalCandidate| c.id == talker.id && c.level < 127)
                .map(|c| c.id)
                .collect();
            room.set_selection(Some(named));
            let amplitude = if t >= 5 { 0.3 } else { 0.0 };
            for (c, a) in [(&mut talker, amplitude), (&mut listener, 0.0), (&mut muted, 0.3)] {
                let packet = c.next_packet(a);
                room.push_packet(c.id, packet).expect("local");
            }
            // The remote talks too, but only the selection may seat it.
            room.put_remote_frame(remote, 10, Bytes::from_static(&[0xf8, 0xff, 0xfe])).expect("remote");
            let report = room.tick(&pool, t);
            room.candidates(2, &mut candidates);
            let seated: Vec<ParticipantId> = room.speakers().collect();
            assert!(!seated.contains(&remote) && !seated.contains(&muted.id), "tick {t}: {seated:?}");
            // The tick the talker's first frame is played out of its jitter buffer.
            if onset.is_none()
                && let Some(c) = candidates.iter().find(|c| c.id == talker.id && c.level < 127)
            {
                onset = Some(t);
                assert!(!c.selected || !fill, "a seat for this tick only is not the selection across nodes'");
            }
            if first.is_none() && report.mode == MixMode::Forward(talker.id) {
                first = Some(t);
            }
        }
        let onset = onset.expect("the talker talked");
        let expected = if fill { onset } else { onset + 1 };
        assert_eq!(
            first,
            Some(expected),
            "fill {fill}: the talker first talks at tick {onset}, is first played at {first:?}"
        );
    }
}

/// Every seat taken (K = 1, a remote speaker selected from outside): a
/// local talker's first frame cannot take a free seat. The selection
/// across nodes names it the tick after its first frame (made of that
/// tick's candidates); its own node then plays that first frame, and the
/// rest of its turn, a tick late, as the other nodes do, rather than lose
/// it; the candidates carry its frames as they come. Without
/// `fill_free_seats` (the mixer's own selection from outside, no mesh)
/// the frame of the tick is played, as before.
#[test]
fn a_local_talker_seated_from_outside_is_played_from_its_first_frame_a_tick_late() {
    let pool = MixPool::new(1).expect("pool");
    for fill in [true, false] {
        let cfg = RoomConfig { max_speakers: SpeakerLimit::Top(1), ..RoomConfig::default() };
        let mut room = Room::new(cfg).expect("room");
        let mut talker = ToneParticipant::new(1, 440.0);
        let mut listener = ToneParticipant::new(2, 660.0);
        for c in [&talker, &listener] {
            room.add_participant(c.id).expect("join");
        }
        let remote = ParticipantId(1 << 51);
        room.add_remote(remote).expect("remote");
        room.fill_free_seats(fill);
        let mut candidates = Vec::new();
        let mut sent: Vec<Option<Bytes>> = Vec::new();
        let mut played: Vec<Option<Bytes>> = Vec::new();
        let mut carried: Vec<Option<Bytes>> = Vec::new();
        for t in 0..14u64 {
            // The remote holds the one seat until the talker's candidate of
            // the tick before says it talks; then the talker has it.
            let talks = candidates.iter().any(|c: &LocalCandidate| c.id == talker.id && c.level < 127);
            room.set_selection(Some(vec![if talks { talker.id } else { remote }]));
            let amplitude = if t >= 5 { 0.3 } else { 0.0 };
            let packet = talker.next_packet(amplitude);
            sent.push((amplitude > 0.0).then(|| packet.payload.clone()));
            room.push_packet(talker.id, packet).expect("local");
            room.push_packet(listener.id, listener.next_packet(0.0)).expect("local");
            room.put_remote_frame(remote, 10, Bytes::from_static(&[0xf8, 0xff, 0xfe])).expect("remote");
            room.tick(&pool, t);
            room.candidates(1, &mut candidates);
            played.push(room.speaker_frames().find(|(id, _, _)| *id == talker.id).and_then(|(_, _, f)| f.cloned()));
            carried.push(candidates.iter().find(|c| c.id == talker.id).and_then(|c| c.frame.clone()));
        }
        // The tick its first frame came out of its jitter buffer: the first candidate frame that talks.
        let onset = carried.iter().position(|f| f.as_ref().is_some_and(|f| sent.contains(&Some(f.clone()))));
        let onset = onset.expect("the talker talked");
        let first_played = played.iter().position(Option::is_some).expect("the talker was seated");
        assert_eq!(first_played, onset + 1, "fill {fill}: seated the tick after its onset");
        for t in first_played..played.len() {
            // Its candidates carry each tick's own frame, whatever is played here.
            assert!(carried[t].is_some(), "fill {fill}, tick {t}: a candidate frame");
            let want = if fill { &carried[t - 1] } else { &carried[t] };
            assert_eq!(
                &played[t],
                want,
                "fill {fill}, tick {t}: played {}",
                if fill { "a tick late" } else { "as it came" }
            );
        }
    }
}

/// A source kept local (a node's hold music in a spread room): heard on its
/// own node, on a seat the selection across nodes leaves free, and never one
/// of the node's candidates (so no other node plays it over its own).
#[test]
fn a_source_kept_local_is_heard_here_and_never_a_candidate() {
    let pool = MixPool::new(1).expect("pool");
    let mut room = Room::new(RoomConfig::default()).expect("room");
    let mut listener = ToneParticipant::new(1, 300.0);
    room.add_participant(listener.id).expect("join");
    let source = ParticipantId(1 << 52);
    room.add_source(source).expect("source");
    room.keep_local(source, true).expect("in room");
    assert!(room.keep_local(ParticipantId(99), true).is_err(), "an unknown id is told");
    room.fill_free_seats(true);
    let mut file = ToneParticipant::new(source.0, 900.0);
    let mut out = Vec::new();
    for t in 0..50 {
        let packet = listener.next_packet(0.0);
        room.push_packet(listener.id, packet).expect("in room");
        room.push_packet(source, file.next_packet(0.2)).expect("source");
        // Nobody selected across the nodes: the seats are free.
        room.set_selection(Some(Vec::new()));
        room.tick(&pool, t);
        listener.receive(&room);
        room.candidates(2, &mut out);
        assert!(out.iter().all(|c| c.id != source), "tick {t}: kept local, yet a candidate");
        // Once sounding, seated at every tick (not every other one).
        let seated = room.speaker_frames().any(|(id, _, _)| id == source);
        assert!(seated || t < 5, "tick {t}: kept local, and not heard");
    }
    let heard = tail(&listener.heard, 0.4);
    assert!(goertzel(heard, 900.0) > 0.05, "the listener hears it: {}", goertzel(heard, 900.0));
    // Not kept local any more: a candidate again, ranked above everyone.
    room.keep_local(source, false).expect("in room");
    room.push_packet(source, file.next_packet(0.2)).expect("source");
    room.tick(&pool, 50);
    room.candidates(2, &mut out);
    assert_eq!(out.first().map(|c| (c.id, c.rank)), Some((source, u16::MAX)));
}
