//! The server's settings, in layers: defaults in code, a TOML file over
//! them (unknown keys rejected), `TUTTI_*` environment variables derived
//! from the key path (`room.max_speakers` → `TUTTI_ROOM_MAX_SPEAKERS`),
//! then `key=value` overrides (the command line's flags), then validation.
//! `deploy/tutti.toml` is the commented sample; a test keeps it equal to
//! the defaults.
//!
//! `Config` and its top-level keys are here; each part in its own file:
//! the sections `[room]` (`room`), `[limits]` (`limits`), `[auth]` and
//! `[cors]` (`access`), the features' sections (`features`: recording,
//! playback, whisper, breakout, webhooks, RTP out and in); `[sip]` (`sip`, its
//! `[[sip.outbound]]` in `outbound`); the layers
//! (`load`), the checks (`validate`) and what a refusal says (`error`).

mod access;
mod error;
mod features;
mod limits;
mod load;
mod outbound;
mod room;
mod sip;
#[cfg(test)]
mod tests;
mod validate;

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use access::{AuthConfig, AuthKey, CorsConfig, DEV_SECRET, LOOPBACK_ORIGINS, origin_matches};
pub use error::ConfigError;
pub use features::{
    BreakoutSettings, PlaybackSettings, RecordingSettings, RtpInConfig, RtpOutSettings, WebhookSettings,
    WhisperSettings,
};
pub use limits::Limits;
pub use outbound::OutboundConfig;
pub use room::RoomDefaults;
pub use sip::{Challenge, DIGESTS, KeyAction, MAX_PIN, SipConfig, SrtpMode, TrunkConfig};

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
    /// The SIP edge: phones and PBXs call rooms (docs/features/sip.md); off by default.
    pub sip: SipConfig,
    /// STUN/TURN servers the clients should use (`[[ice_servers]]`; see
    /// [`crate::ice`]): given to each client before it makes its offer.
    pub ice_servers: Vec<crate::ice::IceServerEntry>,
    /// Cross-origin access to the API from web apps on other origins.
    pub cors: CorsConfig,
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
            sip: SipConfig::default(),
            ice_servers: Vec::new(),
            cors: CorsConfig::default(),
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: "text".to_owned(),
            filter: "info,rtc=warn,rtc_ice=warn,rtc_dtls=error,rtc_srtp=warn,rsipstack=warn".to_owned(),
        }
    }
}

impl Config {
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
