//! Room configuration: defaults in code, validated before use.

use crate::MixError;
use crate::voice::{DEFAULT_LOUDNESS_TARGET_DBFS, NoiseSuppression};

/// How many speakers are mixed each tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpeakerLimit {
    /// At most this many (the K loudest). Must be at least 1.
    Top(usize),
    /// Every active, unmuted participant (decode and encode cost grow with N).
    All,
}

/// Opus encoder settings for the mixed streams (48 kHz mono, 20 ms frames).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EncoderConfig {
    /// libopus complexity, 0 (fastest) to 10 (best). Default 10: only K+1
    /// encodes run per tick, so the best quality costs nothing that grows with N.
    pub complexity: i32,
    /// libopus complexity of each selected speaker's own stream (the mix
    /// without themselves, heard by that one person), 0 to 10. Default 0
    /// (see `docs/benchmarks.md` for what a lower one saves and costs);
    /// never above `complexity`'s shed level.
    pub speaker_complexity: i32,
    /// Target bitrate in bits per second, 6 000 to 510 000. Default 32 000.
    pub bitrate_bps: i32,
    /// In-band forward error correction in the mixed streams. Default on.
    pub inband_fec: bool,
    /// Expected packet loss (percent, 0 to 100) the encoder plans FEC for. Default 10.
    pub expected_loss_percent: i32,
}

impl Default for EncoderConfig {
    fn default() -> Self {
        Self { complexity: 10, speaker_complexity: 0, bitrate_bps: 32_000, inband_fec: true, expected_loss_percent: 10 }
    }
}

/// Jitter buffer settings, in 20 ms frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JitterConfig {
    /// Frames buffered before playout starts (and restarts after an underrun). Default 2.
    pub depth: usize,
    /// Most frames held; beyond it the oldest are dropped so delay stays bounded. Default 16 (320 ms).
    pub max_frames: usize,
    /// Largest RTP timestamp step, in samples, accepted as a pause rather than garbage.
    /// Default 28 800 000 (10 minutes at 48 kHz).
    pub max_timestamp_jump: u32,
}

impl Default for JitterConfig {
    fn default() -> Self {
        Self { depth: 2, max_frames: 16, max_timestamp_jump: 48_000 * 600 }
    }
}

/// Everything a room's mixer can be told. `RoomConfig::default()` is what a
/// production room should run with.
#[derive(Debug, Clone, PartialEq)]
pub struct RoomConfig {
    /// Speakers mixed per tick. Default `Top(5)`.
    pub max_speakers: SpeakerLimit,
    /// Most participants the room accepts. Default 100 000.
    pub max_participants: usize,
    /// RFC 6464 level (−dBov, 0 loudest, 127 silent) at or above which a
    /// frame counts as silence. Default 70 (quieter than −70 dBov).
    pub silence_level: u8,
    /// A participant stays "talking" (and selected) this many ticks after
    /// their last active frame, so pauses between words do not flap. Default 25 (500 ms).
    pub hold_ticks: u32,
    /// A challenger replaces the weakest selected speaker only when louder by
    /// this many dB. Default 6.
    pub hysteresis_db: f32,
    /// How fast a participant's smoothed loudness decays, in dB per tick. Default 1.
    pub release_db_per_tick: f32,
    /// Participants per shard: the unit of parallel work. Default 256.
    pub shard_size: usize,
    /// Jitter buffer settings.
    pub jitter: JitterConfig,
    /// Encoder settings of the mixed streams.
    pub encoder: EncoderConfig,
    /// With exactly one speaker selected, listeners are sent that speaker's
    /// own Opus frames (no decode, no encode) and the speaker hears nothing.
    /// Off: the one speaker is decoded and the mix encoded as with two. Default on.
    pub passthrough: bool,
    /// With nobody selected, listeners are sent a one-byte Opus DTX frame every
    /// [`DTX_INTERVAL_TICKS`] ticks and nothing in between (as a browser does
    /// while silent). Off: an encoded frame of silence every tick. Default on.
    pub dtx: bool,
    /// After a mix of two or more speakers, a single remaining speaker is
    /// forwarded only once they have been alone this many ticks, and then at
    /// a pause in their speech (a switch mid-word is audible; one in a pause
    /// is not), so one/two speakers do not flip the listener's stream every
    /// tick. Default 10 (200 ms).
    pub mix_hold_ticks: u32,
    /// When the listeners' stream switches from forwarded frames to the
    /// encoded mix, the listener encoder is first fed the forwarded speaker's
    /// last four frames (four decodes, four encodes, once per switch) and
    /// codes its first two mixed frames without inter-frame prediction, so
    /// the first mixed frame continues what the listeners' decoders just
    /// played (measured: within 2 dB of the steady level, against a −35 dB
    /// hole without). Default on (off only to measure what it buys).
    pub prime_on_switch: bool,
    /// Noise suppression (RNNoise) of the selected speakers' voices:
    /// `Auto` (default) for participants marked as raw sources
    /// ([`crate::Room::set_raw_source`]: plain RTP phones and gateways),
    /// `On` for all, `Off` for none; a participant's own setting overrides
    /// it. A suppressed lone speaker is decoded and encoded, not forwarded.
    pub noise_suppression: NoiseSuppression,
    /// Loudness normalisation of the selected speakers' voices toward
    /// `loudness_target_dbfs` (a participant's own setting overrides it).
    /// Default off. A normalised lone speaker is decoded and encoded, not forwarded.
    pub loudness: bool,
    /// The level loudness normalisation aims for: RMS of active speech in
    /// dBFS, −40 to −6. Default −23 (headroom for several speakers summed
    /// before the limiter).
    pub loudness_target_dbfs: f32,
    /// Speakers sit on seats of an arc and the mix is rendered in stereo for
    /// the participants who asked for it ([`crate::Room::set_stereo`]), in
    /// mono (the stereo render's channels averaged) for the others. Default off.
    pub spatial: bool,
    /// With `spatial`, the stereo render is binaural: each seat through a
    /// dummy head's impulse responses (for headphones) rather than panned.
    /// The mono render stays the stereo one's downmix, at the panned level
    /// (within 1 dB). Default off.
    pub binaural: bool,
}

/// Ticks between two DTX frames sent to a listener while nobody speaks (400 ms).
pub const DTX_INTERVAL_TICKS: u64 = 20;

/// Most speakers a room may mix (`SpeakerLimit::Top`): an RTP packet's
/// CSRC list, which names the contributors, holds 15 at most (RFC 3550), and
/// each speaker costs a decode and an encode per tick.
pub const MAX_SPEAKERS: usize = 16;

impl Default for RoomConfig {
    fn default() -> Self {
        Self {
            max_speakers: SpeakerLimit::Top(5),
            max_participants: 100_000,
            silence_level: 70,
            hold_ticks: 25,
            hysteresis_db: 6.0,
            release_db_per_tick: 1.0,
            shard_size: 256,
            jitter: JitterConfig::default(),
            encoder: EncoderConfig::default(),
            passthrough: true,
            dtx: true,
            mix_hold_ticks: 10,
            prime_on_switch: true,
            noise_suppression: NoiseSuppression::Auto,
            loudness: false,
            loudness_target_dbfs: DEFAULT_LOUDNESS_TARGET_DBFS,
            spatial: false,
            binaural: false,
        }
    }
}

impl RoomConfig {
    /// Checks every value against its documented range.
    pub fn validate(&self) -> Result<(), MixError> {
        let bad = |what: &str| Err(MixError::InvalidConfig(what.to_owned()));
        if let SpeakerLimit::Top(k) = self.max_speakers
            && !(1..=MAX_SPEAKERS).contains(&k)
        {
            return Err(MixError::InvalidConfig(format!("max_speakers must be within 1..={MAX_SPEAKERS}")));
        }
        if self.max_participants == 0 {
            return bad("max_participants must be at least 1");
        }
        if self.silence_level == 0 || self.silence_level > 127 {
            return bad("silence_level must be within 1..=127");
        }
        if !(self.hysteresis_db.is_finite() && self.hysteresis_db >= 0.0) {
            return bad("hysteresis_db must be a finite number >= 0");
        }
        if !(self.release_db_per_tick.is_finite() && self.release_db_per_tick > 0.0) {
            return bad("release_db_per_tick must be a finite number > 0");
        }
        if self.shard_size == 0 {
            return bad("shard_size must be at least 1");
        }
        let j = &self.jitter;
        if j.depth == 0 || j.max_frames < j.depth {
            return bad("jitter.depth must be at least 1 and jitter.max_frames at least depth");
        }
        if j.max_timestamp_jump == 0 || j.max_timestamp_jump > i32::MAX as u32 {
            return bad("jitter.max_timestamp_jump must be within 1..=2^31-1");
        }
        if !(self.loudness_target_dbfs.is_finite() && (-40.0..=-6.0).contains(&self.loudness_target_dbfs)) {
            return bad("loudness_target_dbfs must be within -40..=-6 (dBFS)");
        }
        let e = &self.encoder;
        if !(0..=10).contains(&e.complexity) {
            return bad("encoder.complexity must be within 0..=10");
        }
        if !(0..=10).contains(&e.speaker_complexity) {
            return bad("encoder.speaker_complexity must be within 0..=10");
        }
        if !(6_000..=510_000).contains(&e.bitrate_bps) {
            return bad("encoder.bitrate_bps must be within 6000..=510000");
        }
        if !(0..=100).contains(&e.expected_loss_percent) {
            return bad("encoder.expected_loss_percent must be within 0..=100");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        RoomConfig::default().validate().expect("defaults valid");
        let cfg = RoomConfig { max_speakers: SpeakerLimit::Top(0), ..Default::default() };
        let err = cfg.validate().expect_err("K=0 rejected").to_string();
        assert!(err.contains("max_speakers"), "{err}");
        let mut cfg = RoomConfig::default();
        cfg.encoder.complexity = 11;
        assert!(cfg.validate().expect_err("complexity").to_string().contains("complexity"));
        let mut cfg = RoomConfig::default();
        cfg.jitter.max_frames = 1;
        assert!(cfg.validate().is_err());
        let cfg = RoomConfig { hysteresis_db: f32::NAN, ..Default::default() };
        assert!(cfg.validate().is_err());
        let cfg = RoomConfig { max_speakers: SpeakerLimit::Top(100_000), ..Default::default() };
        assert!(cfg.validate().expect_err("K bounded").to_string().contains("1..=16"));
        RoomConfig { max_speakers: SpeakerLimit::Top(MAX_SPEAKERS), ..Default::default() }.validate().expect("16 ok");
    }
}
