//! The jitter buffer under any sequence of pushes and pops: no panic, and
//! its invariants (delay bounded, counters consistent, one playout per pop).
#![no_main]

use arbitrary::Arbitrary;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tutti_mix::{JitterBuffer, JitterConfig, Packet, Playout, PushOutcome};

#[derive(Arbitrary, Debug)]
enum Op {
    Push {
        seq: u16,
        timestamp: u32,
        len: u16,
        level: Option<u8>,
    },
    /// Push the next in-order packet (keeps the buffer playing between jumps).
    Next {
        skip: u8,
        len: u8,
    },
    Pop,
}

#[derive(Arbitrary, Debug)]
struct Input {
    depth: u8,
    max_frames: u8,
    max_timestamp_jump: u32,
    ops: Vec<Op>,
}

fuzz_target!(|input: Input| {
    let depth = usize::from(input.depth % 8) + 1;
    let cfg = JitterConfig {
        depth,
        max_frames: depth + usize::from(input.max_frames % 32),
        max_timestamp_jump: input.max_timestamp_jump.max(960),
    };
    let mut jb = JitterBuffer::new(cfg);
    let (mut seq, mut ts) = (0u16, 0u32);
    let mut pops = 0u64;
    for op in input.ops.into_iter().take(4096) {
        let packet = match op {
            Op::Push { seq, timestamp, len, level } => {
                Packet { seq, timestamp, payload: Bytes::from(vec![0xAB; usize::from(len % 1400)]), level }
            }
            Op::Next { skip, len } => {
                seq = seq.wrapping_add(u16::from(skip % 4) + 1);
                ts = ts.wrapping_add(960 * (u32::from(skip % 4) + 1));
                Packet { seq, timestamp: ts, payload: Bytes::from(vec![1; usize::from(len) + 1]), level: Some(30) }
            }
            Op::Pop => {
                pops += 1;
                match jb.pop() {
                    Playout::Frame(f) => assert!(!f.payload.is_empty()),
                    Playout::Lost { fec } => assert!(fec.is_none_or(|p| !p.is_empty())),
                    Playout::Empty => {}
                }
                assert!(jb.buffered() <= cfg.max_frames, "delay stays bounded");
                continue;
            }
        };
        let outcome = jb.push(packet);
        assert!(jb.buffered() <= cfg.max_frames, "delay stays bounded after {outcome:?}");
        let _ = matches!(outcome, PushOutcome::Accepted);
    }
    let s = jb.stats();
    assert!(s.played + s.lost <= pops, "at most one playout per pop");
    assert!(s.late + s.duplicate + s.malformed + s.bad_timestamp <= s.received);
});
