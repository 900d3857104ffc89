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

pub mod ogg;
pub mod recording;
pub mod rtp_out;
pub mod webhook;
