//! Comfort noise (RFC 3389, payload type 13 `CN/8000`) of a phone leg's
//! silence: a caller that suppresses its silence sends one CN packet
//! naming the level of its background noise (its first byte, in -dBov)
//! instead of audio; the leg makes white noise at that level, a 20 ms
//! frame per tick, until its next audio packet.
//!
//! The noise is a seeded xorshift generator (uniform, scaled to the RMS
//! the level names, 0 dBov being a full-scale square wave: RMS 1.0): no
//! allocation, no clock, no I/O. The spectral information a CN packet may
//! carry after its level byte is not used (white noise).

/// One leg's comfort noise.
pub(crate) struct ComfortNoise {
    /// The peak of the uniform noise; `None`: no comfort noise now.
    peak: Option<f32>,
    state: u32,
}

impl ComfortNoise {
    pub(crate) fn new() -> Self {
        Self { peak: None, state: 0x9E37_79B9 }
    }

    /// Starts (or changes) the noise at the level of a CN `payload`. False
    /// when it is empty (nothing changes).
    pub(crate) fn start(&mut self, payload: &[u8]) -> bool {
        let Some(level) = payload.first() else { return false };
        // RFC 3389 §3: the level is 0 to 127 -dBov (the top bit is reserved).
        let rms = 10f32.powf(-f32::from(level & 0x7F) / 20.0);
        self.peak = Some(rms * 3f32.sqrt());
        true
    }

    /// Stops the noise (an audio packet came).
    pub(crate) fn stop(&mut self) {
        self.peak = None;
    }

    /// Fills `out` with noise at the level; false (and `out` untouched) when
    /// there is no comfort noise now.
    pub(crate) fn fill(&mut self, out: &mut [f32]) -> bool {
        let Some(peak) = self.peak else { return false };
        for o in out {
            self.state ^= self.state << 13;
            self.state ^= self.state >> 17;
            self.state ^= self.state << 5;
            *o = peak * (self.state as f32 / u32::MAX as f32 * 2.0 - 1.0);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::test_signal::db;

    #[test]
    fn noise_has_the_level_a_cn_packet_names_until_it_stops() {
        let mut noise = ComfortNoise::new();
        let mut frame = [0.0f32; 960];
        assert!(!noise.fill(&mut frame), "no CN packet yet");
        assert!(!noise.start(&[]), "an empty CN payload is dropped");
        for level in [30u8, 50, 70] {
            assert!(noise.start(&[level]));
            for _ in 0..5 {
                assert!(noise.fill(&mut frame));
                let got = db(&frame);
                assert!((got + f32::from(level)).abs() < 0.5, "-{level} dBov asked, {got} dB made");
            }
        }
        noise.stop();
        assert!(!noise.fill(&mut frame));
    }
}
