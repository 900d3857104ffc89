//! Who talks when: the ITU-T P.59 on/off model of conversational speech, and
//! a small seeded random number generator so every run can be replayed.

/// P.59 mean talkspurt, in ms.
pub const MEAN_TALKSPURT_MS: f64 = 854.0;
/// P.59 mean pause, in ms.
pub const MEAN_PAUSE_MS: f64 = 456.0;
/// Milliseconds per frame.
const FRAME_MS: f64 = 20.0;

/// SplitMix64: tiny, fast, good enough for talk patterns and jitter of
/// schedules; seeded, so a run is reproducible.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1]: never 0, so `ln` is finite.
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    /// Exponentially distributed with the given mean.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * self.unit().ln()
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// One talker's on/off state, advanced one 20 ms frame at a time: talkspurts
/// and pauses of exponential length (P.59 means 854 ms and 456 ms), so a
/// talker is active about 65 % of the time. (P.59's double talk, 226 ms on
/// average, emerges from independent talkers overlapping; it is not drawn.)
#[derive(Debug, Clone)]
pub struct TalkModel {
    rng: Rng,
    talking: bool,
    /// Frames left in the current state.
    left: u32,
}

impl TalkModel {
    /// A talker seeded with `seed`; it starts in a talkspurt or a pause with
    /// P.59's proportions, partway through it.
    pub fn new(seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let talking = rng.unit() < MEAN_TALKSPURT_MS / (MEAN_TALKSPURT_MS + MEAN_PAUSE_MS);
        let mean = if talking { MEAN_TALKSPURT_MS } else { MEAN_PAUSE_MS };
        let left = frames(rng.exponential(mean));
        Self { rng, talking, left }
    }

    /// Whether the next frame is speech; advances by one frame.
    pub fn next_frame(&mut self) -> bool {
        while self.left == 0 {
            self.talking = !self.talking;
            let mean = if self.talking { MEAN_TALKSPURT_MS } else { MEAN_PAUSE_MS };
            self.left = frames(self.rng.exponential(mean));
        }
        self.left -= 1;
        self.talking
    }
}

/// A duration in ms as whole frames (at least one).
fn frames(ms: f64) -> u32 {
    ((ms / FRAME_MS).round() as u32).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_deterministic_and_spread() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..10 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mean: f64 = (0..100_000).map(|_| a.unit()).sum::<f64>() / 100_000.0;
        assert!((mean - 0.5).abs() < 0.01, "{mean}");
        let m: f64 = (0..100_000).map(|_| a.exponential(10.0)).sum::<f64>() / 100_000.0;
        assert!((m - 10.0).abs() < 0.2, "{m}");
    }

    #[test]
    fn talkspurts_and_pauses_have_p59_means() {
        let mut t = TalkModel::new(42);
        let (mut spurts, mut pauses) = (Vec::new(), Vec::new());
        let mut run = 0u32;
        let mut prev = t.next_frame();
        for _ in 0..500_000 {
            let now = t.next_frame();
            run += 1;
            if now != prev {
                if prev {
                    spurts.push(run)
                } else {
                    pauses.push(run)
                }
                run = 0;
                prev = now;
            }
        }
        let mean_ms = |v: &[u32]| v.iter().map(|&f| f64::from(f) * 20.0).sum::<f64>() / v.len() as f64;
        // Rounding to whole frames adds up to a frame; allow 5 %.
        assert!((mean_ms(&spurts) - 854.0).abs() < 43.0, "talkspurt {}", mean_ms(&spurts));
        assert!((mean_ms(&pauses) - 456.0).abs() < 23.0, "pause {}", mean_ms(&pauses));
    }
}
