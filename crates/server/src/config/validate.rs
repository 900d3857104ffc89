//! The checks after loading: every value's range, the features' settings
//! and the rules that join keys (tokens off only on loopback, a cluster's
//! shared secret).

use std::net::SocketAddr;

use super::error::ConfigError;
use super::{Config, parse_advertise};

impl Config {
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
        if l.max_connections == 0 || l.max_connections_per_address == 0 || l.max_connections_per_identity == 0 {
            return invalid(
                "limits.max_connections",
                "limits.max_connections, max_connections_per_address and max_connections_per_identity must be at least 1",
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
        if !(l.data_messages_per_second.is_finite() && (0.0..=1e6).contains(&l.data_messages_per_second))
            || l.data_message_burst == 0
        {
            return invalid(
                "limits.data_messages_per_second",
                "must be within 0 (no limit) to 1000000, with data_message_burst at least 1",
            );
        }
        // A socket's message over ws_max_message_bytes is refused before it is read (1009), and a
        // backend's body over max_body_bytes (413): those bound a payload too, whatever this says.
        if l.data_max_bytes == 0 {
            return invalid("limits.data_max_bytes", "must be at least 1");
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
        self.sip.check().map_err(|(key, message)| ConfigError::Invalid { key, message })?;
        crate::cidr::parse_all(&l.trusted_proxies)
            .map_err(|message| ConfigError::Invalid { key: "limits.trusted_proxies", message })?;
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
            if self.webhooks.secret.is_empty() && self.cluster.enabled() {
                return invalid(
                    "webhooks.secret",
                    "in cluster mode webhooks need their own webhooks.secret (at least 32 bytes): signed with \
                     auth.secret, every webhook receiver could mint admin tokens for the whole cluster"
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
}
