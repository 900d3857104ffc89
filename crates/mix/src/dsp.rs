//! The arithmetic of a tick: levels, sums, N-minus-self and the limiter.
//!
//! Pure functions on 20 ms frames of f32 samples (full scale = ±1.0), so the
//! invariants can be property-tested without a codec.

/// Samples per channel in one 20 ms frame at 48 kHz.
pub const FRAME_SAMPLES: usize = 960;

/// One mono 20 ms frame.
pub type Pcm = [f32; FRAME_SAMPLES];

/// RFC 6464 level (−dBov, 0 = full scale, 127 = silence) of a frame, from its RMS.
pub fn level_of(pcm: &[f32]) -> u8 {
    if pcm.is_empty() {
        return 127;
    }
    let energy: f32 = pcm.iter().map(|&x| if x.is_finite() { x * x } else { 0.0 }).sum();
    let rms = (energy / pcm.len() as f32).sqrt();
    if rms <= 0.0 {
        return 127;
    }
    let dbov = -20.0 * rms.log10();
    // `as` saturates on floats: negatives become 0, the cap keeps 127 the top.
    (dbov.round() as u8).min(127)
}

/// Adds `frame` into `total`.
pub fn accumulate(total: &mut [f32], frame: &[f32]) {
    for (t, &x) in total.iter_mut().zip(frame) {
        *t += x;
    }
}

/// Writes `total − own` into `out`: what a selected speaker hears.
pub fn mix_minus(total: &[f32], own: &[f32], out: &mut [f32]) {
    for ((o, &t), &x) in out.iter_mut().zip(total).zip(own) {
        *o = t - x;
    }
}

/// A 20 ms frame of a sine tone: `freq` Hz, peak `amplitude`, starting at
/// absolute sample `start` of a continuous tone (so consecutive frames join).
pub fn tone(freq: f32, amplitude: f32, start: u64) -> Pcm {
    let mut pcm = [0.0; FRAME_SAMPLES];
    let step = std::f64::consts::TAU * f64::from(freq) / 48_000.0;
    for (i, x) in pcm.iter_mut().enumerate() {
        *x = amplitude * ((start + i as u64) as f64 * step).sin() as f32;
    }
    pcm
}

/// Amplitude of the `freq` Hz component of `samples` (48 kHz), by the
/// Goertzel algorithm: a sine of peak A at `freq` reads ≈ A.
pub fn goertzel(samples: &[f32], freq: f32) -> f32 {
    if samples.is_empty() {
        return 0.0;
    }
    let w = std::f64::consts::TAU * f64::from(freq) / 48_000.0;
    let coeff = 2.0 * w.cos();
    let (mut s1, mut s2) = (0.0f64, 0.0f64);
    for &x in samples {
        let s0 = f64::from(x) + coeff * s1 - s2;
        s2 = s1;
        s1 = s0;
    }
    let power = s1 * s1 + s2 * s2 - coeff * s1 * s2;
    (2.0 * power.max(0.0).sqrt() / samples.len() as f64) as f32
}

/// Output ceiling of the limiter's gain stage (−1 dBFS).
const CEILING: f32 = 0.891;
/// Where the final soft saturator starts bending (just above the ceiling).
const KNEE: f32 = 0.9;
/// Samples over which a gain reduction ramps in (1 ms).
const ATTACK_SAMPLES: usize = 48;
/// Share of the way back to unity gain recovered per frame (~200 ms).
const RELEASE_PER_FRAME: f32 = 0.1;

/// A per-stream peak limiter: smooth gain reduction when a frame's peak would
/// exceed −1 dBFS, then a soft saturator that maps any finite input into
/// (−1, 1) with a continuous slope. Output never wraps and never hard-clips;
/// non-finite samples become 0.
#[derive(Debug, Clone)]
pub struct Limiter {
    gain: f32,
}

impl Default for Limiter {
    fn default() -> Self {
        Self { gain: 1.0 }
    }
}

impl Limiter {
    /// Current gain (1.0 = no reduction).
    pub fn gain(&self) -> f32 {
        self.gain
    }

    /// Limits `frame` in place.
    pub fn process(&mut self, frame: &mut [f32]) {
        let peak = finite_peak(frame);
        self.apply(frame, peak);
    }

    /// Limits the two channels of a stereo frame in place, linked: one gain
    /// from the louder channel's peak for both, so a loud voice on one side
    /// does not move the others across the stage.
    pub fn process_pair(&mut self, left: &mut [f32], right: &mut [f32]) {
        let peak = finite_peak(left).max(finite_peak(right));
        let gain = self.gain;
        self.apply(left, peak);
        self.gain = gain;
        self.apply(right, peak);
    }

    fn apply(&mut self, frame: &mut [f32], peak: f32) {
        let wanted = if peak > CEILING { CEILING / peak } else { 1.0 };
        let start = self.gain;
        if wanted < start {
            // Attack: ramp down over the first millisecond, then hold.
            let step = (wanted - start) / ATTACK_SAMPLES as f32;
            for (i, x) in frame.iter_mut().enumerate() {
                let g = if i < ATTACK_SAMPLES { start + step * (i + 1) as f32 } else { wanted };
                *x = soft_saturate(*x * g);
            }
            self.gain = wanted;
        } else {
            // Release: move part of the way back towards `wanted` across the frame.
            let end = start + (wanted - start) * RELEASE_PER_FRAME;
            let step = (end - start) / frame.len().max(1) as f32;
            for (i, x) in frame.iter_mut().enumerate() {
                *x = soft_saturate(*x * (start + step * (i + 1) as f32));
            }
            self.gain = end;
        }
    }
}

/// The largest magnitude in `frame`, its non-finite samples zeroed.
fn finite_peak(frame: &mut [f32]) -> f32 {
    let mut peak = 0.0f32;
    for x in frame.iter_mut() {
        if !x.is_finite() {
            *x = 0.0;
        }
        peak = peak.max(x.abs());
    }
    peak
}

/// Identity below the knee; above it a tanh curve that approaches ±1 and never
/// reaches it, with slope 1 at the knee (no corner, no hard clip).
#[inline]
fn soft_saturate(x: f32) -> f32 {
    let a = x.abs();
    if a <= KNEE {
        return x;
    }
    let span = 1.0 - KNEE;
    let y = KNEE + span * ((a - KNEE) / span).tanh();
    // tanh rounds to 1.0 for large arguments in f32: stay strictly inside.
    y.min(0.999_99).copysign(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sine(freq: f32, amp: f32) -> Vec<f32> {
        (0..FRAME_SAMPLES).map(|i| amp * (2.0 * std::f32::consts::PI * freq * i as f32 / 48_000.0).sin()).collect()
    }

    #[test]
    fn level_matches_rfc6464_scale() {
        assert_eq!(level_of(&[0.0; FRAME_SAMPLES]), 127);
        assert_eq!(level_of(&[1.0; FRAME_SAMPLES]), 0);
        // A full-scale sine has RMS 1/sqrt(2): 3 dB below full scale.
        assert_eq!(level_of(&sine(440.0, 1.0)), 3);
        assert_eq!(level_of(&sine(440.0, 0.01)), 43);
        assert_eq!(level_of(&[1e-9; FRAME_SAMPLES]), 127);
    }

    #[test]
    fn goertzel_reads_a_tones_amplitude() {
        let mut signal = Vec::new();
        for n in 0..10 {
            let a = tone(440.0, 0.3, n * FRAME_SAMPLES as u64);
            let b = tone(880.0, 0.1, n * FRAME_SAMPLES as u64);
            signal.extend(a.iter().zip(&b).map(|(x, y)| x + y));
        }
        assert!((goertzel(&signal, 440.0) - 0.3).abs() < 0.01);
        assert!((goertzel(&signal, 880.0) - 0.1).abs() < 0.01);
        assert!(goertzel(&signal, 660.0) < 0.01);
    }

    #[test]
    fn limiter_leaves_quiet_audio_untouched() {
        let input = sine(440.0, 0.5);
        let mut out = input.clone();
        Limiter::default().process(&mut out);
        assert_eq!(out, input);
    }

    #[test]
    fn limiter_reduces_gain_smoothly_and_recovers() {
        let mut lim = Limiter::default();
        let input = sine(440.0, 4.0);
        let mut loud = input.clone();
        lim.process(&mut loud);
        assert!(lim.gain() < 0.25);
        // No jump between adjacent samples beyond the input's own slope plus
        // what the 1 ms gain ramp adds (peak × gain change per sample).
        let step = |f: &[f32]| f.windows(2).map(|w| (w[1] - w[0]).abs()).fold(0.0, f32::max);
        let bound = step(&input) + 4.0 * (1.0 - lim.gain()) / ATTACK_SAMPLES as f32;
        assert!(step(&loud) <= bound, "step {} > {bound}", step(&loud));
        // After the attack, the output sits under the ceiling.
        assert!(loud[ATTACK_SAMPLES..].iter().all(|x| x.abs() <= CEILING + 1e-4));
        for _ in 0..100 {
            lim.process(&mut sine(440.0, 0.1));
        }
        assert!(lim.gain() > 0.99, "released to {}", lim.gain());
    }

    proptest! {
        /// Each speaker's pre-limiter mix is the sum of the other selected
        /// speakers, and holds nothing of their own signal.
        #[test]
        fn mix_minus_is_the_sum_of_the_others(
            frames in prop::collection::vec(prop::collection::vec(-4.0f32..4.0, FRAME_SAMPLES), 1..8)
        ) {
            let mut total = vec![0.0f32; FRAME_SAMPLES];
            for f in &frames {
                accumulate(&mut total, f);
            }
            let mut out = vec![0.0f32; FRAME_SAMPLES];
            for (k, own) in frames.iter().enumerate() {
                mix_minus(&total, own, &mut out);
                for i in 0..FRAME_SAMPLES {
                    let others: f32 = frames.iter().enumerate().filter(|(j, _)| *j != k).map(|(_, f)| f[i]).sum();
                    let magnitude: f32 = frames.iter().map(|f| f[i].abs()).sum();
                    // f32 rounding of a sum of up to 8 terms, relative to their magnitude.
                    let tolerance = 1e-6 * magnitude.max(1.0) * frames.len() as f32;
                    prop_assert!((out[i] - others).abs() <= tolerance,
                        "speaker {k} sample {i}: {} vs {}", out[i], others);
                }
            }
        }

        /// Whatever goes in, the limiter's output stays strictly inside (−1, 1).
        #[test]
        fn limiter_never_leaves_range(
            frames in prop::collection::vec(prop::collection::vec(prop::num::f32::ANY, FRAME_SAMPLES), 1..6)
        ) {
            let mut lim = Limiter::default();
            for mut f in frames {
                lim.process(&mut f);
                for x in f {
                    prop_assert!(x.is_finite() && x.abs() < 1.0, "{x}");
                }
            }
        }

        /// A saturating sum keeps the sign: no wrap-around.
        #[test]
        fn limiter_preserves_sign(x in -1e6f32..1e6) {
            let mut f = vec![x; FRAME_SAMPLES];
            Limiter::default().process(&mut f);
            for y in f {
                prop_assert!(y == 0.0 && x == 0.0 || y.signum() == x.signum());
            }
        }
    }
}
