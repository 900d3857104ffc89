//! Recording a room: the listener stream's Opus frames into an Ogg/Opus
//! file, written by a thread of its own so the mixer never waits on disk.
//!
//! ```text
//! mix-clock (per tick) ── Recorder::push(tick, frame) ── try_send ──► bounded queue
//!                                                                       │
//!                     writer thread ◄───────────────────────────────────┘
//!                     gap fill (PLC packets) ─► OggOpusWriter ─► BufWriter<File>
//!                     limit / error / stop ─► EOS page ─► RecordingFinished (outcome + callback)
//! ```
//!
//! * `push` never blocks: a full queue drops the frame and counts it
//!   ([`RecorderStats::dropped`]); after the writer has finished, pushes are
//!   refused ([`PushOutcome::Finished`]).
//! * Granule positions count 48 kHz samples. The caller passes each frame
//!   with its mixer tick (20 ms); ticks with no frame (DTX, nobody talking,
//!   frames dropped on a full queue) are filled with one-byte
//!   packet-loss-concealment packets (RFC 7845 §4.1), so the file's
//!   timeline stays the room's timeline. A frame whose tick is not after
//!   the previous one is dropped ([`RecorderStats::out_of_order`]).
//!   Frames from different encoders (the room's listener encoder being
//!   replaced, a speaker change) need nothing special: an Opus decoder
//!   takes any packet sequence.
//! * Limits: a file stops before it would exceed `max_bytes` (the EOS page
//!   included) or `max_duration`, with [`StopReason::SizeLimit`] /
//!   [`StopReason::DurationLimit`], and before the directory would hold more
//!   than `dir_max_bytes` (every file in it counted, rescanned every second
//!   so that recordings running side by side see each other), with
//!   [`StopReason::Quota`]. Errors (directory missing or
//!   unwritable, disk full) stop it with [`StopReason::Error`]; nothing
//!   panics and the caller is never blocked.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use super::ogg::{OggOpusWriter, OpusHead, opus_packet_samples, plc_packet};

/// Samples per mixer tick (20 ms at 48 kHz).
pub const TICK_SAMPLES: u32 = 960;
/// How often the writer looks at the stop flag while its queue is empty.
const POLL: Duration = Duration::from_millis(50);

/// How recordings are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordingConfig {
    /// Directory the files go to (created if missing).
    pub dir: PathBuf,
    /// Largest file, in bytes (the recording stops before exceeding it).
    pub max_bytes: u64,
    /// Most bytes the directory may hold, all files counted; 0 = no quota.
    pub dir_max_bytes: u64,
    /// Longest file (the recording stops when it is reached).
    pub max_duration: Duration,
    /// Frames the queue to the writer holds (50 = 1 s).
    pub queue_frames: usize,
    /// Channels of the stream (1 or 2), for `OpusHead`.
    pub channels: u8,
    /// Samples the player skips at the start (the encoder's lookahead; 312 for libopus).
    pub pre_skip: u16,
}

impl Default for RecordingConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("recordings"),
            max_bytes: 512 * 1024 * 1024,
            dir_max_bytes: 0,
            max_duration: Duration::from_secs(4 * 3600),
            queue_frames: 500,
            channels: 1,
            pre_skip: 312,
        }
    }
}

impl RecordingConfig {
    /// Checks the values (not the directory: that is the writer's job, and its failure an outcome).
    pub fn validate(&self) -> Result<(), RecordingError> {
        if self.dir.as_os_str().is_empty() {
            return Err(RecordingError::Config("recording.dir is empty"));
        }
        if self.max_bytes < 4096 {
            return Err(RecordingError::Config("recording.max_bytes is below 4096"));
        }
        if self.max_duration < Duration::from_secs(1) {
            return Err(RecordingError::Config("recording.max_duration is below 1 s"));
        }
        if !(1..=65_536).contains(&self.queue_frames) {
            return Err(RecordingError::Config("recording.queue_frames is outside 1..=65536"));
        }
        if !(1..=2).contains(&self.channels) {
            return Err(RecordingError::Config("recording.channels is 1 or 2"));
        }
        Ok(())
    }
}

/// Why a recording could not start.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    /// A configuration value is out of range.
    #[error("invalid recording config: {0}")]
    Config(&'static str),
    /// The writer thread could not be started.
    #[error("cannot start the recording thread: {0}")]
    Thread(std::io::Error),
}

/// Why a recording ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// The caller stopped it (or dropped the [`Recorder`]).
    Stopped,
    /// The next frame would have made the file larger than `max_bytes`.
    SizeLimit,
    /// The file reached `max_duration`.
    DurationLimit,
    /// The next frame would have made the directory hold more than `dir_max_bytes`.
    Quota,
    /// The file could not be created or written (the message says why).
    Error(String),
}

impl StopReason {
    /// A stable code for APIs, events and metric labels: `stopped`, `limit`, `quota` or `error`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Stopped => "stopped",
            Self::SizeLimit | Self::DurationLimit => "limit",
            Self::Quota => "quota",
            Self::Error(_) => "error",
        }
    }
}

/// What a finished recording left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordingFinished {
    /// The room recorded.
    pub room: String,
    /// The file (it may be absent or partial when `reason` is an error).
    pub path: PathBuf,
    /// Bytes in the file.
    pub bytes: u64,
    /// Playable audio in the file.
    pub duration: Duration,
    /// Why it ended.
    pub reason: StopReason,
}

/// What [`Recorder::push`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushOutcome {
    /// Queued for the writer.
    Queued,
    /// The queue was full: dropped and counted (the gap is filled with concealment).
    Dropped,
    /// The recording has finished; the frame was not taken.
    Finished,
}

/// Counters of one recording (for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecorderStats {
    /// Frames written as audio.
    pub frames: u64,
    /// Concealment packets written for ticks without a frame.
    pub gap_frames: u64,
    /// Frames dropped because the queue was full.
    pub dropped: u64,
    /// Frames dropped because their tick was not after the previous frame's.
    pub out_of_order: u64,
    /// Frames dropped because they are not one 20 ms Opus packet.
    pub invalid: u64,
    /// Bytes written to the file.
    pub bytes: u64,
}

#[derive(Default)]
struct Counters {
    frames: AtomicU64,
    gap_frames: AtomicU64,
    dropped: AtomicU64,
    out_of_order: AtomicU64,
    invalid: AtomicU64,
    bytes: AtomicU64,
}

/// What runs on the writer thread once the file is closed.
pub type OnFinish = Box<dyn FnOnce(&RecordingFinished) + Send>;

struct Shared {
    stop: AtomicBool,
    counters: Counters,
    outcome: Mutex<Option<RecordingFinished>>,
}

/// One recording in progress: a handle the mixer pushes frames into.
/// Dropping it stops the recording (the writer finishes the file).
pub struct Recorder {
    tx: SyncSender<(u64, Bytes)>,
    shared: Arc<Shared>,
    path: PathBuf,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("path", &self.path).finish_non_exhaustive()
    }
}

impl Recorder {
    /// Starts recording `room` into `cfg.dir`, in a file named after the
    /// room and `started` (`<room>-<YYYYMMDD>T<HHMMSS>Z.opus`, UTC). The
    /// file is opened by the writer thread: a directory that cannot be
    /// written ends the recording at once with [`StopReason::Error`] (see
    /// [`Recorder::outcome`]); this call itself does no disk I/O.
    /// `on_finish` runs on the writer thread once, when the file is closed.
    pub fn start(
        room: &str,
        started: SystemTime,
        cfg: &RecordingConfig,
        on_finish: Option<OnFinish>,
    ) -> Result<Self, RecordingError> {
        Self::start_as(room, &file_name(room, started), cfg, on_finish)
    }

    /// As [`Recorder::start`], into the file named `file` (in `cfg.dir`): a
    /// speaker's track of a room recording.
    pub fn start_as(
        room: &str,
        file: &str,
        cfg: &RecordingConfig,
        on_finish: Option<OnFinish>,
    ) -> Result<Self, RecordingError> {
        cfg.validate()?;
        let path = cfg.dir.join(file);
        let (tx, rx) = std::sync::mpsc::sync_channel(cfg.queue_frames);
        let shared =
            Arc::new(Shared { stop: AtomicBool::new(false), counters: Counters::default(), outcome: Mutex::new(None) });
        let job = Job { room: room.to_owned(), path: path.clone(), cfg: cfg.clone(), shared: Arc::clone(&shared) };
        std::thread::Builder::new()
            .name("recorder".into())
            .spawn(move || job.run(rx, on_finish))
            .map_err(RecordingError::Thread)?;
        Ok(Self { tx, shared, path })
    }

    /// Hands the writer the room's listener frame of mixer tick `tick`.
    /// Never blocks.
    pub fn push(&self, tick: u64, frame: Bytes) -> PushOutcome {
        match self.tx.try_send((tick, frame)) {
            Ok(()) => PushOutcome::Queued,
            Err(TrySendError::Full(_)) => {
                self.shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
                PushOutcome::Dropped
            }
            Err(TrySendError::Disconnected(_)) => PushOutcome::Finished,
        }
    }

    /// Asks the writer to write what is queued, close the file and finish. Never blocks.
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Relaxed);
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How it ended, once it has (`None` while it runs).
    pub fn outcome(&self) -> Option<RecordingFinished> {
        self.shared.outcome.lock().map(|o| o.clone()).unwrap_or(None)
    }

    /// Its counters.
    pub fn stats(&self) -> RecorderStats {
        let c = &self.shared.counters;
        RecorderStats {
            frames: c.frames.load(Ordering::Relaxed),
            gap_frames: c.gap_frames.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            out_of_order: c.out_of_order.load(Ordering::Relaxed),
            invalid: c.invalid.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
        }
    }

    /// Stops and waits up to `timeout` for the outcome (for shutdown and
    /// tests; blocks the calling thread, so not for the mixer or the API).
    pub fn stop_and_wait(&self, timeout: Duration) -> Option<RecordingFinished> {
        self.stop();
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(o) = self.outcome() {
                return Some(o);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// The writer thread's state.
struct Job {
    room: String,
    path: PathBuf,
    cfg: RecordingConfig,
    shared: Arc<Shared>,
}

impl Job {
    fn run(self, rx: Receiver<(u64, Bytes)>, on_finish: Option<OnFinish>) {
        let (bytes, samples, reason) = match self.open() {
            Ok(file) => {
                let mut sink = Sink::new(file, &self.cfg, &self.shared.counters);
                if self.cfg.dir_max_bytes > 0 {
                    sink.quota = Some(Quota::new(self.cfg.dir.clone(), self.cfg.dir_max_bytes, &self.path));
                }
                let reason = sink.run(&rx, &self.shared.stop, &self.cfg);
                (sink.bytes(), sink.playable_samples(), reason)
            }
            Err(e) => (0, 0, StopReason::Error(e)),
        };
        drop(rx); // pushes from now on see Finished
        let finished = RecordingFinished {
            room: self.room,
            path: self.path,
            bytes,
            duration: Duration::from_micros(samples * 1_000_000 / 48_000),
            reason,
        };
        match &finished.reason {
            StopReason::Error(e) => {
                tracing::warn!(room = %finished.room, path = %finished.path.display(), error = %e, "recording failed")
            }
            r => {
                tracing::info!(room = %finished.room, path = %finished.path.display(), bytes, reason = r.code(), "recording finished")
            }
        }
        if let Some(f) = on_finish {
            f(&finished);
        }
        if let Ok(mut o) = self.shared.outcome.lock() {
            *o = Some(finished);
        }
    }

    fn open(&self) -> Result<OggOpusWriter<BufWriter<File>>, String> {
        // The messages name the file, never the directory: they reach the
        // room's participants (`recording_stopped`); the log has the path.
        let name = self.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        std::fs::create_dir_all(&self.cfg.dir).map_err(|e| {
            tracing::warn!(dir = %self.cfg.dir.display(), error = %e, "cannot create the recordings directory");
            format!("cannot create directory for recordings: {}", e.kind())
        })?;
        let file = OpenOptions::new().write(true).create_new(true).open(&self.path).map_err(|e| {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot create a recording file");
            format!("cannot create {name}: {}", e.kind())
        })?;
        let head = OpusHead { channels: self.cfg.channels, pre_skip: self.cfg.pre_skip, input_rate: 48_000 };
        let serial = random_u32();
        let comments = [format!("ROOM={}", self.room)];
        OggOpusWriter::new(BufWriter::with_capacity(64 * 1024, file), serial, head, "tutti", &comments)
            .map_err(|e| format!("cannot write {name}: {}", e.kind()))
    }
}

/// Most directory entries looked at when measuring a directory.
const MAX_DIR_ENTRIES: usize = 100_000;
/// How often a running recording measures its directory again.
const QUOTA_RESCAN: Duration = Duration::from_secs(1);

/// Bytes the regular files directly in `dir` hold (at most
/// [`MAX_DIR_ENTRIES`] entries looked at); 0 for a directory that does not
/// exist yet. Blocking disk I/O: for the writer thread or `spawn_blocking`.
pub fn dir_usage(dir: &Path) -> std::io::Result<u64> {
    usage_except(dir, None)
}

/// As [`dir_usage`], leaving out the file named `except` (a recording's
/// own file: what it wrote may still sit in its buffer, not on disk).
fn usage_except(dir: &Path, except: Option<&std::ffi::OsStr>) -> std::io::Result<u64> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut total = 0u64;
    for entry in entries.take(MAX_DIR_ENTRIES).flatten() {
        if except.is_some_and(|name| entry.file_name() == name) {
            continue;
        }
        if let Ok(meta) = entry.metadata()
            && meta.is_file()
        {
            total = total.saturating_add(meta.len());
        }
    }
    Ok(total)
}

/// The directory quota as a running recording sees it: what the other
/// files held at the last measure, and when that was.
struct Quota {
    dir: PathBuf,
    /// The recording's own file name, counted by what it wrote instead.
    own: Option<std::ffi::OsString>,
    max: u64,
    /// Bytes of every other file in the directory at the last measure.
    others: u64,
    measured: std::time::Instant,
}

impl Quota {
    /// The quota of `dir` for the recording writing `own` (its path).
    fn new(dir: PathBuf, max: u64, own: &Path) -> Self {
        let own = own.file_name().map(std::ffi::OsStr::to_os_string);
        let mut q = Self { dir, own, max, others: 0, measured: std::time::Instant::now() };
        q.measure();
        q
    }

    fn measure(&mut self) {
        // Unreadable: keep the last figure (the writes themselves will say if the disk is gone).
        if let Ok(others) = usage_except(&self.dir, self.own.as_deref()) {
            self.others = others;
        }
        self.measured = std::time::Instant::now();
    }

    /// Whether the directory may hold this file at `own_after` bytes.
    fn allows(&mut self, own_after: u64) -> bool {
        if self.measured.elapsed() >= QUOTA_RESCAN {
            self.measure();
        }
        self.others.saturating_add(own_after) <= self.max
    }
}

/// The file side of a recording: limits, gap filling, counters. Generic
/// over the writer so a unit test can make the "disk" fail.
struct Sink<'a, W: Write> {
    ogg: OggOpusWriter<W>,
    next_tick: Option<u64>,
    max_samples: u64,
    max_bytes: u64,
    counters: &'a Counters,
    /// The directory quota, when there is one (and a directory: not in unit tests).
    quota: Option<Quota>,
}

impl<'a, W: Write> Sink<'a, W> {
    fn new(ogg: OggOpusWriter<W>, cfg: &RecordingConfig, counters: &'a Counters) -> Self {
        let max_samples = u64::try_from(cfg.max_duration.as_millis()).unwrap_or(u64::MAX / 48).saturating_mul(48);
        counters.bytes.store(ogg.bytes_written(), Ordering::Relaxed);
        Self { ogg, next_tick: None, max_samples, max_bytes: cfg.max_bytes, counters, quota: None }
    }

    fn bytes(&self) -> u64 {
        self.ogg.bytes_written()
    }

    fn playable_samples(&self) -> u64 {
        self.ogg.playable_samples()
    }

    /// Takes frames until stopped, a limit or an error; then writes the EOS page.
    fn run(&mut self, rx: &Receiver<(u64, Bytes)>, stop: &AtomicBool, cfg: &RecordingConfig) -> StopReason {
        let reason = loop {
            if stop.load(Ordering::Relaxed) {
                // Write what was queued before the stop (bounded by the queue's capacity).
                let mut left = cfg.queue_frames;
                let mut reason = StopReason::Stopped;
                while left > 0 {
                    let Ok((tick, frame)) = rx.try_recv() else { break };
                    if let Err(r) = self.frame(tick, &frame) {
                        reason = r;
                        break;
                    }
                    left -= 1;
                }
                break reason;
            }
            match rx.recv_timeout(POLL) {
                Ok((tick, frame)) => {
                    if let Err(r) = self.frame(tick, &frame) {
                        break r;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break StopReason::Stopped,
            }
        };
        if let StopReason::Error(_) = reason {
            return reason; // the file cannot be written; do not try to finish it
        }
        match self.ogg.finish() {
            Ok(()) => {
                self.counters.bytes.store(self.ogg.bytes_written(), Ordering::Relaxed);
                reason
            }
            Err(e) => StopReason::Error(format!("cannot finish the file: {e}")),
        }
    }

    /// Writes one frame (after concealment for the ticks before it it did not get).
    fn frame(&mut self, tick: u64, frame: &[u8]) -> Result<(), StopReason> {
        if opus_packet_samples(frame) != Some(TICK_SAMPLES) {
            self.counters.invalid.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        if let Some(next) = self.next_tick {
            if tick < next {
                self.counters.out_of_order.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            let toc = self.ogg.last_toc().unwrap_or(frame[0]);
            let plc = plc_packet(toc);
            // Bounded: each turn adds 20 ms, and the duration limit ends the loop.
            for _ in next..tick {
                self.packet(&plc)?;
                self.counters.gap_frames.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.packet(frame)?;
        self.counters.frames.fetch_add(1, Ordering::Relaxed);
        self.next_tick = Some(tick + 1);
        Ok(())
    }

    fn packet(&mut self, packet: &[u8]) -> Result<(), StopReason> {
        if self.ogg.playable_samples() + u64::from(TICK_SAMPLES) > self.max_samples {
            return Err(StopReason::DurationLimit);
        }
        let after = self.ogg.size_if_finished_after(packet.len());
        if after > self.max_bytes {
            return Err(StopReason::SizeLimit);
        }
        if let Some(q) = &mut self.quota
            && !q.allows(after)
        {
            return Err(StopReason::Quota);
        }
        self.ogg.push_packet(packet, TICK_SAMPLES).map_err(|e| StopReason::Error(format!("write failed: {e}")))?;
        self.counters.bytes.store(self.ogg.bytes_written(), Ordering::Relaxed);
        Ok(())
    }
}

/// `<room>-<YYYYMMDD>T<HHMMSS>Z.opus`; characters other than ASCII letters,
/// digits, `-` and `_` in the room become `_` (at most 64 kept).
pub fn file_name(room: &str, started: SystemTime) -> String {
    let safe: String = room
        .chars()
        .take(64)
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .collect();
    let secs = started.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let s = secs % 86_400;
    format!("{safe}-{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z.opus", s / 3600, s / 60 % 60, s % 60)
}

/// Days since 1970-01-01 to a (year, month, day) of the proleptic Gregorian calendar (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    // Without the OS's randomness the serial is merely less unique; the file is still valid.
    let _ = getrandom::fill(&mut b);
    u32::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A "disk" that takes `room` bytes and then answers ENOSPC.
    struct Full {
        room: usize,
    }

    impl Write for Full {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.room == 0 {
                return Err(std::io::Error::from_raw_os_error(28)); // ENOSPC
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn file_names_carry_room_and_utc_time() {
        let t = UNIX_EPOCH + Duration::from_secs(1_767_225_600 + 3_723); // 2026-01-01 01:02:03 UTC
        assert_eq!(file_name("demo", t), "demo-20260101T010203Z.opus");
        assert_eq!(file_name("a/../b", UNIX_EPOCH), "a____b-19700101T000000Z.opus");
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn a_full_disk_stops_the_recording_with_an_error() {
        let cfg = RecordingConfig::default();
        let counters = Counters::default();
        let head = OpusHead { channels: 1, pre_skip: 312, input_rate: 48_000 };
        let ogg = OggOpusWriter::new(Full { room: 2_000 }, 1, head, "t", &[]).expect("headers fit in 2,000 bytes");
        let mut sink = Sink::new(ogg, &cfg, &counters);
        let (tx, rx) = std::sync::mpsc::sync_channel(200);
        for tick in 0..200u64 {
            tx.try_send((tick, Bytes::from(vec![0xF8; 80]))).expect("the queue holds 200");
        }
        drop(tx);
        let reason = sink.run(&rx, &AtomicBool::new(false), &cfg);
        let StopReason::Error(msg) = reason else { panic!("expected an error, got {reason:?}") };
        assert!(msg.contains("write failed"), "{msg}");
        assert!(counters.frames.load(Ordering::Relaxed) < 200);
    }

    #[test]
    fn the_directory_quota_stops_a_recording_and_counts_other_files() {
        let dir = std::env::temp_dir().join(format!("tutti-quota-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("old.opus"), vec![0u8; 3_000]).expect("an old recording");
        assert_eq!(dir_usage(&dir).expect("readable"), 3_000);
        assert_eq!(dir_usage(&dir.join("missing")).expect("missing is empty"), 0);
        let cfg = RecordingConfig { dir_max_bytes: 6_000, ..RecordingConfig::default() };
        let counters = Counters::default();
        let head = OpusHead { channels: 1, pre_skip: 0, input_rate: 48_000 };
        let ogg = OggOpusWriter::new(Vec::new(), 1, head, "t", &[]).expect("a Vec accepts");
        let mut sink = Sink::new(ogg, &cfg, &counters);
        sink.quota = Some(Quota::new(dir.clone(), cfg.dir_max_bytes, &dir.join("new.opus")));
        let mut reason = None;
        for tick in 0..1_000u64 {
            if let Err(r) = sink.frame(tick, &[0xF8; 80]) {
                reason = Some(r);
                break;
            }
        }
        assert_eq!(reason, Some(StopReason::Quota));
        assert_eq!(StopReason::Quota.code(), "quota");
        let size = sink.ogg.size_if_finished_after(0);
        assert!(size + 3_000 <= 6_000, "the quota held: the file would be {size} bytes");
        assert!(size > 2_000, "it stopped near the quota, not at once: {size}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn gaps_are_filled_and_late_frames_dropped() {
        let cfg = RecordingConfig::default();
        let counters = Counters::default();
        let head = OpusHead { channels: 1, pre_skip: 0, input_rate: 48_000 };
        let ogg = OggOpusWriter::new(Vec::new(), 1, head, "t", &[]).expect("a Vec accepts");
        let mut sink = Sink::new(ogg, &cfg, &counters);
        for tick in [10u64, 11, 15, 14, 16] {
            sink.frame(tick, &[0xF8, 1, 2]).expect("within limits");
        }
        sink.frame(17, &[0xF9]).expect("an invalid frame is counted, not an error"); // code 1 with no data: two frames
        assert_eq!(counters.frames.load(Ordering::Relaxed), 4);
        assert_eq!(counters.gap_frames.load(Ordering::Relaxed), 3);
        assert_eq!(counters.out_of_order.load(Ordering::Relaxed), 1);
        assert_eq!(counters.invalid.load(Ordering::Relaxed), 1);
        assert_eq!(sink.playable_samples(), 7 * 960);
    }
}
