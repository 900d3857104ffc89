//! What a room spanning nodes costs the mixer (issue 27): one room of 500
//! local participants (5 % talking, RFC 6464 levels, real Opus), K = 3, one
//! tick on the calling thread, in three shapes:
//!
//! - `local`: the room alone, the mixer's own selection (what every room
//!   that does not span nodes runs);
//! - `local+select`: the same with a selection set from outside every tick
//!   (three local speakers) and `candidates()` read after it;
//! - `mesh+16-remote/local-speakers`: plus 16 remote candidates whose
//!   frames are handed in every tick (`put_remote_frame`), the selection
//!   still the three local talkers: the same codec work as `local`, so the
//!   difference is the seam's own cost;
//! - `mesh+16-remote/2-remote-speakers`: the same, the selection naming two
//!   remotes and one local talker: a node's whole per-tick mixer work for a
//!   spanned room whose loudest talkers are elsewhere (a remote speaker
//!   costs a decode and no N-minus-self encode: cheaper than a local one).
//!
//! Criterion times each; then the shapes are alternated tick by tick
//! (medians of many rounds), so a busy machine skews them alike: read the
//! ratios, not the absolute figures.
//!
//! `cargo bench -p tutti-mix --bench mesh`

use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::Criterion;
use tutti_mix::{
    EncoderConfig, FRAME_SAMPLES, LocalCandidate, Packet, ParticipantId, Room, RoomConfig, SpeakerLimit, tone,
};

const LOCALS: u64 = 500;
const REMOTES: u64 = 16;
const REMOTE_BASE: u64 = 1 << 51;
const K: usize = 3;

/// Pre-encoded Opus: 50 frames of a tone, and a frame of silence.
struct Frames {
    talk: Vec<Bytes>,
    silence: Bytes,
}

impl Frames {
    fn new() -> Self {
        let mut enc = tutti_mix::Encoder::new(&EncoderConfig::default()).expect("encoder");
        let talk = (0..50).map(|n| enc.encode(&tone(330.0, 0.3, n * FRAME_SAMPLES as u64))).collect();
        let mut enc = tutti_mix::Encoder::new(&EncoderConfig::default()).expect("encoder");
        let silence = enc.encode(&[0.0; FRAME_SAMPLES]);
        Self { talk, silence }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Local,
    LocalSelect,
    MeshLocalSpeakers,
    Mesh,
}

struct Setup {
    room: Room,
    shape: Shape,
    tick: u64,
    out: Vec<LocalCandidate>,
    /// The remotes' tone frames.
    remote: Vec<Bytes>,
}

/// Level of local `i`: 1 in 20 talk (distinct levels), the rest are silent.
fn level(i: u64) -> u8 {
    if i.is_multiple_of(20) { 20 + ((i / 20) % 30) as u8 } else { 127 }
}

impl Setup {
    fn new(shape: Shape, frames: &Frames) -> Self {
        let cfg = RoomConfig { max_speakers: SpeakerLimit::Top(K), ..RoomConfig::default() };
        let mut room = Room::new(cfg).expect("room");
        for i in 0..LOCALS {
            room.add_participant(ParticipantId(i)).expect("join");
        }
        if matches!(shape, Shape::Mesh | Shape::MeshLocalSpeakers) {
            for r in 0..REMOTES {
                room.add_remote(ParticipantId(REMOTE_BASE + r)).expect("remote");
            }
        }
        let mut s = Self { room, shape, tick: 0, out: Vec::with_capacity(64), remote: frames.talk.clone() };
        for _ in 0..20 {
            s.feed(frames);
            s.step();
        }
        s
    }

    /// The I/O side (untimed): each local's packet for the tick.
    fn feed(&mut self, frames: &Frames) {
        let t = self.tick;
        for i in 0..LOCALS {
            let level = level(i);
            let frame = if level == 127 { &frames.silence } else { &frames.talk[(t % 50) as usize] };
            let packet = Packet {
                seq: t as u16,
                timestamp: (t as u32).wrapping_mul(960),
                payload: Bytes::copy_from_slice(frame),
                level: Some(level),
            };
            self.room.push_packet(ParticipantId(i), packet).expect("in room");
        }
    }

    /// The timed part: what the mix clock does for the room in one tick.
    fn step(&mut self) {
        let t = self.tick;
        match self.shape {
            Shape::Local => {}
            Shape::LocalSelect => {
                self.room.set_selection(Some(vec![ParticipantId(0), ParticipantId(20), ParticipantId(40)]));
            }
            Shape::Mesh | Shape::MeshLocalSpeakers => {
                // The remote candidates' frames of the previous tick (loud: level 10 + r).
                for r in 0..REMOTES {
                    // Its own buffer, as a datagram's.
                    let frame = Bytes::copy_from_slice(&self.remote[((t + r) % 50) as usize]);
                    self.room.put_remote_frame(ParticipantId(REMOTE_BASE + r), 10 + r as u8, frame).expect("remote");
                }
                // tutti_mesh::select over all candidates.
                let speakers = if self.shape == Shape::Mesh {
                    vec![ParticipantId(0), ParticipantId(REMOTE_BASE), ParticipantId(REMOTE_BASE + 1)]
                } else {
                    vec![ParticipantId(0), ParticipantId(20), ParticipantId(40)]
                };
                self.room.set_selection(Some(speakers));
            }
        }
        std::hint::black_box(self.room.tick_inline(t));
        if self.shape != Shape::Local {
            self.room.candidates(2, &mut self.out);
            std::hint::black_box(&self.out);
        }
        self.tick += 1;
    }
}

const SHAPES: [(&str, Shape); 4] = [
    ("local", Shape::Local),
    ("local+select", Shape::LocalSelect),
    ("mesh+16-remote/local-speakers", Shape::MeshLocalSpeakers),
    ("mesh+16-remote/2-remote-speakers", Shape::Mesh),
];

fn bench(c: &mut Criterion) {
    let frames = Frames::new();
    let mut group = c.benchmark_group(format!("mesh/{LOCALS}-local/K={K}"));
    group.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    for (name, shape) in SHAPES {
        let mut s = Setup::new(shape, &frames);
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    s.feed(&frames);
                    let start = Instant::now();
                    s.step();
                    total += start.elapsed();
                }
                total
            })
        });
    }
    group.finish();
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_unstable_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The shapes alternated tick by tick; medians in µs and the ratios to `local`.
fn paired() {
    let frames = Frames::new();
    let mut setups = SHAPES.map(|(_, shape)| Setup::new(shape, &frames));
    let rounds = 1_500;
    let mut times: [Vec<f64>; 4] = Default::default();
    for _ in 0..rounds {
        for (s, times) in setups.iter_mut().zip(&mut times) {
            s.feed(&frames);
            let start = Instant::now();
            s.step();
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    let medians = times.map(|mut v| median(&mut v));
    println!("paired, {rounds} alternating ticks (medians; read the ratios):");
    for ((name, _), m) in SHAPES.iter().zip(medians) {
        println!("  {name:<34} {m:>8.1} µs  {:.2}x of local", m / medians[0]);
    }
    // `candidates()` alone: one pass over the room's participants.
    let s = &mut setups[1];
    let mut calls = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let start = Instant::now();
        s.room.candidates(2, &mut s.out);
        calls.push(start.elapsed().as_secs_f64() * 1e6);
        std::hint::black_box(&s.out);
    }
    let c = median(&mut calls);
    println!("  candidates(2) alone, {LOCALS} locals: {c:.2} µs ({:.1} % of a local tick)", 100.0 * c / medians[0]);
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    paired();
}
