//! What is done to a selected speaker's voice before it is mixed: noise
//! suppression (RNNoise, via the pure-Rust `nnnoiseless`) and loudness
//! normalisation (a slow, bounded gain toward a target level).
//!
//! Both run only on the selected speakers' decoded frames (O(K) per tick,
//! never O(N)); the room's limiter stays the last stage of every mix.
//!
//! ```text
//! decode ─► [suppress: RNNoise, 2 × 480 samples, +10 ms delay] ─► [normalise: gain → target] ─► manual gain ─► Σ
//! ```

use nnnoiseless::DenoiseState;

use crate::dsp::{FRAME_SAMPLES, Pcm};

/// Whether a room suppresses noise in its speakers' voices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NoiseSuppression {
    /// For participants whose client does not suppress noise itself (plain
    /// RTP: phones, SIP gateways; see [`crate::Room::set_raw_source`]), not
    /// for the others (browsers suppress noise before they encode). Default.
    #[default]
    Auto,
    /// For every speaker.
    On,
    /// For nobody (a participant's own override still applies).
    Off,
}

impl NoiseSuppression {
    /// The name used in configuration and the API: `auto`, `on` or `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::On => "on",
            Self::Off => "off",
        }
    }

    /// Parses `auto`, `on` or `off`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "auto" => Some(Self::Auto),
            "on" => Some(Self::On),
            "off" => Some(Self::Off),
            _ => None,
        }
    }
}

/// Default loudness target: RMS of active speech, in dBFS.
pub const DEFAULT_LOUDNESS_TARGET_DBFS: f32 = -23.0;

/// The normaliser's gain never leaves ±this many dB.
pub const LOUDNESS_MAX_GAIN_DB: f32 = 15.0;

/// Frames quieter than this (dBFS RMS) never move the normaliser: pauses,
/// breathing and line noise keep the gain where speech left it.
pub const LOUDNESS_GATE_DBFS: f32 = -50.0;

/// ... nor do frames this many dB under the speaker's running speech level
/// (a loud caller's pauses, a noisy room between words).
const RELATIVE_GATE_DB: f32 = 20.0;

/// Time constant of the running speech level, in active frames (1.5 s of speech).
const LEVEL_FRAMES: f32 = 75.0;

/// Largest gain step per 20 ms frame, up (5 dB/s) and down (15 dB/s): slow
/// enough not to pump; down faster, so a caller who gets loud is caught
/// within a second (the limiter handles the peaks before that).
const STEP_UP_DB: f32 = 0.1;
const STEP_DOWN_DB: f32 = 0.3;

/// RNNoise works on 16-bit sample values.
const SCALE: f32 = 32_768.0;

/// One speaker's RNNoise state. While the speaker is not selected the
/// state is kept, not reset: RNNoise's recurrent layers carry its estimate
/// of this caller's noise (seconds of history), and a speaker who is
/// selected again is almost always the same caller in the same place, so
/// the first word after a pause is cleaned as well as the last one was; a
/// fresh state lets noise through for its first few hundred ms. What must
/// not be resumed is the 10 ms of signal it overlaps into the next output
/// (from the last frame before the gap): after a gap of more than 100 ms
/// it is flushed with 20 ms of zeros, which RNNoise treats as silence
/// without running its network (the noise estimate is untouched).
/// Measured (`tests/voice.rs`): RNNoise fresh on a noisy line barely
/// suppresses anything until it has heard speech, then 20-30 dB; a reset
/// at every selection would let each first word through noisy. The state is freed with the
/// speaker's decoder (after a minute unused).
pub struct NoiseSuppressor {
    state: Box<DenoiseState<'static>>,
    scratch: [f32; FRAME_SAMPLES],
}

impl std::fmt::Debug for NoiseSuppressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NoiseSuppressor")
    }
}

impl NoiseSuppressor {
    /// A fresh state (boxed: RNNoise's buffers are a few tens of KB).
    pub fn new() -> Box<Self> {
        Box::new(Self { state: DenoiseState::new(), scratch: [0.0; FRAME_SAMPLES] })
    }

    /// Suppresses noise in `pcm` in place (output delayed by 480 samples,
    /// RNNoise's look-ahead). Returns RNNoise's voice probability (0 to 1)
    /// of the frame's second half.
    pub fn process(&mut self, pcm: &mut Pcm) -> f32 {
        const HALF: usize = DenoiseState::FRAME_SIZE;
        let mut vad = 0.0;
        for (x, s) in pcm.iter().zip(self.scratch.iter_mut()) {
            // Non-finite samples (never from libopus) would poison the state for good.
            *s = if x.is_finite() { (x * SCALE).clamp(-SCALE, SCALE) } else { 0.0 };
        }
        for (input, output) in self.scratch.chunks_exact(HALF).zip(pcm.chunks_exact_mut(HALF)) {
            vad = self.state.process_frame(output, input);
        }
        pcm.iter_mut().for_each(|x| *x /= SCALE);
        vad
    }

    /// Forgets the signal of the last frame (after a gap), keeping the noise estimate.
    pub fn flush(&mut self) {
        let zeros = [0.0f32; DenoiseState::FRAME_SIZE];
        let mut out = [0.0f32; DenoiseState::FRAME_SIZE];
        // Two halves clear the analysis window and the overlap; two more let
        // RNNoise's input high-pass filter ring down (−60 dB below a full-scale past).
        for _ in 0..4 {
            self.state.process_frame(&mut out, &zeros);
        }
    }
}

/// A slow, bounded gain toward a target level. The speaker's level is the
/// power mean (RMS, in dBFS) of their active frames over the last ~1.5 s
/// of speech; the gain moves toward `target − level` by at most 0.1 dB a
/// frame up and 0.3 dB down, never beyond ±[`LOUDNESS_MAX_GAIN_DB`], and
/// does not move at all on a frame under [`LOUDNESS_GATE_DBFS`] or 20 dB
/// under the running level (pauses are not pumped up). Applied as a ramp
/// across the frame, so a change is never a step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Normaliser {
    /// Running mean power of active speech (linear, full scale = 1), `None` before the first.
    power: Option<f32>,
    /// Applied gain, dB.
    gain_db: f32,
}

impl Default for Normaliser {
    fn default() -> Self {
        Self { power: None, gain_db: 0.0 }
    }
}

impl Normaliser {
    /// The gain applied to the last frame, in dB.
    pub fn gain_db(&self) -> f32 {
        self.gain_db
    }

    /// The running speech level (dBFS RMS), once speech was heard.
    pub fn level_dbfs(&self) -> Option<f32> {
        self.power.map(|p| 10.0 * p.max(1e-12).log10())
    }

    /// Normalises `pcm` in place toward `target_dbfs`. Returns whether the
    /// frame counted as speech (and so could move the gain).
    pub fn process(&mut self, pcm: &mut [f32], target_dbfs: f32) -> bool {
        if pcm.is_empty() {
            return false;
        }
        let power = pcm.iter().map(|&x| if x.is_finite() { x * x } else { 0.0 }).sum::<f32>() / pcm.len() as f32;
        let db = 10.0 * power.max(1e-12).log10();
        let active = db >= LOUDNESS_GATE_DBFS && self.level_dbfs().is_none_or(|level| db >= level - RELATIVE_GATE_DB);
        let start = self.gain_db;
        if active {
            let mean = match self.power {
                // The first speech frame sets the level at once: no slow climb from nothing.
                None => power,
                Some(p) => p + (power - p) / LEVEL_FRAMES,
            };
            self.power = Some(mean);
            let level = 10.0 * mean.max(1e-12).log10();
            let wanted = (target_dbfs - level).clamp(-LOUDNESS_MAX_GAIN_DB, LOUDNESS_MAX_GAIN_DB);
            self.gain_db = start + (wanted - start).clamp(-STEP_DOWN_DB, STEP_UP_DB);
        }
        let (g0, g1) = (db_to_gain(start), db_to_gain(self.gain_db));
        if g0 == 1.0 && g1 == 1.0 {
            return active;
        }
        let step = (g1 - g0) / pcm.len() as f32;
        for (i, x) in pcm.iter_mut().enumerate() {
            *x *= g0 + step * (i + 1) as f32;
        }
        active
    }
}

fn db_to_gain(db: f32) -> f32 {
    10f32.powf(db / 20.0)
}

/// One speaker's voice processing state (made when first needed).
#[derive(Debug, Default)]
pub(crate) struct Voice {
    pub(crate) suppressor: Option<Box<NoiseSuppressor>>,
    pub(crate) normaliser: Normaliser,
    /// Tick of the last frame suppressed.
    pub(crate) suppressed_at: Option<u64>,
    /// Tick of the last frame normalised.
    pub(crate) normalised_at: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(seed: &mut u64, amp: f32) -> Pcm {
        let mut pcm = [0.0; FRAME_SAMPLES];
        for x in pcm.iter_mut() {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            *x = amp * ((*seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0);
        }
        pcm
    }

    fn rms_db(pcm: &[f32]) -> f32 {
        10.0 * (pcm.iter().map(|x| x * x).sum::<f32>() / pcm.len() as f32).max(1e-12).log10()
    }

    #[test]
    fn flush_forgets_the_signal_of_the_last_frame() {
        let mut s = NoiseSuppressor::new();
        let mut seed = 7;
        for _ in 0..20 {
            s.process(&mut noise(&mut seed, 0.5));
        }
        s.flush();
        // Zeros in: (next to) zeros out, no stale overlap of the loud noise.
        let mut z = [0.0; FRAME_SAMPLES];
        s.process(&mut z);
        assert!(rms_db(&z) < -75.0, "{} dBFS", rms_db(&z));
        // Without the flush, the first frame carries the old signal's tail.
        let mut t = NoiseSuppressor::new();
        for _ in 0..20 {
            t.process(&mut noise(&mut seed, 0.5));
        }
        let mut z = [0.0; FRAME_SAMPLES];
        t.process(&mut z);
        assert!(rms_db(&z) > -60.0, "{} dBFS", rms_db(&z));
    }

    #[test]
    fn normaliser_is_bounded_slow_and_frozen_in_pauses() {
        let mut n = Normaliser::default();
        // A quiet talker: a −45 dBFS sine. Wanted +22 dB, bounded to +15, reached slowly.
        let quiet: Vec<f32> = crate::dsp::tone(300.0, 0.0079, 0).to_vec();
        let mut gains = Vec::new();
        for _ in 0..300 {
            let mut f = quiet.clone();
            assert!(n.process(&mut f, -23.0));
            gains.push(n.gain_db());
        }
        assert!(gains.windows(2).all(|w| w[1] - w[0] <= STEP_UP_DB + 1e-4), "slow");
        assert!((n.gain_db() - LOUDNESS_MAX_GAIN_DB).abs() < 1e-3, "bounded at +15: {}", n.gain_db());
        // A pause of line noise at −60 dBFS: the gain does not move.
        let before = n.gain_db();
        let mut seed = 3;
        for _ in 0..200 {
            let mut f = noise(&mut seed, 0.0017);
            assert!(!n.process(&mut f, -23.0));
        }
        assert_eq!(n.gain_db(), before);
        // A loud talker (−17 dBFS) is brought down, to −23 give or take a dB.
        let mut n = Normaliser::default();
        let loud: Vec<f32> = crate::dsp::tone(300.0, 0.2, 0).to_vec();
        let mut out = loud.clone();
        for _ in 0..300 {
            out = loud.clone();
            n.process(&mut out, -23.0);
        }
        assert!((rms_db(&out) + 23.0).abs() < 1.0, "{} dBFS", rms_db(&out));
    }
}
