//! Scaling curves of the mixer: the cost of one 20 ms tick against room size,
//! talk pattern and pool size, next to a naive baseline shaped like Janus
//! AudioBridge / FreeSWITCH mod_conference (decode everyone, one encode per
//! participant, one thread).
//!
//! `cargo bench --bench mixer` runs criterion, then prints a table and writes
//! `target/tutti-bench/mixer.md` and `target/tutti-bench/mixer.svg`.
//! Only `tick()` is timed: pushing each participant's packet for the next
//! tick belongs to the I/O path and runs between timed ticks.
//!
//! The fleet table (`cargo bench --bench mixer -- fleet` runs it alone)
//! models an operator's server: many rooms of one size, browser-like
//! clients (RFC 6464 levels, DTX while silent), 10 % of them talkers who
//! alternate talkspurts and pauses as in ITU-T P.59. It compares, in one
//! run and on one pool thread, tutti's default policies (pass-through of a
//! single speaker, DTX while nobody speaks), tutti with both off (a listener
//! encode every tick, as before), and the naive per-participant encode;
//! it writes `fleet.md` and `fleet.svg` next to the others.
//!
//! Pool sizes come from `TUTTI_BENCH_THREADS` (for example `1,2,4,8,16`),
//! by default 1 and 2, so the same bench draws the curve on a bigger machine.
//!
//! The spatial figures (`cargo bench --bench mixer -- spatial` runs them
//! alone): a spatial room of 500 and of 1,000, 10 % talking, against the
//! same room mono, ticks alternated, panned and binaural (`-- binaural`
//! runs the binaural case alone); `spatial.md` holds them.
//!
//! The voice figures (`cargo bench --bench mixer -- voice` runs them alone)
//! price noise suppression (RNNoise) and loudness normalisation: one room of
//! 100 with K talkers, both on against both off, ticks alternated (so a
//! busy machine skews both alike: read the ratio, the absolute figures are
//! noisy), and each stage alone per 20 ms frame; `voice.md` holds them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion};
use tutti_mix::{
    DTX_FRAME, Decoder, Encoder, EncoderConfig, FRAME_SAMPLES, Limiter, MixPool, NoiseSuppression, NoiseSuppressor,
    Normaliser, Packet, ParticipantId, Pcm, Room, RoomConfig, TickReport, accumulate, level_of, mix_minus, tone,
};

/// The allocator a tutti server runs with: packets are allocated on I/O
/// threads and freed on mixer threads, which glibc malloc serialises.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SIZES: [usize; 5] = [10, 100, 1_000, 10_000, 50_000];
const NAIVE_SIZES: [usize; 3] = [10, 100, 1_000];
const TICK_BUDGET_MS: f64 = 20.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Pattern {
    /// 5 % talk (distinct levels); the rest send level-127 silence every tick.
    Talk5,
    /// Everyone talks loud; levels wander by up to 9 dB per tick, so the
    /// selection keeps being challenged.
    Talk100,
}

impl Pattern {
    fn name(self) -> &'static str {
        match self {
            Pattern::Talk5 => "5% talking",
            Pattern::Talk100 => "100% talking",
        }
    }

    /// RFC 6464 level participant `i` sends at tick `t` (127 = silent).
    fn level(self, i: usize, t: u64) -> u8 {
        match self {
            Pattern::Talk5 if i.is_multiple_of(20) => 20 + ((i / 20) % 30) as u8,
            Pattern::Talk5 => 127,
            Pattern::Talk100 => 5 + ((i as u64 * 7 + t) % 10) as u8,
        }
    }
}

/// Pre-encoded Opus frames: a continuous tone for talkers, silence for the rest.
struct Frames {
    talk: Vec<Bytes>,
    silence: Bytes,
}

impl Frames {
    fn new() -> Self {
        let mut enc = Encoder::new(&EncoderConfig::default()).expect("encoder");
        let talk = (0..50).map(|n| enc.encode(&tone(330.0, 0.3, n * FRAME_SAMPLES as u64))).collect();
        let mut enc = Encoder::new(&EncoderConfig::default()).expect("encoder");
        let silence = enc.encode(&[0.0; FRAME_SAMPLES]);
        Self { talk, silence }
    }

    /// A fresh copy per packet, as a transport hands over each received
    /// packet in its own buffer (sharing one buffer would make every push and
    /// drop hit one refcount from all threads, which no real load does).
    fn payload(&self, level: u8, t: u64) -> Bytes {
        let frame = if level == 127 { &self.silence } else { &self.talk[(t % 50) as usize] };
        Bytes::copy_from_slice(frame)
    }
}

/// One measured case.
#[derive(Debug, Default)]
struct Case {
    per_tick_ns: Vec<f64>,
    decodes: usize,
    encodes: usize,
}

type Key = (&'static str, Pattern, usize, usize); // (engine, pattern, threads, n)
static RESULTS: Mutex<BTreeMap<Key, Case>> = Mutex::new(BTreeMap::new());

fn record(key: Key, total: Duration, iters: u64, decodes: usize, encodes: usize) {
    let mut results = RESULTS.lock().expect("not poisoned");
    let case = results.entry(key).or_default();
    case.per_tick_ns.push(total.as_nanos() as f64 / iters.max(1) as f64);
    case.decodes = decodes;
    case.encodes = encodes;
}

fn push_tick(room: &mut Room, frames: &Frames, pattern: Pattern, n: usize, t: u64) {
    for i in 0..n {
        let level = pattern.level(i, t);
        let packet = Packet {
            seq: t as u16,
            timestamp: (t as u32).wrapping_mul(960),
            payload: frames.payload(level, t),
            level: Some(level),
        };
        room.push_packet(ParticipantId(i as u64), packet).expect("in room");
    }
}

/// Pool sizes to run: `TUTTI_BENCH_THREADS` (a comma-separated list, such
/// as `1,2,4,8,16` on a bigger machine), by default 1 and 2.
fn pool_threads() -> Vec<usize> {
    let list = std::env::var("TUTTI_BENCH_THREADS").unwrap_or_default();
    let threads: Vec<usize> = list.split(',').filter_map(|t| t.trim().parse().ok()).filter(|&t| t > 0).collect();
    if threads.is_empty() { vec![1, 2] } else { threads }
}

fn bench_tutti(c: &mut Criterion, frames: &Frames) {
    for pattern in [Pattern::Talk5, Pattern::Talk100] {
        for threads in pool_threads() {
            let pool = MixPool::new(threads).expect("pool");
            let mut group = c.benchmark_group(format!("tutti/{}/{threads}-thread", pattern.name().replace(' ', "-")));
            group.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
            for n in SIZES {
                let mut room = Room::new(RoomConfig::default()).expect("room");
                for i in 0..n {
                    room.add_participant(ParticipantId(i as u64)).expect("join");
                }
                let mut t = 0u64;
                // Warm up: fill jitter buffers and the speaker selection.
                for _ in 0..10 {
                    push_tick(&mut room, frames, pattern, n, t);
                    room.tick(&pool, t);
                    t += 1;
                }
                group.bench_function(BenchmarkId::from_parameter(n), |b| {
                    b.iter_custom(|iters| {
                        let mut total = Duration::ZERO;
                        let (mut decodes, mut encodes) = (0, 0);
                        for _ in 0..iters {
                            push_tick(&mut room, frames, pattern, n, t);
                            let start = Instant::now();
                            let report = room.tick(&pool, t);
                            total += start.elapsed();
                            (decodes, encodes) = (report.decodes, report.encodes);
                            t += 1;
                        }
                        record(("tutti", pattern, threads, n), total, iters, decodes, encodes);
                        total
                    })
                });
            }
            group.finish();
        }
    }
}

/// The shape of Janus AudioBridge / FreeSWITCH mod_conference: every
/// participant decoded, every participant's N-minus-self mix encoded by its
/// own encoder, all on one thread. Same codec settings as tutti.
struct Naive {
    decoders: Vec<Decoder>,
    encoders: Vec<Encoder>,
    limiters: Vec<Limiter>,
    pcm: Vec<Pcm>,
}

impl Naive {
    fn new(n: usize) -> Self {
        let cfg = EncoderConfig::default();
        Self {
            decoders: (0..n).map(|_| Decoder::new().expect("decoder")).collect(),
            encoders: (0..n).map(|_| Encoder::new(&cfg).expect("encoder")).collect(),
            limiters: vec![Limiter::default(); n],
            pcm: vec![[0.0; FRAME_SAMPLES]; n],
        }
    }

    fn tick(&mut self, payloads: &[Bytes]) -> Vec<Bytes> {
        let mut total = [0.0f32; FRAME_SAMPLES];
        for ((dec, pcm), payload) in self.decoders.iter_mut().zip(&mut self.pcm).zip(payloads) {
            if dec.decode(payload, pcm).is_err() {
                pcm.fill(0.0);
            }
            accumulate(&mut total, pcm);
        }
        let mut mix = [0.0f32; FRAME_SAMPLES];
        let mut out = Vec::with_capacity(payloads.len());
        for ((enc, lim), own) in self.encoders.iter_mut().zip(&mut self.limiters).zip(&self.pcm) {
            mix_minus(&total, own, &mut mix);
            lim.process(&mut mix);
            out.push(enc.encode(&mix));
        }
        out
    }
}

fn bench_naive(c: &mut Criterion, frames: &Frames) {
    for pattern in [Pattern::Talk5, Pattern::Talk100] {
        let mut group = c.benchmark_group(format!("naive/{}/1-thread", pattern.name().replace(' ', "-")));
        group.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
        for n in NAIVE_SIZES {
            let mut naive = Naive::new(n);
            let mut t = 0u64;
            group.bench_function(BenchmarkId::from_parameter(n), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let payloads: Vec<Bytes> = (0..n).map(|i| frames.payload(pattern.level(i, t), t)).collect();
                        let start = Instant::now();
                        std::hint::black_box(naive.tick(&payloads));
                        total += start.elapsed();
                        t += 1;
                    }
                    record(("naive", pattern, 1, n), total, iters, n, n);
                    total
                })
            });
        }
        group.finish();
    }
}

/// The machine's own ceiling for parallel codec work: six independent Opus
/// encodes (the K+1 of a default room), on 1 and on 2 pool threads, with no
/// tutti code around them. tutti's 1 → 2 thread speed-up can't beat this.
fn bench_ceiling(c: &mut Criterion) {
    let pcm: Vec<Pcm> = (0..6).map(|k| tone(300.0 + 50.0 * k as f32, 0.3, 0)).collect();
    let mut group = c.benchmark_group("ceiling/6-encodes");
    group.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(2));
    for threads in pool_threads() {
        let pool = MixPool::new(threads).expect("pool");
        let mut encoders: Vec<Encoder> =
            (0..6).map(|_| Encoder::new(&EncoderConfig::default()).expect("encoder")).collect();
        group.bench_function(BenchmarkId::from_parameter(format!("{threads}-thread")), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    pool.install(|| {
                        use rayon::prelude::*;
                        encoders.par_iter_mut().zip(&pcm).for_each(|(e, p)| {
                            std::hint::black_box(e.encode(p));
                        });
                    });
                }
                let total = start.elapsed();
                record(("ceiling", Pattern::Talk100, threads, 6), total, iters, 0, 6);
                total
            })
        });
    }
    group.finish();
}

/// Runs `a` and `b` alternately `rounds` times (each after its untimed
/// `prepare`) and returns the median time of each in ms: a ratio measured
/// this way is not skewed by the machine drifting between two benchmark groups.
fn paired(rounds: usize, mut prepare: impl FnMut(usize), mut a: impl FnMut(), mut b: impl FnMut()) -> (f64, f64) {
    let (mut ta, mut tb) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for r in 0..rounds {
        prepare(r);
        let start = Instant::now();
        a();
        ta.push(start.elapsed().as_secs_f64() * 1e3);
        let start = Instant::now();
        b();
        tb.push(start.elapsed().as_secs_f64() * 1e3);
    }
    (median(&ta), median(&tb))
}

/// Paired 1-thread vs 2-thread figures, printed with the report.
static PAIRED: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn bench_paired(frames: &Frames) {
    let (pool1, pool2) = (MixPool::new(1).expect("pool"), MixPool::new(2).expect("pool"));
    let mut lines = Vec::new();
    // The machine's ceiling: six independent encodes.
    let pcm: Vec<Pcm> = (0..6).map(|k| tone(300.0 + 50.0 * k as f32, 0.3, 0)).collect();
    let make =
        || -> Vec<Encoder> { (0..6).map(|_| Encoder::new(&EncoderConfig::default()).expect("encoder")).collect() };
    let (mut e1, mut e2) = (make(), make());
    let encode_all = |pool: &MixPool, encoders: &mut Vec<Encoder>| {
        use rayon::prelude::*;
        pool.install(|| encoders.par_iter_mut().zip(&pcm).for_each(|(e, p)| drop(std::hint::black_box(e.encode(p)))));
    };
    let (c1, c2) = paired(2_000, |_| {}, || encode_all(&pool1, &mut e1), || encode_all(&pool2, &mut e2));
    lines.push(format!(
        "- paired, machine ceiling (6 independent Opus encodes): 1 → 2 threads {:.2}x ({c1:.3} ms → {c2:.3} ms)",
        c1 / c2
    ));
    for (pattern, n, rounds) in
        [(Pattern::Talk5, 10_000, 600), (Pattern::Talk100, 10_000, 600), (Pattern::Talk5, 50_000, 200)]
    {
        let make_room = || {
            let mut room = Room::new(RoomConfig::default()).expect("room");
            for i in 0..n {
                room.add_participant(ParticipantId(i as u64)).expect("join");
            }
            room
        };
        let (r1, r2) = (std::cell::RefCell::new(make_room()), std::cell::RefCell::new(make_room()));
        let t = std::cell::Cell::new(0u64);
        let (m1, m2) = paired(
            rounds,
            |_| {
                t.set(t.get() + 1);
                push_tick(&mut r1.borrow_mut(), frames, pattern, n, t.get());
                push_tick(&mut r2.borrow_mut(), frames, pattern, n, t.get());
            },
            || drop(r1.borrow_mut().tick(&pool1, t.get())),
            || drop(r2.borrow_mut().tick(&pool2, t.get())),
        );
        lines.push(format!(
            "- paired, {}, N = {n}: 1 → 2 pool threads {:.2}x ({m1:.2} ms → {m2:.2} ms, medians of {rounds} alternating ticks)",
            pattern.name(),
            m1 / m2
        ));
    }
    *PAIRED.lock().expect("not poisoned") = lines;
}

/// Room sizes of the spatial figures.
const SPATIAL_N: [usize; 2] = [500, 1_000];
/// Alternated ticks per spatial case (after 50 warm-up ticks each).
const SPATIAL_ROUNDS: usize = 400;

/// A room of `n`: spatial (binaural or panned) or not, every
/// `stereo_every`-th participant asking for stereo.
fn spatial_room(n: usize, spatial: bool, binaural: bool, stereo_every: usize) -> Room {
    let mut room = Room::new(RoomConfig { spatial, binaural, ..RoomConfig::default() }).expect("room");
    for i in 0..n {
        let id = ParticipantId(i as u64);
        room.add_participant(id).expect("join");
        if stereo_every > 0 && i.is_multiple_of(stereo_every) {
            room.set_stereo(id, true).expect("stereo");
        }
    }
    room
}

/// 10 % of the room talks, each at its own level; the rest send silence.
fn push_tenth(room: &mut Room, frames: &Frames, n: usize, t: u64) {
    push_levels(room, frames, n, t, |i| if i.is_multiple_of(10) { 20 + ((i / 10) % 40) as u8 } else { 127 });
}

/// Participant `i` of `n` sends a frame at `level(i)` (127: silence).
fn push_levels(room: &mut Room, frames: &Frames, n: usize, t: u64, level: impl Fn(usize) -> u8) {
    for i in 0..n {
        let level = level(i);
        let packet = Packet {
            seq: t as u16,
            timestamp: (t as u32).wrapping_mul(960),
            payload: frames.payload(level, t),
            level: Some(level),
        };
        room.push_packet(ParticipantId(i as u64), packet).expect("in room");
    }
}

/// The spatial figures (`cargo bench --bench mixer -- spatial`): a tick of
/// a spatial room against the same room mono, alternated tick by tick, on
/// each pool size of [`pool_threads`], for each of `modes` (binaural or panned).
fn bench_spatial(frames: &Frames, modes: &[bool]) {
    let mut lines = vec![
        "| room | mode | stereo listeners | pool threads | mono, ms/tick | spatial, ms/tick | spatial / mono | µs per participant (spatial) | encodes per tick (mono → spatial) |".to_owned(),
        "|---|---|---|---:|---:|---:|---:|---:|---|".to_owned(),
    ];
    for threads in pool_threads() {
        let pool = MixPool::new(threads).expect("pool");
        for n in SPATIAL_N {
            for (&binaural, (who, every)) in
                modes.iter().flat_map(|b| std::iter::repeat(b).zip([("all", 1), ("half", 2)]))
            {
                let mode = if binaural { "binaural" } else { "panned" };
                let mono = std::cell::RefCell::new(spatial_room(n, false, false, every));
                let spatial = std::cell::RefCell::new(spatial_room(n, true, binaural, every));
                let t = std::cell::Cell::new(0u64);
                let step = |room: &std::cell::RefCell<Room>| {
                    let mut room = room.borrow_mut();
                    push_tenth(&mut room, frames, n, t.get());
                    room.tick(&pool, t.get())
                };
                for _ in 0..50 {
                    t.set(t.get() + 1);
                    step(&mono);
                    step(&spatial);
                }
                let encodes = std::cell::Cell::new((0, 0));
                let (m_mono, m_spatial) = paired(
                    SPATIAL_ROUNDS,
                    |_| t.set(t.get() + 1),
                    || encodes.set((step(&mono).encodes, encodes.get().1)),
                    || encodes.set((encodes.get().0, step(&spatial).encodes)),
                );
                let (e_mono, e_spatial) = encodes.get();
                lines.push(format!(
                    "| {n}, 10 % talking | {mode} | {who} | {threads} | {m_mono:.3} | {m_spatial:.3} | {:.2}x | {:.2} | {e_mono} → {e_spatial} |",
                    m_spatial / m_mono,
                    m_spatial * 1e3 / n as f64
                ));
            }
        }
    }
    let text = format!(
        "# Spatial rooms: the mixer's cost\n\nOne tick, a spatial room against the same room mono, medians of \
         {SPATIAL_ROUNDS} ticks alternated. On a shared machine the absolute figures are noisy; read the ratio.\n\n{}\n",
        lines.join("\n")
    );
    println!("\n{text}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tutti-bench");
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join("spatial.md"), text);
    }
}

/// Room size of the voice figures.
const VOICE_N: usize = 100;
/// Talkers of the voice figures.
const VOICE_K: [usize; 4] = [1, 2, 3, 5];
/// Alternated ticks per voice case (after 50 warm-up ticks each).
const VOICE_ROUNDS: usize = 600;

/// A room of `VOICE_N` with noise suppression and loudness both on or both off.
fn voice_room(on: bool) -> Room {
    let cfg = RoomConfig {
        noise_suppression: if on { NoiseSuppression::On } else { NoiseSuppression::Off },
        loudness: on,
        ..RoomConfig::default()
    };
    let mut room = Room::new(cfg).expect("room");
    for i in 0..VOICE_N {
        room.add_participant(ParticipantId(i as u64)).expect("join");
    }
    room
}

/// The first `k` participants talk (distinct levels), the rest send silence.
fn push_voice(room: &mut Room, frames: &Frames, k: usize, t: u64) {
    push_levels(room, frames, VOICE_N, t, |i| if i < k { 20 + i as u8 } else { 127 });
}

/// The voice figures, printed with the report.
static VOICE: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn bench_voice(c: &mut Criterion, frames: &Frames) {
    let pool = MixPool::new(2).expect("pool");
    // Criterion cases: one tick, on and off, per K.
    let mut group = c.benchmark_group("voice");
    group.sample_size(20).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    for k in VOICE_K {
        for on in [false, true] {
            let mut room = voice_room(on);
            let mut t = 0u64;
            let name = format!("{}/K={k}", if on { "on" } else { "off" });
            group.bench_function(BenchmarkId::from_parameter(name), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        t += 1;
                        push_voice(&mut room, frames, k, t);
                        let start = Instant::now();
                        drop(std::hint::black_box(room.tick(&pool, t)));
                        total += start.elapsed();
                    }
                    total
                })
            });
        }
    }
    group.finish();

    // Paired: on and off alternated tick by tick.
    let mut lines = vec![
        format!(
            "| K talkers (room of {VOICE_N}) | off, ms/tick | on, ms/tick | on / off | suppressed + normalised per tick |"
        ),
        "|---|---|---|---|---|".to_owned(),
    ];
    for k in VOICE_K {
        let (off, on) = (std::cell::RefCell::new(voice_room(false)), std::cell::RefCell::new(voice_room(true)));
        let t = std::cell::Cell::new(0u64);
        let step = |room: &std::cell::RefCell<Room>| {
            let mut room = room.borrow_mut();
            push_voice(&mut room, frames, k, t.get());
            room.tick(&pool, t.get())
        };
        for _ in 0..50 {
            t.set(t.get() + 1);
            step(&off);
            step(&on);
        }
        let last = std::cell::Cell::new((0, 0));
        let (m_off, m_on) = paired(
            VOICE_ROUNDS,
            |_| t.set(t.get() + 1),
            || drop(step(&off)),
            || {
                let r = step(&on);
                last.set((r.suppressed, r.normalised));
            },
        );
        let (s, n) = last.get();
        lines.push(format!("| {k} | {m_off:.3} | {m_on:.3} | {:.2}x | {s} + {n} |", m_on / m_off));
    }
    // Each stage alone, per 20 ms frame (what one speaker adds to a tick).
    let pcm = tone(220.0, 0.1, 0);
    let mut ns = NoiseSuppressor::new();
    let mut norm = Normaliser::default();
    let mut dec = Decoder::new().expect("decoder");
    let mut out = [0.0f32; FRAME_SAMPLES];
    let (mut t_ns, mut t_norm, mut t_dec) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..2_000 {
        let mut f = pcm;
        let start = Instant::now();
        std::hint::black_box(ns.process(&mut f));
        t_ns.push(start.elapsed().as_secs_f64() * 1e6);
        let start = Instant::now();
        std::hint::black_box(norm.process(&mut f, -23.0));
        t_norm.push(start.elapsed().as_secs_f64() * 1e6);
        let start = Instant::now();
        let _ = std::hint::black_box(dec.decode(&frames.talk[r % 50], &mut out));
        t_dec.push(start.elapsed().as_secs_f64() * 1e6);
    }
    lines.push(String::new());
    lines.push(format!(
        "Per speaker per 20 ms frame (medians of 2,000, interleaved): RNNoise {:.1} µs, loudness {:.2} µs, \
         against one Opus decode {:.1} µs.",
        median(&t_ns),
        median(&t_norm),
        median(&t_dec)
    ));
    *VOICE.lock().expect("not poisoned") = lines;
}

fn voice_report() {
    let lines = VOICE.lock().expect("not poisoned");
    if lines.is_empty() {
        return;
    }
    let text = format!(
        "# Voice processing cost\n\nOne tick of a room of {VOICE_N}, noise suppression and loudness both on \
         against both off, medians of {VOICE_ROUNDS} ticks alternated on a 2-thread pool. On a shared \
         machine the absolute figures are noisy; the ratio is what to read. K = 1 compares a processed lone \
         speaker (one decode, the processing, one encode) with a forwarded one (no codec work).\n\n{}\n",
        lines.join("\n")
    );
    println!("\n{text}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tutti-bench");
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join("voice.md"), text);
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() { f64::NAN } else { v[v.len() / 2] }
}

/// Fleet workloads: (rooms, participants per room).
const FLEET: [(usize, usize); 3] = [(1_000, 10), (100, 100), (1, 1_000)];
/// Ticks run before and while measuring each fleet workload.
const FLEET_WARMUP: u64 = 10;
const FLEET_TICKS: u64 = 40;
/// Participants the naive baseline is measured on per workload (its cost is
/// per participant: one decode and one encode each, whatever the room size).
const NAIVE_SAMPLE: usize = 100;

/// A seeded xorshift generator (the bench must be repeatable).
struct Rng(u64);

impl Rng {
    fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Exponentially distributed ticks with this mean.
    fn exp_ticks(&mut self, mean: f64) -> u32 {
        (-mean * (1.0 - self.next_f64()).ln()).round().max(1.0) as u32
    }
}

/// A browser-like client: a talker alternates P.59 talkspurts (mean 854 ms)
/// and pauses (456 ms); while silent (a pause, or a non-talker) it sends a
/// DTX packet when silence starts and then one every 400 ms, nothing between.
struct Client {
    talker: bool,
    on: bool,
    left: u32,
    silent_for: u64,
    seq: u16,
    level: u8,
}

impl Client {
    fn new(talker: bool, i: usize, rng: &mut Rng) -> Self {
        let on = talker && rng.next_f64() < 854.0 / (854.0 + 456.0);
        let left = if on { rng.exp_ticks(42.7) } else { rng.exp_ticks(22.8) };
        Self { talker, on, left, silent_for: (i % 20) as u64, seq: 0, level: 20 + (i % 25) as u8 }
    }

    /// This tick's packet, if the client sends one.
    fn next(&mut self, frames: &Frames, t: u64, rng: &mut Rng) -> Option<Packet> {
        if self.talker {
            self.left = self.left.saturating_sub(1);
            if self.left == 0 {
                self.on = !self.on;
                self.left = if self.on { rng.exp_ticks(42.7) } else { rng.exp_ticks(22.8) };
                self.silent_for = 0;
            }
        }
        let payload = if self.on {
            Bytes::copy_from_slice(&frames.talk[(t % 50) as usize])
        } else {
            self.silent_for += 1;
            if !(self.silent_for - 1).is_multiple_of(20) {
                return None;
            }
            Bytes::from_static(&DTX_FRAME)
        };
        let level = if self.on { self.level } else { 127 };
        let packet = Packet { seq: self.seq, timestamp: (t as u32).wrapping_mul(960), payload, level: Some(level) };
        self.seq = self.seq.wrapping_add(1);
        Some(packet)
    }
}

/// One fleet result row.
#[derive(Debug, Clone)]
struct FleetRow {
    rooms: usize,
    size: usize,
    engine: &'static str,
    us_per_participant: f64,
    decodes: f64,
    encodes: f64,
    forwarded: f64,
    dtx: f64,
    participants_measured: usize,
}

static FLEET_ROWS: Mutex<Vec<FleetRow>> = Mutex::new(Vec::new());

fn make_rooms(cfg: &RoomConfig, rooms: usize, size: usize) -> Vec<Room> {
    (0..rooms)
        .map(|_| {
            let mut room = Room::new(cfg.clone()).expect("room");
            for i in 0..size {
                room.add_participant(ParticipantId(i as u64)).expect("join");
            }
            room
        })
        .collect()
}

#[derive(Default)]
struct Sums {
    ns: f64,
    decodes: usize,
    encodes: usize,
    forwarded: usize,
    dtx: usize,
}

impl Sums {
    fn add(&mut self, reports: &[TickReport]) {
        for r in reports {
            self.decodes += r.decodes;
            self.encodes += r.encodes;
            self.forwarded += r.forwarded;
            self.dtx += r.dtx;
        }
    }

    fn row(&self, rooms: usize, size: usize, engine: &'static str, participants: usize) -> FleetRow {
        let ticks = FLEET_TICKS as f64;
        FleetRow {
            rooms,
            size,
            engine,
            us_per_participant: self.ns / 1e3 / ticks / participants as f64,
            decodes: self.decodes as f64 / ticks,
            encodes: self.encodes as f64 / ticks,
            forwarded: self.forwarded as f64 / ticks,
            dtx: self.dtx as f64 / ticks,
            participants_measured: participants,
        }
    }
}

/// The fleet table: the same clients' packets go to tutti with its default
/// policies and to tutti with pass-through and DTX off, ticked alternately
/// on one pool thread; the naive baseline runs on a sample of the rooms.
fn bench_fleet(frames: &Frames) {
    let pool = MixPool::new(1).expect("pool");
    let old = RoomConfig { passthrough: false, dtx: false, ..RoomConfig::default() };
    let mut rows = Vec::new();
    for (rooms, size) in FLEET {
        let started = Instant::now();
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (rooms * size) as u64);
        let talkers_per_room = size.div_ceil(10);
        let mut clients: Vec<Vec<Client>> =
            (0..rooms).map(|_| (0..size).map(|i| Client::new(i < talkers_per_room, i, &mut rng)).collect()).collect();
        let mut new_rooms = make_rooms(&RoomConfig::default(), rooms, size);
        let mut old_rooms = make_rooms(&old, rooms, size);
        let naive_rooms = (NAIVE_SAMPLE / size).clamp(1, rooms);
        let mut naive: Vec<Naive> = (0..naive_rooms).map(|_| Naive::new(size)).collect();
        let (mut new_sums, mut old_sums, mut naive_ns) = (Sums::default(), Sums::default(), 0.0);
        for t in 0..FLEET_WARMUP + FLEET_TICKS {
            let mut naive_payloads: Vec<Vec<Bytes>> = Vec::with_capacity(naive_rooms);
            for (r, room_clients) in clients.iter_mut().enumerate() {
                let mut payloads = Vec::new();
                for (i, c) in room_clients.iter_mut().enumerate() {
                    let packet = c.next(frames, t, &mut rng);
                    if r < naive_rooms {
                        payloads.push(packet.as_ref().map_or_else(Bytes::new, |p| p.payload.clone()));
                    }
                    if let Some(packet) = packet {
                        let id = ParticipantId(i as u64);
                        let copy = Packet { payload: Bytes::copy_from_slice(&packet.payload), ..packet.clone() };
                        new_rooms[r].push_packet(id, packet).expect("in room");
                        old_rooms[r].push_packet(id, copy).expect("in room");
                    }
                }
                if r < naive_rooms {
                    naive_payloads.push(payloads);
                }
            }
            let measured = t >= FLEET_WARMUP;
            // Alternate which policy ticks first, so neither gets the warmer caches.
            for which in if t % 2 == 0 { [0, 1] } else { [1, 0] } {
                let (rooms, sums) =
                    if which == 0 { (&mut new_rooms, &mut new_sums) } else { (&mut old_rooms, &mut old_sums) };
                let start = Instant::now();
                let reports = pool.tick_rooms(rooms, t);
                let elapsed = start.elapsed().as_nanos() as f64;
                if measured {
                    sums.ns += elapsed;
                    sums.add(&reports);
                }
            }
            let start = Instant::now();
            for (n, payloads) in naive.iter_mut().zip(&naive_payloads) {
                std::hint::black_box(n.tick(payloads));
            }
            if measured {
                naive_ns += start.elapsed().as_nanos() as f64;
            }
        }
        let total = rooms * size;
        rows.push(new_sums.row(rooms, size, "tutti", total));
        rows.push(old_sums.row(rooms, size, "tutti, always encode", total));
        let naive_participants = naive_rooms * size;
        let naive_row = Sums { ns: naive_ns, ..Sums::default() }.row(rooms, size, "naive", naive_participants);
        // Its codec work for the whole fleet: every participant, every tick.
        rows.push(FleetRow { decodes: total as f64, encodes: total as f64, ..naive_row });
        println!("fleet {rooms} x {size}: {:.1} s", started.elapsed().as_secs_f64());
    }
    *FLEET_ROWS.lock().expect("not poisoned") = rows;
}

/// Prints the fleet table and writes it with a bar chart under target/tutti-bench/.
fn fleet_report() {
    let rows = FLEET_ROWS.lock().expect("not poisoned");
    if rows.is_empty() {
        return;
    }
    let mut table = String::new();
    let _ = writeln!(
        table,
        "Fleet: 10 % P.59 talkers, browser-like clients (levels, DTX while silent), 1 pool thread, {FLEET_TICKS} ticks.\n"
    );
    let _ = writeln!(
        table,
        "| rooms × size | engine | µs per participant per tick | vs tutti | decodes/tick | encodes/tick | forwarded/tick | DTX frames/tick |"
    );
    let _ = writeln!(table, "|---|---|---:|---:|---:|---:|---:|---:|");
    for row in rows.iter() {
        let tutti = rows
            .iter()
            .find(|r| r.rooms == row.rooms && r.size == row.size && r.engine == "tutti")
            .map_or(f64::NAN, |r| r.us_per_participant);
        let sample = if row.participants_measured < row.rooms * row.size {
            format!(" (on {} participants)", row.participants_measured)
        } else {
            String::new()
        };
        let _ = writeln!(
            table,
            "| {} × {} | {}{sample} | {:.2} | {:.1}x | {:.1} | {:.1} | {:.0} | {:.0} |",
            row.rooms,
            row.size,
            row.engine,
            row.us_per_participant,
            row.us_per_participant / tutti,
            row.decodes,
            row.encodes,
            row.forwarded,
            row.dtx
        );
    }
    println!("\n{table}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tutti-bench");
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join("fleet.md"), &table);
        let _ = std::fs::write(dir.join("fleet.svg"), fleet_plot(&rows));
        println!("wrote {0}/fleet.md and {0}/fleet.svg", dir.display());
    }
}

/// Grouped bars (log scale) of µs per participant per tick, per workload and engine.
fn fleet_plot(rows: &[FleetRow]) -> String {
    let (w, h, left, right, top, bottom) = (900.0, 460.0, 80.0, 230.0, 40.0, 60.0);
    let (y0, y1) = (0.1f64.log10(), 1_000f64.log10());
    let py = |us: f64| top + (1.0 - (us.max(0.1).log10() - y0) / (y1 - y0)) * (h - top - bottom);
    let mut svg = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n"
    );
    let _ = writeln!(
        svg,
        "<text x='{left}' y='22' font-size='14'>tutti fleet: µs of mixer CPU per participant per 20 ms tick (log scale)</text>"
    );
    for us in [0.1, 1.0, 10.0, 100.0, 1000.0] {
        let y = py(us);
        let _ = writeln!(
            svg,
            "<line x1='{left}' y1='{y}' x2='{}' y2='{y}' stroke='#ddd'/><text x='{}' y='{}' text-anchor='end'>{us} µs</text>",
            w - right,
            left - 6.0,
            y + 4.0
        );
    }
    let engines = ["tutti", "tutti, always encode", "naive"];
    let colors = ["#2ca02c", "#1f77b4", "#d62728"];
    let groups: Vec<(usize, usize)> = FLEET.to_vec();
    let group_w = (w - left - right) / groups.len() as f64;
    let bar_w = group_w / (engines.len() as f64 + 1.0);
    for (g, (rooms, size)) in groups.iter().enumerate() {
        let x0 = left + g as f64 * group_w + bar_w / 2.0;
        for (e, engine) in engines.iter().enumerate() {
            let Some(row) = rows.iter().find(|r| r.rooms == *rooms && r.size == *size && r.engine == *engine) else {
                continue;
            };
            let (x, y) = (x0 + e as f64 * bar_w, py(row.us_per_participant));
            let _ = writeln!(
                svg,
                "<rect x='{x:.1}' y='{y:.1}' width='{:.1}' height='{:.1}' fill='{}'/><text x='{:.1}' y='{:.1}' text-anchor='middle' font-size='10'>{:.1}</text>",
                bar_w * 0.9,
                h - bottom - y,
                colors[e],
                x + bar_w * 0.45,
                y - 3.0,
                row.us_per_participant
            );
        }
        let _ = writeln!(
            svg,
            "<text x='{:.1}' y='{}' text-anchor='middle'>{rooms} rooms of {size}</text>",
            left + (g as f64 + 0.5) * group_w,
            h - bottom + 18.0
        );
    }
    for (e, engine) in engines.iter().enumerate() {
        let y = top + 20.0 + e as f64 * 20.0;
        let _ = writeln!(
            svg,
            "<rect x='{}' y='{}' width='14' height='10' fill='{}'/><text x='{}' y='{}'>{engine}</text>",
            w - right + 10.0,
            y - 9.0,
            colors[e],
            w - right + 30.0,
            y
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// Prints the table and writes it with the plot under target/tutti-bench/.
fn report() {
    let results = RESULTS.lock().expect("not poisoned");
    if results.is_empty() && PAIRED.lock().expect("not poisoned").is_empty() {
        return;
    }
    let ms = |k: &Key| results.get(k).map(|c| median(&c.per_tick_ns) / 1e6);
    let mut table = String::new();
    let _ = writeln!(
        table,
        "| engine | pattern | threads | N | tick (ms, median) | µs/participant | decodes | encodes | participants per core at 50 % of 20 ms |"
    );
    let _ = writeln!(table, "|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for ((engine, pattern, threads, n), case) in results.iter().filter(|(k, _)| k.0 != "ceiling") {
        let tick_ms = median(&case.per_tick_ns) / 1e6;
        // CPU per participant if every pool thread were busy the whole tick
        // (an upper bound), extrapolated linearly to half the budget per core.
        let cpu_ms_per_participant = tick_ms * *threads as f64 / *n as f64;
        let per_core = (TICK_BUDGET_MS / 2.0 / cpu_ms_per_participant).floor();
        let _ = writeln!(
            table,
            "| {engine} | {} | {threads} | {n} | {tick_ms:.3} | {:.2} | {} | {} | {per_core:.0} |",
            pattern.name(),
            tick_ms * 1000.0 / *n as f64,
            case.decodes,
            case.encodes,
        );
    }
    let mut ratios = String::new();
    for line in PAIRED.lock().expect("not poisoned").iter() {
        let _ = writeln!(ratios, "{line}");
    }
    if let (Some(c1), Some(c2)) = (ms(&("ceiling", Pattern::Talk100, 1, 6)), ms(&("ceiling", Pattern::Talk100, 2, 6))) {
        let _ = writeln!(
            ratios,
            "- machine ceiling: 6 independent Opus encodes, 1 → 2 threads speed-up {:.2}x ({c1:.3} ms → {c2:.3} ms)",
            c1 / c2
        );
    }
    for pattern in [Pattern::Talk5, Pattern::Talk100] {
        if let (Some(naive), Some(t1), Some(t2)) =
            (ms(&("naive", pattern, 1, 1_000)), ms(&("tutti", pattern, 1, 1_000)), ms(&("tutti", pattern, 2, 1_000)))
        {
            let _ = writeln!(
                ratios,
                "- {}, N = 1 000: tutti is {:.0}x faster than the naive baseline on 1 thread ({:.0}x on 2)",
                pattern.name(),
                naive / t1,
                naive / t2
            );
        }
        if let (Some(t1), Some(t2)) = (ms(&("tutti", pattern, 1, 10_000)), ms(&("tutti", pattern, 2, 10_000))) {
            let _ = writeln!(
                ratios,
                "- {}, N = 10 000: 1 → 2 pool threads speed-up {:.2}x ({t1:.2} ms → {t2:.2} ms)",
                pattern.name(),
                t1 / t2
            );
        }
    }
    println!("\n{table}\n{ratios}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tutti-bench");
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join("mixer.md"), format!("{table}\n{ratios}"));
        let _ = std::fs::write(dir.join("mixer.svg"), plot(&results));
        println!("wrote {0}/mixer.md and {0}/mixer.svg", dir.display());
    }
}

/// A log-log SVG of tick time against N, one line per engine, pattern and pool size.
fn plot(results: &BTreeMap<Key, Case>) -> String {
    let (w, h, left, right, top, bottom) = (900.0, 560.0, 80.0, 260.0, 30.0, 60.0);
    let (x0, x1) = (10f64.log10(), 50_000f64.log10());
    let (y0, y1) = (0.01f64.log10(), 1_000f64.log10());
    let px = |n: f64| left + (n.log10() - x0) / (x1 - x0) * (w - left - right);
    let py = |ms: f64| top + (1.0 - (ms.max(0.01).log10() - y0) / (y1 - y0)) * (h - top - bottom);
    let mut svg = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n"
    );
    for n in SIZES {
        let x = px(n as f64);
        let _ = writeln!(
            svg,
            "<line x1='{x}' y1='{top}' x2='{x}' y2='{}' stroke='#ddd'/><text x='{x}' y='{}' text-anchor='middle'>{n}</text>",
            h - bottom,
            h - bottom + 18.0
        );
    }
    for ms in [0.01, 0.1, 1.0, 10.0, 100.0, 1000.0] {
        let y = py(ms);
        let _ = writeln!(
            svg,
            "<line x1='{left}' y1='{y}' x2='{}' y2='{y}' stroke='#ddd'/><text x='{}' y='{}' text-anchor='end'>{ms} ms</text>",
            w - right,
            left - 6.0,
            y + 4.0
        );
    }
    for (ms, label) in [(TICK_BUDGET_MS, "20 ms budget"), (TICK_BUDGET_MS / 2.0, "50 % of budget")] {
        let y = py(ms);
        let _ = writeln!(
            svg,
            "<line x1='{left}' y1='{y}' x2='{}' y2='{y}' stroke='#c00' stroke-dasharray='6 4'/><text x='{}' y='{}' fill='#c00'>{label}</text>",
            w - right,
            w - right + 6.0,
            y + 4.0
        );
    }
    let _ = writeln!(
        svg,
        "<text x='{left}' y='18' font-size='14'>tutti mixer: time of one 20 ms tick (cargo bench --bench mixer)</text>"
    );
    let _ = writeln!(
        svg,
        "<text x='{}' y='{}' text-anchor='middle'>participants in the room (N)</text>",
        (left + w - right) / 2.0,
        h - 15.0
    );
    let _ = writeln!(
        svg,
        "<text x='18' y='{}' transform='rotate(-90 18 {})' text-anchor='middle'>tick time (median)</text>",
        h / 2.0,
        h / 2.0
    );
    let colors = ["#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#d62728", "#8c564b"];
    type Series = (&'static str, Pattern, usize); // (engine, pattern, threads)
    let mut series: BTreeMap<Series, Vec<(usize, f64)>> = BTreeMap::new();
    for ((engine, pattern, threads, n), case) in results.iter().filter(|(k, _)| k.0 != "ceiling") {
        series.entry((engine, *pattern, *threads)).or_default().push((*n, median(&case.per_tick_ns) / 1e6));
    }
    for (i, ((engine, pattern, threads), points)) in series.iter().enumerate() {
        let color = colors[i % colors.len()];
        let dash = if *engine == "naive" { " stroke-dasharray='3 3'" } else { "" };
        let path: Vec<String> = points.iter().map(|(n, ms)| format!("{:.1},{:.1}", px(*n as f64), py(*ms))).collect();
        let _ = writeln!(
            svg,
            "<polyline fill='none' stroke='{color}' stroke-width='2'{dash} points='{}'/>",
            path.join(" ")
        );
        for (n, ms) in points {
            let _ = writeln!(svg, "<circle cx='{:.1}' cy='{:.1}' r='3' fill='{color}'/>", px(*n as f64), py(*ms));
        }
        let y = top + 20.0 + i as f64 * 20.0;
        let _ = writeln!(
            svg,
            "<line x1='{}' y1='{y}' x2='{}' y2='{y}' stroke='{color}' stroke-width='2'{dash}/><text x='{}' y='{}'>{engine}, {}, {threads} thr</text>",
            w - right + 10.0,
            w - right + 40.0,
            w - right + 46.0,
            y + 4.0,
            pattern.name()
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn main() {
    let frames = Frames::new();
    assert!(level_of(&tone(330.0, 0.3, 0)) < 20, "talk frames are loud");
    let mut c = Criterion::default().configure_from_args();
    bench_ceiling(&mut c);
    bench_tutti(&mut c, &frames);
    bench_naive(&mut c, &frames);
    // The voice figures run only when asked for: `cargo bench --bench mixer -- voice`.
    if std::env::args().any(|a| a.contains("voice")) {
        bench_voice(&mut c, &frames);
    }
    // The spatial figures too: `cargo bench --bench mixer -- spatial`
    // (panned and binaural), `-- binaural` (binaural alone).
    if std::env::args().any(|a| a.contains("spatial")) {
        bench_spatial(&frames, &[false, true]);
    } else if std::env::args().any(|a| a.contains("binaural")) {
        bench_spatial(&frames, &[true]);
    }
    c.final_summary();
    // The paired figures run unless a filter that excludes them was given.
    let filtered = std::env::args().skip(1).any(|a| !a.starts_with('-'));
    if !filtered || std::env::args().any(|a| a.contains("paired")) {
        bench_paired(&frames);
    }
    if !filtered || std::env::args().any(|a| a.contains("fleet")) {
        bench_fleet(&frames);
    }
    report();
    fleet_report();
    voice_report();
}
