//! What a participant is sent after a tick ([`Delivery`]), how the room
//! served its listeners ([`MixMode`]), and the encoded streams behind them:
//! the listeners' one and each selected speaker's N-minus-self.

use bytes::Bytes;

use crate::ParticipantId;
#[cfg(doc)]
use crate::Room;
use crate::binaural::Binaural;
use crate::codec::Encoder;
use crate::dsp::{Limiter, Pcm, mix_minus};
use crate::spatial::{Stereo, minus_scaled, mono_gain};

/// An empty payload, for the participants sent nothing.
static EMPTY: Bytes = Bytes::new();

/// What a source is sent: nothing, ever.
pub(super) static NOTHING: Delivery = Delivery::Nothing;

/// What one participant is sent after a tick (see [`Room::delivery_for`]).
///
/// The transport sends every non-empty one as the participant's next RTP
/// packet with the participant's own SSRC and sequence number, and the
/// timestamp `tick × 960 + offset`: time is the clock's, so the gaps of
/// `Nothing` are gaps the receiver fills with comfort noise, never delay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Send nothing this tick (DTX pause, or the forwarded speaker's frame is missing).
    Nothing,
    /// A one-byte Opus DTX frame: the receiver plays comfort noise until the next packet.
    Dtx(Bytes),
    /// The one selected speaker's own Opus frame, unchanged (the receiver's
    /// decoder is continued; only the RTP header is the listener's).
    Forward {
        /// Whose frame it is (for the RFC 6465 CSRC list and level).
        from: ParticipantId,
        /// Their Opus payload, shared.
        payload: Bytes,
    },
    /// An encoded mix: the listeners' shared one, or a speaker's N-minus-self.
    Mix(Bytes),
}

impl Delivery {
    /// The Opus payload to send (empty for [`Delivery::Nothing`]).
    pub fn payload(&self) -> &Bytes {
        match self {
            Delivery::Nothing => &EMPTY,
            Delivery::Dtx(p) | Delivery::Mix(p) | Delivery::Forward { payload: p, .. } => p,
        }
    }

    /// Whether nothing is to be sent.
    pub fn is_nothing(&self) -> bool {
        matches!(self, Delivery::Nothing)
    }
}

/// How the room served its listeners in a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MixMode {
    /// Nobody selected: DTX frames (or, with `dtx` off, see [`MixMode::Mix`]).
    #[default]
    Silent,
    /// One speaker, forwarded to the listeners.
    Forward(ParticipantId),
    /// Decode the speakers, encode the mix (listeners) and each N-minus-self.
    Mix,
}

#[derive(Debug)]
pub(super) struct Stream {
    pub(super) encoder: Encoder,
    /// The limiter (linked over both channels of a stereo stream).
    pub(super) limiter: Limiter,
    pub(super) payload: Bytes,
}

/// What a spatial tick rendered: the mono mix every stream can take, and
/// the stereo one when any stereo stream is encoded.
pub(super) struct Render<'a> {
    pub(super) mono: &'a Pcm,
    pub(super) stereo: Option<&'a Stereo>,
    /// The binaural render's seats, when `stereo` is binaural.
    pub(super) binaural: Option<&'a Binaural>,
}

#[derive(Debug)]
pub(super) struct Selected {
    pub(super) id: ParticipantId,
    pub(super) stream: Stream,
    /// What this speaker is sent after the last tick.
    pub(super) out: Delivery,
    /// Their stream was not encoded last tick (they were the only speaker).
    pub(super) idle: bool,
    /// A source ([`Room::add_source`]) or a remote ([`Room::add_remote`]):
    /// never sent anything, so never encoded for.
    pub(super) source: bool,
    /// Their seat in a spatial room (placed at selection, kept while they
    /// are selected; `None` until placed).
    pub(super) seat: Option<i8>,
}

impl Stream {
    pub(super) fn new(encoder: Encoder, limiter: Limiter) -> Self {
        Self { encoder, limiter, payload: Bytes::new() }
    }

    /// Encodes a spatial render without `own` (at `seat`): in stereo when
    /// this stream is stereo and the render has a stereo mix, else in mono.
    pub(super) fn encode_render(&mut self, render: &Render<'_>, own: Option<(&Pcm, i8)>) {
        match render.stereo {
            Some(stereo) if self.encoder.is_stereo() => {
                let mut mix = stereo.clone();
                match (own, render.binaural) {
                    (Some((own, seat)), Some(binaural)) => binaural.minus(stereo, own, seat, &mut mix),
                    (Some((own, seat)), None) => stereo.minus(own, seat, &mut mix),
                    (None, _) => {}
                }
                self.limiter.process_pair(&mut mix.left, &mut mix.right);
                self.payload = self.encoder.encode_stereo(&mix);
            }
            _ => {
                let mut mix = *render.mono;
                match (own, render.binaural) {
                    (Some((own, seat)), Some(binaural)) => binaural.minus_mono(render.mono, own, seat, &mut mix),
                    (Some((own, seat)), None) => minus_scaled(render.mono, own, mono_gain(seat), &mut mix),
                    (None, _) => {}
                }
                self.limiter.process(&mut mix);
                self.payload = self.encoder.encode(&mix);
            }
        }
    }

    /// Encodes the listeners' stereo render (this stream is the stereo
    /// listeners') and returns it as limited, for the mono listeners' stream
    /// to take its downmix: what a stereo listener's two channels average to.
    pub(super) fn encode_stereo_listeners(&mut self, render: &Stereo) -> Stereo {
        let mut mix = render.clone();
        self.limiter.process_pair(&mut mix.left, &mut mix.right);
        self.payload = self.encoder.encode_stereo(&mix);
        mix
    }

    pub(super) fn encode(&mut self, total: &Pcm, own: Option<&Pcm>) {
        let mut mix = *total;
        if let Some(own) = own {
            mix_minus(total, own, &mut mix);
        }
        self.limiter.process(&mut mix);
        self.payload = self.encoder.encode(&mix);
    }
}
