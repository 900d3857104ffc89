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
    /// Someone joined (with its attributes, when it has any).
    Joined {
        id: u64,
        name: String,
        #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
        attributes: crate::attributes::Attributes,
    },
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
    /// Someone's attributes changed (they, or an admin): the whole set now.
    AttributesChanged { id: u64, attributes: crate::attributes::Attributes },
    /// An admin changed the room (`PATCH /v1/rooms/{room}`): its settings now.
    RoomUpdated { locked: bool, max_participants: usize, max_speakers: usize },
    /// An admin muted everyone but the admins (`count` were muted; each also
    /// gets a `muted` event).
    MutedAll { count: usize },
    /// The room waits for its moderator (`true`: those who are not one are
    /// held muted, with the hold music), or a moderator opened it (`false`).
    Waiting { waiting: bool },
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
    RecordingFinished {
        file: String,
        bytes: u64,
        duration_seconds: f64,
        reason: &'static str,
        /// In a cluster, the node whose recordings directory holds the file.
        #[serde(skip_serializing_if = "Option::is_none")]
        node: Option<String>,
    },
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
    /// A phone caller pressed a key (`0`-`9`, `*`, `#`, `A`-`D`), by
    /// RFC 4733 or SIP INFO.
    Keypad { id: u64, digit: char },
    /// A dial-out call (`POST /v1/rooms/{room}/calls`) rings at `to`.
    CallRinging { call_id: String, to: String },
    /// A dial-out call was answered: the callee is participant `id`.
    CallAnswered { call_id: String, id: u64 },
    /// A dial-out call was not answered: the SIP status (0: none came),
    /// `code` (`callee_busy`, `callee_declined`, `no_answer`, `call_failed`) and why.
    CallFailed { call_id: String, sip_status: u16, code: &'static str, reason: String },
}

/// The kinds of event a subscriber may choose (the others are always sent:
/// `room_closed` and `shutdown` end the socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EventKinds(u8);

impl EventKinds {
    /// Every kind.
    pub(crate) const ALL: Self = Self(0b1111_1111);
    const NAMES: [&'static str; 8] =
        ["joined", "left", "talking", "muted", "permissions", "hand", "room_updated", "attributes_changed"];

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
            RoomEvent::AttributesChanged { .. } => 7,
            RoomEvent::RoomClosed
            | RoomEvent::Shutdown { .. }
            | RoomEvent::Draining { .. }
            | RoomEvent::Waiting { .. } => return true,
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
            // Few (a person presses them), and what a caller keys may be an app's input.
            RoomEvent::Keypad { .. } => return true,
            // Few, and who is being called is the room's business.
            RoomEvent::CallRinging { .. } | RoomEvent::CallAnswered { .. } | RoomEvent::CallFailed { .. } => {
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
    /// Every event but `talking`, in order, and whether it is foreign (see
    /// [`EventBatch::local_json`]).
    events: Vec<(RoomEvent, bool)>,
    /// Participants whose talking changed since the last batch: (as last
    /// told, now, foreign). Told after the other events (a `joined` comes first).
    talk: BTreeMap<u64, (bool, bool, bool)>,
    /// The tick of the last batch sent from a tick.
    last: Option<u64>,
}

impl Outbox {
    /// Queues `event` for the next batch.
    pub(crate) fn push(&mut self, event: RoomEvent) {
        self.push_from(event, false);
    }

    /// Queues `event` for the next batch; `foreign`: about another node's
    /// participant of a spread room (relayed from it, or its talking as
    /// this node's mixer heard it), which this node does not publish.
    pub(crate) fn push_from(&mut self, event: RoomEvent, foreign: bool) {
        match event {
            RoomEvent::Talking { id, talking } => {
                // The mixer alternates started/stopped, so the state told before the first change is its opposite.
                self.talk.entry(id).and_modify(|t| t.1 = talking).or_insert((!talking, talking, foreign));
            }
            event => {
                if let RoomEvent::Left { id, .. } = event {
                    // Gone: whether it talked meanwhile is nobody's business now.
                    self.talk.remove(&id);
                }
                self.events.push((event, foreign));
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
    #[cfg(test)]
    pub(crate) fn take(&mut self, tick: Option<u64>) -> Vec<RoomEvent> {
        self.take_marked(tick).0
    }

    /// [`Outbox::take`], with which of the events are foreign (empty: none).
    pub(crate) fn take_marked(&mut self, tick: Option<u64>) -> (Vec<RoomEvent>, Vec<bool>) {
        let (mut events, mut foreign): (Vec<RoomEvent>, Vec<bool>) =
            std::mem::take(&mut self.events).into_iter().unzip();
        let last_words = events.iter().any(|e| matches!(e, RoomEvent::RoomClosed | RoomEvent::Shutdown { .. }));
        for (id, (told, now, far)) in std::mem::take(&mut self.talk) {
            if told != now && !last_words {
                events.push(RoomEvent::Talking { id, talking: now });
                foreign.push(far);
            }
        }
        if let Some(tick) = tick
            && !events.is_empty()
        {
            self.last = Some(tick);
        }
        if !foreign.contains(&true) {
            foreign.clear();
        }
        (events, foreign)
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
    /// Which events are foreign (about another node's participants; empty:
    /// none is): not published to the other nodes.
    foreign: Vec<bool>,
    /// The renders for other sets of kinds (`None`: nothing in the batch is
    /// for that set). At most 2^7 sets exist; a room's sockets use a few.
    subsets: Mutex<Vec<(EventKinds, Option<Bytes>)>>,
}

impl EventBatch {
    #[cfg(test)]
    pub(crate) fn new(events: Vec<RoomEvent>) -> Self {
        Self::marked(events, Vec::new())
    }

    /// A batch some of whose events are foreign (`foreign[i]` for `events[i]`; empty: none).
    pub(crate) fn marked(events: Vec<RoomEvent>, foreign: Vec<bool>) -> Self {
        let json = Self::render(&events.iter().collect::<Vec<_>>());
        Self { events, json, foreign, subsets: Mutex::new(Vec::new()) }
    }

    /// Whether `events[i]` is foreign (about another node's participant).
    pub(crate) fn is_foreign(&self, i: usize) -> bool {
        self.foreign.get(i).copied().unwrap_or(false)
    }

    /// The batch as this node publishes it to the other nodes of a spread
    /// room: its own events only (`None`: none is). The shared render when
    /// nothing in it is foreign; else rendered here, by the caller (the
    /// cluster relay's task, off the mix clock).
    pub(crate) fn local_json(&self) -> Option<Bytes> {
        if self.foreign.is_empty() {
            return Some(self.json.clone());
        }
        let mine: Vec<&RoomEvent> =
            self.events.iter().zip(&self.foreign).filter(|(_, far)| !**far).map(|(e, _)| e).collect();
        (!mine.is_empty()).then(|| Self::render(&mine))
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

/// Longest batch of another node's events read (bytes); a longer one is dropped.
pub(crate) const MAX_RELAYED_BATCH_BYTES: usize = 256 * 1024;
/// Most events taken from one batch of another node.
pub(crate) const MAX_RELAYED_EVENTS: usize = 1024;

/// An event of another node's participant, as that node serialized it.
#[derive(Debug, serde::Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Relayed {
    Joined {
        id: u64,
        name: String,
        #[serde(default)]
        attributes: crate::attributes::Attributes,
    },
    Left {
        id: u64,
        reason: String,
    },
    Muted {
        id: u64,
        muted: bool,
    },
    Permissions {
        id: u64,
        speak: bool,
    },
    Hand {
        id: u64,
        raised: bool,
    },
    Deaf {
        id: u64,
        deaf: bool,
    },
    AttributesChanged {
        id: u64,
        attributes: crate::attributes::Attributes,
    },
}

/// The events of a batch another node of a spread room published (its
/// `{"type":"events","events":[…]}`) that are about its own participants
/// and told on every node: `joined`, `left`, `muted`, `permissions`,
/// `hand`, `deaf`, for the ids `mine` accepts (the ids of that node). The
/// rest is this node's own to tell (`talking`: the same speakers are
/// selected everywhere and this node's mixer names them; room changes and
/// closing: applied here by control messages) or that node's business
/// (recordings, playbacks, whispers, its drain), and is skipped, as is
/// anything unreadable, a name that is not one, and what goes beyond
/// [`MAX_RELAYED_BATCH_BYTES`] or [`MAX_RELAYED_EVENTS`].
pub(crate) fn relayed_events(json: &str, mine: impl Fn(u64) -> bool) -> Vec<RoomEvent> {
    #[derive(serde::Deserialize)]
    struct Batch {
        #[serde(rename = "type")]
        kind: String,
        events: Vec<serde_json::Value>,
    }
    if json.len() > MAX_RELAYED_BATCH_BYTES {
        return Vec::new();
    }
    let Ok(batch) = serde_json::from_str::<Batch>(json) else { return Vec::new() };
    if batch.kind != "events" {
        return Vec::new();
    }
    batch
        .events
        .into_iter()
        .take(MAX_RELAYED_EVENTS)
        .filter_map(|e| serde_json::from_value::<Relayed>(e).ok())
        .filter_map(|e| {
            let event = match e {
                Relayed::Joined { id, name, attributes } => {
                    if name.len() > super::member::MAX_NAME_BYTES || name.chars().any(char::is_control) {
                        return None;
                    }
                    crate::attributes::check(&attributes).ok()?;
                    RoomEvent::Joined { id, name, attributes }
                }
                Relayed::Left { id, reason } => RoomEvent::Left { id, reason: leave_reason(&reason) },
                Relayed::Muted { id, muted } => RoomEvent::Muted { id, muted },
                Relayed::Permissions { id, speak } => RoomEvent::Permissions { id, speak },
                Relayed::Hand { id, raised } => RoomEvent::Hand { id, raised },
                Relayed::Deaf { id, deaf } => RoomEvent::Deaf { id, deaf },
                Relayed::AttributesChanged { id, attributes } => {
                    crate::attributes::check(&attributes).ok()?;
                    RoomEvent::AttributesChanged { id, attributes }
                }
            };
            mine(listed_participant(&event)?).then_some(event)
        })
        .collect()
}

/// The participant an event changes in the room's participant list
/// (`joined`, `left`, `muted`, `permissions`, `hand`, `deaf`: the kinds
/// [`relayed_events`] takes from other nodes, and those a node's roster
/// follows); `None` for the others.
pub(crate) fn listed_participant(event: &RoomEvent) -> Option<u64> {
    match event {
        RoomEvent::Joined { id, .. }
        | RoomEvent::Left { id, .. }
        | RoomEvent::Muted { id, .. }
        | RoomEvent::Permissions { id, .. }
        | RoomEvent::Hand { id, .. }
        | RoomEvent::Deaf { id, .. }
        | RoomEvent::AttributesChanged { id, .. } => Some(*id),
        _ => None,
    }
}

/// A `left` reason another node gave, as one of ours (unknown: `left`).
fn leave_reason(reason: &str) -> &'static str {
    use super::member::LeaveReason as R;
    [R::Left, R::TimedOut, R::Failed, R::RoomClosed, R::Kicked, R::Moved, R::MovedRoom, R::Replaced, R::TokenExpired]
        .into_iter()
        .map(R::as_str)
        .find(|r| *r == reason)
        .unwrap_or("left")
}

#[cfg(test)]
mod relayed_tests {
    use super::*;

    #[test]
    fn another_nodes_participant_events_are_taken_and_the_rest_skipped() {
        let json = r#"{"type":"events","events":[
            {"type":"joined","id":4294967297,"name":"ann"},
            {"type":"talking","id":4294967297,"talking":true},
            {"type":"muted","id":4294967297,"muted":true},
            {"type":"room_updated","locked":true,"max_participants":9,"max_speakers":3},
            {"type":"hand","id":4294967297,"raised":true},
            {"type":"permissions","id":4294967297,"speak":false},
            {"type":"deaf","id":4294967297,"deaf":true},
            {"type":"left","id":4294967297,"reason":"kicked"},
            {"type":"left","id":4294967297,"reason":"made up"},
            {"type":"shutdown","message":"bye"},
            {"type":"joined","id":"nope","name":"x"},
            {"type":"joined","id":8589934593,"name":"another node's"}
        ]}"#;
        let mine = |id: u64| id >> 32 == 1;
        let id = 4_294_967_297;
        assert_eq!(
            relayed_events(json, mine),
            vec![
                RoomEvent::Joined { id, name: "ann".into(), attributes: Default::default() },
                RoomEvent::Muted { id, muted: true },
                RoomEvent::Hand { id, raised: true },
                RoomEvent::Permissions { id, speak: false },
                RoomEvent::Deaf { id, deaf: true },
                RoomEvent::Left { id, reason: "kicked" },
                RoomEvent::Left { id, reason: "left" },
            ]
        );
    }

    #[test]
    fn unreadable_or_oversized_batches_give_nothing() {
        let all = |_| true;
        for junk in ["", "{}", "[]", "not json", r#"{"type":"room","events":[]}"#, r#"{"type":"events"}"#] {
            assert!(relayed_events(junk, all).is_empty(), "{junk}");
        }
        let long = format!(r#"{{"type":"events","events":[{{"type":"joined","id":1,"name":"{}"}}]}}"#, "x".repeat(300));
        assert!(relayed_events(&long, all).is_empty(), "a name longer than any name");
        let ctl = r#"{"type":"events","events":[{"type":"joined","id":1,"name":"a\u0007b"}]}"#;
        assert!(relayed_events(ctl, all).is_empty(), "a control character in a name");
        let huge = format!(r#"{{"type":"events","events":[{}]}}"#, "0,".repeat(MAX_RELAYED_BATCH_BYTES));
        assert!(relayed_events(&huge, all).is_empty());
        let many: Vec<String> =
            (0..MAX_RELAYED_EVENTS + 5).map(|i| format!(r#"{{"type":"hand","id":{i},"raised":true}}"#)).collect();
        let many = format!(r#"{{"type":"events","events":[{}]}}"#, many.join(","));
        assert_eq!(relayed_events(&many, all).len(), MAX_RELAYED_EVENTS);
    }

    #[test]
    fn a_batch_publishes_its_own_events_only() {
        let mut out = Outbox::default();
        out.push(RoomEvent::Joined { id: 1, name: "here".into(), attributes: Default::default() });
        out.push_from(RoomEvent::Joined { id: 2, name: "there".into(), attributes: Default::default() }, true);
        out.push_from(RoomEvent::Talking { id: 2, talking: true }, true);
        out.push(RoomEvent::Talking { id: 1, talking: true });
        let (events, foreign) = out.take_marked(Some(0));
        let batch = EventBatch::marked(events, foreign);
        assert_eq!(batch.events.len(), 4, "every socket here gets all of them");
        let local: serde_json::Value = serde_json::from_slice(&batch.local_json().expect("own events")).expect("json");
        assert_eq!(
            local["events"],
            serde_json::json!([{"type":"joined","id":1,"name":"here"},{"type":"talking","id":1,"talking":true}])
        );
        // Foreign only: nothing to publish; none foreign: the shared render.
        let only = EventBatch::marked(vec![RoomEvent::Hand { id: 2, raised: true }], vec![true]);
        assert!(only.local_json().is_none());
        let own = EventBatch::new(vec![RoomEvent::Hand { id: 1, raised: true }]);
        assert_eq!(own.local_json().expect("own").as_ptr(), own.json.as_ptr());
    }
}
