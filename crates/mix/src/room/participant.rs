//! One participant's state and its per-frame work: decoding this tick's
//! frame once (concealing a lost one, processing a speaker's voice, applying
//! the gain) and measuring the level of frames that carry none. Also a
//! remote's frame as handed in ([`RemoteFeed`]), its input in place of a
//! jitter buffer.

use bytes::Bytes;

use super::channel::ChannelId;
use crate::ParticipantId;
#[cfg(doc)]
use crate::Room;
use crate::codec::{DecodeFailure, Decoder};
use crate::config::RoomConfig;
use crate::dsp::{FRAME_SAMPLES, Pcm, level_of};
use crate::jitter::{Frame, JitterBuffer, Playout};
use crate::phone::{InputCodec, NarrowDecoder, Reencoder};
use crate::probe::{Activity, inspect};
use crate::voice::{NoiseSuppression, NoiseSuppressor, Voice};

/// A participant whose packets carry no RFC 6464 level, who is not talking
/// and whose packets do not say they are silent (CELT-only audio, or the
/// SILK VAD flag set on noise) is decoded to measure their level once in
/// this many ticks, not every tick.
const MEASURE_EVERY_TICKS: u64 = 4;

/// ... and one whose packets' SILK VAD flag says silence, once in this many
/// (320 ms): libopus' VAD misses very quiet speech (−55 dBov) that the level
/// threshold counts as talking; once measured as talking, a participant is
/// decoded every tick until they stop.
const MEASURE_SILENT_EVERY_TICKS: u64 = 16;

/// An unlevelled participant who is talking but not selected, while every
/// speaker seat is taken, is decoded every tick only while their loudness
/// is within this many dB of what it takes to challenge the weakest speaker
/// (that speaker's loudness plus the hysteresis); further below (a noisy
/// microphone that keeps them "talking" under real speakers) they are
/// measured like a silent one, one tick in [`MEASURE_EVERY_TICKS`], and at
/// a voice onset: nothing the selection could use is decoded.
pub(super) const CHALLENGE_MARGIN_DB: f32 = 20.0;

/// A participant not decoded for this many ticks starts from a fresh decoder
/// state rather than continuing a stale one (100 ms).
const DECODER_RESET_GAP_TICKS: u64 = 5;

/// Largest per-participant gain accepted (+12 dB).
pub const MAX_GAIN: f32 = 4.0;

/// A participant's decoder, for the codec its frames are in.
#[derive(Debug)]
pub(super) enum FrameDecoder {
    Opus(Decoder),
    G711(Box<NarrowDecoder>),
}

impl FrameDecoder {
    pub(super) fn reset(&mut self) {
        match self {
            Self::Opus(d) => d.reset(),
            Self::G711(d) => d.reset(),
        }
    }

    pub(super) fn decode(&mut self, payload: &[u8], out: &mut Pcm) -> Result<(), DecodeFailure> {
        match self {
            Self::Opus(d) => d.decode(payload, out),
            Self::G711(d) => d.decode(payload, out),
        }
    }

    /// A lost frame: Opus conceals (or decodes the next packet's FEC); G.711
    /// repeats the last frame, fading.
    pub(super) fn conceal(&mut self, next: Option<&[u8]>, out: &mut Pcm) {
        match self {
            Self::Opus(d) => d.conceal(next, out),
            Self::G711(d) => d.conceal(out),
        }
    }
}

#[derive(Debug)]
pub(super) struct DecodeState {
    pub(super) decoder: FrameDecoder,
    /// Post-gain samples of tick `decoded_at`.
    pub(super) pcm: Box<Pcm>,
    pub(super) decoded_at: Option<u64>,
}

#[derive(Debug)]
pub(super) struct Participant {
    pub(super) id: ParticipantId,
    pub(super) jitter: JitterBuffer,
    pub(super) muted: bool,
    pub(super) gain: f32,
    pub(super) gain_db: f32,
    /// This tick's frame, kept from phase A for decoding in phase C.
    pub(super) pending: Playout,
    /// A local talker not seated, with a selection from outside
    /// ([`Room::fill_free_seats`]): the frame it sent this tick, kept for
    /// the next, when a selection across nodes (made of this tick's
    /// candidates) may seat it; then its onset is played a tick late rather
    /// than lost. Empty otherwise.
    pub(super) unplayed: Playout,
    /// This tick: the frame `unplayed` kept from the tick before.
    pub(super) onset: Playout,
    /// While seated a tick late (its onset kept, see `unplayed`): this
    /// tick's own frame, played at the next tick; `pending` holds the one
    /// from the tick before. `None`: played as it comes.
    pub(super) lagged: Option<Playout>,
    pub(super) dec: Option<Box<DecodeState>>,
    /// Smoothed loudness in dB above the silence floor (127 − level + gain).
    pub(super) loudness: f32,
    /// This tick's level (127 when none).
    pub(super) level: u8,
    pub(super) last_active: Option<u64>,
    pub(super) talking: bool,
    /// Last tick an unlevelled frame of theirs was decoded to measure it.
    pub(super) measured_at: Option<u64>,
    /// The previous unlevelled frame said it was silent (DTX or VAD flag 0).
    pub(super) probed_silent: bool,
    /// Index in `Room::selected` when a selected speaker.
    pub(super) slot: Option<usize>,
    /// Their client does not suppress noise itself (plain RTP): `auto` suppresses it here.
    pub(super) raw_source: bool,
    /// Noise suppression for them, over the room's setting (`None`: the room's).
    pub(super) suppress: Option<bool>,
    /// Loudness normalisation for them, over the room's setting (`None`: the room's).
    pub(super) normalise: Option<bool>,
    /// Their voice processing state, made at their first processed frame.
    pub(super) voice: Option<Box<Voice>>,
    pub(super) decoded: u64,
    pub(super) concealed: u64,
    pub(super) decode_errors: u64,
    pub(super) decoder_resets: u64,
    /// A source ([`Room::add_source`]): heard, sent nothing.
    pub(super) source: bool,
    /// A remote ([`Room::add_remote`]): heard, sent nothing, its frames
    /// handed in per tick (`feed`) instead of through the jitter buffer. A
    /// flag beside the others a tick reads, so that locals never load `feed`.
    pub(super) remote: bool,
    /// A remote's frame for the next tick (`Some` for remotes only).
    pub(super) feed: Option<Box<RemoteFeed>>,
    /// Heard on this node only: never one of its candidates for the
    /// selection across nodes ([`Room::keep_local`]).
    pub(super) local: bool,
    /// Their whisper channel, and whether they whisper in it (else they listen).
    pub(super) channel: Option<(ChannelId, bool)>,
    /// What their frames are coded in ([`Room::set_input_codec`]).
    pub(super) codec: InputCodec,
    /// A G.711 participant's frames as Opus, where Opus must be sent on
    /// (made at the first such frame).
    pub(super) reencoder: Option<Box<Reencoder>>,
    /// Their seat in a spatial room, as preferred ([`Room::set_seat`]).
    pub(super) seat: i8,
    /// They take the stereo render in a spatial room ([`Room::set_stereo`]).
    pub(super) stereo: bool,
}

impl DecodeState {
    pub(super) fn new(codec: InputCodec) -> Option<Box<Self>> {
        let decoder = match codec {
            // Fails only when libopus cannot allocate: the participant is
            // then not decoded this tick.
            InputCodec::Opus => FrameDecoder::Opus(Decoder::new().ok()?),
            InputCodec::G711(law) => FrameDecoder::G711(Box::new(NarrowDecoder::new(law))),
        };
        Some(Box::new(Self { decoder, pcm: Box::new([0.0; FRAME_SAMPLES]), decoded_at: None }))
    }
}

impl Participant {
    /// How it ranks in the speaker selection: its loudness; a source
    /// ([`Room::add_source`]) above everyone while it sounds, so that a
    /// file played into the room is always heard.
    pub(super) fn rank(&self) -> f32 {
        if self.source { f32::INFINITY } else { self.loudness }
    }

    /// This tick's frame (`own`: the one it sent this tick, which a speaker
    /// played a tick late holds back; else the one played) as Opus: as it
    /// came, or a G.711 frame encoded (once per frame). `None` when there
    /// is no frame, or its encoder cannot be made.
    pub(super) fn opus_frame(&mut self, own: bool) -> Option<Bytes> {
        let frame = if own { self.lagged.as_ref().unwrap_or(&self.pending) } else { &self.pending };
        let Playout::Frame(f) = frame else { return None };
        let InputCodec::G711(law) = self.codec else { return Some(f.payload.clone()) };
        let reencoder = match &mut self.reencoder {
            Some(r) => r,
            None => self.reencoder.insert(Box::new(Reencoder::new(law).ok()?)),
        };
        reencoder.opus(f.timestamp, &f.payload)
    }

    /// The frame [`Participant::opus_frame`] made last, while it is this tick's played one.
    pub(super) fn played_opus(&self) -> Option<&Bytes> {
        let Playout::Frame(f) = &self.pending else { return None };
        match self.codec {
            InputCodec::Opus => Some(&f.payload),
            InputCodec::G711(_) => self.reencoder.as_ref()?.encoded(f.timestamp),
        }
    }

    /// Decodes this tick's frame once: the samples, with the participant's
    /// gain applied, stay in `dec.pcm` for tick `decoded_at`. Lost frames are
    /// concealed (PLC, or FEC from the next packet). Returns the RFC 6464
    /// level of the decoded audio before gain, or `None` when nothing was
    /// decoded (no frame, a corrupt one, or already decoded this tick).
    pub(super) fn decode_pending(&mut self, tick: u64, cfg: &RoomConfig) -> Option<u8> {
        if self.dec.as_ref().is_some_and(|d| d.decoded_at == Some(tick)) {
            return None;
        }
        if matches!(self.pending, Playout::Empty) {
            // Nothing to decode (a speaker in a pause sends nothing under DTX):
            // neither a decoder nor a reset.
            return None;
        }
        let dec = match &mut self.dec {
            Some(dec) => dec,
            None => self.dec.insert(DecodeState::new(self.codec)?),
        };
        // A fresh decoder needs no reset. A stale one is reset for a selected
        // speaker (heard), once, just before the frame that ends the gap; a
        // measuring decode of someone else continues it, as a receiver does
        // after lost packets: libopus' reset runs `cpuid` (`opus_select_arch`,
        // twice), which on a VM costs more than the decode itself.
        if self.slot.is_some() && dec.decoded_at.is_some_and(|t| tick - t > DECODER_RESET_GAP_TICKS) {
            dec.decoder.reset();
            self.decoder_resets += 1;
        }
        let decoded = match &self.pending {
            Playout::Frame(f) => dec.decoder.decode(&f.payload, &mut dec.pcm).is_ok(),
            Playout::Lost { fec } => {
                dec.decoder.conceal(fec.as_deref(), &mut dec.pcm);
                self.concealed += 1;
                true
            }
            Playout::Empty => return None,
        };
        if !decoded {
            // Corrupt, or not 20 ms: counted, and not mixed.
            self.decode_errors += 1;
            self.pending = Playout::Empty;
            return None;
        }
        let level = level_of(&dec.pcm[..]);
        if self.slot.is_some() {
            // Only a selected speaker's voice is processed: O(K), and the
            // measuring decodes of unlevelled listeners stay cheap.
            let (suppress, normalise) = processing(cfg, self.raw_source, self.suppress, self.normalise);
            if suppress || normalise {
                let voice = self.voice.get_or_insert_with(Box::default);
                if suppress {
                    let gap = voice.suppressed_at.is_some_and(|t| tick - t > DECODER_RESET_GAP_TICKS);
                    let s = match &mut voice.suppressor {
                        Some(s) => {
                            if gap {
                                s.flush();
                            }
                            s
                        }
                        None => voice.suppressor.insert(NoiseSuppressor::new()),
                    };
                    s.process(&mut dec.pcm);
                    voice.suppressed_at = Some(tick);
                }
                if normalise {
                    voice.normaliser.process(&mut dec.pcm[..], cfg.loudness_target_dbfs);
                    voice.normalised_at = Some(tick);
                }
            }
        }
        apply_gain(&mut dec.pcm, self.gain);
        dec.decoded_at = Some(tick);
        self.decoded += 1;
        Some(level)
    }

    /// The level of this tick's frame, which carries no RFC 6464 level:
    /// from the packet itself when it says it is silent (no decode), else
    /// decoded while talking, at a voice onset, and once in
    /// [`MEASURE_EVERY_TICKS`] otherwise. While talking they are decoded
    /// every tick only when their loudness reaches `challenge` (see
    /// [`CHALLENGE_MARGIN_DB`]). Returns the level and whether a decode ran.
    pub(super) fn measure_unlevelled(&mut self, tick: u64, cfg: &RoomConfig, challenge: f32) -> (u8, bool) {
        let Playout::Frame(f) = &self.pending else { return (127, false) };
        if f.payload.len() <= 2 {
            // DTX: no audio data at all.
            self.probed_silent = true;
            return (127, false);
        }
        let activity = inspect(&f.payload).map_or(Activity::Unknown, |i| i.activity);
        let silent = activity == Activity::Silent;
        let onset = std::mem::replace(&mut self.probed_silent, silent) && activity == Activity::Voice;
        let every = if silent { MEASURE_SILENT_EVERY_TICKS } else { MEASURE_EVERY_TICKS };
        // Staggered by id, so a room's silent participants are not all measured in the same tick.
        let due = (self.talking && self.loudness >= challenge)
            || onset
            || self.measured_at.map_or((tick + self.id.0).is_multiple_of(every), |t| tick - t >= every);
        if !due {
            // Not talking at the last measurement, which is recent.
            return (127, false);
        }
        match self.decode_pending(tick, cfg) {
            Some(level) => {
                self.measured_at = Some(tick);
                (level, true)
            }
            // A corrupt frame, or no decoder could be made: heard as silence.
            None => (127, false),
        }
    }
}

/// A remote's frame for the next tick, as handed in.
#[derive(Debug, Default)]
pub(super) struct RemoteFeed {
    /// RFC 6464 level and original Opus payload.
    pub(super) next: Option<(u8, Bytes)>,
}

impl RemoteFeed {
    /// The remote's frame for this tick: the one handed in; none while it
    /// is selected is a lost frame (its node sends a selected speaker's
    /// frames, so one is missing), else an empty turn.
    pub(super) fn take(&mut self, selected: bool) -> Playout {
        match self.next.take() {
            Some((level, payload)) => Playout::Frame(Frame { timestamp: 0, payload, level: Some(level) }),
            None if selected => Playout::Lost { fec: None },
            None => Playout::Empty,
        }
    }
}

/// Whether a speaker's voice is (noise suppressed, loudness normalised):
/// their own setting, else the room's.
pub(super) fn processing(
    cfg: &RoomConfig,
    raw_source: bool,
    suppress: Option<bool>,
    normalise: Option<bool>,
) -> (bool, bool) {
    let room_suppresses = match cfg.noise_suppression {
        NoiseSuppression::Auto => raw_source,
        NoiseSuppression::On => true,
        NoiseSuppression::Off => false,
    };
    (suppress.unwrap_or(room_suppresses), normalise.unwrap_or(cfg.loudness))
}

pub(super) fn apply_gain(pcm: &mut Pcm, gain: f32) {
    if gain != 1.0 {
        pcm.iter_mut().for_each(|x| *x *= gain);
    }
}
