//! Phone legs in the mix: G.711 (PCMU, PCMA) frames go into a room as
//! they came, 160 bytes per 20 ms, and are decoded here, where the Opus
//! frames of other participants are: only when the selection needs them.
//!
//! ```text
//! the leg's thread:  G.711 packets ─► 20 ms frames of 160 bytes, RFC 6464 level from the 8 kHz samples
//! the room:          selected ─► decode (256-entry table) ─► ×6 to 48 kHz (polyphase FIR) ─► mixed
//!                    needed as Opus (a forwarded frame, another node, a speaker feed)
//!                              ─► decode, ×6 ─► Opus encode: K at most per tick
//! ```
//!
//! A phone caller who is not selected costs the room nothing but its place
//! in the jitter buffer: no decode, and no Opus encode anywhere. Before,
//! the leg's thread encoded every caller's audio to Opus for the room
//! (most of a phone leg's cost).
//!
//! The resampling is [`crate::resample`]'s 8 kHz filter (cut-off 3.7 kHz).

use std::sync::LazyLock;

use bytes::Bytes;

use crate::MixError;
use crate::codec::{DecodeFailure, Encoder};
use crate::config::EncoderConfig;
use crate::dsp::{FRAME_SAMPLES, Pcm};
use crate::resample::{TO_8K, Upsampler};

/// What a participant's frames are coded in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InputCodec {
    /// Opus, 20 ms frames at 48 kHz (every WebRTC peer, and a phone that offers it).
    #[default]
    Opus,
    /// G.711, 160 bytes per 20 ms at 8 kHz.
    G711(G711),
}

/// The two G.711 laws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum G711 {
    /// µ-law (PCMU, RTP payload type 0).
    Pcmu,
    /// A-law (PCMA, RTP payload type 8).
    Pcma,
}

impl G711 {
    /// One byte as a sample (-1.0 to 1.0).
    pub fn decode(self, byte: u8) -> f32 {
        self.decoding()[usize::from(byte)]
    }

    /// One sample (-1.0 to 1.0, clipped) as a byte.
    pub fn encode(self, sample: f32) -> u8 {
        self.encoding()[encode_index(sample)]
    }

    /// Bytes as samples, `out` as long as `bytes` (a table lookup each).
    pub fn decode_into(self, bytes: &[u8], out: &mut [f32]) {
        let table = self.decoding();
        for (o, b) in out.iter_mut().zip(bytes) {
            *o = table[usize::from(*b)];
        }
    }

    /// Samples as bytes, `out` as long as `samples` (a table lookup each).
    pub fn encode_into(self, samples: &[f32], out: &mut [u8]) {
        let table = self.encoding();
        for (o, s) in out.iter_mut().zip(samples) {
            *o = table[encode_index(*s)];
        }
    }

    fn decoding(self) -> &'static [f32; 256] {
        match self {
            Self::Pcmu => &ULAW_F,
            Self::Pcma => &ALAW_F,
        }
    }

    fn encoding(self) -> &'static [u8; ENCODE_TABLE] {
        match self {
            Self::Pcmu => &ULAW_ENC,
            Self::Pcma => &ALAW_ENC,
        }
    }
}

/// Entries of an encoding table: a 16-bit sample's top 14 bits (µ-law
/// reads 14 bits of it, A-law 13), so a lookup gives the exact G.711 code.
const ENCODE_TABLE: usize = 1 << 14;

/// Where a sample (-1.0 to 1.0, clipped) is in an encoding table.
fn encode_index(sample: f32) -> usize {
    let s = (sample * 32_768.0).clamp(-32_768.0, 32_767.0) as i16;
    ((i32::from(s) >> 2) + (ENCODE_TABLE as i32 / 2)) as usize
}

/// Decoding tables as samples, and encoding tables by a sample's top 14 bits.
static ULAW_F: LazyLock<[f32; 256]> = LazyLock::new(|| ULAW.map(|v| f32::from(v) / 32_768.0));
static ALAW_F: LazyLock<[f32; 256]> = LazyLock::new(|| ALAW.map(|v| f32::from(v) / 32_768.0));
static ULAW_ENC: LazyLock<Box<[u8; ENCODE_TABLE]>> = LazyLock::new(|| encoding_table(ulaw_of));
static ALAW_ENC: LazyLock<Box<[u8; ENCODE_TABLE]>> = LazyLock::new(|| encoding_table(alaw_of));

fn encoding_table(of: fn(i16) -> u8) -> Box<[u8; ENCODE_TABLE]> {
    let mut t = Box::new([0u8; ENCODE_TABLE]);
    for (i, code) in t.iter_mut().enumerate() {
        *code = of(((i as i32 - ENCODE_TABLE as i32 / 2) << 2) as i16);
    }
    t
}

/// 8 kHz samples (G.711 bytes) per 20 ms frame.
pub const NARROW_FRAME: usize = FRAME_SAMPLES / 6;

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
fn ulaw_of(sample: i16) -> u8 {
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
fn alaw_of(sample: i16) -> u8 {
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

/// A G.711 participant's decoder in the room: 160 bytes to 960 samples at
/// 48 kHz; a lost frame repeats the last one, halved each time.
pub(crate) struct NarrowDecoder {
    law: G711,
    up: Upsampler,
    last: [f32; NARROW_FRAME],
    narrow: [f32; NARROW_FRAME],
}

impl NarrowDecoder {
    pub(crate) fn new(law: G711) -> Self {
        Self { law, up: Upsampler::new(&TO_8K), last: [0.0; NARROW_FRAME], narrow: [0.0; NARROW_FRAME] }
    }

    pub(crate) fn decode(&mut self, payload: &[u8], out: &mut Pcm) -> Result<(), DecodeFailure> {
        if payload.len() != NARROW_FRAME {
            return Err(DecodeFailure::WrongDuration);
        }
        self.law.decode_into(payload, &mut self.last);
        self.up.process(&self.last, out);
        Ok(())
    }

    pub(crate) fn conceal(&mut self, out: &mut Pcm) {
        for (n, l) in self.narrow.iter_mut().zip(self.last.iter_mut()) {
            *l *= 0.5;
            *n = *l;
        }
        self.up.process(&self.narrow, out);
    }

    pub(crate) fn reset(&mut self) {
        *self = Self::new(self.law);
    }
}

/// A G.711 participant's frames as Opus, for what must carry Opus (a lone
/// speaker's frame forwarded, the frames sent to a room's other nodes, a
/// speaker feed): its own resampler and encoder, so the mixing decoder's
/// state is untouched; each frame encoded once (by its timestamp).
pub(crate) struct Reencoder {
    law: G711,
    up: Upsampler,
    encoder: Encoder,
    narrow: [f32; NARROW_FRAME],
    wide: Box<Pcm>,
    last: Option<(u32, Bytes)>,
}

impl Reencoder {
    /// Voice, mono, 32 kbit/s, no in-band FEC (the frames go to tutti's own
    /// mixers and feeds, over TCP between nodes), complexity 1: a source
    /// that is 8 kHz G.711 loses nothing to it.
    pub(crate) fn new(law: G711) -> Result<Self, MixError> {
        let cfg = EncoderConfig { complexity: 1, bitrate_bps: 32_000, inband_fec: false, ..EncoderConfig::default() };
        Ok(Self {
            law,
            up: Upsampler::new(&TO_8K),
            encoder: Encoder::new(&cfg)?,
            narrow: [0.0; NARROW_FRAME],
            wide: Box::new([0.0; FRAME_SAMPLES]),
            last: None,
        })
    }

    /// The frame of `timestamp` (`payload`, 160 bytes) as Opus; `None` when
    /// it is not 160 bytes.
    pub(crate) fn opus(&mut self, timestamp: u32, payload: &[u8]) -> Option<Bytes> {
        if let Some((ts, opus)) = &self.last
            && *ts == timestamp
        {
            return Some(opus.clone());
        }
        if payload.len() != NARROW_FRAME {
            return None;
        }
        self.law.decode_into(payload, &mut self.narrow);
        self.up.process(&self.narrow, &mut self.wide);
        let opus = self.encoder.encode(&self.wide);
        self.last = Some((timestamp, opus.clone()));
        Some(opus)
    }

    /// The last frame encoded, if it is the one of `timestamp`.
    pub(crate) fn encoded(&self, timestamp: u32) -> Option<&Bytes> {
        self.last.as_ref().filter(|(ts, _)| *ts == timestamp).map(|(_, opus)| opus)
    }
}

impl std::fmt::Debug for NarrowDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NarrowDecoder({:?})", self.law)
    }
}

impl std::fmt::Debug for Reencoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Reencoder({:?})", self.law)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resample::tests::{db, sine};

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
        // The encoding tables give what the functions give, for every 16-bit sample.
        for s in i16::MIN..=i16::MAX {
            let x = f32::from(s) / 32_768.0;
            assert_eq!((G711::Pcmu.encode(x), G711::Pcma.encode(x)), (ulaw_of(s), alaw_of(s)), "sample {s}");
        }
        for codec in [G711::Pcmu, G711::Pcma] {
            for amp in [0.5, 0.05, 0.005] {
                let tone = sine(1_000.0, 8_000.0, 8_000, amp);
                let back: Vec<f32> = tone.iter().map(|s| codec.decode(codec.encode(*s))).collect();
                let (a, b) = (db(&tone), db(&back));
                assert!((a - b).abs() < 0.5, "{codec:?} at {amp}: {a} dB in, {b} dB out");
            }
        }
    }
}
