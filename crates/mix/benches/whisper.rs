//! What whisper channels cost the mixer: one room of 200 (2 room talkers,
//! the rest silent), ticked on the calling thread, with 0, 1 and 4 whisper
//! channels, each with one talking speaker and 20 listeners; and, for each,
//! the same talkers all talking in the room (no channel), so the channels'
//! own cost stands apart from their speakers'. Configurations are
//! alternated round by round, so a busy machine skews them alike: read the
//! ratios, not the absolute figures.
//!
//! `cargo bench -p tutti-mix --bench whisper` (criterion-free: it prints a table).

use std::time::Instant;

use bytes::Bytes;
use tutti_mix::{
    ChannelId, FRAME_SAMPLES, Packet, ParticipantId, Room, RoomConfig, SpeakerLimit, TickReport, level_of, tone,
};

const PARTICIPANTS: u64 = 200;
const LISTENERS_PER_CHANNEL: u64 = 20;
const TICKS: u64 = 100;
const ROUNDS: usize = 15;

/// 50 frames of a tone per talker, real Opus, looped.
fn frames(freq: f32) -> Vec<(Bytes, u8)> {
    let mut enc = opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Voip).expect("encoder");
    (0..50u64)
        .map(|n| {
            let pcm = tone(freq, 0.2, n * FRAME_SAMPLES as u64);
            (Bytes::from(enc.encode_vec_float(&pcm, 1500).expect("encode")), level_of(&pcm))
        })
        .collect()
}

struct Setup {
    room: Room,
    talkers: Vec<(ParticipantId, Vec<(Bytes, u8)>)>,
    tick: u64,
}

/// `channels` channels of one talking speaker; `whisper`: as channels, else all in the room.
fn setup(channels: u64, whisper: bool) -> Setup {
    let cfg = RoomConfig { max_speakers: SpeakerLimit::Top(8), ..Default::default() };
    let mut room = Room::new(cfg).expect("room");
    for id in 1..=PARTICIPANTS {
        room.add_participant(ParticipantId(id)).expect("join");
    }
    let talkers: Vec<(ParticipantId, Vec<(Bytes, u8)>)> =
        (1..=2 + channels).map(|id| (ParticipantId(id), frames(300.0 + 110.0 * id as f32))).collect();
    if whisper {
        for c in 0..channels {
            let first = 100 + c * LISTENERS_PER_CHANNEL;
            let listeners: Vec<ParticipantId> = (first..first + LISTENERS_PER_CHANNEL).map(ParticipantId).collect();
            room.open_channel(ChannelId(c), &[ParticipantId(3 + c)], &listeners).expect("open");
        }
    }
    Setup { room, talkers, tick: 0 }
}

/// Runs `TICKS` ticks; returns the time in `tick_inline` only, and the last report.
fn run(s: &mut Setup) -> (f64, TickReport) {
    let mut spent = 0.0;
    let mut last = None;
    for _ in 0..TICKS {
        let t = s.tick;
        for (id, frames) in &s.talkers {
            let (payload, level) = frames[(t % frames.len() as u64) as usize].clone();
            let packet = Packet { seq: t as u16, timestamp: (t * 960) as u32, payload, level: Some(level) };
            s.room.push_packet(*id, packet).expect("in");
        }
        let start = Instant::now();
        let report = s.room.tick_inline(t);
        spent += start.elapsed().as_secs_f64();
        s.tick += 1;
        last = Some(report);
    }
    (spent / TICKS as f64 * 1e6, last.expect("ticks ran"))
}

fn main() {
    let configs: Vec<(String, u64, bool)> = [0u64, 1, 4]
        .iter()
        .flat_map(|&c| {
            let mut v = vec![(format!("{c} channels"), c, true)];
            if c > 0 {
                v.push((format!("{} room talkers, no channel", 2 + c), c, false));
            }
            v
        })
        .collect();
    let mut setups: Vec<Setup> = configs.iter().map(|(_, c, w)| setup(*c, *w)).collect();
    // Warm up: selection settles, encoders are made.
    for s in &mut setups {
        run(s);
    }
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); setups.len()];
    let mut reports = Vec::new();
    for round in 0..ROUNDS {
        for (n, s) in setups.iter_mut().enumerate() {
            let (us, report) = run(s);
            times[n].push(us);
            if round == ROUNDS - 1 {
                reports.push(report);
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let base = median(&mut times[0].clone());
    println!(
        "| room of {PARTICIPANTS}, {LISTENERS_PER_CHANNEL} listeners a channel | encodes | of them channel mixes | decodes | µs per tick (median) | vs 0 channels |"
    );
    println!("|---|---|---|---|---|---|");
    for (n, (name, _, _)) in configs.iter().enumerate() {
        let r = &reports[n];
        let us = median(&mut times[n]);
        println!("| {name} | {} | {} | {} | {us:.0} | {:.2} |", r.encodes, r.whisper_encodes, r.decodes, us / base);
    }
}
