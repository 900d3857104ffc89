//! Whisper channels: some participants hear the room plus a channel, the
//! rest hear the room only (a coach whispering to one person, an
//! interpreter for a few listeners).
//!
//! A channel has *speakers* (who whisper: heard by the channel's members
//! only, never by the rest of the room) and *listeners* (who hear the room
//! plus the channel; their own voice goes to the room as before). A
//! participant is in one channel at most. The mixer (`tutti_mix::Room::
//! open_channel`) makes one "room + channel" mix per channel whose speaker
//! is talking, and each selected speaker's own mix without them: the cost
//! grows with the channels, never with their listeners.
//!
//! What the room does not hear it is not told either: a speaker of a
//! channel is left out of the room's `talking` events, its active speakers,
//! the RFC 6465 levels of everyone outside the channel, the recording and
//! RTP out (the room's mix) and the per-speaker feed.
//!
//! A participant leaving is taken out of its channel; a channel whose last
//! speaker left closes (`whisper_closed`, reason `empty`). A channel whose
//! listeners all left stays open: its speakers asked not to be heard by the
//! room, and closing it would make them so.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use tutti_mix::ChannelId;

use super::event::RoomEvent;

/// A channel, as the API and the events show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct WhisperInfo {
    /// Its id in the room.
    pub(crate) id: u64,
    /// Who whispers in it (heard by its members only), sorted.
    pub(crate) speakers: Vec<u64>,
    /// Who hears the room plus the channel, sorted.
    pub(crate) listeners: Vec<u64>,
}

/// The bounds an admin's change must keep (`[whisper]`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct WhisperLimits {
    /// Channels per room.
    pub(crate) max_channels: usize,
    /// Members (speakers and listeners) per channel.
    pub(crate) max_members: usize,
}

/// Why a whisper change was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WhisperError {
    /// A participant named is not in the room (it may have left).
    #[error("there is no participant {0} in this room (it may have left)")]
    NoParticipant(u64),
    /// A participant named is in another channel already.
    #[error("participant {participant} is in whisper channel {channel} already (one channel each)")]
    InChannel {
        /// The participant.
        participant: u64,
        /// Its channel.
        channel: u64,
    },
    /// The room holds `whisper.max_channels` channels.
    #[error("the room has {0} whisper channels already (whisper.max_channels)")]
    TooMany(usize),
    /// More members than `whisper.max_members`.
    #[error("a whisper channel has at most {0} members, speakers and listeners together (whisper.max_members)")]
    TooManyMembers(usize),
    /// No channel of that id.
    #[error("there is no whisper channel {0} in this room")]
    NotFound(u64),
    /// The request itself is wrong (no speaker, a participant named twice).
    #[error("{0}")]
    Bad(String),
    /// The room was deleted.
    #[error("the room was closed")]
    Closed,
}

/// A room's channels (kept with its mixer, under the mixer's lock).
#[derive(Debug, Default)]
pub(crate) struct Whispers {
    pub(super) channels: BTreeMap<u64, WhisperInfo>,
    pub(super) next: u64,
    /// (member, channel, whispers), sorted by member: what each tick reads
    /// to serve and label the channels' mixes, made anew on a change only.
    members: Arc<[(u64, u64, bool)]>,
}

impl Whispers {
    /// The members of every channel, sorted by id.
    pub(super) fn members(&self) -> Arc<[(u64, u64, bool)]> {
        self.members.clone()
    }

    /// Participant `id`'s channel and whether it whispers in it.
    pub(super) fn of(&self, id: u64) -> Option<(u64, bool)> {
        lookup(&self.members, id)
    }

    /// Takes participant `id`, who left, out of its channel (under the
    /// mixer's lock; the mixer forgot it already). Returns the event to tell.
    pub(super) fn left(&mut self, mixer: &mut tutti_mix::Room, id: u64) -> Option<RoomEvent> {
        let (channel, _) = self.of(id)?;
        let c = self.channels.get_mut(&channel)?;
        c.speakers.retain(|&s| s != id);
        c.listeners.retain(|&l| l != id);
        let event = if c.speakers.is_empty() {
            self.channels.remove(&channel);
            let _ = mixer.close_channel(ChannelId(channel));
            metrics::gauge!(crate::metrics::outputs::WHISPER_CHANNELS).decrement(1.0);
            RoomEvent::WhisperClosed { id: channel, reason: "empty" }
        } else {
            RoomEvent::WhisperChanged { id: channel, speakers: c.speakers.clone(), listeners: c.listeners.clone() }
        };
        self.rebuild();
        Some(event)
    }

    pub(super) fn rebuild(&mut self) {
        let mut members: Vec<(u64, u64, bool)> = self
            .channels
            .values()
            .flat_map(|c| {
                c.speakers.iter().map(|&s| (s, c.id, true)).chain(c.listeners.iter().map(|&l| (l, c.id, false)))
            })
            .collect();
        members.sort_unstable();
        self.members = members.into();
    }
}

/// A member's (channel, whispers) in a sorted member list.
pub(super) fn lookup(members: &[(u64, u64, bool)], id: u64) -> Option<(u64, bool)> {
    members.binary_search_by_key(&id, |m| m.0).ok().map(|i| (members[i].1, members[i].2))
}

/// Whether speaker `id` is heard by someone of `channel` (`None`: outside
/// every channel): a whisperer by its own channel only.
pub(super) fn heard(members: &[(u64, u64, bool)], id: u64, channel: Option<u64>) -> bool {
    match lookup(members, id) {
        Some((c, true)) => channel == Some(c),
        _ => true,
    }
}

pub(super) fn sorted(ids: Vec<u64>) -> Result<Vec<u64>, WhisperError> {
    let mut s = ids.clone();
    s.sort_unstable();
    s.dedup();
    if s.len() != ids.len() {
        return Err(WhisperError::Bad("a participant is named twice".into()));
    }
    Ok(s)
}
