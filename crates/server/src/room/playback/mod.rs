//! # Playback: files played into a room
//!
//! A playback is a [`Clip`] (an Ogg/Opus file read whole, off the media
//! threads) played into a room as a *source* of its mixer
//! (`tutti_mix::Room::add_source`): everyone hears it, it is sent nothing,
//! while it sounds it takes one of the K places mixed (ahead of any
//! talker), and when it is the only one it is forwarded frame for frame,
//! without a decode or an encode, exactly as a lone speaker is. Its RFC
//! 6464 levels are measured once, when the clip is read, so the mixer
//! never decodes it to learn them.
//!
//! ```text
//! api-N:     file or upload ─► Clip::parse (blocking thread: Ogg, OpusHead, 20 ms frames, levels)
//!                                 └─► Room::play ─► mixer.add_source(id) + Active { clip, cursor }
//! mix-clock: Room::tick ─► feed(): one frame per playback per tick from the clip in memory
//!                           (an Arc clone, no I/O, no allocation) ─► mixer.push_packet ─► tick
//!                        └─ played to the end ─► removed from the mixer, `playback_finished`
//! joins/leaves: Rooms ─► sounds_on_join / sounds_on_leave ─► enter / leave sound, hold music
//! ```
//!
//! The media thread reads frames from a buffer read in full before the
//! playback started, so there is no queue to overflow or run dry: a frame
//! is always there on time. The cost per tick is one packet push per
//! playback, bounded by `playback.max_per_room`.
//!
//! Ids: a playback's id is its source's participant id in the mixer, from
//! [`PLAYBACK_ID_BASE`] (2^52) up: never a peer's (those count from 1) and
//! still exact as a JSON number in a browser (below 2^53).

mod clip;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use tutti_mix::{Packet, ParticipantId};

/// A real Ogg/Opus tone file, for tests.
#[cfg(test)]
pub(crate) use clip::tests::tone_file;
pub(crate) use clip::{Clip, ClipError};

use super::event::RoomEvent;
use super::room::{Mixing, Room};
use crate::sync::lock;

/// The first playback id; every id at or above it is a playback's.
pub(crate) const PLAYBACK_ID_BASE: u64 = 1 << 52;

static NEXT_ID: AtomicU64 = AtomicU64::new(PLAYBACK_ID_BASE);

/// Ticks a playback that was played to its end waits, at most, for the
/// mixer to play what its jitter buffer still holds.
const DRAIN_TICKS: u64 = 25;

/// Whether participant id `id` is a playback's.
pub(crate) fn is_playback(id: u64) -> bool {
    id >= PLAYBACK_ID_BASE
}

/// Checks a file name of the playback directory: a plain name (letters,
/// digits, `.`, `-`, `_`; at most 128 bytes; not starting with `.`), so
/// that no path can leave the directory.
pub(crate) fn check_file_name(name: &str) -> Result<(), String> {
    let plain = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    if plain {
        Ok(())
    } else {
        Err(format!(
            "'{}' is not a file name of the playback directory: 1 to 128 letters, digits, '.', '-' or '_', not starting with '.'",
            name.escape_default()
        ))
    }
}

/// Why a playback was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// An admin started it (`POST /v1/rooms/{room}/playbacks`).
    Announcement,
    /// Someone joined a room with others in it.
    Enter,
    /// Someone left a room that still has others.
    Leave,
    /// One participant is alone in the room (looped until that changes).
    Hold,
}

impl Purpose {
    /// As the API and the events say it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Announcement => "announcement",
            Self::Enter => "enter",
            Self::Leave => "leave",
            Self::Hold => "hold",
        }
    }

    /// Enter and leave sounds are as frequent as joins and leaves: they
    /// publish no events of their own (the `joined`/`left` event says it).
    fn told(self) -> bool {
        !matches!(self, Self::Enter | Self::Leave)
    }
}

/// The sounds a room plays by itself; `None`: none.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sounds {
    pub(crate) enter: Option<Arc<Clip>>,
    pub(crate) leave: Option<Arc<Clip>>,
    pub(crate) hold: Option<Arc<Clip>>,
}

/// What a new room starts with (from `[playback]`).
#[derive(Debug, Clone)]
pub(crate) struct Defaults {
    /// Playbacks at once per room.
    pub(crate) max_per_room: usize,
    pub(crate) sounds: Sounds,
}

impl Default for Defaults {
    fn default() -> Self {
        Self { max_per_room: 4, sounds: Sounds::default() }
    }
}

/// A refused playback operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PlaybackError {
    /// The room plays its maximum already.
    #[error("room '{room}' plays {max} files already (playback.max_per_room)")]
    TooMany {
        /// The room.
        room: String,
        /// Its maximum.
        max: usize,
    },
    /// No such playback in the room.
    #[error("there is no playback {0} in this room")]
    NotFound(u64),
    /// The room was closed.
    #[error("room '{0}' is closed")]
    Closed(String),
}

/// A playback as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct PlaybackInfo {
    /// Its id (`DELETE /v1/rooms/{room}/playbacks/{id}`).
    pub(crate) id: u64,
    /// The file's name (`upload` for an uploaded body).
    pub(crate) file: String,
    /// `announcement`, `enter`, `leave` or `hold`.
    pub(crate) purpose: &'static str,
    /// Played again from the start at its end, until stopped.
    #[serde(rename = "loop")]
    pub(crate) looping: bool,
    /// How long the file plays once.
    pub(crate) duration_seconds: f64,
    /// Where it is now, in the file.
    pub(crate) position_seconds: f64,
    /// Times it started again from the start.
    pub(crate) loops: u64,
}

/// A playback under way.
#[derive(Debug)]
struct Active {
    id: ParticipantId,
    clip: Arc<Clip>,
    purpose: Purpose,
    looping: bool,
    /// The next frame to push.
    next: usize,
    /// RTP sequence of the next frame (continues across loops).
    seq: u16,
    /// Frames pushed.
    pushed: u64,
    loops: u64,
    /// The tick its last frame was pushed at (not looping).
    ended: Option<u64>,
}

impl Active {
    fn info(&self) -> PlaybackInfo {
        PlaybackInfo {
            id: self.id.0,
            file: self.clip.name.clone(),
            purpose: self.purpose.as_str(),
            looping: self.looping,
            duration_seconds: self.clip.duration_seconds(),
            position_seconds: self.next as f64 * 0.02,
            loops: self.loops,
        }
    }
}

/// A room's playbacks and sounds, kept with its mixer (one lock per tick).
#[derive(Debug, Default)]
pub(crate) struct Playbacks {
    active: Vec<Active>,
    defaults: Defaults,
}

/// The room's sounds by file name, as the API shows them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct SoundNames {
    pub(crate) enter: Option<String>,
    pub(crate) leave: Option<String>,
    pub(crate) hold: Option<String>,
}

/// A change of a room's sounds: `None` keeps one, `Some(None)` removes it.
#[derive(Debug, Default)]
pub(crate) struct SoundsChange {
    pub(crate) enter: Option<Option<Arc<Clip>>>,
    pub(crate) leave: Option<Option<Arc<Clip>>>,
    pub(crate) hold: Option<Option<Arc<Clip>>>,
}

impl Playbacks {
    fn find(&self, id: u64) -> Option<usize> {
        self.active.iter().position(|a| a.id.0 == id)
    }

    fn playing(&self, purpose: Purpose) -> Option<&Active> {
        self.active.iter().find(|a| a.purpose == purpose)
    }
}

/// Starts a playback under the mixing lock.
fn start(
    room: &str,
    m: &mut Mixing,
    clip: Arc<Clip>,
    looping: bool,
    purpose: Purpose,
) -> Result<Active, PlaybackError> {
    let max = m.playbacks.defaults.max_per_room;
    if m.playbacks.active.len() >= max {
        return Err(PlaybackError::TooMany { room: room.to_owned(), max });
    }
    let id = ParticipantId(NEXT_ID.fetch_add(1, Ordering::Relaxed));
    // Ids are fresh; the only failure is libopus out of memory, which a source never needs here.
    m.mixer.add_source(id).map_err(|_| PlaybackError::Closed(room.to_owned()))?;
    // Its CSRC while it plays (RFC 6465): a value of its own.
    m.sources.insert(id, 0x7000_0000 | (id.0 as u32 & 0x0FFF_FFFF));
    let active = Active { id, clip, purpose, looping, next: 0, seq: 0, pushed: 0, loops: 0, ended: None };
    Ok(active)
}

/// Removes a playback from the mixer; its event, if told.
fn remove(m: &mut Mixing, at: usize, reason: Option<&'static str>) -> (PlaybackInfo, Option<RoomEvent>) {
    let a = m.playbacks.active.swap_remove(at);
    let _ = m.mixer.remove_participant(a.id);
    m.sources.remove(&a.id);
    let info = a.info();
    let event = a.purpose.told().then(|| match reason {
        Some(reason) => RoomEvent::PlaybackStopped { id: a.id.0, file: info.file.clone(), reason },
        None => RoomEvent::PlaybackFinished { id: a.id.0, file: info.file.clone() },
    });
    (info, event)
}

/// Counts a start (outside the mixing lock: a metrics registry lookup).
fn count_start(purpose: Purpose) {
    metrics::counter!(crate::metrics::outputs::PLAYBACKS_STARTED, "purpose" => purpose.as_str()).increment(1);
}

fn started(a: &Active) -> Option<RoomEvent> {
    a.purpose.told().then(|| RoomEvent::PlaybackStarted {
        id: a.id.0,
        file: a.clip.name.clone(),
        purpose: a.purpose.as_str(),
        looping: a.looping,
    })
}

/// Each tick, before the mix: every playback's next frame into the mixer,
/// and those played to their end out of it. Runs on the mix clock under
/// the mixing lock: no I/O, no allocation but the returned events.
pub(super) fn feed(m: &mut Mixing, tick: u64) -> Vec<RoomEvent> {
    let mut events = Vec::new();
    let mut at = 0;
    while at < m.playbacks.active.len() {
        let a = &mut m.playbacks.active[at];
        if let Some(ended) = a.ended {
            // Played to the end: gone once the mixer has played what it holds.
            let stats = m.mixer.participant_stats(a.id).map(|s| s.jitter).unwrap_or_default();
            let done = stats.played + stats.lost + stats.drained + stats.overflow >= a.pushed;
            if done || tick.saturating_sub(ended) >= DRAIN_TICKS {
                let (_, event) = remove(m, at, None);
                events.extend(event);
                continue;
            }
            at += 1;
            continue;
        }
        let frame = &a.clip.frames[a.next];
        let packet = Packet {
            seq: a.seq,
            timestamp: u32::from(a.seq).wrapping_mul(960),
            payload: frame.payload.clone(),
            level: Some(frame.level),
        };
        a.seq = a.seq.wrapping_add(1);
        a.pushed += 1;
        a.next += 1;
        if a.next == a.clip.frames.len() {
            if a.looping {
                a.next = 0;
                a.loops += 1;
            } else {
                a.ended = Some(tick);
            }
        }
        let id = a.id;
        let _ = m.mixer.push_packet(id, packet);
        at += 1;
    }
    events
}

impl Room {
    /// Sets the room's playback limit and sounds (at creation).
    pub(crate) fn init_playback(&self, defaults: Defaults) {
        lock(&self.mixing).playbacks.defaults = defaults;
    }

    /// Plays `clip` into the room (an admin's announcement), from the next tick.
    pub(crate) fn play(&self, clip: Arc<Clip>, looping: bool) -> Result<PlaybackInfo, PlaybackError> {
        if self.is_closed() {
            return Err(PlaybackError::Closed(self.id.clone()));
        }
        let (info, event) = {
            let mut m = lock(&self.mixing);
            let a = start(&self.id, &mut m, clip, looping, Purpose::Announcement)?;
            let out = (a.info(), started(&a));
            m.playbacks.active.push(a);
            out
        };
        count_start(Purpose::Announcement);
        self.publish_all(event);
        tracing::info!(room = %self.id, playback = info.id, file = %info.file, looping, "playback started");
        Ok(info)
    }

    /// Stops playback `id` (whatever started it).
    pub(crate) fn stop_playback(&self, id: u64) -> Result<PlaybackInfo, PlaybackError> {
        let (info, event) = {
            let mut m = lock(&self.mixing);
            let at = m.playbacks.find(id).ok_or(PlaybackError::NotFound(id))?;
            remove(&mut m, at, Some("stopped"))
        };
        self.publish_all(event);
        tracing::info!(room = %self.id, playback = id, file = %info.file, "playback stopped");
        Ok(info)
    }

    /// The playbacks under way.
    pub(crate) fn playbacks(&self) -> Vec<PlaybackInfo> {
        lock(&self.mixing).playbacks.active.iter().map(Active::info).collect()
    }

    /// The room's sounds, by file name.
    pub(crate) fn sounds(&self) -> SoundNames {
        let m = lock(&self.mixing);
        let s = &m.playbacks.defaults.sounds;
        let name = |c: &Option<Arc<Clip>>| c.as_ref().map(|c| c.name.clone());
        SoundNames { enter: name(&s.enter), leave: name(&s.leave), hold: name(&s.hold) }
    }

    /// Changes the room's sounds. A hold music playing is replaced by the
    /// new one (or stopped when removed).
    pub(crate) fn set_sounds(&self, change: SoundsChange) -> SoundNames {
        let hold_changed = change.hold.is_some();
        {
            let mut m = lock(&self.mixing);
            let s = &mut m.playbacks.defaults.sounds;
            if let Some(enter) = change.enter {
                s.enter = enter;
            }
            if let Some(leave) = change.leave {
                s.leave = leave;
            }
            if let Some(hold) = change.hold {
                s.hold = hold;
            }
        }
        if hold_changed {
            let mut events = self.stop_purpose(Purpose::Hold, "replaced");
            if self.len() == 1 {
                events.extend(self.start_sound(Purpose::Hold));
            }
            events.into_iter().for_each(|e| self.publish(e));
        }
        self.sounds()
    }

    /// After a join: `members` participants now. Hold music stops when a
    /// second joins; the enter sound plays for the others; one alone gets
    /// the hold music.
    pub(super) fn sounds_on_join(&self, members: usize) {
        let mut events = Vec::new();
        if members >= 2 {
            events.extend(self.stop_purpose(Purpose::Hold, "joined"));
            events.extend(self.start_sound(Purpose::Enter));
        } else if members == 1 {
            events.extend(self.start_sound(Purpose::Hold));
        }
        events.into_iter().for_each(|e| self.publish(e));
    }

    /// After a leave: `members` participants now. Those left hear the leave
    /// sound; one left alone gets the hold music; nobody left, it stops.
    pub(super) fn sounds_on_leave(&self, members: usize) {
        let mut events = Vec::new();
        if members == 0 {
            events.extend(self.stop_purpose(Purpose::Hold, "empty"));
        } else {
            events.extend(self.start_sound(Purpose::Leave));
            if members == 1 {
                events.extend(self.start_sound(Purpose::Hold));
            }
        }
        events.into_iter().for_each(|e| self.publish(e));
    }

    /// Starts the room's sound for `purpose`, if it has one and it is not
    /// playing (an enter or leave sound: if neither is); a room at its
    /// limit skips it (counted).
    fn start_sound(&self, purpose: Purpose) -> Option<RoomEvent> {
        // A closing room, or one handed over to another node (its
        // participants leave to rejoin there): no sounds for that.
        if self.is_closed() || self.is_handed_over() {
            return None;
        }
        let mut m = lock(&self.mixing);
        let sounds = &m.playbacks.defaults.sounds;
        let clip = match purpose {
            Purpose::Enter => sounds.enter.clone(),
            Purpose::Leave => sounds.leave.clone(),
            Purpose::Hold => sounds.hold.clone(),
            Purpose::Announcement => None,
        }?;
        let busy = match purpose {
            Purpose::Enter | Purpose::Leave => {
                m.playbacks.playing(Purpose::Enter).is_some() || m.playbacks.playing(Purpose::Leave).is_some()
            }
            _ => m.playbacks.playing(purpose).is_some(),
        };
        if busy && purpose == Purpose::Hold {
            return None;
        }
        let a = if busy { None } else { start(&self.id, &mut m, clip, purpose == Purpose::Hold, purpose).ok() };
        let Some(a) = a else {
            drop(m);
            metrics::counter!(crate::metrics::outputs::PLAYBACK_SOUNDS_SKIPPED, "purpose" => purpose.as_str())
                .increment(1);
            tracing::debug!(room = %self.id, purpose = purpose.as_str(), "room sound skipped");
            return None;
        };
        let event = started(&a);
        m.playbacks.active.push(a);
        drop(m);
        count_start(purpose);
        event
    }

    /// Stops every playback of `purpose`.
    fn stop_purpose(&self, purpose: Purpose, reason: &'static str) -> Vec<RoomEvent> {
        let mut m = lock(&self.mixing);
        let mut events = Vec::new();
        while let Some(at) = m.playbacks.active.iter().position(|a| a.purpose == purpose) {
            let (_, event) = remove(&mut m, at, Some(reason));
            events.extend(event);
        }
        events
    }

    fn publish_all(&self, events: impl IntoIterator<Item = RoomEvent>) {
        events.into_iter().for_each(|e| self.publish(e));
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use tutti_mix::{MixMode, RoomConfig};

    use super::clip::tests::tone_file;
    use super::*;
    use crate::room::Rooms;

    fn clip(frames: usize) -> Arc<Clip> {
        Arc::new(Clip::parse("tone.opus", &tone_file(523.0, frames)).expect("clip"))
    }

    fn events(
        room: &Room,
        rx: &mut tokio::sync::broadcast::Receiver<Arc<super::super::event::EventBatch>>,
    ) -> Vec<RoomEvent> {
        room.flush_events();
        let mut out = Vec::new();
        while let Ok(batch) = rx.try_recv() {
            out.extend(batch.events.iter().cloned());
        }
        out
    }

    #[test]
    fn a_playback_plays_its_frames_in_order_then_finishes_and_leaves_the_mixer() {
        let rooms = Rooms::new(RoomConfig::default(), 4, 10).expect("rooms");
        let room = rooms.create("r", None, None).expect("room");
        let mut rx = room.subscribe();
        let c = clip(10);
        let info = room.play(c.clone(), false).expect("plays");
        assert!(is_playback(info.id));
        assert_eq!((info.purpose, info.looping, info.duration_seconds), ("announcement", false, 0.2));
        assert!(matches!(&events(&room, &mut rx)[..], [RoomEvent::PlaybackStarted { id, .. }] if *id == info.id));
        let mut forwarded = Vec::new();
        for tick in 0..40 {
            let Some((mix, report)) = room.tick(None, tick, 0) else { break };
            if let MixMode::Forward(from) = report.mode {
                assert_eq!(from.0, info.id);
                assert_eq!(report.decodes, 0, "a lone playback is forwarded without a decode");
                forwarded.push(mix.listeners.payload.clone());
            }
            assert!(mix.speakers.iter().all(|(_, f)| f.payload.is_empty()), "the playback is sent nothing");
        }
        // Its frames, unchanged and in order (the first, the encoder's ramp, may be under the talking threshold).
        let frames: Vec<Bytes> = c.frames.iter().map(|f| f.payload.clone()).collect();
        assert!(forwarded.len() >= 8, "{}", forwarded.len());
        let start = frames.iter().position(|f| *f == forwarded[0]).expect("a frame of the file");
        assert_eq!(&frames[start..start + forwarded.len()], &forwarded[..]);
        assert!(room.playbacks().is_empty(), "gone after its end");
        assert!(room.tick(None, 41, 0).is_none(), "the mixer is empty again");
        assert!(
            events(&room, &mut rx)
                .iter()
                .any(|e| matches!(e, RoomEvent::PlaybackFinished { id, .. } if *id == info.id))
        );
        assert_eq!(room.speaker_ids(), Vec::<u64>::new(), "a playback is never listed as a speaker");
    }

    #[test]
    fn a_looped_playback_goes_on_until_stopped_and_the_limit_holds() {
        let rooms = Rooms::new(RoomConfig::default(), 4, 10).expect("rooms");
        let room = rooms.create("r", None, None).expect("room");
        room.init_playback(Defaults { max_per_room: 2, sounds: Sounds::default() });
        let looped = room.play(clip(5), true).expect("plays");
        room.play(clip(5), false).expect("a second");
        assert!(matches!(room.play(clip(5), false), Err(PlaybackError::TooMany { max: 2, .. })));
        for tick in 0..60 {
            room.tick(None, tick, 0);
        }
        let now = room.playbacks();
        assert_eq!(now.len(), 1, "the other one finished: {now:?}");
        assert!(now[0].loops >= 10, "{now:?}");
        let stopped = room.stop_playback(looped.id).expect("stopped");
        assert_eq!(stopped.id, looped.id);
        assert_eq!(room.stop_playback(looped.id), Err(PlaybackError::NotFound(looped.id)));
        assert!(room.playbacks().is_empty());
    }

    #[test]
    fn hold_music_plays_to_one_alone_and_stops_for_two_and_enter_and_leave_sounds_play() {
        let rooms = Rooms::new(RoomConfig::default(), 4, 10).expect("rooms");
        let room = rooms.create("r", None, None).expect("room");
        let sounds = Sounds { enter: Some(clip(5)), leave: Some(clip(5)), hold: Some(clip(50)) };
        room.init_playback(Defaults { max_per_room: 4, sounds });
        let mut rx = room.subscribe();
        let purposes = |room: &Room| room.playbacks().iter().map(|p| p.purpose).collect::<Vec<_>>();
        let acceptor =
            tutti_rtc::Acceptor::new("127.0.0.1:4000".parse().expect("addr"), std::time::Duration::from_secs(5))
                .expect("acceptor");
        let join = |name: &str| {
            let joiner = crate::room::PlainJoiner {
                id: acceptor.reserve_id(),
                name: name.to_owned(),
                identity: String::new(),
                listen_only: false,
                admin: false,
                io: 0,
            };
            rooms.join_plain(&room, joiner).expect("joins").0
        };
        let a = join("a");
        assert_eq!(purposes(&room), ["hold"], "alone: hold music");
        let b = join("b");
        assert_eq!(purposes(&room), ["enter"], "two: the hold music stops, the enter sound plays");
        let seen = events(&room, &mut rx);
        assert!(seen.iter().any(|e| matches!(e, RoomEvent::PlaybackStarted { purpose: "hold", looping: true, .. })));
        assert!(seen.iter().any(|e| matches!(e, RoomEvent::PlaybackStopped { reason: "joined", .. })));
        assert!(!seen.iter().any(|e| matches!(e, RoomEvent::PlaybackStarted { purpose: "enter", .. })), "{seen:?}");
        let _ = rooms.leave(&room, b, crate::room::LeaveReason::Left);
        let mut now = purposes(&room);
        now.sort_unstable();
        assert_eq!(now, ["enter", "hold"], "alone again: hold music (the leave sound waits for the enter sound)");
        let _ = rooms.leave(&room, a, crate::room::LeaveReason::Left);
        assert!(!purposes(&room).contains(&"hold"), "nobody left: no hold music");
    }
}
