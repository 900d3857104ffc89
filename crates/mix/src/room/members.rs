//! The room's members: adding participants and sources, removing them,
//! their settings (mute, gain, voice processing), the room's limits, packets
//! in, and their counters and state.

use super::Room;
use super::participant::{MAX_GAIN, Participant, processing};
use super::report::{ParticipantStats, VoiceStatus};
use super::shard::Shard;
use crate::config::{RoomConfig, SpeakerLimit};
use crate::jitter::{JitterBuffer, Packet, Playout, PushOutcome};
use crate::phone::InputCodec;
use crate::spatial::default_seat;
use crate::voice::NoiseSuppression;
use crate::{MixError, ParticipantId};

/// What a participant is to the room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Here, sends and is sent ([`Room::add_participant`]).
    Local,
    /// A file played in, sent nothing ([`Room::add_source`]).
    Source,
    /// On another node, sent nothing, frames handed in ([`Room::add_remote`]).
    Remote,
}

impl Room {
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

    pub(super) fn add(&mut self, id: ParticipantId, kind: Kind) -> Result<(), MixError> {
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
            local: false,
            channel: None,
            codec: InputCodec::Opus,
            reencoder: None,
            seat: default_seat(&id.0.to_le_bytes()),
            stereo: false,
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
        self.stereo_members -= usize::from(gone.stereo);
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

    /// What a participant's frames are coded in (Opus unless set): a G.711
    /// participant's frames are 160 bytes per 20 ms, decoded by the room
    /// only while selected (see the `phone` module). Its decoder state
    /// starts afresh. A remote's frames are always Opus.
    pub fn set_input_codec(&mut self, id: ParticipantId, codec: InputCodec) -> Result<(), MixError> {
        let p = self.participant_mut(id)?;
        if p.remote || p.codec == codec {
            return Ok(());
        }
        p.codec = codec;
        p.dec = None;
        p.reencoder = None;
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
}
