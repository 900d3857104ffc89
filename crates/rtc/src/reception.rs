//! What a receiver reports of one remote RTP stream (RFC 3550 §6.4.1 and
//! Appendix A.3, A.8): packets expected and lost, the extended highest
//! sequence number, interarrival jitter, and the last sender report's time.
//!
//! Used where tutti, not webrtc-rs, reads a stream (the lean receive path):
//! webrtc-rs's receiver-report interceptor then never sees its packets, so
//! the reception report block is built here and sent with our RTCP.

use std::time::Instant;

use rtc::rtcp::reception_report::ReceptionReport;

/// Sequence numbers further ahead than this are a restart of the stream,
/// not loss (RFC 3550 A.1's MAX_DROPOUT).
const MAX_DROPOUT: u16 = 3000;
/// Sequence numbers this far behind are a restart too (A.1's MAX_MISORDER).
const MAX_MISORDER: u16 = 100;

/// Receive statistics of one SSRC.
#[derive(Debug, Clone)]
pub(crate) struct Reception {
    ssrc: u32,
    clock_rate: f64,
    /// Set at the first packet.
    started: Option<Started>,
    /// The middle 32 bits of the last sender report's NTP time, and when it arrived.
    last_sr: Option<(u32, Instant)>,
}

#[derive(Debug, Clone, Copy)]
struct Started {
    base_seq: u32,
    max_seq: u16,
    /// Sequence number wraps, shifted (A.1's `cycles`).
    cycles: u32,
    received: u32,
    expected_prior: u32,
    received_prior: u32,
    /// The last packet's relative transit time, in timestamp units.
    transit: f64,
    /// Interarrival jitter in timestamp units (A.8).
    jitter: f64,
    /// The instant timestamps are measured from.
    epoch: Instant,
}

impl Reception {
    /// Statistics of `ssrc`, whose RTP clock runs at `clock_rate` Hz.
    pub(crate) fn new(ssrc: u32, clock_rate: u32) -> Self {
        Self { ssrc, clock_rate: f64::from(clock_rate.max(1)), started: None, last_sr: None }
    }

    /// The stream reported on.
    pub(crate) fn ssrc(&self) -> u32 {
        self.ssrc
    }

    /// Counts an authenticated packet that arrived at `at`.
    pub(crate) fn on_packet(&mut self, seq: u16, timestamp: u32, at: Instant) {
        let Some(s) = &mut self.started else {
            self.started = Some(Started {
                base_seq: u32::from(seq),
                max_seq: seq,
                cycles: 0,
                received: 1,
                expected_prior: 0,
                received_prior: 0,
                transit: -f64::from(timestamp),
                jitter: 0.0,
                epoch: at,
            });
            return;
        };
        let delta = seq.wrapping_sub(s.max_seq);
        if delta == 0 {
            return; // a duplicate (SRTP replay protection drops most)
        } else if delta < MAX_DROPOUT {
            if seq < s.max_seq {
                s.cycles = s.cycles.wrapping_add(1 << 16);
            }
            s.max_seq = seq;
        } else if delta <= u16::MAX - MAX_MISORDER {
            // A jump: the sender restarted its numbering. Start again from here.
            s.base_seq = u32::from(seq);
            s.max_seq = seq;
            s.cycles = 0;
            s.received = 0;
            s.expected_prior = 0;
            s.received_prior = 0;
        }
        // else: reordered, within MAX_MISORDER behind; counted, max unchanged.
        s.received = s.received.wrapping_add(1);
        // A.8: the difference in relative transit times, smoothed by 1/16.
        let transit = arrival_units(s.epoch, at, self.clock_rate) - f64::from(timestamp);
        let d = (transit - s.transit).abs();
        s.transit = transit;
        // Timestamps wrap at 2^32: a difference that large is a wrap, not jitter.
        if d < f64::from(u32::MAX / 2) {
            s.jitter += (d - s.jitter) / 16.0;
        }
    }

    /// Notes the remote side's sender report (its NTP time), received at `at`.
    pub(crate) fn on_sender_report(&mut self, ntp_time: u64, at: Instant) {
        self.last_sr = Some(((ntp_time >> 16) as u32, at));
    }

    /// The report block as of `now`, or `None` before the first packet. Each
    /// call starts a new interval for the fraction lost.
    pub(crate) fn report(&mut self, now: Instant) -> Option<ReceptionReport> {
        let s = self.started.as_mut()?;
        let extended_max = s.cycles.wrapping_add(u32::from(s.max_seq));
        let expected = extended_max.wrapping_sub(s.base_seq).wrapping_add(1);
        // A.3: cumulative loss is 24 bits, signed (duplicates can make it negative).
        let lost = i64::from(expected) - i64::from(s.received);
        let total_lost = lost.clamp(-0x80_0000, 0x7F_FFFF) as i32 as u32 & 0xFF_FFFF;
        let expected_interval = expected.wrapping_sub(s.expected_prior);
        let received_interval = s.received.wrapping_sub(s.received_prior);
        s.expected_prior = expected;
        s.received_prior = s.received;
        let lost_interval = i64::from(expected_interval) - i64::from(received_interval);
        let fraction_lost = if expected_interval == 0 || lost_interval <= 0 {
            0
        } else {
            ((lost_interval << 8) / i64::from(expected_interval)).min(255) as u8
        };
        let (last_sender_report, delay) = match self.last_sr {
            Some((lsr, at)) => (lsr, (now.saturating_duration_since(at).as_secs_f64() * 65536.0) as u32),
            None => (0, 0),
        };
        Some(ReceptionReport {
            ssrc: self.ssrc,
            fraction_lost,
            total_lost,
            last_sequence_number: extended_max,
            jitter: s.jitter as u32,
            last_sender_report,
            delay,
        })
    }
}

/// `at` in RTP timestamp units since `epoch`.
fn arrival_units(epoch: Instant, at: Instant, clock_rate: f64) -> f64 {
    at.saturating_duration_since(epoch).as_secs_f64() * clock_rate
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MS20: Duration = Duration::from_millis(20);

    #[test]
    fn counts_loss_and_the_extended_sequence_across_a_wrap() {
        let t0 = Instant::now();
        let mut r = Reception::new(7, 48_000);
        assert!(r.report(t0).is_none(), "nothing received, nothing to report");
        // 65530 .. 65535, 0 .. 9 with 3 and 65533 lost.
        let mut n = 0;
        for seq in (65530u16..=65535).chain(0..10) {
            n += 1;
            if seq == 3 || seq == 65533 {
                continue;
            }
            r.on_packet(seq, n * 960, t0 + MS20 * n);
        }
        let rr = r.report(t0 + MS20 * 20).expect("a report");
        assert_eq!(rr.ssrc, 7);
        assert_eq!(rr.last_sequence_number, (1 << 16) | 9, "one wrap, then 9");
        assert_eq!(rr.total_lost, 2);
        assert_eq!(rr.fraction_lost, (2 * 256 / 16) as u8);
        assert_eq!(rr.jitter, 0, "on time to the sample: no jitter");
        // The next interval: nothing lost.
        for seq in 10u16..20 {
            n += 1;
            r.on_packet(seq, n * 960, t0 + MS20 * n);
        }
        let rr = r.report(t0 + MS20 * 40).expect("a report");
        assert_eq!((rr.total_lost, rr.fraction_lost), (2, 0));
    }

    #[test]
    fn reordered_and_duplicate_packets_are_not_loss() {
        let t0 = Instant::now();
        let mut r = Reception::new(1, 48_000);
        for (i, seq) in [100u16, 102, 101, 103, 103, 104].into_iter().enumerate() {
            r.on_packet(seq, u32::from(seq) * 960, t0 + MS20 * i as u32);
        }
        let rr = r.report(t0).expect("a report");
        assert_eq!(rr.last_sequence_number, 104);
        assert_eq!(rr.total_lost, 0);
    }

    #[test]
    fn jitter_follows_late_arrivals() {
        let t0 = Instant::now();
        let mut r = Reception::new(1, 48_000);
        for i in 0..200u32 {
            // Every other packet 10 ms late: |D| = 480 units each time.
            let late = if i % 2 == 1 { Duration::from_millis(10) } else { Duration::ZERO };
            r.on_packet(i as u16, i * 960, t0 + MS20 * i + late);
        }
        let jitter = r.report(t0).expect("a report").jitter;
        assert!((470..=480).contains(&jitter), "jitter {jitter} converges on 480");
    }

    #[test]
    fn the_last_sender_report_and_its_delay() {
        let t0 = Instant::now();
        let mut r = Reception::new(1, 48_000);
        r.on_packet(1, 0, t0);
        r.on_sender_report(0x1122_3344_5566_7788, t0);
        let rr = r.report(t0 + Duration::from_millis(500)).expect("a report");
        assert_eq!(rr.last_sender_report, 0x3344_5566);
        assert_eq!(rr.delay, 32768, "half a second in 1/65536 s");
    }

    #[test]
    fn a_jump_restarts_the_count() {
        let t0 = Instant::now();
        let mut r = Reception::new(1, 48_000);
        for seq in 0u16..10 {
            r.on_packet(seq, 0, t0);
        }
        for seq in 30_000u16..30_010 {
            r.on_packet(seq, 0, t0);
        }
        let rr = r.report(t0).expect("a report");
        assert_eq!(rr.total_lost, 0, "a restarted sender is not 30,000 lost packets");
        assert_eq!(rr.last_sequence_number, 30_009);
    }
}
