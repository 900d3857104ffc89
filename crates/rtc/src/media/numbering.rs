//! The outgoing stream's numbering, whichever path carries it: the sequence
//! number and its rollover counter, the timestamp from the mixer tick, and
//! the marker bit after a gap.

use super::connection::random_u32;
use super::error::RtcError;

/// RTP timestamp units per 20 ms frame at 48 kHz.
const SAMPLES_PER_FRAME: u32 = 960;

/// The outgoing stream's numbering, whichever path carries it: sequence
/// numbers (+1 per packet sent) and the rollover counter, timestamps from
/// the sender's clock tick (20 ms), the marker after a gap.
#[derive(Debug, Clone, Copy)]
pub(super) struct Numbering {
    /// The next packet's sequence number.
    pub(super) seq: u16,
    /// Times `seq` wrapped (RFC 3711 ROC); for the lean path's SRTP index.
    pub(super) roc: u32,
    /// Random per stream (RFC 3550 §5.1).
    pub(super) ts_offset: u32,
    /// The tick a packet sent without one is given.
    pub(super) next_tick: u64,
    /// The tick of the last packet sent.
    last_tick: Option<u64>,
}

/// One packet's header fields.
pub(super) struct PacketFields {
    pub(super) seq: u16,
    pub(super) roc: u32,
    pub(super) timestamp: u32,
    pub(super) marker: bool,
}

impl Numbering {
    pub(super) fn new() -> Result<Self, RtcError> {
        let r = random_u32()?;
        Ok(Self { seq: (r >> 16) as u16, roc: 0, ts_offset: random_u32()?, next_tick: 0, last_tick: None })
    }

    /// The fields of the packet for `tick`: timestamp = tick × 960 + offset;
    /// marker on the first packet and after any gap.
    pub(super) fn slot(&self, tick: u64) -> PacketFields {
        PacketFields {
            seq: self.seq,
            roc: self.roc,
            timestamp: (tick.wrapping_mul(u64::from(SAMPLES_PER_FRAME)) as u32).wrapping_add(self.ts_offset),
            marker: self.last_tick.is_none_or(|t| tick != t.wrapping_add(1)),
        }
    }

    /// The packet for `tick` went out.
    pub(super) fn sent(&mut self, tick: u64) {
        self.seq = self.seq.wrapping_add(1);
        if self.seq == 0 {
            self.roc = self.roc.wrapping_add(1);
        }
        self.last_tick = Some(tick);
        self.next_tick = tick.wrapping_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_follow_the_tick_and_the_marker_flags_gaps() {
        let mut n = Numbering { seq: 65_534, roc: 0, ts_offset: 1000, next_tick: 0, last_tick: None };
        let s = n.slot(10);
        assert_eq!((s.seq, s.roc, s.timestamp, s.marker), (65_534, 0, 10 * 960 + 1000, true), "first packet");
        n.sent(10);
        let s = n.slot(11);
        assert_eq!((s.seq, s.roc, s.timestamp, s.marker), (65_535, 0, 11 * 960 + 1000, false));
        n.sent(11);
        // Ticks 12..=14 unsent (DTX): the sequence number does not move.
        let s = n.slot(15);
        assert_eq!((s.seq, s.roc, s.timestamp, s.marker), (0, 1, 15 * 960 + 1000, true), "wrap and talkspurt");
        n.sent(15);
        assert_eq!(n.next_tick, 16);
        // The timestamp wraps with the tick, never panics.
        let s = n.slot(u64::MAX);
        assert_eq!(s.timestamp, (u64::MAX.wrapping_mul(960) as u32).wrapping_add(1000));
    }
}
