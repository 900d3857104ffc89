//! # Outputs: what leaves a room besides its participants' streams
//!
//! Two layers in one folder. The leaves below: recording ([`recording`],
//! on [`ogg`]), signed webhooks ([`webhook`]) and forwarding the mix as
//! plain RTP ([`rtp_out`]) — self-contained parts that use only external
//! crates, `tutti-mix` and std, never another module of this crate. The
//! wiring above them, in this file and [`hooks`]: recording a room
//! ([`recording::Recorder`]), forwarding its mix
//! ([`rtp_out::RtpForwarder`]) and telling the application's backend what
//! happens ([`webhook::WebhookSender`]).
//!
//! ```text
//! mix-clock ── after each tick: feed(&mixes) ─┬─► Recorder::push (try_send, overflow counted) ─► writer thread ─► file
//!                                             └─► RtpForwarder::send (non-blocking UDP)
//! api ── start/stop ──► Outputs (maps by RoomKey) ◄── housekeeping (250 ms): reap deleted rooms, metrics, watch rooms
//! room events (broadcast) ──► one watcher task per room ──► WebhookSender::send (bounded per-URL queues)
//! ```
//!
//! The clock only ever takes two uncontended locks per tick here, and none
//! when nothing records or forwards (one atomic load): no disk, no thread
//! start, no blocking send. Starting a recording (a thread) and a forwarder
//! (a socket) happens on the API's threads.

pub(crate) mod hooks;
pub mod ogg;
pub mod recording;
pub mod rtp_out;
mod tracks;
pub mod webhook;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::Config;
use crate::cidr::Cidr;
use crate::metrics::outputs as m;
use crate::outputs::recording::{PushOutcome, Recorder, RecordingConfig, RecordingFinished, StopReason};
use crate::outputs::rtp_out::{RtpForwarder, RtpOutConfig};
use crate::outputs::webhook::{WebhookEvent, WebhookSender};
use crate::room::{Room, RoomEvent, RoomKey, RoomMix, Rooms};
use crate::sync::lock;

/// How often [`Outputs::housekeeping`] runs.
const HOUSEKEEPING: Duration = Duration::from_millis(250);

/// Why an output could not be started or stopped. The API turns each into
/// a JSON error with a stable code.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OutputError {
    /// `[recording] enabled = false`.
    #[error("recording is disabled on this server ([recording] enabled = false)")]
    RecordingDisabled,
    /// The room is recorded already.
    #[error("room '{0}' is being recorded already")]
    RecordingActive(String),
    /// The room is not being recorded.
    #[error("room '{0}' is not being recorded")]
    RecordingNotFound(String),
    /// `[rtp_out] allowed` is empty.
    #[error("RTP out is disabled on this server ([rtp_out] allowed is empty)")]
    RtpOutDisabled,
    /// The destination is not in `[rtp_out] allowed`.
    #[error("{0} is not in [rtp_out] allowed")]
    RtpOutForbidden(SocketAddr),
    /// The room forwards already.
    #[error("room '{0}' forwards its mix already")]
    RtpOutActive(String),
    /// The room does not forward.
    #[error("room '{0}' does not forward its mix")]
    RtpOutNotFound(String),
    /// A bad value (the message says which).
    #[error("{0}")]
    BadValue(String),
    /// A thread or socket could not be made.
    #[error("{0}")]
    Internal(String),
}

/// A recording in progress.
pub(crate) struct Recording {
    room: Arc<Room>,
    pub(crate) recorder: Recorder,
    pub(crate) file: String,
    pub(crate) started: SystemTime,
    /// Set by the writer thread once the file is closed.
    done: Arc<AtomicBool>,
    /// Bytes already counted in the metric.
    counted: Arc<AtomicU64>,
    /// The mix's first tick in the file (`u64::MAX` before its first frame).
    first_tick: AtomicU64,
    /// A file per speaker, when asked for.
    pub(crate) tracks: Option<Arc<tracks::Tracks>>,
    /// A stereo recording (two channels): it takes the room's stereo render.
    stereo: Option<StereoTap>,
}

/// While it lives, its room encodes its stereo render for an output, which
/// takes those packets ([`RoomMix::stereo_feed`]): no encode of its own.
struct StereoTap(Arc<Room>);

impl StereoTap {
    /// A tap on `room` when `stereo` is asked for and the room is spatial
    /// (a room that is not spatial has no stereo render: its output is mono).
    fn on(room: &Arc<Room>, stereo: bool) -> Option<Self> {
        (stereo && room.is_spatial()).then(|| {
            room.take_stereo(true);
            Self(room.clone())
        })
    }
}

impl Drop for StereoTap {
    fn drop(&mut self) {
        self.0.take_stereo(false);
    }
}

/// What an output takes of `mix`: the stereo render's packets or the listeners'.
fn feed_of(mix: &RoomMix, stereo: bool) -> &Bytes {
    if stereo { &mix.stereo_feed().payload } else { &mix.listeners.payload }
}

/// Which speakers a room recording gives a file of their own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum PerSpeaker {
    /// None: the mix only.
    #[default]
    Off,
    /// Everyone who speaks.
    All,
    /// These participants.
    Only(HashSet<u64>),
}

impl Recording {
    /// Stops its speakers' files and writes their sidecar (some small disk
    /// I/O: call it off the async threads). The sidecar's file name.
    pub(crate) fn finish_tracks(&self) -> Option<String> {
        let tracks = self.tracks.as_ref()?;
        let first = self.first_tick.load(Ordering::Relaxed);
        tracks.stop((first != u64::MAX).then_some((self.file.as_str(), first)))
    }

    /// Its state, as `GET …/recording` shows it.
    pub(crate) fn state(&self) -> serde_json::Value {
        let s = self.recorder.stats();
        serde_json::json!({
            "active": !self.done.load(Ordering::Relaxed),
            "file": self.file,
            "path": self.recorder.path().display().to_string(),
            "started_at": self.started.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
            "bytes": s.bytes,
            "frames": s.frames,
            "gap_frames": s.gap_frames,
            "dropped_frames": s.dropped,
            "channels": if self.stereo.is_some() { 2 } else { 1 },
            "tracks": self.tracks.as_ref().map(|t| t.state()),
        })
    }
}

/// A room's mix on its way out as RTP.
pub(crate) struct Forward {
    room: Arc<Room>,
    fwd: RtpForwarder,
    dest: SocketAddr,
    sdp: String,
    /// Packets and failures already counted in the metrics.
    counted: (u64, u64),
    /// A stereo stream: it takes the room's stereo render.
    stereo: Option<StereoTap>,
}

impl Forward {
    /// Its state, as the API shows it.
    pub(crate) fn state(&self) -> serde_json::Value {
        let s = self.fwd.stats();
        serde_json::json!({
            "address": self.dest.to_string(),
            "ssrc": self.fwd.ssrc(),
            "payload_type": 111,
            "sdp": self.sdp,
            "packets": s.packets,
            "bytes": s.bytes,
            "failed": s.failed,
            "channels": if self.stereo.is_some() { 2 } else { 1 },
        })
    }
}

/// Whether a spatial room's outputs are stereo unless their request says.
#[derive(Debug, Clone, Copy, Default)]
struct Stereo {
    recording: bool,
    rtp_out: bool,
}

/// Every room's recordings and forwarders, and the webhook sender.
pub(crate) struct Outputs {
    recording: Option<RecordingConfig>,
    /// Whether recordings and RTP out of a spatial room are stereo unless
    /// their request says (`[recording] stereo`, `[rtp_out] stereo`).
    stereo: Stereo,
    networks: Vec<Cidr>,
    webhooks: Option<Arc<WebhookSender>>,
    /// Recordings plus forwarders: the clock's fast path when zero.
    active: AtomicUsize,
    recordings: Mutex<HashMap<RoomKey, Recording>>,
    forwarders: Mutex<HashMap<RoomKey, Forward>>,
    /// Rooms with a webhook watcher.
    watched: Mutex<HashSet<RoomKey>>,
    /// Frames the recorders' queues refused (counted here, on push).
    dropped: AtomicU64,
    /// This node's id in a cluster (set once at start): events, webhooks
    /// and sidecars say which node has which file.
    node: OnceLock<String>,
    /// The clock's tick 0 in ticks since the Unix epoch (set at start):
    /// every node numbers the same instant alike.
    tick_base: AtomicU64,
    /// Speakers' files this node records for a recording started on
    /// another node of a spread room (no mix: that node records it).
    node_tracks: Mutex<HashMap<RoomKey, Arc<tracks::Tracks>>>,
}

/// Where a per-speaker recording's files go on the room's timeline: what
/// the node that started it tells the other nodes of a spread room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SpeakersTimeline {
    /// When the recording started (its files' names), Unix milliseconds.
    pub(crate) started_ms: u64,
    /// The timeline's zero, in ticks since the Unix epoch (as every node numbers them).
    pub(crate) zero_tick: u64,
    /// Only these participants (`None`: everyone who speaks).
    pub(crate) only: Option<Vec<u64>>,
}

impl Outputs {
    /// Nothing on: no recording, no RTP out, no webhooks (for the fuzzer's API state).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn disabled() -> Self {
        Self::with(None, Vec::new(), None)
    }

    fn with(recording: Option<RecordingConfig>, networks: Vec<Cidr>, webhooks: Option<Arc<WebhookSender>>) -> Self {
        Self {
            recording,
            stereo: Stereo::default(),
            networks,
            webhooks,
            active: AtomicUsize::new(0),
            recordings: Mutex::new(HashMap::new()),
            forwarders: Mutex::new(HashMap::new()),
            watched: Mutex::new(HashSet::new()),
            dropped: AtomicU64::new(0),
            node: OnceLock::new(),
            tick_base: AtomicU64::new(0),
            node_tracks: Mutex::new(HashMap::new()),
        }
    }

    /// Names this node (cluster mode; once, at start).
    pub(crate) fn set_node(&self, id: &str) {
        let _ = self.node.set(id.to_owned());
    }

    /// Sets the clock's tick 0 in ticks since the Unix epoch (the media
    /// plane's, at start).
    pub(crate) fn set_tick_base(&self, base: u64) {
        self.tick_base.store(base, Ordering::Relaxed);
    }

    fn node(&self) -> Option<String> {
        self.node.get().cloned()
    }

    /// Where a recording's tracks sit: `zero_tick` in ticks since the Unix epoch (`None`: the room's next tick).
    fn timeline(&self, zero_tick: Option<u64>) -> tracks::Timeline {
        let tick_base = self.tick_base.load(Ordering::Relaxed);
        let zero_tick = zero_tick.map(|t| t.saturating_sub(tick_base));
        tracks::Timeline { zero_tick, tick_base, node: self.node() }
    }

    /// As `cfg` asks (validated already); the webhook senders' tasks run on `runtime`.
    pub(crate) fn new(cfg: &Config, runtime: &tokio::runtime::Handle) -> Result<Self, String> {
        let recording = cfg.recording.enabled.then(|| cfg.recording.to_config());
        let networks = cfg.rtp_out.networks()?;
        let webhooks = if cfg.webhooks.urls.is_empty() {
            None
        } else {
            if cfg.webhooks.secret.is_empty() {
                tracing::warn!(
                    "webhooks.secret is not set: webhooks are signed with auth.secret, so every receiver holds the key that mints admin tokens; set webhooks.secret"
                );
            }
            let wc = cfg.webhooks.to_config(cfg.auth.secret.as_bytes());
            let sender = WebhookSender::start(&wc, runtime).map_err(|e| format!("webhooks: {e}"))?;
            tracing::info!(urls = cfg.webhooks.urls.len(), "webhooks on");
            Some(Arc::new(sender))
        };
        let stereo = Stereo { recording: cfg.recording.stereo, rtp_out: cfg.rtp_out.stereo };
        Ok(Self { stereo, ..Self::with(recording, networks, webhooks) })
    }

    /// Whether rooms may be recorded.
    pub(crate) fn recording_enabled(&self) -> bool {
        self.recording.is_some()
    }

    /// The webhook sender, when webhooks are configured.
    pub(crate) fn webhooks(&self) -> Option<&Arc<WebhookSender>> {
        self.webhooks.as_ref()
    }

    /// Called by the clock after every tick with every room's output. Never blocks.
    pub(crate) fn feed(&self, mixes: &[RoomMix]) {
        if self.active.load(Ordering::Relaxed) == 0 {
            return;
        }
        {
            let recs = lock(&self.recordings);
            if !recs.is_empty() {
                for mix in mixes {
                    // An empty payload is a DTX pause: the recorder conceals the gap by tick.
                    let Some(r) = recs.get(&mix.key) else { continue };
                    let payload = feed_of(mix, r.stereo.is_some());
                    if !payload.is_empty() {
                        let _ = r.first_tick.compare_exchange(u64::MAX, mix.tick, Ordering::Relaxed, Ordering::Relaxed);
                        if r.recorder.push(mix.tick, payload.clone()) == PushOutcome::Dropped {
                            self.dropped.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
        }
        let mut fwds = lock(&self.forwarders);
        if !fwds.is_empty() {
            for mix in mixes {
                let Some(f) = fwds.get_mut(&mix.key) else { continue };
                let payload = feed_of(mix, f.stereo.is_some());
                if !payload.is_empty() {
                    let _ = f.fwd.send(mix.tick, payload);
                }
            }
        }
    }

    /// Starts recording `room`: the file is opened by its writer thread;
    /// frames flow from the next tick (the first join's, in an empty room).
    pub(crate) fn start_recording(&self, room: &Arc<Room>) -> Result<serde_json::Value, OutputError> {
        self.start_recording_with(room, PerSpeaker::Off, None)
    }

    /// [`Outputs::start_recording`], with a file per speaker as `per_speaker`
    /// asks (see `tracks`): started on the current tokio runtime. `stereo`
    /// (default `[recording] stereo`): a spatial room's mix in two channels.
    pub(crate) fn start_recording_with(
        &self,
        room: &Arc<Room>,
        per_speaker: PerSpeaker,
        stereo: Option<bool>,
    ) -> Result<serde_json::Value, OutputError> {
        let cfg = self.recording.as_ref().ok_or(OutputError::RecordingDisabled)?;
        // The thread starts outside the lock the clock takes every tick.
        if lock(&self.recordings).contains_key(&room.key) {
            return Err(OutputError::RecordingActive(room.id.clone()));
        }
        let started = SystemTime::now();
        let done = Arc::new(AtomicBool::new(false));
        let counted = Arc::new(AtomicU64::new(0));
        let on_finish = {
            let (room, done, counted, webhooks, node) =
                (room.clone(), done.clone(), counted.clone(), self.webhooks.clone(), self.node());
            Box::new(move |f: &RecordingFinished| {
                finished(&room, f, &done, &counted, webhooks.as_deref(), node.as_deref());
            })
        };
        let stereo = StereoTap::on(room, stereo.unwrap_or(self.stereo.recording));
        let channels = if stereo.is_some() { 2 } else { 1 };
        let mix_cfg = RecordingConfig { channels, ..cfg.clone() };
        let recorder = Recorder::start(&room.id, started, &mix_cfg, Some(on_finish))
            .map_err(|e| OutputError::Internal(e.to_string()))?;
        let file = recorder.path().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let mut recs = lock(&self.recordings);
        if recs.contains_key(&room.key) {
            // Another request won the race: this one's file is closed at once (its writer sees the stop).
            recorder.stop();
            return Err(OutputError::RecordingActive(room.id.clone()));
        }
        room.publish(RoomEvent::RecordingStarted { file: file.clone() });
        tracing::info!(room = %room.id, path = %recorder.path().display(), "recording started");
        let tracks = match per_speaker {
            PerSpeaker::Off => None,
            PerSpeaker::All | PerSpeaker::Only(_) => {
                let only = match per_speaker {
                    PerSpeaker::Only(ids) => Some(ids),
                    _ => None,
                };
                Some(tracks::Tracks::start(room, cfg, started, only, self.track_finish(room), self.timeline(None)))
            }
        };
        let rec = Recording {
            room: room.clone(),
            recorder,
            file,
            started,
            done,
            counted,
            first_tick: AtomicU64::new(u64::MAX),
            tracks,
            stereo,
        };
        let state = rec.state();
        recs.insert(room.key, rec);
        self.active.fetch_add(1, Ordering::Relaxed);
        m::recordings_active(recs.len());
        Ok(state)
    }

    /// What makes each speaker's file tell the room and the webhooks when it closes, as the mix's does.
    fn track_finish(&self, room: &Arc<Room>) -> tracks::FinishFor {
        let (room, webhooks, node) = (room.clone(), self.webhooks.clone(), self.node());
        Arc::new(move || {
            let (room, webhooks, node) = (room.clone(), webhooks.clone(), node.clone());
            let (done, counted) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
            Box::new(move |f: &RecordingFinished| {
                finished(&room, f, &done, &counted, webhooks.as_deref(), node.as_deref());
            })
        })
    }

    /// The timeline of `room`'s per-speaker recording, if one runs here.
    pub(crate) fn speakers_timeline(&self, room: &Room) -> Option<SpeakersTimeline> {
        let recs = lock(&self.recordings);
        let rec = recs.get(&room.key)?;
        let (zero_tick, only) = rec.tracks.as_ref()?.timeline();
        let started_ms = rec.started.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
        Some(SpeakersTimeline { started_ms, zero_tick, only })
    }

    /// Records this node's speakers of `room` on the timeline of a
    /// per-speaker recording another node of the spread room started (the
    /// same file names and zero tick, this node's own directory, quotas,
    /// events and webhooks), on the current tokio runtime.
    pub(crate) fn start_speakers_here(&self, room: &Arc<Room>, at: &SpeakersTimeline) -> Result<(), OutputError> {
        let cfg = self.recording.as_ref().ok_or(OutputError::RecordingDisabled)?;
        let mut here = lock(&self.node_tracks);
        if here.contains_key(&room.key) {
            // Told again (another node joined the room): recording already.
            return Ok(());
        }
        if lock(&self.recordings).contains_key(&room.key) {
            return Err(OutputError::RecordingActive(room.id.clone()));
        }
        let started = UNIX_EPOCH + Duration::from_millis(at.started_ms);
        let only = at.only.as_ref().map(|o| o.iter().copied().collect());
        let timeline = self.timeline(Some(at.zero_tick));
        let tracks = tracks::Tracks::start(room, cfg, started, only, self.track_finish(room), timeline);
        here.insert(room.key, tracks);
        tracing::info!(room = %room.id, zero_tick = at.zero_tick, "recording this node's speakers for another node's recording");
        Ok(())
    }

    /// Ends [`Outputs::start_speakers_here`]'s recording of `room`: the
    /// caller stops it ([`tracks::Tracks::stop`], which writes this node's
    /// sidecar) off the async threads.
    pub(crate) fn stop_speakers_here(&self, room: &Room) -> Option<Arc<tracks::Tracks>> {
        lock(&self.node_tracks).remove(&room.key)
    }

    /// Stops recording `room`: the caller waits for the writer with
    /// [`Recording::recorder`] (`outcome`), off the media threads.
    pub(crate) fn stop_recording(&self, room: &Room) -> Result<Recording, OutputError> {
        let mut recs = lock(&self.recordings);
        let rec = recs.remove(&room.key).ok_or_else(|| OutputError::RecordingNotFound(room.id.clone()))?;
        self.active.fetch_sub(1, Ordering::Relaxed);
        m::recordings_active(recs.len());
        drop(recs);
        rec.recorder.stop();
        Ok(rec)
    }

    /// The state of `room`'s recording, if it has one.
    /// Without one, the speakers' files this node records for another node's recording.
    pub(crate) fn recording_state(&self, room: &Room) -> Option<serde_json::Value> {
        if let Some(state) = lock(&self.recordings).get(&room.key).map(Recording::state) {
            return Some(state);
        }
        lock(&self.node_tracks)
            .get(&room.key)
            .map(|t| serde_json::json!({ "active": true, "file": null, "node": self.node(), "tracks": t.state() }))
    }

    /// Starts forwarding `room`'s mix to `dest` (which the allow-list must
    /// contain); `stereo` (default `[rtp_out] stereo`): a spatial room's mix
    /// as stereo Opus.
    pub(crate) fn start_rtp_out(
        &self,
        room: &Arc<Room>,
        dest: SocketAddr,
        stereo: Option<bool>,
    ) -> Result<serde_json::Value, OutputError> {
        if self.networks.is_empty() {
            return Err(OutputError::RtpOutDisabled);
        }
        if !self.networks.iter().any(|n| n.contains(dest.ip())) {
            return Err(OutputError::RtpOutForbidden(dest));
        }
        // The socket is opened outside the lock the clock takes every tick.
        if lock(&self.forwarders).contains_key(&room.key) {
            return Err(OutputError::RtpOutActive(room.id.clone()));
        }
        let stereo = StereoTap::on(room, stereo.unwrap_or(self.stereo.rtp_out));
        let rtp = RtpOutConfig { stereo: stereo.is_some(), ..RtpOutConfig::new(dest) };
        let fwd = RtpForwarder::new(rtp).map_err(|e| match e {
            crate::outputs::rtp_out::RtpOutError::Socket(e) => {
                OutputError::Internal(format!("cannot open a socket: {e}"))
            }
            e => OutputError::BadValue(e.to_string()),
        })?;
        let sdp = fwd.sdp(&format!("tutti room {}", room.id));
        tracing::info!(room = %room.id, %dest, ssrc = fwd.ssrc(), "rtp_out started");
        let f = Forward { room: room.clone(), fwd, dest, sdp, counted: (0, 0), stereo };
        let state = f.state();
        let mut fwds = lock(&self.forwarders);
        if fwds.contains_key(&room.key) {
            return Err(OutputError::RtpOutActive(room.id.clone()));
        }
        fwds.insert(room.key, f);
        self.active.fetch_add(1, Ordering::Relaxed);
        m::rtp_out_active(fwds.len());
        Ok(state)
    }

    /// Stops forwarding `room`'s mix; returns what was sent.
    pub(crate) fn stop_rtp_out(&self, room: &Room) -> Result<serde_json::Value, OutputError> {
        let mut fwds = lock(&self.forwarders);
        let mut f = fwds.remove(&room.key).ok_or_else(|| OutputError::RtpOutNotFound(room.id.clone()))?;
        self.active.fetch_sub(1, Ordering::Relaxed);
        m::rtp_out_active(fwds.len());
        drop(fwds);
        count_rtp(&mut f);
        tracing::info!(room = %room.id, dest = %f.dest, "rtp_out stopped");
        Ok(f.state())
    }

    /// The state of `room`'s forwarder, if it has one.
    pub(crate) fn rtp_out_state(&self, room: &Room) -> Option<serde_json::Value> {
        lock(&self.forwarders).get(&room.key).map(Forward::state)
    }

    /// Every 250 ms until `stop`: outputs of deleted rooms end, counters
    /// reach the metrics, new rooms get a webhook watcher.
    pub(crate) async fn housekeeping(self: Arc<Self>, rooms: Arc<Rooms>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut every = tokio::time::interval(HOUSEKEEPING);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = every.tick() => self.tidy(&rooms),
                _ = stop.wait_for(|s| *s) => break,
            }
        }
    }

    fn tidy(self: &Arc<Self>, rooms: &Rooms) {
        let mut ended = Vec::new();
        let mut finished_tracks = Vec::new();
        {
            let mut recs = lock(&self.recordings);
            let before = recs.len();
            for r in recs.values() {
                count_bytes(&r.counted, r.recorder.stats().bytes);
            }
            // The ended ones stop; their speakers' files close with them (the sidecar written off this task).
            for (_, r) in recs.extract_if(|_, r| r.room.is_closed() || r.done.load(Ordering::Relaxed)) {
                r.recorder.stop();
                if r.tracks.is_some() {
                    finished_tracks.push(r);
                }
            }
            if recs.len() != before {
                self.active.fetch_sub(before - recs.len(), Ordering::Relaxed);
                m::recordings_active(recs.len());
            }
        }
        {
            let mut fwds = lock(&self.forwarders);
            let before = fwds.len();
            for f in fwds.values_mut() {
                count_rtp(f);
            }
            fwds.retain(|_, f| {
                let keep = !f.room.is_closed();
                if !keep {
                    ended.push((f.room.id.clone(), f.dest));
                }
                keep
            });
            if fwds.len() != before {
                self.active.fetch_sub(before - fwds.len(), Ordering::Relaxed);
                m::rtp_out_active(fwds.len());
            }
        }
        for (room, dest) in ended {
            tracing::info!(%room, %dest, "rtp_out ended with its room");
        }
        // Another node's recording of a room closed here: this node's files close, its sidecar is written.
        let ended_here: Vec<Arc<tracks::Tracks>> =
            lock(&self.node_tracks).extract_if(|_, t| t.room_closed()).map(|(_, t)| t).collect();
        if !finished_tracks.is_empty() || !ended_here.is_empty() {
            tokio::task::spawn_blocking(move || {
                for r in &finished_tracks {
                    r.finish_tracks();
                }
                for t in &ended_here {
                    t.stop(None);
                }
            });
        }
        m::recording_dropped_frames(self.dropped.load(Ordering::Relaxed));
        if let Some(w) = &self.webhooks {
            let s = w.stats();
            m::webhooks(s.sent, s.failed, s.dropped, s.retried);
            for room in rooms.all() {
                self.watch(&room);
            }
        }
    }

    /// Starts the webhook watcher of `room` (once; nothing without webhooks).
    /// The API calls it as a room is created; housekeeping catches the rest.
    pub(crate) fn watch(self: &Arc<Self>, room: &Arc<Room>) {
        let Some(w) = &self.webhooks else { return };
        if room.is_closed() || !lock(&self.watched).insert(room.key) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        self.spawn_watcher(&runtime, room, w);
    }

    fn unwatch(&self, key: RoomKey) {
        lock(&self.watched).remove(&key);
    }

    /// Stops every recording and waits (up to `timeout`, off the async
    /// threads) for their files to be closed; then gives the webhooks up to
    /// `webhooks_timeout` to deliver what is queued, the shutdown's own
    /// `participant_left`, `recording_finished` and `room_finished`
    /// included. For shutdown, after the rooms were closed.
    pub(crate) async fn shutdown(&self, timeout: Duration, webhooks_timeout: Duration) {
        let recs: Vec<Recording> = lock(&self.recordings).drain().map(|(_, r)| r).collect();
        let here: Vec<Arc<tracks::Tracks>> = lock(&self.node_tracks).drain().map(|(_, t)| t).collect();
        lock(&self.forwarders).clear();
        self.active.store(0, Ordering::Relaxed);
        if !here.is_empty() {
            let _ = tokio::task::spawn_blocking(move || {
                for t in &here {
                    t.stop(None);
                    t.wait(timeout);
                }
            })
            .await;
        }
        if !recs.is_empty() {
            for r in &recs {
                r.recorder.stop();
            }
            let _ = tokio::task::spawn_blocking(move || {
                let deadline = std::time::Instant::now() + timeout;
                for r in &recs {
                    r.finish_tracks();
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    let _ = r.recorder.stop_and_wait(left);
                    if let Some(t) = &r.tracks {
                        t.wait(deadline.saturating_duration_since(std::time::Instant::now()));
                    }
                }
            })
            .await;
        }
        let Some(w) = &self.webhooks else { return };
        // The rooms' watchers send room_finished and end; then the queues empty.
        let deadline = tokio::time::Instant::now() + webhooks_timeout;
        while (!lock(&self.watched).is_empty() || w.pending() > 0) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        match w.pending() {
            0 => {}
            left => tracing::warn!(events = left, "shutting down: webhook events not delivered in time are given up"),
        }
    }
}

/// Counts `now` bytes of a recording in the metric, once.
fn count_bytes(counted: &AtomicU64, now: u64) {
    let before = counted.fetch_max(now, Ordering::Relaxed);
    if now > before {
        m::recording_bytes(now - before);
    }
}

fn count_rtp(f: &mut Forward) {
    let s = f.fwd.stats();
    m::rtp_out(s.packets.saturating_sub(f.counted.0), s.failed.saturating_sub(f.counted.1));
    f.counted = (s.packets, s.failed);
}

/// A recording's file is closed (on its writer thread): the room hears it,
/// the webhooks are told, the metrics count it.
fn finished(
    room: &Room,
    f: &RecordingFinished,
    done: &AtomicBool,
    counted: &AtomicU64,
    webhooks: Option<&WebhookSender>,
    node: Option<&str>,
) {
    let file = f.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let reason = f.reason.code();
    if !matches!(f.reason, StopReason::Stopped) {
        let error = match &f.reason {
            StopReason::Error(e) => Some(e.clone()),
            _ => None,
        };
        room.publish(RoomEvent::RecordingStopped { file: file.clone(), reason, error });
    }
    room.publish(RoomEvent::RecordingFinished {
        file,
        bytes: f.bytes,
        duration_seconds: f.duration.as_secs_f64(),
        reason,
        node: node.map(str::to_owned),
    });
    count_bytes(counted, f.bytes);
    m::recording_finished(reason);
    if let Some(w) = webhooks {
        let mut recording: webhook::RecordingInfo = f.into();
        recording.node = node.map(str::to_owned);
        w.send(&WebhookEvent::RecordingFinished { room: f.room.clone(), recording });
    }
    done.store(true, Ordering::Relaxed);
}
