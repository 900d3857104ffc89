//! Opus at 48 kHz with 20 ms frames: a (mono) decoder per talking
//! participant and an encoder per distinct output stream, mono or, for a
//! spatial room's stereo listeners, stereo.

use bytes::Bytes;
use opus::{Application, Bitrate, Channels};

use crate::MixError;
use crate::config::EncoderConfig;
use crate::dsp::{FRAME_SAMPLES, Pcm};
use crate::spatial::Stereo;

/// A stereo stream's bitrate, in percent of the mono streams' (two
/// channels of one voice stage cost Opus far less than twice one).
pub const STEREO_BITRATE_PERCENT: i32 = 125;

/// Sample rate of every stream in tutti.
pub const SAMPLE_RATE: u32 = 48_000;

/// Room for one encoded frame (libopus never writes more than 1275 bytes per frame).
const MAX_PACKET_BYTES: usize = 1500;

/// Why a received frame produced no audio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeFailure {
    /// The payload is not a valid Opus packet.
    Corrupt,
    /// A valid packet of another duration than 20 ms (tutti mixes 20 ms frames).
    WrongDuration,
}

/// An Opus decoder for one participant.
pub struct Decoder {
    inner: opus::Decoder,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Decoder")
    }
}

impl Decoder {
    /// A fresh decoder.
    pub fn new() -> Result<Self, MixError> {
        Ok(Self { inner: opus::Decoder::new(SAMPLE_RATE, Channels::Mono)? })
    }

    /// Forgets all history, as if newly created (used when a participant is
    /// decoded again after a long pause, so stale state is not continued).
    pub fn reset(&mut self) {
        // Resetting a valid decoder cannot fail; if it did, the next decode reports it.
        let _ = self.inner.reset_state();
    }

    /// Decodes one 20 ms packet into `out`.
    pub fn decode(&mut self, payload: &[u8], out: &mut Pcm) -> Result<(), DecodeFailure> {
        match opus::packet::get_nb_samples(payload, SAMPLE_RATE) {
            Ok(FRAME_SAMPLES) => {}
            Ok(_) => return Err(DecodeFailure::WrongDuration),
            Err(_) => return Err(DecodeFailure::Corrupt),
        }
        match self.inner.decode_float(payload, out, false) {
            Ok(FRAME_SAMPLES) => Ok(()),
            Ok(_) => Err(DecodeFailure::WrongDuration),
            Err(_) => Err(DecodeFailure::Corrupt),
        }
    }

    /// Conceals one lost frame: from the in-band FEC of `next` when given and
    /// usable, otherwise with packet-loss concealment.
    pub fn conceal(&mut self, next: Option<&[u8]>, out: &mut Pcm) {
        if let Some(next) = next
            && matches!(opus::packet::get_nb_samples(next, SAMPLE_RATE), Ok(FRAME_SAMPLES))
            && matches!(self.inner.decode_float(next, out, true), Ok(FRAME_SAMPLES))
        {
            return;
        }
        if !matches!(self.inner.decode_float(&[], out, false), Ok(FRAME_SAMPLES)) {
            out.fill(0.0);
        }
    }
}

/// An Opus encoder for one output stream.
pub struct Encoder {
    inner: opus::Encoder,
    buf: Box<[u8; MAX_PACKET_BYTES]>,
    /// Interleaved samples of a stereo encoder (`None`: mono).
    interleaved: Option<Box<[f32; 2 * FRAME_SAMPLES]>>,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Encoder")
    }
}

impl Encoder {
    /// An encoder configured for voice with `cfg`.
    pub fn new(cfg: &EncoderConfig) -> Result<Self, MixError> {
        Self::with_channels(cfg, false)
    }

    /// A stereo encoder for a spatial room's render, at
    /// [`STEREO_BITRATE_PERCENT`] of `cfg`'s bitrate.
    pub fn stereo(cfg: &EncoderConfig) -> Result<Self, MixError> {
        Self::with_channels(cfg, true)
    }

    fn with_channels(cfg: &EncoderConfig, stereo: bool) -> Result<Self, MixError> {
        let channels = if stereo { Channels::Stereo } else { Channels::Mono };
        let application = if stereo { Application::Audio } else { Application::Voip };
        let mut inner = opus::Encoder::new(SAMPLE_RATE, channels, application)?;
        inner.set_complexity(cfg.complexity)?;
        let bitrate = if stereo { cfg.bitrate_bps / 100 * STEREO_BITRATE_PERCENT } else { cfg.bitrate_bps };
        inner.set_bitrate(Bitrate::Bits(bitrate))?;
        // A stage of several voices, coded by SILK (the voice mode, which
        // in-band FEC needs), came out in the middle: SILK's stereo narrowed
        // far left and far right to 0 dB apart at 40 to 50 kb/s. CELT keeps
        // the stage (11.6 dB apart, as rendered): a stereo stream has two
        // channels always, the music mode and no FEC (concealment instead).
        let fec = cfg.inband_fec && !stereo;
        inner.set_inband_fec(fec)?;
        inner.set_packet_loss_perc(if fec { cfg.expected_loss_percent } else { 0 })?;
        if stereo {
            inner.set_force_channels(Some(Channels::Stereo))?;
            inner.set_signal(opus::Signal::Music)?;
        }
        let interleaved = stereo.then(|| Box::new([0.0; 2 * FRAME_SAMPLES]));
        Ok(Self { inner, buf: Box::new([0; MAX_PACKET_BYTES]), interleaved })
    }

    /// Whether this encoder codes two channels.
    pub fn is_stereo(&self) -> bool {
        self.interleaved.is_some()
    }

    /// Forgets all history (an encoder taken from the spare list for a new stream).
    pub fn reset(&mut self) {
        // Resetting a valid encoder cannot fail; if it did, the next encode reports it.
        let _ = self.inner.reset_state();
    }

    /// Changes libopus complexity (0 to 10; out-of-range values are clamped).
    /// Takes effect from the next frame, without resetting the stream.
    pub fn set_complexity(&mut self, complexity: i32) {
        // Setting a valid complexity on a valid encoder cannot fail; if it
        // did, the encoder keeps its previous complexity.
        let _ = self.inner.set_complexity(complexity.clamp(0, 10));
    }

    /// Makes the next frames (almost) independent of the previous ones
    /// (`OPUS_SET_PREDICTION_DISABLED`), so a decoder whose history comes
    /// from another stream recovers at once; costs bitrate efficiency.
    pub fn set_prediction_disabled(&mut self, disabled: bool) {
        // A valid encoder accepts this request; if not, prediction stays as it was.
        let _ = self.inner.set_prediction_disabled(disabled);
    }

    /// Encodes one 20 ms frame. On the (unexpected) event of a libopus
    /// failure the result is an empty payload, which the transport skips.
    /// A stereo encoder codes the frame in both channels (the middle seat).
    pub fn encode(&mut self, pcm: &Pcm) -> Bytes {
        let result = match &mut self.interleaved {
            None => self.inner.encode_float(pcm, &mut self.buf[..]),
            Some(both) => {
                for (i, &x) in pcm.iter().enumerate() {
                    both[2 * i] = x;
                    both[2 * i + 1] = x;
                }
                self.inner.encode_float(&both[..], &mut self.buf[..])
            }
        };
        self.packet(result)
    }

    /// Encodes one 20 ms stereo frame (a mono encoder codes its downmix).
    pub fn encode_stereo(&mut self, frame: &Stereo) -> Bytes {
        let result = match &mut self.interleaved {
            Some(both) => {
                frame.interleave(both);
                self.inner.encode_float(&both[..], &mut self.buf[..])
            }
            None => {
                let mut mono = [0.0; FRAME_SAMPLES];
                frame.downmix(&mut mono);
                self.inner.encode_float(&mono, &mut self.buf[..])
            }
        };
        self.packet(result)
    }

    /// The packet an encode wrote (empty when libopus failed).
    fn packet(&self, result: Result<usize, opus::Error>) -> Bytes {
        match result {
            Ok(n) => Bytes::copy_from_slice(&self.buf[..n]),
            Err(_) => Bytes::new(),
        }
    }
}
