//! What a room tells its WebSocket subscribers, and how: a room's events
//! are gathered and sent as one batch at most every [`EVENT_INTERVAL_TICKS`]
//! ticks (the first after a quiet spell at the next tick), serialized once
//! for all subscribers, so a room of N sockets costs at most N messages per
//! interval however busy it is: N people joining at once, or a hundred of
//! them talking. `talking` changes are coalesced within an interval: only a
//! participant whose state differs from the last one told is named, once.

use std::collections::BTreeMap;
use std::sync::Mutex;

use bytes::Bytes;
use serde::Serialize;

use crate::sync::lock;

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
    /// A file started playing into the room (`purpose`: `announcement` or
    /// `hold`; enter and leave sounds are not told).
    PlaybackStarted {
        id: u64,
        file: String,
        purpose: &'static str,
        #[serde(rename = "loop")]
        looping: bool,
    },
    /// A playback was stopped before its end (`reason`: `stopped` by an
    /// admin; hold music: `joined`, `empty`, `replaced`).
    PlaybackStopped { id: u64, file: String, reason: &'static str },
    /// A playback played to its end.
    PlaybackFinished { id: u64, file: String },
    /// An admin opened a whisper channel: `speakers` are heard by the
    /// channel's members only; `listeners` hear the room plus the channel.
    WhisperOpened { id: u64, speakers: Vec<u64>, listeners: Vec<u64> },
    /// A whisper channel's members changed (an admin, or a member left).
    WhisperChanged { id: u64, speakers: Vec<u64>, listeners: Vec<u64> },
    /// A whisper channel closed (`reason`: `closed` by an admin, `empty`:
    /// its last speaker left): its speakers are heard by the room again.
    WhisperClosed { id: u64, reason: &'static str },
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
            // Few and for everyone: what the room hears.
            RoomEvent::PlaybackStarted { .. }
            | RoomEvent::PlaybackStopped { .. }
            | RoomEvent::PlaybackFinished { .. } => {
                return true;
            }
            // Few, and who hears whom is everyone's business.
            RoomEvent::WhisperOpened { .. } | RoomEvent::WhisperChanged { .. } | RoomEvent::WhisperClosed { .. } => {
                return true;
            }
        };
        self.0 & (1 << bit) != 0
    }
}

/// Ticks from one batch of a room's events to the next, at least: 13 × 20 ms
/// = 260 ms, so a socket gets under 4 `events` messages a second however
/// busy its room. A quarter of a second is about how late a "talking"
/// indicator may light without looking wrong, and a talkspurt lasts ~850 ms
/// on average (ITU-T P.59): each is still shown, and most blips of a
/// speaker pausing for breath inside one interval cancel out.
pub(crate) const EVENT_INTERVAL_TICKS: u64 = 13;

/// A room's events waiting for their batch.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    /// Every event but `talking`, in order.
    events: Vec<RoomEvent>,
    /// Participants whose talking changed since the last batch: (as last
    /// told, now). Told after the other events (a `joined` comes first).
    talk: BTreeMap<u64, (bool, bool)>,
    /// The tick of the last batch sent from a tick.
    last: Option<u64>,
}

impl Outbox {
    /// Queues `event` for the next batch.
    pub(crate) fn push(&mut self, event: RoomEvent) {
        match event {
            RoomEvent::Talking { id, talking } => {
                // The mixer alternates started/stopped, so the state told before the first change is its opposite.
                self.talk.entry(id).and_modify(|t| t.1 = talking).or_insert((!talking, talking));
            }
            event => {
                if let RoomEvent::Left { id, .. } = event {
                    // Gone: whether it talked meanwhile is nobody's business now.
                    self.talk.remove(&id);
                }
                self.events.push(event);
            }
        }
    }

    /// Whether a batch goes out at `tick`: something is waiting and the
    /// last batch is at least [`EVENT_INTERVAL_TICKS`] old.
    pub(crate) fn due(&self, tick: u64) -> bool {
        (!self.events.is_empty() || !self.talk.is_empty())
            && self.last.is_none_or(|t| tick >= t.saturating_add(EVENT_INTERVAL_TICKS))
    }

    /// The events of the next batch (empty: nothing to tell), and, with a
    /// tick, the interval starts again there. A talking state that went back
    /// to what was last told is not told; neither is talking in a last batch
    /// (`room_closed`, `shutdown`).
    pub(crate) fn take(&mut self, tick: Option<u64>) -> Vec<RoomEvent> {
        let mut events = std::mem::take(&mut self.events);
        let last_words = events.iter().any(|e| matches!(e, RoomEvent::RoomClosed | RoomEvent::Shutdown { .. }));
        for (id, (told, now)) in std::mem::take(&mut self.talk) {
            if told != now && !last_words {
                events.push(RoomEvent::Talking { id, talking: now });
            }
        }
        if let Some(tick) = tick
            && !events.is_empty()
        {
            self.last = Some(tick);
        }
        events
    }
}

/// One batch of a room's events, as every subscriber gets it: serialized
/// once for the subscribers of every kind, and once per other set of kinds
/// asked for (at most one per distinct set, cached here), so a room of N
/// sockets pays one serialization per batch, not N.
#[derive(Debug)]
pub(crate) struct EventBatch {
    pub(crate) events: Vec<RoomEvent>,
    /// `{"type":"events","events":[…]}`, serialized once.
    pub(crate) json: Bytes,
    /// The renders for other sets of kinds (`None`: nothing in the batch is
    /// for that set). At most 2^7 sets exist; a room's sockets use a few.
    subsets: Mutex<Vec<(EventKinds, Option<Bytes>)>>,
}

impl EventBatch {
    pub(crate) fn new(events: Vec<RoomEvent>) -> Self {
        let json = Self::render(&events.iter().collect::<Vec<_>>());
        Self { events, json, subsets: Mutex::new(Vec::new()) }
    }

    /// The message for a subscriber of `kinds`: the shared one, or the
    /// shared render of its subset (`None` when nothing in the batch is for
    /// it). A clone of [`Bytes`] shares the buffer: no copy per socket.
    pub(crate) fn for_kinds(&self, kinds: EventKinds) -> Option<Bytes> {
        if kinds == EventKinds::ALL {
            return Some(self.json.clone());
        }
        let mut subsets = lock(&self.subsets);
        if let Some((_, json)) = subsets.iter().find(|(k, _)| *k == kinds) {
            return json.clone();
        }
        let mine: Vec<&RoomEvent> = self.events.iter().filter(|e| kinds.wants(e)).collect();
        let json = if mine.len() == self.events.len() {
            Some(self.json.clone())
        } else {
            (!mine.is_empty()).then(|| Self::render(&mine))
        };
        subsets.push((kinds, json.clone()));
        json
    }

    /// How many distinct renders this batch made (1 + the subsets' with something in them).
    #[cfg(test)]
    pub(crate) fn renders(&self) -> usize {
        1 + lock(&self.subsets)
            .iter()
            .filter(|(_, j)| j.as_ref().is_some_and(|j| j.as_ptr() != self.json.as_ptr()))
            .count()
    }

    fn render(events: &[&RoomEvent]) -> Bytes {
        // Serializing these plain structs cannot fail.
        Bytes::from(serde_json::to_vec(&serde_json::json!({ "type": "events", "events": events })).unwrap_or_default())
    }
}
