//! What operators run a room with, as self-contained parts the room and
//! API layers drive: recording ([`recording`], on [`ogg`]), signed
//! webhooks ([`webhook`]) and forwarding the mix as plain RTP
//! ([`rtp_out`]).
//!
//! These modules are leaves: they use only external crates, `tutti-mix`
//! and std, never another module of this crate, so the room and API code
//! decide when to call them and the parts can move freely.
//!
//! ```text
//! mix-clock ── listener frame (tick, Opus) ──► Recorder::push ──► writer thread ──► <dir>/<room>-<time>.opus
//!           └─ listener frame (tick, Opus) ──► RtpForwarder::send ──► UDP (non-blocking) ──► ffmpeg, encoder, captions
//! api-N    ── room/participant/recording events ──► WebhookSender::send ──► per-URL queue ──► HTTP POST (signed)
//! ```
//!
//! Nothing here blocks its caller: the recorder and the webhook sender
//! take work through bounded queues (`try_send`, overflow counted), the
//! RTP forwarder writes to a non-blocking socket (failures counted).

pub mod network;
pub mod ogg;
pub mod recording;
pub mod rtp_out;
pub mod webhook;

// Wiring (for the room and API layers; suggested, not yet done):
//
// [recording]  dir = "recordings", max_bytes = 536870912, max_duration_seconds = 14400, queue_frames = 500
//              -> recording::RecordingConfig; a room's `record = true` starts one at the first join.
//              Recorder::start on POST .../recording (409 if one runs), Recorder::stop on DELETE (404 if none);
//              the mix clock calls Recorder::push(tick, listener_frame.clone()) after each tick;
//              on_finish -> WebSocket `recording_finished` event + WebhookEvent::RecordingFinished + metrics.
// [webhooks]   urls = [...], secret (default: the auth secret), queue = 1024, timeout_seconds = 5,
//              connect_timeout_seconds = 5, attempts = 3, backoff_seconds = 1
//              -> webhook::WebhookConfig; WebhookSender::start(&cfg, &api_runtime_handle) once;
//              send() where rooms start/finish and participants join/leave (reason as in the `left` event).
// [rtp_out]    per room (API or room config): dest = "192.0.2.10:5004", payload_type = 111
//              -> rtp_out::RtpOutConfig; RtpForwarder owned by the mix clock next to the room,
//              send(tick, listener_frame) after each tick; GET .../rtp_out.sdp serves RtpForwarder::sdp.
// Metrics:     tutti_recording_{frames,gap_frames,dropped_frames}_total, tutti_recording_bytes_total,
//              tutti_recordings_finished_total{reason}, tutti_webhook_{sent,failed,retried,dropped,timeouts}_total,
//              tutti_rtp_out_{packets,bytes,failed}_total.

impl From<&recording::RecordingFinished> for webhook::RecordingInfo {
    /// The `recording_finished` webhook's view of a finished recording (file name only, not the server's path).
    fn from(f: &recording::RecordingFinished) -> Self {
        Self {
            file: f.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            bytes: f.bytes,
            duration_seconds: f.duration.as_secs_f64(),
            reason: f.reason.code().to_owned(),
            error: match &f.reason {
                recording::StopReason::Error(e) => Some(e.clone()),
                _ => None,
            },
        }
    }
}
