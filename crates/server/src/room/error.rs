//! Why a room operation was refused.

/// A refused room operation. The API maps each to a status and a stable
/// code (`api::error`); nothing here knows about HTTP.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RoomError {
    /// No room of that id.
    #[error("there is no room '{0}'")]
    NoRoom(String),
    /// No participant of that id in the room.
    #[error("there is no participant {0} in this room")]
    NoParticipant(u64),
    /// A room of that id exists already.
    #[error("room '{0}' already exists")]
    RoomExists(String),
    /// The id is not 1 to 64 letters, digits, '-' or '_'.
    #[error("a room id is 1 to 64 letters, digits, '-' or '_'")]
    BadRoomId,
    /// The room settings are not valid.
    #[error("{0}")]
    BadRoomConfig(String),
    /// The room holds its maximum of participants.
    #[error("room '{room}' is full ({max})")]
    RoomFull {
        /// The room.
        room: String,
        /// Its maximum.
        max: usize,
    },
    /// The server holds its maximum of rooms.
    #[error("the server holds its maximum of {0} rooms")]
    TooManyRooms(usize),
    /// The server holds its maximum of participants.
    #[error("the server holds its maximum of {0} participants")]
    TooManyParticipants(usize),
    /// A listen-only participant may not be unmuted.
    #[error("participant {0} may only listen: its token does not allow speaking")]
    ListenOnly(u64),
    /// A value out of its range.
    #[error("{0}")]
    BadValue(String),
    /// The room is locked: no new joins.
    #[error("room '{0}' is locked: it takes no new participants")]
    Locked(String),
    /// The identity was removed from the room and may not rejoin yet.
    #[error("you were removed from this room and may not rejoin for {0} s")]
    Banned(u64),
    /// A move into the room the participant is in already.
    #[error("participant is in room '{0}' already")]
    SameRoom(String),
    /// The server is shutting down and takes no joins.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// Attributes that break a bound, or a reserved key set by the participant itself.
    #[error("{0}")]
    Attributes(#[from] crate::attributes::AttributeError),
    /// The room waits for its moderator: a participant held may not unmute.
    #[error("room '{0}' is waiting for its moderator: you are muted until one joins")]
    Waiting(String),
    /// The node is draining: its calls go on, but it takes no new room.
    #[error("this node is draining (a restart or a deploy): it takes no new rooms; try again, or another node")]
    Draining,
}
