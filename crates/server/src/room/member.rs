//! A participant as the room (and the API) knows it, and why one leaves.

use serde::Serialize;

/// What the room knows about a participant.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Member {
    pub(crate) id: u64,
    pub(crate) name: String,
    /// The identity (`sub`) of the token it joined with.
    pub(crate) identity: String,
    pub(crate) talking: bool,
    pub(crate) muted: bool,
    /// Its token lacks `speak`: muted for good, its packets dropped on arrival.
    pub(crate) listen_only: bool,
    /// Whether ICE and DTLS are up.
    pub(crate) connected: bool,
}

/// Why a participant is removed (the `reason` of the `left` event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaveReason {
    /// It asked to (API, WebSocket `leave` or close, DTLS close_notify).
    Left,
    /// Nothing arrived from it for the peer timeout, or its ICE never started.
    TimedOut,
    /// Its ICE or DTLS failed.
    Failed,
    /// Its room was deleted.
    RoomClosed,
}

impl LeaveReason {
    /// The reason as the `left` event says it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Left => "left",
            Self::TimedOut => "timed_out",
            Self::Failed => "failed",
            Self::RoomClosed => "room_closed",
        }
    }
}
