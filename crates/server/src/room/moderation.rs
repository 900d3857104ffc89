//! A room's moderation options and state (the rules are `waiting`'s).

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::member::Member;

/// The attribute that makes a participant a moderator.
pub(crate) const MODERATOR_ATTRIBUTE: &str = "tutti.moderator";

/// What happens when a room's last moderator leaves.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum OnModeratorLeave {
    /// Nothing.
    #[default]
    Stay,
    /// Everyone else is muted.
    Mute,
    /// The room is closed (everyone leaves with `room_closed`).
    End,
}

/// A room's moderation options.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub(crate) struct Moderation {
    /// Hold participants muted, with the hold music, until a moderator joins.
    #[serde(default)]
    pub(crate) wait_for_moderator: bool,
    /// When the last moderator leaves.
    #[serde(default)]
    pub(crate) on_moderator_leave: OnModeratorLeave,
    /// Everyone but a moderator joins muted.
    #[serde(default)]
    pub(crate) join_muted: bool,
}

/// A room's moderation options and state.
#[derive(Debug, Default)]
pub(crate) struct Waiting {
    pub(crate) options: Moderation,
    /// Held: no moderator has joined since the room started waiting.
    pub(crate) waiting: bool,
    /// The other nodes of a spread room that say they have a moderator.
    pub(crate) elsewhere: HashSet<String>,
}

/// Whether `member` is a moderator.
pub(crate) fn is_moderator(member: &Member) -> bool {
    member.admin.is_admin() || member.attributes.get(MODERATOR_ATTRIBUTE).is_some_and(|v| v == "true")
}
