//! # ICE servers for clients: STUN/TURN URLs and their credentials
//!
//! Clients on networks where neither UDP nor a direct TCP connection to the
//! media port gets out need a TURN relay (coturn beside tutti, TLS on 443).
//! The server tells each client which ICE servers to use, in the shape of
//! the browser's `RTCIceServer` (`{"urls": [...], "username": ..., "credential": ...}`).
//!
//! Credentials are either static (one username/password for everyone) or
//! minted per participant with the TURN REST API scheme coturn implements
//! with `use-auth-secret` / `static-auth-secret`:
//!
//! ```text
//! username   = "<expiry, unix seconds>:<user id>"
//! credential = base64(HMAC-SHA1(shared secret, username))
//! ```
//!
//! coturn recomputes the HMAC with its copy of the secret and refuses the
//! username once its expiry has passed, so a leaked credential dies with
//! its TTL. Pure functions: the caller passes the time in.

use std::fmt;
use std::time::Duration;

use base64::Engine as _;
use serde::Serialize;

/// What a browser gets: one entry of `RTCConfiguration.iceServers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IceServer {
    /// `stun:`, `turn:` or `turns:` URLs (RFC 7064/7065).
    pub urls: Vec<String>,
    /// The TURN username, if the server needs one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The TURN password, if the server needs one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
}

/// How a configured ICE server's credentials are made.
#[derive(Clone, PartialEq, Eq)]
pub enum TurnCredentials {
    /// None: a STUN server, or a TURN server open to all (do not).
    None,
    /// The same username and password for every client.
    Static {
        /// The username.
        username: String,
        /// The password.
        credential: String,
    },
    /// The TURN REST API (coturn `static-auth-secret`): per-client
    /// credentials valid for `ttl`.
    SharedSecret {
        /// The secret coturn holds too.
        secret: String,
        /// How long minted credentials stay valid.
        ttl: Duration,
    },
}

impl fmt::Debug for TurnCredentials {
    // Secrets and passwords stay out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            Self::Static { username, .. } => {
                f.debug_struct("Static").field("username", username).field("credential", &"<redacted>").finish()
            }
            Self::SharedSecret { ttl, .. } => {
                f.debug_struct("SharedSecret").field("secret", &"<redacted>").field("ttl", ttl).finish()
            }
        }
    }
}

/// A configured ICE server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IceServerConfig {
    /// Its URLs (`stun:host:port`, `turn:host:port?transport=udp|tcp`, `turns:host:443?transport=tcp`).
    pub urls: Vec<String>,
    /// Its credentials.
    pub credentials: TurnCredentials,
}

/// Why an ICE server configuration is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TurnError {
    /// No URL.
    #[error("an ICE server needs at least one URL")]
    NoUrls,
    /// A URL that is not `stun:`, `stuns:`, `turn:` or `turns:`.
    #[error("not a STUN/TURN URL: {0:?}")]
    BadUrl(String),
    /// A `turn:`/`turns:` URL with no credentials.
    #[error("TURN URL {0:?} needs credentials")]
    TurnWithoutCredentials(String),
    /// A shared secret or static password that is empty.
    #[error("empty TURN secret or credential")]
    EmptySecret,
    /// A TTL of zero (or over a year).
    #[error("a TURN credential TTL must be between 1 s and 365 days")]
    BadTtl,
}

impl IceServerConfig {
    /// Checks the URLs and credentials.
    pub fn validate(&self) -> Result<(), TurnError> {
        if self.urls.is_empty() {
            return Err(TurnError::NoUrls);
        }
        for url in &self.urls {
            let scheme = url.split_once(':').map(|(s, rest)| (s, rest.is_empty()));
            let is_turn = match scheme {
                Some(("stun" | "stuns", false)) => false,
                Some(("turn" | "turns", false)) => true,
                _ => return Err(TurnError::BadUrl(url.clone())),
            };
            if is_turn && self.credentials == TurnCredentials::None {
                return Err(TurnError::TurnWithoutCredentials(url.clone()));
            }
        }
        match &self.credentials {
            TurnCredentials::None => {}
            TurnCredentials::Static { credential, .. } if credential.is_empty() => return Err(TurnError::EmptySecret),
            TurnCredentials::Static { .. } => {}
            TurnCredentials::SharedSecret { secret, ttl } => {
                if secret.is_empty() {
                    return Err(TurnError::EmptySecret);
                }
                if ttl.is_zero() || *ttl > Duration::from_secs(365 * 86_400) {
                    return Err(TurnError::BadTtl);
                }
            }
        }
        Ok(())
    }

    /// The entry to give the client `user_id` at `now_unix` (seconds since
    /// the Unix epoch): static credentials as they are, or REST credentials
    /// expiring at `now_unix + ttl`.
    pub fn ice_server(&self, user_id: &str, now_unix: u64) -> IceServer {
        let (username, credential) = match &self.credentials {
            TurnCredentials::None => (None, None),
            TurnCredentials::Static { username, credential } => (Some(username.clone()), Some(credential.clone())),
            TurnCredentials::SharedSecret { secret, ttl } => {
                let (u, c) = rest_credentials(secret, user_id, now_unix.saturating_add(ttl.as_secs()));
                (Some(u), Some(c))
            }
        };
        IceServer { urls: self.urls.clone(), username, credential }
    }
}

/// The TURN REST API credentials (coturn `use-auth-secret`) for `user_id`,
/// valid until `expiry_unix`: `("<expiry>:<user_id>", base64(HMAC-SHA1(secret, username)))`.
pub fn rest_credentials(secret: &str, user_id: &str, expiry_unix: u64) -> (String, String) {
    let username = format!("{expiry_unix}:{user_id}");
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, secret.as_bytes());
    let tag = ring::hmac::sign(&key, username.as_bytes());
    let credential = base64::engine::general_purpose::STANDARD.encode(tag.as_ref());
    (username, credential)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rest_credentials_match_a_known_vector() {
        // Expected value from:
        //   echo -n '1700000000:alice' | openssl dgst -sha1 -hmac 'tutti-shared-secret' -binary | base64
        // (python3: base64.b64encode(hmac.new(b'tutti-shared-secret', b'1700000000:alice', hashlib.sha1).digest()))
        let (u, c) = rest_credentials("tutti-shared-secret", "alice", 1_700_000_000);
        assert_eq!(u, "1700000000:alice");
        assert_eq!(c, "BwnyJa/HTG0zUJCYTbcVxiyV3G8=");
    }

    #[test]
    fn shared_secret_credentials_expire_after_the_ttl() {
        let cfg = IceServerConfig {
            urls: vec!["turn:127.0.0.1:3478?transport=udp".into(), "turns:turn.test:443?transport=tcp".into()],
            credentials: TurnCredentials::SharedSecret {
                secret: "tutti-shared-secret".into(),
                ttl: Duration::from_secs(3600),
            },
        };
        assert_eq!(cfg.validate(), Ok(()));
        let s = cfg.ice_server("alice", 1_699_996_400);
        assert_eq!(s.username.as_deref(), Some("1700000000:alice"));
        assert_eq!(s.credential.as_deref(), Some("BwnyJa/HTG0zUJCYTbcVxiyV3G8="));
        let json = serde_json::to_value(&s).expect("plain strings serialize");
        assert_eq!(
            json,
            serde_json::json!({
                "urls": ["turn:127.0.0.1:3478?transport=udp", "turns:turn.test:443?transport=tcp"],
                "username": "1700000000:alice",
                "credential": "BwnyJa/HTG0zUJCYTbcVxiyV3G8="
            })
        );
    }

    #[test]
    fn stun_only_servers_serialize_without_credentials() {
        let cfg = IceServerConfig { urls: vec!["stun:127.0.0.1:3478".into()], credentials: TurnCredentials::None };
        assert_eq!(cfg.validate(), Ok(()));
        let json = serde_json::to_string(&cfg.ice_server("x", 0)).expect("plain strings serialize");
        assert_eq!(json, r#"{"urls":["stun:127.0.0.1:3478"]}"#);
    }

    #[test]
    fn bad_configs_are_refused() {
        let stat = TurnCredentials::Static { username: "u".into(), credential: "p".into() };
        let mk = |urls: &[&str], credentials: TurnCredentials| IceServerConfig {
            urls: urls.iter().map(|s| s.to_string()).collect(),
            credentials,
        };
        assert_eq!(mk(&[], stat.clone()).validate(), Err(TurnError::NoUrls));
        assert_eq!(mk(&["http://x"], stat.clone()).validate(), Err(TurnError::BadUrl("http://x".into())));
        assert_eq!(mk(&["turn:"], stat.clone()).validate(), Err(TurnError::BadUrl("turn:".into())));
        assert_eq!(
            mk(&["turn:x:3478"], TurnCredentials::None).validate(),
            Err(TurnError::TurnWithoutCredentials("turn:x:3478".into()))
        );
        let empty = TurnCredentials::SharedSecret { secret: String::new(), ttl: Duration::from_secs(60) };
        assert_eq!(mk(&["turn:x"], empty).validate(), Err(TurnError::EmptySecret));
        let zero = TurnCredentials::SharedSecret { secret: "s".into(), ttl: Duration::ZERO };
        assert_eq!(mk(&["turn:x"], zero).validate(), Err(TurnError::BadTtl));
        assert_eq!(mk(&["turn:x"], stat).validate(), Ok(()));
    }

    #[test]
    fn debug_hides_secrets() {
        let c = TurnCredentials::SharedSecret { secret: "hunter2".into(), ttl: Duration::from_secs(1) };
        assert!(!format!("{c:?}").contains("hunter2"));
        let c = TurnCredentials::Static { username: "u".into(), credential: "hunter2".into() };
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
