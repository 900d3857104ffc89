//! # ICE servers for clients: the `[[ice_servers]]` configuration
//!
//! Each entry is a STUN or TURN server the clients should use (tutti itself
//! is ICE-lite and needs none). Credentials are static (`username` +
//! `credential`, the same for everyone) or minted per client with the TURN
//! REST API shared secret coturn checks (`secret` + `ttl_seconds`), by
//! [`tutti_rtc::turn`]. Clients get them as JSON in the shape of
//! `RTCConfiguration.iceServers` (`GET /v1/rooms/{room}/ice-servers`) and,
//! on a WHIP join, as `Link: <url>; rel="ice-server"` headers (RFC 9725 §4.6).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tutti_rtc::{IceServer, IceServerConfig, TurnCredentials, TurnError};

/// The default lifetime of REST credentials: a day.
const DEFAULT_TTL_SECONDS: u64 = 86_400;

/// One `[[ice_servers]]` entry.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IceServerEntry {
    /// `stun:host:port`, `turn:host:port?transport=udp|tcp`, `turns:host:443?transport=tcp`.
    pub urls: Vec<String>,
    /// Static TURN username (with `credential`).
    pub username: String,
    /// Static TURN password (with `username`).
    pub credential: String,
    /// The TURN REST API shared secret (coturn `static-auth-secret`):
    /// per-client credentials instead of static ones.
    pub secret: String,
    /// How long REST credentials stay valid, in seconds.
    pub ttl_seconds: u64,
}

impl Default for IceServerEntry {
    fn default() -> Self {
        Self {
            urls: Vec::new(),
            username: String::new(),
            credential: String::new(),
            secret: String::new(),
            ttl_seconds: DEFAULT_TTL_SECONDS,
        }
    }
}

impl fmt::Debug for IceServerEntry {
    // Passwords and secrets stay out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IceServerEntry")
            .field("urls", &self.urls)
            .field("username", &self.username)
            .field("credential", &if self.credential.is_empty() { "" } else { "<redacted>" })
            .field("secret", &if self.secret.is_empty() { "" } else { "<redacted>" })
            .field("ttl_seconds", &self.ttl_seconds)
            .finish()
    }
}

/// Why an `[[ice_servers]]` entry is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IceConfigError {
    /// Both a shared secret and static credentials.
    #[error("give either `secret` (TURN REST API) or `username` and `credential`, not both")]
    SecretAndStatic,
    /// One of `username` and `credential` without the other.
    #[error("static credentials need both `username` and `credential`")]
    HalfStatic,
    /// A URL that would break a `Link` header or a JSON client (spaces, `<`, `>`, `"`, `,`, controls).
    #[error("URL {0:?} has a character not allowed in a STUN/TURN URL")]
    BadChar(String),
    /// What [`tutti_rtc::turn`] refuses.
    #[error(transparent)]
    Turn(#[from] TurnError),
}

impl IceServerEntry {
    /// The entry as [`tutti_rtc::turn`] takes it, checked.
    pub fn to_config(&self) -> Result<IceServerConfig, IceConfigError> {
        let has_static = !self.username.is_empty() || !self.credential.is_empty();
        let credentials = match (self.secret.is_empty(), has_static) {
            (false, true) => return Err(IceConfigError::SecretAndStatic),
            (false, false) => TurnCredentials::SharedSecret {
                secret: self.secret.clone(),
                ttl: Duration::from_secs(self.ttl_seconds),
            },
            (true, true) if self.username.is_empty() || self.credential.is_empty() => {
                return Err(IceConfigError::HalfStatic);
            }
            (true, true) => {
                TurnCredentials::Static { username: self.username.clone(), credential: self.credential.clone() }
            }
            (true, false) => TurnCredentials::None,
        };
        let bad = |c: char| c.is_control() || c.is_whitespace() || matches!(c, '<' | '>' | '"' | ',' | '\\');
        if let Some(url) = self.urls.iter().find(|u| u.chars().any(bad)) {
            return Err(IceConfigError::BadChar(url.clone()));
        }
        let config = IceServerConfig { urls: self.urls.clone(), credentials };
        config.validate()?;
        Ok(config)
    }
}

/// Checks every entry; the error names the entry (0-based) and what is wrong.
pub fn validate(entries: &[IceServerEntry]) -> Result<(), String> {
    for (i, e) in entries.iter().enumerate() {
        e.to_config().map_err(|err| format!("entry {i}: {err}"))?;
    }
    Ok(())
}

/// What to give the client `user` at `now_unix`: every valid entry, REST
/// credentials minted for `user` (entries are validated at startup; one
/// that is not valid is left out rather than sent broken).
pub fn for_client(entries: &[IceServerEntry], user: &str, now_unix: u64) -> Vec<IceServer> {
    for_client_until(entries, user, now_unix, None)
}

/// As [`for_client`], with REST credentials that expire no later than
/// `expires_at` (Unix seconds: the access token's expiry) when given: a
/// TURN server stops relaying for a client whose token ran out. Static
/// credentials cannot be bounded so (prefer `secret` entries).
pub fn for_client_until(
    entries: &[IceServerEntry],
    user: &str,
    now_unix: u64,
    expires_at: Option<u64>,
) -> Vec<IceServer> {
    entries
        .iter()
        .filter_map(|e| match expires_at {
            Some(exp) if !e.secret.is_empty() => {
                let ttl_seconds = e.ttl_seconds.min(exp.saturating_sub(now_unix)).max(1);
                IceServerEntry { ttl_seconds, ..e.clone() }.to_config().ok()
            }
            _ => e.to_config().ok(),
        })
        .map(|c| c.ice_server(user, now_unix))
        .collect()
}

/// A `Link` header value per URL, as WHIP specifies (RFC 9725 §4.6):
/// `<turn:host:3478?transport=udp>; rel="ice-server"; username="…"; credential="…"; credential-type="password"`.
pub fn link_headers(servers: &[IceServer]) -> Vec<String> {
    let quoted = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let mut out = Vec::new();
    for s in servers {
        for url in &s.urls {
            let mut v = format!("<{url}>; rel=\"ice-server\"");
            if let (Some(u), Some(c)) = (&s.username, &s.credential) {
                v.push_str(&format!(
                    "; username=\"{}\"; credential=\"{}\"; credential-type=\"password\"",
                    quoted(u),
                    quoted(c)
                ));
            }
            out.push(v);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(urls: &[&str]) -> IceServerEntry {
        IceServerEntry { urls: urls.iter().map(|u| (*u).to_owned()).collect(), ..IceServerEntry::default() }
    }

    #[test]
    fn entries_become_rest_static_or_no_credentials() {
        let rest = IceServerEntry {
            secret: "tutti-shared-secret".into(),
            ttl_seconds: 3600,
            ..entry(&["turn:127.0.0.1:3478?transport=tcp"])
        };
        let stat = IceServerEntry {
            username: "u".into(),
            credential: "p".into(),
            ..entry(&["turns:turn.test:443?transport=tcp"])
        };
        let stun = entry(&["stun:127.0.0.1:3478"]);
        let entries = [rest, stat, stun];
        assert_eq!(validate(&entries), Ok(()));
        let servers = for_client(&entries, "alice", 1_699_996_400);
        assert_eq!(servers.len(), 3);
        // The known vector of tutti_rtc::turn: expiry = now + ttl.
        assert_eq!(servers[0].username.as_deref(), Some("1700000000:alice"));
        assert_eq!(servers[0].credential.as_deref(), Some("BwnyJa/HTG0zUJCYTbcVxiyV3G8="));
        assert_eq!(servers[1].username.as_deref(), Some("u"));
        assert_eq!(servers[2].username, None);
        let links = link_headers(&servers);
        assert_eq!(
            links,
            [
                "<turn:127.0.0.1:3478?transport=tcp>; rel=\"ice-server\"; username=\"1700000000:alice\"; \
                 credential=\"BwnyJa/HTG0zUJCYTbcVxiyV3G8=\"; credential-type=\"password\"",
                "<turns:turn.test:443?transport=tcp>; rel=\"ice-server\"; username=\"u\"; credential=\"p\"; \
                 credential-type=\"password\"",
                "<stun:127.0.0.1:3478>; rel=\"ice-server\"",
            ]
        );
    }

    #[test]
    fn rest_credentials_expire_with_the_token() {
        let rest = IceServerEntry { secret: "s3cret".into(), ttl_seconds: 86_400, ..entry(&["turn:127.0.0.1:3478"]) };
        let now = 1_700_000_000;
        let expiry = |s: &[IceServer]| -> u64 {
            let user = s[0].username.as_deref().expect("REST username");
            user.split(':').next().and_then(|t| t.parse().ok()).expect("expiry:user")
        };
        assert_eq!(expiry(&for_client_until(std::slice::from_ref(&rest), "a", now, Some(now + 600))), now + 600);
        assert_eq!(expiry(&for_client_until(std::slice::from_ref(&rest), "a", now, Some(now + 999_999))), now + 86_400);
        assert_eq!(expiry(&for_client_until(std::slice::from_ref(&rest), "a", now, Some(now - 5))), now + 1, "never 0");
        assert_eq!(expiry(&for_client(&[rest], "a", now)), now + 86_400);
    }

    #[test]
    fn bad_entries_are_refused_with_their_index() {
        let both = IceServerEntry { secret: "s".into(), username: "u".into(), ..entry(&["turn:x"]) };
        assert_eq!(both.to_config(), Err(IceConfigError::SecretAndStatic));
        let half = IceServerEntry { username: "u".into(), ..entry(&["turn:x"]) };
        assert_eq!(half.to_config(), Err(IceConfigError::HalfStatic));
        let space = IceServerEntry { secret: "s".into(), ..entry(&["turn:x y"]) };
        assert_eq!(space.to_config(), Err(IceConfigError::BadChar("turn:x y".into())));
        let open_turn = entry(&["turn:x:3478"]);
        assert!(matches!(open_turn.to_config(), Err(IceConfigError::Turn(TurnError::TurnWithoutCredentials(_)))));
        let zero = IceServerEntry { secret: "s".into(), ttl_seconds: 0, ..entry(&["turn:x"]) };
        assert!(matches!(zero.to_config(), Err(IceConfigError::Turn(TurnError::BadTtl))));
        let err = validate(&[entry(&["stun:ok"]), entry(&["http://x"])]).expect_err("refused");
        assert!(err.starts_with("entry 1:") && err.contains("http://x"), "{err}");
        assert_eq!(for_client(&[entry(&["http://x"])], "a", 0), [], "an invalid entry is never sent");
    }

    #[test]
    fn debug_hides_secrets() {
        let e = IceServerEntry { secret: "hunter2".into(), credential: "hunter3".into(), ..entry(&["turn:x"]) };
        let shown = format!("{e:?}");
        assert!(!shown.contains("hunter2") && !shown.contains("hunter3"), "{shown}");
    }
}
