//! What a room tells its WebSocket subscribers.

use serde::Serialize;

/// A room event, pushed to the room's WebSocket subscribers as JSON
/// (`{"type": "joined", …}`).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum RoomEvent {
    /// Someone joined.
    Joined { id: u64, name: String },
    /// Someone left (`left`, `timed_out`, `failed`, `room_closed`).
    Left { id: u64, reason: &'static str },
    /// Someone started or stopped talking.
    Talking { id: u64, talking: bool },
    /// Someone was muted or unmuted.
    Muted { id: u64, muted: bool },
    /// The room was deleted.
    RoomClosed,
    /// The server is shutting down: every peer is about to be closed.
    Shutdown { message: String },
}
