//! Probe markers: a loud tone burst a probe talker sends at a known instant,
//! and the detector a probe listener runs on its decoded mix to find the
//! burst's onset to a millisecond or so.
//!
//! Each probe has its own frequency, above the band of the generator's
//! speech-like signal (which stays below 1.6 kHz), so a Goertzel filter at
//! that frequency hears the marker and nothing else. A probe talker also
//! listens for its own frequency in what it receives: hearing it is
//! self-echo, which N-minus-self mixing must never produce.

use tutti_mix::{FRAME_SAMPLES, goertzel, tone};

/// Most probe talkers (each needs its own frequency).
pub const MAX_PROBES: usize = 6;
/// Frames per marker burst (100 ms).
pub const MARKER_FRAMES: usize = 5;
/// Peak amplitude of a marker: ≈ −4 dBov RMS (RFC 6464 level 4), far louder
/// than speech, so the mixer's top-K selection picks it up at once.
pub const MARKER_AMPLITUDE: f32 = 0.9;
/// A frame whose marker-frequency amplitude exceeds this holds a marker.
pub const DETECT_THRESHOLD: f32 = 0.15;
/// A probe hearing its own frequency above this (−25 dB below its marker)
/// hears itself.
pub const SELF_ECHO_THRESHOLD: f32 = 0.05;
/// Samples per sub-block when locating an onset within a frame (2.5 ms).
const SUB_BLOCK: usize = 120;

/// The marker frequency of probe `probe` (< [`MAX_PROBES`]): 2.0, 2.45, 2.9 … kHz.
pub fn marker_freq(probe: usize) -> f32 {
    2000.0 + 450.0 * probe as f32
}

/// The PCM of a marker burst of probe `probe`: [`MARKER_FRAMES`] frames of
/// its tone starting at full amplitude on the first sample (a sharp onset).
pub fn marker_pcm(probe: usize) -> Vec<f32> {
    let f = marker_freq(probe);
    (0..MARKER_FRAMES).flat_map(|k| tone(f, MARKER_AMPLITUDE, (k * FRAME_SAMPLES) as u64)).collect()
}

/// A marker onset found in received audio.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Onset {
    /// Which probe's marker.
    pub probe: usize,
    /// Where it starts, in samples from the start of the frame just pushed
    /// (negative: in the frame before).
    pub offset_samples: i64,
}

/// Finds marker onsets in a stream of decoded frames.
#[derive(Debug, Clone)]
pub struct MarkerDetector {
    freqs: Vec<f32>,
    active: Vec<bool>,
    prev: Vec<f32>,
    /// Per probe, the largest frame amplitude ever seen at its frequency.
    peak: Vec<f32>,
}

impl MarkerDetector {
    /// A detector for probes `0..probes`.
    pub fn new(probes: usize) -> Self {
        let probes = probes.min(MAX_PROBES);
        Self {
            freqs: (0..probes).map(marker_freq).collect(),
            active: vec![false; probes],
            prev: vec![0.0; FRAME_SAMPLES],
            peak: vec![0.0; probes],
        }
    }

    /// The largest amplitude seen at `probe`'s frequency in any frame.
    pub fn peak(&self, probe: usize) -> f32 {
        self.peak.get(probe).copied().unwrap_or(0.0)
    }

    /// Takes the next decoded frame; returns the onsets that begin in it (or
    /// at the end of the frame before).
    pub fn push(&mut self, frame: &[f32]) -> Vec<Onset> {
        let mut onsets = Vec::new();
        for (probe, &f) in self.freqs.iter().enumerate() {
            let a = goertzel(frame, f);
            self.peak[probe] = self.peak[probe].max(a);
            if !self.active[probe] && a > DETECT_THRESHOLD {
                onsets.push(Onset { probe, offset_samples: locate_onset(&self.prev, frame, f) });
                self.active[probe] = true;
            } else if self.active[probe] && a < DETECT_THRESHOLD / 2.0 {
                self.active[probe] = false;
            }
        }
        self.prev.clear();
        self.prev.extend_from_slice(frame);
        onsets
    }
}

/// Where the tone at `f` starts in `prev ++ cur`, in samples relative to the
/// start of `cur`: the first 2.5 ms sub-block reaching half the tone's
/// amplitude, refined by how full that block is.
fn locate_onset(prev: &[f32], cur: &[f32], f: f32) -> i64 {
    let joined: Vec<f32> = prev.iter().chain(cur).copied().collect();
    let blocks: Vec<f32> = joined.chunks(SUB_BLOCK).map(|b| goertzel(b, f)).collect();
    let full = blocks.iter().copied().fold(0.0f32, f32::max);
    if full <= 0.0 {
        return 0;
    }
    let first = blocks.iter().position(|&a| a >= full / 2.0).unwrap_or(0);
    // The block before may hold the first few samples; so may this one only
    // partly: a block filled to fraction x reads ≈ x · full.
    let (block, fill) = match first.checked_sub(1).map(|i| blocks[i] / full) {
        Some(x) if x > 0.1 => (first - 1, x),
        _ => (first, (blocks[first] / full).min(1.0)),
    };
    let end = ((block + 1) * SUB_BLOCK) as f32;
    let start = end - fill * SUB_BLOCK as f32;
    start.round() as i64 - prev.len() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream of `frames` frames: low noise-like speech band content, and
    /// probe `probe`'s marker from absolute sample `at`.
    fn signal(frames: usize, probe: usize, at: usize) -> Vec<f32> {
        let mut s: Vec<f32> = (0..frames * FRAME_SAMPLES)
            .map(|i| 0.1 * ((i as f32 * 0.0231).sin() + (i as f32 * 0.0917).sin() * 0.5))
            .collect();
        for (k, x) in marker_pcm(probe).into_iter().enumerate() {
            if let Some(y) = s.get_mut(at + k) {
                *y += x;
            }
        }
        s
    }

    #[test]
    fn finds_the_onset_to_a_millisecond() {
        for at in [3 * FRAME_SAMPLES, 3 * FRAME_SAMPLES + 500, 4 * FRAME_SAMPLES - 30, 4 * FRAME_SAMPLES + 7] {
            let s = signal(12, 1, at);
            let mut d = MarkerDetector::new(3);
            let mut found = Vec::new();
            for (k, frame) in s.chunks(FRAME_SAMPLES).enumerate() {
                for o in d.push(frame) {
                    found.push((o.probe, (k * FRAME_SAMPLES) as i64 + o.offset_samples));
                }
            }
            assert_eq!(found.len(), 1, "at {at}: {found:?}");
            let (probe, onset) = found[0];
            assert_eq!(probe, 1);
            assert!((onset - at as i64).abs() <= 48, "at {at}: found {onset}");
        }
    }

    #[test]
    fn other_probes_and_speech_are_not_markers() {
        let s = signal(12, 2, 2000);
        let mut d = MarkerDetector::new(4);
        let found: Vec<Onset> = s.chunks(FRAME_SAMPLES).flat_map(|f| d.push(f)).collect();
        assert!(found.iter().all(|o| o.probe == 2), "{found:?}");
        assert_eq!(found.len(), 1);
        assert!(d.peak(0) < SELF_ECHO_THRESHOLD, "{}", d.peak(0));
        assert!(d.peak(1) < SELF_ECHO_THRESHOLD, "{}", d.peak(1));
        assert!(d.peak(2) > 0.8);
    }

    #[test]
    fn two_bursts_two_onsets() {
        let mut s = signal(40, 0, 1000);
        let later = signal(40, 0, 25_000);
        for (a, b) in s.iter_mut().zip(&later) {
            *a = (*a + *b) / 2.0;
        }
        let mut d = MarkerDetector::new(1);
        let found: Vec<Onset> = s.chunks(FRAME_SAMPLES).flat_map(|f| d.push(f)).collect();
        assert_eq!(found.len(), 2);
    }
}
