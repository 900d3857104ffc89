//! A participant as the room (and the API) knows it, and why one leaves.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use crate::auth::Grant;

/// Whether a participant's audio is dropped on arrival: shared between the
/// room domain, which sets it when an admin grants or revokes speaking, and
/// the I/O thread that owns the peer, which reads it per packet (one
/// relaxed load, no lock).
#[derive(Debug, Clone, Default)]
pub(crate) struct ListenOnly(Arc<AtomicBool>);

impl ListenOnly {
    pub(crate) fn new(listen_only: bool) -> Self {
        Self(Arc::new(AtomicBool::new(listen_only)))
    }

    /// Whether its audio is dropped.
    pub(crate) fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    pub(crate) fn set(&self, listen_only: bool) {
        self.0.store(listen_only, Ordering::Relaxed);
    }
}

/// Whether a participant's token is an admin's: of its room, or of every
/// room. Told as a flag (`"admin": true`); a move to another room (a
/// breakout) keeps it only for an admin of every room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Admin {
    #[default]
    No,
    /// Of the room it joined (a token for that room).
    OfRoom,
    /// Of every room (a `*` token).
    OfAll,
}

impl Admin {
    /// What `grant` makes a participant of `room`.
    pub(crate) fn of(grant: &Grant, room: &str) -> Self {
        match (grant.may_manage(room), grant.room == "*") {
            (false, _) => Self::No,
            (true, false) => Self::OfRoom,
            (true, true) => Self::OfAll,
        }
    }

    pub(crate) fn is_admin(self) -> bool {
        self != Self::No
    }

    /// What it is in another room it is moved to.
    pub(crate) fn moved(self) -> Self {
        if self == Self::OfAll { Self::OfAll } else { Self::No }
    }
}

impl Serialize for Admin {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(self.is_admin())
    }
}

/// What the room knows about a participant.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Member {
    pub(crate) id: u64,
    pub(crate) name: String,
    /// The identity (`sub`) of the token it joined with.
    pub(crate) identity: String,
    pub(crate) talking: bool,
    pub(crate) muted: bool,
    /// It may not speak (its token lacks `speak`, or an admin revoked it):
    /// muted, its packets dropped on arrival, until an admin grants it.
    pub(crate) listen_only: bool,
    /// Whether ICE and DTLS are up.
    pub(crate) connected: bool,
    /// Its hand is raised (the stage: asking to speak).
    pub(crate) hand: bool,
    /// It is sent nothing (it asked, or an admin made it so): it hears no one.
    pub(crate) deaf: bool,
    /// It joined with an admin token for the room (`mute_all` spares it).
    pub(crate) admin: Admin,
    /// Its attributes (its token's, then as it or an admin changed them).
    pub(crate) attributes: crate::attributes::Attributes,
    /// Moved here by an admin (a breakout): the room it first joined, which
    /// its token may be all that covers. A token of its identity for that
    /// room may still act on it here (mute, leave, ICE restart).
    #[serde(skip)]
    pub(crate) joined_in: Option<String>,
    /// The I/O thread's copy of `listen_only`.
    #[serde(skip)]
    pub(crate) gate: ListenOnly,
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
    /// An admin removed it.
    Kicked,
    /// Its room was handed over to another node (a drain) and it was told
    /// to rejoin there.
    Moved,
    /// An admin moved it to another room of this node (a breakout): the
    /// same connection goes on there.
    MovedRoom,
    /// Another join with the same identity took its place (one identity, one participant).
    Replaced,
    /// Its WebSocket's token expired before a fresh one came.
    TokenExpired,
}

impl LeaveReason {
    /// The reason as the `left` event says it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Left => "left",
            Self::TimedOut => "timed_out",
            Self::Failed => "failed",
            Self::RoomClosed => "room_closed",
            Self::Kicked => "kicked",
            Self::Moved => "moved",
            Self::MovedRoom => "moved_room",
            Self::Replaced => "replaced",
            Self::TokenExpired => "token_expired",
        }
    }

    /// Why, in words (after "participant N left room R: ").
    pub(crate) fn explain(self) -> &'static str {
        match self {
            Self::Left => "it left",
            Self::TimedOut => {
                "nothing arrived from it within peer_timeout_seconds: its ICE never started (a REST join's SDP answer must be applied at once: the participant waits that long for its first packet) or its media stopped"
            }
            Self::Failed => "its ICE or DTLS failed",
            Self::RoomClosed => "its room was deleted",
            Self::Kicked => "an admin removed it",
            Self::Moved => "its room moved to another node; it was told to rejoin there",
            Self::MovedRoom => "an admin moved it to another room",
            Self::Replaced => "another join with its identity took its place",
            Self::TokenExpired => "its token expired",
        }
    }
}

/// Longest participant name kept, in bytes.
pub(crate) const MAX_NAME_BYTES: usize = 64;
