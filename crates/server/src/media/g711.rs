//! G.711 legs (PCMU, PCMA: a phone, a PBX or a carrier trunk that offers
//! no Opus), transcoded on the `rtp-in` thread that carries the leg's RTP:
//!
//! ```text
//! in:  G.711 8 kHz (any whole number of samples: 20 ms, 30 ms… joined and cut into 20 ms)
//!        ─► decode (256-entry table) ─► ×6 up to 48 kHz (polyphase FIR) ─► Opus encoder ─► the room
//! out: the leg's Opus feed ─► Opus decoder ─► low-pass and ÷6 down to 8 kHz (the same FIR) ─► G.711, 160 bytes
//! ```
//!
//! The room only ever sees Opus packets (with an RFC 6464 level from the
//! PCM); the mixing core knows nothing of G.711. No allocation per packet
//! but the Opus packet handed to the room (as for any leg); no I/O here.
//!
//! The resampling filter: one 192-tap low-pass (Blackman-windowed sinc,
//! cut-off 3.7 kHz at 48 kHz), used as 6 phases of 32 taps to go up and
//! whole to go down. Images and aliases from 6 kHz up are at least 60 dB
//! down (the unit test's bound); the telephone band (300 to 3400 Hz) passes.

use std::sync::LazyLock;

use bytes::Bytes;
use tutti_mix::{Decoder, Encoder, EncoderConfig, FRAME_SAMPLES, Pcm, level_of};
use tutti_rtc::plain::Codec;

/// 48 kHz samples per 8 kHz sample.
const FACTOR: usize = 6;
/// 8 kHz samples per 20 ms frame.
pub(crate) const NARROW_FRAME: usize = FRAME_SAMPLES / FACTOR;
/// Taps of the low-pass filter (at 48 kHz).
const TAPS: usize = 192;
/// Taps per phase when going up.
const PHASE_TAPS: usize = TAPS / FACTOR;
/// Most 8 kHz samples one packet may carry (120 ms): a longer payload is refused.
const MAX_PACKET_SAMPLES: usize = 960;

/// The low-pass filter, unity gain at 0 Hz.
static FILTER: LazyLock<[f32; TAPS]> = LazyLock::new(|| {
    let cutoff = 3_700.0 / 48_000.0;
    let mid = (TAPS - 1) as f64 / 2.0;
    let mut h = [0f64; TAPS];
    for (i, tap) in h.iter_mut().enumerate() {
        let t = i as f64 - mid;
        let sinc = if t == 0.0 {
            2.0 * cutoff
        } else {
            (2.0 * std::f64::consts::PI * cutoff * t).sin() / (std::f64::consts::PI * t)
        };
        let x = 2.0 * std::f64::consts::PI * i as f64 / (TAPS - 1) as f64;
        *tap = sinc * (0.42 - 0.5 * x.cos() + 0.08 * (2.0 * x).cos());
    }
    let sum: f64 = h.iter().sum();
    h.map(|v| (v / sum) as f32)
});

/// 8 kHz to 48 kHz, one 20 ms frame at a time, keeping the history across frames.
pub(crate) struct Upsampler {
    /// The last `PHASE_TAPS - 1` input samples, then the frame's.
    buf: [f32; PHASE_TAPS - 1 + NARROW_FRAME],
}

impl Upsampler {
    pub(crate) fn new() -> Self {
        Self { buf: [0.0; PHASE_TAPS - 1 + NARROW_FRAME] }
    }

    /// Resamples one frame of 160 samples into `out` (960).
    pub(crate) fn process(&mut self, input: &[f32; NARROW_FRAME], out: &mut Pcm) {
        let h = &*FILTER;
        self.buf[PHASE_TAPS - 1..].copy_from_slice(input);
        for m in 0..NARROW_FRAME {
            for p in 0..FACTOR {
                let mut acc = 0.0;
                for k in 0..PHASE_TAPS {
                    acc += h[k * FACTOR + p] * self.buf[PHASE_TAPS - 1 + m - k];
                }
                out[m * FACTOR + p] = acc * FACTOR as f32;
            }
        }
        self.buf.copy_within(NARROW_FRAME.., 0);
    }
}

/// 48 kHz to 8 kHz: low-pass, then every 6th sample.
pub(crate) struct Downsampler {
    /// The last `TAPS - 1` input samples, then the frame's.
    buf: Box<[f32; TAPS - 1 + FRAME_SAMPLES]>,
}

impl Downsampler {
    pub(crate) fn new() -> Self {
        Self { buf: Box::new([0.0; TAPS - 1 + FRAME_SAMPLES]) }
    }

    /// Resamples one frame of 960 samples into `out` (160).
    pub(crate) fn process(&mut self, input: &Pcm, out: &mut [f32; NARROW_FRAME]) {
        let h = &*FILTER;
        self.buf[TAPS - 1..].copy_from_slice(input);
        for (m, o) in out.iter_mut().enumerate() {
            let end = TAPS - 1 + m * FACTOR;
            *o = h.iter().zip(self.buf[end + 1 - TAPS..=end].iter().rev()).map(|(a, b)| a * b).sum();
        }
        self.buf.copy_within(FRAME_SAMPLES.., 0);
    }
}

/// µ-law byte to linear (ITU-T G.711), as a 256-entry table.
static ULAW: LazyLock<[i16; 256]> = LazyLock::new(|| {
    std::array::from_fn(|i| {
        let u = !(i as u8);
        let t = ((i32::from(u & 0x0F) << 3) + 0x84) << ((u & 0x70) >> 4);
        (if u & 0x80 != 0 { 0x84 - t } else { t - 0x84 }) as i16
    })
});

/// A-law byte to linear (ITU-T G.711), as a 256-entry table.
static ALAW: LazyLock<[i16; 256]> = LazyLock::new(|| {
    std::array::from_fn(|i| {
        let a = (i as u8) ^ 0x55;
        let mut t = i32::from(a & 0x0F) << 4;
        match (a & 0x70) >> 4 {
            0 => t += 8,
            1 => t += 0x108,
            seg => t = (t + 0x108) << (seg - 1),
        }
        (if a & 0x80 != 0 { t } else { -t }) as i16
    })
});

/// The G.711 segment of a magnitude: the first of 8 ends it is within, 8 beyond.
fn segment(v: i32, first_end: i32) -> u8 {
    (0..8u8).find(|s| v < ((first_end + 1) << s)).unwrap_or(8)
}

/// Linear (16-bit) to µ-law.
pub(crate) fn ulaw_of(sample: i16) -> u8 {
    let mut v = i32::from(sample) >> 2;
    let mask = if v < 0 {
        v = -v;
        0x7F
    } else {
        0xFF
    };
    v = v.min(8159) + 0x21;
    match segment(v, 0x3F) {
        8 => 0x7F ^ mask,
        seg => ((seg << 4) | ((v >> (seg + 1)) & 0x0F) as u8) ^ mask,
    }
}

/// Linear (16-bit) to A-law.
pub(crate) fn alaw_of(sample: i16) -> u8 {
    let mut v = i32::from(sample) >> 3;
    let mask = if v >= 0 {
        0xD5
    } else {
        v = -v - 1;
        0x55
    };
    match segment(v, 0x1F) {
        8 => 0x7F ^ mask,
        seg => {
            let shift = if seg < 2 { 1 } else { seg };
            ((seg << 4) | ((v >> shift) & 0x0F) as u8) ^ mask
        }
    }
}

/// Decodes one G.711 byte of `codec` (µ-law for anything but PCMA).
fn decode(codec: Codec, byte: u8) -> f32 {
    let table = if codec == Codec::Pcma { &*ALAW } else { &*ULAW };
    f32::from(table[usize::from(byte)]) / 32_768.0
}

/// Encodes one sample (-1.0 to 1.0, clipped) as G.711 of `codec`.
fn encode(codec: Codec, sample: f32) -> u8 {
    let s = (sample * 32_768.0).clamp(-32_768.0, 32_767.0) as i16;
    if codec == Codec::Pcma { alaw_of(s) } else { ulaw_of(s) }
}

/// Why a G.711 leg could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("a G.711 leg's Opus codec: {0}")]
pub(crate) struct TranscoderError(#[from] tutti_mix::MixError);

/// One 20 ms frame for the room: its Opus packet, its RFC 6464 level, its
/// sequence number and the (8 kHz) timestamp of its first sample.
pub(crate) struct RoomFrame {
    pub(crate) payload: Bytes,
    pub(crate) level: u8,
    pub(crate) seq: u16,
    pub(crate) timestamp: u32,
}

/// One G.711 leg's transcoding, both ways.
pub(crate) struct Transcoder {
    codec: Codec,
    encoder: Encoder,
    decoder: Decoder,
    up: Upsampler,
    down: Downsampler,
    /// 8 kHz samples received and not yet a whole frame.
    pending: [f32; NARROW_FRAME],
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
    /// A leg of `codec` (PCMU or PCMA). Its Opus encoder: voice, mono, no
    /// in-band FEC (the packets go straight into the room, nothing is
    /// lost), complexity 1: this encode is most of a phone leg's cost, and
    /// at 1 SILK quantises without delayed decision, about half the time of
    /// 5 (profiled under 200 SIPp calls: `silk_NSQ_del_dec` was a third of
    /// the `rtp-in` thread), for a source that is 8 kHz G.711 anyway.
    pub(crate) fn new(codec: Codec) -> Result<Self, TranscoderError> {
        let cfg = EncoderConfig { complexity: 1, bitrate_bps: 32_000, inband_fec: false, ..EncoderConfig::default() };
        Ok(Self {
            codec,
            encoder: Encoder::new(&cfg)?,
            decoder: Decoder::new()?,
            up: Upsampler::new(),
            down: Downsampler::new(),
            pending: [0.0; NARROW_FRAME],
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
                frame(self.encode_pending(start));
                start = start.wrapping_add(NARROW_FRAME as u32);
            }
            self.push(rest);
        }
        true
    }

    fn push(&mut self, bytes: &[u8]) {
        for (slot, b) in self.pending[self.pending_len..].iter_mut().zip(bytes) {
            *slot = decode(self.codec, *b);
        }
        self.pending_len += bytes.len();
    }

    fn encode_pending(&mut self, timestamp: u32) -> RoomFrame {
        self.pending_len = 0;
        // Frames lost before this one (up to a second's) leave their sequence
        // numbers unused, as the lost packets of an Opus leg would.
        let lost = self.next_frame.map_or(0, |n| timestamp.wrapping_sub(n) / NARROW_FRAME as u32);
        self.seq = self.seq.wrapping_add(1).wrapping_add(if lost < 50 { lost as u16 } else { 0 });
        self.next_frame = Some(timestamp.wrapping_add(NARROW_FRAME as u32));
        self.up.process(&self.pending, &mut self.wide);
        RoomFrame {
            payload: self.encoder.encode(&self.wide),
            level: level_of(&self.wide[..]),
            seq: self.seq,
            timestamp,
        }
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
            *o = encode(self.codec, *s);
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
    use super::*;

    /// RMS of a signal, in dB.
    fn db(x: &[f32]) -> f32 {
        10.0 * (x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32).log10()
    }

    fn sine(freq: f32, rate: f32, n: usize, amp: f32) -> Vec<f32> {
        (0..n).map(|i| amp * (std::f32::consts::TAU * freq * i as f32 / rate).sin()).collect()
    }

    #[test]
    fn g711_tables_match_the_standard_and_round_trip_a_tone_within_half_a_db() {
        // Known points of ITU-T G.711 (and of every g711.c).
        assert_eq!((ulaw_of(0), alaw_of(0), alaw_of(-8)), (0xFF, 0xD5, 0x55));
        assert_eq!((ULAW[0x00], ULAW[0x80], ULAW[0xFF], ULAW[0x7F]), (-32_124, 32_124, 0, 0));
        assert_eq!((ALAW[0xD5], ALAW[0x55], ALAW[0xAA], ALAW[0x2A]), (8, -8, 32_256, -32_256));
        // Every code decodes to a value that encodes to the same code (but µ-law's two zeros).
        for b in 0..=255u8 {
            assert_eq!(alaw_of(ALAW[usize::from(b)]), b, "A-law {b:#04x}");
            if b != 0x7F {
                assert_eq!(ulaw_of(ULAW[usize::from(b)]), b, "µ-law {b:#04x}");
            }
        }
        for codec in [Codec::Pcmu, Codec::Pcma] {
            for amp in [0.5, 0.05, 0.005] {
                let tone = sine(1_000.0, 8_000.0, 8_000, amp);
                let back: Vec<f32> = tone.iter().map(|s| decode(codec, encode(codec, *s))).collect();
                let (a, b) = (db(&tone), db(&back));
                assert!((a - b).abs() < 0.5, "{codec:?} at {amp}: {a} dB in, {b} dB out");
            }
        }
    }

    /// Runs `input` through the up-sampler, frame by frame.
    fn up(input: &[f32]) -> Vec<f32> {
        let mut u = Upsampler::new();
        let mut out = Vec::new();
        for f in input.chunks_exact(NARROW_FRAME) {
            let mut wide = [0.0; FRAME_SAMPLES];
            u.process(f.try_into().expect("a frame"), &mut wide);
            out.extend_from_slice(&wide);
        }
        out
    }

    fn down(input: &[f32]) -> Vec<f32> {
        let mut d = Downsampler::new();
        let mut out = Vec::new();
        for f in input.chunks_exact(FRAME_SAMPLES) {
            let mut narrow = [0.0; NARROW_FRAME];
            d.process(f.try_into().expect("a frame"), &mut narrow);
            out.extend_from_slice(&narrow);
        }
        out
    }

    #[test]
    fn the_resampler_passes_1_khz_and_rejects_6_khz() {
        // Down: 1 kHz passes within 0.5 dB, 6 kHz (which would alias to 2 kHz) is 60 dB down.
        let (pass, reject) = (sine(1_000.0, 48_000.0, 48_000, 0.5), sine(6_000.0, 48_000.0, 48_000, 0.5));
        let (p, r) = (down(&pass), down(&reject));
        let settled = |x: &[f32]| x[800..].to_vec();
        assert!((db(&settled(&p)) - db(&pass)).abs() < 0.5, "1 kHz: {} dB of {}", db(&p), db(&pass));
        assert!(db(&settled(&r)) - db(&reject) < -60.0, "6 kHz leaks at {} dB", db(&settled(&r)) - db(&reject));
        // Up: 1 kHz passes within 0.5 dB, and its images (7 kHz, 9 kHz) are 60 dB down.
        let narrow = sine(1_000.0, 8_000.0, 8_000, 0.5);
        let wide = up(&narrow);
        let w = &wide[4_800..];
        assert!((db(w) - db(&narrow)).abs() < 0.5, "1 kHz: {} dB of {}", db(w), db(&narrow));
        let at = |f: f32| tutti_mix::goertzel(w, f);
        assert!(at(1_000.0) > 0.45, "{}", at(1_000.0));
        for image in [7_000.0, 9_000.0] {
            assert!(at(image) < 0.0005, "image at {image} Hz: {}", at(image));
        }
    }

    #[test]
    fn a_leg_joins_30_ms_packets_into_20_ms_frames_and_sends_160_bytes() {
        let mut leg = Transcoder::new(Codec::Pcma).expect("a leg");
        let tone: Vec<u8> = sine(600.0, 8_000.0, 240 * 10, 0.3).iter().map(|s| encode(Codec::Pcma, *s)).collect();
        let mut frames = Vec::new();
        for (i, packet) in tone.chunks(240).enumerate() {
            assert!(leg.receive(1_000 + 240 * i as u32, packet, |f| frames.push(f)));
        }
        // 2400 samples: 15 frames, starting where they do in the packets.
        assert_eq!(frames.len(), 15);
        let starts: Vec<u32> = frames.iter().take(3).map(|f| f.timestamp).collect();
        assert_eq!(starts, [1_000, 1_160, 1_320], "the 2nd frame starts 80 samples before the 2nd packet");
        assert!(frames.windows(2).all(|w| w[1].seq == w[0].seq.wrapping_add(1)));
        // A lost packet (30 ms) drops the part frame and skips the lost frame's number.
        let last = frames.last().map_or(0, |f| f.seq);
        let mut after = Vec::new();
        leg.receive(1_000 + 240 * 11, &tone[..240], |f| after.push((f.seq, f.timestamp)));
        assert_eq!(after, [(last.wrapping_add(2), 1_000 + 240 * 11)], "{after:?}");
        assert!(frames.iter().all(|f| !f.payload.is_empty()));
        assert!(frames.last().is_some_and(|f| f.level < 30), "a 0.3 tone is loud");
        // A gap drops the part frame; refused payloads say so.
        assert!(!leg.receive(0, &[], |_| {}));
        assert!(!leg.receive(0, &[0xD5; 961], |_| {}));
        // Out: the Opus frames back to G.711 hold the tone.
        let mut out = [0u8; NARROW_FRAME];
        let mut heard = Vec::new();
        for f in &frames {
            leg.send(&f.payload, &mut out).expect("decodes");
            heard.extend(out.iter().map(|b| decode(Codec::Pcma, *b)));
        }
        assert!(leg.send(&[0x10, 0, 0], &mut out).is_none(), "40 ms, not a 20 ms frame: nothing sent");
        let wide: Vec<f32> = heard[800..].iter().flat_map(|s| [*s; FACTOR]).collect();
        assert!(tutti_mix::goertzel(&wide, 600.0) > 0.2, "{}", tutti_mix::goertzel(&wide, 600.0));
    }

    #[test]
    fn legs_hearing_the_listener_mix_share_one_decode_and_send_what_their_own_would() {
        // A caller's frames are the room's Opus stream; PCMU and PCMA legs hear it.
        let mut caller = Transcoder::new(Codec::Pcmu).expect("a leg");
        let tone: Vec<u8> = sine(600.0, 8_000.0, 160 * 25, 0.3).iter().map(|s| encode(Codec::Pcmu, *s)).collect();
        let mut stream = Vec::new();
        for (i, packet) in tone.chunks(160).enumerate() {
            caller.receive(160 * i as u32, packet, |f| stream.push(f.payload));
        }
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
        let tone: Vec<u8> = sine(600.0, 8_000.0, 160 * 250, 0.3).iter().map(|s| encode(Codec::Pcmu, *s)).collect();
        let mut out = [0u8; NARROW_FRAME];
        let start = std::time::Instant::now();
        for (i, packet) in tone.chunks(160).enumerate() {
            let mut opus = Bytes::new();
            leg.receive(160 * i as u32, packet, |f| opus = f.payload);
            leg.send(&opus, &mut out);
        }
        let per = start.elapsed() / 250;
        eprintln!("one G.711 leg: {} µs per 20 ms (in and out)", per.as_micros());
        assert!(per < std::time::Duration::from_millis(20), "{per:?}");
    }
}
