//! What a room tells its WebSocket subscribers, and how: a room's events
//! are gathered and sent once per 20 ms tick as one batch, serialized once
//! for all subscribers, so a room of N sockets where N people join costs
//! N·ticks messages, not N².

use bytes::Bytes;
use serde::Serialize;

/// A room event, pushed to the room's WebSocket subscribers as JSON
/// (`{"type": "joined", …}`).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum RoomEvent {
    /// Someone joined.
    Joined { id: u64, name: String },
    /// Someone left (`left`, `timed_out`, `failed`, `room_closed`, `kicked`,
    /// `replaced`, `token_expired`).
    Left { id: u64, reason: &'static str },
    /// Someone started or stopped talking.
    Talking { id: u64, talking: bool },
    /// Someone was muted or unmuted.
    Muted { id: u64, muted: bool },
    /// An admin granted or revoked someone's right to speak.
    Permissions { id: u64, speak: bool },
    /// Someone raised or lowered their hand (or an admin lowered it).
    Hand { id: u64, raised: bool },
    /// Someone stopped or started hearing the room (they asked, or an admin).
    Deaf { id: u64, deaf: bool },
    /// An admin changed the room (`PATCH /v1/rooms/{room}`): its settings now.
    RoomUpdated { locked: bool, max_participants: usize, max_speakers: usize },
    /// An admin muted everyone but the admins (`count` were muted; each also
    /// gets a `muted` event).
    MutedAll { count: usize },
    /// The room was deleted.
    RoomClosed,
    /// The server is shutting down: every peer is about to be closed.
    Shutdown { message: String },
    /// The node is draining (a restart or a deploy): the call goes on here
    /// until `deadline` (unix seconds) at the latest, or until the room is
    /// handed over to another node (then each socket is told `moved`).
    Draining { deadline: u64, message: String },
    /// The room is being recorded, into `file`.
    RecordingStarted { file: String },
    /// A recording ended before anyone stopped it: `reason` is `limit` or
    /// `error` (disk full, directory not writable: `error` says what).
    RecordingStopped {
        file: String,
        reason: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A recording ended (`reason`: `stopped`, `limit`, `error`) and its file is closed.
    RecordingFinished { file: String, bytes: u64, duration_seconds: f64, reason: &'static str },
}

/// The kinds of event a subscriber may choose (the others are always sent:
/// `room_closed` and `shutdown` end the socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EventKinds(u8);

impl EventKinds {
    /// Every kind.
    pub(crate) const ALL: Self = Self(0b111_1111);
    const NAMES: [&'static str; 7] = ["joined", "left", "talking", "muted", "permissions", "hand", "room_updated"];

    /// Parses a comma-separated list of kinds (`joined,left,talking,muted`);
    /// an unknown one is named in the error.
    pub(crate) fn parse(list: &str) -> Result<Self, String> {
        let mut bits = 0;
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let i = Self::NAMES
                .iter()
                .position(|k| *k == name)
                .ok_or_else(|| format!("unknown event kind '{name}'; the kinds are {}", Self::NAMES.join(", ")))?;
            bits |= 1 << i;
        }
        Ok(Self(bits))
    }

    /// From a list of names, as the `subscribe` message carries them.
    pub(crate) fn from_names(names: &[String]) -> Result<Self, String> {
        Self::parse(&names.join(","))
    }

    /// Whether a subscriber of these kinds is sent `event`.
    pub(crate) fn wants(self, event: &RoomEvent) -> bool {
        let bit = match event {
            RoomEvent::Joined { .. } => 0,
            RoomEvent::Left { .. } => 1,
            RoomEvent::Talking { .. } => 2,
            // Hearing is muted too: `deaf` goes with the `muted` kind.
            RoomEvent::Muted { .. } | RoomEvent::MutedAll { .. } | RoomEvent::Deaf { .. } => 3,
            RoomEvent::Permissions { .. } => 4,
            RoomEvent::Hand { .. } => 5,
            RoomEvent::RoomUpdated { .. } => 6,
            RoomEvent::RoomClosed | RoomEvent::Shutdown { .. } | RoomEvent::Draining { .. } => return true,
            // Few and for everyone: a recording is everyone's business.
            RoomEvent::RecordingStarted { .. }
            | RoomEvent::RecordingStopped { .. }
            | RoomEvent::RecordingFinished { .. } => return true,
        };
        self.0 & (1 << bit) != 0
    }
}

/// One tick's events of a room, as every subscriber of every kind gets them.
#[derive(Debug)]
pub(crate) struct EventBatch {
    pub(crate) events: Vec<RoomEvent>,
    /// `{"type":"events","events":[…]}`, serialized once.
    pub(crate) json: Bytes,
}

impl EventBatch {
    pub(crate) fn new(events: Vec<RoomEvent>) -> Self {
        let json = Self::render(&events.iter().collect::<Vec<_>>());
        Self { events, json }
    }

    /// The message for a subscriber of `kinds`: the shared one, or its own
    /// subset (`None` when nothing in the batch is for it).
    pub(crate) fn for_kinds(&self, kinds: EventKinds) -> Option<Bytes> {
        if kinds == EventKinds::ALL {
            return Some(self.json.clone());
        }
        let mine: Vec<&RoomEvent> = self.events.iter().filter(|e| kinds.wants(e)).collect();
        (!mine.is_empty()).then(|| Self::render(&mine))
    }

    fn render(events: &[&RoomEvent]) -> Bytes {
        // Serializing these plain structs cannot fail.
        Bytes::from(serde_json::to_vec(&serde_json::json!({ "type": "events", "events": events })).unwrap_or_default())
    }
}
