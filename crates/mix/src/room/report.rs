//! What the room reports: the summary of a tick ([`TickReport`]: its
//! speakers, talking events and counts), each participant's counters and
//! voice processing, and this node's candidates for a selection across nodes.

use std::sync::Arc;

use bytes::Bytes;

use super::delivery::MixMode;
use crate::ParticipantId;
#[cfg(doc)]
use crate::Room;
use crate::jitter::JitterStats;

/// A selected speaker and their level this tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveSpeaker {
    /// Who.
    pub id: ParticipantId,
    /// RFC 6464 level of their frame this tick (127 when they sent none).
    pub level: u8,
    /// Their seat in a spatial room (`None` in a room that is not spatial).
    pub seat: Option<i8>,
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

/// One of this node's candidates for the room's selection across nodes
/// ([`Room::candidates`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalCandidate {
    /// Who (a local participant or source: never a remote).
    pub id: ParticipantId,
    /// RFC 6464 level of their frame this tick (127: silent or none).
    pub level: u8,
    /// Smoothed loudness in 1/256 dB above the silence floor (larger is
    /// louder): the mixer's own ranking value (`127 − level + gain dB`,
    /// with its release), times 256, rounded; 0 to 35,584 (+12 dB gain).
    pub rank: u16,
    /// Selected this tick (an incumbent, for hysteresis across nodes).
    pub selected: bool,
    /// The original Opus payload played this tick (`None`: lost or none).
    pub frame: Option<Bytes>,
}
