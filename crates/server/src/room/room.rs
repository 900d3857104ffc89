//! One room: its members, its mixer, the packets waiting for the next tick,
//! and its subscribers. [`Room::tick`] runs one 20 ms tick and returns what
//! every participant is sent ([`RoomMix`], O(K) in size).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::{broadcast, watch};
use tutti_mix::{ActiveSpeaker, Delivery, MixPool, Packet, ParticipantId, TalkEvent, TickReport};
use tutti_rtc::Contributor;

use super::event::{EventBatch, Outbox, RoomEvent};
use super::member::Member;
use super::spatial::SpatialMode;
use super::stage::Stage;
use crate::sync::lock;

/// A room's number on the media plane: I/O threads key their per-room
/// state by it (no string per packet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct RoomKey(pub(crate) u64);

/// Event batches queued per subscriber before it lags (and gets a fresh
/// snapshot): at one batch per [`super::event::EVENT_INTERVAL_TICKS`] at
/// most, over a minute of a busy room. Per room, not per socket; but the
/// channel keeps the last this many batches alive, so it is no longer
/// than that (1,024 kept ~1.5 MB for a busy room of 1,000).
const EVENT_QUEUE: usize = 256;

/// Participants of other nodes in a spread room have ids in a mixer from
/// `[2^51, 2^52)` (the mesh glue maps them; playbacks use `2^52` and up).
pub(crate) const REMOTE_ID_BASE: u64 = 1 << 51;

/// Whether `id` is a participant of another node in a mixer ([`REMOTE_ID_BASE`]).
pub(crate) fn is_remote(id: u64) -> bool {
    (REMOTE_ID_BASE..REMOTE_ID_BASE * 2).contains(&id)
}

/// Received packets on their way to a room's mixer.
pub(crate) type Inbox = Vec<(ParticipantId, Packet)>;

/// One receiving thread's packets of a loop turn, by room, delivered at
/// the end of the turn with one lock per room.
#[derive(Default)]
pub(crate) struct Inboxes(HashMap<RoomKey, (Arc<Room>, Inbox)>);

impl Inboxes {
    /// Queues a packet of participant `id` for `room`.
    pub(crate) fn push(&mut self, room: &Arc<Room>, id: ParticipantId, packet: Packet) {
        let (_, batch) = self.0.entry(room.key).or_insert_with(|| (room.clone(), Vec::new()));
        batch.push((id, packet));
    }

    /// Appends the queued packets to their rooms' inboxes, and forgets
    /// closed rooms so the map does not keep them alive.
    pub(crate) fn flush(&mut self) {
        for (room, batch) in self.0.values_mut() {
            if !batch.is_empty() {
                room.deliver(batch);
            }
        }
        self.0.retain(|_, (room, _)| !room.is_closed());
    }
}

/// The mixer and what it needs beside the packets: each participant's
/// sending SSRC, as its packets carry it (named in RFC 6465 CSRC lists).
pub(super) struct Mixing {
    pub(super) mixer: tutti_mix::Room,
    pub(super) sources: HashMap<ParticipantId, u32>,
    /// Files played into the room (see `playback`), fed to the mixer each tick.
    pub(super) playbacks: super::playback::Playbacks,
    /// The participants sent nothing (deaf), sorted: read under the lock
    /// each tick takes anyway.
    deaf: Arc<[u64]>,
    /// The participants who asked for stereo (a spatial room's stereo
    /// render), sorted.
    stereo: Arc<[u64]>,
    /// Outputs (recordings, RTP forwarders) taking the stereo render.
    stereo_outputs: usize,
    /// Whisper channels (see `whisper`).
    pub(super) whispers: super::whisper::Whispers,
}

/// One room.
pub(crate) struct Room {
    pub(crate) id: String,
    pub(crate) key: RoomKey,
    pub(super) mixing: Mutex<Mixing>,
    /// Packets received since the last tick.
    inbox: Mutex<Inbox>,
    pub(crate) members: Mutex<BTreeMap<u64, Member>>,
    /// Events since the last batch went out.
    outbox: Mutex<Outbox>,
    events: broadcast::Sender<Arc<EventBatch>>,
    /// The speakers of the last tick.
    speakers: Mutex<Arc<[ActiveSpeaker]>>,
    closed: AtomicBool,
    /// Other nodes host this room too (cluster mode: see `Room::set_spread`).
    pub(super) spread: AtomicBool,
    /// Its size and speaker limit (set at creation, changed by `PATCH`):
    /// read them with [`Room::max_participants`] and [`Room::max_speakers`].
    pub(crate) max_participants: AtomicUsize,
    pub(crate) max_speakers: AtomicUsize,
    /// Lock and bans (see `stage`).
    pub(crate) stage: Mutex<Stage>,
    /// Where the room went when this node handed it over (a drain in a
    /// cluster): each socket is told to move there.
    moved: watch::Sender<Option<Arc<MovedTo>>>,
    /// The per-speaker feed: each tick's selected speakers' own frames,
    /// made only while someone listens ([`Room::subscribe_speaker_frames`]).
    speaker_frames: broadcast::Sender<Arc<SpeakerFrames>>,
    speaker_feeds: Arc<AtomicUsize>,
    /// Participants of other nodes in the mixer (a spread room): the
    /// mixer's id ([`REMOTE_ID_BASE`] and up) to the participant's real
    /// (cluster) id, set by the mesh glue as it adds and removes them.
    pub(super) remote_names: Mutex<HashMap<u64, u64>>,
    /// Other nodes' participants' seats, by real id (see `remote_seats`).
    pub(super) remote_seats: Mutex<HashMap<u64, i8>>,
    /// Data messages, for the room's sockets (see `data`).
    data: broadcast::Sender<Arc<super::data::DataMessage>>,
    /// Whether it waits for its moderator, and what it does when they leave (see `waiting`).
    pub(super) waiting: Mutex<super::moderation::Waiting>,
    /// The mix clock's last tick of this room (a recording's zero).
    last_tick: AtomicU64,
}

/// One tick's selected speakers' own Opus frames, as they arrived: no
/// decode, no encode (see [`tutti_mix::Room::speaker_frames`]).
#[derive(Debug)]
pub(crate) struct SpeakerFrames {
    pub(crate) tick: u64,
    /// Participant id, RFC 6464 level, the Opus frame.
    pub(crate) frames: Vec<(u64, u8, Bytes)>,
}

/// Ticks of speaker frames a feed's queue holds (5 s): a feed further
/// behind loses the oldest, counted.
pub(crate) const SPEAKER_FEED_TICKS: usize = 250;

/// A subscription to a room's speaker frames; the room stops making them
/// when the last one is dropped.
pub(crate) struct SpeakerFeed {
    pub(crate) frames: broadcast::Receiver<Arc<SpeakerFrames>>,
    feeds: Arc<AtomicUsize>,
}

impl Drop for SpeakerFeed {
    fn drop(&mut self) {
        self.feeds.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The node a room was handed over to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MovedTo {
    /// Its node id.
    pub(crate) node: String,
    /// Its API URL (what clients connect to).
    pub(crate) api_url: String,
}

/// A payload with its RFC 6464 level and RFC 6465 contributors: what one
/// participant (or all listeners) is fed this tick. An empty payload is
/// "send nothing" (a DTX pause).
pub(crate) struct Feed {
    pub(crate) payload: Bytes,
    pub(crate) level: Option<u8>,
    pub(crate) contributors: Vec<Contributor>,
}

/// One tick's output for one room: what every participant is sent. O(K)
/// in size: listeners share one feed; each selected speaker has their own.
pub(crate) struct RoomMix {
    pub(crate) key: RoomKey,
    /// The mixer tick it is for: outgoing RTP timestamps are stamped from it.
    pub(crate) tick: u64,
    /// The listeners' feed (every speaker).
    pub(crate) listeners: Feed,
    /// Each selected speaker's own feed (the mix without them).
    pub(crate) speakers: Vec<(ParticipantId, Feed)>,
    /// Who is sent nothing (deaf), sorted.
    pub(crate) deaf: Arc<[u64]>,
    /// Whisper channel members: (member, channel, whispers), sorted by member.
    pub(crate) whisper: Arc<[(u64, u64, bool)]>,
    /// The feed of each whisper channel whose speaker talks this tick (the
    /// room plus the channel), for its members who are not selected speakers.
    pub(crate) channels: Vec<(u64, Feed)>,
    /// A spatial room with stereo listeners or stereo outputs: their feed
    /// (the stereo render) and the listeners (sorted ids); the others get
    /// `listeners`.
    pub(crate) stereo: Option<(Feed, Arc<[u64]>)>,
}

/// A participant's seat (see `docs/features/spatial.md`): its `tutti.seat`
/// attribute when valid, else one derived from its identity (from its id
/// when it has none). In a `spatial` room the attribute is set to it, so the
/// roster and events show where everyone sits.
fn seat_for(id: u64, identity: &str, attributes: &mut crate::attributes::Attributes, spatial: bool) -> i8 {
    let seat = crate::attributes::seat_of(attributes).unwrap_or_else(|| {
        if identity.is_empty() {
            tutti_mix::default_seat(&id.to_le_bytes())
        } else {
            tutti_mix::default_seat(identity.as_bytes())
        }
    });
    if spatial {
        let mut next = attributes.clone();
        next.insert(crate::attributes::SEAT.to_owned(), seat.to_string());
        // Within the bounds, or the attributes stay as they are (the seat holds all the same).
        if crate::attributes::check(&next).is_ok() {
            *attributes = next;
        }
    }
    seat
}

/// What a deaf participant is sent.
static NOTHING: Feed = Feed { payload: Bytes::new(), level: None, contributors: Vec::new() };

impl RoomMix {
    /// What participant `id` is sent.
    pub(crate) fn feed_for(&self, id: ParticipantId) -> &Feed {
        if !self.deaf.is_empty() && self.deaf.binary_search(&id.0).is_ok() {
            return &NOTHING;
        }
        if let Some((_, f)) = self.speakers.iter().find(|(s, _)| *s == id) {
            return f;
        }
        if !self.channels.is_empty()
            && let Some((c, _)) = super::whisper::lookup(&self.whisper, id.0)
            && let Some((_, f)) = self.channels.iter().find(|(ch, _)| *ch == c)
        {
            return f;
        }
        if let Some((feed, who)) = &self.stereo
            && who.binary_search(&id.0).is_ok()
        {
            return feed;
        }
        &self.listeners
    }

    /// What a stereo output (a recording, an RTP forwarder) takes: the
    /// stereo render's packets, encoded once for everyone who takes them,
    /// or the listeners' mono ones while the room is not spatial.
    pub(crate) fn stereo_feed(&self) -> &Feed {
        self.stereo.as_ref().map_or(&self.listeners, |(feed, _)| feed)
    }

    /// Nobody is sent anything this tick (a silent room between its DTX frames).
    pub(crate) fn sends_nothing(&self) -> bool {
        self.listeners.payload.is_empty()
            && self.speakers.iter().all(|(_, f)| f.payload.is_empty())
            && self.channels.iter().all(|(_, f)| f.payload.is_empty())
            && self.stereo.as_ref().is_none_or(|(f, _)| f.payload.is_empty())
    }
}

impl Room {
    pub(crate) fn new(id: String, key: RoomKey, mixer: tutti_mix::Room, max_speakers: usize) -> Self {
        let max_participants = mixer.config().max_participants;
        Self {
            id,
            key,
            mixing: Mutex::new(Mixing {
                mixer,
                sources: HashMap::new(),
                playbacks: Default::default(),
                deaf: Arc::from([]),
                stereo: Arc::from([]),
                stereo_outputs: 0,
                whispers: Default::default(),
            }),
            inbox: Mutex::new(Vec::new()),
            members: Mutex::new(BTreeMap::new()),
            outbox: Mutex::new(Outbox::default()),
            events: broadcast::channel(EVENT_QUEUE).0,
            speakers: Mutex::new(Arc::from([])),
            closed: AtomicBool::new(false),
            spread: AtomicBool::new(false),
            max_participants: AtomicUsize::new(max_participants),
            max_speakers: AtomicUsize::new(max_speakers),
            stage: Mutex::new(Stage::default()),
            moved: watch::channel(None).0,
            speaker_frames: broadcast::channel(SPEAKER_FEED_TICKS).0,
            speaker_feeds: Arc::new(AtomicUsize::new(0)),
            remote_names: Mutex::new(HashMap::new()),
            remote_seats: Mutex::new(HashMap::new()),
            data: super::data::channel(),
            waiting: Mutex::new(Default::default()),
            last_tick: AtomicU64::new(0),
        }
    }

    /// Hands a data message to the room's sockets (and, when it is this
    /// node's own, to the relay of a spread room). Never blocks; returns how
    /// many subscribers there were.
    pub(crate) fn send_data(&self, message: super::data::DataMessage) -> usize {
        self.data.send(Arc::new(message)).unwrap_or(0)
    }

    /// The mix clock's last tick of this room (0 before the first).
    pub(crate) fn last_tick(&self) -> u64 {
        self.last_tick.load(Ordering::Relaxed)
    }

    /// A new subscriber to the room's data messages.
    pub(crate) fn subscribe_data(&self) -> broadcast::Receiver<Arc<super::data::DataMessage>> {
        self.data.subscribe()
    }

    /// Names the mixer's participant `remote` ([`REMOTE_ID_BASE`] and up)
    /// by its real id on its own node (`None`: it left the mixer).
    pub(crate) fn name_remote(&self, remote: u64, real: Option<u64>) {
        let mut names = lock(&self.remote_names);
        match real {
            Some(real) => names.insert(remote, real),
            None => names.remove(&remote),
        };
    }

    /// The real id of the mixer's participant `id`: itself, or the real id
    /// of a participant of another node (`None`: a remote not named).
    fn real_id(&self, id: u64) -> Option<u64> {
        if is_remote(id) { lock(&self.remote_names).get(&id).copied() } else { Some(id) }
    }

    /// The room's per-speaker feed from the next tick on, unless `max`
    /// feeds are open already (`None`).
    pub(crate) fn subscribe_speaker_frames(&self, max: usize) -> Option<SpeakerFeed> {
        let open = self.speaker_feeds.fetch_add(1, Ordering::Relaxed);
        let feed = SpeakerFeed { frames: self.speaker_frames.subscribe(), feeds: Arc::clone(&self.speaker_feeds) };
        (open < max).then_some(feed)
    }

    /// Records that the room now lives on another node; every socket
    /// watching [`Room::moved_to`] is told.
    pub(crate) fn hand_over(&self, to: MovedTo) {
        self.moved.send_replace(Some(Arc::new(to)));
    }

    /// Whether the room was handed over to another node.
    pub(crate) fn is_handed_over(&self) -> bool {
        self.moved.borrow().is_some()
    }

    /// Where the room was handed over to, as it changes (`None`: still here).
    pub(crate) fn moved_to(&self) -> watch::Receiver<Option<Arc<MovedTo>>> {
        self.moved.subscribe()
    }

    /// Most participants it takes.
    pub(crate) fn max_participants(&self) -> usize {
        self.max_participants.load(Ordering::Relaxed)
    }

    /// Most speakers mixed at once.
    pub(crate) fn max_speakers(&self) -> usize {
        self.max_speakers.load(Ordering::Relaxed)
    }

    /// Changes its size and speaker limit on the mixer (from the next tick)
    /// and in what the API shows.
    pub(super) fn set_limits(
        &self,
        max_participants: Option<usize>,
        max_speakers: Option<usize>,
    ) -> Result<(), tutti_mix::MixError> {
        let mut m = lock(&self.mixing);
        if let Some(k) = max_speakers {
            m.mixer.set_max_speakers(tutti_mix::SpeakerLimit::Top(k))?;
            self.max_speakers.store(k, Ordering::Relaxed);
        }
        if let Some(n) = max_participants {
            m.mixer.set_max_participants(n)?;
            self.max_participants.store(n, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Tells the room's subscribers with the next batch (at the next tick,
    /// or the first one [`super::event::EVENT_INTERVAL_TICKS`] after the last
    /// batch); the last words, `room_closed` and `shutdown`, go at once.
    pub(crate) fn publish(&self, event: RoomEvent) {
        let last = matches!(event, RoomEvent::RoomClosed | RoomEvent::Shutdown { .. });
        let mut outbox = lock(&self.outbox);
        outbox.push(event);
        if last {
            self.send(&mut outbox, None);
        }
    }

    /// Tells the room's subscribers, with the next batch, events of other
    /// nodes' participants of a spread room (relayed from those nodes):
    /// batched and serialized with this node's own, and never published
    /// back to the other nodes ([`EventBatch::local_json`]).
    pub(crate) fn publish_relayed(&self, events: impl IntoIterator<Item = RoomEvent>) {
        let mut outbox = lock(&self.outbox);
        for event in events {
            outbox.push_from(event, true);
        }
    }

    /// Sends what was published since the last batch, as one batch, now
    /// (none listening is fine). The tests' way to see events without ticks.
    #[cfg(test)]
    pub(crate) fn flush_events(&self) {
        self.send(&mut lock(&self.outbox), None);
    }

    /// Sends the waiting events if a batch is due at `tick`.
    fn flush_due(&self, tick: u64) {
        let mut outbox = lock(&self.outbox);
        if outbox.due(tick) {
            self.send(&mut outbox, Some(tick));
        }
    }

    /// One batch, serialized once, sent under the outbox's lock so that
    /// batches keep their order.
    fn send(&self, outbox: &mut Outbox, tick: Option<u64>) {
        let (events, foreign) = outbox.take_marked(tick);
        if !events.is_empty() && self.events.receiver_count() > 0 {
            let _ = self.events.send(Arc::new(EventBatch::marked(events, foreign)));
        }
    }

    /// A new subscriber to the room's event batches.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<EventBatch>> {
        self.events.subscribe()
    }

    /// Participants, as the API shows them.
    pub(crate) fn member_list(&self) -> Vec<Member> {
        lock(&self.members).values().cloned().collect()
    }

    /// How many participants it holds.
    pub(crate) fn len(&self) -> usize {
        lock(&self.members).len()
    }

    /// The ids of the last tick's speakers (participants: not playbacks;
    /// those of other nodes in a spread room by their real ids).
    pub(crate) fn speaker_ids(&self) -> Vec<u64> {
        let ids: Vec<u64> =
            lock(&self.speakers).iter().map(|s| s.id.0).filter(|&id| !super::playback::is_playback(id)).collect();
        ids.into_iter().filter_map(|id| self.real_id(id)).collect()
    }

    /// Whether the room was deleted (its packets are no longer wanted).
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// Whether other nodes host this room too (cluster mode, a spread room).
    pub(crate) fn is_spread(&self) -> bool {
        self.spread.load(Ordering::Relaxed)
    }

    pub(super) fn mark_closed(&self) {
        self.closed.store(true, Ordering::Relaxed);
    }

    /// Appends received packets for the next tick (one lock per batch).
    pub(crate) fn deliver(&self, batch: &mut Inbox) {
        lock(&self.inbox).append(batch);
    }

    /// What a participant's frames are coded in (a G.711 phone leg's are
    /// decoded by the mixer; Opus unless set).
    pub(crate) fn set_input_codec(&self, id: ParticipantId, codec: tutti_mix::InputCodec) {
        let _ = lock(&self.mixing).mixer.set_input_codec(id, codec);
    }

    /// Records the SSRC a participant's packets carry (when it first sends,
    /// or changes it): the CSRC it is named by while it speaks.
    pub(crate) fn set_source(&self, id: ParticipantId, ssrc: u32) {
        lock(&self.mixing).sources.insert(id, ssrc);
    }

    pub(super) fn add(
        &self,
        id: ParticipantId,
        muted: bool,
        seat: i8,
        stereo: bool,
    ) -> Result<(), tutti_mix::MixError> {
        let mut m = lock(&self.mixing);
        m.mixer.add_participant(id)?;
        if muted {
            m.mixer.set_muted(id, true)?;
        }
        m.mixer.set_seat(id, seat)?;
        m.mixer.set_stereo(id, stereo)?;
        if stereo {
            let mut list = m.stereo.to_vec();
            if let Err(at) = list.binary_search(&id.0) {
                list.insert(at, id.0);
            }
            m.stereo = list.into();
        }
        Ok(())
    }

    /// A participant's seat in this room (see [`seat_for`]).
    pub(super) fn seat_for(&self, id: u64, identity: &str, attributes: &mut crate::attributes::Attributes) -> i8 {
        seat_for(id, identity, attributes, self.is_spatial())
    }

    /// Whether the room is spatial (`docs/features/spatial.md`).
    pub(crate) fn is_spatial(&self) -> bool {
        lock(&self.mixing).mixer.config().spatial
    }

    /// The room's spatial mode: off, panned or binaural.
    pub(crate) fn spatial_mode(&self) -> SpatialMode {
        let m = lock(&self.mixing);
        match (m.mixer.config().spatial, m.mixer.config().binaural) {
            (false, _) => SpatialMode::Off,
            (true, false) => SpatialMode::Panned,
            (true, true) => SpatialMode::Binaural,
        }
    }

    /// Sets the room's spatial mode; turned on, every participant's
    /// `tutti.seat` attribute says where it sits (their `attributes_changed`
    /// events tell the room). Returns whether it changed.
    pub(crate) fn set_spatial(&self, mode: SpatialMode) -> bool {
        let on = mode.is_spatial();
        {
            let mut m = lock(&self.mixing);
            let was = (m.mixer.config().spatial, m.mixer.config().binaural);
            m.mixer.set_binaural(mode == SpatialMode::Binaural);
            m.mixer.set_spatial(on);
            if was.0 == on {
                return was.1 != m.mixer.config().binaural;
            }
        }
        if on {
            // One lock at a time (whisper changes take the mixer's, then the
            // members'): the seats under the members' lock, then into the mixer.
            let mut seats = Vec::new();
            let mut changed = Vec::new();
            for member in lock(&self.members).values_mut() {
                let mut attributes = member.attributes.clone();
                seats.push((member.id, seat_for(member.id, &member.identity, &mut attributes, true)));
                if attributes != member.attributes {
                    member.attributes = attributes.clone();
                    changed.push(RoomEvent::AttributesChanged { id: member.id, attributes });
                }
            }
            let mut m = lock(&self.mixing);
            for (id, seat) in seats {
                let _ = m.mixer.set_seat(ParticipantId(id), seat);
            }
            drop(m);
            for event in changed {
                self.publish(event);
            }
        }
        true
    }

    /// One more output (`on`) or one fewer takes the room's stereo render
    /// (see [`RoomMix::stereo_feed`]), from the next tick.
    pub(crate) fn take_stereo(&self, on: bool) {
        let mut m = lock(&self.mixing);
        m.stereo_outputs = if on { m.stereo_outputs + 1 } else { m.stereo_outputs.saturating_sub(1) };
        let outputs = m.stereo_outputs;
        m.mixer.set_stereo_outputs(outputs);
    }

    /// Seats a participant (its `tutti.seat` attribute changed).
    pub(crate) fn set_seat(&self, id: u64, seat: i8) {
        let _ = lock(&self.mixing).mixer.set_seat(ParticipantId(id), seat);
    }

    pub(super) fn remove(&self, id: ParticipantId) {
        let mut m = lock(&self.mixing);
        let _ = m.mixer.remove_participant(id);
        m.sources.remove(&id);
        if m.deaf.contains(&id.0) {
            m.deaf = m.deaf.iter().copied().filter(|d| *d != id.0).collect();
        }
        if m.stereo.binary_search(&id.0).is_ok() {
            m.stereo = m.stereo.iter().copied().filter(|s| *s != id.0).collect();
        }
        let whisper = {
            let Mixing { mixer, whispers, .. } = &mut *m;
            whispers.left(mixer, id.0)
        };
        drop(m);
        if let Some(event) = whisper {
            self.publish(event);
        }
    }

    /// Runs `f` on the room's mixer under its lock: the mesh's way in
    /// (remote participants, the room-wide selection, this node's candidates).
    pub(crate) fn with_mixer<R>(&self, f: impl FnOnce(&mut tutti_mix::Room) -> R) -> R {
        f(&mut lock(&self.mixing).mixer)
    }

    /// Who is sent nothing from the next tick on (sorted ids).
    pub(super) fn set_deaf(&self, deaf: Arc<[u64]>) {
        lock(&self.mixing).deaf = deaf;
    }

    pub(super) fn set_muted(&self, id: ParticipantId, muted: bool) -> Result<(), tutti_mix::MixError> {
        lock(&self.mixing).mixer.set_muted(id, muted)
    }

    pub(super) fn set_gain(&self, id: ParticipantId, gain: f32) -> Result<(), tutti_mix::MixError> {
        lock(&self.mixing).mixer.set_gain(id, gain)
    }

    /// Runs one tick: the inbox into the jitter buffers, the mix on `pool`,
    /// then what each participant is sent; talking changes go to the members;
    /// the events waiting go to the subscribers as one batch if one is due
    /// (see [`super::event::EVENT_INTERVAL_TICKS`]). `None` for a
    /// room with nobody in it.
    /// `shed` is the load-shedding level the clock asks for
    /// (`tutti_mix::Room::set_shed_level`).
    /// `pool`: split the tick's work on it; `None`: all on this thread.
    pub(crate) fn tick(&self, pool: Option<&MixPool>, tick: u64, shed: u8) -> Option<(RoomMix, TickReport)> {
        self.last_tick.store(tick, Ordering::Relaxed);
        let out = self.mix(pool, tick, shed);
        self.flush_due(tick);
        out
    }

    fn mix(&self, pool: Option<&MixPool>, tick: u64, shed: u8) -> Option<(RoomMix, TickReport)> {
        let packets = std::mem::take(&mut *lock(&self.inbox));
        let mut m = lock(&self.mixing);
        if m.mixer.is_empty() {
            return None;
        }
        if m.mixer.shed_level() != shed {
            m.mixer.set_shed_level(shed);
        }
        for (id, packet) in packets {
            // Packets of a participant removed since they arrived are dropped here.
            let _ = m.mixer.push_packet(id, packet);
        }
        let played = {
            let Mixing { mixer, sources, playbacks, .. } = &mut *m;
            super::playback::feed(mixer, sources, playbacks, tick)
        };
        let report = match pool {
            Some(pool) => m.mixer.tick(pool, tick),
            None => m.mixer.tick_inline(tick),
        };
        let all: Vec<(ParticipantId, Contributor)> = report
            .speakers
            .iter()
            .map(|s| (s.id, Contributor { ssrc: m.sources.get(&s.id).copied().unwrap_or(0), level: s.level }))
            .collect();
        // Whisper channel members: a channel's speaker is named only to its channel.
        let whisper = m.whispers.members();
        let heard = |id: ParticipantId, channel: Option<u64>| super::whisper::heard(&whisper, id.0, channel);
        let channel_of = |id: ParticipantId| super::whisper::lookup(&whisper, id.0).map(|(c, _)| c);
        // The level of a mix is its loudest source's (RFC 6464: lower is louder).
        let feed = |delivery: &Delivery, except: Option<ParticipantId>, channel: Option<u64>| {
            let (payload, contributors) = match delivery {
                Delivery::Nothing => return Feed { payload: Bytes::new(), level: None, contributors: Vec::new() },
                // Comfort noise: nobody is in it.
                Delivery::Dtx(p) => return Feed { payload: p.clone(), level: Some(127), contributors: Vec::new() },
                Delivery::Forward { from, payload } => (
                    payload,
                    all.iter()
                        .filter(|(id, _)| id == from && Some(*id) != except && heard(*id, channel))
                        .map(|(_, c)| *c)
                        .collect(),
                ),
                Delivery::Mix(p) => (
                    p,
                    all.iter()
                        .filter(|(id, _)| Some(*id) != except && heard(*id, channel))
                        .map(|(_, c)| *c)
                        .collect::<Vec<_>>(),
                ),
            };
            let level = contributors.iter().map(|c: &Contributor| c.level).min().unwrap_or(127);
            Feed { payload: payload.clone(), level: Some(level), contributors }
        };
        let mix = RoomMix {
            key: self.key,
            tick,
            listeners: feed(m.mixer.listener_delivery(), None, None),
            speakers: m.mixer.speaker_deliveries().map(|(id, d)| (id, feed(d, Some(id), channel_of(id)))).collect(),
            deaf: m.deaf.clone(),
            channels: m.mixer.channel_deliveries().map(|(c, d)| (c.0, feed(d, None, Some(c.0)))).collect(),
            whisper: whisper.clone(),
            stereo: (m.mixer.config().spatial && (!m.stereo.is_empty() || m.stereo_outputs > 0))
                .then(|| (feed(m.mixer.stereo_listener_delivery(), None, None), m.stereo.clone())),
        };
        if report.whisper_encodes > 0 {
            metrics::counter!(crate::metrics::outputs::WHISPER_ENCODES).increment(report.whisper_encodes as u64);
        }
        // Only while a feed listens: one Vec of reference-counted frames per tick.
        if self.speaker_feeds.load(Ordering::Relaxed) > 0 {
            // A whisper is for its channel: not in the room's feed.
            let m = &mut *m;
            let frames: Vec<(u64, u8, Bytes)> = m
                .mixer
                .speaker_frames()
                .filter(|(id, _, _)| heard(*id, None))
                .filter_map(|(id, level, f)| Some((id.0, level, f?.clone())))
                .collect();
            if !frames.is_empty() {
                // Never blocks: a lagging feed loses its oldest ticks.
                let _ = self.speaker_frames.send(Arc::new(SpeakerFrames { tick, frames }));
            }
        }
        drop(m);
        for event in played {
            self.publish(event);
        }
        if !report.events.is_empty() {
            let mut members = lock(&self.members);
            for event in &report.events {
                let (id, talking) = match *event {
                    TalkEvent::Started(id) => (id, true),
                    TalkEvent::Stopped(id) => (id, false),
                };
                // A whisperer talks to its channel only: the room is not told.
                if talking && !super::whisper::heard(&whisper, id.0, None) {
                    continue;
                }
                if let Some(m) = members.get_mut(&id.0) {
                    m.talking = talking;
                }
                // A playback talks too; its own events say when it plays. A
                // participant of another node (a spread room) is told by its
                // real id, as foreign: its own node publishes its talking.
                if super::playback::is_playback(id.0) {
                    continue;
                }
                if !is_remote(id.0) {
                    self.publish(RoomEvent::Talking { id: id.0, talking });
                } else if let Some(real) = lock(&self.remote_names).get(&id.0).copied() {
                    lock(&self.outbox).push_from(RoomEvent::Talking { id: real, talking }, true);
                }
            }
        }
        *lock(&self.speakers) = if whisper.is_empty() {
            report.speakers.clone()
        } else {
            report.speakers.iter().filter(|s| super::whisper::heard(&whisper, s.id.0, None)).copied().collect()
        };
        Some((mix, report))
    }
}
