//! The cluster section of a node's configuration.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ClusterError;

/// How a node joins a cluster: where the shared Redis is, how this node is
/// reached, and the timings of heartbeats and leases.
///
/// Every node of a cluster needs the same Redis URL, the same
/// [`key_prefix`](Self::key_prefix) and the same [`secret`](Self::secret)
/// (and the server's `auth.secret`), and its own `api_url` and `media_addr`:
///
/// ```toml
/// [cluster]
/// redis_url = "rediss://redis.internal:6380/0"  # rediss:// = TLS; redis:// = plain
/// redis_password = ""                      # or TUTTI_CLUSTER_REDIS_PASSWORD (or redis://:secret@host in the URL)
/// redis_ca_file = "/etc/tutti/redis-ca.pem" # CA of a self-signed Redis; empty = the system's roots
/// node_id = "tutti-1"                      # default: node-<random>, new on every start
/// api_url = "http://127.0.0.2:8080"        # where other nodes redirect clients
/// media_addr = "127.0.0.2:3478"
/// mesh_addr = "10.0.0.2:3479"              # node-to-node media (UDP); empty = media_addr's IP, any port
/// room_spread = "when_full"                # "off" | "when_full" | "always"
/// capacity = 1400                          # participants this node is sized for
/// ```
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// Redis URL, e.g. `redis://127.0.0.1:6379/0`, or `rediss://…` for TLS
    /// (rustls; the server certificate is checked against the system's
    /// roots, or [`redis_ca_file`](Self::redis_ca_file)); empty = cluster
    /// mode off. A password may go in it (`redis://:secret@host`), but
    /// [`redis_password`](Self::redis_password) keeps it out of the URL.
    pub redis_url: String,
    /// Redis password (`AUTH`), overriding one in the URL; empty = the
    /// URL's, if any. Meant for the environment (`TUTTI_CLUSTER_REDIS_PASSWORD`,
    /// e.g. from a Kubernetes Secret) rather than a file.
    pub redis_password: String,
    /// The cluster's own secret (at least 32 bytes), the same on every
    /// node: the keys of node records, redirect tickets, control messages
    /// and the node-to-node media are derived from it, so that no one who
    /// holds only the token secret or a webhook secret can sign them.
    /// Meant for the environment (`TUTTI_CLUSTER_SECRET`). The server falls
    /// back to its `auth.secret`, with a warning, when it is empty.
    pub secret: String,
    /// Earlier (or coming) cluster secrets, each at least 32 bytes, whose
    /// signatures this node also accepts — records, tickets, control
    /// messages, room configs, rosters and events — and whose mesh keys
    /// also open node-to-node media; this node signs and seals with
    /// [`secret`](Self::secret) only. Rolls a new secret out without a
    /// split: list it here on every node, then make it the secret (the
    /// old one listed here), then drop the old one (docs/security.md).
    /// Meant for the environment (`TUTTI_CLUSTER_PREVIOUS_SECRETS`, comma-separated).
    pub previous_secrets: Vec<String>,
    /// A PEM file of the certificate authorities a `rediss://` server's
    /// certificate must chain to (a self-signed Redis); empty = the
    /// system's roots. Needs a `rediss://` URL.
    pub redis_ca_file: String,
    /// This node's id: letters, digits, `.`, `_`, `-` (at most 64); empty =
    /// generated at start (`node-` and 8 hex digits), new on every start.
    pub node_id: String,
    /// The URL other nodes redirect clients to (scheme, host, port), e.g.
    /// `https://tutti-1.example.org`.
    pub api_url: String,
    /// The media (UDP) address clients of this node reach, as advertised.
    pub media_addr: String,
    /// Prefix of every Redis key, so that several clusters (or tests) may
    /// share one Redis.
    pub key_prefix: String,
    /// How often the node rewrites its registry entry (and looks at its
    /// leases), in seconds.
    pub heartbeat_interval_seconds: f64,
    /// Lifetime of the registry entry: a node silent for this long is dead.
    /// At least twice the heartbeat interval.
    pub node_ttl_seconds: f64,
    /// Lifetime of a room's lease, renewed every third of it by the owner.
    pub lease_ttl_seconds: f64,
    /// Participants this node is sized for; `participants / capacity` is
    /// one of the three load figures.
    pub capacity: u32,
    /// The mixer's tick (20 ms): `tick p99 / budget` is one of the load figures.
    pub tick_budget_seconds: f64,
    /// Participants a new room is expected to bring; a placement not yet
    /// seen in the target's heartbeat weighs `room_size_estimate / capacity`.
    pub room_size_estimate: u32,
    /// Every Redis operation gives up after this long with
    /// [`ClusterError::Unavailable`].
    pub op_timeout_seconds: f64,
    /// Lifetime of a redirect ticket.
    pub ticket_ttl_seconds: f64,
    /// The API URLs nodes may have, as patterns where `*` stands for any
    /// run of characters but `/` (e.g. `https://*.tutti.example.org`),
    /// compared without case: a node record naming another URL is ignored
    /// even when signed (a second line behind the signature, should the
    /// secret leak). Empty = any URL a signed record names. This node's own
    /// `api_url` must match.
    pub allowed_api_urls: Vec<String>,
    /// The UDP address this node's node-to-node media (a room spread over
    /// several nodes) binds, e.g. `10.0.0.2:3479`; empty = the IP of
    /// [`media_addr`](Self::media_addr) with a port the system picks. The
    /// address bound is published in the node's signed record (with an
    /// unspecified IP such as `0.0.0.0`, `media_addr`'s IP is published).
    pub mesh_addr: String,
    /// When a join may land on another node than the room's owner, making
    /// the room span several nodes: [`RoomSpread`].
    pub room_spread: RoomSpread,
}

/// When a room spreads over several nodes (`cluster.room_spread`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RoomSpread {
    /// Never: a room lives on its owner alone (every join is sent there).
    Off,
    /// A join goes to the room's owner while it has room; when the owner is
    /// full, to the least-loaded node already in the room's span, else to
    /// the least-loaded node of the cluster.
    #[default]
    WhenFull,
    /// Every join goes to the least-loaded node (by participants), so a
    /// room spreads over the cluster from its first participants.
    Always,
}

impl RoomSpread {
    /// The config value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::WhenFull => "when_full",
            Self::Always => "always",
        }
    }
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            redis_url: String::new(),
            redis_password: String::new(),
            secret: String::new(),
            previous_secrets: Vec::new(),
            redis_ca_file: String::new(),
            node_id: String::new(),
            api_url: String::new(),
            media_addr: String::new(),
            key_prefix: "tutti:".to_owned(),
            heartbeat_interval_seconds: 1.0,
            node_ttl_seconds: 5.0,
            lease_ttl_seconds: 10.0,
            capacity: 1000,
            tick_budget_seconds: 0.020,
            room_size_estimate: 4,
            op_timeout_seconds: 0.5,
            ticket_ttl_seconds: 30.0,
            allowed_api_urls: Vec::new(),
            mesh_addr: String::new(),
            room_spread: RoomSpread::default(),
        }
    }
}

/// Debug output hides the passwords (of `redis_password` and in the URL).
impl std::fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let url = match self.redis_url.split_once('@') {
            Some((userinfo, host)) if userinfo.contains("://") => {
                let scheme = userinfo.split_once("://").map_or("", |(s, _)| s);
                format!("{scheme}://(credentials)@{host}")
            }
            _ => self.redis_url.clone(),
        };
        let password = if self.redis_password.is_empty() { "(none)" } else { "(set)" };
        f.debug_struct("ClusterConfig")
            .field("redis_url", &url)
            .field("redis_password", &password)
            .field("secret", &if self.secret.is_empty() { "(none)" } else { "(set)" })
            .field("previous_secrets", &format!("({} set)", self.previous_secrets.len()))
            .field("redis_ca_file", &self.redis_ca_file)
            .field("node_id", &self.node_id)
            .field("api_url", &self.api_url)
            .field("media_addr", &self.media_addr)
            .field("key_prefix", &self.key_prefix)
            .field("heartbeat_interval_seconds", &self.heartbeat_interval_seconds)
            .field("node_ttl_seconds", &self.node_ttl_seconds)
            .field("lease_ttl_seconds", &self.lease_ttl_seconds)
            .field("capacity", &self.capacity)
            .field("tick_budget_seconds", &self.tick_budget_seconds)
            .field("room_size_estimate", &self.room_size_estimate)
            .field("op_timeout_seconds", &self.op_timeout_seconds)
            .field("ticket_ttl_seconds", &self.ticket_ttl_seconds)
            .field("allowed_api_urls", &self.allowed_api_urls)
            .field("mesh_addr", &self.mesh_addr)
            .field("room_spread", &self.room_spread)
            .finish()
    }
}

/// Longest node id accepted.
pub const MAX_NODE_ID_BYTES: usize = 64;

impl ClusterConfig {
    /// This config with its [`node_id`](Self::node_id) filled in: as set,
    /// else `node-` and 8 random hex digits (what [`Cluster::start`](crate::Cluster::start)
    /// would pick), for a caller that needs the id before starting.
    pub fn with_node_id(mut self) -> Self {
        if self.node_id.is_empty() {
            self.node_id = generated_node_id();
        }
        self
    }

    /// Cluster mode is on when a Redis URL is set.
    pub fn enabled(&self) -> bool {
        !self.redis_url.is_empty()
    }

    /// Checks the values; the first wrong one is named in the error.
    pub fn validate(&self) -> Result<(), ClusterError> {
        let bad = |field: &'static str, reason: &str| Err(ClusterError::Config { field, reason: reason.to_owned() });
        if self.redis_url.is_empty() {
            return bad("redis_url", "must be set (cluster mode needs Redis)");
        }
        if !self.secret.is_empty() && self.secret.len() < 32 {
            return bad("secret", "must be at least 32 bytes, or empty to use auth.secret");
        }
        if self.previous_secrets.iter().any(|s| s.len() < 32) {
            return bad("previous_secrets", "every one must be at least 32 bytes (the secrets a roll replaces)");
        }
        if !self.redis_ca_file.is_empty() && !self.tls() {
            return bad("redis_ca_file", "is for TLS: the redis_url must start with rediss://");
        }
        if !self.node_id.is_empty() {
            validate_node_id(&self.node_id).map_err(|reason| ClusterError::Config { field: "node_id", reason })?;
        }
        if self.api_url.is_empty() {
            return bad("api_url", "must be set: other nodes redirect clients there");
        }
        if self.media_addr.is_empty() {
            return bad("media_addr", "must be set");
        }
        if !self.mesh_addr.is_empty() && self.mesh_addr.parse::<std::net::SocketAddr>().is_err() {
            return bad("mesh_addr", "must be empty or an address like 10.0.0.2:3479 (port 0 = any)");
        }
        if !self.api_url_allowed(&self.api_url) {
            return bad("allowed_api_urls", "does not match this node's own api_url");
        }
        let positive = |v: f64| v.is_finite() && v > 0.0 && v < 86_400.0;
        for (field, value) in [
            ("heartbeat_interval_seconds", self.heartbeat_interval_seconds),
            ("node_ttl_seconds", self.node_ttl_seconds),
            ("lease_ttl_seconds", self.lease_ttl_seconds),
            ("tick_budget_seconds", self.tick_budget_seconds),
            ("op_timeout_seconds", self.op_timeout_seconds),
            ("ticket_ttl_seconds", self.ticket_ttl_seconds),
        ] {
            if !positive(value) {
                return bad(field, "must be a positive number of seconds below a day");
            }
        }
        if self.node_ttl_seconds < 2.0 * self.heartbeat_interval_seconds {
            return bad("node_ttl_seconds", "must be at least twice heartbeat_interval_seconds");
        }
        if self.lease_ttl_seconds < self.node_ttl_seconds {
            return bad("lease_ttl_seconds", "must be at least node_ttl_seconds");
        }
        if self.op_timeout_seconds >= self.heartbeat_interval_seconds * 2.0 {
            return bad("op_timeout_seconds", "must be below twice heartbeat_interval_seconds");
        }
        if self.capacity == 0 {
            return bad("capacity", "must be at least 1");
        }
        Ok(())
    }

    /// Whether a node may have the API URL `url` ([`allowed_api_urls`](Self::allowed_api_urls)).
    pub fn api_url_allowed(&self, url: &str) -> bool {
        self.allowed_api_urls.is_empty() || self.allowed_api_urls.iter().any(|p| url_matches(p, url))
    }

    /// Whether the Redis URL asks for TLS.
    pub fn tls(&self) -> bool {
        self.redis_url.starts_with("rediss://") || self.redis_url.starts_with("valkeys://")
    }

    /// A Redis client for this config: the URL, the password of
    /// [`redis_password`](Self::redis_password) if set, RESP3 if asked
    /// (pub/sub pushes), and for `rediss://` the CAs of
    /// [`redis_ca_file`](Self::redis_ca_file) if set (else the system's).
    pub(crate) fn redis_client(&self, resp3: bool) -> Result<redis::Client, ClusterError> {
        use redis::IntoConnectionInfo as _;
        let bad_url = |e: redis::RedisError| ClusterError::Config { field: "redis_url", reason: e.to_string() };
        let info = self.redis_url.as_str().into_connection_info().map_err(bad_url)?;
        let mut settings = info.redis_settings().clone();
        if !self.redis_password.is_empty() {
            settings = settings.set_password(&self.redis_password);
        }
        if resp3 {
            settings = settings.set_protocol(redis::ProtocolVersion::RESP3);
        }
        let info = info.set_redis_settings(settings);
        if self.tls() {
            // rustls picks its crypto from a process-wide provider: ring's
            // unless the process installed another one first.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        if self.redis_ca_file.is_empty() {
            return redis::Client::open(info).map_err(bad_url);
        }
        let pem = std::fs::read(&self.redis_ca_file).map_err(|e| ClusterError::Config {
            field: "redis_ca_file",
            reason: format!("cannot read {}: {e}", self.redis_ca_file),
        })?;
        redis::Client::build_with_tls(info, redis::TlsCertificates { client_tls: None, root_cert: Some(pem) })
            .map_err(|e| ClusterError::Config { field: "redis_ca_file", reason: e.to_string() })
    }

    pub(crate) fn heartbeat_interval(&self) -> Duration {
        Duration::from_secs_f64(self.heartbeat_interval_seconds)
    }
    pub(crate) fn node_ttl_ms(&self) -> u64 {
        (self.node_ttl_seconds * 1000.0).round() as u64
    }
    pub(crate) fn lease_ttl_ms(&self) -> u64 {
        (self.lease_ttl_seconds * 1000.0).round() as u64
    }
    pub(crate) fn op_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.op_timeout_seconds)
    }
}

/// `url` against `pattern`, without case; `*` matches any run of bytes but `/`.
fn url_matches(pattern: &str, url: &str) -> bool {
    let (p, t) = (pattern.to_ascii_lowercase().into_bytes(), url.to_ascii_lowercase().into_bytes());
    let (mut i, mut j) = (0, 0);
    // The last `*` seen: the pattern index after it, and the text index it has matched up to.
    let mut star: Option<(usize, usize)> = None;
    while j < t.len() {
        if i < p.len() && p[i] == b'*' {
            star = Some((i + 1, j));
            i += 1;
        } else if i < p.len() && p[i] == t[j] {
            i += 1;
            j += 1;
        } else if let Some((after, upto)) = star
            && t[upto] != b'/'
        {
            // Let the `*` take one more byte and try again from there.
            star = Some((after, upto + 1));
            (i, j) = (after, upto + 1);
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&b| b == b'*')
}

/// `node-` and 8 random hex digits.
pub(crate) fn generated_node_id() -> String {
    let r = getrandom::u64().unwrap_or_else(|_| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos().into())
    });
    format!("node-{:08x}", r as u32)
}

/// A node id is safe in a key and in a lease value (`node:epoch`, so no `:`).
pub(crate) fn validate_node_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_NODE_ID_BYTES {
        return Err(format!("must be 1 to {MAX_NODE_ID_BYTES} bytes"));
    }
    if !id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')) {
        return Err("may hold only letters, digits, '.', '_' and '-'".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok() -> ClusterConfig {
        ClusterConfig {
            redis_url: "redis://127.0.0.1:6379".into(),
            api_url: "http://127.0.0.2:8080".into(),
            media_addr: "127.0.0.2:3478".into(),
            ..ClusterConfig::default()
        }
    }

    #[test]
    fn defaults_are_off_and_a_filled_config_is_valid() {
        assert!(!ClusterConfig::default().enabled());
        assert!(ok().validate().is_ok());
    }

    #[test]
    fn bad_values_are_named() {
        let field = |c: ClusterConfig| match c.validate() {
            Err(ClusterError::Config { field, .. }) => field,
            other => panic!("expected a config error, got {other:?}"),
        };
        assert_eq!(field(ClusterConfig { node_id: "a:b".into(), ..ok() }), "node_id");
        assert_eq!(field(ClusterConfig { api_url: String::new(), ..ok() }), "api_url");
        assert_eq!(field(ClusterConfig { node_ttl_seconds: 1.5, ..ok() }), "node_ttl_seconds");
        assert_eq!(field(ClusterConfig { lease_ttl_seconds: f64::NAN, ..ok() }), "lease_ttl_seconds");
        assert_eq!(field(ClusterConfig { capacity: 0, ..ok() }), "capacity");
        assert_eq!(field(ClusterConfig { mesh_addr: "nowhere".into(), ..ok() }), "mesh_addr");
        assert!(ClusterConfig { mesh_addr: "127.0.0.2:0".into(), ..ok() }.validate().is_ok());
    }

    #[test]
    fn api_url_patterns() {
        let c = ClusterConfig { allowed_api_urls: vec!["https://*.tutti.example.org".into()], ..ok() };
        assert!(c.api_url_allowed("https://n1.tutti.example.org"));
        assert!(c.api_url_allowed("HTTPS://N1.Tutti.Example.org"));
        assert!(!c.api_url_allowed("https://evil.example/x.tutti.example.org"), "* does not cross '/'");
        assert!(!c.api_url_allowed("https://n1.tutti.example.org.evil.net"));
        assert!(!c.api_url_allowed("http://n1.tutti.example.org"));
        assert!(url_matches("http://127.0.0.*:*", "http://127.0.0.2:8080"));
        assert!(!url_matches("http://127.0.0.*:*", "http://127.0.0.2:8080/x"));
        assert!(ClusterConfig::default().api_url_allowed("anything"), "no patterns: any URL");
        // The node's own URL must match.
        assert!(matches!(c.validate(), Err(ClusterError::Config { field: "allowed_api_urls", .. })));
    }

    #[test]
    fn debug_hides_the_passwords() {
        let c = ClusterConfig {
            redis_url: "rediss://user:hunter2@redis:6380/0".into(),
            redis_password: "s3cret".into(),
            ..ok()
        };
        let text = format!("{c:?}");
        assert!(!text.contains("hunter2") && !text.contains("s3cret"), "{text}");
        assert!(text.contains("rediss://(credentials)@redis:6380/0"), "{text}");
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let err = serde_json::from_str::<ClusterConfig>(r#"{"redis_url":"redis://x","colour":"red"}"#);
        assert!(err.is_err());
        let c: ClusterConfig = serde_json::from_str(r#"{"redis_url":"redis://x","capacity":7}"#).expect("valid json");
        assert_eq!((c.capacity, c.node_ttl_seconds, c.room_spread), (7, 5.0, RoomSpread::WhenFull));
        let c: ClusterConfig = serde_json::from_str(r#"{"room_spread":"always"}"#).expect("valid json");
        assert_eq!(c.room_spread, RoomSpread::Always);
        assert!(serde_json::from_str::<ClusterConfig>(r#"{"room_spread":"sometimes"}"#).is_err());
    }
}
