//! What each participant is sent per tick: DTX while nobody speaks, the one
//! speaker's own frames forwarded, the encoded mix for two or more; each
//! policy switchable; cost shedding in steps.

mod common;

use bytes::Bytes;
use common::ToneParticipant;
use tutti_mix::{
    DTX_FRAME, DTX_INTERVAL_TICKS, Delivery, MixMode, MixPool, Packet, ParticipantId, Room, RoomConfig, SpeakerLimit,
    TickReport,
};

/// A room of `talkers` tone clients (ids 1..) and `listeners` silent
/// participants (ids 100..) that send level-127 silence.
struct Scene {
    room: Room,
    pool: MixPool,
    talkers: Vec<ToneParticipant>,
    silent: Vec<ToneParticipant>,
}

impl Scene {
    fn new(cfg: RoomConfig, talkers: usize, listeners: usize) -> Self {
        let mut room = Room::new(cfg).expect("room");
        let talkers: Vec<ToneParticipant> =
            (0..talkers).map(|i| ToneParticipant::new(1 + i as u64, 300.0 + 110.0 * i as f32)).collect();
        let silent: Vec<ToneParticipant> =
            (0..listeners).map(|i| ToneParticipant::new(100 + i as u64, 500.0)).collect();
        for c in talkers.iter().chain(&silent) {
            room.add_participant(c.id).expect("join");
        }
        Self { room, pool: MixPool::new(1).expect("pool"), talkers, silent }
    }

    /// One tick; `talking(i)` says whether talker i talks. Returns the report
    /// and each talker's pushed payload.
    fn tick(&mut self, t: u64, talking: impl Fn(usize) -> bool) -> (TickReport, Vec<Bytes>) {
        let sent = self.push(talking);
        (self.room.tick(&self.pool, t), sent)
    }

    /// Pushes everyone's next packet; returns each talker's payload.
    fn push(&mut self, talking: impl Fn(usize) -> bool) -> Vec<Bytes> {
        let mut sent = Vec::new();
        for (i, c) in self.talkers.iter_mut().enumerate() {
            let packet = c.next_packet(if talking(i) { 0.3 } else { 0.0 });
            sent.push(packet.payload.clone());
            self.room.push_packet(c.id, packet).expect("in room");
        }
        for c in &mut self.silent {
            let packet = c.next_packet(0.0);
            self.room.push_packet(c.id, packet).expect("in room");
        }
        sent
    }
}

#[test]
fn a_silent_room_sends_dtx_every_400_ms_and_runs_no_codec() {
    let mut scene = Scene::new(RoomConfig::default(), 0, 10);
    let listener = ParticipantId(100);
    let mut dtx_ticks = Vec::new();
    for t in 0..100 {
        let (report, _) = scene.tick(t, |_| false);
        assert_eq!((report.decodes, report.encodes, report.mode), (0, 0, MixMode::Silent), "tick {t}");
        match scene.room.delivery_for(listener).expect("in room") {
            Delivery::Dtx(p) => {
                assert_eq!(&p[..], &DTX_FRAME);
                assert_eq!(report.dtx, 10);
                dtx_ticks.push(t);
            }
            Delivery::Nothing => assert_eq!(report.dtx, 0),
            other => panic!("tick {t}: {other:?}"),
        }
        assert!(scene.room.listener_payload().len() <= 1);
    }
    assert_eq!(dtx_ticks, (0..100).step_by(DTX_INTERVAL_TICKS as usize).collect::<Vec<_>>());
    // The DTX frame is a valid Opus packet a real decoder conceals from.
    let mut dec = opus::Decoder::new(48_000, opus::Channels::Mono).expect("decoder");
    let mut pcm = [0.0f32; 960];
    assert_eq!(dec.decode_float(&DTX_FRAME, &mut pcm, false).expect("decodes"), 960);
}

#[test]
fn one_speaker_is_forwarded_byte_for_byte_and_hears_nothing() {
    let mut scene = Scene::new(RoomConfig::default(), 1, 5);
    let speaker = ParticipantId(1);
    let mut forwarded = 0;
    let mut history: Vec<Bytes> = Vec::new();
    for t in 0..60 {
        let (report, sent) = scene.tick(t, |_| true);
        history.push(sent[0].clone());
        if let MixMode::Forward(id) = report.mode {
            assert_eq!(id, speaker);
            assert_eq!((report.decodes, report.encodes), (0, 0), "tick {t}: no codec work");
            let Delivery::Forward { from, payload } = scene.room.listener_delivery() else {
                panic!("tick {t}: {:?}", scene.room.listener_delivery())
            };
            assert_eq!(*from, speaker);
            // One of the speaker's own packets (the jitter buffer delays them), unchanged.
            assert!(history.contains(payload), "tick {t}: forwarded bytes are the speaker's");
            assert_eq!(report.forwarded, 5);
            assert_eq!(scene.room.delivery_for(ParticipantId(103)), Some(scene.room.listener_delivery()));
            let own = scene.room.delivery_for(speaker).expect("in room");
            assert!(
                matches!(own, Delivery::Nothing | Delivery::Dtx(_)),
                "tick {t}: the speaker hears nothing: {own:?}"
            );
            forwarded += 1;
        }
    }
    assert!(forwarded >= 50, "forwarded {forwarded} of 60 ticks");
}

#[test]
fn two_speakers_are_mixed_and_the_old_policy_can_be_restored() {
    let mut scene = Scene::new(RoomConfig::default(), 2, 3);
    for t in 0..30 {
        let (report, _) = scene.tick(t, |_| true);
        if t >= 5 {
            assert_eq!(report.mode, MixMode::Mix, "tick {t}");
            assert_eq!(report.encodes, 3, "one listener encode and one per speaker");
            assert!(matches!(scene.room.listener_delivery(), Delivery::Mix(p) if !p.is_empty()));
            for (_, d) in scene.room.speaker_deliveries() {
                assert!(matches!(d, Delivery::Mix(p) if !p.is_empty()));
            }
        }
    }
    // Pass-through and DTX off: an encoded frame for everyone, every tick,
    // whether nobody, one or two speak.
    let cfg = RoomConfig { passthrough: false, dtx: false, ..RoomConfig::default() };
    let mut scene = Scene::new(cfg, 2, 3);
    for t in 0..120 {
        let talking = move |i: usize| (t < 40 && i == 0) || (40..80).contains(&t);
        let (report, _) = scene.tick(t, talking);
        assert_eq!(report.mode, MixMode::Mix, "tick {t}");
        assert_eq!(report.encodes, 1 + report.speakers.len());
        assert_eq!((report.forwarded, report.dtx), (0, 0));
        for (_, d) in scene.room.deliveries() {
            assert!(matches!(d, Delivery::Mix(p) if !p.is_empty()), "tick {t}: {d:?}");
        }
    }
}

#[test]
fn shedding_lowers_complexity_then_speakers() {
    let cfg = RoomConfig { max_speakers: SpeakerLimit::Top(5), ..RoomConfig::default() };
    let mut scene = Scene::new(cfg, 5, 2);
    let mut t = 0;
    let mut run = |scene: &mut Scene, ticks: u64| {
        let mut last = None;
        for _ in 0..ticks {
            last = Some(scene.tick(t, |_| true).0);
            t += 1;
        }
        last.expect("ran")
    };
    let report = run(&mut scene, 10);
    assert_eq!((report.speakers.len(), report.shed_level), (5, 0));
    for (level, speakers) in [(1u8, 5usize), (2, 5), (3, 3), (4, 2)] {
        scene.room.set_shed_level(level);
        let report = run(&mut scene, 3);
        assert_eq!(report.shed_level, level);
        assert_eq!(report.speakers.len(), speakers, "level {level}");
        assert_eq!(report.encodes, 1 + speakers);
        assert!(matches!(scene.room.listener_delivery(), Delivery::Mix(p) if !p.is_empty()));
    }
    // Level 5: one speaker, forwarded: no codec work at all.
    scene.room.set_shed_level(200);
    assert_eq!(scene.room.shed_level(), tutti_mix::MAX_SHED_LEVEL);
    let report = run(&mut scene, 3);
    assert_eq!(report.speakers.len(), 1);
    assert!(matches!(report.mode, MixMode::Forward(_)), "{:?}", report.mode);
    // Back to normal: the room mixes everyone again.
    scene.room.set_shed_level(0);
    let report = run(&mut scene, 3);
    assert_eq!((report.speakers.len(), report.mode), (5, MixMode::Mix));
}

#[test]
fn a_missing_frame_of_the_forwarded_speaker_is_a_gap() {
    let mut scene = Scene::new(RoomConfig::default(), 1, 2);
    let mut t = 0;
    // Establish forwarding.
    while t < 20 {
        scene.tick(t, |_| true);
        t += 1;
    }
    assert!(matches!(scene.room.mode(), MixMode::Forward(_)));
    // Lose one packet (push the next two only).
    let _lost: Packet = scene.talkers[0].next_packet(0.3);
    let mut nothing = 0;
    for _ in 0..6 {
        let (report, _) = scene.tick(t, |_| true);
        t += 1;
        if scene.room.listener_delivery().is_nothing() {
            nothing += 1;
            assert_eq!(report.forwarded, 0);
        }
    }
    assert_eq!(nothing, 1, "one gap for the one lost frame");
}

#[test]
fn a_tick_inline_sends_what_a_tick_on_the_pool_sends() {
    // Small shards so that phase A runs over several, as in a big room.
    let cfg = RoomConfig { shard_size: 4, ..RoomConfig::default() };
    let (mut pooled, mut inline) = (Scene::new(cfg.clone(), 4, 9), Scene::new(cfg, 4, 9));
    pooled.pool = MixPool::new(2).expect("pool");
    let mut mixed = 0;
    for t in 0..150 {
        // Talkers come and go: silence, one (forwarded), several (mixed).
        let talking = |i: usize| !(t / 10 + i as u64).is_multiple_of(3) && t >= 20;
        let (a, _) = pooled.tick(t, talking);
        inline.push(talking);
        let b = inline.room.tick_inline(t);
        assert_eq!((a.mode, a.decodes, a.encodes, a.dtx), (b.mode, b.decodes, b.encodes, b.dtx), "tick {t}");
        assert_eq!(a.speakers, b.speakers, "tick {t}");
        let (da, db): (Vec<_>, Vec<_>) = (pooled.room.deliveries().collect(), inline.room.deliveries().collect());
        assert_eq!(da, db, "tick {t}: the same bytes for everyone");
        mixed += usize::from(a.mode == MixMode::Mix);
    }
    assert!(mixed > 30, "both encoded mixes ({mixed} ticks), not only forwarded or DTX ones");
}
