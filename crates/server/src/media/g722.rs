//! G.722 (ITU-T G.722 at 64 kbit/s, RFC 3551 payload type 9) for phone
//! legs, 20 ms at a time, both ways at the room's 48 kHz:
//!
//! ```text
//! in:  160 bytes ─► G.722 decode (16 kHz, 320 samples) ─► ×3 up (polyphase FIR) ─► 960 samples at 48 kHz
//! out: 960 samples at 48 kHz ─► low-pass, ÷3 down (the same FIR) ─► G.722 encode ─► 160 bytes
//! ```
//!
//! The only file that names the codec crate (`ezk-g722`: SpanDSP's G.722 in
//! Rust, from the author of the ezk SIP stack): its sub-band ADPCM is kept
//! out of tutti's own code. Each way has its own state (the codec's
//! predictors, the resampler's history): one [`G722In`] and one
//! [`G722Out`] per leg. The resampler is [`tutti_mix::resample`]'s 16 kHz
//! one (cut-off 7 kHz). G.722's RTP clock runs at 8000 Hz although it
//! samples at 16 kHz (RFC 3551 §4.5.2): one byte per clock tick.

use ezk_g722::libg722::{Bitrate, decoder::Decoder, encoder::Encoder};
use tutti_mix::Pcm;

use tutti_mix::resample::{Downsampler, TO_16K, Upsampler};

/// G.722 bytes per 20 ms (64 kbit/s), and RTP clock ticks.
pub(crate) const G722_FRAME: usize = 160;
/// 16 kHz samples per 20 ms.
pub(crate) const WIDE_FRAME: usize = 320;

/// One leg's G.722 decoding: 160 bytes to 960 samples at 48 kHz.
pub(crate) struct G722In {
    decoder: Decoder,
    up: Upsampler,
    pcm: [f32; WIDE_FRAME],
}

impl G722In {
    pub(crate) fn new() -> Self {
        Self {
            decoder: Decoder::new(Bitrate::Mode1_64000, false, false),
            up: Upsampler::new(&TO_16K),
            pcm: [0.0; WIDE_FRAME],
        }
    }

    /// Decodes 20 ms (160 bytes) into `out` (960 samples at 48 kHz).
    pub(crate) fn decode(&mut self, bytes: &[u8; G722_FRAME], out: &mut Pcm) {
        let samples = self.decoder.decode(bytes);
        for (p, s) in self.pcm.iter_mut().zip(samples.iter().chain(std::iter::repeat(&0))) {
            *p = f32::from(*s) / 32_768.0;
        }
        self.up.process(&self.pcm, out);
    }

    /// Resamples 20 ms at 16 kHz (320 samples: the leg's comfort noise) into
    /// `out`, continuing the decoded audio's resampler.
    pub(crate) fn upsample(&mut self, pcm: &[f32], out: &mut Pcm) {
        self.up.process(pcm, out);
    }
}

/// One leg's G.722 encoding: 960 samples at 48 kHz (or 320 at 16 kHz) to 160 bytes.
pub(crate) struct G722Out {
    encoder: Encoder,
    down: Downsampler,
    pcm: [f32; WIDE_FRAME],
    samples: [i16; WIDE_FRAME],
}

impl G722Out {
    pub(crate) fn new() -> Self {
        Self {
            encoder: Encoder::new(Bitrate::Mode1_64000, false, false),
            down: Downsampler::new(&TO_16K),
            pcm: [0.0; WIDE_FRAME],
            samples: [0; WIDE_FRAME],
        }
    }

    /// Encodes 20 ms at 48 kHz (`pcm`, -1.0 to 1.0, clipped) into `out`.
    pub(crate) fn encode(&mut self, pcm: &Pcm, out: &mut [u8; G722_FRAME]) {
        self.down.process(pcm, &mut self.pcm);
        encode_16k(&mut self.encoder, &mut self.samples, &self.pcm, out);
    }

    /// Encodes 20 ms at 16 kHz (320 samples, already resampled: a room's
    /// shared listener mix) into `out`.
    pub(crate) fn encode_16k(&mut self, pcm: &[f32], out: &mut [u8; G722_FRAME]) {
        encode_16k(&mut self.encoder, &mut self.samples, pcm, out);
    }
}

/// `pcm` (16 kHz, -1.0 to 1.0, clipped) through `encoder` into `out`, by way of `samples`.
fn encode_16k(encoder: &mut Encoder, samples: &mut [i16; WIDE_FRAME], pcm: &[f32], out: &mut [u8; G722_FRAME]) {
    for (s, p) in samples.iter_mut().zip(pcm) {
        *s = (p * 32_768.0).clamp(-32_768.0, 32_767.0) as i16;
    }
    // The crate returns a new Vec: one allocation a frame (its API has no slice out).
    let bytes = encoder.encode(samples);
    for (o, b) in out.iter_mut().zip(bytes.iter().chain(std::iter::repeat(&0))) {
        *o = *b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::test_signal::{db, sine};
    use tutti_mix::{FRAME_SAMPLES, goertzel};

    /// `tone` (at 16 kHz) through a G.722 encoder and decoder, frame by frame.
    fn round_trip(tone: &[f32]) -> Vec<f32> {
        let (mut enc, mut dec) =
            (Encoder::new(Bitrate::Mode1_64000, false, false), Decoder::new(Bitrate::Mode1_64000, false, false));
        let mut back = Vec::new();
        for frame in tone.chunks_exact(WIDE_FRAME) {
            let samples: Vec<i16> = frame.iter().map(|p| (p * 32_768.0) as i16).collect();
            let bytes = enc.encode(&samples);
            assert_eq!(bytes.len(), G722_FRAME, "20 ms at 64 kbit/s");
            back.extend(dec.decode(&bytes).iter().map(|s| f32::from(*s) / 32_768.0));
        }
        back
    }

    #[test]
    fn a_1_khz_and_a_7_khz_tone_round_trip_through_g722() {
        for (hz, within) in [(1_000.0, 0.5), (7_000.0, 3.0)] {
            let tone = sine(hz, 16_000.0, 16_000, 0.3);
            let back = round_trip(&tone);
            // The codec's QMF delays the signal by 22 samples: compare settled levels and the tone.
            let (a, b) = (db(&tone), db(&back[1_600..]));
            assert!((a - b).abs() < within, "{hz} Hz: {a} dB in, {b} dB out");
            // goertzel reads at 48 kHz: the tone at 16 kHz is read at 3 × its frequency.
            let at = goertzel(&back[1_600..], hz * 3.0);
            assert!(at > 0.3 * 10f32.powf(-within / 20.0), "{hz} Hz: {at} of 0.3");
        }
        // What G.711 cannot carry at all (its Nyquist is 4 kHz): 7 kHz passes G.722.
    }

    #[test]
    fn a_leg_decodes_160_bytes_to_960_samples_and_encodes_them_back() {
        // 1 kHz at 48 kHz ─► G.722 ─► 48 kHz: the tone stays, at its level.
        let tone = sine(1_000.0, 48_000.0, 48_000, 0.3);
        let (mut out, mut inn) = (G722Out::new(), G722In::new());
        let mut heard = Vec::new();
        for frame in tone.chunks_exact(FRAME_SAMPLES) {
            let mut bytes = [0u8; G722_FRAME];
            out.encode(frame.try_into().expect("a frame"), &mut bytes);
            let mut pcm = [0.0; FRAME_SAMPLES];
            inn.decode(&bytes, &mut pcm);
            heard.extend_from_slice(&pcm);
        }
        let settled = &heard[4_800..];
        assert!((db(settled) - db(&tone)).abs() < 1.0, "{} dB of {}", db(settled), db(&tone));
        assert!(goertzel(settled, 1_000.0) > 0.25, "{}", goertzel(settled, 1_000.0));
    }
}
