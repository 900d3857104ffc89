//! # The room domain: rooms, their members, and where each peer is
//!
//! No sockets, no HTTP, no threads: [`Rooms`] is the single owner of the
//! rooms map and the peer registry, and every operation a user can cause
//! (create, join, leave, mute, gain, delete, and the stage's speak, hand,
//! lock, resize, mute-all and kick: `stage`; files played into a room, its
//! enter and leave sounds and hold music: `playback`) is a method here that checks,
//! changes the state, tells the room's subscribers ([`RoomEvent`]) and
//! returns `Result<_, RoomError>`. What must happen elsewhere is returned as
//! [`Effect`]s ("close peer P on I/O thread T"), for the caller to carry out:
//! the API hands them to the media plane, and an I/O thread carries out
//! its own.
//!
//! ```text
//! api ──create/join/leave/mute──► Rooms ──► Room (members, events, mixer)
//!                                   │            ▲ deliver(packets)  ▲ tick(pool, n)
//!                                   ▼            │                   │
//! media/io ──claim(ufrag)──► Registry: Adopt | Forward | Unknown    media/clock
//! ```
//!
//! Lock order, outer to inner: the rooms map → a room's mixer → its members
//! → the registry. The media path takes none of them per packet.

mod data;
mod error;
mod event;
mod member;
mod moderation;
mod moves;
mod plain;
pub(crate) mod playback;
mod playing;
mod registry;
mod remote_seats;
#[allow(clippy::module_inception)]
mod room;
mod rooms;
mod spatial;
mod stage;
mod voice;
mod waiting;
pub(crate) mod whisper;
mod whispering;

pub(crate) use data::DataMessage;
pub(crate) use error::RoomError;
pub(crate) use event::{
    EventBatch, EventKinds, MAX_RELAYED_BATCH_BYTES, RoomEvent, listed_participant, relayed_events,
};
pub(crate) use member::{Admin, LeaveReason, ListenOnly, Member};
pub(crate) use moderation::{MODERATOR_ATTRIBUTE, Moderation, OnModeratorLeave};
pub(crate) use plain::PlainJoiner;
pub(crate) use registry::Claim;
pub(crate) use remote_seats::MAX_REMOTE_SEATS;
pub(crate) use room::{Inboxes, MovedTo, REMOTE_ID_BASE, Room, RoomKey, RoomMix, SpeakerFeed};
pub(crate) use rooms::{Effect, Joiner, Rooms, clean_name, valid_room_id};
pub use spatial::SpatialMode;
pub(crate) use stage::{CarriedStage, RoomUpdate};
pub(crate) use voice::{ParticipantVoice, double_option, parse_noise_suppression};

#[cfg(test)]
mod tests;
