//! G.711 legs (PCMU, PCMA: a phone, a PBX or a carrier trunk that offers
//! no Opus), on the `rtp-in` thread that carries the leg's RTP:
//!
//! ```text
//! in:  G.711 8 kHz (any whole number of samples: 20 ms, 30 ms… joined and cut into 20 ms)
//!        ─► 160-byte frames for the room, with an RFC 6464 level from the decoded samples
//!        (the room decodes them only while the caller is a selected speaker: tutti_mix::phone)
//! out: the leg's Opus feed ─► Opus decoder ─► low-pass and ÷6 down to 8 kHz ─► G.711, 160 bytes
//! ```
//!
//! No allocation per packet but the frame handed to the room (as for any
//! leg); no I/O here. The codec tables and the resampling filter are
//! `tutti_mix::phone`'s.

use bytes::Bytes;
use tutti_mix::phone::{Downsampler, NARROW_FRAME};
use tutti_mix::{Decoder, FRAME_SAMPLES, G711, InputCodec, Pcm, level_of};
use tutti_rtc::plain::Codec;

/// Most 8 kHz samples one packet may carry (120 ms): a longer payload is refused.
const MAX_PACKET_SAMPLES: usize = 960;

/// The G.711 law of a plain RTP codec (µ-law for anything but PCMA).
pub(crate) fn law_of(codec: Codec) -> G711 {
    if codec == Codec::Pcma { G711::Pcma } else { G711::Pcmu }
}

/// What a leg of `codec` hands the room.
pub(crate) fn input_codec(codec: Codec) -> InputCodec {
    match codec {
        Codec::Opus => InputCodec::Opus,
        Codec::Pcmu | Codec::Pcma => InputCodec::G711(law_of(codec)),
    }
}

/// Why a G.711 leg could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("a G.711 leg's Opus codec: {0}")]
pub(crate) struct TranscoderError(#[from] tutti_mix::MixError);

/// One 20 ms frame for the room: its 160 G.711 bytes, its RFC 6464 level,
/// its sequence number and the (8 kHz) timestamp of its first sample.
pub(crate) struct RoomFrame {
    pub(crate) payload: Bytes,
    pub(crate) level: u8,
    pub(crate) seq: u16,
    pub(crate) timestamp: u32,
}

/// One G.711 leg's framing in and transcoding out.
pub(crate) struct Transcoder {
    law: G711,
    decoder: Decoder,
    down: Downsampler,
    /// Bytes received and not yet a whole frame.
    pending: [u8; NARROW_FRAME],
    pending_len: usize,
    /// The timestamp (8 kHz) the next received sample should have.
    next_ts: Option<u32>,
    /// The sequence number of the last frame for the room, and the timestamp the next one should have.
    seq: u16,
    next_frame: Option<u32>,
    wide: Box<Pcm>,
    narrow: [f32; NARROW_FRAME],
}

impl Transcoder {
    /// A leg of `codec` (PCMU or PCMA).
    pub(crate) fn new(codec: Codec) -> Result<Self, TranscoderError> {
        Ok(Self {
            law: law_of(codec),
            decoder: Decoder::new()?,
            down: Downsampler::new(),
            pending: [0; NARROW_FRAME],
            pending_len: 0,
            next_ts: None,
            seq: 0,
            next_frame: None,
            wide: Box::new([0.0; FRAME_SAMPLES]),
            narrow: [0.0; NARROW_FRAME],
        })
    }

    /// Takes one received G.711 payload (8 kHz `timestamp`); calls `frame`
    /// for each whole 20 ms frame it completes (none, one or more). A
    /// payload that does not follow the last one (a loss, a new talkspurt)
    /// drops the part frame before it. False when the payload is empty or
    /// longer than 120 ms (dropped).
    pub(crate) fn receive(&mut self, timestamp: u32, payload: &[u8], mut frame: impl FnMut(RoomFrame)) -> bool {
        if payload.is_empty() || payload.len() > MAX_PACKET_SAMPLES {
            return false;
        }
        if self.next_ts != Some(timestamp) {
            self.pending_len = 0;
        }
        self.next_ts = Some(timestamp.wrapping_add(payload.len() as u32));
        let mut start = timestamp.wrapping_sub(self.pending_len as u32);
        for chunk in payload.chunks(NARROW_FRAME) {
            let take = chunk.len().min(NARROW_FRAME - self.pending_len);
            let (now, rest) = chunk.split_at(take);
            self.push(now);
            if self.pending_len == NARROW_FRAME {
                frame(self.frame(start));
                start = start.wrapping_add(NARROW_FRAME as u32);
            }
            self.push(rest);
        }
        true
    }

    fn push(&mut self, bytes: &[u8]) {
        self.pending[self.pending_len..self.pending_len + bytes.len()].copy_from_slice(bytes);
        self.pending_len += bytes.len();
    }

    fn frame(&mut self, timestamp: u32) -> RoomFrame {
        self.pending_len = 0;
        // Frames lost before this one (up to a second's) leave their sequence
        // numbers unused, as the lost packets of an Opus leg would.
        let lost = self.next_frame.map_or(0, |n| timestamp.wrapping_sub(n) / NARROW_FRAME as u32);
        self.seq = self.seq.wrapping_add(1).wrapping_add(if lost < 50 { lost as u16 } else { 0 });
        self.next_frame = Some(timestamp.wrapping_add(NARROW_FRAME as u32));
        for (s, b) in self.narrow.iter_mut().zip(&self.pending) {
            *s = self.law.decode(*b);
        }
        RoomFrame {
            payload: Bytes::copy_from_slice(&self.pending),
            level: level_of(&self.narrow[..]),
            seq: self.seq,
            timestamp,
        }
    }

    /// What the leg hands the room.
    pub(crate) fn input_codec(&self) -> InputCodec {
        InputCodec::G711(self.law)
    }

    /// The leg's 20 ms of the room (an Opus payload) as 160 G.711 bytes in
    /// `out`; `None` when the payload does not decode (then nothing is sent).
    pub(crate) fn send(&mut self, opus: &[u8], out: &mut [u8; NARROW_FRAME]) -> Option<()> {
        self.decoder.decode(opus, &mut self.wide).ok()?;
        self.down.process(&self.wide, &mut self.narrow);
        self.encode_narrow(&self.narrow, out);
        Some(())
    }

    /// 20 ms at 8 kHz as 160 bytes of the leg's G.711 (a table lookup per sample).
    pub(crate) fn encode_narrow(&self, narrow: &[f32; NARROW_FRAME], out: &mut [u8; NARROW_FRAME]) {
        for (o, s) in out.iter_mut().zip(narrow) {
            *o = self.law.encode(*s);
        }
    }
}

/// A room's listener mix at 8 kHz, decoded and resampled once per tick for
/// every G.711 leg of the room on this thread that hears it (a selected
/// speaker hears its own mix without itself, transcoded by its own
/// [`Transcoder`]). A hundred phone listeners cost one Opus decode and one
/// resampling, not a hundred; each leg's G.711 encode stays its own (a
/// table lookup per sample, and PCMU and PCMA legs may share the room).
pub(crate) struct SharedNarrow {
    decoder: Decoder,
    down: Downsampler,
    wide: Box<Pcm>,
    narrow: [f32; NARROW_FRAME],
    /// The tick `narrow` holds, and whether it decoded.
    tick: Option<(u64, bool)>,
}

impl SharedNarrow {
    pub(crate) fn new() -> Result<Self, TranscoderError> {
        Ok(Self {
            decoder: Decoder::new()?,
            down: Downsampler::new(),
            wide: Box::new([0.0; FRAME_SAMPLES]),
            narrow: [0.0; NARROW_FRAME],
            tick: None,
        })
    }

    /// The listener mix of `tick` (its Opus payload `opus`) at 8 kHz: decoded
    /// on the first call of the tick, the same samples after; `None` when it
    /// does not decode.
    pub(crate) fn of(&mut self, tick: u64, opus: &[u8]) -> Option<&[f32; NARROW_FRAME]> {
        if self.tick.is_none_or(|(t, _)| t != tick) {
            let ok = self.decoder.decode(opus, &mut self.wide).is_ok();
            if ok {
                self.down.process(&self.wide, &mut self.narrow);
            }
            self.tick = Some((tick, ok));
        }
        self.tick.is_some_and(|(_, ok)| ok).then_some(&self.narrow)
    }
}

#[cfg(test)]
mod tests {
    use tutti_mix::{Encoder, EncoderConfig};

    use super::*;

    fn sine(freq: f32, rate: f32, n: usize, amp: f32) -> Vec<f32> {
        (0..n).map(|i| amp * (std::f32::consts::TAU * freq * i as f32 / rate).sin()).collect()
    }

    /// A 48 kHz tone as the room's 20 ms Opus frames.
    fn opus_tone(freq: f32, frames: usize) -> Vec<Bytes> {
        let mut enc = Encoder::new(&EncoderConfig::default()).expect("an encoder");
        sine(freq, 48_000.0, FRAME_SAMPLES * frames, 0.3)
            .chunks_exact(FRAME_SAMPLES)
            .map(|f| enc.encode(f.try_into().expect("a frame")))
            .collect()
    }

    #[test]
    fn a_leg_joins_30_ms_packets_into_20_ms_frames_and_sends_160_bytes() {
        let mut leg = Transcoder::new(Codec::Pcma).expect("a leg");
        let tone: Vec<u8> = sine(600.0, 8_000.0, 240 * 10, 0.3).iter().map(|s| G711::Pcma.encode(*s)).collect();
        let mut frames = Vec::new();
        for (i, packet) in tone.chunks(240).enumerate() {
            assert!(leg.receive(1_000 + 240 * i as u32, packet, |f| frames.push(f)));
        }
        // 2400 samples: 15 frames of the bytes as they came, starting where they do in the packets.
        assert_eq!(frames.len(), 15);
        let joined: Vec<u8> = frames.iter().flat_map(|f| f.payload.iter().copied()).collect();
        assert_eq!(joined, tone, "the room gets the caller's bytes, 160 at a time");
        let starts: Vec<u32> = frames.iter().take(3).map(|f| f.timestamp).collect();
        assert_eq!(starts, [1_000, 1_160, 1_320], "the 2nd frame starts 80 samples before the 2nd packet");
        assert!(frames.windows(2).all(|w| w[1].seq == w[0].seq.wrapping_add(1)));
        // A lost packet (30 ms) drops the part frame and skips the lost frame's number.
        let last = frames.last().map_or(0, |f| f.seq);
        let mut after = Vec::new();
        leg.receive(1_000 + 240 * 11, &tone[..240], |f| after.push((f.seq, f.timestamp)));
        assert_eq!(after, [(last.wrapping_add(2), 1_000 + 240 * 11)], "{after:?}");
        assert!(
            frames.last().is_some_and(|f| f.level < 30),
            "a 0.3 tone is loud: {:?}",
            frames.last().map(|f| f.level)
        );
        let quiet: Vec<u8> = sine(600.0, 8_000.0, 160, 0.001).iter().map(|s| G711::Pcma.encode(*s)).collect();
        let mut level = 0;
        leg.receive(1_000 + 240 * 20, &quiet, |f| level = f.level);
        assert!(level > 55, "a tone 50 dB lower is quiet: {level}");
        // Refused payloads say so.
        assert!(!leg.receive(0, &[], |_| {}));
        assert!(!leg.receive(0, &[0xD5; 961], |_| {}));
        // Out: the room's Opus frames as G.711 hold the tone.
        let mut out = [0u8; NARROW_FRAME];
        let mut heard = Vec::new();
        for opus in opus_tone(600.0, 15) {
            leg.send(&opus, &mut out).expect("decodes");
            heard.extend(out.iter().map(|b| G711::Pcma.decode(*b)));
        }
        assert!(leg.send(&[0x10, 0, 0], &mut out).is_none(), "40 ms, not a 20 ms frame: nothing sent");
        let wide: Vec<f32> = heard[800..].iter().flat_map(|s| [*s; 6]).collect();
        assert!(tutti_mix::goertzel(&wide, 600.0) > 0.2, "{}", tutti_mix::goertzel(&wide, 600.0));
    }

    #[test]
    fn legs_hearing_the_listener_mix_share_one_decode_and_send_what_their_own_would() {
        // The room's Opus stream; PCMU and PCMA legs hear it.
        let stream = opus_tone(600.0, 25);
        let mut own = [Transcoder::new(Codec::Pcmu).expect("a leg"), Transcoder::new(Codec::Pcma).expect("a leg")];
        let legs = [Transcoder::new(Codec::Pcmu).expect("a leg"), Transcoder::new(Codec::Pcma).expect("a leg")];
        let mut shared = SharedNarrow::new().expect("a decoder");
        for (tick, opus) in stream.iter().enumerate() {
            for (leg, own) in legs.iter().zip(own.iter_mut()) {
                let (mut a, mut b) = ([0u8; NARROW_FRAME], [0u8; NARROW_FRAME]);
                own.send(opus, &mut a).expect("decodes");
                // Asked by each leg of the tick: decoded on the first ask only.
                leg.encode_narrow(shared.of(tick as u64, opus).expect("decodes"), &mut b);
                assert_eq!(a, b, "tick {tick}: a leg's own transcode and the shared one differ");
            }
        }
        // Asked again for a tick it holds, it does not decode again (a
        // payload that would not decode changes nothing); a new tick does.
        assert!(shared.of(24, &[0x10, 0, 0]).is_some());
        assert!(shared.of(25, &[0x10, 0, 0]).is_none(), "40 ms, not a 20 ms frame");
    }

    /// What one leg costs per 20 ms both ways (printed; run with `--nocapture`).
    #[test]
    fn a_legs_transcoding_cost_per_20_ms() {
        let mut leg = Transcoder::new(Codec::Pcmu).expect("a leg");
        let tone: Vec<u8> = sine(600.0, 8_000.0, 160 * 250, 0.3).iter().map(|s| G711::Pcmu.encode(*s)).collect();
        let mix = opus_tone(600.0, 250);
        let mut out = [0u8; NARROW_FRAME];
        let start = std::time::Instant::now();
        for (i, (packet, opus)) in tone.chunks(160).zip(&mix).enumerate() {
            leg.receive(160 * i as u32, packet, |_| {});
            leg.send(opus, &mut out);
        }
        let per = start.elapsed() / 250;
        eprintln!("one G.711 leg: {} µs per 20 ms (in, and out on its own decoder)", per.as_micros());
        assert!(per < std::time::Duration::from_millis(20), "{per:?}");
    }
}
