//! A recording per speaker: beside the room's mix, one Ogg/Opus file per
//! participant who spoke, made of the frames they sent (no decode, no
//! encode), and a sidecar (JSON) that places every file on the room's
//! timeline, so that the tracks line up in an editor.
//!
//! ```text
//! the room's per-speaker feed (each tick's selected speakers' own frames, `Room::subscribe_speaker_frames`)
//!   ─► this task (tokio) ─► one Recorder per speaker of this node, opened at its first frame
//!        (`<room>-<time>-p<id>.opus`) ─► push(tick, frame): never blocks, a full queue drops (counted)
//! stop (the room recording's) ─► every track stopped ─► `<room>-<time>.json`: each file's first
//!   tick and its offset (s) from the recording's zero, the mix's too
//! ```
//!
//! The zero of the timeline is the room's tick when the recording started;
//! a file's offset is where its first frame goes. The sidecar numbers ticks
//! from the Unix epoch (20 ms each), as every node of a cluster does, so a
//! spread room's nodes, each recording its own speakers, share one timeline. Between frames a
//! recorder fills the silence with concealment packets (as the mix's does),
//! so a file's own time keeps the room's. A speaker is recorded while the
//! mixer selects them (the room's `max_speakers` loudest): in a room where
//! more talk at once, the others' frames are not in their file for those
//! ticks. Quotas, events and webhooks are each file's, as for the mix.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::broadcast::error::RecvError;

use super::recording::{OnFinish, Recorder, RecordingConfig, file_name};
use crate::room::Room;
use crate::sync::lock;

/// Seconds per mixer tick.
const TICK_SECONDS: f64 = 0.02;
/// Most speakers one recording opens files for.
pub(crate) const MAX_TRACKS: usize = 256;

/// One speaker's file.
struct Track {
    recorder: Recorder,
    file: String,
    first_tick: u64,
    identity: String,
    name: String,
}

/// The per-speaker files of one room recording.
pub(crate) struct Tracks {
    room: Arc<Room>,
    cfg: RecordingConfig,
    started: SystemTime,
    /// The room's tick at the start: the timeline's zero.
    zero_tick: u64,
    /// This node's tick 0 in ticks since the Unix epoch.
    tick_base: u64,
    /// Only these participants (none: everyone who speaks).
    only: Option<HashSet<u64>>,
    tracks: Mutex<HashMap<u64, Track>>,
    /// Set once: the feed's task ends at once (the room stops making
    /// speaker frames for it, and a closed room, no longer ticked, is let go).
    stopped: tokio::sync::watch::Sender<bool>,
    /// Speakers past [`MAX_TRACKS`], not recorded.
    refused: AtomicU64,
    /// This node's id in a cluster: named beside each file and in the sidecar.
    node: Option<String>,
}

/// Where a recording's tracks sit: the timeline, and this node.
pub(crate) struct Timeline {
    /// The zero, in this node's room ticks (`None`: the room's next tick;
    /// another node's recording gives its own, translated).
    pub(crate) zero_tick: Option<u64>,
    /// This node's tick 0 in ticks since the Unix epoch (the sidecar's numbering).
    pub(crate) tick_base: u64,
    /// This node's id in a cluster.
    pub(crate) node: Option<String>,
}

/// What makes each track's finish callback (the room's events, webhooks, metrics).
pub(crate) type FinishFor = Arc<dyn Fn() -> OnFinish + Send + Sync>;

impl Tracks {
    /// Starts recording `room`'s speakers (those of `only`, if given) from
    /// its next tick (or `at`'s zero), on the current tokio runtime.
    pub(crate) fn start(
        room: &Arc<Room>,
        cfg: &RecordingConfig,
        started: SystemTime,
        only: Option<HashSet<u64>>,
        on_finish: FinishFor,
        at: Timeline,
    ) -> Arc<Self> {
        let tracks = Arc::new(Self {
            room: Arc::clone(room),
            cfg: cfg.clone(),
            started,
            zero_tick: at.zero_tick.unwrap_or_else(|| room.last_tick() + 1),
            tick_base: at.tick_base,
            only,
            tracks: Mutex::new(HashMap::new()),
            stopped: tokio::sync::watch::channel(false).0,
            refused: AtomicU64::new(0),
            node: at.node,
        });
        // Internal: not one of the room's `limits.speaker_feeds_per_room`.
        if let Some(mut feed) = room.subscribe_speaker_frames(usize::MAX) {
            let me = Arc::clone(&tracks);
            let mut stopped = tracks.stopped.subscribe();
            tokio::spawn(async move {
                loop {
                    let frames = tokio::select! {
                        f = feed.frames.recv() => f,
                        _ = stopped.wait_for(|s| *s) => break,
                    };
                    match frames {
                        Ok(frames) => me.push(frames.tick, &frames.frames, &on_finish),
                        Err(RecvError::Lagged(n)) => {
                            tracing::warn!(room = %me.room.id, ticks = n, "per-speaker recording fell behind: frames lost");
                        }
                        Err(RecvError::Closed) => break,
                    }
                }
            });
        }
        tracks
    }

    fn push(&self, tick: u64, frames: &[(u64, u8, bytes::Bytes)], on_finish: &FinishFor) {
        let mut tracks = lock(&self.tracks);
        // Checked under the lock `stop` takes: no file opens after the sidecar is written.
        if *self.stopped.borrow() {
            return;
        }
        for (id, _level, frame) in frames {
            if self.only.as_ref().is_some_and(|only| !only.contains(id)) {
                continue;
            }
            if !tracks.contains_key(id) {
                // Another node's participant of a spread room: that node records its own.
                let Some((identity, name)) =
                    lock(&self.room.members).get(id).map(|m| (m.identity.clone(), m.name.clone()))
                else {
                    continue;
                };
                if tracks.len() >= MAX_TRACKS {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let file = track_file(&self.room.id, self.started, *id);
                match Recorder::start_as(&self.room.id, &file, &self.cfg, Some(on_finish())) {
                    Ok(recorder) => {
                        tracing::info!(room = %self.room.id, participant = id, file, "speaker's track started");
                        tracks.insert(*id, Track { recorder, file, first_tick: tick, identity, name });
                    }
                    Err(e) => {
                        tracing::warn!(room = %self.room.id, participant = id, error = %e, "speaker's track not started");
                        continue;
                    }
                }
            }
            if let Some(t) = tracks.get(id) {
                let _ = t.recorder.push(tick, frame.clone());
            }
        }
    }

    /// Stops every track and writes the sidecar (`mix`: the mix's file and
    /// its first tick, this node's, when it has one). Returns the sidecar's file name.
    /// Its disk I/O is small; the caller runs it off the async threads.
    pub(crate) fn stop(&self, mix: Option<(&str, u64)>) -> Option<String> {
        self.stopped.send_replace(true);
        let tracks = lock(&self.tracks);
        for t in tracks.values() {
            t.recorder.stop();
        }
        let offset = |tick: u64| tick.saturating_sub(self.zero_tick) as f64 * TICK_SECONDS;
        let mut list: Vec<serde_json::Value> = tracks
            .iter()
            .map(|(id, t)| {
                serde_json::json!({
                    "participant": id,
                    "node": self.node,
                    "identity": t.identity,
                    "name": t.name,
                    "file": t.file,
                    "first_tick": t.first_tick + self.tick_base,
                    "offset_seconds": offset(t.first_tick),
                })
            })
            .collect();
        list.sort_by_key(|t| t["participant"].as_u64());
        drop(tracks);
        let sidecar = serde_json::json!({
            "room": self.room.id,
            "node": self.node,
            "started_at": self.started.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
            "zero_tick": self.zero_tick + self.tick_base,
            "tick_seconds": TICK_SECONDS,
            "mix": mix.map(|(file, tick)| {
                serde_json::json!({ "file": file, "first_tick": tick + self.tick_base, "offset_seconds": offset(tick) })
            }),
            "tracks": list,
            "speakers_not_recorded": self.refused.load(Ordering::Relaxed),
        });
        let name = file_name(&self.room.id, self.started).replace(".opus", ".json");
        match write_sidecar(&self.cfg.dir.join(&name), &sidecar) {
            Ok(()) => Some(name),
            Err(e) => {
                tracing::warn!(room = %self.room.id, error = %e, "per-speaker recording's sidecar not written");
                None
            }
        }
    }

    /// The tracks so far, for `GET …/recording`.
    pub(crate) fn state(&self) -> serde_json::Value {
        let tracks = lock(&self.tracks);
        let mut list: Vec<serde_json::Value> = tracks
            .iter()
            .map(|(id, t)| {
                serde_json::json!({ "participant": id, "node": self.node, "file": t.file, "bytes": t.recorder.stats().bytes })
            })
            .collect();
        list.sort_by_key(|t| t["participant"].as_u64());
        serde_json::Value::from(list)
    }

    /// Whether its room was closed (deleted, or every participant gone).
    pub(crate) fn room_closed(&self) -> bool {
        self.room.is_closed()
    }

    /// The timeline's zero (in ticks since the Unix epoch) and the
    /// participants recorded (`None`: everyone who speaks): what another
    /// node records its own speakers by.
    pub(crate) fn timeline(&self) -> (u64, Option<Vec<u64>>) {
        let mut only: Option<Vec<u64>> = self.only.as_ref().map(|o| o.iter().copied().collect());
        if let Some(o) = &mut only {
            o.sort_unstable();
        }
        (self.zero_tick + self.tick_base, only)
    }

    /// Waits (up to `timeout`, blocking) for every track's file to be closed.
    pub(crate) fn wait(&self, timeout: Duration) {
        let deadline = std::time::Instant::now() + timeout;
        for t in lock(&self.tracks).values() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let _ = t.recorder.stop_and_wait(left);
        }
    }
}

/// A speaker's file: the room recording's name with `-p<id>`.
fn track_file(room: &str, started: SystemTime, id: u64) -> String {
    file_name(room, started).replace(".opus", &format!("-p{id}.opus"))
}

fn write_sidecar(path: &Path, sidecar: &serde_json::Value) -> std::io::Result<()> {
    let tmp = path.with_extension("json.part");
    std::fs::write(&tmp, serde_json::to_vec_pretty(sidecar).unwrap_or_default())?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_track_is_named_after_the_room_recording() {
        let at = UNIX_EPOCH + Duration::from_secs(1_767_225_600);
        assert_eq!(file_name("pod", at), "pod-20260101T000000Z.opus");
        assert_eq!(track_file("pod", at, 7), "pod-20260101T000000Z-p7.opus");
    }
}
