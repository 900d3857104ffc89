//! The server's settings, in layers: defaults in code, a TOML file over
//! them (unknown keys rejected), `TUTTI_*` environment variables derived
//! from the key path (`room.max_speakers` → `TUTTI_ROOM_MAX_SPEAKERS`),
//! then `key=value` overrides (the command line's flags), then validation.
//! `deploy/tutti.toml` is the commented sample; a test keeps it equal to
//! the defaults.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Server settings. `Config::default()` is what `tutti serve` runs with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// HTTP API address (REST and WebSocket).
    pub http: SocketAddr,
    /// UDP media address: one port for every peer.
    pub media: SocketAddr,
    /// Address put in ICE candidates; empty = the media address. Behind
    /// NAT or in a container, the address clients can reach. Several
    /// addresses, comma-separated (IPv4 and IPv6, public and private), each
    /// become a candidate, the first preferred; a bare IP takes the media port.
    pub advertise: String,
    /// ICE over TCP (RFC 6544, passive) on the media port beside UDP, for
    /// clients whose network drops UDP; answers then carry a TCP candidate
    /// per advertised address, with a lower priority than UDP.
    pub media_tcp: bool,
    /// Prometheus `/metrics` address; empty = no metrics endpoint.
    pub metrics: String,
    /// I/O threads (`io-0`, …), each with its own socket on the media port;
    /// 0 = one per core.
    pub io_threads: usize,
    /// Mixer threads (`mix-0`, …); 0 = one per core.
    pub mix_threads: usize,
    /// Under load, an I/O thread does not wake for each datagram: it reads
    /// twice per tick, after sending the tick's mixes and this long before
    /// the next tick (what it reads is mixed in that tick); 0 = wake on
    /// every datagram.
    pub io_batch_window_seconds: f64,
    /// Nice value of the media threads (`io-N`, `mix-N`, `mix-clock`), from
    /// −20 to 0: they keep their 20 ms deadline when other processes are
    /// busy. Below 0 needs CAP_SYS_NICE (root, or `setcap cap_sys_nice+ep`);
    /// without it a warning is logged and they run at 0. 0 = leave them alone.
    pub media_thread_nice: i32,
    /// Established peers send their RTP on tutti's lean path (RTP built in
    /// place, SRTP by tutti-rtc's own context) instead of webrtc-rs's
    /// generic write pipeline. `false` falls back to the old path.
    pub lean_send: bool,
    /// Established peers' incoming SRTP audio is authenticated, decrypted and
    /// parsed by tutti-rtc (its own SRTP context, replay window and receiver
    /// reports) instead of webrtc-rs's generic read pipeline, and their
    /// consent checks are answered by tutti-rtc too (one per idle timeout
    /// still by webrtc-rs); ICE, DTLS and RTCP stay webrtc-rs's. `false`
    /// falls back to the old path.
    pub lean_receive: bool,
    /// Once a call is up (connected for half a second, media or RTCP heard from the
    /// client), drop its webrtc-rs connection and carry the call with
    /// tutti-rtc alone: lean RTP both ways, tutti's own SRTCP, consent
    /// answers and DTLS alerts; an ICE restart is answered too. Frees ~80 KiB
    /// per participant. Needs `lean_send` and `lean_receive`; a peer whose
    /// DTLS suite is not AES-128-GCM keeps its connection. `false` keeps
    /// every connection for the whole call.
    pub retire_peers: bool,
    /// Receive and send buffer asked for each media socket, in bytes (the
    /// kernel may grant less; the granted size is logged).
    pub socket_buffer_bytes: usize,
    /// A peer from which nothing (no ICE check, no packet) arrives for this
    /// long is removed, and so is a joined peer whose ICE never starts.
    pub peer_timeout_seconds: f64,
    /// How long a draining node (SIGTERM, or `POST /v1/node/drain`) waits
    /// for its calls to end, or in a cluster to be handed over, before it
    /// shuts down: no new rooms meanwhile, calls in progress go on. 0 =
    /// no drain: shut down at once.
    pub drain_seconds: f64,
    /// How long SIGTERM waits for peers to be told and closed.
    pub shutdown_timeout_seconds: f64,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Rooms the server holds at most.
    pub max_rooms: usize,
    /// Participants the server holds at most, over all rooms (beyond: 503).
    pub max_participants: usize,
    /// Defaults for new rooms.
    pub room: RoomDefaults,
    /// Access tokens.
    pub auth: AuthConfig,
    /// Rate, size and time limits on what clients send.
    pub limits: Limits,
    /// Logging.
    pub log: LogConfig,
    /// Cluster mode (several nodes sharing a Redis directory); off while
    /// `cluster.redis_url` is empty. See [`tutti_cluster::ClusterConfig`].
    pub cluster: tutti_cluster::ClusterConfig,
    /// Recording rooms to Ogg/Opus files (docs/features/recording.md).
    pub recording: RecordingSettings,
    /// Playing Ogg/Opus files into rooms: announcements, enter and leave
    /// sounds, hold music (docs/features/playback.md).
    pub playback: PlaybackSettings,
    /// Whisper channels: who hears whom (docs/features/whisper.md).
    pub whisper: WhisperSettings,
    /// Moving participants between rooms (docs/features/breakout.md).
    pub breakout: BreakoutSettings,
    /// Signed webhooks to the application's backend (docs/features/webhooks.md).
    pub webhooks: WebhookSettings,
    /// Forwarding a room's mix as plain RTP (docs/features/rtp-out.md).
    pub rtp_out: RtpOutSettings,
    /// Plain RTP/AVP participants (SIP gateways); off while `rtp_in.trusted` is empty.
    pub rtp_in: RtpInConfig,
    /// STUN/TURN servers the clients should use (`[[ice_servers]]`; see
    /// [`crate::ice`]): given to each client before it makes its offer.
    pub ice_servers: Vec<crate::ice::IceServerEntry>,
    /// Cross-origin access to the API from web apps on other origins.
    pub cors: CorsConfig,
}

/// CORS (`[cors]`): which other origins' web pages may call the API.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CorsConfig {
    /// Origins (`https://app.example.com`, scheme, host and port, no path)
    /// whose pages may call the API; empty = same origin only (no CORS
    /// headers at all). `"*"` alone = any origin: for development only.
    /// Cookies are never allowed (tokens travel in `Authorization`).
    pub allowed_origins: Vec<String>,
}

impl CorsConfig {
    /// Why `allowed_origins` is not usable, if it is not.
    pub fn check(&self) -> Result<(), String> {
        let origins = &self.allowed_origins;
        if origins.iter().any(|o| o == "*") {
            return if origins.len() == 1 {
                Ok(())
            } else {
                Err("'*' (any origin, for development) stands alone, not beside other origins".to_owned())
            };
        }
        for o in origins {
            let rest = o.strip_prefix("https://").or_else(|| o.strip_prefix("http://"));
            let host_ok = rest.is_some_and(|r| {
                !r.is_empty()
                    && r.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:[]_".contains(&b))
                    && !r.ends_with(':')
            });
            if !host_ok {
                return Err(format!(
                    "'{o}' is not an origin: scheme, host and optional port, like https://app.example.com or http://localhost:3000 (no path, no trailing slash)"
                ));
            }
        }
        Ok(())
    }
}

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
    /// (old recordings too); 0 = no quota. A start at or past it is refused
    /// (507 `recording_quota`); a recording that would pass it stops with reason `quota`.
    pub dir_max_bytes: u64,
    /// Longest file, in seconds (the recording stops with reason `limit`).
    pub max_duration_seconds: f64,
    /// Frames queued to a recording's writer thread (50 = 1 s); beyond: dropped, counted, concealed.
    pub queue_frames: usize,
}

impl Default for RecordingSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            dir: "recordings".to_owned(),
            max_bytes: 512 * 1024 * 1024,
            dir_max_bytes: 0,
            max_duration_seconds: 14_400.0,
            queue_frames: 500,
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RtpOutSettings {
    /// Networks a stream may be sent to (`"127.0.0.0/8"`, `"10.1.2.3/32"`,
    /// `"fd00::/8"`); empty = RTP out disabled (403 `rtp_out_disabled`).
    pub allowed: Vec<String>,
}

/// Access tokens (see [`crate::auth`]).
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// The HMAC secret tokens are signed with (at least 32 bytes); empty =
    /// generate one at start (tokens then work for that process only).
    pub secret: String,
    /// No tokens at all: anyone who reaches the API may do anything. Only
    /// allowed when `http` is a loopback address.
    pub disabled: bool,
    /// Signing keys by id, for rotation: tokens are minted with the first
    /// and carry its id (`kid`); a token verifies under the listed key its
    /// `kid` names (tokens without `kid` under `secret`). Rotate by listing
    /// a new key first, and dropping the old one once its tokens expired.
    pub keys: Vec<AuthKey>,
}

/// One `[[auth.keys]]` entry.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthKey {
    /// Its id, put in tokens' `kid` (1 to 64 bytes, unique).
    pub id: String,
    /// The HMAC secret (at least 32 bytes).
    pub secret: String,
}

impl std::fmt::Debug for AuthKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthKey").field("id", &self.id).field("secret", &"(set)").finish()
    }
}

impl AuthConfig {
    /// The listed keys as (id, secret).
    pub fn key_pairs(&self) -> Vec<(String, String)> {
        self.keys.iter().map(|k| (k.id.clone(), k.secret.clone())).collect()
    }
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secret = if self.secret.is_empty() { "(generated)" } else { "(set)" };
        f.debug_struct("AuthConfig")
            .field("secret", &secret)
            .field("disabled", &self.disabled)
            .field("keys", &self.keys)
            .finish()
    }
}

/// Limits on what clients may send, each answered with a clear error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Joins per second per client address (IPv4 address, IPv6 /64), on
    /// average; beyond: 429 `rate_limited` with `Retry-After`. 0 = no limit.
    pub join_rate_per_second: f64,
    /// Joins a client address may make at once before the rate applies.
    pub join_burst: u32,
    /// Open HTTP connections (WebSockets included); beyond: a connection
    /// that has not sent a request yet is closed to make room, else 503
    /// `too_many_connections`.
    pub max_connections: usize,
    /// Open HTTP connections from one IPv4 address or IPv6 /64 (its share
    /// of `max_connections`); beyond, as for the cap.
    pub max_connections_per_address: usize,
    /// Open WebSockets per token identity (over all rooms), and never more
    /// than half of `max_connections`; beyond: 429 `too_many_sockets`. 0 =
    /// half of `max_connections`. Admins of the room are not counted.
    pub ws_max_per_identity: usize,
    /// Per-speaker feeds (`GET /v1/rooms/{room}/speakers`) open at once
    /// per room; beyond: 429 `too_many_feeds`.
    pub speaker_feeds_per_room: usize,
    /// `PATCH …/participants/{id}` per second per participant, on average;
    /// beyond: 429 `rate_limited` with `Retry-After`. 0 = no limit.
    pub participant_updates_per_second: f64,
    /// Updates a participant may take at once before the rate applies.
    pub participant_update_burst: u32,
    /// Time a client has to send a request's headers, in seconds.
    pub http_header_timeout_seconds: f64,
    /// Time a request (its body included) may take, in seconds; beyond: 408 `request_timeout`.
    pub http_request_timeout_seconds: f64,
    /// Largest WebSocket message a client may send, in bytes; beyond: closed with 1009.
    pub ws_max_message_bytes: usize,
    /// WebSocket messages per second a client may send, on average; beyond:
    /// an `error` `rate_limited`, then closed with 1008.
    pub ws_messages_per_second: f64,
    /// WebSocket messages a client may send at once before the rate applies.
    pub ws_message_burst: u32,
    /// A WebSocket from which nothing (not even a pong to our pings, sent
    /// every third of this) arrives for this long is closed with 4408, in seconds.
    pub ws_idle_timeout_seconds: f64,
    /// A participant that joined over a WebSocket and lost it (no close
    /// frame: a network change) stays this long for a new socket to
    /// `resume` it, in seconds; 0 = it leaves with its socket.
    pub ws_resume_seconds: f64,
    /// Open ICE-TCP media connections at most (beyond: refused at once).
    /// Each I/O thread enforces an even share (rounded up) of this and of
    /// `tcp_max_per_ip`, so a burst may be refused a little below the cap.
    pub tcp_max_connections: usize,
    /// Open ICE-TCP media connections at most from one IPv4 address or IPv6 /64.
    pub tcp_max_per_ip: usize,
    /// Time a new TCP media connection has to send its first ICE check, in seconds.
    pub tcp_handshake_timeout_seconds: f64,
    /// A TCP media connection with no complete frame for this long is closed, in seconds.
    pub tcp_idle_timeout_seconds: f64,
    /// Send buffer per TCP media connection, in bytes (full: packets dropped, counted).
    pub tcp_send_buffer_bytes: usize,
}

/// Defaults for new rooms (a room's creator may choose others).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RoomDefaults {
    /// Participants per room (beyond: 409 `room_full`).
    pub max_participants: usize,
    /// Speakers mixed per tick (the loudest K), 1 to 16.
    pub max_speakers: usize,
    /// While exactly one person speaks, listeners get that speaker's own
    /// Opus frames, forwarded (no decode, no encode); `false`: always the encoded mix.
    pub passthrough: bool,
    /// While nobody speaks, listeners get one Opus DTX frame every 400 ms
    /// instead of 50 encoded silence frames a second; `false`: silence frames.
    pub dtx: bool,
    /// Opus complexity (0 to 10) of the listeners' stream: the mix that
    /// everyone but the selected speakers hears, one encode per busy room
    /// and tick. 10 is the best; 5 costs ~0.8 and 1 ~0.35 of it (see
    /// `docs/benchmarks.md`). Under load the mixer lowers it before it
    /// drops speakers.
    pub complexity: u8,
    /// Opus complexity (0 to 10) of each selected speaker's own stream (the
    /// mix without themselves, heard by that one person), never above
    /// `complexity`. 0 costs a quarter of 10.
    pub speaker_complexity: u8,
    /// A join (REST or WebSocket) for a room that does not exist creates
    /// it; `false`: only an admin creates rooms (`POST /v1/rooms`), and such
    /// a join gets 404 `room_not_found`. Single node and cluster alike.
    pub auto_create: bool,
    /// A room with no participant for this long is deleted (`room_closed`),
    /// whether its participants left or nobody ever joined, in seconds;
    /// 0 = never.
    pub empty_timeout_seconds: f64,
    /// Noise suppression (RNNoise) of the selected speakers: "auto" (plain
    /// RTP participants only: browsers suppress noise themselves), "on"
    /// (everyone), "off". Per room and participant at run time (PATCH).
    pub noise_suppression: String,
    /// Loudness normalisation of the selected speakers toward
    /// `loudness_target_dbfs`. Per room and participant at run time (PATCH).
    pub loudness: bool,
    /// The level loudness normalisation aims for: RMS of active speech, in dBFS, −40 to −6.
    pub loudness_target_dbfs: f64,
}

/// Logging settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `text` or `json` (one JSON object per line).
    pub format: String,
    /// A tracing filter, e.g. `info` or `debug,rtc=warn`.
    pub filter: String,
}

/// `advertise`: comma-separated `ip:port` or bare IPs (port 0: the media
/// port). `None` if any entry is neither; empty input gives an empty list.
fn parse_advertise(text: &str) -> Option<Vec<SocketAddr>> {
    text.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<SocketAddr>().ok().or_else(|| {
                t.trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .ok()
                    .map(|ip| SocketAddr::new(ip, 0))
            })
        })
        .collect()
}

impl Default for Config {
    fn default() -> Self {
        Self {
            http: SocketAddr::from(([127, 0, 0, 1], 8080)),
            media: SocketAddr::from(([127, 0, 0, 1], 4000)),
            advertise: String::new(),
            media_tcp: true,
            metrics: "127.0.0.1:9464".to_owned(),
            io_threads: 0,
            mix_threads: 0,
            io_batch_window_seconds: 0.002,
            media_thread_nice: -10,
            lean_send: true,
            lean_receive: true,
            retire_peers: true,
            socket_buffer_bytes: 4 << 20,
            peer_timeout_seconds: 10.0,
            drain_seconds: 30.0,
            shutdown_timeout_seconds: 5.0,
            max_body_bytes: 64 * 1024,
            max_rooms: 1_000,
            max_participants: 20_000,
            room: RoomDefaults::default(),
            auth: AuthConfig::default(),
            limits: Limits::default(),
            log: LogConfig::default(),
            cluster: tutti_cluster::ClusterConfig::default(),
            recording: RecordingSettings::default(),
            playback: PlaybackSettings::default(),
            whisper: WhisperSettings::default(),
            breakout: BreakoutSettings::default(),
            webhooks: WebhookSettings::default(),
            rtp_out: RtpOutSettings::default(),
            rtp_in: RtpInConfig::default(),
            ice_servers: Vec::new(),
            cors: CorsConfig::default(),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            join_rate_per_second: 10.0,
            join_burst: 20,
            max_connections: 10_000,
            max_connections_per_address: 256,
            ws_max_per_identity: 32,
            speaker_feeds_per_room: 4,
            participant_updates_per_second: 5.0,
            participant_update_burst: 10,
            http_header_timeout_seconds: 10.0,
            http_request_timeout_seconds: 10.0,
            ws_max_message_bytes: 64 * 1024,
            ws_messages_per_second: 10.0,
            ws_message_burst: 20,
            ws_idle_timeout_seconds: 60.0,
            ws_resume_seconds: 10.0,
            tcp_max_connections: 10_000,
            tcp_max_per_ip: 256,
            tcp_handshake_timeout_seconds: 5.0,
            tcp_idle_timeout_seconds: 30.0,
            tcp_send_buffer_bytes: 64 * 1024,
        }
    }
}

impl Default for RoomDefaults {
    fn default() -> Self {
        Self {
            max_participants: 10_000,
            max_speakers: 5,
            passthrough: true,
            dtx: true,
            complexity: 10,
            speaker_complexity: 0,
            auto_create: false,
            empty_timeout_seconds: 300.0,
            noise_suppression: "auto".to_owned(),
            loudness: false,
            loudness_target_dbfs: f64::from(tutti_mix::DEFAULT_LOUDNESS_TARGET_DBFS),
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        Self { format: "text".to_owned(), filter: "info,rtc=warn,rtc_ice=warn,rtc_dtls=error,rtc_srtp=warn".to_owned() }
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

/// Why a configuration was refused. Each names the key and the source.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or a value has the wrong type.
    #[error("{origin}: {message}")]
    Parse {
        /// Where the text came from (a file, an environment variable, a flag).
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// A key that tutti does not know.
    #[error("{origin}: unknown key '{key}' (see deploy/tutti.toml for every key)")]
    UnknownKey {
        /// Where it came from.
        origin: String,
        /// The key path.
        key: String,
    },
    /// A value out of range.
    #[error("{key}: {message}")]
    Invalid {
        /// The key path.
        key: &'static str,
        /// What is wrong.
        message: String,
    },
}

fn parse_err(origin: &str, e: impl std::fmt::Display) -> ConfigError {
    ConfigError::Parse { origin: origin.to_owned(), message: e.to_string() }
}

impl Config {
    /// Builds the configuration: defaults, then `file` (if any), then the
    /// `TUTTI_*` variables among `env`, then `overrides` (`key.path=value`),
    /// then validation.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        overrides: &[(String, String)],
    ) -> Result<Self, ConfigError> {
        let mut table = toml::Table::try_from(Config::default()).map_err(|e| parse_err("defaults", e))?;
        if let Some(path) = file {
            let origin = path.display().to_string();
            let text =
                std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: origin.clone(), source })?;
            let over: toml::Table = text.parse().map_err(|e| parse_err(&origin, e))?;
            merge(&mut table, over, "", &origin)?;
        }
        let mut leaves = Vec::new();
        collect_leaves(&table, "", &mut leaves);
        let env: Vec<(String, String)> = env.into_iter().filter(|(k, _)| k.starts_with("TUTTI_")).collect();
        for path in &leaves {
            let name = env_name(path);
            if let Some((_, value)) = env.iter().find(|(k, _)| *k == name) {
                set(&mut table, path, value, &format!("environment variable {name}"))?;
            }
        }
        for (path, value) in overrides {
            if !leaves.contains(path) {
                return Err(ConfigError::UnknownKey { origin: "command line".to_owned(), key: path.clone() });
            }
            set(&mut table, path, value, &format!("--{}", path.replace(['.', '_'], "-")))?;
        }
        let cfg: Config = table.try_into().map_err(|e| parse_err("configuration", e))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The `TUTTI_*` variables in `env` that name no key (likely typos).
    pub fn unknown_env(env: impl IntoIterator<Item = (String, String)>) -> Vec<String> {
        let mut leaves = Vec::new();
        if let Ok(table) = toml::Table::try_from(Config::default()) {
            collect_leaves(&table, "", &mut leaves);
        }
        let known: Vec<String> = leaves.iter().map(|p| env_name(p)).collect();
        env.into_iter().map(|(k, _)| k).filter(|k| k.starts_with("TUTTI_") && !known.contains(k)).collect()
    }

    /// Checks every value's range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, message: &str| Err(ConfigError::Invalid { key, message: message.to_owned() });
        if !self.advertise.is_empty() && parse_advertise(&self.advertise).is_none() {
            return invalid(
                "advertise",
                "must be empty, an address like 203.0.113.7:4000, or several (comma-separated; a bare IP takes the media port)",
            );
        }
        if !self.metrics.is_empty() && self.metrics.parse::<SocketAddr>().is_err() {
            return invalid("metrics", "must be empty (off) or an address like 127.0.0.1:9464");
        }
        if !(self.peer_timeout_seconds.is_finite() && (1.0..=3600.0).contains(&self.peer_timeout_seconds)) {
            return invalid("peer_timeout_seconds", "must be within 1 to 3600");
        }
        if !(self.io_batch_window_seconds.is_finite() && (0.0..=0.01).contains(&self.io_batch_window_seconds)) {
            return invalid("io_batch_window_seconds", "must be within 0 to 0.01 (10 ms)");
        }
        if !(-20..=0).contains(&self.media_thread_nice) {
            return invalid("media_thread_nice", "must be within -20 to 0");
        }
        if !(self.drain_seconds.is_finite() && (0.0..=86_400.0).contains(&self.drain_seconds)) {
            return invalid("drain_seconds", "must be within 0 to 86400 (a day)");
        }
        if !(self.shutdown_timeout_seconds.is_finite() && (0.1..=600.0).contains(&self.shutdown_timeout_seconds)) {
            return invalid("shutdown_timeout_seconds", "must be within 0.1 to 600");
        }
        if self.io_threads > 256 || self.mix_threads > 256 {
            return invalid("io_threads", "io_threads and mix_threads must be at most 256");
        }
        if !(1024..=1 << 30).contains(&self.max_body_bytes) {
            return invalid("max_body_bytes", "must be within 1 KiB to 1 GiB");
        }
        if self.max_rooms == 0 || self.max_participants == 0 || self.room.max_participants == 0 {
            return invalid("max_participants", "max_rooms and the participant limits must be at least 1");
        }
        if !(1..=tutti_mix::MAX_SPEAKERS).contains(&self.room.max_speakers) {
            return invalid("room.max_speakers", "must be within 1 to 16");
        }
        if self.room.complexity > 10 {
            return invalid("room.complexity", "must be within 0 to 10");
        }
        if self.room.speaker_complexity > 10 {
            return invalid("room.speaker_complexity", "must be within 0 to 10");
        }
        if tutti_mix::NoiseSuppression::parse(&self.room.noise_suppression).is_none() {
            return invalid("room.noise_suppression", "must be \"auto\", \"on\" or \"off\"");
        }
        if !(self.room.loudness_target_dbfs.is_finite() && (-40.0..=-6.0).contains(&self.room.loudness_target_dbfs)) {
            return invalid("room.loudness_target_dbfs", "must be within -40 to -6 (dBFS)");
        }
        if !self.auth.disabled && !self.auth.secret.is_empty() && self.auth.secret.len() < crate::auth::MIN_SECRET_BYTES
        {
            return invalid("auth.secret", "must be at least 32 bytes, or empty to generate one at start");
        }
        if self.auth.disabled && !self.http.ip().is_loopback() {
            return invalid(
                "auth.disabled",
                "is allowed only when `http` is a loopback address (127.0.0.1 or ::1): anyone reaching the API could join any room",
            );
        }
        let l = &self.limits;
        if !(l.join_rate_per_second.is_finite() && (0.0..=1e6).contains(&l.join_rate_per_second)) {
            return invalid("limits.join_rate_per_second", "must be within 0 (no limit) to 1000000");
        }
        if !(l.ws_messages_per_second.is_finite() && (0.1..=1e6).contains(&l.ws_messages_per_second)) {
            return invalid("limits.ws_messages_per_second", "must be within 0.1 to 1000000");
        }
        if l.join_burst == 0 || l.ws_message_burst == 0 {
            return invalid("limits.join_burst", "limits.join_burst and limits.ws_message_burst must be at least 1");
        }
        if l.max_connections == 0 || l.max_connections_per_address == 0 {
            return invalid(
                "limits.max_connections",
                "limits.max_connections and max_connections_per_address must be at least 1",
            );
        }
        if !(l.participant_updates_per_second.is_finite() && (0.0..=1e6).contains(&l.participant_updates_per_second))
            || l.participant_update_burst == 0
        {
            return invalid(
                "limits.participant_updates_per_second",
                "must be within 0 (no limit) to 1000000, with participant_update_burst at least 1",
            );
        }
        if !(self.room.empty_timeout_seconds.is_finite()
            && (0.0..=31_536_000.0).contains(&self.room.empty_timeout_seconds))
        {
            return invalid("room.empty_timeout_seconds", "must be within 0 (never) to 31536000 seconds");
        }
        for (i, k) in self.auth.keys.iter().enumerate() {
            if k.id.is_empty() || k.id.len() > crate::auth::MAX_KEY_ID_BYTES {
                return invalid("auth.keys", "every key needs an id of 1 to 64 bytes");
            }
            if self.auth.keys[..i].iter().any(|o| o.id == k.id) {
                return invalid("auth.keys", "key ids must be unique");
            }
            if k.secret.len() < crate::auth::MIN_SECRET_BYTES {
                return invalid("auth.keys", "every key's secret must be at least 32 bytes");
            }
        }
        if !(l.ws_resume_seconds.is_finite() && (0.0..=3_600.0).contains(&l.ws_resume_seconds)) {
            return invalid("limits.ws_resume_seconds", "must be within 0 to 3600 seconds");
        }
        for (key, v) in [
            ("limits.http_header_timeout_seconds", l.http_header_timeout_seconds),
            ("limits.http_request_timeout_seconds", l.http_request_timeout_seconds),
            ("limits.ws_idle_timeout_seconds", l.ws_idle_timeout_seconds),
        ] {
            if !(v.is_finite() && (0.1..=86_400.0).contains(&v)) {
                return invalid(key, "must be within 0.1 to 86400 seconds");
            }
        }
        if l.tcp_max_connections == 0 || l.tcp_max_per_ip == 0 {
            return invalid(
                "limits.tcp_max_connections",
                "limits.tcp_max_connections and tcp_max_per_ip must be at least 1",
            );
        }
        for (key, v) in [
            ("limits.tcp_handshake_timeout_seconds", l.tcp_handshake_timeout_seconds),
            ("limits.tcp_idle_timeout_seconds", l.tcp_idle_timeout_seconds),
        ] {
            if !(v.is_finite() && (0.1..=3600.0).contains(&v)) {
                return invalid(key, "must be within 0.1 to 3600 seconds");
            }
        }
        if !(1024..=16 << 20).contains(&l.tcp_send_buffer_bytes) {
            return invalid("limits.tcp_send_buffer_bytes", "must be within 1 KiB to 16 MiB");
        }
        if !(1..=64).contains(&l.speaker_feeds_per_room) {
            return invalid("limits.speaker_feeds_per_room", "must be within 1 to 64");
        }
        if !(128..=16 << 20).contains(&l.ws_max_message_bytes) {
            return invalid("limits.ws_max_message_bytes", "must be within 128 bytes to 16 MiB");
        }
        if !matches!(self.log.format.as_str(), "text" | "json") {
            return invalid("log.format", "must be 'text' or 'json'");
        }
        self.validate_outputs()?;
        crate::cidr::parse_all(&self.rtp_in.trusted)
            .map_err(|message| ConfigError::Invalid { key: "rtp_in.trusted", message })?;
        crate::ice::validate(&self.ice_servers)
            .map_err(|message| ConfigError::Invalid { key: "ice_servers", message })?;
        self.cors.check().map_err(|message| ConfigError::Invalid { key: "cors.allowed_origins", message })?;
        if self.cluster.enabled() {
            self.cluster.validate().map_err(|e| ConfigError::Invalid { key: "cluster", message: e.to_string() })?;
            if self.auth.disabled || self.auth.secret.is_empty() {
                return invalid(
                    "auth.secret",
                    "cluster mode needs a configured auth.secret (at least 32 bytes), the same on every node: \
                     tokens and redirect tickets are checked with it on whichever node a client reaches",
                );
            }
        }
        Ok(())
    }

    /// Checks `[recording]`, `[webhooks]`, `[rtp_out]` and `[playback]`.
    fn validate_outputs(&self) -> Result<(), ConfigError> {
        let invalid = |key, message: String| Err(ConfigError::Invalid { key, message });
        if let Err(e) = self.recording.to_config().validate() {
            return invalid("recording", e.to_string());
        }
        if !self.webhooks.secret.is_empty() && self.webhooks.secret.len() < crate::auth::MIN_SECRET_BYTES {
            return invalid("webhooks.secret", "must be at least 32 bytes, or empty to sign with auth.secret".into());
        }
        if !self.webhooks.urls.is_empty() {
            if self.webhooks.secret.is_empty() && self.auth.secret.len() < crate::auth::MIN_SECRET_BYTES {
                return invalid(
                    "webhooks.urls",
                    "webhooks are signed with webhooks.secret, else auth.secret: configure one (at least 32 bytes) \
                     the receivers know"
                        .into(),
                );
            }
            if let Err(e) = self.webhooks.to_config(self.auth.secret.as_bytes()).validate() {
                return invalid("webhooks", e.to_string());
            }
        }
        for (key, v) in [
            ("webhooks.timeout_seconds", self.webhooks.timeout_seconds),
            ("webhooks.backoff_seconds", self.webhooks.backoff_seconds),
        ] {
            if !(v.is_finite() && (0.0..=60.0).contains(&v)) || (key == "webhooks.timeout_seconds" && v < 0.01) {
                return invalid(key, "must be within 0.01 (backoff: 0) to 60 seconds".into());
            }
        }
        if let Err(e) = self.rtp_out.networks() {
            return invalid("rtp_out.allowed", e);
        }
        if !(1..=tutti_mix::MAX_CHANNELS).contains(&self.whisper.max_channels) {
            return invalid("whisper.max_channels", format!("must be within 1 to {}", tutti_mix::MAX_CHANNELS));
        }
        if !(2..=10_000).contains(&self.whisper.max_members) {
            return invalid("whisper.max_members", "must be within 2 to 10000".into());
        }
        let p = &self.playback;
        if !(4096..=1 << 30).contains(&p.max_file_bytes) {
            return invalid("playback.max_file_bytes", "must be within 4 KiB to 1 GiB".into());
        }
        if !(1..=64).contains(&p.max_per_room) {
            return invalid("playback.max_per_room", "must be within 1 to 64".into());
        }
        for (key, name) in [
            ("playback.enter_sound", &p.enter_sound),
            ("playback.leave_sound", &p.leave_sound),
            ("playback.hold_music", &p.hold_music),
        ] {
            if name.is_empty() {
                continue;
            }
            if p.dir.is_empty() {
                return invalid(key, "names a file of playback.dir, which is empty".into());
            }
            if let Err(e) = crate::room::playback::check_file_name(name) {
                return invalid(key, e);
            }
        }
        Ok(())
    }

    /// The address advertised in ICE candidates (`media` when `advertise` is empty).
    pub fn advertise_addr(&self, media: SocketAddr) -> SocketAddr {
        self.advertise_addrs()
            .first()
            .map_or(media, |a| if a.port() == 0 { SocketAddr::new(a.ip(), media.port()) } else { *a })
    }

    /// Every advertised address, the preferred first (port 0: the media
    /// port, filled in when the socket is bound); empty when `advertise` is.
    pub fn advertise_addrs(&self) -> Vec<SocketAddr> {
        parse_advertise(&self.advertise).unwrap_or_default()
    }

    /// The ICE-TCP limits (see [`Limits`]), if `media_tcp` is on.
    pub fn tcp_limits(&self) -> Option<tutti_rtc::TcpLimits> {
        let l = &self.limits;
        self.media_tcp.then(|| tutti_rtc::TcpLimits {
            send_buffer: l.tcp_send_buffer_bytes,
            stun_timeout: Duration::from_secs_f64(l.tcp_handshake_timeout_seconds),
            idle_timeout: Duration::from_secs_f64(l.tcp_idle_timeout_seconds),
            max_connections: l.tcp_max_connections,
            max_per_ip: l.tcp_max_per_ip,
            ..tutti_rtc::TcpLimits::default()
        })
    }

    /// The metrics address, if metrics are on.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.parse().ok()
    }

    /// [`Config::peer_timeout_seconds`] as a duration.
    pub fn peer_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.peer_timeout_seconds)
    }

    /// [`Config::io_batch_window_seconds`] as a duration.
    pub fn io_batch_window(&self) -> Duration {
        Duration::from_secs_f64(self.io_batch_window_seconds)
    }

    /// [`Config::drain_seconds`] as a duration.
    pub fn drain_time(&self) -> Duration {
        Duration::from_secs_f64(self.drain_seconds)
    }

    /// [`Config::shutdown_timeout_seconds`] as a duration.
    pub fn shutdown_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.shutdown_timeout_seconds)
    }
}

/// `room.max_speakers` → `TUTTI_ROOM_MAX_SPEAKERS`.
fn env_name(path: &str) -> String {
    format!("TUTTI_{}", path.replace('.', "_").to_ascii_uppercase())
}

fn collect_leaves(table: &toml::Table, prefix: &str, out: &mut Vec<String>) {
    for (k, v) in table {
        let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        match v {
            toml::Value::Table(t) => collect_leaves(t, &path, out),
            _ => out.push(path),
        }
    }
}

/// Lays `over` on `base`, refusing keys `base` does not have.
fn merge(base: &mut toml::Table, over: toml::Table, prefix: &str, origin: &str) -> Result<(), ConfigError> {
    for (k, v) in over {
        let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        match (base.get_mut(&k), v) {
            (None, _) => return Err(ConfigError::UnknownKey { origin: origin.to_owned(), key: path }),
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o, &path, origin)?,
            (Some(toml::Value::Table(_)), _) => {
                return Err(parse_err(origin, format!("'{path}' is a section ([{path}]), not a value")));
            }
            (Some(toml::Value::Float(slot)), toml::Value::Integer(i)) => *slot = i as f64,
            (Some(slot), v) => {
                if std::mem::discriminant(slot) != std::mem::discriminant(&v) {
                    let want = slot.type_str();
                    return Err(parse_err(origin, format!("'{path}' must be {} {want}", article(want))));
                }
                *slot = v;
            }
        }
    }
    Ok(())
}

fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" }
}

/// Sets the leaf at `path` from text, typed like the default it replaces.
fn set(table: &mut toml::Table, path: &str, text: &str, origin: &str) -> Result<(), ConfigError> {
    let mut keys = path.split('.').peekable();
    let mut t = table;
    while let Some(k) = keys.next() {
        if keys.peek().is_none() {
            let slot = t
                .get_mut(k)
                .ok_or_else(|| ConfigError::UnknownKey { origin: origin.to_owned(), key: path.to_owned() })?;
            let bad = |what: &str| parse_err(origin, format!("'{text}' is not {what}"));
            *slot = match slot {
                toml::Value::String(_) => toml::Value::String(text.to_owned()),
                toml::Value::Integer(_) => toml::Value::Integer(text.trim().parse().map_err(|_| bad("an integer"))?),
                toml::Value::Float(_) => toml::Value::Float(text.trim().parse().map_err(|_| bad("a number"))?),
                toml::Value::Boolean(_) => toml::Value::Boolean(text.trim().parse().map_err(|_| bad("true or false"))?),
                // A list: TOML (`["a", "b"]`), or words separated by commas (`a,b`; empty = none).
                toml::Value::Array(_) => match format!("v = {text}").parse::<toml::Table>() {
                    Ok(mut t) if text.trim_start().starts_with('[') => t.remove("v").ok_or_else(|| bad("a list"))?,
                    _ if text.trim_start().starts_with('[') => return Err(bad("a list like [\"a\", \"b\"]")),
                    _ => toml::Value::Array(
                        text.split(',')
                            .map(str::trim)
                            .filter(|w| !w.is_empty())
                            .map(|w| toml::Value::String(w.to_owned()))
                            .collect(),
                    ),
                },
                _ => return Err(bad("a supported value")),
            };
            return Ok(());
        }
        t = match t.get_mut(k) {
            Some(toml::Value::Table(inner)) => inner,
            _ => return Err(ConfigError::UnknownKey { origin: origin.to_owned(), key: path.to_owned() }),
        };
    }
    Err(ConfigError::UnknownKey { origin: origin.to_owned(), key: path.to_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(text: &str, env: &[(&str, &str)], sets: &[(&str, &str)]) -> Result<Config, ConfigError> {
        // A directory per call: tests run in parallel, and two texts of one
        // length once shared a file (a flaky race).
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("tutti-config-{}-{call}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("tutti.toml");
        std::fs::write(&path, text).expect("write");
        let env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
        let sets: Vec<(String, String)> = sets.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let r = Config::load(Some(&path), env, &sets);
        let _ = std::fs::remove_dir_all(&dir);
        r
    }

    #[test]
    fn the_sample_config_is_the_defaults() {
        let sample = include_str!("../../../deploy/tutti.toml");
        assert_eq!(load_text(sample, &[], &[]).expect("the sample loads"), Config::default());
    }

    #[test]
    fn breakout_create_rooms_is_off_unless_set() {
        assert!(!Config::default().breakout.create_rooms);
        let on = load_text("[breakout]\ncreate_rooms = true\n", &[], &[]).expect("loads");
        assert!(on.breakout.create_rooms);
        let flag = load_text("", &[], &[("breakout.create_rooms", "true")]).expect("loads");
        assert!(flag.breakout.create_rooms);
        let bad = load_text("[breakout]\ncreate_rooms = \"yes\"\n", &[], &[]).expect_err("refused").to_string();
        assert!(bad.contains("create_rooms") || bad.contains("breakout"), "{bad}");
        let unknown = load_text("[breakout]\ncreate_room = true\n", &[], &[]).expect_err("refused").to_string();
        assert!(unknown.contains("create_room"), "{unknown}");
    }

    #[test]
    fn lists_are_set_from_flags_and_the_environment() {
        let cfg = load_text(
            "[auth]\nsecret = \"0123456789abcdef0123456789abcdef\"\n",
            &[("TUTTI_RTP_OUT_ALLOWED", "127.0.0.0/8, 10.0.0.0/8")],
            &[("webhooks.urls", "[\"http://127.0.0.1:9100/\"]")],
        )
        .expect("loads");
        let err = |r: Result<Config, ConfigError>| r.expect_err("refused").to_string();
        assert_eq!(cfg.rtp_out.allowed, ["127.0.0.0/8", "10.0.0.0/8"]);
        assert_eq!(cfg.webhooks.urls, ["http://127.0.0.1:9100/"]);
        assert!(err(load_text("", &[], &[("webhooks.urls", "[oops")])).contains("list"));
        assert!(err(load_text("", &[], &[("rtp_out.allowed", "10.0.0.0/99")])).contains("rtp_out.allowed"));
        assert!(err(load_text("", &[], &[("webhooks.urls", "http://127.0.0.1:9/")])).contains("auth.secret"));
        assert!(err(load_text("[recording]\nmax_bytes = 10\n", &[], &[])).contains("recording"));
        // sound: voice processing keys.
        assert!(err(load_text("[room]\nnoise_suppression = \"loud\"\n", &[], &[])).contains("room.noise_suppression"));
        assert!(err(load_text("", &[], &[("room.loudness_target_dbfs", "3")])).contains("room.loudness_target_dbfs"));
        let cfg =
            load_text("[room]\nnoise_suppression = \"on\"\n", &[("TUTTI_ROOM_LOUDNESS", "true")], &[]).expect("loads");
        assert_eq!((cfg.room.noise_suppression.as_str(), cfg.room.loudness), ("on", true));
    }

    #[test]
    fn layers_apply_in_order_file_env_flags() {
        let cfg = load_text(
            "http = \"127.0.0.1:9000\"\nmix_threads = 3\n[room]\nmax_speakers = 4\n",
            &[("TUTTI_MIX_THREADS", "2"), ("TUTTI_ROOM_MAX_PARTICIPANTS", "50"), ("HOME", "/root")],
            &[("mix_threads", "1")],
        )
        .expect("loads");
        assert_eq!(cfg.http, SocketAddr::from(([127, 0, 0, 1], 9000)));
        assert_eq!(cfg.room.max_speakers, 4);
        assert_eq!(cfg.room.max_participants, 50, "environment over the file");
        assert_eq!(cfg.mix_threads, 1, "flags over the environment");
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused_by_name() {
        let err = |r: Result<Config, ConfigError>| r.expect_err("refused").to_string();
        assert!(err(load_text("colour = \"red\"\n", &[], &[])).contains("unknown key 'colour'"));
        assert!(err(load_text("[room]\nmax_speakerz = 3\n", &[], &[])).contains("unknown key 'room.max_speakerz'"));
        assert!(err(load_text("", &[("TUTTI_MIX_THREADS", "many")], &[])).contains("TUTTI_MIX_THREADS"));
        assert!(err(load_text("", &[], &[("room.nope", "1")])).contains("unknown key 'room.nope'"));
        assert!(err(load_text("mix_threads = \"two\"\n", &[], &[])).contains("tutti.toml"));
        assert!(err(load_text("[room]\nmax_speakers = 0\n", &[], &[])).contains("room.max_speakers"));
        assert!(err(load_text("[room]\nspeaker_complexity = 11\n", &[], &[])).contains("room.speaker_complexity"));
        assert!(err(load_text("[room]\ncomplexity = 11\n", &[], &[])).contains("room.complexity"));
        assert!(err(load_text("advertise = \"somewhere\"\n", &[], &[])).contains("advertise"));
        assert!(err(load_text("room = 3\n", &[], &[])).contains("section"));
        assert_eq!(Config::unknown_env([("TUTTI_HTTPS".to_owned(), String::new())]), ["TUTTI_HTTPS"]);
    }

    #[test]
    fn ice_servers_load_from_the_file_and_are_checked() {
        let text = "[[ice_servers]]\nurls = [\"turn:127.0.0.1:3478?transport=tcp\"]\nsecret = \"s3cret\"\n\
                    ttl_seconds = 600\n\n[[ice_servers]]\nurls = [\"stun:127.0.0.1:3478\"]\n";
        let cfg = load_text(text, &[], &[]).expect("loads");
        assert_eq!(cfg.ice_servers.len(), 2);
        assert_eq!(cfg.ice_servers[0].secret, "s3cret");
        assert_eq!(cfg.ice_servers[0].ttl_seconds, 600);
        assert_eq!(cfg.ice_servers[1].ttl_seconds, 86_400, "the default TTL");
        let err = |r: Result<Config, ConfigError>| r.expect_err("refused").to_string();
        let open_turn = "[[ice_servers]]\nurls = [\"turn:127.0.0.1:3478\"]\n";
        let e = err(load_text(open_turn, &[], &[]));
        assert!(e.contains("ice_servers") && e.contains("entry 0") && e.contains("credentials"), "{e}");
        assert!(err(load_text("[[ice_servers]]\nurl = \"stun:x\"\n", &[], &[])).contains("url"));
        assert!(!format!("{cfg:?}").contains("s3cret"), "Debug hides the secret");
    }

    #[test]
    fn auth_keys_load_from_the_file_and_the_environment_and_are_checked() {
        let file = "[auth]\nsecret = \"0123456789abcdef0123456789abcdef\"\n\
                    keys = [{ id = \"2026-12\", secret = \"the december key, thirty-two bytes long\" }]\n";
        let cfg = load_text(file, &[], &[]).expect("loads");
        assert_eq!(
            cfg.auth.key_pairs(),
            [("2026-12".to_owned(), "the december key, thirty-two bytes long".to_owned())]
        );
        assert!(!format!("{cfg:?}").contains("december key"), "Debug hides key secrets");
        let env = [("TUTTI_AUTH_KEYS", "[{ id = \"a\", secret = \"0123456789abcdef0123456789abcdef\" }]")];
        assert_eq!(load_text("", &env, &[]).expect("loads").auth.keys.len(), 1);
        let err = |r: Result<Config, ConfigError>| r.expect_err("refused").to_string();
        let short = "[auth]\nkeys = [{ id = \"a\", secret = \"short\" }]\n";
        assert!(err(load_text(short, &[], &[])).contains("auth.keys"));
        let twice = "[auth]\nkeys = [{ id = \"a\", secret = \"0123456789abcdef0123456789abcdef\" }, \
                     { id = \"a\", secret = \"0123456789abcdef0123456789abcdef\" }]\n";
        assert!(err(load_text(twice, &[], &[])).contains("unique"));
        assert!(err(load_text("[webhooks]\nsecret = \"short\"\n", &[], &[])).contains("webhooks.secret"));
        assert!(
            err(load_text("[room]\nempty_timeout_seconds = -1\n", &[], &[])).contains("room.empty_timeout_seconds")
        );
    }

    #[test]
    fn cluster_mode_needs_a_shared_secret_and_addresses() {
        let redis = [("TUTTI_CLUSTER_REDIS_URL", "redis://127.0.0.1:6379/0")];
        let err = |r: Result<Config, ConfigError>| r.expect_err("refused").to_string();
        assert!(err(load_text("", &redis, &[])).contains("api_url"));
        let addrs = "[cluster]\napi_url = \"http://127.0.0.2:8080\"\nmedia_addr = \"127.0.0.2:4000\"\n";
        assert!(err(load_text(addrs, &redis, &[])).contains("auth.secret"));
        let secret = [("auth.secret", "0123456789abcdef0123456789abcdef")];
        let cfg = load_text(addrs, &redis, &secret).expect("a complete cluster config loads");
        assert!(cfg.cluster.enabled());
        assert_eq!(
            cfg.cluster.redis_url, "redis://127.0.0.1:6379/0",
            "the environment variable comes from the key path"
        );
        assert!(!Config::default().cluster.enabled(), "off by default");
        // Rooms across nodes: when_full unless told, a mesh address that must parse.
        assert_eq!(cfg.cluster.room_spread, tutti_cluster::RoomSpread::WhenFull);
        let always = [("TUTTI_CLUSTER_REDIS_URL", "redis://127.0.0.1:6379/0"), ("TUTTI_CLUSTER_ROOM_SPREAD", "always")];
        let cfg = load_text(addrs, &always, &secret).expect("room_spread from the environment");
        assert_eq!(cfg.cluster.room_spread, tutti_cluster::RoomSpread::Always);
        let sometimes =
            [("TUTTI_CLUSTER_REDIS_URL", "redis://127.0.0.1:6379/0"), ("TUTTI_CLUSTER_ROOM_SPREAD", "sometimes")];
        assert!(err(load_text(addrs, &sometimes, &secret)).contains("sometimes"));
        let mesh = [("cluster.mesh_addr", "not an address"), secret[0]];
        assert!(err(load_text(addrs, &redis, &mesh)).contains("mesh_addr"));
        let mesh = [("cluster.mesh_addr", "127.0.0.2:0"), secret[0]];
        assert_eq!(load_text(addrs, &redis, &mesh).expect("a mesh address").cluster.mesh_addr, "127.0.0.2:0");
    }
}
