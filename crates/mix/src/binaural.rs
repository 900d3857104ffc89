//! A binaural room's render: each seat's voices through a head-related
//! impulse response (HRIR) pair, for listeners on headphones.
//!
//! A binaural room ([`crate::RoomConfig::binaural`]) seats its speakers as
//! a panned spatial room does ([`crate::spatial`]), but renders each seat
//! through the pair of impulse responses a dummy head measured from that
//! direction (the MIT KEMAR set; `binaural/README.md` gives its licence
//! and citation): the far ear hears a voice later (0.5 ms at the far seats)
//! and duller, not only quieter, so on headphones it sits outside the head.
//!
//! The work is per occupied seat, not per listener: the selected voices
//! are summed per seat first, then each seat with a voice this frame (or
//! the last, whose tail still rings) is convolved once per ear, so a tick
//! costs O(occupied seats) ≤ O(K) fixed FIRs of [`TAPS`] taps, whatever the
//! number of listeners. The filters are fixed and short (2.7 ms), so a
//! direct convolution on the mixer's 20 ms frame is cheaper than an FFT's
//! blocks and adds no latency; it vectorises as 2 × [`TAPS`] multiply-adds
//! over the frame.
//!
//! Each seat's stereo render is kept for the tick, so a speaker's
//! N-minus-self is the total less their seat's render: exact per channel,
//! their voice's tail from the previous frame included. The HRIRs are
//! normalised so that a seat's mono downmix has the panned seat's level
//! over the speech band ([`crate::mono_gain`]): a mono listener hears a
//! binaural room as loud as a panned one.

mod kemar;

use kemar::{HRIR, TAPS};

use crate::dsp::{FRAME_SAMPLES, Pcm};
use crate::spatial::{MAX_SEAT, SEATS, Stereo};

/// Samples of a seat's input kept from the previous frame for its FIR.
const HISTORY: usize = TAPS - 1;

/// The binaural render of one room: the voices of this frame summed per
/// seat, each seat's filter history, and each seat's render of this frame.
#[derive(Debug, Clone)]
pub struct Binaural {
    /// Each seat's input of this frame, preceded by the last [`HISTORY`]
    /// samples of the previous frame's.
    inputs: Box<[[f32; HISTORY + FRAME_SAMPLES]; SEATS]>,
    /// Voices added to each seat this frame.
    voices: [u8; SEATS],
    /// Seats whose history holds sound (a voice last frame).
    ringing: [bool; SEATS],
    /// Each seat's stereo render of this frame (valid where `rendered`).
    renders: Box<[Stereo; SEATS]>,
    rendered: [bool; SEATS],
}

impl Default for Binaural {
    fn default() -> Self {
        Self {
            inputs: Box::new([[0.0; HISTORY + FRAME_SAMPLES]; SEATS]),
            voices: [0; SEATS],
            ringing: [false; SEATS],
            renders: Box::new(std::array::from_fn(|_| Stereo::default())),
            rendered: [false; SEATS],
        }
    }
}

fn index(seat: i8) -> usize {
    (seat.clamp(-MAX_SEAT, MAX_SEAT) + MAX_SEAT) as usize
}

/// `out = h * x` over one frame, `x` preceded by [`HISTORY`] samples.
fn convolve(x: &[f32; HISTORY + FRAME_SAMPLES], h: &[f32; TAPS], out: &mut Pcm) {
    out.fill(0.0);
    for (k, &tap) in h.iter().enumerate() {
        let from = &x[HISTORY - k..HISTORY - k + FRAME_SAMPLES];
        for (o, &v) in out.iter_mut().zip(from) {
            *o += tap * v;
        }
    }
}

impl Binaural {
    /// Starts a frame: no voice on any seat yet.
    pub fn begin(&mut self) {
        for (n, input) in self.inputs.iter_mut().enumerate() {
            if self.ringing[n] || self.voices[n] > 0 {
                input.copy_within(FRAME_SAMPLES.., 0);
                input[HISTORY..].fill(0.0);
            }
            self.ringing[n] = self.voices[n] > 0;
        }
        self.voices = [0; SEATS];
        self.rendered = [false; SEATS];
    }

    /// Forgets every seat's history: a frame not rendered binaurally
    /// (forwarded, silent, or a panned tick) ends every tail.
    pub fn quiet(&mut self) {
        for n in 0..SEATS {
            if self.ringing[n] || self.voices[n] > 0 {
                self.inputs[n].fill(0.0);
            }
        }
        self.voices = [0; SEATS];
        self.ringing = [false; SEATS];
        self.rendered = [false; SEATS];
    }

    /// Adds `voice` on `seat` (clamped to the arc).
    pub fn add(&mut self, voice: &Pcm, seat: i8) {
        let n = index(seat);
        for (i, &x) in self.inputs[n][HISTORY..].iter_mut().zip(voice) {
            *i += x;
        }
        self.voices[n] = self.voices[n].saturating_add(1);
    }

    /// Renders every seat with a voice this frame or a tail from the last
    /// one into `out` (the sum of the seats' renders).
    #[allow(clippy::needless_range_loop)] // five per-seat arrays, indexed by seat
    pub fn render(&mut self, out: &mut Stereo) {
        *out = Stereo::default();
        for n in 0..SEATS {
            if self.voices[n] == 0 && !self.ringing[n] {
                continue;
            }
            let render = &mut self.renders[n];
            convolve(&self.inputs[n], &HRIR[n][0], &mut render.left);
            convolve(&self.inputs[n], &HRIR[n][1], &mut render.right);
            for ((o, r), (&l, &rr)) in
                out.left.iter_mut().zip(out.right.iter_mut()).zip(render.left.iter().zip(&render.right))
            {
                *o += l;
                *r += rr;
            }
            self.rendered[n] = true;
        }
    }

    /// What `own`, on `seat`, contributes to this frame's render: their
    /// seat's render when they are alone on it (their previous frame's tail
    /// included), else their frame alone through the seat's filters.
    fn own_render(&self, own: &Pcm, seat: i8, scratch: &mut Stereo) -> Option<&Stereo> {
        let n = index(seat);
        if self.voices[n] == 1 && self.rendered[n] {
            return Some(&self.renders[n]);
        }
        let mut x = [0.0; HISTORY + FRAME_SAMPLES];
        x[HISTORY..].copy_from_slice(own);
        convolve(&x, &HRIR[n][0], &mut scratch.left);
        convolve(&x, &HRIR[n][1], &mut scratch.right);
        None
    }

    /// Writes `total` (this frame's [`Binaural::render`]) without `own` (on
    /// `seat`) into `out`: a seated speaker's stereo N-minus-self.
    pub fn minus(&self, total: &Stereo, own: &Pcm, seat: i8, out: &mut Stereo) {
        let mut scratch = Stereo::default();
        let own = self.own_render(own, seat, &mut scratch).unwrap_or(&scratch);
        let outs = out.left.iter_mut().zip(out.right.iter_mut());
        for ((ol, or), ((&l, &r), (&xl, &xr))) in
            outs.zip(total.left.iter().zip(&total.right).zip(own.left.iter().zip(&own.right)))
        {
            *ol = l - xl;
            *or = r - xr;
        }
    }

    /// Writes `mono` (this frame's render downmixed) without `own` (on
    /// `seat`) into `out`: a seated speaker's mono N-minus-self.
    pub fn minus_mono(&self, mono: &Pcm, own: &Pcm, seat: i8, out: &mut Pcm) {
        let mut scratch = Stereo::default();
        let own = self.own_render(own, seat, &mut scratch).unwrap_or(&scratch);
        for ((o, &m), (&xl, &xr)) in out.iter_mut().zip(mono).zip(own.left.iter().zip(&own.right)) {
            *o = m - (xl + xr) / 2.0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn energy(x: &[f32]) -> f32 {
        x.iter().map(|v| v * v).sum()
    }

    #[test]
    fn the_far_left_seat_is_louder_and_earlier_left() {
        let [left, right] = &HRIR[index(-MAX_SEAT)];
        assert!(10.0 * (energy(left) / energy(right)).log10() > 6.0);
        let onset = |h: &[f32]| h.iter().position(|v| v.abs() > 0.1 * h.iter().fold(0.0f32, |m, v| m.max(v.abs())));
        let (l, r) = (onset(left).expect("onset"), onset(right).expect("onset"));
        assert!(r > l + 10, "right ear later: {l} {r}");
    }

    #[test]
    fn a_tail_rings_into_the_next_frame_and_quiet_ends_it() {
        let mut b = Binaural::default();
        let mut out = Stereo::default();
        let mut click = [0.0; FRAME_SAMPLES];
        click[FRAME_SAMPLES - 1] = 1.0;
        b.begin();
        b.add(&click, 2);
        b.render(&mut out);
        b.begin();
        b.render(&mut out);
        assert!(energy(&out.left) > 0.0, "the click's tail is in the next frame");
        assert_eq!(out.right[TAPS - 1], 0.0, "and no further than the filter");
        b.quiet();
        b.begin();
        b.render(&mut out);
        assert_eq!(energy(&out.left), 0.0);
    }
}
