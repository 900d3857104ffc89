//! Where a busy room's codec work goes (issue 29 items 3 and 4): rooms of
//! participants sending real Opus (a synthetic voice for talkers, low
//! noise or digital silence for the rest), 10 % talkers who alternate
//! talkspurts (1.2 s) and pauses (1.8 s), ticked on the calling thread.
//!
//! Two kinds of client:
//! - `levels`: browser-like, an RFC 6464 level in every packet and DTX while
//!   silent (a one-byte frame every 400 ms, nothing between);
//! - `unlevelled`: no level and no DTX, a real Opus frame every 20 ms from
//!   everyone (Janus's own test client): the mixer must measure them.
//!
//! Shapes are alternated round by round (medians of `ROUNDS` rounds of
//! `TICKS` ticks), so a busy machine skews them alike: read the ratios, not
//! the absolute figures. `parts` times the pieces of a tick alone (one
//! decode, one encode per complexity, the packet probe).
//!
//! `cargo bench -p tutti-mix --bench codec [-- FILTER…]` (criterion-free:
//! it prints tables; a FILTER keeps the shapes whose name contains it).

use std::time::Instant;

use bytes::Bytes;
use tutti_mix::{
    DTX_FRAME, Decoder, Encoder, EncoderConfig, FRAME_SAMPLES, Packet, ParticipantId, Pcm, Room, RoomConfig,
    SpeakerLimit, TickReport, inspect, level_of,
};

const TICKS: u64 = 50;
const ROUNDS: usize = 11;
/// A talker's cycle: talking for the first `TALK_TICKS` of every `CYCLE_TICKS`.
const CYCLE_TICKS: u64 = 150;
const TALK_TICKS: u64 = 60;
/// Distinct encoded streams of each kind, shared round-robin by participants.
const STREAMS: usize = 8;
/// Frames per stream (looped): 3 s.
const FRAMES: usize = 150;

/// A speech-like voice: a glottal pulse train's harmonics (f0 gliding
/// around `f0`) shaped by two vowel formants, under a 4 Hz syllable
/// envelope. Deterministic.
pub fn voice_frame(f0: f32, n: u64, amplitude: f32) -> Pcm {
    let mut pcm = [0.0f32; FRAME_SAMPLES];
    for (i, x) in pcm.iter_mut().enumerate() {
        let t = (n * FRAME_SAMPLES as u64 + i as u64) as f64 / 48_000.0;
        let pitch = f64::from(f0) * (1.0 + 0.05 * (std::f64::consts::TAU * 0.7 * t).sin());
        let phase = std::f64::consts::TAU * (pitch * t + 0.05 * f64::from(f0) / 0.7);
        let mut s = 0.0;
        let mut h = 1.0;
        while h * pitch < 4_000.0 {
            let f = h * pitch;
            let formant = 1.0 / (1.0 + ((f - 700.0) / 150.0).powi(2)) + 0.5 / (1.0 + ((f - 1_200.0) / 200.0).powi(2));
            s += (0.2 + formant) / h * (h * phase).sin();
            h += 1.0;
        }
        let env = (std::f64::consts::PI * 4.0 * t).sin().abs().powf(0.6);
        *x = amplitude * (s * env) as f32;
    }
    pcm
}

/// Low noise (white, `rms_dbfs`), or digital silence for `None`.
fn noise_frame(rms_dbfs: Option<f32>, seed: &mut u64) -> Pcm {
    let mut pcm = [0.0f32; FRAME_SAMPLES];
    if let Some(db) = rms_dbfs {
        let rms = 10f32.powf(db / 20.0);
        for x in &mut pcm {
            *seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            // Uniform in [-1, 1): RMS 1/√3.
            let u = (*seed >> 40) as f32 / (1u64 << 23) as f32 - 1.0;
            *x = u * rms * 3f32.sqrt();
        }
    }
    pcm
}

/// Encoded frames as a browser would send them (VOIP, 32 kb/s, no DTX), with their levels.
fn encode_stream(frames: impl Iterator<Item = Pcm>) -> Vec<(Bytes, u8)> {
    let mut enc = opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Voip).expect("encoder");
    enc.set_bitrate(opus::Bitrate::Bits(32_000)).expect("bitrate");
    frames.map(|pcm| (Bytes::from(enc.encode_vec_float(&pcm, 1500).expect("encode")), level_of(&pcm))).collect()
}

struct Streams {
    talk: Vec<Vec<(Bytes, u8)>>,
    quiet: Vec<Vec<(Bytes, u8)>>,
}

impl Streams {
    fn new() -> Self {
        let talk = (0..STREAMS)
            .map(|s| {
                let f0 = 100.0 + 17.0 * s as f32;
                encode_stream((0..FRAMES as u64).map(|n| voice_frame(f0, n, 0.08)))
            })
            .collect();
        // A quarter digital silence, the rest noise at −80, −72 and −64 dBFS.
        let quiet = (0..STREAMS)
            .map(|s| {
                let db = [None, Some(-80.0), Some(-72.0), Some(-64.0)][s % 4];
                let mut seed = s as u64 + 1;
                encode_stream((0..FRAMES).map(|_| noise_frame(db, &mut seed)))
            })
            .collect();
        Self { talk, quiet }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Client {
    Levels,
    Unlevelled,
}

struct Shape {
    name: String,
    rooms: Vec<Room>,
    size: usize,
    client: Client,
    seq: Vec<u16>,
    tick: u64,
}

impl Shape {
    fn new(name: impl Into<String>, rooms: usize, size: usize, client: Client, cfg: &RoomConfig) -> Self {
        let rooms = (0..rooms)
            .map(|r| {
                let mut room = Room::new(cfg.clone()).expect("room");
                for i in 0..size {
                    room.add_participant(ParticipantId((r * size + i) as u64)).expect("join");
                }
                room
            })
            .collect();
        Self { name: name.into(), rooms, size, client, seq: vec![0; size], tick: 0 }
    }

    fn participants(&self) -> usize {
        self.rooms.len() * self.size
    }

    /// Pushes every participant's packet for the next tick (untimed).
    fn push(&mut self, streams: &Streams) {
        let t = self.tick;
        for (r, room) in self.rooms.iter_mut().enumerate() {
            for i in 0..self.size {
                // 10 % talkers: every tenth participant of a room.
                let talker = i % 10 == 0;
                let on = talker && (t + (i as u64 / 10) * 37) % CYCLE_TICKS < TALK_TICKS;
                let f = (t as usize + i) % FRAMES;
                let (payload, level) = if on {
                    streams.talk[(i / 10 + r) % STREAMS][f].clone()
                } else {
                    streams.quiet[(i + r) % STREAMS][f].clone()
                };
                let packet = match self.client {
                    Client::Unlevelled => Some((payload, None)),
                    Client::Levels if on => Some((payload, Some(level))),
                    // DTX while silent: a DTX frame every 400 ms.
                    Client::Levels if (t + i as u64).is_multiple_of(20) => {
                        Some((Bytes::from_static(&DTX_FRAME), Some(127)))
                    }
                    Client::Levels => None,
                };
                if let Some((payload, level)) = packet {
                    let seq = &mut self.seq[i];
                    let p = Packet { seq: *seq, timestamp: (t as u32).wrapping_mul(960), payload, level };
                    *seq = seq.wrapping_add(1);
                    room.push_packet(ParticipantId((r * self.size + i) as u64), p).expect("push");
                }
            }
        }
    }

    /// `TICKS` ticks; returns µs per tick (all rooms, tick time only) and the reports' totals.
    fn run(&mut self, streams: &Streams) -> (f64, Totals) {
        let mut spent = 0.0;
        let mut totals = Totals::default();
        for _ in 0..TICKS {
            self.push(streams);
            let t = self.tick;
            let start = Instant::now();
            let reports: Vec<TickReport> = self.rooms.iter_mut().map(|room| room.tick_inline(t)).collect();
            spent += start.elapsed().as_secs_f64();
            for r in &reports {
                totals.decodes += r.decodes;
                totals.encodes += r.encodes;
                totals.mixing += usize::from(r.mode == tutti_mix::MixMode::Mix);
            }
            self.tick += 1;
        }
        (spent / TICKS as f64 * 1e6, totals)
    }
}

#[derive(Default, Clone, Copy)]
struct Totals {
    decodes: usize,
    encodes: usize,
    mixing: usize,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Times `f` per call (median of rounds of 200 calls), µs.
fn time_us(mut f: impl FnMut(usize)) -> f64 {
    let mut rounds = Vec::new();
    for _ in 0..ROUNDS {
        let start = Instant::now();
        for n in 0..200 {
            f(n);
        }
        rounds.push(start.elapsed().as_secs_f64() * 1e6 / 200.0);
    }
    median(&mut rounds)
}

/// The pieces of a tick, one at a time.
fn parts(streams: &Streams) {
    println!("\n| piece (one 20 ms frame) | µs (median) |\n|---|---:|");
    let talk = &streams.talk[0];
    let mut dec = Decoder::new().expect("decoder");
    let mut pcm = [0.0f32; FRAME_SAMPLES];
    let us = time_us(|n| {
        let _ = dec.decode(&talk[n % FRAMES].0, &mut pcm);
    });
    println!("| decode, voice | {us:.1} |");
    let quiet = &streams.quiet[3];
    let us = time_us(|n| {
        let _ = dec.decode(&quiet[n % FRAMES].0, &mut pcm);
    });
    println!("| decode, −64 dBFS noise | {us:.1} |");
    let us = time_us(|_| dec.reset());
    println!("| decoder reset (OPUS_RESET_STATE) | {us:.1} |");
    let us = time_us(|n| {
        std::hint::black_box(inspect(&talk[n % FRAMES].0));
    });
    println!("| inspect (packet probe) | {us:.2} |");
    let us = time_us(|_| {
        std::hint::black_box(level_of(&pcm));
    });
    println!("| level_of | {us:.2} |");
    let voice: Vec<Pcm> = (0..FRAMES as u64).map(|n| voice_frame(130.0, n, 0.08)).collect();
    for complexity in [10, 8, 6, 5, 4, 3, 2, 1, 0] {
        let mut enc = Encoder::new(&EncoderConfig { complexity, ..Default::default() }).expect("encoder");
        let us = time_us(|n| {
            std::hint::black_box(enc.encode(&voice[n % FRAMES]));
        });
        println!("| encode, voice mix, complexity {complexity} | {us:.1} |");
    }
}

fn main() {
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let wanted = |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));
    let streams = Streams::new();
    let default = RoomConfig::default();
    let mut shapes = Vec::new();
    let add = |shapes: &mut Vec<Shape>, name: String, rooms, size, client, cfg: &RoomConfig| {
        if wanted(&name) {
            shapes.push(Shape::new(name, rooms, size, client, cfg));
        }
    };
    for (rooms, size) in [(1, 500), (50, 10), (5, 100), (1, 1_000)] {
        add(&mut shapes, format!("levels/{rooms}x{size}"), rooms, size, Client::Levels, &default);
    }
    // A speaker's own stream at complexity 10 (the default before `speaker_complexity`).
    let mut speakers_at_10 = default.clone();
    speakers_at_10.encoder.speaker_complexity = 10;
    for (rooms, size) in [(1, 500), (5, 100), (1, 1_000)] {
        add(&mut shapes, format!("levels/{rooms}x{size}/speakers@10"), rooms, size, Client::Levels, &speakers_at_10);
    }
    // The levers of a busy room of 100: the listeners' complexity (`room.complexity`) and K.
    for complexity in [5, 1] {
        let mut cfg = default.clone();
        cfg.encoder.complexity = complexity;
        add(&mut shapes, format!("levels/5x100/listeners@{complexity}"), 5, 100, Client::Levels, &cfg);
    }
    for k in [3, 1] {
        let cfg = RoomConfig { max_speakers: SpeakerLimit::Top(k), ..default.clone() };
        add(&mut shapes, format!("levels/5x100/K={k}"), 5, 100, Client::Levels, &cfg);
    }
    for size in [140, 500] {
        add(&mut shapes, format!("unlevelled/1x{size}/speakers@10"), 1, size, Client::Unlevelled, &speakers_at_10);
        add(&mut shapes, format!("unlevelled/1x{size}"), 1, size, Client::Unlevelled, &default);
    }
    if wanted("parts") {
        parts(&streams);
    }
    if shapes.is_empty() {
        return;
    }
    for s in &mut shapes {
        // Warm up: selection settles, decoders and encoders are made.
        s.run(&streams);
        s.run(&streams);
    }
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); shapes.len()];
    let mut totals = vec![Totals::default(); shapes.len()];
    for _ in 0..ROUNDS {
        for (n, s) in shapes.iter_mut().enumerate() {
            let (us, t) = s.run(&streams);
            times[n].push(us);
            totals[n].decodes += t.decodes;
            totals[n].encodes += t.encodes;
            totals[n].mixing += t.mixing;
        }
    }
    println!(
        "\n| shape | participants | µs per tick (median) | µs per participant per tick | decodes per tick | encodes per tick | rooms mixing |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let ticks = (ROUNDS as u64 * TICKS) as f64;
    for (n, s) in shapes.iter().enumerate() {
        let us = median(&mut times[n]);
        let t = totals[n];
        println!(
            "| {} | {} | {us:.0} | {:.2} | {:.1} | {:.1} | {:.0} % |",
            s.name,
            s.participants(),
            us / s.participants() as f64,
            t.decodes as f64 / ticks,
            t.encodes as f64 / ticks,
            t.mixing as f64 / ticks / s.rooms.len() as f64 * 100.0
        );
    }
}
