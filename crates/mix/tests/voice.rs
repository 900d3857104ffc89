//! Noise suppression and loudness normalisation, on real speech with noise
//! added at known SNRs, through the real mixer path: a caller's noisy
//! speech is encoded with libopus, pushed into a `Room`, ticked, and what a
//! listener is sent is decoded with libopus again.
//!
//! The speech is two espeak-ng clips (48 kHz mono, 16-bit) trimmed to 3 s
//! and 2 s, in `tests/data/`. Noise is made here with a seeded generator:
//! white, pink (Paul Kellet's filter) and babble (the other clip). The
//! caller's signal is 1 s of noise, 3 s of speech in noise, 1 s of noise,
//! the same again, 1 s of noise; measured on the second half (RNNoise
//! learns a caller's noise from hearing them speak).
//!
//! SNR is measured on the listener's decoded audio as
//! (speech-segment power − noise-segment power) / noise-segment power, with
//! the segments shifted by the path's delay (found by correlating 10 ms
//! envelopes), and compared with the same path with suppression off (the
//! speaker's frames forwarded: same codec, no processing).

use bytes::Bytes;
use tutti_mix::{
    FRAME_SAMPLES, MixMode, MixPool, NoiseSuppression, NoiseSuppressor, Packet, ParticipantId, Pcm, Room, RoomConfig,
    TickReport, level_of,
};

const RATE: usize = 48_000;

fn clip(name: &str) -> Vec<f32> {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let mut r = hound::WavReader::open(&path).expect("test clip");
    r.samples::<i16>().map(|s| f32::from(s.expect("a sample")) / 32_768.0).collect()
}

/// xorshift64*, seeded: the same noise every run.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

#[derive(Clone, Copy, Debug)]
enum Noise {
    White,
    Pink,
    Babble,
}

fn noise(kind: Noise, n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed);
    match kind {
        Noise::White => (0..n).map(|_| rng.uniform()).collect(),
        Noise::Pink => {
            // Paul Kellet's economy pink filter.
            let (mut b0, mut b1, mut b2) = (0.0f32, 0.0f32, 0.0f32);
            (0..n)
                .map(|_| {
                    let w = rng.uniform();
                    b0 = 0.99765 * b0 + w * 0.099_046;
                    b1 = 0.963 * b1 + w * 0.296_516_4;
                    b2 = 0.57 * b2 + w * 1.052_691_3;
                    b0 + b1 + b2 + w * 0.1848
                })
                .collect()
        }
        Noise::Babble => {
            // The other talker, looped, from a seeded offset.
            let b = clip("speech-b-2s.wav");
            let start = (seed as usize) % b.len();
            (0..n).map(|i| b[(start + i) % b.len()]).collect()
        }
    }
}

fn power(x: &[f32]) -> f64 {
    x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / x.len().max(1) as f64
}

fn db(p: f64) -> f64 {
    10.0 * p.max(1e-15).log10()
}

/// Power of the frames of `speech` that carry speech (above −50 dBFS).
fn speech_power(speech: &[f32]) -> f64 {
    let frames: Vec<f64> = speech.chunks(FRAME_SAMPLES).map(power).filter(|&p| db(p) > -50.0).collect();
    frames.iter().sum::<f64>() / frames.len().max(1) as f64
}

/// Where speech is in the caller's signal: (start, end) in samples.
struct Layout {
    clean: Vec<f32>,
    speech: Vec<(usize, usize)>,
    pauses: Vec<(usize, usize)>,
}

/// 1 s pause, 3 s speech, 1 s pause, 3 s speech, 1 s pause.
fn layout() -> Layout {
    let a = clip("speech-a-3s.wav");
    let mut clean = vec![0.0; RATE];
    let mut speech = Vec::new();
    let mut pauses = vec![(0, RATE)];
    for _ in 0..2 {
        speech.push((clean.len(), clean.len() + a.len()));
        clean.extend_from_slice(&a);
        pauses.push((clean.len(), clean.len() + RATE));
        clean.extend(std::iter::repeat_n(0.0, RATE));
    }
    Layout { clean, speech, pauses }
}

/// `clean` plus `kind` noise scaled to `snr_db` under the speech's power.
fn noisy(l: &Layout, kind: Noise, snr_db: f64, seed: u64) -> Vec<f32> {
    let n = noise(kind, l.clean.len(), seed);
    let gain = (speech_power(&l.clean[l.speech[0].0..l.speech[0].1]) / power(&n) / 10f64.powf(snr_db / 10.0)).sqrt();
    l.clean.iter().zip(&n).map(|(&s, &v)| s + gain as f32 * v).collect()
}

/// A caller sending 20 ms Opus frames with their RFC 6464 level.
struct Caller {
    id: ParticipantId,
    encoder: opus::Encoder,
    seq: u16,
}

impl Caller {
    fn new(id: u64) -> Self {
        let mut encoder = opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Voip).expect("encoder");
        encoder.set_bitrate(opus::Bitrate::Bits(32_000)).expect("bitrate");
        Self { id: ParticipantId(id), encoder, seq: 0 }
    }

    fn packet(&mut self, pcm: &[f32]) -> Packet {
        let payload = Bytes::from(self.encoder.encode_vec_float(pcm, 1500).expect("encode"));
        let packet =
            Packet { seq: self.seq, timestamp: u32::from(self.seq) * 960, payload, level: Some(level_of(pcm)) };
        self.seq = self.seq.wrapping_add(1);
        packet
    }
}

/// A listener decoding what the room sends it (nothing: concealment).
struct Listener {
    id: ParticipantId,
    decoder: opus::Decoder,
    heard: Vec<f32>,
}

impl Listener {
    fn new(id: u64) -> Self {
        Self {
            id: ParticipantId(id),
            decoder: opus::Decoder::new(48_000, opus::Channels::Mono).expect("decoder"),
            heard: Vec::new(),
        }
    }

    fn receive(&mut self, room: &Room) {
        let payload = room.payload_for(self.id).expect("in the room");
        let mut pcm: Pcm = [0.0; FRAME_SAMPLES];
        let n = self.decoder.decode_float(payload, &mut pcm, false).expect("decodes");
        assert_eq!(n, FRAME_SAMPLES);
        self.heard.extend_from_slice(&pcm);
    }
}

/// Runs callers' signals (one per caller, `None` past its end: silence)
/// through a room with `cfg`; returns what a silent listener heard and the reports.
fn through_room(
    cfg: RoomConfig,
    signals: &[&[f32]],
    setup: impl FnOnce(&mut Room, &[ParticipantId]),
    mut each_tick: impl FnMut(&Room, u64),
) -> (Vec<f32>, Vec<TickReport>) {
    let pool = MixPool::new(2).expect("pool");
    let mut room = Room::new(cfg).expect("room");
    let mut callers: Vec<Caller> = (0..signals.len()).map(|i| Caller::new(i as u64 + 1)).collect();
    let mut listener = Listener::new(100);
    for c in &callers {
        room.add_participant(c.id).expect("join");
    }
    room.add_participant(listener.id).expect("join");
    let ids: Vec<ParticipantId> = callers.iter().map(|c| c.id).collect();
    setup(&mut room, &ids);
    let ticks = signals.iter().map(|s| s.len()).max().unwrap_or(0) / FRAME_SAMPLES;
    let mut reports = Vec::with_capacity(ticks);
    for t in 0..ticks as u64 {
        for (c, s) in callers.iter_mut().zip(signals) {
            let at = t as usize * FRAME_SAMPLES;
            let mut frame = [0.0f32; FRAME_SAMPLES];
            if at + FRAME_SAMPLES <= s.len() {
                frame.copy_from_slice(&s[at..at + FRAME_SAMPLES]);
            }
            let packet = c.packet(&frame);
            room.push_packet(c.id, packet).expect("in the room");
        }
        reports.push(room.tick(&pool, t));
        listener.receive(&room);
        each_tick(&room, t);
    }
    (listener.heard, reports)
}

/// The delay of `heard` behind `clean`, in samples: the lag (in 10 ms
/// steps, up to 200 ms) that best correlates their 10 ms power envelopes.
fn delay(clean: &[f32], heard: &[f32]) -> usize {
    let env = |x: &[f32]| x.chunks(480).map(|c| db(power(c)).max(-60.0) + 60.0).collect::<Vec<f64>>();
    let (a, b) = (env(clean), env(heard));
    (0..=20)
        .max_by(|&x, &y| {
            let score = |lag: usize| a.iter().zip(b.iter().skip(lag)).map(|(p, q)| p * q).sum::<f64>();
            score(x).total_cmp(&score(y))
        })
        .map_or(0, |lag| lag * 480)
}

/// (speech power, noise power) of `heard` over the second half's segments,
/// 100 ms in from each edge, shifted by `lag`.
fn segments(l: &Layout, heard: &[f32], lag: usize) -> (f64, f64) {
    let cut = |(s, e): (usize, usize)| &heard[(s + lag + 4_800).min(heard.len())..(e + lag - 4_800).min(heard.len())];
    let speech = power(cut(l.speech[1]));
    let noise = (power(cut(l.pauses[1])) + power(cut(l.pauses[2]))) / 2.0;
    (speech, noise)
}

/// SNR (dB) measured on `heard`, and the speech power kept (dB, against the clean reference).
fn measure(l: &Layout, heard: &[f32]) -> (f64, f64) {
    let lag = delay(&l.clean, heard);
    let (s, n) = segments(l, heard, lag);
    let clean = power(&l.clean[l.speech[1].0 + 4_800..l.speech[1].1 - 4_800]);
    ((db((s - n).max(1e-15)) - db(n)), db((s - n).max(1e-15)) - db(clean))
}

fn cfg(ns: NoiseSuppression) -> RoomConfig {
    RoomConfig { noise_suppression: ns, ..RoomConfig::default() }
}

/// Suppression on and off for one noise at one SNR: (SNR in, SNR off, SNR on, speech kept on).
fn compare(l: &Layout, kind: Noise, snr: f64) -> (f64, f64, f64, f64) {
    let signal = noisy(l, kind, snr, 0x5EED ^ snr as u64);
    let (snr_in, _) = measure(l, &signal);
    // Auto: the caller is marked a raw source (plain RTP), so suppressed.
    let raw = |room: &mut Room, ids: &[ParticipantId]| room.set_raw_source(ids[0], true).expect("in the room");
    let (on, reports_on) = through_room(cfg(NoiseSuppression::Auto), &[&signal], raw, |_, _| {});
    let (off, reports_off) = through_room(cfg(NoiseSuppression::Off), &[&signal], raw, |_, _| {});
    // Off, the lone speaker is forwarded (no decode); on, decoded, suppressed and encoded.
    let late = |r: &[TickReport]| r[r.len() / 2..].to_vec();
    assert!(late(&reports_off).iter().all(|r| matches!(r.mode, MixMode::Forward(_)) && r.decodes == 0));
    assert!(late(&reports_on).iter().all(|r| r.mode == MixMode::Mix && r.suppressed == 1 && r.normalised == 0));
    // ... and costs one decode and one encode: the speaker, alone, hears the DTX cadence.
    assert!(late(&reports_on).iter().all(|r| r.decodes == 1 && r.encodes == 1));
    let (snr_on, kept_on) = measure(l, &on);
    let (snr_off, _) = measure(l, &off);
    (snr_in, snr_off, snr_on, kept_on)
}

#[test]
fn suppression_raises_snr_and_keeps_the_speech_through_the_room() {
    let l = layout();
    let mut table = String::from("noise   SNR in  forwarded  suppressed  gain   speech kept\n");
    for (kind, snrs, min_gain) in [
        (Noise::White, &[0.0, 5.0, 10.0, 20.0][..], 10.0),
        (Noise::Pink, &[0.0, 10.0][..], 8.0),
        (Noise::Babble, &[10.0][..], -1.0),
    ] {
        for &snr in snrs {
            let (snr_in, off, on, kept) = compare(&l, kind, snr);
            table += &format!(
                "{:<7} {snr_in:>6.1}  {off:>9.1}  {on:>10.1}  {:>5.1}  {kept:>+6.1} dB\n",
                format!("{kind:?}"),
                on - off
            );
            // The forwarded path is the codec only: the SNR it measures is the input's.
            assert!((off - snr_in).abs() < 4.0, "{kind:?} {snr}: forwarded {off:.1} against {snr_in:.1} in\n{table}");
            assert!(on - off >= min_gain, "{kind:?} {snr}: suppression gained {:.1} dB\n{table}", on - off);
            // Speech kept within a few dB (more is taken from speech buried at 0 dB).
            let bound = if snr >= 10.0 { 3.0 } else { 6.0 };
            assert!(kept.abs() <= bound, "{kind:?} {snr}: speech kept at {kept:+.1} dB\n{table}");
        }
    }
    println!("{table}");
}

/// A speaker who stops (their packets silent: not selected, not decoded)
/// and comes back keeps their RNNoise state: the noise is suppressed from
/// their first frame back, where a fresh state would let it through.
#[test]
fn a_returning_speaker_is_suppressed_from_the_first_frame() {
    let l = layout();
    let signal = noisy(&l, Noise::White, 10.0, 11);
    // First half (noise, speech, noise), 2 s of silent packets, then 1 s of the same noise.
    let half = l.pauses[1].1;
    let gap = 2 * RATE;
    let mut caller: Vec<f32> = signal[..half].to_vec();
    caller.extend(std::iter::repeat_n(0.0, gap));
    let back = caller.len();
    caller.extend_from_slice(&signal[l.pauses[2].0..l.pauses[2].1]);
    let raw = |room: &mut Room, ids: &[ParticipantId]| room.set_raw_source(ids[0], true).expect("in the room");
    let mut selected_in_gap = false;
    let (heard, _) = through_room(cfg(NoiseSuppression::Auto), &[&caller], raw, |room, t| {
        let at = t as usize * FRAME_SAMPLES;
        if at > half + RATE && at < back {
            selected_in_gap |= room.speakers().next().is_some();
        }
    });
    assert!(!selected_in_gap, "the caller leaves the selection in the gap");
    let lag = delay(&caller, &heard);
    // The first 300 ms back (after the path's delay and one frame).
    let first = &heard[back + lag + FRAME_SAMPLES..back + lag + FRAME_SAMPLES + 14_400];
    let input = power(&caller[back..back + RATE]);
    let kept_state = db(input) - db(power(first));
    // The same noise through a fresh RNNoise state.
    let mut fresh = NoiseSuppressor::new();
    let mut out = Vec::new();
    for f in caller[back..back + RATE].chunks_exact(FRAME_SAMPLES) {
        let mut pcm: Pcm = [0.0; FRAME_SAMPLES];
        pcm.copy_from_slice(f);
        fresh.process(&mut pcm);
        out.extend_from_slice(&pcm);
    }
    let fresh_state = db(input) - db(power(&out[FRAME_SAMPLES..FRAME_SAMPLES + 14_400]));
    println!("noise removed in the first 300 ms back: kept state {kept_state:.1} dB, fresh state {fresh_state:.1} dB");
    assert!(kept_state >= 15.0, "kept state removed only {kept_state:.1} dB");
    assert!(kept_state >= fresh_state + 10.0, "kept {kept_state:.1} dB against fresh {fresh_state:.1} dB");
}

/// Speech scaled so its active frames' RMS is `dbfs`.
fn at_level(x: &[f32], dbfs: f64) -> Vec<f32> {
    let g = (10f64.powf(dbfs / 10.0) / speech_power(x)).sqrt() as f32;
    x.iter().map(|v| v * g).collect()
}

/// A quiet caller (−37 dBFS) and a loud one (−17 dBFS, 20 dB louder) take
/// turns; with loudness normalisation the listener hears them within a few
/// dB of each other and of the target, and a caller's gain does not rise
/// while they send only low noise.
#[test]
fn loudness_brings_a_quiet_and_a_loud_caller_together() {
    let a = at_level(&clip("speech-a-3s.wav"), -37.0);
    let b = at_level(&clip("speech-b-2s.wav"), -17.0);
    let gap = RATE / 2;
    // Four rounds: A speaks 3 s, pause, B speaks 2 s, pause. Then A sends 3 s of −60 dBFS noise.
    let (mut sa, mut sb) = (Vec::new(), Vec::new());
    let mut turns = Vec::new();
    for _ in 0..4 {
        turns.push(('a', sa.len(), sa.len() + a.len()));
        sa.extend_from_slice(&a);
        sb.extend(std::iter::repeat_n(0.0, a.len()));
        sa.extend(std::iter::repeat_n(0.0, gap));
        sb.extend(std::iter::repeat_n(0.0, gap));
        turns.push(('b', sb.len(), sb.len() + b.len()));
        sb.extend_from_slice(&b);
        sa.extend(std::iter::repeat_n(0.0, b.len()));
        sa.extend(std::iter::repeat_n(0.0, gap));
        sb.extend(std::iter::repeat_n(0.0, gap));
    }
    let noise_from = sa.len();
    let line = noise(Noise::White, 3 * RATE, 99);
    let g = (10f64.powf(-60.0 / 10.0) / power(&line)).sqrt() as f32;
    sa.extend(line.iter().map(|v| v * g));

    let run = |loudness: bool| {
        let cfg = RoomConfig { loudness, noise_suppression: NoiseSuppression::Off, ..RoomConfig::default() };
        let mut gains = Vec::new();
        let (heard, reports) = through_room(
            cfg,
            &[&sa, &sb],
            |_, _| {},
            |room, t| {
                gains.push((t, room.voice(ParticipantId(1)).expect("a").loudness_gain_db));
            },
        );
        (heard, reports, gains)
    };
    let (before, _, _) = run(false);
    let (after, reports, gains) = run(true);
    // Every selected speaker of a mixed tick is normalised, nobody else.
    assert!(reports.iter().filter(|r| r.mode == MixMode::Mix).all(|r| r.normalised == r.speakers.len()));
    assert!(reports.iter().all(|r| r.suppressed == 0), "suppression off in this room");
    let lag = delay(&sa.iter().zip(&sb).map(|(x, y)| x + y).collect::<Vec<_>>(), &after);
    let level = |heard: &[f32], who: char| {
        let (_, s, e) = *turns.iter().rev().find(|t| t.0 == who).expect("a last turn");
        db(speech_power(&heard[s + lag..e + lag]))
    };
    let spread_before = level(&before, 'a') - level(&before, 'b');
    let (qa, lb) = (level(&after, 'a'), level(&after, 'b'));
    let spread_after = qa - lb;
    println!(
        "last round: quiet {:.1} / loud {:.1} dBFS before (spread {spread_before:.1} dB), {qa:.1} / {lb:.1} after (spread {spread_after:.1} dB)",
        level(&before, 'a'),
        level(&before, 'b')
    );
    assert!(spread_before.abs() > 17.0, "the test's callers differ: {spread_before:.1} dB");
    assert!(spread_after.abs() < 4.0, "spread after {spread_after:.1} dB");
    for l in [qa, lb] {
        assert!((l - f64::from(tutti_mix::DEFAULT_LOUDNESS_TARGET_DBFS)).abs() < 4.0, "{l:.1} dBFS off target");
    }
    // Through the noise: A stays selected (−60 dBFS is above the talking
    // floor) but the normaliser's gate holds the gain where speech left it.
    let first_noise_tick = (noise_from / FRAME_SAMPLES) as u64;
    let at = |t: u64| gains.iter().find(|g| g.0 == t).map(|g| g.1).expect("a tick");
    let g0 = at(first_noise_tick);
    let rises = gains.iter().filter(|g| g.0 > first_noise_tick && g.1 > g0 + 1e-3).count();
    assert!(g0 > 10.0, "the quiet caller's gain before the noise: {g0:.1} dB");
    assert_eq!(rises, 0, "the gain rose during the noise");
    let noise_heard = db(power(&after[noise_from + lag + RATE / 2..noise_from + lag + 2 * RATE]));
    assert!(noise_heard < -60.0 + g0 as f64 + 1.0, "noise heard at {noise_heard:.1} dBFS");
}

/// The switches: per room, per participant over the room, and the default
/// by source (a browser's voice untouched and forwarded; a phone's suppressed).
#[test]
fn switches_per_room_and_per_participant_from_the_next_tick() {
    let a = at_level(&clip("speech-a-3s.wav"), -25.0);
    let pool = MixPool::new(2).expect("pool");
    let mut room = Room::new(RoomConfig::default()).expect("room");
    let (browser, phone, listener) = (ParticipantId(1), ParticipantId(2), ParticipantId(3));
    for id in [browser, phone, listener] {
        room.add_participant(id).expect("join");
    }
    room.set_raw_source(phone, true).expect("in the room");
    let v = |room: &Room, id| room.voice(id).expect("in the room");
    assert!(!v(&room, browser).noise_suppression && v(&room, phone).noise_suppression, "auto: by source");
    assert!(!v(&room, browser).loudness, "loudness off by default");
    let mut caller = Caller::new(1);
    let mut tick = 0u64;
    let silence = [0.0f32; FRAME_SAMPLES];
    // 12 ticks of silence (under the hold time: still selected).
    const PAUSE: u64 = 1012;
    let mut speak = |room: &mut Room, who: ParticipantId, caller: &mut Caller, ticks: u64| -> TickReport {
        let mut last = None;
        for _ in 0..ticks % 1000 {
            let at = (tick as usize * FRAME_SAMPLES) % (a.len() - FRAME_SAMPLES);
            // Counts above 1000: a pause of (count − 1000) ticks.
            let frame = if ticks > 1000 { &silence[..] } else { &a[at..at + FRAME_SAMPLES] };
            room.push_packet(who, caller.packet(frame)).expect("in the room");
            last = Some(room.tick(&pool, tick));
            tick += 1;
        }
        last.expect("ticked")
    };
    // The browser alone: forwarded untouched.
    let r = speak(&mut room, browser, &mut caller, 20);
    assert_eq!((r.mode, r.decodes, r.suppressed), (MixMode::Forward(browser), 0, 0));
    // Suppression on for the browser alone (over `auto`): decoded, suppressed, encoded.
    room.set_noise_suppression(browser, Some(true)).expect("in the room");
    let r = speak(&mut room, browser, &mut caller, 5);
    assert_eq!((r.mode, r.suppressed, r.normalised), (MixMode::Mix, 1, 0));
    // Back to the room's setting: forwarded again from the next pause
    // (a switch of stream mid-word is audible, see `mix_hold_ticks`).
    room.set_noise_suppression(browser, None).expect("in the room");
    let r = speak(&mut room, browser, &mut caller, PAUSE);
    assert_eq!((r.mode, r.suppressed), (MixMode::Forward(browser), 0));
    room.set_room_loudness(true);
    let r = speak(&mut room, browser, &mut caller, 5);
    assert_eq!((r.mode, r.suppressed, r.normalised), (MixMode::Mix, 0, 1));
    assert!(v(&room, browser).loudness_gain_db != 0.0 && v(&room, browser).speech_level_dbfs.is_some());
    // ... except for this participant; and the room's suppression on for all.
    room.set_loudness(browser, Some(false)).expect("in the room");
    room.set_room_noise_suppression(NoiseSuppression::On);
    let r = speak(&mut room, browser, &mut caller, 5);
    assert_eq!((r.mode, r.suppressed, r.normalised), (MixMode::Mix, 1, 0));
    room.set_room_noise_suppression(NoiseSuppression::Off);
    assert!(!v(&room, phone).noise_suppression, "off: the phone too");
    // Unknown participants are an error, not a panic.
    assert!(room.set_noise_suppression(ParticipantId(99), Some(true)).is_err());
    assert!(room.voice(ParticipantId(99)).is_err());
    // A bad target is refused by the config check.
    let bad = RoomConfig { loudness_target_dbfs: 0.0, ..RoomConfig::default() };
    assert!(Room::new(bad).expect_err("refused").to_string().contains("loudness_target_dbfs"));
}
