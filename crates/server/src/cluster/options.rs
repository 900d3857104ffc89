//! The room options every node of a spread room applies to its own copy:
//! the spatial mode and the moderation options (a room that waits for its
//! moderator, what the last one's leaving does, joining muted).
//!
//! ```text
//! POST /v1/rooms {spatial, wait_for_moderator, …} on node A
//!   ─► applied to A's copy, and stored in the room's signed config (the claim)
//!   ─► node B hosts the room later (a join placed there): made with the stored config
//! PATCH /v1/rooms/{room} {spatial, …} on node A
//!   ─► applied to A's copy ─► Control::Options ─► every other node of the span
//! node B joins the room's span (Control::Joined)
//!   ─► every node hosting the room answers Control::Options (its copy's options now):
//!      a change made after the creation reaches B too
//! a drain hands the room over: the options as they are now go in the carried config
//! ```
//!
//! Fixed-size values (two enums and two booleans): a message stays small.

use serde::{Deserialize, Serialize};

use crate::room::{Moderation, Room, SpatialMode};

/// Options of a room that every node of its span applies (each `None`: as
/// it is there).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RoomOptions {
    /// How the room places its speakers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) spatial: Option<SpatialMode>,
    /// Whether it waits for its moderator, and what it does when they leave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) moderation: Option<Moderation>,
}

impl RoomOptions {
    /// `room`'s options as they are now (both given).
    pub(crate) fn of(room: &Room) -> Self {
        Self { spatial: Some(room.spatial_mode()), moderation: Some(room.moderation()) }
    }

    /// Whether there is nothing to apply.
    pub(crate) fn is_empty(&self) -> bool {
        self.spatial.is_none() && self.moderation.is_none()
    }

    /// Applies the options given to `room` (a moderation that changes holds
    /// or opens the room as `Room::set_moderation` says; a spatial mode seats
    /// its participants).
    pub(crate) fn apply(&self, room: &Room) {
        if let Some(moderation) = self.moderation
            && moderation != room.moderation()
        {
            room.set_moderation(moderation);
        }
        if let Some(mode) = self.spatial
            && mode != room.spatial_mode()
        {
            room.set_spatial(mode);
        }
    }

    /// Writes the options given into a stored room config (a JSON object).
    pub(crate) fn write_into(&self, config: &mut serde_json::Map<String, serde_json::Value>) {
        if let Some(mode) = self.spatial {
            config.insert("spatial".into(), serde_json::to_value(mode).unwrap_or_default());
        }
        if let Some(moderation) = self.moderation {
            config.insert("moderation".into(), serde_json::to_value(moderation).unwrap_or_default());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RoomOptions;
    use crate::room::{Moderation, OnModeratorLeave, SpatialMode};

    #[test]
    fn options_round_trip_and_leave_out_what_is_not_given() {
        let moderation =
            Moderation { wait_for_moderator: true, on_moderator_leave: OnModeratorLeave::End, join_muted: true };
        let all = RoomOptions { spatial: Some(SpatialMode::Binaural), moderation: Some(moderation) };
        let json = serde_json::to_value(all).expect("encodes");
        assert_eq!(json["spatial"], "binaural");
        assert_eq!(json["moderation"]["on_moderator_leave"], "end");
        assert_eq!(serde_json::from_value::<RoomOptions>(json).expect("decodes"), all);
        let none = RoomOptions::default();
        assert!(none.is_empty());
        assert_eq!(serde_json::to_string(&none).expect("encodes"), "{}");
        let mut config = serde_json::Map::new();
        RoomOptions { spatial: Some(SpatialMode::Panned), moderation: None }.write_into(&mut config);
        assert_eq!(serde_json::Value::Object(config), serde_json::json!({"spatial": "panned"}));
    }
}
