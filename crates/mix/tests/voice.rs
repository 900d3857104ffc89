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
    FRAME_SAMPLES, MixMode, MixPool, NoiseSuppression, Packet, ParticipantId, Pcm, Room,
    RoomConfig, TickReport, level_of,
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
