//! Metrics of recordings, RTP out and webhooks. These change on events or
//! in the outputs' 250 ms housekeeping, never per packet, so they go
//! through the `metrics` macros (a registry lookup each) rather than
//! handles made at install; before [`super::install`] they cost nothing.

/// Rooms being recorded now.
pub const RECORDINGS_ACTIVE: &str = "tutti_recordings_active";
/// Bytes written to recording files.
pub const RECORDING_BYTES: &str = "tutti_recording_bytes_total";
/// Listener frames a recording's queue refused (concealed in the file).
pub const RECORDING_DROPPED_FRAMES: &str = "tutti_recording_dropped_frames_total";
/// Recordings ended, by reason: `stopped`, `limit`, `quota`, `error` (disk full, directory not writable).
pub const RECORDINGS_FINISHED: &str = "tutti_recordings_finished_total";
/// Recording starts refused because the recordings directory is at `recording.dir_max_bytes`.
pub const RECORDING_QUOTA_REFUSALS: &str = "tutti_recording_quota_refusals_total";
/// Rooms forwarding their mix as RTP now.
pub const RTP_OUT_ACTIVE: &str = "tutti_rtp_out_streams";
/// RTP packets forwarded.
pub const RTP_OUT_PACKETS: &str = "tutti_rtp_out_packets_total";
/// RTP sends that failed (the packet is lost).
pub const RTP_OUT_FAILED: &str = "tutti_rtp_out_failed_total";
/// Webhook deliveries by result: `sent` (2xx), `failed` (after every attempt), `dropped` (queue full), `retried`.
pub const WEBHOOK_DELIVERIES: &str = "tutti_webhook_deliveries_total";
/// Room event batches a webhook watcher lost by falling behind.
pub const WEBHOOK_EVENTS_LOST: &str = "tutti_webhook_events_lost_total";
/// Speaker feed frames by result: `sent` (frames), `dropped` (ticks lost by a feed too slow to read them).
pub const SPEAKER_FEED_FRAMES: &str = "tutti_speaker_feed_frames_total";

/// Files started playing into rooms, by purpose: `announcement`, `enter`, `leave`, `hold`.
pub const PLAYBACKS_STARTED: &str = "tutti_playbacks_started_total";
/// Room sounds not played, by purpose: the room played `playback.max_per_room` files, or an enter or leave sound, already.
pub const PLAYBACK_SOUNDS_SKIPPED: &str = "tutti_playback_sounds_skipped_total";

/// Whisper channels open, over all rooms.
pub const WHISPER_CHANNELS: &str = "tutti_whisper_channels";
/// Whisper channels' "room + channel" mixes encoded (one per channel whose speaker talks, per tick).
pub const WHISPER_ENCODES: &str = "tutti_whisper_encodes_total";

/// Every name above.
pub const NAMES: &[&str] = &[
    RECORDINGS_ACTIVE,
    RECORDING_BYTES,
    RECORDING_DROPPED_FRAMES,
    RECORDINGS_FINISHED,
    RECORDING_QUOTA_REFUSALS,
    RTP_OUT_ACTIVE,
    RTP_OUT_PACKETS,
    RTP_OUT_FAILED,
    WEBHOOK_DELIVERIES,
    WEBHOOK_EVENTS_LOST,
    SPEAKER_FEED_FRAMES,
    PLAYBACKS_STARTED,
    PLAYBACK_SOUNDS_SKIPPED,
    WHISPER_CHANNELS,
    WHISPER_ENCODES,
];

/// Help text.
pub(super) fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge};
    describe_gauge!(RECORDINGS_ACTIVE, Unit::Count, "Rooms being recorded.");
    describe_counter!(RECORDING_BYTES, Unit::Bytes, "Bytes written to recording files.");
    describe_counter!(RECORDING_DROPPED_FRAMES, Unit::Count, "Frames a recording's full queue refused (concealed).");
    describe_counter!(RECORDINGS_FINISHED, Unit::Count, "Recordings ended, by reason: stopped, limit, quota, error.");
    describe_counter!(
        RECORDING_QUOTA_REFUSALS,
        Unit::Count,
        "Recording starts refused: the recordings directory is at its quota."
    );
    describe_gauge!(RTP_OUT_ACTIVE, Unit::Count, "Rooms forwarding their mix as plain RTP.");
    describe_counter!(RTP_OUT_PACKETS, Unit::Count, "RTP packets forwarded.");
    describe_counter!(RTP_OUT_FAILED, Unit::Count, "RTP out sends that failed.");
    describe_counter!(WEBHOOK_DELIVERIES, Unit::Count, "Webhook deliveries by result: sent, failed, dropped, retried.");
    describe_counter!(WEBHOOK_EVENTS_LOST, Unit::Count, "Room event batches a webhook watcher lost by falling behind.");
    describe_counter!(
        SPEAKER_FEED_FRAMES,
        Unit::Count,
        "Speaker feed frames sent, and ticks dropped for feeds too slow to read them."
    );
    describe_counter!(PLAYBACKS_STARTED, Unit::Count, "Files started playing into rooms, by purpose.");
    describe_gauge!(WHISPER_CHANNELS, Unit::Count, "Whisper channels open.");
    describe_counter!(WHISPER_ENCODES, Unit::Count, "Whisper channels' room + channel mixes encoded.");
    describe_counter!(
        PLAYBACK_SOUNDS_SKIPPED,
        Unit::Count,
        "Enter, leave and hold sounds not played: the room played its maximum, or another enter or leave sound."
    );
}

/// Rooms being recorded.
pub fn recordings_active(n: usize) {
    metrics::gauge!(RECORDINGS_ACTIVE).set(n as f64);
}

/// Bytes written to recordings.
pub fn recording_bytes(bytes: u64) {
    metrics::counter!(RECORDING_BYTES).increment(bytes);
}

/// Frames dropped by recording queues, in all (an absolute count).
pub fn recording_dropped_frames(total: u64) {
    metrics::counter!(RECORDING_DROPPED_FRAMES).absolute(total);
}

/// A recording ended (`reason`: `stopped`, `limit`, `error`).
pub fn recording_finished(reason: &'static str) {
    metrics::counter!(RECORDINGS_FINISHED, "reason" => reason).increment(1);
}

/// Rooms forwarding RTP.
pub fn rtp_out_active(n: usize) {
    metrics::gauge!(RTP_OUT_ACTIVE).set(n as f64);
}

/// RTP packets forwarded and failed since the last call.
pub fn rtp_out(packets: u64, failed: u64) {
    if packets > 0 {
        metrics::counter!(RTP_OUT_PACKETS).increment(packets);
    }
    if failed > 0 {
        metrics::counter!(RTP_OUT_FAILED).increment(failed);
    }
}

/// The webhook sender's counters (absolute; `outputs::webhook::WebhookStats`).
pub fn webhooks(sent: u64, failed: u64, dropped: u64, retried: u64) {
    metrics::counter!(WEBHOOK_DELIVERIES, "result" => "sent").absolute(sent);
    metrics::counter!(WEBHOOK_DELIVERIES, "result" => "failed").absolute(failed);
    metrics::counter!(WEBHOOK_DELIVERIES, "result" => "dropped").absolute(dropped);
    metrics::counter!(WEBHOOK_DELIVERIES, "result" => "retried").absolute(retried);
}

/// A webhook watcher lost `n` event batches.
pub fn webhook_events_lost(n: u64) {
    metrics::counter!(WEBHOOK_EVENTS_LOST).increment(n);
}
