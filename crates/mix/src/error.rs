//! Errors of the mixing core.

use crate::ParticipantId;

/// What can go wrong when configuring a room or managing its participants.
///
/// Per-packet problems (late, duplicate, corrupt or absurd packets) are not
/// errors: they are counted in [`crate::ParticipantStats`] and skipped, so
/// one participant's bad input never stops a tick.
#[derive(Debug, thiserror::Error)]
pub enum MixError {
    /// A configuration value is out of its documented range.
    #[error("invalid mixer configuration: {0}")]
    InvalidConfig(String),
    /// A participant with this id is already in the room.
    #[error("participant {0} is already in the room")]
    DuplicateParticipant(ParticipantId),
    /// No participant with this id is in the room.
    #[error("participant {0} is not in the room")]
    UnknownParticipant(ParticipantId),
    /// The room already holds its configured maximum of participants.
    #[error("the room is full ({0} participants)")]
    RoomFull(usize),
    /// A remote's frames are handed in with [`crate::Room::put_remote_frame`],
    /// not pushed as packets.
    #[error("participant {0} is on another node: its frames are put, not pushed")]
    Remote(ParticipantId),
    /// [`crate::Room::put_remote_frame`] for a participant that is not a remote.
    #[error("participant {0} is not a remote participant")]
    NotRemote(ParticipantId),
    /// A participant is in another whisper channel already (one channel each).
    #[error("participant {0} is in another whisper channel")]
    InChannel(ParticipantId),
    /// No whisper channel with this id is open in the room.
    #[error("no whisper channel {0}")]
    UnknownChannel(u64),
    /// The room holds [`crate::MAX_CHANNELS`] whisper channels already.
    #[error("the room has {0} whisper channels already")]
    TooManyChannels(usize),
    /// A seat outside the arc (see [`crate::MAX_SEAT`]).
    #[error("seat {0} is not on the arc (-{max}..={max})", max = crate::MAX_SEAT)]
    InvalidSeat(i8),
    /// libopus refused to create or configure a codec state.
    #[error("opus: {0}")]
    Codec(#[from] opus::Error),
    /// The rayon pool could not be built (for example, threads could not be spawned).
    #[error("mixer thread pool: {0}")]
    Pool(#[from] rayon::ThreadPoolBuildError),
}
