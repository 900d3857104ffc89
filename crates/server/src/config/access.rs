//! Who may call the API: `[auth]` (the token secret, rotation keys, or no
//! tokens on loopback) and `[cors]` (which other origins' pages may).

use serde::{Deserialize, Serialize};

/// CORS (`[cors]`): which other origins' web pages may call the API.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CorsConfig {
    /// Origins (`https://app.example.com`, scheme, host and port, no path)
    /// whose pages may call the API; empty = same origin only (no CORS
    /// headers at all). `"*"` alone = any origin: for development only. A
    /// loopback host may take any port: `http://localhost:*`,
    /// `http://127.0.0.1:*`, `http://[::1]:*` (an SDK app's dev server).
    /// Cookies are never allowed (tokens travel in `Authorization`).
    pub allowed_origins: Vec<String>,
}

/// The secret of `tutti serve --dev` and `tutti token --dev`: fixed and
/// public (it is in the source), so links and tokens survive a restart on
/// a developer's machine; `--dev` refuses any address but loopback.
pub const DEV_SECRET: &str = "tutti --dev: a fixed, public development secret; never use it in production";

/// The loopback origins of any port (`tutti serve --dev` allows them).
pub const LOOPBACK_ORIGINS: [&str; 3] = ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"];

/// Whether `origin` (as a browser sends it) matches the allowed entry
/// `entry`: the same text, or a loopback entry's any port (`…:*`).
pub fn origin_matches(entry: &str, origin: &str) -> bool {
    match entry.strip_suffix('*') {
        Some(prefix) if LOOPBACK_ORIGINS.contains(&entry) => origin
            .strip_prefix(prefix)
            .is_some_and(|port| !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit())),
        _ => entry == origin,
    }
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
        for o in origins.iter().filter(|o| !LOOPBACK_ORIGINS.contains(&o.as_str())) {
            if o.ends_with(":*") {
                return Err(format!("'{o}': any port (':*') is for loopback only: {}", LOOPBACK_ORIGINS.join(", ")));
            }
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
