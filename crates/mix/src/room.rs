//! A room: its participants in shards, its speaker selection and its streams.

mod remote;

pub use remote::LocalCandidate;
use remote::RemoteFeed;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use bytes::Bytes;
use rayon::prelude::*;

use crate::codec::{Decoder, Encoder};
use crate::config::{DTX_INTERVAL_TICKS, EncoderConfig, RoomConfig, SpeakerLimit};
use crate::dsp::{FRAME_SAMPLES, Limiter, Pcm, accumulate, level_of, mix_minus};
use crate::jitter::{JitterBuffer, JitterStats, Packet, Playout, PushOutcome};
use crate::probe::{Activity, DTX_FRAME, inspect};
use crate::voice::{NoiseSuppression, NoiseSuppressor, Voice};
use crate::{MixError, MixPool, ParticipantId};

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
const CHALLENGE_MARGIN_DB: f32 = 20.0;

/// After a switch from forwarded frames to the mix, the listener encoder
/// codes this many frames without inter-frame prediction
/// (`OPUS_SET_PREDICTION_DISABLED`): the listeners' decoders hold the
/// forwarded stream's history, which the mix's prediction must not lean on.
const INDEPENDENT_FRAMES_AFTER_SWITCH: u8 = 2;

/// Frames of the forwarded speaker fed to the listener encoder at a switch to the mix.
const PRIME_FRAMES: usize = 4;

/// A frame this many dB under a speaker's smoothed loudness is a pause.
const PAUSE_DB: f32 = 20.0;

/// The highest [`Room::set_shed_level`]: complexity 0 and one speaker.
pub const MAX_SHED_LEVEL: u8 = 5;

/// An empty payload, for the participants sent nothing.
static EMPTY: Bytes = Bytes::new();

/// What a source is sent: nothing, ever.
static NOTHING: Delivery = Delivery::Nothing;

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

/// A participant not decoded for this many ticks starts from a fresh decoder
/// state rather than continuing a stale one (100 ms).
const DECODER_RESET_GAP_TICKS: u64 = 5;

/// A decoder unused for this many ticks is freed (60 s); it is made again on demand.
const DECODER_IDLE_TICKS: u64 = 3_000;

/// Hashes a [`ParticipantId`] with one multiplication. Ids are assigned by
/// the server, not chosen by clients, so the flooding resistance of the
/// default SipHash buys nothing on this per-packet lookup.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type IdMap<V> = HashMap<ParticipantId, V, BuildHasherDefault<IdHasher>>;

/// Identifies a whisper channel within a room (assigned by the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChannelId(pub u64);

impl std::fmt::Display for ChannelId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Most whisper channels a room holds at once ([`Room::open_channel`]);
/// the caller configures its own, lower bound.
pub const MAX_CHANNELS: usize = 64;

/// A whisper channel ([`Room::open_channel`]): its one "room + channel"
/// stream, encoded only in ticks where one of its whisperers is selected.
#[derive(Debug)]
struct Channel {
    id: ChannelId,
    stream: Stream,
    /// What its members who are not selected speakers are sent after the
    /// last tick, when `active`.
    out: Delivery,
    /// One of its whisperers was selected in the last tick: its members hear
    /// a mix of their own. Otherwise they hear what the room hears.
    active: bool,
    /// Its stream was not encoded last tick.
    idle: bool,
    /// Participants in it (whisperers and listeners).
    members: usize,
}

/// Largest per-participant gain accepted (+12 dB).
pub const MAX_GAIN: f32 = 4.0;

/// A selected speaker and their level this tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveSpeaker {
    /// Who.
    pub id: ParticipantId,
    /// RFC 6464 level of their frame this tick (127 when they sent none).
    pub level: u8,
}

/// A change in a participant's talking state (for talking indicators).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TalkEvent {
    /// The participant started talking.
    Started(ParticipantId),
    /// The participant has been silent (or muted) for the hold time.
    Stopped(ParticipantId),
}

/// Summary of one tick.
#[derive(Debug, Clone)]
pub struct TickReport {
    /// The tick number passed in.
    pub tick: u64,
    /// The selected speakers, loudest first, shared by every participant's
    /// RFC 6465 levels and talking indicators. A participant's CSRC list is
    /// this list without themselves (and without the whisperers of channels
    /// they are not in: [`Room::channel_of`]).
    pub speakers: Arc<[ActiveSpeaker]>,
    /// Talking state changes this tick.
    pub events: Vec<TalkEvent>,
    /// Of `encodes`, the whisper channels' "room + channel" mixes: one per
    /// channel with a selected whisperer ([`Room::open_channel`]).
    pub whisper_encodes: usize,
    /// Opus decodes run (including concealment).
    pub decodes: usize,
    /// Opus encodes run: while mixing, one for the listeners plus one per
    /// selected speaker (plus `primes` at a switch); none while silent or forwarding.
    pub encodes: usize,
    /// Participants in the room, sources ([`Room::add_source`]) and remotes
    /// ([`Room::add_remote`]) not counted.
    pub participants: usize,
    /// Frames found missing in the jitter buffers this tick (sequence gaps),
    /// and remotes' frames not handed in while they are speakers.
    pub lost: u64,
    /// Frames concealed this tick (PLC or in-band FEC; only speakers' and
    /// unlevelled frames are decoded, so this is at most `lost`).
    pub concealed: u64,
    /// Packets dropped since the previous tick because their turn had passed.
    pub late: u64,
    /// How the listeners were served.
    pub mode: MixMode,
    /// Participants sent the forwarded speaker's frame this tick.
    pub forwarded: usize,
    /// Participants sent a DTX frame this tick.
    pub dtx: usize,
    /// Of `decodes` and `encodes`, the ones that primed the listener encoder
    /// at a switch from forwarded frames to the mix (up to four each per switch).
    pub primes: usize,
    /// The shed level the tick ran at ([`Room::set_shed_level`]).
    pub shed_level: u8,
    /// Selected speakers whose frame was noise suppressed this tick.
    pub suppressed: usize,
    /// Selected speakers whose frame was loudness normalised this tick.
    pub normalised: usize,
    /// Of `decodes`, the remotes' frames ([`Room::add_remote`]) decoded
    /// (including concealed and primed ones).
    pub remote_decodes: usize,
}

/// What is done to one participant's voice (see [`Room::voice`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VoiceStatus {
    /// Their voice is noise suppressed while they are a selected speaker.
    pub noise_suppression: bool,
    /// Their voice is loudness normalised while they are a selected speaker.
    pub loudness: bool,
    /// Marked as a source that does not suppress noise itself ([`Room::set_raw_source`]).
    pub raw_source: bool,
    /// The normaliser's current gain, dB (0 before they spoke, or with it off).
    pub loudness_gain_db: f32,
    /// Their running speech level as the normaliser measured it (dBFS RMS).
    pub speech_level_dbfs: Option<f32>,
}

/// Counters of one participant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParticipantStats {
    /// The jitter buffer's counters.
    pub jitter: JitterStats,
    /// Frames decoded (including concealed ones).
    pub decoded: u64,
    /// Frames concealed (PLC or FEC).
    pub concealed: u64,
    /// Payloads libopus could not decode, or not of 20 ms; skipped.
    pub decode_errors: u64,
    /// Times their decoder was reset: before a selected speaker's first
    /// frame after a gap of more than 100 ms (not decoded on stale state),
    /// and when the room switches from forwarding them to the mix.
    pub decoder_resets: u64,
}

#[derive(Debug)]
struct DecodeState {
    decoder: Decoder,
    /// Post-gain samples of tick `decoded_at`.
    pcm: Box<Pcm>,
    decoded_at: Option<u64>,
}

#[derive(Debug)]
struct Participant {
    id: ParticipantId,
    jitter: JitterBuffer,
    muted: bool,
    gain: f32,
    gain_db: f32,
    /// This tick's frame, kept from phase A for decoding in phase C.
    pending: Playout,
    /// A local talker not seated, with a selection from outside
    /// ([`Room::fill_free_seats`]): the frame it sent this tick, kept for
    /// the next, when a selection across nodes (made of this tick's
    /// candidates) may seat it; then its onset is played a tick late rather
    /// than lost. Empty otherwise.
    unplayed: Playout,
    /// This tick: the frame `unplayed` kept from the tick before.
    onset: Playout,
    /// While seated a tick late (its onset kept, see `unplayed`): this
    /// tick's own frame, played at the next tick; `pending` holds the one
    /// from the tick before. `None`: played as it comes.
    lagged: Option<Playout>,
    dec: Option<Box<DecodeState>>,
    /// Smoothed loudness in dB above the silence floor (127 − level + gain).
    loudness: f32,
    /// This tick's level (127 when none).
    level: u8,
    last_active: Option<u64>,
    talking: bool,
    /// Last tick an unlevelled frame of theirs was decoded to measure it.
    measured_at: Option<u64>,
    /// The previous unlevelled frame said it was silent (DTX or VAD flag 0).
    probed_silent: bool,
    /// Index in `Room::selected` when a selected speaker.
    slot: Option<usize>,
    /// Their client does not suppress noise itself (plain RTP): `auto` suppresses it here.
    raw_source: bool,
    /// Noise suppression for them, over the room's setting (`None`: the room's).
    suppress: Option<bool>,
    /// Loudness normalisation for them, over the room's setting (`None`: the room's).
    normalise: Option<bool>,
    /// Their voice processing state, made at their first processed frame.
    voice: Option<Box<Voice>>,
    decoded: u64,
    concealed: u64,
    decode_errors: u64,
    decoder_resets: u64,
    /// A source ([`Room::add_source`]): heard, sent nothing.
    source: bool,
    /// A remote ([`Room::add_remote`]): heard, sent nothing, its frames
    /// handed in per tick (`feed`) instead of through the jitter buffer. A
    /// flag beside the others a tick reads, so that locals never load `feed`.
    remote: bool,
    /// A remote's frame for the next tick (`Some` for remotes only).
    feed: Option<Box<RemoteFeed>>,
    /// Their whisper channel, and whether they whisper in it (else they listen).
    channel: Option<(ChannelId, bool)>,
}

impl DecodeState {
    fn new() -> Option<Box<Self>> {
        // Fails only when libopus cannot allocate: the participant is then
        // not decoded this tick.
        let decoder = Decoder::new().ok()?;
        Some(Box::new(Self { decoder, pcm: Box::new([0.0; FRAME_SAMPLES]), decoded_at: None }))
    }
}

impl Participant {
    /// How it ranks in the speaker selection: its loudness; a source
    /// ([`Room::add_source`]) above everyone while it sounds, so that a
    /// file played into the room is always heard.
    fn rank(&self) -> f32 {
        if self.source { f32::INFINITY } else { self.loudness }
    }

    /// Decodes this tick's frame once: the samples, with the participant's
    /// gain applied, stay in `dec.pcm` for tick `decoded_at`. Lost frames are
    /// concealed (PLC, or FEC from the next packet). Returns the RFC 6464
    /// level of the decoded audio before gain, or `None` when nothing was
    /// decoded (no frame, a corrupt one, or already decoded this tick).
    fn decode_pending(&mut self, tick: u64, cfg: &RoomConfig) -> Option<u8> {
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
            None => self.dec.insert(DecodeState::new()?),
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
    fn measure_unlevelled(&mut self, tick: u64, cfg: &RoomConfig, challenge: f32) -> (u8, bool) {
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

/// What a participant is to the room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Here, sends and is sent ([`Room::add_participant`]).
    Local,
    /// A file played in, sent nothing ([`Room::add_source`]).
    Source,
    /// On another node, sent nothing, frames handed in ([`Room::add_remote`]).
    Remote,
}

#[derive(Debug, Clone, Copy)]
struct Candidate {
    id: ParticipantId,
    loudness: f32,
}

/// Aligned to two cache lines so threads working on neighbouring shards do
/// not write to the same line (false sharing).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard {
    members: Vec<Participant>,
    candidates: Vec<Candidate>,
    events: Vec<TalkEvent>,
}

#[derive(Debug)]
struct Stream {
    encoder: Encoder,
    limiter: Limiter,
    payload: Bytes,
}

#[derive(Debug)]
struct Selected {
    id: ParticipantId,
    stream: Stream,
    /// What this speaker is sent after the last tick.
    out: Delivery,
    /// Their stream was not encoded last tick (they were the only speaker).
    idle: bool,
    /// A source ([`Room::add_source`]) or a remote ([`Room::add_remote`]):
    /// never sent anything, so never encoded for.
    source: bool,
}

/// One room's mixer. Drive it with [`Room::push_packet`] as packets arrive
/// and [`Room::tick`] every 20 ms; read what to send from [`Room::deliveries`].
#[derive(Debug)]
pub struct Room {
    cfg: RoomConfig,
    shards: Vec<Shard>,
    index: IdMap<(usize, usize)>,
    selected: Vec<Selected>,
    listener: Stream,
    /// What every participant who is not a selected speaker is sent after the last tick.
    listener_out: Delivery,
    /// How the last tick served the listeners.
    mode: MixMode,
    /// Ticks of mix in a row with exactly one speaker (for `mix_hold_ticks`).
    alone_for: u32,
    /// The forwarded speaker's last payloads, oldest first (at most [`PRIME_FRAMES`]), to
    /// prime the listener encoder at a switch to the mix.
    recent: Vec<Bytes>,
    /// Cost shedding level, 0 to [`MAX_SHED_LEVEL`].
    shed: u8,
    /// Listener frames still to encode without prediction after a switch.
    independent_left: u8,
    dtx_frame: Bytes,
    no_speakers: Arc<[ActiveSpeaker]>,
    spare_encoders: Vec<Encoder>,
    /// Tick of the last `tick` call, so a tick number is never run twice.
    last_tick: Option<u64>,
    /// Packets dropped as late since the last tick ([`TickReport::late`]).
    late: u64,
    /// Sources among the participants ([`Room::add_source`]).
    sources: usize,
    /// Remotes among the participants ([`Room::add_remote`]).
    remotes: usize,
    /// The selection set from outside ([`Room::set_selection`]), if any.
    external: Option<Vec<ParticipantId>>,
    /// Scratch for applying `external`, kept for its capacity.
    chosen: Vec<ParticipantId>,
    /// Whether seats `external` leaves free go to this room's own talkers
    /// ([`Room::fill_free_seats`]).
    fill: bool,
    /// This room's own participants given a free seat this tick beyond
    /// `external`.
    filled: Vec<ParticipantId>,
    /// Whisper channels ([`Room::open_channel`]), at most [`MAX_CHANNELS`].
    channels: Vec<Channel>,
}

impl Room {
    /// An empty room. Fails on an invalid configuration.
    pub fn new(cfg: RoomConfig) -> Result<Self, MixError> {
        cfg.validate()?;
        let listener =
            Stream { encoder: Encoder::new(&cfg.encoder)?, limiter: Limiter::default(), payload: Bytes::new() };
        Ok(Self {
            cfg,
            shards: Vec::new(),
            index: IdMap::default(),
            selected: Vec::new(),
            listener,
            listener_out: Delivery::Nothing,
            mode: MixMode::Silent,
            alone_for: 0,
            recent: Vec::with_capacity(PRIME_FRAMES + 1),
            shed: 0,
            independent_left: 0,
            dtx_frame: Bytes::from_static(&DTX_FRAME),
            no_speakers: Arc::from([]),
            spare_encoders: Vec::new(),
            last_tick: None,
            late: 0,
            sources: 0,
            remotes: 0,
            external: None,
            chosen: Vec::new(),
            fill: false,
            filled: Vec::new(),
            channels: Vec::new(),
        })
    }

    /// The room's configuration.
    pub fn config(&self) -> &RoomConfig {
        &self.cfg
    }

    /// Participants in the room, sources ([`Room::add_source`]) and remotes
    /// ([`Room::add_remote`]) included.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Sources in the room ([`Room::add_source`]).
    pub fn sources(&self) -> usize {
        self.sources
    }

    /// Whether the room has no participants.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Whether this participant is in the room.
    pub fn contains(&self, id: ParticipantId) -> bool {
        self.index.contains_key(&id)
    }

    /// Adds a participant (unmuted, gain 1).
    pub fn add_participant(&mut self, id: ParticipantId) -> Result<(), MixError> {
        self.add(id, Kind::Local)
    }

    /// Adds a source: a participant that everyone hears and that is sent
    /// nothing (a file played into the room). It is selected (ahead of any
    /// talker, while it sounds), mixed and, alone, forwarded like any
    /// speaker, but no N-minus-self stream is
    /// encoded for it, and it does not count against
    /// [`RoomConfig::max_participants`] (the caller bounds its sources).
    /// Its noise suppression is off (a file is no microphone; see
    /// [`Room::set_noise_suppression`]).
    pub fn add_source(&mut self, id: ParticipantId) -> Result<(), MixError> {
        self.add(id, Kind::Source)
    }

    fn add(&mut self, id: ParticipantId, kind: Kind) -> Result<(), MixError> {
        if self.index.contains_key(&id) {
            return Err(MixError::DuplicateParticipant(id));
        }
        let source = kind == Kind::Source;
        let remote = kind == Kind::Remote;
        if kind == Kind::Local && self.index.len() - self.sources - self.remotes >= self.cfg.max_participants {
            return Err(MixError::RoomFull(self.cfg.max_participants));
        }
        let shard_size = self.cfg.shard_size;
        let s = match self.shards.iter().rposition(|s| s.members.len() < shard_size) {
            Some(s) => s,
            None => {
                self.shards.push(Shard::default());
                self.shards.len() - 1
            }
        };
        let shard = &mut self.shards[s];
        shard.members.push(Participant {
            id,
            jitter: JitterBuffer::new(self.cfg.jitter),
            muted: false,
            gain: 1.0,
            gain_db: 0.0,
            pending: Playout::Empty,
            unplayed: Playout::Empty,
            onset: Playout::Empty,
            lagged: None,
            dec: None,
            loudness: 0.0,
            level: 127,
            last_active: None,
            talking: false,
            measured_at: None,
            probed_silent: false,
            slot: None,
            raw_source: false,
            // A file is not a microphone: RNNoise would eat music. A
            // remote's voice is its own node's business: heard as sent.
            suppress: (source || remote).then_some(false),
            normalise: remote.then_some(false),
            voice: None,
            decoded: 0,
            concealed: 0,
            decode_errors: 0,
            decoder_resets: 0,
            source,
            remote,
            feed: remote.then(Box::default),
            channel: None,
        });
        self.index.insert(id, (s, shard.members.len() - 1));
        self.sources += usize::from(source);
        self.remotes += usize::from(remote);
        Ok(())
    }

    /// Removes a participant and frees everything they held.
    pub fn remove_participant(&mut self, id: ParticipantId) -> Result<(), MixError> {
        let (s, i) = self.index.remove(&id).ok_or(MixError::UnknownParticipant(id))?;
        let members = &mut self.shards[s].members;
        let gone = members.swap_remove(i);
        if let Some(moved) = members.get(i) {
            self.index.insert(moved.id, (s, i));
        }
        self.sources -= usize::from(gone.source);
        self.remotes -= usize::from(gone.remote);
        if let Some((c, _)) = gone.channel
            && let Some(ch) = self.channels.iter_mut().find(|ch| ch.id == c)
        {
            ch.members -= 1;
        }
        if gone.slot.is_some() {
            self.drop_speakers(|sel| sel.id == id);
        }
        Ok(())
    }

    /// Mutes or unmutes a participant. A muted participant is never selected
    /// and never decoded; they still hear the room.
    pub fn set_muted(&mut self, id: ParticipantId, muted: bool) -> Result<(), MixError> {
        self.participant_mut(id)?.muted = muted;
        Ok(())
    }

    /// Sets a participant's gain (linear, 0 to [`MAX_GAIN`]) applied to their
    /// voice in everyone else's mix.
    pub fn set_gain(&mut self, id: ParticipantId, gain: f32) -> Result<(), MixError> {
        if !(gain.is_finite() && (0.0..=MAX_GAIN).contains(&gain)) {
            return Err(MixError::InvalidConfig(format!("gain must be within 0..={MAX_GAIN}")));
        }
        let p = self.participant_mut(id)?;
        p.gain = gain;
        p.gain_db = if gain > 0.0 { 20.0 * gain.log10() } else { -127.0 };
        Ok(())
    }

    /// Says whether a participant's client leaves noise in its audio (a
    /// phone or SIP gateway over plain RTP: `true`) or suppresses it itself
    /// (a browser: `false`, the default). [`NoiseSuppression::Auto`]
    /// suppresses noise for the first kind only.
    pub fn set_raw_source(&mut self, id: ParticipantId, raw: bool) -> Result<(), MixError> {
        self.participant_mut(id)?.raw_source = raw;
        Ok(())
    }

    /// Turns noise suppression on or off for one participant, over the
    /// room's setting (`None`: follow the room). From their next frame.
    pub fn set_noise_suppression(&mut self, id: ParticipantId, on: Option<bool>) -> Result<(), MixError> {
        self.participant_mut(id)?.suppress = on;
        Ok(())
    }

    /// Turns loudness normalisation on or off for one participant, over the
    /// room's setting (`None`: follow the room). From their next frame.
    pub fn set_loudness(&mut self, id: ParticipantId, on: Option<bool>) -> Result<(), MixError> {
        self.participant_mut(id)?.normalise = on;
        Ok(())
    }

    /// Changes the room's noise suppression ([`RoomConfig::noise_suppression`]), from the next tick.
    pub fn set_room_noise_suppression(&mut self, mode: NoiseSuppression) {
        self.cfg.noise_suppression = mode;
    }

    /// Changes the room's loudness normalisation ([`RoomConfig::loudness`]), from the next tick.
    pub fn set_room_loudness(&mut self, on: bool) {
        self.cfg.loudness = on;
    }

    /// What is done to a participant's voice when they speak.
    pub fn voice(&self, id: ParticipantId) -> Result<VoiceStatus, MixError> {
        let p = self.participant(id)?;
        let (noise_suppression, loudness) = processing(&self.cfg, p.raw_source, p.suppress, p.normalise);
        let normaliser = p.voice.as_ref().map(|v| v.normaliser).unwrap_or_default();
        Ok(VoiceStatus {
            noise_suppression,
            loudness,
            raw_source: p.raw_source,
            loudness_gain_db: normaliser.gain_db(),
            speech_level_dbfs: normaliser.level_dbfs(),
        })
    }

    /// Changes how many speakers are mixed, from the next tick on (fewer:
    /// the weakest selected speakers leave the mix then). Fails on a limit
    /// [`RoomConfig::validate`] refuses.
    pub fn set_max_speakers(&mut self, limit: SpeakerLimit) -> Result<(), MixError> {
        let cfg = RoomConfig { max_speakers: limit, ..self.cfg.clone() };
        cfg.validate()?;
        self.cfg = cfg;
        Ok(())
    }

    /// Changes how many participants the room accepts. Participants already
    /// in stay (a lower limit only refuses new ones until enough left).
    pub fn set_max_participants(&mut self, max: usize) -> Result<(), MixError> {
        let cfg = RoomConfig { max_participants: max, ..self.cfg.clone() };
        cfg.validate()?;
        self.cfg = cfg;
        Ok(())
    }

    /// Hands a received packet to the participant's jitter buffer.
    /// A remote's frames come through [`Room::put_remote_frame`] instead
    /// ([`MixError::Remote`]).
    pub fn push_packet(&mut self, id: ParticipantId, packet: Packet) -> Result<PushOutcome, MixError> {
        let p = self.participant_mut(id)?;
        if p.remote {
            return Err(MixError::Remote(id));
        }
        let outcome = p.jitter.push(packet);
        self.late += u64::from(outcome == PushOutcome::Late);
        Ok(outcome)
    }

    /// A participant's counters.
    pub fn participant_stats(&self, id: ParticipantId) -> Result<ParticipantStats, MixError> {
        let p = self.participant(id)?;
        Ok(ParticipantStats {
            jitter: p.jitter.stats(),
            decoded: p.decoded,
            concealed: p.concealed,
            decode_errors: p.decode_errors,
            decoder_resets: p.decoder_resets,
        })
    }

    /// The currently selected speakers, in selection order.
    pub fn speakers(&self) -> impl Iterator<Item = ParticipantId> + '_ {
        self.selected.iter().map(|s| s.id)
    }

    /// A participant's RFC 6464 level in the last tick as the mixer used it
    /// (127: silent or nothing received): the packet's own, or for packets
    /// without one, measured by decoding or read from the packet (DTX, the
    /// SILK VAD flag; see `probe`).
    pub fn level(&self, id: ParticipantId) -> Result<u8, MixError> {
        Ok(self.participant(id)?.level)
    }

    /// Whether a participant is talking (active within the hold time).
    pub fn is_talking(&self, id: ParticipantId) -> Result<bool, MixError> {
        Ok(self.participant(id)?.talking)
    }

    /// What to send each participant after the last tick, shard by shard
    /// (shards can be sent from different threads): the listeners' shared
    /// delivery, or a selected speaker's own. References, never copies.
    pub fn delivery_shards(&self) -> impl Iterator<Item = impl Iterator<Item = (ParticipantId, &Delivery)>> {
        self.shards.iter().map(|shard| shard.members.iter().map(|p| (p.id, self.delivery_of(p))))
    }

    /// What to send each participant after the last tick (see [`Room::delivery_shards`]).
    pub fn deliveries(&self) -> impl Iterator<Item = (ParticipantId, &Delivery)> {
        self.delivery_shards().flatten()
    }

    /// What every participant who is not a selected speaker is sent after
    /// the last tick ([`Delivery::Nothing`] before the first tick).
    pub fn listener_delivery(&self) -> &Delivery {
        &self.listener_out
    }

    /// What each selected speaker is sent after the last tick, in selection
    /// order. With [`Room::listener_delivery`], everything a tick produced:
    /// at most K+1 payloads, whatever the room size.
    pub fn speaker_deliveries(&self) -> impl Iterator<Item = (ParticipantId, &Delivery)> {
        self.selected.iter().map(|sel| (sel.id, &sel.out))
    }

    /// Each selected speaker's own frame of the last tick as it arrived (no
    /// decode, no encode), in selection order, with their level: `None`
    /// when their frame was missing, concealed or could not be decoded.
    /// For feeds that must tell speakers apart (captions, agents).
    pub fn speaker_frames(&self) -> impl Iterator<Item = (ParticipantId, u8, Option<&Bytes>)> {
        self.selected.iter().filter_map(|sel| {
            let &(s, i) = self.index.get(&sel.id)?;
            let p = &self.shards[s].members[i];
            let frame = match &p.pending {
                Playout::Frame(f) => Some(&f.payload),
                _ => None,
            };
            Some((sel.id, p.level, frame))
        })
    }

    /// What a participant is sent after the last tick (`None`: not in the room).
    pub fn delivery_for(&self, id: ParticipantId) -> Option<&Delivery> {
        self.participant(id).ok().map(|p| self.delivery_of(p))
    }

    /// The payload of [`Room::listener_delivery`] (empty: send nothing).
    pub fn listener_payload(&self) -> &Bytes {
        self.listener_out.payload()
    }

    /// The payloads of [`Room::speaker_deliveries`] (empty: send nothing).
    pub fn speaker_payloads(&self) -> impl Iterator<Item = (ParticipantId, &Bytes)> {
        self.selected.iter().map(|sel| (sel.id, sel.out.payload()))
    }

    /// The payload of [`Room::delivery_for`] (empty: send nothing).
    pub fn payload_for(&self, id: ParticipantId) -> Option<&Bytes> {
        self.delivery_for(id).map(Delivery::payload)
    }

    fn delivery_of(&self, p: &Participant) -> &Delivery {
        if p.source || p.remote {
            return &NOTHING;
        }
        if let Some(sel) = p.slot.and_then(|slot| self.selected.get(slot)) {
            return &sel.out;
        }
        if let Some((c, _)) = p.channel
            && let Some(ch) = self.channels.iter().find(|ch| ch.id == c && ch.active)
        {
            return &ch.out;
        }
        &self.listener_out
    }

    /// Opens whisper channel `id`, or changes who is in it: its
    /// `whisperers` are heard by its members only (not by the rest of the
    /// room); every member (whisperer or listener) hears the room plus the
    /// channel. A participant is in one channel at most, and a source or a
    /// remote ([`Room::add_remote`]) in none. From the next tick on.
    ///
    /// The cost grows with the distinct mixes, never with the listeners:
    /// a tick encodes the room's mix, one N-minus-self per selected speaker
    /// (whisperers included, all within the room's K), and one "room +
    /// channel" mix per channel with a selected whisperer; at most
    /// `1 + K + min(channels, K)`. A channel whose whisperers are silent
    /// costs nothing (its members are sent the room's mix).
    pub fn open_channel(
        &mut self,
        id: ChannelId,
        whisperers: &[ParticipantId],
        listeners: &[ParticipantId],
    ) -> Result<(), MixError> {
        let exists = self.channels.iter().any(|ch| ch.id == id);
        if !exists && self.channels.len() >= MAX_CHANNELS {
            return Err(MixError::TooManyChannels(self.channels.len()));
        }
        for &m in whisperers.iter().chain(listeners) {
            let p = self.participant(m)?;
            if p.source || p.remote {
                return Err(MixError::UnknownParticipant(m));
            }
            if p.channel.is_some_and(|(c, _)| c != id) {
                return Err(MixError::InChannel(m));
            }
        }
        if exists {
            self.clear_channel(id);
        } else {
            let stream = Stream {
                encoder: Encoder::new(&self.encoder_config())?,
                limiter: Limiter::default(),
                payload: Bytes::new(),
            };
            self.channels.push(Channel { id, stream, out: Delivery::Nothing, active: false, idle: true, members: 0 });
        }
        let mut members = 0;
        // A participant named as both whispers (the first role given wins).
        for (&m, whispers) in whisperers.iter().map(|m| (m, true)).chain(listeners.iter().map(|m| (m, false))) {
            let p = self.participant_mut(m)?;
            if p.channel.is_none() {
                p.channel = Some((id, whispers));
                members += 1;
            }
        }
        if let Some(ch) = self.channels.iter_mut().find(|ch| ch.id == id) {
            ch.members = members;
        }
        Ok(())
    }

    /// Closes whisper channel `id`: its whisperers are heard by the whole
    /// room again, from the next tick on.
    pub fn close_channel(&mut self, id: ChannelId) -> Result<(), MixError> {
        let n = self.channels.iter().position(|ch| ch.id == id).ok_or(MixError::UnknownChannel(id.0))?;
        self.clear_channel(id);
        self.channels.swap_remove(n);
        Ok(())
    }

    /// Takes everyone out of channel `id` (O(N), on a change by an admin only).
    fn clear_channel(&mut self, id: ChannelId) {
        for shard in &mut self.shards {
            for p in &mut shard.members {
                if p.channel.is_some_and(|(c, _)| c == id) {
                    p.channel = None;
                }
            }
        }
    }

    /// A participant's whisper channel and whether they whisper in it.
    pub fn channel_of(&self, id: ParticipantId) -> Option<(ChannelId, bool)> {
        self.participant(id).ok().and_then(|p| p.channel)
    }

    /// The whisper channels open, with their members.
    pub fn channels(&self) -> impl Iterator<Item = (ChannelId, usize)> + '_ {
        self.channels.iter().map(|ch| (ch.id, ch.members))
    }

    /// What the members of each whisper channel with a selected whisperer
    /// are sent after the last tick (those who are not selected speakers
    /// themselves); the members of the other channels are sent
    /// [`Room::listener_delivery`].
    pub fn channel_deliveries(&self) -> impl Iterator<Item = (ChannelId, &Delivery)> {
        self.channels.iter().filter(|ch| ch.active).map(|ch| (ch.id, &ch.out))
    }

    /// How the last tick served the listeners.
    pub fn mode(&self) -> MixMode {
        self.mode
    }

    /// Sheds cost in steps before the caller has to skip a tick, from the
    /// next tick on: 0 none; 1 encoder complexity at most 5; 2 complexity 0;
    /// 3, 4, 5 also at most 3, 2, 1 speakers (and a single speaker is
    /// forwarded at once, without waiting for a pause). Values above
    /// [`MAX_SHED_LEVEL`] are clamped. Audio keeps flowing at every level.
    /// The caller (the server's clock) raises it when ticks near their
    /// budget and lowers it when they have room again, and counts it
    /// ([`TickReport::shed_level`]).
    pub fn set_shed_level(&mut self, level: u8) {
        let level = level.min(MAX_SHED_LEVEL);
        if level == self.shed {
            return;
        }
        self.shed = level;
        let complexity = self.encoder_config().complexity;
        let speaker_complexity = self.speaker_encoder_config().complexity;
        self.listener.encoder.set_complexity(complexity);
        for sel in &mut self.selected {
            sel.stream.encoder.set_complexity(speaker_complexity);
        }
        for e in &mut self.spare_encoders {
            e.set_complexity(speaker_complexity);
        }
        for ch in &mut self.channels {
            ch.stream.encoder.set_complexity(complexity);
        }
    }

    /// The current shed level.
    pub fn shed_level(&self) -> u8 {
        self.shed
    }

    /// The encoder settings at the current shed level.
    fn encoder_config(&self) -> EncoderConfig {
        let mut e = self.cfg.encoder;
        e.complexity = match self.shed {
            0 => e.complexity,
            1 => e.complexity.min(5),
            _ => 0,
        };
        e
    }

    /// The encoder settings of a selected speaker's own stream (heard by
    /// them alone) at the current shed level: `speaker_complexity`, never
    /// above the listeners' stream's.
    fn speaker_encoder_config(&self) -> EncoderConfig {
        let mut e = self.encoder_config();
        e.complexity = e.complexity.min(self.cfg.encoder.speaker_complexity);
        e
    }

    /// Speakers mixed at the current shed level.
    fn speaker_limit(&self) -> usize {
        let k = match self.cfg.max_speakers {
            SpeakerLimit::Top(k) => k,
            SpeakerLimit::All => usize::MAX,
        };
        match self.shed {
            0..=2 => k,
            3 => k.min(3),
            4 => k.min(2),
            _ => 1,
        }
    }

    /// Runs one 20 ms tick on `pool`. `tick` counts 20 ms periods and must
    /// grow by one each call (a skipped number is a tick that overran and was
    /// not run; a repeated or older one is ignored and reported empty).
    pub fn tick(&mut self, pool: &MixPool, tick: u64) -> TickReport {
        pool.install(|| self.run_tick(tick, true))
    }

    /// Runs one tick as [`Room::tick`] does, but all of it on the calling
    /// thread: no pool, no hand-off. For ticks small enough (a few ms) that
    /// waking pool threads, and their idle spinning after, costs more CPU
    /// than splitting the work saves.
    pub fn tick_inline(&mut self, tick: u64) -> TickReport {
        self.run_tick(tick, false)
    }

    /// The tick itself: with `parallel`, shards and encodes are split on
    /// whatever rayon pool the caller is in; without, all on this thread.
    pub(crate) fn run_tick(&mut self, tick: u64, parallel: bool) -> TickReport {
        if self.last_tick.is_some_and(|last| tick <= last) {
            return TickReport {
                tick,
                speakers: self.no_speakers.clone(),
                events: Vec::new(),
                decodes: 0,
                encodes: 0,
                whisper_encodes: 0,
                participants: self.len() - self.sources - self.remotes,
                lost: 0,
                concealed: 0,
                late: 0,
                mode: self.mode,
                forwarded: 0,
                dtx: 0,
                primes: 0,
                shed_level: self.shed,
                suppressed: 0,
                normalised: 0,
                remote_decodes: 0,
            };
        }
        self.last_tick = Some(tick);
        let k = self.speaker_limit();

        // A: per participant — pop, level, activity; per shard — top-K
        // candidates. Current speakers are decoded here, in parallel, when
        // the room is mixing (they are almost always selected again).
        let challenge = self.challenge_floor(k);
        let cfg = &self.cfg;
        let decode_speakers = !matches!(self.mode, MixMode::Forward(_));
        let keep_onsets = self.external.is_some() && self.fill;
        let phase_a = if let [shard] = &mut self.shards[..] {
            // One shard (every room up to `shard_size`): no pool round trip.
            shard.observe(cfg, tick, k, decode_speakers, challenge, keep_onsets)
        } else if !parallel {
            self.shards
                .iter_mut()
                .map(|shard| shard.observe(cfg, tick, k, decode_speakers, challenge, keep_onsets))
                .fold(Observed::default(), Observed::sum)
        } else {
            self.shards
                .par_iter_mut()
                .map(|shard| shard.observe(cfg, tick, k, decode_speakers, challenge, keep_onsets))
                .reduce(Observed::default, Observed::sum)
        };

        // B: merge the shards' candidates with the current speakers (O(shards·K)).
        self.select(k);
        // Whisper channels: each selected speaker's channel, and which
        // channels have a selected whisperer (their members hear a mix of
        // their own). The room's mode is chosen on the room's speakers only.
        let chan: Vec<Option<(ChannelId, bool)>> = if self.channels.is_empty() {
            Vec::new()
        } else {
            self.selected.iter().map(|sel| self.participant(sel.id).ok().and_then(|p| p.channel)).collect()
        };
        let whispers = |n: usize| chan.get(n).is_some_and(|c| c.is_some_and(|(_, w)| w));
        let mut whisper_listeners = 0;
        for ch in &mut self.channels {
            ch.active = chan.contains(&Some((ch.id, true)));
            if ch.active {
                let selected_in = chan.iter().filter(|c| c.is_some_and(|(id, _)| id == ch.id)).count();
                whisper_listeners += ch.members.saturating_sub(selected_in);
            }
        }
        let active = |c: &Option<(ChannelId, bool)>| {
            c.is_some_and(|(id, _)| self.channels.iter().any(|ch| ch.id == id && ch.active))
        };
        // Selected speakers served by the whisper pass (their channel is active).
        let in_active: Vec<bool> = chan.iter().map(active).collect();
        let handled = |n: usize| in_active.get(n).copied().unwrap_or(false);
        let room_speakers: Vec<ParticipantId> =
            self.selected.iter().enumerate().filter(|(n, _)| !whispers(*n)).map(|(_, sel)| sel.id).collect();
        let mode = self.next_mode(&room_speakers);
        let (mut decodes, mut concealed, mut encodes, mut primes) = (phase_a.decodes, phase_a.concealed, 0, 0);
        let mut remote_decodes = phase_a.remote_decodes;
        let (mut forwarded, mut dtx) = (0, 0);
        let dtx_due = tick.is_multiple_of(DTX_INTERVAL_TICKS) || self.mode != mode;
        let dtx_out = if dtx_due { Delivery::Dtx(self.dtx_frame.clone()) } else { Delivery::Nothing };
        // Those sent the listeners' delivery: neither a source, a remote nor selected.
        let selected_hearing = self.selected.iter().filter(|s| !s.source).count();
        let others = (self.len() - self.sources - self.remotes).saturating_sub(selected_hearing + whisper_listeners);

        match mode {
            MixMode::Silent => {
                dtx += if dtx_due { others } else { 0 };
                self.listener_out = dtx_out.clone();
                self.recent.clear();
            }
            MixMode::Forward(id) => {
                let (s, i) = self.index[&id];
                let p = &mut self.shards[s].members[i];
                // Only a valid 20 ms frame is forwarded; a missing one is a
                // gap the listeners' decoders conceal, an invalid one is
                // counted as a decode error and heard as that gap.
                let frame = match &p.pending {
                    Playout::Frame(f) if inspect(&f.payload).is_some_and(|info| info.samples() == 960) => {
                        Some(f.payload.clone())
                    }
                    Playout::Frame(_) => {
                        p.decode_errors += 1;
                        None
                    }
                    _ => None,
                };
                if self.mode != mode {
                    self.recent.clear();
                }
                if self.recent.len() == PRIME_FRAMES {
                    self.recent.remove(0);
                }
                match frame {
                    Some(payload) => {
                        self.recent.push(payload.clone());
                        forwarded = others;
                        self.listener_out = Delivery::Forward { from: id, payload };
                    }
                    None => {
                        self.recent.clear();
                        self.listener_out = Delivery::Nothing;
                    }
                }
                if let Some(sel) = self.selected.iter_mut().find(|sel| sel.id == id) {
                    if sel.source {
                        sel.out = Delivery::Nothing;
                    } else {
                        dtx += usize::from(dtx_due);
                        sel.out = dtx_out.clone();
                        // Not encoded: a whisper pass that encodes it later starts afresh.
                        sel.idle = true;
                    }
                }
            }
            MixMode::Mix => {
                if self.mode != MixMode::Mix {
                    // The listener and speaker encoders sat idle: their
                    // look-ahead holds stale audio. Start them afresh, and
                    // after forwarded frames continue what listeners heard.
                    self.listener.encoder.reset();
                    for sel in &mut self.selected {
                        sel.stream.encoder.reset();
                    }
                    if let MixMode::Forward(id) = self.mode
                        && self.cfg.prime_on_switch
                    {
                        primes = self.prime(id, tick);
                        decodes += primes;
                        if self.participant(id).is_ok_and(|p| p.remote) {
                            remote_decodes += primes;
                        }
                        encodes += primes;
                        self.independent_left = INDEPENDENT_FRAMES_AFTER_SWITCH;
                        self.listener.encoder.set_prediction_disabled(true);
                    }
                }
                self.recent.clear();
                // C: newly selected speakers' frames (and every speaker's
                // after forwarding; a switch is rare).
                for sel in &self.selected {
                    let (s, i) = self.index[&sel.id];
                    let p = &mut self.shards[s].members[i];
                    let lost = matches!(p.pending, Playout::Lost { .. });
                    let decoded = p.decode_pending(tick, &self.cfg).is_some();
                    decodes += usize::from(decoded);
                    remote_decodes += usize::from(decoded && p.remote);
                    concealed += u64::from(lost && decoded);
                }

                // D: total = Σ speakers; K+1 limited, encoded streams, in parallel.
                // Whisperers are not in the room's total, and the speakers
                // whose channel is active are encoded by the whisper pass.
                let mut total = [0.0f32; FRAME_SAMPLES];
                let mut own: Vec<(Option<&Pcm>, bool)> = Vec::with_capacity(self.selected.len());
                for (n, sel) in self.selected.iter().enumerate() {
                    let (s, i) = self.index[&sel.id];
                    let pcm =
                        self.shards[s].members[i].dec.as_ref().filter(|d| d.decoded_at == Some(tick)).map(|d| &*d.pcm);
                    if let Some(pcm) = pcm
                        && !whispers(n)
                    {
                        accumulate(&mut total, pcm);
                    }
                    own.push((pcm, handled(n)));
                }
                let listener = &mut self.listener;
                let selected = &mut self.selected;
                // A lone mixed speaker (their voice processed, or pass-through
                // off) hears nobody: the DTX cadence, not an encode of silence
                // (with `dtx` off, encoded silence as before).
                let alone = room_speakers.len() == 1 && self.cfg.dtx;
                let dtx_out = &dtx_out;
                let speaker = |(sel, (own, handled)): (&mut Selected, &(Option<&Pcm>, bool))| {
                    if *handled {
                        return;
                    }
                    if sel.source {
                        // Sent nothing: no stream to encode.
                        sel.idle = true;
                        sel.out = Delivery::Nothing;
                        return;
                    }
                    if alone {
                        sel.idle = true;
                        sel.out = dtx_out.clone();
                        return;
                    }
                    if std::mem::take(&mut sel.idle) {
                        // Its last input is stale: start afresh, as a new speaker's does.
                        sel.stream.encoder.reset();
                    }
                    sel.stream.encode(&total, *own);
                    sel.out = Delivery::Mix(sel.stream.payload.clone());
                };
                if parallel {
                    rayon::join(
                        || listener.encode(&total, None),
                        || selected.par_iter_mut().zip(own.par_iter()).for_each(speaker),
                    );
                } else {
                    listener.encode(&total, None);
                    selected.iter_mut().zip(own.iter()).for_each(speaker);
                }
                drop(own);
                self.listener_out = Delivery::Mix(self.listener.payload.clone());
                if self.independent_left > 0 {
                    self.independent_left -= 1;
                    if self.independent_left == 0 {
                        self.listener.encoder.set_prediction_disabled(false);
                    }
                }
                let unhandled = self.selected.iter().enumerate().filter(|(n, sel)| !sel.source && !handled(*n)).count();
                if alone {
                    encodes += 1;
                    dtx += usize::from(dtx_due && unhandled == 1);
                } else {
                    encodes += 1 + unhandled;
                }
            }
        }
        self.mode = mode;
        let mut whisper_encodes = 0;
        if self.channels.iter().any(|ch| ch.active) {
            let w = self.whisper(tick, &chan, &dtx_out);
            decodes += w.decodes;
            remote_decodes += w.remote_decodes;
            concealed += w.concealed;
            encodes += w.encodes + w.channels;
            dtx += w.dtx;
            whisper_encodes = w.channels;
        }
        for ch in &mut self.channels {
            ch.idle |= !ch.active;
        }

        let speakers: Arc<[ActiveSpeaker]> = if self.selected.is_empty() {
            self.no_speakers.clone()
        } else {
            self.selected
                .iter()
                .map(|sel| {
                    let (s, i) = self.index[&sel.id];
                    ActiveSpeaker { id: sel.id, level: self.shards[s].members[i].level }
                })
                .collect()
        };

        let (mut suppressed, mut normalised) = (0, 0);
        if mode == MixMode::Mix {
            for sel in &self.selected {
                if let Ok(Some(v)) = self.participant(sel.id).map(|p| p.voice.as_deref()) {
                    suppressed += usize::from(v.suppressed_at == Some(tick));
                    normalised += usize::from(v.normalised_at == Some(tick));
                }
            }
        }
        let events = self.shards.iter_mut().flat_map(|s| s.events.drain(..)).collect();
        let late = std::mem::take(&mut self.late);
        TickReport {
            tick,
            speakers,
            events,
            decodes,
            encodes,
            whisper_encodes,
            participants: self.len() - self.sources - self.remotes,
            lost: phase_a.lost,
            concealed,
            late,
            mode,
            forwarded,
            dtx,
            primes,
            shed_level: self.shed,
            suppressed,
            normalised,
            remote_decodes,
        }
    }

    /// Whether participant `id`'s voice is processed (suppressed or
    /// normalised) when they speak.
    fn processed(&self, id: ParticipantId) -> bool {
        self.participant(id).is_ok_and(|p| {
            let (s, n) = processing(&self.cfg, p.raw_source, p.suppress, p.normalise);
            s || n
        })
    }

    /// The whisper pass (after the room's own deliveries): for every
    /// channel with a selected whisperer, one "room + channel" mix for its
    /// members, and each selected speaker in it gets that mix without
    /// themselves. Decodes the selected speakers not decoded yet this tick
    /// (the forwarded one, whisperers while the room forwards or is silent).
    fn whisper(&mut self, tick: u64, chan: &[Option<(ChannelId, bool)>], dtx_out: &Delivery) -> Whispered {
        let mut w = Whispered::default();
        let mut pcm: Vec<Option<Pcm>> = Vec::with_capacity(self.selected.len());
        for sel in &self.selected {
            let (s, i) = self.index[&sel.id];
            let p = &mut self.shards[s].members[i];
            let lost = matches!(p.pending, Playout::Lost { .. });
            let decoded = p.decode_pending(tick, &self.cfg).is_some();
            w.decodes += usize::from(decoded);
            w.remote_decodes += usize::from(decoded && p.remote);
            w.concealed += u64::from(lost && decoded);
            pcm.push(p.dec.as_ref().filter(|d| d.decoded_at == Some(tick)).map(|d| *d.pcm));
        }
        let whispers_in = |n: usize, c: ChannelId| chan.get(n).copied().flatten() == Some((c, true));
        let mut room = [0.0f32; FRAME_SAMPLES];
        let mut room_speakers = 0;
        for (n, p) in pcm.iter().enumerate() {
            if !chan.get(n).copied().flatten().is_some_and(|(_, w)| w) {
                room_speakers += 1;
                if let Some(p) = p {
                    accumulate(&mut room, p);
                }
            }
        }
        for ch in self.channels.iter_mut().filter(|ch| ch.active) {
            let mut total = room;
            let mut voices = room_speakers;
            for (n, p) in pcm.iter().enumerate() {
                if whispers_in(n, ch.id) {
                    voices += 1;
                    if let Some(p) = p {
                        accumulate(&mut total, p);
                    }
                }
            }
            if std::mem::take(&mut ch.idle) {
                ch.stream.encoder.reset();
            }
            ch.stream.encode(&total, None);
            ch.out = Delivery::Mix(ch.stream.payload.clone());
            w.channels += 1;
            for (n, sel) in self.selected.iter_mut().enumerate() {
                if sel.source || chan.get(n).copied().flatten().is_none_or(|(c, _)| c != ch.id) {
                    continue;
                }
                if voices <= 1 && self.cfg.dtx {
                    // They are the only voice they could hear: nobody.
                    sel.idle = true;
                    w.dtx += usize::from(!dtx_out.is_nothing());
                    sel.out = dtx_out.clone();
                    continue;
                }
                if std::mem::take(&mut sel.idle) {
                    sel.stream.encoder.reset();
                }
                sel.stream.encode(&total, pcm[n].as_ref());
                sel.out = Delivery::Mix(sel.stream.payload.clone());
                w.encodes += 1;
            }
        }
        w
    }

    /// How this tick serves the listeners, from the selection just made
    /// (the room's speakers: whisperers are served by the whisper pass).
    fn next_mode(&mut self, room_speakers: &[ParticipantId]) -> MixMode {
        let cfg = &self.cfg;
        let mode = match room_speakers {
            [] if cfg.dtx => MixMode::Silent,
            // A speaker whose voice is processed is decoded, processed and
            // encoded even alone: forwarding would skip the processing.
            [only] if cfg.passthrough && !self.processed(*only) => {
                // Switch in a pause: the listeners' decoders then change
                // streams while there is nothing to hear.
                let quiet = self
                    .participant(*only)
                    .is_ok_and(|p| p.level >= cfg.silence_level || f32::from(127 - p.level) + PAUSE_DB <= p.loudness);
                // Shedding speakers (level 3+) forwards at once: cost first.
                let held = (self.alone_for >= cfg.mix_hold_ticks && quiet) || self.shed >= 3;
                if self.mode == MixMode::Mix && !held { MixMode::Mix } else { MixMode::Forward(*only) }
            }
            _ => MixMode::Mix,
        };
        self.alone_for = if mode == MixMode::Mix && room_speakers.len() == 1 { self.alone_for + 1 } else { 0 };
        mode
    }

    /// Feeds the forwarded speaker's last frames (decoded afresh) to the
    /// listener encoder, output discarded, so the first mixed frame
    /// continues the signal the listeners' decoders just played and the
    /// speaker's decoder is warm for this tick's frame. Returns the frames
    /// primed (each one decode and one encode).
    fn prime(&mut self, id: ParticipantId, tick: u64) -> usize {
        let Some(&(s, i)) = self.index.get(&id) else { return 0 };
        let recent = std::mem::take(&mut self.recent);
        let p = &mut self.shards[s].members[i];
        let dec = match &mut p.dec {
            Some(dec) => dec,
            None => match DecodeState::new() {
                Some(dec) => p.dec.insert(dec),
                None => return 0,
            },
        };
        dec.decoder.reset();
        p.decoder_resets += 1;
        let mut primed = 0;
        for payload in &recent {
            let mut pcm = [0.0f32; FRAME_SAMPLES];
            if dec.decoder.decode(payload, &mut pcm).is_err() {
                continue;
            }
            apply_gain(&mut pcm, p.gain);
            self.listener.encode(&pcm, None);
            primed += 1;
        }
        if primed > 0 && tick > 0 {
            // This tick's frame continues the primed decoder (no reset).
            dec.decoded_at = Some(tick - 1);
        }
        self.recent = recent;
        primed
    }

    /// The loudness from which an unselected, talking, unlevelled
    /// participant could matter to this tick's selection: within
    /// [`CHALLENGE_MARGIN_DB`] of beating the weakest speaker by the
    /// hysteresis. −∞ (everyone talking is decoded) while a seat is free or
    /// the selection comes from outside ([`Room::set_selection`]: the mesh
    /// ranks candidates by their loudness, kept fresh).
    fn challenge_floor(&self, k: usize) -> f32 {
        if self.external.is_some() || self.selected.len() < k {
            return f32::NEG_INFINITY;
        }
        let weakest = self
            .selected
            .iter()
            .map(|sel| self.participant(sel.id).map_or(0.0, Participant::rank))
            .fold(f32::INFINITY, f32::min);
        weakest + self.cfg.hysteresis_db - CHALLENGE_MARGIN_DB
    }

    fn participant_mut(&mut self, id: ParticipantId) -> Result<&mut Participant, MixError> {
        let (s, i) = *self.index.get(&id).ok_or(MixError::UnknownParticipant(id))?;
        Ok(&mut self.shards[s].members[i])
    }

    fn participant(&self, id: ParticipantId) -> Result<&Participant, MixError> {
        let (s, i) = *self.index.get(&id).ok_or(MixError::UnknownParticipant(id))?;
        Ok(&self.shards[s].members[i])
    }

    /// Speaker selection with hold and hysteresis (or the one set from
    /// outside, [`Room::set_selection`]).
    fn select(&mut self, k: usize) {
        if self.external.is_some() {
            self.select_external(k);
            return;
        }
        // A lower limit (shedding) drops the weakest speakers.
        while self.selected.len() > k {
            let weakest = self
                .selected
                .iter()
                .map(|sel| (sel.id, self.participant(sel.id).map_or(0.0, Participant::rank)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(id, _)| id);
            let Some(out) = weakest else { break };
            self.drop_speakers(|sel| sel.id == out);
        }
        // Speakers who stopped talking (hold expired) or were muted leave.
        let index = &self.index;
        let shards = &self.shards;
        let still = |id: ParticipantId| {
            let (s, i) = index[&id];
            let p = &shards[s].members[i];
            p.talking && !p.muted
        };
        let leaving: Vec<ParticipantId> = self.selected.iter().map(|s| s.id).filter(|&id| !still(id)).collect();
        if !leaving.is_empty() {
            self.drop_speakers(|sel| leaving.contains(&sel.id));
        }

        let mut challengers: Vec<Candidate> = self
            .shards
            .iter()
            .flat_map(|s| s.candidates.iter().copied())
            .filter(|c| self.participant(c.id).is_ok_and(|p| p.slot.is_none()))
            .collect();
        challengers.sort_unstable_by(|a, b| b.loudness.total_cmp(&a.loudness));
        let mut challengers = challengers.into_iter().peekable();

        // Free slots go to the loudest challengers.
        while self.selected.len() < k {
            let Some(c) = challengers.next() else { break };
            self.add_speaker(c.id);
        }
        // A full set changes only for a challenger louder than the weakest
        // speaker by the hysteresis margin.
        while let Some(c) = challengers.peek().copied() {
            let weakest = self
                .selected
                .iter()
                .enumerate()
                .map(|(n, sel)| (n, self.participant(sel.id).map_or(0.0, Participant::rank)))
                .min_by(|a, b| a.1.total_cmp(&b.1));
            let Some((n, weakest_loudness)) = weakest else { break };
            if c.loudness <= weakest_loudness + self.cfg.hysteresis_db {
                break;
            }
            challengers.next();
            let out = self.selected[n].id;
            self.drop_speakers(|sel| sel.id == out);
            self.add_speaker(c.id);
        }
    }

    fn add_speaker(&mut self, id: ParticipantId) {
        let encoder = match self.spare_encoders.pop() {
            Some(mut e) => {
                e.reset();
                e
            }
            None => match Encoder::new(&self.speaker_encoder_config()) {
                Ok(e) => e,
                // libopus out of memory: this challenger is not selected this tick.
                Err(_) => return,
            },
        };
        // Start at the listener stream's limiter gain so the level is continuous.
        let limiter = self.listener.limiter.clone();
        let source = self.participant(id).is_ok_and(|p| p.source || p.remote);
        self.selected.push(Selected {
            id,
            stream: Stream { encoder, limiter, payload: Bytes::new() },
            out: Delivery::Nothing,
            idle: false,
            source,
        });
        let slot = self.selected.len() - 1;
        if let Ok(p) = self.participant_mut(id) {
            p.slot = Some(slot);
        }
    }

    fn drop_speakers(&mut self, mut leaves: impl FnMut(&Selected) -> bool) {
        let mut kept = Vec::with_capacity(self.selected.len());
        for sel in self.selected.drain(..) {
            if leaves(&sel) {
                if let Some(&(s, i)) = self.index.get(&sel.id) {
                    let p = &mut self.shards[s].members[i];
                    p.slot = None;
                    // Unseated: played as it comes again (the frame held back is dropped).
                    p.lagged = None;
                }
                self.spare_encoders.push(sel.stream.encoder);
            } else {
                kept.push(sel);
            }
        }
        self.selected = kept;
        for (n, sel) in self.selected.iter().enumerate() {
            if let Some(&(s, i)) = self.index.get(&sel.id) {
                self.shards[s].members[i].slot = Some(n);
            }
        }
        // Keep a few spares, free the rest.
        let keep = match self.cfg.max_speakers {
            SpeakerLimit::Top(k) => k,
            SpeakerLimit::All => 8,
        };
        self.spare_encoders.truncate(keep);
    }
}

/// Whether a speaker's voice is (noise suppressed, loudness normalised):
/// their own setting, else the room's.
fn processing(cfg: &RoomConfig, raw_source: bool, suppress: Option<bool>, normalise: Option<bool>) -> (bool, bool) {
    let room_suppresses = match cfg.noise_suppression {
        NoiseSuppression::Auto => raw_source,
        NoiseSuppression::On => true,
        NoiseSuppression::Off => false,
    };
    (suppress.unwrap_or(room_suppresses), normalise.unwrap_or(cfg.loudness))
}

fn apply_gain(pcm: &mut Pcm, gain: f32) {
    if gain != 1.0 {
        pcm.iter_mut().for_each(|x| *x *= gain);
    }
}

impl Stream {
    fn encode(&mut self, total: &Pcm, own: Option<&Pcm>) {
        let mut mix = *total;
        if let Some(own) = own {
            mix_minus(total, own, &mut mix);
        }
        self.limiter.process(&mut mix);
        self.payload = self.encoder.encode(&mix);
    }
}

impl Shard {
    /// Phase A for one shard. Returns the decodes it ran (participants whose
    /// packets carry no audio level are decoded to measure it) and the frames
    /// it found lost and concealed.
    /// `challenge`: the loudness from which a talking unlevelled participant
    /// is decoded every tick ([`Room::challenge_floor`]).
    /// `keep_onsets`: keep each unseated local talker's frame for the next
    /// tick (`Participant::unplayed`).
    fn observe(
        &mut self,
        cfg: &RoomConfig,
        tick: u64,
        k: usize,
        decode_speakers: bool,
        challenge: f32,
        keep_onsets: bool,
    ) -> Observed {
        let mut seen = Observed::default();
        self.candidates.clear();
        for p in &mut self.members {
            // A remote's frame was handed in; a missing one is lost only
            // while selected (its node sends it then), else the remote is
            // just not among its node's candidates.
            let popped = if p.remote
                && let Some(feed) = &mut p.feed
            {
                feed.take(p.slot.is_some())
            } else {
                p.jitter.pop()
            };
            // The level of the frame that came (a speaker played a tick late
            // is heard from the one before, but talks with this one).
            let level = match &popped {
                Playout::Frame(f) => f.level,
                Playout::Lost { .. } | Playout::Empty => Some(127),
            };
            p.onset = std::mem::replace(&mut p.unplayed, Playout::Empty);
            // Only frames that carry their level: an unlevelled one may be
            // decoded below to measure it, and a decoder takes frames in order.
            if keep_onsets && p.slot.is_none() && !p.remote && !p.source && !p.muted && level.is_some() {
                p.unplayed = popped.clone();
            }
            p.pending = match &mut p.lagged {
                Some(held) => std::mem::replace(held, popped),
                None => popped,
            };
            let lost = matches!(p.pending, Playout::Lost { .. });
            seen.lost += u64::from(lost);
            // Current speakers are decoded here, in parallel, while the room
            // mixes (they are almost always selected again); frames without
            // an audio level are measured (a decode only when the packet
            // does not say it is silent, see `measure_unlevelled`).
            let (decoded, level) = if p.muted {
                (None, level.unwrap_or(127))
            } else if p.slot.is_some() && decode_speakers {
                let measured = p.decode_pending(tick, cfg);
                (measured, level.or(measured).unwrap_or(127))
            } else if let Some(level) = level {
                (None, level)
            } else {
                let (level, ran) = p.measure_unlevelled(tick, cfg, challenge);
                (ran.then_some(level), level)
            };
            seen.decodes += usize::from(decoded.is_some());
            seen.remote_decodes += usize::from(decoded.is_some() && p.remote);
            seen.concealed += u64::from(lost && decoded.is_some());
            p.level = level;
            if p.dec.as_ref().is_some_and(|d| d.decoded_at.is_none_or(|t| tick - t > DECODER_IDLE_TICKS))
                && p.slot.is_none()
            {
                p.dec = None;
                // RNNoise's state goes with the decoder (the normaliser's few bytes stay).
                if let Some(v) = &mut p.voice {
                    v.suppressor = None;
                }
            }
            let active = !p.muted && p.level < cfg.silence_level;
            let instant = if active { f32::from(127 - p.level) + p.gain_db } else { 0.0 };
            p.loudness = instant.max(p.loudness - cfg.release_db_per_tick).max(0.0);
            if active {
                p.last_active = Some(tick);
                if !p.talking {
                    p.talking = true;
                    self.events.push(TalkEvent::Started(p.id));
                }
            } else if p.talking && (p.muted || p.last_active.is_none_or(|t| tick - t > u64::from(cfg.hold_ticks))) {
                p.talking = false;
                self.events.push(TalkEvent::Stopped(p.id));
            }
            if p.talking && !p.muted && p.slot.is_none() {
                self.candidates.push(Candidate { id: p.id, loudness: p.rank() });
            }
        }
        if self.candidates.len() > k {
            self.candidates.select_nth_unstable_by(k - 1, |a, b| b.loudness.total_cmp(&a.loudness));
            self.candidates.truncate(k);
        }
        seen
    }
}

/// What the whisper pass did ([`Room::whisper`]).
#[derive(Debug, Default, Clone, Copy)]
struct Whispered {
    decodes: usize,
    remote_decodes: usize,
    concealed: u64,
    /// Selected speakers' own mixes encoded.
    encodes: usize,
    /// Channels' "room + channel" mixes encoded.
    channels: usize,
    dtx: usize,
}

/// What phase A saw in one shard.
#[derive(Debug, Default, Clone, Copy)]
struct Observed {
    decodes: usize,
    remote_decodes: usize,
    lost: u64,
    concealed: u64,
}

impl Observed {
    fn sum(a: Self, b: Self) -> Self {
        Self {
            decodes: a.decodes + b.decodes,
            remote_decodes: a.remote_decodes + b.remote_decodes,
            lost: a.lost + b.lost,
            concealed: a.concealed + b.concealed,
        }
    }
}
