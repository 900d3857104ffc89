//! RFC 4733 keypad events on a plain RTP leg (a SIP call's): the keys a
//! caller presses, read from its telephone-event packets, and the keys
//! the API sends it, written as such packets on the mix's clock.
//!
//! ```text
//! caller ─► telephone-event packets (a few while held, 3 with the end bit) ─► KeysIn: one key per event
//! API    ─► PlainHandle::send_keys ─► KeysOut: per key 5 ticks (100 ms) of event packets, the end
//!           packet 3 times, 5 ticks of pause ─► sent beside the mix, same SSRC and sequence
//! ```
//!
//! No I/O and no clock here: the `rtp-in` thread feeds packets and ticks.

use std::collections::VecDeque;
use std::time::Duration;

use tutti_rtc::plain::KeyEvent;

/// Keys one request may send at most.
pub(crate) const MAX_KEYS: usize = 32;
/// Ticks (20 ms) a sent key lasts.
const KEY_TICKS: u16 = 5;
/// Ticks of pause after a sent key.
const GAP_TICKS: u16 = 5;
/// How long one sent key takes, pause included.
pub(crate) const KEY_PERIOD: Duration = Duration::from_millis(20 * (KEY_TICKS + GAP_TICKS) as u64);
/// The end packet is sent this many times (RFC 4733 §2.5.1.4).
pub(crate) const END_REPEATS: usize = 3;
/// Volume of sent keys: -10 dBm0.
const VOLUME: u8 = 10;

/// A key pressed on a plain RTP leg: participant `id` pressed `key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Keypress {
    /// The participant.
    pub(crate) id: u64,
    /// `0`-`9`, `*`, `#`, `A`-`D`.
    pub(crate) key: char,
}

/// The keys a leg receives: one per event, told at its end; the end
/// packet's retransmissions (the same timestamp) are one key.
#[derive(Debug, Default)]
pub(crate) struct KeysIn {
    last_end: Option<u32>,
}

impl KeysIn {
    /// A telephone-event packet of timestamp `timestamp`: the key it ends, once.
    pub(crate) fn packet(&mut self, timestamp: u32, payload: &[u8]) -> Option<char> {
        let ev = KeyEvent::parse(payload)?;
        if !ev.end || self.last_end == Some(timestamp) {
            return None;
        }
        self.last_end = Some(timestamp);
        Some(ev.key())
    }
}

/// One tick's event packet to send: `repeats` copies of `event`, with the
/// event's start timestamp `start`, the marker on an event's first packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyPacket {
    pub(crate) event: KeyEvent,
    pub(crate) start: u32,
    pub(crate) marker: bool,
    pub(crate) repeats: usize,
}

/// The keys a leg is sent, one at a time.
#[derive(Debug)]
pub(crate) struct KeysOut {
    queue: VecDeque<u8>,
    /// The key being sent: its event, start timestamp, ticks sent.
    now: Option<(u8, u32, u16)>,
    gap: u16,
    /// The event clock's units per tick (160 at 8 kHz, 960 at 48 kHz).
    per_tick: u16,
    /// The last tick seen (a tick delivered twice steps once).
    last_tick: Option<u64>,
}

impl KeysOut {
    /// For an event clock of `rate` Hz.
    pub(crate) fn new(rate: u32) -> Self {
        let per_tick = u16::try_from(rate / 50).unwrap_or(960);
        Self { queue: VecDeque::new(), now: None, gap: 0, per_tick, last_tick: None }
    }

    /// Queues events (bounded: beyond two requests' worth they are dropped;
    /// the API sends one request per leg at a time).
    pub(crate) fn push(&mut self, events: &[u8]) {
        let room = (2 * MAX_KEYS).saturating_sub(self.queue.len());
        self.queue.extend(events.iter().take(room));
    }

    /// The packet of tick `tick` (`ts`: its audio timestamp), if any.
    pub(crate) fn tick(&mut self, tick: u64, ts: u32) -> Option<KeyPacket> {
        if self.last_tick.is_some_and(|t| tick <= t) {
            return None;
        }
        self.last_tick = Some(tick);
        if self.gap > 0 {
            self.gap -= 1;
            return None;
        }
        let (event, start, ticks) = match self.now {
            Some(now) => now,
            None => (self.queue.pop_front()?, ts, 0),
        };
        let ticks = ticks + 1;
        let end = ticks >= KEY_TICKS;
        let duration = ticks.saturating_mul(self.per_tick);
        self.now = if end { None } else { Some((event, start, ticks)) };
        if end {
            self.gap = GAP_TICKS;
        }
        Some(KeyPacket {
            event: KeyEvent { event, end, volume: VOLUME, duration },
            start,
            marker: ticks == 1,
            repeats: if end { END_REPEATS } else { 1 },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_told_once_at_its_end() {
        let mut keys = KeysIn::default();
        let star = |end| KeyEvent { event: 10, end, volume: 10, duration: 400 }.to_bytes();
        assert_eq!(keys.packet(1000, &star(false)), None, "not ended yet");
        assert_eq!(keys.packet(1000, &star(true)), Some('*'));
        assert_eq!(keys.packet(1000, &star(true)), None, "a retransmitted end");
        assert_eq!(keys.packet(1000, &star(true)), None);
        assert_eq!(keys.packet(5000, &star(true)), Some('*'), "the same key again, a new event");
        assert_eq!(keys.packet(9000, &[99, 0x80, 0, 1]), None, "not a keypad event");
        assert_eq!(keys.packet(9000, &[1]), None, "short");
    }

    #[test]
    fn sent_keys_last_five_ticks_end_three_times_and_pause() {
        let mut out = KeysOut::new(8000);
        out.push(&[1, 11]);
        let mut sent = Vec::new();
        for tick in 0..25u32 {
            sent.push(out.tick(u64::from(tick), tick * 960));
            assert_eq!(out.tick(u64::from(tick), tick * 960), None, "a tick steps once");
        }
        let first: Vec<_> = sent[..5].iter().map(|p| p.expect("a packet")).collect();
        assert!(first.iter().all(|p| p.event.event == 1 && p.start == 0));
        assert_eq!(first.iter().map(|p| p.event.duration).collect::<Vec<_>>(), [160, 320, 480, 640, 800]);
        assert!(first[0].marker && !first[1].marker);
        assert!(first[4].event.end && first[4].repeats == 3 && !first[3].event.end);
        assert!(sent[5..10].iter().all(Option::is_none), "a pause between keys");
        let second = sent[10].expect("the second key");
        assert_eq!((second.event.event, second.start, second.marker), (11, 9600, true));
        assert!(sent[20..].iter().all(Option::is_none), "then nothing");
        let mut bounded = KeysOut::new(48_000);
        bounded.push(&[0; 100]);
        assert_eq!(bounded.queue.len(), 2 * MAX_KEYS);
    }
}
