//! What one received stream looked like: loss, RFC 3550 jitter, drift delay,
//! and the E-model MOS, exactly as `docs/load-testing.md` ("Quality definitions")
//! defines them. Pure arithmetic: arrival times are passed in.

use std::time::Instant;

/// RTP clock rate of Opus: timestamp units per second.
pub const RTP_CLOCK_HZ: f64 = 48_000.0;

/// Packets this far behind the highest sequence number seen still count as
/// received (late, reordered); older ones stay lost.
pub const REORDER_WINDOW: u16 = 64;

/// Gap-based loss over a 16-bit RTP sequence number space that wraps.
///
/// The first packet fixes the start; `expected` is the span from it to the
/// highest (extended) sequence number seen; `lost = expected − received`
/// where duplicates and packets older than [`REORDER_WINDOW`] are not counted
/// as received. A packet that arrives late but inside the window fills its
/// gap (it was reordered, not lost).
#[derive(Debug, Clone, Default)]
pub struct LossTracker {
    /// Extended (32-bit, wrap-counted) highest sequence number seen.
    highest: Option<u64>,
    first: u64,
    /// Packets expected of the streams before the last [`LossTracker::rebase`].
    past_expected: u64,
    /// Bit i set: `highest − i` was received (i < 64).
    seen: u64,
    received: u64,
    duplicates: u64,
    too_late: u64,
}

impl LossTracker {
    /// Takes one packet's sequence number.
    pub fn on_packet(&mut self, seq: u16) {
        let Some(highest) = self.highest else {
            self.highest = Some(u64::from(seq) + (1 << 16));
            self.first = u64::from(seq) + (1 << 16);
            self.seen = 1;
            self.received += 1;
            return;
        };
        // Signed distance from the highest, modulo 2^16.
        let delta = seq.wrapping_sub(highest as u16) as i16;
        if delta > 0 {
            let ext = highest + delta as u64;
            let shift = delta as u64;
            self.seen = if shift >= 64 { 0 } else { self.seen << shift };
            self.seen |= 1;
            self.highest = Some(ext);
            self.received += 1;
        } else {
            let back = u64::from(delta.unsigned_abs());
            if back >= u64::from(REORDER_WINDOW) || highest - back < self.first {
                self.too_late += 1;
            } else if self.seen & (1 << back) != 0 {
                self.duplicates += 1;
            } else {
                self.seen |= 1 << back;
                self.received += 1;
            }
        }
    }

    /// Packets the span from the first to the highest sequence number holds
    /// (summed over the streams before a [`LossTracker::rebase`]).
    pub fn expected(&self) -> u64 {
        self.past_expected + self.highest.map_or(0, |h| h - self.first + 1)
    }

    /// A new stream begins (another SSRC, its own sequence numbers: the
    /// client moved to another node): what was counted stays, and the next
    /// packet starts a new span, so the jump between the two streams is not loss.
    pub fn rebase(&mut self) {
        self.past_expected = self.expected();
        self.highest = None;
        self.seen = 0;
    }

    /// Distinct packets received in time (within the reorder window).
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Packets never received (or only too late).
    pub fn lost(&self) -> u64 {
        self.expected().saturating_sub(self.received)
    }

    /// Lost packets in percent of expected (0 when nothing was expected).
    pub fn loss_percent(&self) -> f64 {
        let expected = self.expected();
        if expected == 0 { 0.0 } else { 100.0 * self.lost() as f64 / expected as f64 }
    }

    /// Copies of packets already received.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Packets that arrived after they had left the reorder window.
    pub fn too_late(&self) -> u64 {
        self.too_late
    }
}

/// RFC 3550 §6.4.1 interarrival jitter: for consecutive packets i, j,
/// `D = (Rj − Ri) − (Sj − Si)` in RTP units and `J += (|D| − J) / 16`.
#[derive(Debug, Clone, Default)]
pub struct JitterEstimator {
    last: Option<(Instant, u32)>,
    /// In RTP timestamp units.
    jitter: f64,
}

impl JitterEstimator {
    /// Takes one packet: its arrival instant and RTP timestamp.
    pub fn on_packet(&mut self, arrival: Instant, timestamp: u32) {
        if let Some((r_i, s_i)) = self.last {
            let r = signed_secs(arrival, r_i) * RTP_CLOCK_HZ;
            let s = f64::from(timestamp.wrapping_sub(s_i) as i32);
            let d = r - s;
            self.jitter += (d.abs() - self.jitter) / 16.0;
        }
        self.last = Some((arrival, timestamp));
    }

    /// A new stream begins: the next packet is compared with none (the
    /// jitter so far stays).
    pub fn rebase(&mut self) {
        self.last = None;
    }

    /// The jitter in milliseconds.
    pub fn jitter_ms(&self) -> f64 {
        self.jitter / RTP_CLOCK_HZ * 1000.0
    }
}

/// `a − b` in seconds, negative when `a` is earlier.
fn signed_secs(a: Instant, b: Instant) -> f64 {
    if a >= b { (a - b).as_secs_f64() } else { -(b - a).as_secs_f64() }
}

/// Drift delay: wall time since the first packet minus the RTP timestamp
/// progress since it. It grows when a stream falls behind real time (the
/// sender skips or stretches ticks under overload); on a healthy stream it
/// stays near zero, moving by the jitter.
#[derive(Debug, Clone, Default)]
pub struct DriftTracker {
    first: Option<(Instant, u32)>,
    /// Extended timestamp progress since the first packet, in RTP units.
    progress: i64,
    /// Progress of the streams before the last [`DriftTracker::rebase`].
    past_progress: i64,
    last_ts: u32,
    current_ms: f64,
    max_ms: f64,
}

impl DriftTracker {
    /// Takes one packet: its arrival instant and RTP timestamp.
    pub fn on_packet(&mut self, arrival: Instant, timestamp: u32) {
        let Some((t0, _)) = self.first else {
            self.first = Some((arrival, timestamp));
            self.last_ts = timestamp;
            return;
        };
        self.progress += i64::from(timestamp.wrapping_sub(self.last_ts) as i32);
        self.last_ts = timestamp;
        let wall_ms = signed_secs(arrival, t0) * 1000.0;
        let media_ms = self.progress as f64 / RTP_CLOCK_HZ * 1000.0;
        self.current_ms = wall_ms - media_ms;
        self.max_ms = self.max_ms.max(self.current_ms);
    }

    /// The drift at the latest packet, in ms.
    pub fn current_ms(&self) -> f64 {
        self.current_ms
    }

    /// RTP timestamp progress since the first packet, in 20 ms frames
    /// (summed over the streams before a [`DriftTracker::rebase`]).
    pub fn progress_frames(&self) -> u64 {
        ((self.past_progress.max(0) + self.progress.max(0)) / 960) as u64
    }

    /// A new stream begins (its own timestamp base): drift is measured
    /// afresh from its first packet; the progress so far and the largest
    /// drift seen stay.
    pub fn rebase(&mut self) {
        self.past_progress += self.progress.max(0);
        self.progress = 0;
        self.first = None;
        self.current_ms = 0.0;
    }

    /// The largest drift seen, in ms.
    pub fn max_ms(&self) -> f64 {
        self.max_ms
    }
}

/// Mean opinion score by the simplified ITU-T G.107 E-model of `docs/load-testing.md`:
///
/// ```text
/// EL = one_way_ms + 2·jitter_ms + 10
/// R  = 93.2 − EL/40            if EL < 160
///    = 93.2 − (EL − 120)/10    otherwise
/// R −= 2.5 · loss_percent;  R clamped to 0..100
/// MOS = 1 + 0.035·R + 7e-6 · R · (R − 60) · (100 − R)
/// ```
///
/// `one_way_ms`: one-way (mouth-to-ear) delay in milliseconds; `jitter_ms`:
/// RFC 3550 jitter in milliseconds; `loss_percent`: 0 to 100. Best ≈ 4.40.
pub fn mos(one_way_ms: f64, jitter_ms: f64, loss_percent: f64) -> f64 {
    let effective_latency_ms = one_way_ms.max(0.0) + 2.0 * jitter_ms.max(0.0) + 10.0;
    let mut r = if effective_latency_ms < 160.0 {
        93.2 - effective_latency_ms / 40.0
    } else {
        93.2 - (effective_latency_ms - 120.0) / 10.0
    };
    r -= 2.5 * loss_percent.clamp(0.0, 100.0);
    let r = r.clamp(0.0, 100.0);
    1.0 + 0.035 * r + 7e-6 * r * (r - 60.0) * (100.0 - r)
}

/// Everything measured about one received stream.
#[derive(Debug, Clone, Default)]
pub struct StreamQuality {
    /// Loss.
    pub loss: LossTracker,
    /// Jitter.
    pub jitter: JitterEstimator,
    /// Drift delay.
    pub drift: DriftTracker,
    /// When the first packet arrived.
    pub first_arrival: Option<Instant>,
    /// When the latest packet arrived.
    pub last_arrival: Option<Instant>,
}

impl StreamQuality {
    /// Takes one received packet.
    pub fn on_packet(&mut self, arrival: Instant, seq: u16, timestamp: u32) {
        self.first_arrival.get_or_insert(arrival);
        self.last_arrival = Some(arrival);
        self.loss.on_packet(seq);
        self.jitter.on_packet(arrival, timestamp);
        self.drift.on_packet(arrival, timestamp);
    }

    /// The client's call moved (a new peer, a new stream from another node):
    /// sequence, jitter and drift baselines start again with the next
    /// packet, so the move counts neither as loss nor as a jump in jitter
    /// or drift; everything counted so far stays.
    pub fn rebase(&mut self) {
        self.loss.rebase();
        self.jitter.rebase();
        self.drift.rebase();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn tracker(seqs: &[u16]) -> LossTracker {
        let mut t = LossTracker::default();
        for &s in seqs {
            t.on_packet(s);
        }
        t
    }

    #[test]
    fn no_loss_in_order() {
        let t = tracker(&(0..100).collect::<Vec<_>>());
        assert_eq!((t.expected(), t.received(), t.lost()), (100, 100, 0));
    }

    #[test]
    fn gaps_are_lost() {
        let t = tracker(&[10, 11, 13, 14, 17]);
        assert_eq!(t.expected(), 8);
        assert_eq!(t.lost(), 3);
        assert!((t.loss_percent() - 37.5).abs() < 1e-9);
    }

    #[test]
    fn reordering_inside_the_window_is_not_loss() {
        let t = tracker(&[1, 2, 4, 5, 3, 6, 9, 8, 7, 10]);
        assert_eq!((t.expected(), t.lost(), t.duplicates()), (10, 0, 0));
    }

    #[test]
    fn duplicates_do_not_hide_loss() {
        let t = tracker(&[1, 2, 2, 4, 4, 5]);
        assert_eq!((t.expected(), t.received(), t.lost(), t.duplicates()), (5, 4, 1, 2));
    }

    #[test]
    fn too_late_stays_lost() {
        let mut seqs: Vec<u16> = (0..200).filter(|&s| s != 50).collect();
        seqs.push(50); // 149 behind: outside the window
        let t = tracker(&seqs);
        assert_eq!((t.expected(), t.lost(), t.too_late()), (200, 1, 1));
    }

    #[test]
    fn wrap_around() {
        let mut seqs: Vec<u16> = (65_500..=65_535).collect();
        seqs.extend(0..40u16);
        seqs.retain(|&s| s != 2);
        // One reordered across the wrap: 65 535 arrives after 0.
        let i = seqs.iter().position(|&s| s == 65_535).expect("present");
        seqs.swap(i, i + 1);
        let t = tracker(&seqs);
        assert_eq!(t.expected(), 76);
        assert_eq!(t.lost(), 1);
        assert_eq!(t.duplicates(), 0);
    }

    #[test]
    fn a_packet_before_the_first_is_not_received() {
        // Nothing before the first packet was expected.
        let t = tracker(&[100, 101, 99]);
        assert_eq!((t.expected(), t.received(), t.too_late()), (2, 2, 1));
    }

    #[test]
    fn jitter_is_zero_on_a_perfect_clock() {
        let t0 = Instant::now();
        let mut j = JitterEstimator::default();
        for k in 0..100u32 {
            j.on_packet(
                t0 + Duration::from_millis(20 * u64::from(k)),
                k.wrapping_mul(960).wrapping_add(u32::MAX - 5000),
            );
        }
        assert!(j.jitter_ms() < 1e-6, "{}", j.jitter_ms());
    }

    #[test]
    fn jitter_follows_rfc_3550() {
        // Arrivals alternate 15 ms and 25 ms apart while the timestamps step
        // 20 ms: |D| = 5 ms every packet, so J converges to 5 ms; after n
        // packets J = 5 · (1 − (15/16)^n) exactly.
        let t0 = Instant::now();
        let mut j = JitterEstimator::default();
        let mut at = t0;
        for k in 0..=200u32 {
            if k > 0 {
                at += Duration::from_millis(if k % 2 == 1 { 15 } else { 25 });
            }
            j.on_packet(at, k * 960);
        }
        let expected = 5.0 * (1.0 - (15.0f64 / 16.0).powi(200));
        assert!((j.jitter_ms() - expected).abs() < 1e-6, "{} vs {expected}", j.jitter_ms());

        let mut j = JitterEstimator::default();
        j.on_packet(t0, 0);
        j.on_packet(t0 + Duration::from_millis(36), 960);
        // D = 16 ms: J = 16/16 = 1 ms.
        assert!((j.jitter_ms() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn drift_measures_falling_behind() {
        let t0 = Instant::now();
        let mut d = DriftTracker::default();
        // 50 packets on time, then 50 each 22 ms apart: 2 ms behind per packet.
        for k in 0..50u32 {
            d.on_packet(t0 + Duration::from_millis(20 * u64::from(k)), k * 960);
        }
        assert!(d.current_ms().abs() < 1e-6);
        let base = t0 + Duration::from_millis(20 * 49);
        for k in 1..=50u32 {
            d.on_packet(base + Duration::from_millis(22 * u64::from(k)), (49 + k) * 960);
        }
        assert!((d.current_ms() - 100.0).abs() < 1e-6, "{}", d.current_ms());
        assert!((d.max_ms() - 100.0).abs() < 1e-6);
    }

    #[test]
    fn a_moved_stream_is_neither_loss_nor_jitter() {
        let t0 = Instant::now();
        let mut q = StreamQuality::default();
        for k in 0..50u16 {
            q.on_packet(t0 + Duration::from_millis(20 * u64::from(k)), 1000 + k, 5_000 + 960 * u32::from(k));
        }
        q.rebase();
        // Another node: other sequence numbers and timestamps, 300 ms later.
        let t1 = t0 + Duration::from_millis(20 * 49 + 300);
        for k in 0..50u16 {
            q.on_packet(t1 + Duration::from_millis(20 * u64::from(k)), 20_000 + k, 9_000_000 + 960 * u32::from(k));
        }
        assert_eq!((q.loss.expected(), q.loss.received(), q.loss.lost()), (100, 100, 0));
        assert!(q.jitter.jitter_ms() < 1e-6, "{}", q.jitter.jitter_ms());
        assert!(q.drift.current_ms().abs() < 1e-6 && q.drift.max_ms() < 1e-6, "{}", q.drift.max_ms());
        assert_eq!(q.drift.progress_frames(), 98, "49 + 49 frames of progress");
        // Without the rebase the jump between the streams is 19,000-odd lost frames.
        let mut raw = StreamQuality::default();
        raw.on_packet(t0, 1000, 5_000);
        raw.on_packet(t1, 20_000, 9_000_000);
        assert!(raw.loss.lost() > 10_000);
    }

    #[test]
    fn mos_at_known_points() {
        // EL = 10: R = 92.95.
        let r: f64 = 92.95;
        let best = 1.0 + 0.035 * r + 7e-6 * r * (r - 60.0) * (100.0 - r);
        assert!((mos(0.0, 0.0, 0.0) - best).abs() < 1e-9);
        assert!((mos(0.0, 0.0, 0.0) - 4.4045).abs() < 1e-3);
        // EL = 150 (< 160): R = 93.2 − 3.75 = 89.45.
        let r: f64 = 89.45;
        let m = 1.0 + 0.035 * r + 7e-6 * r * (r - 60.0) * (100.0 - r);
        assert!((mos(120.0, 10.0, 0.0) - m).abs() < 1e-9);
        // EL = 320: R = 93.2 − 20 = 73.2.
        let r: f64 = 73.2;
        let m = 1.0 + 0.035 * r + 7e-6 * r * (r - 60.0) * (100.0 - r);
        assert!((mos(300.0, 5.0, 0.0) - m).abs() < 1e-9);
        // Loss: 2 % costs 5 R points from EL = 50 (R = 91.95 − 5).
        let r: f64 = 93.2 - 50.0 / 40.0 - 5.0;
        let m = 1.0 + 0.035 * r + 7e-6 * r * (r - 60.0) * (100.0 - r);
        assert!((mos(40.0, 0.0, 2.0) - m).abs() < 1e-9);
        // Total loss clamps R to 0: MOS 1.
        assert!((mos(0.0, 0.0, 100.0) - 1.0).abs() < 1e-9);
        // Monotone in delay.
        assert!(mos(50.0, 0.0, 0.0) > mos(200.0, 0.0, 0.0));
    }
}
