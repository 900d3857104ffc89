//! The features' sections and their defaults: `[recording]`, `[playback]`,
//! `[whisper]`, `[breakout]`, `[webhooks]`, `[rtp_out]` and `[rtp_in]`, and
//! how the recorder and the webhook sender take theirs.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Recording rooms (`POST /v1/rooms/{room}/recording`, or `record: true` at creation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RecordingSettings {
    /// Whether rooms may be recorded at all (`false`: 403 `recording_disabled`).
    pub enabled: bool,
    /// Directory the files go to (created when the first recording starts).
    pub dir: String,
    /// Largest file, in bytes (the recording stops with reason `limit` before exceeding it).
    pub max_bytes: u64,
    /// Most bytes the recordings directory may hold, every file in it counted
    /// (old recordings too); 0 = no quota (default 10 GiB). A start at or past it is refused
    /// (507 `recording_quota`); a recording that would pass it stops with reason `quota`.
    pub dir_max_bytes: u64,
    /// Longest file, in seconds (the recording stops with reason `limit`).
    pub max_duration_seconds: f64,
    /// Frames queued to a recording's writer thread (50 = 1 s); beyond: dropped, counted, concealed.
    pub queue_frames: usize,
    /// Whether a spatial room is recorded in stereo (two channels: the
    /// stereo render's packets, no extra encode) unless the request says
    /// `stereo`; a room that is not spatial when the recording starts is
    /// recorded in mono.
    pub stereo: bool,
}

impl Default for RecordingSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            dir: "recordings".to_owned(),
            max_bytes: 512 * 1024 * 1024,
            dir_max_bytes: 10 * 1024 * 1024 * 1024,
            max_duration_seconds: 14_400.0,
            queue_frames: 500,
            stereo: true,
        }
    }
}

/// Playing Ogg/Opus files into rooms (`POST /v1/rooms/{room}/playbacks`)
/// and the sounds rooms play by themselves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlaybackSettings {
    /// Directory of the files rooms may play, named by file name only;
    /// empty = none (uploads only).
    pub dir: String,
    /// Largest file played or uploaded, in bytes (beyond: 413 `file_too_large`).
    pub max_file_bytes: u64,
    /// Playbacks at once per room, its own sounds included (beyond: 429
    /// `too_many_playbacks`; a sound due then is skipped and counted).
    pub max_per_room: usize,
    /// A file of `dir` played when someone joins a room that has others in it; empty = none.
    pub enter_sound: String,
    /// A file of `dir` played when someone leaves a room that still has others; empty = none.
    pub leave_sound: String,
    /// A file of `dir` played, looped, while one participant is alone in a room; empty = none.
    pub hold_music: String,
}

impl Default for PlaybackSettings {
    fn default() -> Self {
        Self {
            dir: "sounds".to_owned(),
            max_file_bytes: 8 * 1024 * 1024,
            max_per_room: 4,
            enter_sound: String::new(),
            leave_sound: String::new(),
            hold_music: String::new(),
        }
    }
}

/// Whisper channels (`POST /v1/rooms/{room}/whispers`): some participants
/// hear the room plus a channel, the rest the room only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WhisperSettings {
    /// Channels open at once per room (beyond: 429 `too_many_whispers`);
    /// each channel whose speaker talks costs one more encode per tick.
    pub max_channels: usize,
    /// Members of one channel, speakers and listeners together (beyond: 400 `too_many_members`).
    pub max_members: usize,
}

impl Default for WhisperSettings {
    fn default() -> Self {
        Self { max_channels: 8, max_members: 100 }
    }
}

/// Moves between rooms (`POST /v1/rooms/{room}/participants/{id}/move`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BreakoutSettings {
    /// A move to a room that does not exist on this node creates it (with
    /// the `[room]` defaults, as `POST /v1/rooms` without options); false:
    /// 404 `room_not_found`. A single node only: in cluster mode a move
    /// never creates a room.
    pub create_rooms: bool,
}

/// Webhooks: events POSTed, signed with `auth.secret`, to every URL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebhookSettings {
    /// Receivers (`http://host:port/path` or `https://…`); empty = no webhooks.
    pub urls: Vec<String>,
    /// A PEM file of CA certificates to check `https://` receivers with,
    /// besides the system's (a private CA); empty = the system's only.
    pub ca_file: String,
    /// The token's issuer (`iss`), naming this server to receivers.
    pub api_key: String,
    /// The secret webhook signatures are made with (at least 32 bytes), so
    /// that receivers never hold the key of access tokens; empty = `auth.secret`
    /// (as before this key existed).
    pub secret: String,
    /// Events queued per URL; beyond: dropped, counted, logged.
    pub queue: usize,
    /// Seconds one delivery attempt may take (connecting included).
    pub timeout_seconds: f64,
    /// Attempts per event (1 = no retry).
    pub attempts: u32,
    /// Seconds before the first retry (doubling after each).
    pub backoff_seconds: f64,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            urls: Vec::new(),
            ca_file: String::new(),
            api_key: "tutti".to_owned(),
            secret: String::new(),
            queue: 1024,
            timeout_seconds: 5.0,
            attempts: 3,
            backoff_seconds: 1.0,
        }
    }
}

impl RecordingSettings {
    /// As the recorder takes it.
    pub(crate) fn to_config(&self) -> crate::outputs::recording::RecordingConfig {
        let seconds =
            if self.max_duration_seconds.is_finite() { self.max_duration_seconds.clamp(0.0, 1e9) } else { 0.0 };
        crate::outputs::recording::RecordingConfig {
            dir: self.dir.clone().into(),
            max_bytes: self.max_bytes,
            dir_max_bytes: self.dir_max_bytes,
            max_duration: Duration::from_secs_f64(seconds),
            queue_frames: self.queue_frames,
            ..crate::outputs::recording::RecordingConfig::default()
        }
    }
}

impl WebhookSettings {
    /// As the webhook sender takes it, signing with `webhooks.secret`, else `secret` (`auth.secret`).
    pub(crate) fn to_config(&self, secret: &[u8]) -> crate::outputs::webhook::WebhookConfig {
        let secret = if self.secret.is_empty() { secret } else { self.secret.as_bytes() };
        let secs = |v: f64| Duration::from_secs_f64(if v.is_finite() { v.clamp(0.0, 60.0) } else { 0.0 });
        crate::outputs::webhook::WebhookConfig {
            urls: self.urls.clone(),
            ca_file: self.ca_file.clone(),
            secret: secret.to_vec(),
            issuer: self.api_key.clone(),
            queue: self.queue,
            connect_timeout: secs(self.timeout_seconds),
            timeout: secs(self.timeout_seconds),
            attempts: self.attempts,
            backoff: secs(self.backoff_seconds),
        }
    }
}

impl RtpOutSettings {
    /// The allowed networks, parsed; the error names the bad entry.
    pub(crate) fn networks(&self) -> Result<Vec<crate::cidr::Cidr>, String> {
        crate::cidr::parse_all(&self.allowed)
    }
}

/// Forwarding a room's mix as plain RTP (`POST /v1/rooms/{room}/rtp_out`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RtpOutSettings {
    /// Networks a stream may be sent to (`"127.0.0.0/8"`, `"10.1.2.3/32"`,
    /// `"fd00::/8"`); empty = RTP out disabled (403 `rtp_out_disabled`).
    pub allowed: Vec<String>,
    /// Whether a spatial room's mix is forwarded as stereo Opus (the stereo
    /// render's packets, `stereo=1` in the SDP) unless the request says
    /// `stereo`; a room that is not spatial when forwarding starts is sent mono.
    pub stereo: bool,
}

impl Default for RtpOutSettings {
    fn default() -> Self {
        Self { allowed: Vec::new(), stereo: true }
    }
}

/// Plain RTP/AVP participants: a SIP gateway (FreeSWITCH, Asterisk) or
/// any RTP sender joins with an `RTP/AVP` Opus offer, no ICE, no DTLS.
/// Plain RTP has NO encryption and NO authentication: allow it only from
/// networks you trust (the gateway's LAN, loopback).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RtpInConfig {
    /// Networks (CIDR, e.g. `10.0.0.0/8`, `127.0.0.0/8`) whose API clients
    /// may join with a plain RTP offer, and whose addresses it may name as
    /// its RTP address. Empty (the default) = plain RTP is refused (403
    /// `rtp_in_forbidden`) and no port is opened. Environment and flags:
    /// comma-separated.
    pub trusted: Vec<String>,
    /// UDP port of the plain RTP socket, on the media address's IP; 0 = a
    /// free port chosen at start (answers carry it).
    pub port: u16,
}
