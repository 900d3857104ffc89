//! The fixed resamplers of the phone legs: 48 kHz (the room's Opus) to
//! and from 8 kHz (G.711) or 16 kHz (G.722), 20 ms at a time.
//!
//! One 192-tap low-pass per rate (Blackman-windowed sinc at 48 kHz), used
//! as `factor` phases of `192 / factor` taps to go up and whole to go down
//! (then every `factor`-th sample):
//!
//! | rate | factor | cut-off | images and aliases |
//! |---|---|---|---|
//! | 8 kHz | 6 | 3.7 kHz | from 6 kHz up at least 60 dB down |
//! | 16 kHz | 3 | 7 kHz | from 10 kHz up at least 60 dB down |
//!
//! (the unit tests' bounds). No allocation per frame, no I/O.
//! Hand-written: it runs per selected phone speaker and per room every
//! 20 ms, and a fixed ratio needs nothing a resampling crate adds.

use std::sync::LazyLock;

use crate::dsp::{FRAME_SAMPLES, Pcm};

/// Taps of every low-pass (at 48 kHz); a multiple of every factor.
const TAPS: usize = 192;

/// A low-pass at 48 kHz for one rate, unity gain at 0 Hz.
pub struct Lowpass {
    taps: [f32; TAPS],
    /// 48 kHz samples per sample of the rate.
    factor: usize,
}

impl Lowpass {
    fn new(factor: usize, cutoff_hz: f64) -> Self {
        let cutoff = cutoff_hz / 48_000.0;
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
        Self { taps: h.map(|v| (v / sum) as f32), factor }
    }

    /// Samples of the rate per 20 ms frame (160 at 8 kHz, 320 at 16 kHz).
    pub fn frame(&self) -> usize {
        FRAME_SAMPLES / self.factor
    }
}

/// 8 kHz (G.711): cut-off 3.7 kHz.
pub static TO_8K: LazyLock<Lowpass> = LazyLock::new(|| Lowpass::new(6, 3_700.0));
/// 16 kHz (G.722): cut-off 7 kHz.
pub static TO_16K: LazyLock<Lowpass> = LazyLock::new(|| Lowpass::new(3, 7_000.0));

/// Up to 48 kHz, one 20 ms frame at a time, keeping the history across frames.
pub struct Upsampler {
    filter: &'static Lowpass,
    /// The last `phase taps - 1` input samples, then the frame's.
    buf: Box<[f32]>,
}

impl Upsampler {
    /// One with no history (silence before).
    pub fn new(filter: &'static Lowpass) -> Self {
        Self { filter, buf: vec![0.0; TAPS / filter.factor - 1 + filter.frame()].into() }
    }

    /// Resamples one frame (`filter.frame()` samples) into `out` (960).
    pub fn process(&mut self, input: &[f32], out: &mut Pcm) {
        let (h, factor) = (&self.filter.taps, self.filter.factor);
        let (phase_taps, frame) = (TAPS / factor, self.filter.frame());
        self.buf[phase_taps - 1..].copy_from_slice(&input[..frame]);
        for m in 0..frame {
            for p in 0..factor {
                let mut acc = 0.0;
                for k in 0..phase_taps {
                    acc += h[k * factor + p] * self.buf[phase_taps - 1 + m - k];
                }
                out[m * factor + p] = acc * factor as f32;
            }
        }
        self.buf.copy_within(frame.., 0);
    }
}

/// Down from 48 kHz: low-pass, then every `factor`-th sample.
pub struct Downsampler {
    filter: &'static Lowpass,
    /// The last `TAPS - 1` input samples, then the frame's.
    buf: Box<[f32; TAPS - 1 + FRAME_SAMPLES]>,
}

impl Downsampler {
    /// One with no history (silence before).
    pub fn new(filter: &'static Lowpass) -> Self {
        Self { filter, buf: Box::new([0.0; TAPS - 1 + FRAME_SAMPLES]) }
    }

    /// Resamples one frame of 960 samples into `out` (`filter.frame()` samples).
    pub fn process(&mut self, input: &Pcm, out: &mut [f32]) {
        let (h, factor) = (&self.filter.taps, self.filter.factor);
        self.buf[TAPS - 1..].copy_from_slice(input);
        for (m, o) in out.iter_mut().take(self.filter.frame()).enumerate() {
            let end = TAPS - 1 + m * factor;
            *o = h.iter().zip(self.buf[end + 1 - TAPS..=end].iter().rev()).map(|(a, b)| a * b).sum();
        }
        self.buf.copy_within(FRAME_SAMPLES.., 0);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// RMS of a signal, in dB.
    pub(crate) fn db(x: &[f32]) -> f32 {
        10.0 * (x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32).log10()
    }

    pub(crate) fn sine(freq: f32, rate: f32, n: usize, amp: f32) -> Vec<f32> {
        (0..n).map(|i| amp * (std::f32::consts::TAU * freq * i as f32 / rate).sin()).collect()
    }

    /// Runs `input` through an up-sampler, frame by frame.
    fn up(filter: &'static Lowpass, input: &[f32]) -> Vec<f32> {
        let mut u = Upsampler::new(filter);
        let mut out = Vec::new();
        for f in input.chunks_exact(filter.frame()) {
            let mut wide = [0.0; FRAME_SAMPLES];
            u.process(f, &mut wide);
            out.extend_from_slice(&wide);
        }
        out
    }

    fn down(filter: &'static Lowpass, input: &[f32]) -> Vec<f32> {
        let mut d = Downsampler::new(filter);
        let mut out = Vec::new();
        for f in input.chunks_exact(FRAME_SAMPLES) {
            let mut narrow = vec![0.0; filter.frame()];
            d.process(f.try_into().expect("a frame"), &mut narrow);
            out.extend_from_slice(&narrow);
        }
        out
    }

    /// Down: `pass` within 0.5 dB, `reject` (which would alias) 60 dB down.
    /// Up from `rate`: `pass` within 0.5 dB, its `images` 60 dB down.
    fn check(filter: &'static Lowpass, rate: f32, pass_hz: f32, reject_hz: f32, images: [f32; 2]) {
        let (pass, reject) = (sine(pass_hz, 48_000.0, 48_000, 0.5), sine(reject_hz, 48_000.0, 48_000, 0.5));
        let (p, r) = (down(filter, &pass), down(filter, &reject));
        let settled = |x: &[f32]| x[x.len() / 10..].to_vec();
        assert!((db(&settled(&p)) - db(&pass)).abs() < 0.5, "{pass_hz} Hz: {} dB of {}", db(&p), db(&pass));
        let leak = db(&settled(&r)) - db(&reject);
        assert!(leak < -60.0, "{reject_hz} Hz leaks at {leak} dB");
        let narrow = sine(pass_hz, rate, rate as usize, 0.5);
        let wide = up(filter, &narrow);
        let w = &wide[4_800..];
        assert!((db(w) - db(&narrow)).abs() < 0.5, "{pass_hz} Hz: {} dB of {}", db(w), db(&narrow));
        let at = |f: f32| crate::goertzel(w, f);
        assert!(at(pass_hz) > 0.45, "{}", at(pass_hz));
        for image in images {
            assert!(at(image) < 0.0005, "image at {image} Hz: {}", at(image));
        }
    }

    #[test]
    fn the_resampler_passes_1_khz_and_rejects_6_khz() {
        check(&TO_8K, 8_000.0, 1_000.0, 6_000.0, [7_000.0, 9_000.0]);
    }

    #[test]
    fn the_16_khz_resampler_passes_1_and_6_khz_and_rejects_10_khz() {
        check(&TO_16K, 16_000.0, 1_000.0, 10_000.0, [15_000.0, 17_000.0]);
        check(&TO_16K, 16_000.0, 6_000.0, 10_000.0, [10_000.0, 22_000.0]);
    }
}
