//! `[room]`: the defaults for new rooms (speakers, Opus, voice processing,
//! creation and closing).

use serde::{Deserialize, Serialize};

/// Defaults for new rooms (a room's creator may choose others).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RoomDefaults {
    /// Participants per room (beyond: 409 `room_full`).
    pub max_participants: usize,
    /// Speakers mixed per tick (the loudest K), 1 to 16.
    pub max_speakers: usize,
    /// While exactly one person speaks, listeners get that speaker's own
    /// Opus frames, forwarded (no decode, no encode); `false`: always the encoded mix.
    pub passthrough: bool,
    /// While nobody speaks, listeners get one Opus DTX frame every 400 ms
    /// instead of 50 encoded silence frames a second; `false`: silence frames.
    pub dtx: bool,
    /// Opus complexity (0 to 10) of the listeners' stream: the mix that
    /// everyone but the selected speakers hears, one encode per busy room
    /// and tick. 10 is the best; 5 costs ~0.8 and 1 ~0.35 of it (see
    /// `docs/benchmarks.md`). Under load the mixer lowers it before it
    /// drops speakers.
    pub complexity: u8,
    /// Opus complexity (0 to 10) of each selected speaker's own stream (the
    /// mix without themselves, heard by that one person), never above
    /// `complexity`. 0 costs a quarter of 10.
    pub speaker_complexity: u8,
    /// A join (REST or WebSocket) for a room that does not exist creates
    /// it; `false`: only an admin creates rooms (`POST /v1/rooms`), and such
    /// a join gets 404 `room_not_found`. Single node and cluster alike.
    pub auto_create: bool,
    /// A room with no participant for this long is deleted (`room_closed`),
    /// whether its participants left or nobody ever joined, in seconds;
    /// 0 = never.
    pub empty_timeout_seconds: f64,
    /// Noise suppression (RNNoise) of the selected speakers: "auto" (plain
    /// RTP participants only: browsers suppress noise themselves), "on"
    /// (everyone), "off". Per room and participant at run time (PATCH).
    pub noise_suppression: String,
    /// Loudness normalisation of the selected speakers toward
    /// `loudness_target_dbfs`. Per room and participant at run time (PATCH).
    pub loudness: bool,
    /// Spatial rooms: each speaker sits on a seat of an arc, heard there by
    /// the participants whose client asks for stereo (the others get the
    /// same render in mono): `false` (off), `true` or "panned" (panned
    /// seats), "binaural" (seats through a dummy head's impulse responses,
    /// for headphones). Per room at creation and at run time (PATCH); see
    /// docs/features/spatial.md.
    pub spatial: crate::room::SpatialMode,
    /// The level loudness normalisation aims for: RMS of active speech, in dBFS, −40 to −6.
    pub loudness_target_dbfs: f64,
}

impl Default for RoomDefaults {
    fn default() -> Self {
        Self {
            max_participants: 10_000,
            max_speakers: 5,
            passthrough: true,
            dtx: true,
            complexity: 10,
            speaker_complexity: 0,
            auto_create: false,
            empty_timeout_seconds: 300.0,
            noise_suppression: "auto".to_owned(),
            loudness: false,
            spatial: crate::room::SpatialMode::Off,
            loudness_target_dbfs: f64::from(tutti_mix::DEFAULT_LOUDNESS_TARGET_DBFS),
        }
    }
}
