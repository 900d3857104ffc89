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

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use tutti_mix::{Packet, ParticipantId};

/// A real Ogg/Opus tone file, for tests.
#[cfg(test)]
pub(crate) use clip::tests::tone_file;
pub(crate) use clip::{Clip, ClipError};

use super::event::RoomEvent;

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
    pub(super) fn told(self) -> bool {
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
pub(super) struct Active {
    pub(super) id: ParticipantId,
    pub(super) clip: Arc<Clip>,
    pub(super) purpose: Purpose,
    pub(super) looping: bool,
    /// The next frame to push.
    pub(super) next: usize,
    /// RTP sequence of the next frame (continues across loops).
    pub(super) seq: u16,
    /// Frames pushed.
    pub(super) pushed: u64,
    pub(super) loops: u64,
    /// The tick its last frame was pushed at (not looping).
    pub(super) ended: Option<u64>,
}

impl Active {
    pub(super) fn info(&self) -> PlaybackInfo {
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
    pub(super) active: Vec<Active>,
    pub(super) defaults: Defaults,
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
    pub(super) fn find(&self, id: u64) -> Option<usize> {
        self.active.iter().position(|a| a.id.0 == id)
    }

    pub(super) fn playing(&self, purpose: Purpose) -> Option<&Active> {
        self.active.iter().find(|a| a.purpose == purpose)
    }
}

/// The mixer and its sources' CSRCs, as a room's mixing lock holds them.
pub(super) type Sources = HashMap<ParticipantId, u32>;

/// Starts a playback under the mixing lock.
pub(super) fn start(
    room: &str,
    (mixer, sources, playbacks): (&mut tutti_mix::Room, &mut Sources, &Playbacks),
    clip: Arc<Clip>,
    looping: bool,
    purpose: Purpose,
) -> Result<Active, PlaybackError> {
    let max = playbacks.defaults.max_per_room;
    if playbacks.active.len() >= max {
        return Err(PlaybackError::TooMany { room: room.to_owned(), max });
    }
    let id = ParticipantId(NEXT_ID.fetch_add(1, Ordering::Relaxed));
    // Ids are fresh; the only failure is libopus out of memory, which a source never needs here.
    mixer.add_source(id).map_err(|_| PlaybackError::Closed(room.to_owned()))?;
    if purpose == Purpose::Hold {
        // Each node of a spread room plays its own hold music to its held
        // participants: never sent to another node (which would hear it twice).
        let _ = mixer.keep_local(id, true);
    }
    // Its CSRC while it plays (RFC 6465): a value of its own.
    sources.insert(id, 0x7000_0000 | (id.0 as u32 & 0x0FFF_FFFF));
    let active = Active { id, clip, purpose, looping, next: 0, seq: 0, pushed: 0, loops: 0, ended: None };
    Ok(active)
}

/// Removes a playback from the mixer; its event, if told.
pub(super) fn remove(
    (mixer, sources, playbacks): (&mut tutti_mix::Room, &mut Sources, &mut Playbacks),
    at: usize,
    reason: Option<&'static str>,
) -> (PlaybackInfo, Option<RoomEvent>) {
    let a = playbacks.active.swap_remove(at);
    let _ = mixer.remove_participant(a.id);
    sources.remove(&a.id);
    let info = a.info();
    let event = a.purpose.told().then(|| match reason {
        Some(reason) => RoomEvent::PlaybackStopped { id: a.id.0, file: info.file.clone(), reason },
        None => RoomEvent::PlaybackFinished { id: a.id.0, file: info.file.clone() },
    });
    (info, event)
}

/// Counts a start (outside the mixing lock: a metrics registry lookup).
pub(super) fn count_start(purpose: Purpose) {
    metrics::counter!(crate::metrics::outputs::PLAYBACKS_STARTED, "purpose" => purpose.as_str()).increment(1);
}

pub(super) fn started(a: &Active) -> Option<RoomEvent> {
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
pub(super) fn feed(
    mixer: &mut tutti_mix::Room,
    sources: &mut Sources,
    playbacks: &mut Playbacks,
    tick: u64,
) -> Vec<RoomEvent> {
    let mut events = Vec::new();
    let mut at = 0;
    while at < playbacks.active.len() {
        let a = &mut playbacks.active[at];
        if let Some(ended) = a.ended {
            // Played to the end: gone once the mixer has played what it holds.
            let stats = mixer.participant_stats(a.id).map(|s| s.jitter).unwrap_or_default();
            let done = stats.played + stats.lost + stats.drained + stats.overflow >= a.pushed;
            if done || tick.saturating_sub(ended) >= DRAIN_TICKS {
                let (_, event) = remove((mixer, sources, playbacks), at, None);
                events.extend(event);
                continue;
            }
            at += 1;
            continue;
        }
        let frame = a.clip.frame(a.next);
        let packet = Packet {
            seq: a.seq,
            timestamp: u32::from(a.seq).wrapping_mul(960),
            payload: frame.payload,
            level: Some(frame.level),
        };
        a.seq = a.seq.wrapping_add(1);
        a.pushed += 1;
        a.next += 1;
        if a.next == a.clip.len() {
            if a.looping {
                a.next = 0;
                a.loops += 1;
            } else {
                a.ended = Some(tick);
            }
        }
        let id = a.id;
        let _ = mixer.push_packet(id, packet);
        at += 1;
    }
    events
}
