//! Seats of a spatial room and the stereo render's arithmetic.
//!
//! A spatial room ([`crate::RoomConfig::spatial`]) places each speaker on
//! one of [`SEATS`] seats on an arc in front of the listener, numbered
//! −[`MAX_SEAT`] (far left) to +[`MAX_SEAT`] (far right), 0 the middle.
//! The placement belongs to the speaker, not to the listener, so the room
//! renders its mix once in stereo and every listener hears the same stage:
//! the cost stays O(K).
//!
//! Panning is constant-power over a 120° arc ([`seat_gains`]): the two
//! channels' powers sum to that of a mono voice played on both, and the
//! middle seat is exactly the mono voice in each ear, so a room switched to
//! spatial keeps its level. The mono render for listeners who did not ask
//! for stereo is the average of the two channels, gain
//! [`mono_gain`] (1 in the middle, −1.2 dB at the ends): what a stereo
//! listener's two channels average to, never a jump.

use crate::dsp::{FRAME_SAMPLES, Pcm};

/// Seats either side of the middle: seats run from −`MAX_SEAT` to +`MAX_SEAT`.
pub const MAX_SEAT: i8 = 4;

/// Seats on the arc.
pub const SEATS: usize = 2 * MAX_SEAT as usize + 1;

/// Half the arc's width: the far seats sit 60° off the middle.
const HALF_ARC: f32 = std::f32::consts::FRAC_PI_6;

/// Left and right gains of a voice in `seat` (clamped to the arc): constant
/// power, `l² + r² = 2`, so the middle seat is gain 1 in each channel.
pub fn seat_gains(seat: i8) -> (f32, f32) {
    let p = f32::from(seat.clamp(-MAX_SEAT, MAX_SEAT)) / f32::from(MAX_SEAT);
    let theta = std::f32::consts::FRAC_PI_4 + p * HALF_ARC;
    (std::f32::consts::SQRT_2 * theta.cos(), std::f32::consts::SQRT_2 * theta.sin())
}

/// Gain of a voice in `seat` in the mono render: the average of its two channels.
pub fn mono_gain(seat: i8) -> f32 {
    let (l, r) = seat_gains(seat);
    (l + r) / 2.0
}

/// A stable seat for an identity: the same person sits in the same place
/// for every listener, on every node and in every session (FNV-1a of the
/// identity's bytes).
pub fn default_seat(identity: &[u8]) -> i8 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in identity {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (h % SEATS as u64) as i8 - MAX_SEAT
}

/// The seat a speaker who prefers `preferred` takes when `taken` are held by
/// the other selected speakers: their own if free, else the nearest free
/// one (towards the middle on a tie), else their own (every seat is held).
pub fn place(preferred: i8, taken: impl Fn(i8) -> bool) -> i8 {
    let preferred = preferred.clamp(-MAX_SEAT, MAX_SEAT);
    if !taken(preferred) {
        return preferred;
    }
    let inward = if preferred > 0 { -1 } else { 1 };
    for d in 1..=2 * MAX_SEAT {
        for seat in [preferred + inward * d, preferred - inward * d] {
            if (-MAX_SEAT..=MAX_SEAT).contains(&seat) && !taken(seat) {
                return seat;
            }
        }
    }
    preferred
}

/// One 20 ms frame rendered in stereo, channel by channel.
#[derive(Debug, Clone)]
pub struct Stereo {
    /// The left channel.
    pub left: Pcm,
    /// The right channel.
    pub right: Pcm,
}

impl Default for Stereo {
    fn default() -> Self {
        Self { left: [0.0; FRAME_SAMPLES], right: [0.0; FRAME_SAMPLES] }
    }
}

impl Stereo {
    /// Adds `voice` placed at `seat`.
    pub fn add(&mut self, voice: &Pcm, seat: i8) {
        let (gl, gr) = seat_gains(seat);
        for ((l, r), &x) in self.left.iter_mut().zip(self.right.iter_mut()).zip(voice) {
            *l += gl * x;
            *r += gr * x;
        }
    }

    /// Writes this render without `own` (at `seat`) into `out`: what a
    /// seated speaker hears, each channel exactly N-minus-self.
    pub fn minus(&self, own: &Pcm, seat: i8, out: &mut Stereo) {
        let (gl, gr) = seat_gains(seat);
        let outs = out.left.iter_mut().zip(out.right.iter_mut());
        for (((ol, or), (&l, &r)), &x) in outs.zip(self.left.iter().zip(&self.right)).zip(own) {
            *ol = l - gl * x;
            *or = r - gr * x;
        }
    }

    /// The mono downmix: the two channels averaged.
    pub fn downmix(&self, out: &mut Pcm) {
        for ((o, &l), &r) in out.iter_mut().zip(&self.left).zip(&self.right) {
            *o = (l + r) / 2.0;
        }
    }

    /// Both channels interleaved (left first), as an encoder takes them.
    pub fn interleave(&self, out: &mut [f32; 2 * FRAME_SAMPLES]) {
        for (i, (&l, &r)) in self.left.iter().zip(&self.right).enumerate() {
            out[2 * i] = l;
            out[2 * i + 1] = r;
        }
    }
}

/// Adds `voice` at `gain` into `total`: a seated voice into the mono render.
pub fn accumulate_scaled(total: &mut Pcm, voice: &Pcm, gain: f32) {
    for (t, &x) in total.iter_mut().zip(voice) {
        *t += gain * x;
    }
}

/// Writes `total − gain·own` into `out`: a seated speaker's mono N-minus-self.
pub fn minus_scaled(total: &Pcm, own: &Pcm, gain: f32, out: &mut Pcm) {
    for ((o, &t), &x) in out.iter_mut().zip(total).zip(own) {
        *o = t - gain * x;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(x: f32) -> f32 {
        20.0 * x.log10()
    }

    #[test]
    fn the_far_seats_are_over_6_db_apart_and_the_middle_is_mono() {
        let (l, r) = seat_gains(-MAX_SEAT);
        assert!(db(l / r) > 6.0, "{l} {r}");
        let (l, r) = seat_gains(MAX_SEAT);
        assert!(db(r / l) > 6.0, "{l} {r}");
        let (l, r) = seat_gains(0);
        assert!((l - 1.0).abs() < 1e-6 && (r - 1.0).abs() < 1e-6);
        for seat in -MAX_SEAT..=MAX_SEAT {
            let (l, r) = seat_gains(seat);
            assert!((l * l + r * r - 2.0).abs() < 1e-5, "constant power at {seat}");
            assert!(db(mono_gain(seat)) > -1.5, "mono within 1.5 dB at {seat}");
        }
    }

    #[test]
    fn placement_keeps_a_free_seat_and_moves_to_the_nearest_free_one() {
        assert_eq!(place(2, |_| false), 2);
        assert_eq!(place(2, |s| s == 2), 1);
        assert_eq!(place(-2, |s| s == -2), -1);
        assert_eq!(place(0, |s| s == 0), 1);
        assert_eq!(place(4, |s| s >= 3), 2);
        assert_eq!(place(1, |_| true), 1);
        assert_eq!(place(100, |_| false), MAX_SEAT);
    }

    #[test]
    fn default_seats_are_stable_and_spread() {
        assert_eq!(default_seat(b"alice"), default_seat(b"alice"));
        let mut seen = [false; SEATS];
        for n in 0..200 {
            let s = default_seat(format!("user-{n}").as_bytes());
            assert!((-MAX_SEAT..=MAX_SEAT).contains(&s));
            seen[(s + MAX_SEAT) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s), "every seat used: {seen:?}");
    }
}
