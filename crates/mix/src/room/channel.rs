//! A whisper channel's identity and state: its id, the room's bound on
//! channels, and its one "room + channel" stream. The channel operations and
//! the whisper pass of a tick are in `whisper`.

use super::delivery::{Delivery, Stream};
#[cfg(doc)]
use crate::Room;

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
pub(super) struct Channel {
    pub(super) id: ChannelId,
    pub(super) stream: Stream,
    /// What its members who are not selected speakers are sent after the
    /// last tick, when `active`.
    pub(super) out: Delivery,
    /// One of its whisperers was selected in the last tick: its members hear
    /// a mix of their own. Otherwise they hear what the room hears.
    pub(super) active: bool,
    /// Its stream was not encoded last tick.
    pub(super) idle: bool,
    /// Participants in it (whisperers and listeners).
    pub(super) members: usize,
}
