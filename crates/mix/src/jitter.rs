//! Per-participant jitter buffer, ordered by extended RTP sequence number.
//!
//! Packets are pushed as they arrive (any order); the mixer pops exactly one
//! [`Playout`] per 20 ms tick. The buffer:
//! - unwraps 16-bit sequence numbers into a monotonic 64-bit sequence;
//! - drops duplicates and packets that arrive after their turn (late), counting both;
//! - tells a *lost* frame (a hole with later packets already here: conceal it,
//!   with in-band FEC from the next packet when there is one) apart from an
//!   *underrun* (nothing here: the sender paused, e.g. DTX, or is late), after
//!   which it re-buffers `depth` frames before playing again;
//! - keeps at most `max_frames`, dropping the oldest, so delay stays bounded;
//! - rejects packets whose timestamp disagrees with their sequence number
//!   (backwards in time, or a jump beyond `max_timestamp_jump`), and resyncs
//!   after a run of them, or after a sequence jump far outside the window
//!   (the sender restarted its stream).

use std::collections::VecDeque;

use bytes::Bytes;

use crate::config::JitterConfig;

/// Largest Opus packet accepted (RFC 6716 allows 1275 bytes per frame; a
/// 20 ms frame is one frame).
pub const MAX_PAYLOAD_BYTES: usize = 1275;

/// A sequence jump (either way) beyond this many packets restarts the stream.
const RESYNC_SEQUENCE_JUMP: i64 = 1000;

/// Consecutive packets with absurd timestamps after which the buffer resyncs
/// to them (the sender really did restart its timeline).
const RESYNC_AFTER_BAD_TIMESTAMPS: u32 = 10;

/// One received RTP packet carrying one Opus frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// RTP sequence number.
    pub seq: u16,
    /// RTP timestamp (48 kHz clock).
    pub timestamp: u32,
    /// The Opus payload.
    pub payload: Bytes,
    /// RFC 6464 audio level (0 = loudest, 127 = silence), when the packet carried one.
    pub level: Option<u8>,
}

/// A frame ready for decoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// RTP timestamp of the frame.
    pub timestamp: u32,
    /// Opus payload.
    pub payload: Bytes,
    /// RFC 6464 level, when present.
    pub level: Option<u8>,
}

/// What the buffer hands the mixer for one tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Playout {
    /// The next frame in sequence.
    Frame(Frame),
    /// The next frame is missing but later ones are here: conceal it. `fec`
    /// is the payload of the packet that follows, which may carry in-band FEC
    /// for the missing one.
    Lost {
        /// Payload of the following packet, when it is already buffered.
        fec: Option<Bytes>,
    },
    /// Nothing to play: not started yet, or an underrun (pause or late sender).
    Empty,
}

/// What happened to a pushed packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushOutcome {
    /// Buffered for playout.
    Accepted,
    /// Its turn had already passed; dropped.
    Late,
    /// Already buffered; dropped.
    Duplicate,
    /// Empty or oversized payload, or an RFC 6464 level above 127; dropped.
    Malformed,
    /// Its timestamp contradicts its sequence number; dropped.
    BadTimestamp,
}

/// Counters of one jitter buffer since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JitterStats {
    /// Packets pushed, whatever became of them.
    pub received: u64,
    /// Frames handed out for decoding.
    pub played: u64,
    /// Frames reported lost (concealed).
    pub lost: u64,
    /// Packets dropped because their turn had passed.
    pub late: u64,
    /// Duplicate packets dropped.
    pub duplicate: u64,
    /// Malformed packets dropped.
    pub malformed: u64,
    /// Packets dropped for an absurd timestamp.
    pub bad_timestamp: u64,
    /// Buffered frames dropped to keep delay within `max_frames`.
    pub overflow: u64,
    /// Times the buffer restarted on a new sequence or timeline.
    pub resyncs: u64,
    /// Ticks with nothing to play after playout had started.
    pub underruns: u64,
    /// Frames dropped to shrink a standing queue back to the target depth
    /// (delay a burst left behind).
    pub drained: u64,
}

#[derive(Debug)]
struct Anchor {
    /// Extended sequence number of the most recent accepted packet.
    seq: i64,
    /// Its RTP timestamp.
    timestamp: u32,
}

/// A jitter buffer for one participant. See the module docs.
#[derive(Debug)]
pub struct JitterBuffer {
    cfg: JitterConfig,
    /// `slots[0]` is extended sequence `next`.
    slots: VecDeque<Option<Frame>>,
    /// Extended sequence number of `slots[0]`; `None` until the first packet.
    next: Option<i64>,
    /// Number of `Some` entries in `slots`.
    buffered: usize,
    playing: bool,
    /// No frame has been handed out since the (re)start: earlier packets may
    /// still be accepted by moving `next` back.
    fresh: bool,
    anchor: Option<Anchor>,
    bad_timestamps_in_a_row: u32,
    /// Fewest frames buffered at any pop of the current window.
    window_min: usize,
    /// Pops in the current window.
    window_pops: u32,
    /// Frames still to drop to shrink a standing queue.
    to_drain: usize,
    stats: JitterStats,
}

/// Pops over which a standing queue is measured (1 s).
const DRAIN_WINDOW: u32 = 50;

impl JitterBuffer {
    /// An empty buffer.
    pub fn new(cfg: JitterConfig) -> Self {
        Self {
            cfg,
            slots: VecDeque::with_capacity(cfg.max_frames + 1),
            next: None,
            buffered: 0,
            playing: false,
            fresh: true,
            anchor: None,
            bad_timestamps_in_a_row: 0,
            window_min: usize::MAX,
            window_pops: 0,
            to_drain: 0,
            stats: JitterStats::default(),
        }
    }

    /// Counters since creation.
    pub fn stats(&self) -> JitterStats {
        self.stats
    }

    /// Frames currently buffered.
    pub fn buffered(&self) -> usize {
        self.buffered
    }

    /// Takes one received packet.
    pub fn push(&mut self, packet: Packet) -> PushOutcome {
        self.stats.received += 1;
        if packet.payload.is_empty()
            || packet.payload.len() > MAX_PAYLOAD_BYTES
            || packet.level.is_some_and(|l| l > 127)
        {
            self.stats.malformed += 1;
            return PushOutcome::Malformed;
        }
        let Some(anchor) = &self.anchor else {
            let seq = i64::from(packet.seq);
            self.restart(packet, seq);
            return PushOutcome::Accepted;
        };
        let seq = extend(anchor.seq, packet.seq);
        let seq_step = seq - anchor.seq;
        if seq_step.abs() > RESYNC_SEQUENCE_JUMP {
            self.stats.resyncs += 1;
            self.restart(packet, seq);
            return PushOutcome::Accepted;
        }
        // Wrapping difference of timestamps, read as signed: a forward step
        // is positive even across the 2^32 wrap.
        let ts_step = packet.timestamp.wrapping_sub(anchor.timestamp) as i32;
        let contradicts = (seq_step > 0 && ts_step < 0) || (seq_step < 0 && ts_step > 0);
        if contradicts || ts_step.unsigned_abs() > self.cfg.max_timestamp_jump {
            self.stats.bad_timestamp += 1;
            self.bad_timestamps_in_a_row += 1;
            if self.bad_timestamps_in_a_row >= RESYNC_AFTER_BAD_TIMESTAMPS {
                self.stats.resyncs += 1;
                self.restart(packet, seq);
                return PushOutcome::Accepted;
            }
            return PushOutcome::BadTimestamp;
        }
        self.bad_timestamps_in_a_row = 0;
        let timestamp = packet.timestamp;
        let outcome = self.insert(seq, packet);
        if outcome == PushOutcome::Accepted && seq_step > 0 {
            self.anchor = Some(Anchor { seq, timestamp });
        }
        outcome
    }

    /// Hands out what to play this tick. Call exactly once per 20 ms tick.
    pub fn pop(&mut self) -> Playout {
        if !self.playing {
            if self.buffered < self.cfg.depth {
                return Playout::Empty;
            }
            self.playing = true;
        }
        if self.buffered == 0 {
            // Underrun: keep `next` (the late packet may still come) and
            // re-buffer before playing again.
            self.playing = false;
            self.slots.clear();
            self.stats.underruns += 1;
            return Playout::Empty;
        }
        self.fresh = false;
        self.shrink();
        let slot = self.slots.pop_front().flatten();
        if let Some(next) = &mut self.next {
            *next += 1;
        }
        match slot {
            Some(frame) => {
                self.buffered -= 1;
                self.stats.played += 1;
                Playout::Frame(frame)
            }
            None => {
                self.stats.lost += 1;
                let fec = self.slots.front().and_then(|s| s.as_ref()).map(|f| f.payload.clone());
                Playout::Lost { fec }
            }
        }
    }

    /// Keeps delay from ratcheting up. A burst (a sender or network stall,
    /// then everything at once) leaves frames queued that are played one per
    /// tick forever after: delay that never goes away. If the queue never
    /// fell to the target depth during a whole window, the frames it kept
    /// are excess: drop them, oldest first, one extra per tick (a 20 ms skip
    /// each, concealed by the decoder like a loss would be).
    fn shrink(&mut self) {
        self.window_min = self.window_min.min(self.buffered);
        self.window_pops += 1;
        if self.window_pops >= DRAIN_WINDOW {
            // At a pop, a steady stream holds `depth` frames plus the one
            // about to play.
            self.to_drain = self.window_min.saturating_sub(self.cfg.depth + 1);
            self.window_min = usize::MAX;
            self.window_pops = 0;
        }
        if self.to_drain > 0 && self.buffered > self.cfg.depth + 1 && self.slots.len() > 1 {
            self.to_drain -= 1;
            if let Some(Some(_)) = self.slots.pop_front() {
                self.buffered -= 1;
                self.stats.drained += 1;
            }
            if let Some(next) = &mut self.next {
                *next += 1;
            }
        }
    }

    fn restart(&mut self, packet: Packet, seq: i64) {
        self.slots.clear();
        self.buffered = 0;
        self.playing = false;
        self.fresh = true;
        self.bad_timestamps_in_a_row = 0;
        self.anchor = Some(Anchor { seq, timestamp: packet.timestamp });
        self.next = Some(seq);
        self.slots.push_back(Some(Frame { timestamp: packet.timestamp, payload: packet.payload, level: packet.level }));
        self.buffered = 1;
    }

    fn insert(&mut self, seq: i64, packet: Packet) -> PushOutcome {
        let Some(mut next) = self.next else {
            self.restart(packet, seq);
            return PushOutcome::Accepted;
        };
        if seq < next {
            // Before anything was played, an earlier packet (reordered at the
            // start of the stream) moves the start back, within bounds.
            let room = self.cfg.max_frames.saturating_sub(self.slots.len()) as i64;
            if self.fresh && next - seq <= room {
                for _ in seq..next {
                    self.slots.push_front(None);
                }
                next = seq;
                self.next = Some(next);
            } else {
                self.stats.late += 1;
                return PushOutcome::Late;
            }
        }
        let offset = (seq - next) as usize;
        if offset >= self.cfg.max_frames {
            // Too far ahead for the window: drop the oldest so delay stays bounded.
            let excess = offset + 1 - self.cfg.max_frames;
            for _ in 0..excess {
                if let Some(Some(_)) = self.slots.pop_front() {
                    self.buffered -= 1;
                    self.stats.overflow += 1;
                }
            }
            next += excess as i64;
            self.next = Some(next);
            self.fresh = false;
        }
        let offset = (seq - next) as usize;
        while self.slots.len() <= offset {
            self.slots.push_back(None);
        }
        let slot = &mut self.slots[offset];
        if slot.is_some() {
            self.stats.duplicate += 1;
            return PushOutcome::Duplicate;
        }
        *slot = Some(Frame { timestamp: packet.timestamp, payload: packet.payload, level: packet.level });
        self.buffered += 1;
        PushOutcome::Accepted
    }
}

/// Extends a 16-bit sequence number to the 64-bit one nearest `reference`.
fn extend(reference: i64, seq: u16) -> i64 {
    // Reading the 16-bit difference as signed picks the nearest candidate.
    let step = seq.wrapping_sub(reference as u16) as i16;
    reference + i64::from(step)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(seq: u16, ts: u32) -> Packet {
        Packet { seq, timestamp: ts, payload: Bytes::from(vec![seq as u8, 1]), level: Some(30) }
    }

    fn cfg(depth: usize) -> JitterConfig {
        JitterConfig { depth, ..Default::default() }
    }

    /// The sequence numbers the next `ticks` pops yield (`None` = lost, `-1` = empty).
    fn drain(jb: &mut JitterBuffer, ticks: usize) -> Vec<i32> {
        (0..ticks)
            .map(|_| match jb.pop() {
                Playout::Frame(f) => i32::from(f.payload[0]),
                Playout::Lost { .. } => -2,
                Playout::Empty => -1,
            })
            .collect()
    }

    #[test]
    fn in_order_stream_plays_after_prefetch() {
        let mut jb = JitterBuffer::new(cfg(2));
        jb.push(pkt(10, 0));
        assert_eq!(jb.pop(), Playout::Empty, "waits for depth");
        jb.push(pkt(11, 960));
        assert_eq!(drain(&mut jb, 3), vec![10, 11, -1]);
        assert_eq!(jb.stats().underruns, 1);
    }

    #[test]
    fn a_standing_queue_left_by_a_burst_is_drained_to_the_target() {
        let mut jb = JitterBuffer::new(cfg(2));
        let mut seq = 0u16;
        let mut push = |jb: &mut JitterBuffer, n: usize| {
            for _ in 0..n {
                jb.push(pkt(seq, u32::from(seq) * 960));
                seq += 1;
            }
        };
        push(&mut jb, 2);
        // A burst: ten frames at once, then one per tick for 3 s.
        push(&mut jb, 10);
        let mut played = Vec::new();
        for _ in 0..150 {
            push(&mut jb, 1);
            if let Playout::Frame(f) = jb.pop() {
                played.push(f.payload[0]);
            }
        }
        assert!(jb.buffered() <= 3, "delay back to the target: {} frames buffered", jb.buffered());
        assert_eq!(jb.stats().drained, 10, "the burst's excess, and only it, was dropped");
        assert_eq!(jb.stats().lost, 0);
        assert!(played.windows(2).all(|w| w[1] > w[0]), "still in order");
        // A steady stream at the target is never touched.
        let before = jb.stats().drained;
        for _ in 0..200 {
            push(&mut jb, 1);
            jb.pop();
        }
        assert_eq!(jb.stats().drained, before);
    }

    #[test]
    fn reordering_is_undone() {
        let mut jb = JitterBuffer::new(cfg(3));
        for s in [5u16, 3, 4, 7, 6] {
            assert_eq!(jb.push(pkt(s, u32::from(s) * 960)), PushOutcome::Accepted, "seq {s}");
        }
        assert_eq!(drain(&mut jb, 5), vec![3, 4, 5, 6, 7]);
        assert_eq!(jb.stats().lost, 0);
    }

    #[test]
    fn duplicates_are_dropped_and_counted() {
        let mut jb = JitterBuffer::new(cfg(1));
        jb.push(pkt(1, 960));
        assert_eq!(jb.push(pkt(1, 960)), PushOutcome::Duplicate);
        jb.push(pkt(2, 1920));
        assert_eq!(jb.push(pkt(2, 1920)), PushOutcome::Duplicate);
        assert_eq!(drain(&mut jb, 2), vec![1, 2]);
        assert_eq!(jb.stats().duplicate, 2);
    }

    #[test]
    fn loss_is_concealed_with_fec_from_the_next_packet() {
        let mut jb = JitterBuffer::new(cfg(1));
        jb.push(pkt(1, 960));
        jb.push(pkt(3, 2880));
        assert!(matches!(jb.pop(), Playout::Frame(_)));
        match jb.pop() {
            Playout::Lost { fec: Some(p) } => assert_eq!(p[0], 3, "FEC source is packet 3"),
            other => panic!("expected a loss with FEC, got {other:?}"),
        }
        assert_eq!(drain(&mut jb, 1), vec![3]);
        assert_eq!(jb.stats().lost, 1);
    }

    #[test]
    fn loss_without_following_packet_has_no_fec() {
        let mut jb = JitterBuffer::new(cfg(1));
        jb.push(pkt(1, 960));
        jb.push(pkt(4, 3840));
        assert_eq!(drain(&mut jb, 1), vec![1]);
        assert_eq!(jb.pop(), Playout::Lost { fec: None }, "2 lost and 3 missing too");
        assert!(matches!(jb.pop(), Playout::Lost { fec: Some(_) }));
        assert_eq!(drain(&mut jb, 1), vec![4]);
    }

    #[test]
    fn late_packets_are_dropped_and_counted() {
        let mut jb = JitterBuffer::new(cfg(1));
        jb.push(pkt(1, 960));
        jb.push(pkt(3, 2880));
        assert_eq!(drain(&mut jb, 2), vec![1, -2]);
        assert_eq!(jb.push(pkt(2, 1920)), PushOutcome::Late);
        assert_eq!(jb.stats().late, 1);
        assert_eq!(drain(&mut jb, 1), vec![3]);
    }

    #[test]
    fn a_late_packet_after_an_underrun_still_plays() {
        let mut jb = JitterBuffer::new(cfg(1));
        jb.push(pkt(1, 960));
        assert_eq!(drain(&mut jb, 2), vec![1, -1]);
        assert_eq!(jb.push(pkt(2, 1920)), PushOutcome::Accepted);
        assert_eq!(drain(&mut jb, 1), vec![2]);
        assert_eq!(jb.stats().lost, 0);
    }

    #[test]
    fn sequence_wraps_around() {
        let mut jb = JitterBuffer::new(cfg(2));
        let start = 65_533u16;
        let mut ts = 4_294_966_000u32; // the timestamp wraps too
        let mut seqs = Vec::new();
        for i in 0..6u16 {
            let s = start.wrapping_add(i);
            seqs.push(s);
            assert_eq!(jb.push(Packet { payload: Bytes::from(vec![i as u8]), ..pkt(s, ts) }), PushOutcome::Accepted);
            ts = ts.wrapping_add(960);
        }
        assert_eq!(drain(&mut jb, 6), vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(jb.stats().lost + jb.stats().late + jb.stats().resyncs, 0);
    }

    #[test]
    fn delay_is_bounded_by_dropping_the_oldest() {
        let mut jb = JitterBuffer::new(JitterConfig { depth: 1, max_frames: 4, ..Default::default() });
        for s in 0..10u16 {
            jb.push(pkt(s, u32::from(s) * 960));
        }
        assert!(jb.buffered() <= 4);
        assert_eq!(drain(&mut jb, 4), vec![6, 7, 8, 9]);
        assert_eq!(jb.stats().overflow, 6);
    }

    #[test]
    fn absurd_timestamps_are_counted_and_skipped_then_resynced() {
        let mut jb = JitterBuffer::new(cfg(1));
        jb.push(pkt(1, 960));
        assert_eq!(jb.push(pkt(2, 0)), PushOutcome::BadTimestamp, "backwards in time");
        assert_eq!(jb.push(pkt(3, 2_000_000_000)), PushOutcome::BadTimestamp, "hours ahead");
        assert_eq!(jb.push(pkt(4, 3840)), PushOutcome::Accepted);
        assert_eq!(jb.stats().bad_timestamp, 2);
        // A sender that really moved its timeline is followed after a run of such packets.
        let mut outcome = PushOutcome::BadTimestamp;
        for i in 0..RESYNC_AFTER_BAD_TIMESTAMPS as u16 {
            outcome = jb.push(pkt(5 + i, 3_000_000_000 + u32::from(i) * 960));
        }
        assert_eq!(outcome, PushOutcome::Accepted);
        assert_eq!(jb.stats().resyncs, 1);
    }

    #[test]
    fn a_far_sequence_jump_restarts_the_stream() {
        let mut jb = JitterBuffer::new(cfg(1));
        jb.push(pkt(1, 960));
        assert_eq!(jb.push(pkt(30_000, 1920)), PushOutcome::Accepted);
        assert_eq!(jb.stats().resyncs, 1);
        assert!(matches!(jb.pop(), Playout::Frame(f) if f.timestamp == 1920));
    }

    #[test]
    fn malformed_packets_are_rejected() {
        let mut jb = JitterBuffer::new(cfg(1));
        assert_eq!(jb.push(Packet { payload: Bytes::new(), ..pkt(1, 0) }), PushOutcome::Malformed);
        let big = Bytes::from(vec![0u8; MAX_PAYLOAD_BYTES + 1]);
        assert_eq!(jb.push(Packet { payload: big, ..pkt(1, 0) }), PushOutcome::Malformed);
        assert_eq!(jb.push(Packet { level: Some(200), ..pkt(1, 0) }), PushOutcome::Malformed);
        assert_eq!(jb.stats().malformed, 3);
        assert_eq!(jb.pop(), Playout::Empty);
    }

    #[test]
    fn extend_picks_the_nearest_sequence() {
        assert_eq!(extend(65_535, 0), 65_536);
        assert_eq!(extend(65_536, 65_535), 65_535);
        assert_eq!(extend(100, 90), 90);
        assert_eq!(extend(0, 65_535), -1);
    }
}
