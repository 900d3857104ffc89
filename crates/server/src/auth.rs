//! Room-scoped access tokens: JSON Web Tokens (RFC 7519) signed with
//! HMAC-SHA256 (`HS256`, RFC 7518 §3.2) under the server's secret.
//!
//! A token grants one room (or `*`, every room) to one identity (`sub`)
//! with permissions (`perms`: `speak`, `listen`, `admin`) until it expires
//! (`exp`, seconds since the Unix epoch):
//!
//! ```json
//! {"room":"demo","sub":"alice","perms":["speak","listen"],"iat":1767225600,"exp":1767229200}
//! ```
//!
//! Keys rotate by id: with `auth.keys = [{ id, secret }, …]` tokens are
//! minted with the first key and carry its id in the header (`kid`), and a
//! token verifies under whichever listed key its `kid` names; a token
//! without `kid` verifies under `auth.secret` (so tokens minted before keys
//! were listed keep working). Other purposes (cluster tickets, webhook
//! signatures) take keys derived from a secret with a label
//! ([`derive_key`]), never the access-token key itself.
//!
//! Only `HS256` is accepted: the header's `alg` is checked before anything
//! else, so neither `none` nor a public-key algorithm can be slipped in. The
//! signature is checked (in constant time, by `ring`) before the claims are
//! even parsed. Built on `ring`'s HMAC and `base64`, both already in the
//! dependency graph (through webrtc-rs), rather than a JWT crate: HS256 is
//! a page of code, and this one is fuzzed (`fuzz/`, target
//! `signalling_json`) and checked against RFC 7515's worked example.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

/// Longest token looked at, in bytes (a real one is a few hundred).
pub const MAX_TOKEN_BYTES: usize = 4096;
/// Shortest secret accepted, in bytes (RFC 7518 §3.2: at least the hash size).
pub const MIN_SECRET_BYTES: usize = 32;
/// Longest identity (`sub`) accepted, in bytes.
pub const MAX_IDENTITY_BYTES: usize = 128;

/// Whether `id` is a room id: 1 to 64 ASCII letters, digits, `-` or `_`.
pub fn is_room_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Why a grant cannot be put in a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    /// The room is neither `*` nor a room id.
    #[error("a token's room is '*' or a room id (1 to 64 letters, digits, '-' or '_')")]
    Room,
    /// The identity is longer than [`MAX_IDENTITY_BYTES`].
    #[error("a token's identity is at most {MAX_IDENTITY_BYTES} bytes")]
    Identity,
    /// No key to sign with.
    #[error("no signing key is configured")]
    NoKey,
    /// The `attributes` claim breaks a bound.
    #[error("a token's attributes: {0}")]
    Attributes(#[from] crate::attributes::AttributeError),
}

/// Who may do what, from a verified token (or everything, when auth is off).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The room it is for; `*` = every room.
    pub room: String,
    /// The participant's identity (the token's `sub`).
    pub identity: String,
    /// May send audio that others hear.
    pub speak: bool,
    /// May join and hear the room.
    pub listen: bool,
    /// May manage rooms (create, delete, list with `*`) and other participants.
    pub admin: bool,
    /// The participant's attributes from the start (the `attributes` claim;
    /// reserved keys allowed: the backend sets them). Bounded as any
    /// participant's ([`crate::attributes::check`]).
    pub attributes: crate::attributes::Attributes,
}

impl Grant {
    /// A participant's grant for one room: `speak` and `listen`.
    pub fn participant(room: impl Into<String>, identity: impl Into<String>) -> Self {
        Self {
            room: room.into(),
            identity: identity.into(),
            speak: true,
            listen: true,
            admin: false,
            attributes: Default::default(),
        }
    }

    /// A listener's grant for one room: `listen` only.
    pub fn listener(room: impl Into<String>, identity: impl Into<String>) -> Self {
        Self { speak: false, ..Self::participant(room, identity) }
    }

    /// Every permission on every room.
    pub fn admin(identity: impl Into<String>) -> Self {
        Self { admin: true, ..Self::participant("*", identity) }
    }

    /// Whether it can be put in a token (and so came from one): its room is
    /// `*` or a room id, its identity at most [`MAX_IDENTITY_BYTES`].
    pub fn check(&self) -> Result<(), GrantError> {
        if self.room != "*" && !is_room_id(&self.room) {
            return Err(GrantError::Room);
        }
        if self.identity.len() > MAX_IDENTITY_BYTES {
            return Err(GrantError::Identity);
        }
        crate::attributes::check(&self.attributes)?;
        Ok(())
    }

    /// Whether it is for `room` (or every room).
    pub fn covers(&self, room: &str) -> bool {
        self.room == "*" || self.room == room
    }

    /// May see `room`: its participants and its event stream.
    pub fn may_see(&self, room: &str) -> bool {
        self.covers(room) && (self.listen || self.speak || self.admin)
    }

    /// May manage `room` and its participants.
    pub fn may_manage(&self, room: &str) -> bool {
        self.covers(room) && self.admin
    }

    /// May list every room.
    pub fn may_list(&self) -> bool {
        self.admin && self.room == "*"
    }
}

/// A permission, as the `perms` claim spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Perm {
    Speak,
    Listen,
    Admin,
}

/// The claims tutti reads and writes.
#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    room: String,
    sub: String,
    perms: Vec<Perm>,
    iat: u64,
    exp: u64,
    /// The participant's attributes (string keys and values).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    attributes: crate::attributes::Attributes,
}

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    alg: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    typ: Option<String>,
    /// The id of the key it is signed with (`auth.keys`); none: `auth.secret`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kid: Option<String>,
    /// RFC 7515 §4.1.11: extensions the recipient must understand. tutti understands none.
    #[serde(default, skip_serializing)]
    crit: Option<serde_json::Value>,
}

/// Why a token was refused. Every one is answered 401, with the code `token_missing`,
/// `token_expired` or (the rest) `token_invalid`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No token came with the request.
    #[error("an access token is required (Authorization: Bearer <token>, or ?token= on the WebSocket)")]
    Missing,
    /// Not three base64url parts of JSON, too long, or claims missing.
    #[error("the access token is malformed")]
    Malformed,
    /// The header names another algorithm than HS256, or critical extensions.
    #[error("the access token must be signed with HS256")]
    Algorithm,
    /// The signature does not match the server's secret.
    #[error("the access token's signature is not valid")]
    BadSignature,
    /// It expired.
    #[error("the access token has expired")]
    Expired,
    /// Its `attributes` claim breaks a bound (the backend that minted it must change it).
    #[error("the access token's attributes claim is refused: {0}")]
    Attributes(String),
}

/// Why a secret cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// Shorter than [`MIN_SECRET_BYTES`].
    #[error("auth.secret must be at least {MIN_SECRET_BYTES} bytes")]
    TooShort,
    /// The system's random source failed.
    #[error("no randomness for a secret: {0}")]
    Random(String),
    /// A key id that is empty, too long or listed twice.
    #[error("auth.keys: key id {0:?} is empty, longer than {MAX_KEY_ID_BYTES} bytes or listed twice")]
    KeyId(String),
}

/// Longest key id accepted, in bytes.
pub const MAX_KEY_ID_BYTES: usize = 64;

/// Signs and verifies tokens: with the plain secret (tokens without `kid`)
/// and with listed keys by id (tokens minted with the first one).
pub struct Auth {
    /// `auth.secret`: tokens without `kid`; `None` when only listed keys are configured.
    key: Option<ring::hmac::Key>,
    /// `auth.keys`, in order: (id, key). The first one mints.
    keys: Vec<(String, ring::hmac::Key)>,
    generated: bool,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|(id, _)| id.as_str()).collect();
        f.debug_struct("Auth").field("generated", &self.generated).field("ids", &ids).finish_non_exhaustive()
    }
}

/// A key for one purpose, derived from `secret`: HMAC-SHA256(key =
/// `secret`, message = `"tutti v1 " + purpose`), the scheme the cluster
/// crate uses too (`tutti_cluster::derive_key`: purposes `cluster-node`,
/// `cluster-ticket`). Knowing a derived key tells nothing of the secret or
/// of other purposes' keys.
pub fn derive_key(secret: &[u8], purpose: &str) -> [u8; 32] {
    let label = format!("tutti v1 {purpose}");
    let tag = ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret), label.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(tag.as_ref());
    out
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Auth {
    /// Tokens under `secret` (its bytes are the HMAC key).
    pub fn new(secret: &str) -> Result<Self, SecretError> {
        if secret.len() < MIN_SECRET_BYTES {
            return Err(SecretError::TooShort);
        }
        Ok(Self {
            key: Some(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes())),
            keys: Vec::new(),
            generated: false,
        })
    }

    /// Tokens under `secret` (those without `kid`; empty = none) and under
    /// `keys` (id, secret) by id, minted with the first listed key (with
    /// `secret` when none is listed). Ids are unique, 1 to
    /// [`MAX_KEY_ID_BYTES`] bytes; every secret at least [`MIN_SECRET_BYTES`].
    pub fn with_keys(secret: &str, keys: &[(String, String)]) -> Result<Self, SecretError> {
        let key = if secret.is_empty() && !keys.is_empty() { None } else { Self::new(secret)?.key };
        let mut listed: Vec<(String, ring::hmac::Key)> = Vec::with_capacity(keys.len());
        for (id, s) in keys {
            if id.is_empty() || id.len() > MAX_KEY_ID_BYTES || listed.iter().any(|(k, _)| k == id) {
                return Err(SecretError::KeyId(id.clone()));
            }
            if s.len() < MIN_SECRET_BYTES {
                return Err(SecretError::TooShort);
            }
            listed.push((id.clone(), ring::hmac::Key::new(ring::hmac::HMAC_SHA256, s.as_bytes())));
        }
        Ok(Self { key, keys: listed, generated: false })
    }

    /// Tokens under a fresh random secret (256 bits): they are valid for
    /// this process only.
    pub fn generate() -> Result<Self, SecretError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| SecretError::Random(e.to_string()))?;
        let mut auth = Self::new(&URL_SAFE_NO_PAD.encode(bytes))?;
        auth.generated = true;
        Ok(auth)
    }

    /// Whether the secret was generated at start (tokens die with the process).
    pub fn is_generated(&self) -> bool {
        self.generated
    }

    /// A token for `grant`, valid for `ttl` from `now` (Unix seconds). A
    /// grant that fails [`Grant::check`] is refused: its token would not verify.
    pub fn mint(&self, grant: &Grant, ttl: Duration, now: u64) -> Result<String, GrantError> {
        grant.check()?;
        let mut perms = Vec::new();
        for (on, perm) in [(grant.speak, Perm::Speak), (grant.listen, Perm::Listen), (grant.admin, Perm::Admin)] {
            if on {
                perms.push(perm);
            }
        }
        let claims = Claims {
            room: grant.room.clone(),
            sub: grant.identity.clone(),
            perms,
            iat: now,
            exp: now.saturating_add(ttl.as_secs()),
            attributes: grant.attributes.clone(),
        };
        let (kid, key) = match (self.keys.first(), &self.key) {
            (Some((id, key)), _) => (Some(id.clone()), key),
            (None, Some(key)) => (None, key),
            // `with_keys` keeps at least one of them.
            (None, None) => return Err(GrantError::NoKey),
        };
        let header = Header { alg: "HS256".to_owned(), typ: Some("JWT".to_owned()), kid, crit: None };
        let signing_input = format!("{}.{}", b64_json(&header), b64_json(&claims));
        let tag = ring::hmac::sign(key, signing_input.as_bytes());
        Ok(format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref())))
    }

    /// The grant of a token, if it is well-formed, HS256, signed with this
    /// secret and not expired at `now` (Unix seconds).
    pub fn verify(&self, token: &str, now: u64) -> Result<Grant, AuthError> {
        self.verify_until(token, now).map(|(grant, _)| grant)
    }

    /// As [`Auth::verify`], with the token's expiry (`exp`, Unix seconds).
    pub fn verify_until(&self, token: &str, now: u64) -> Result<(Grant, u64), AuthError> {
        if token.is_empty() {
            return Err(AuthError::Missing);
        }
        if token.len() > MAX_TOKEN_BYTES {
            return Err(AuthError::Malformed);
        }
        let mut parts = token.split('.');
        let (Some(h), Some(p), Some(s), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
            return Err(AuthError::Malformed);
        };
        let decode = |part: &str| URL_SAFE_NO_PAD.decode(part).map_err(|_| AuthError::Malformed);
        let header: Header = serde_json::from_slice(&decode(h)?).map_err(|_| AuthError::Malformed)?;
        if header.alg != "HS256" || header.crit.is_some() {
            return Err(AuthError::Algorithm);
        }
        let signature = decode(s)?;
        let signing_input = &token[..h.len() + 1 + p.len()];
        // The key its `kid` names, else the plain secret; an unknown id verifies under nothing.
        let key = match &header.kid {
            Some(kid) => self.keys.iter().find(|(id, _)| id == kid).map(|(_, k)| k),
            None => self.key.as_ref(),
        };
        let key = key.ok_or(AuthError::BadSignature)?;
        ring::hmac::verify(key, signing_input.as_bytes(), &signature).map_err(|_| AuthError::BadSignature)?;
        let claims: Claims = serde_json::from_slice(&decode(p)?).map_err(|_| AuthError::Malformed)?;
        if now >= claims.exp {
            return Err(AuthError::Expired);
        }
        let has = |perm| claims.perms.contains(&perm);
        let grant = Grant {
            speak: has(Perm::Speak),
            listen: has(Perm::Listen),
            admin: has(Perm::Admin),
            room: claims.room,
            identity: claims.sub,
            attributes: claims.attributes,
        };
        grant.check().map_err(|e| match e {
            GrantError::Attributes(e) => AuthError::Attributes(e.to_string()),
            _ => AuthError::Malformed,
        })?;
        Ok((grant, claims.exp))
    }
}

/// base64url of a value's JSON. Serialising these plain structs of strings
/// and numbers cannot fail.
fn b64_json(value: &impl Serialize) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(value).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "a test secret of at least thirty-two bytes";

    #[test]
    fn a_minted_token_verifies_with_its_grant() {
        let auth = Auth::new(SECRET).expect("secret");
        for grant in [Grant::participant("demo", "alice"), Grant::listener("demo", "bob"), Grant::admin("ops")] {
            let token = auth.mint(&grant, Duration::from_secs(60), 1_000).expect("mint");
            assert_eq!(auth.verify(&token, 1_000), Ok(grant.clone()));
            assert_eq!(auth.verify(&token, 1_059), Ok(grant));
            assert_eq!(auth.verify(&token, 1_060), Err(AuthError::Expired));
        }
    }

    #[test]
    fn tampering_other_secrets_and_other_algorithms_are_refused() {
        let auth = Auth::new(SECRET).expect("secret");
        let token = auth.mint(&Grant::listener("demo", "eve"), Duration::from_secs(60), 0).expect("mint");
        let other = Auth::new("another secret, also thirty-two bytes long").expect("secret");
        assert_eq!(other.verify(&token, 0), Err(AuthError::BadSignature));

        // Eve turns her listener token into a speaker's: same signature, new claims.
        let parts: Vec<&str> = token.split('.').collect();
        let claims =
            URL_SAFE_NO_PAD.encode(br#"{"room":"demo","sub":"eve","perms":["speak","listen"],"iat":0,"exp":60}"#);
        let forged = format!("{}.{claims}.{}", parts[0], parts[2]);
        assert_eq!(auth.verify(&forged, 0), Err(AuthError::BadSignature));
        // One flipped signature character.
        let mut flipped = token.clone().into_bytes();
        let last = flipped.len() - 2;
        flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(auth.verify(&String::from_utf8(flipped).expect("ascii"), 0), Err(AuthError::BadSignature));
        // alg "none", with or without a signature.
        let none = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
        assert_eq!(auth.verify(&format!("{none}.{}.", parts[1]), 0), Err(AuthError::Algorithm));
        assert_eq!(auth.verify(&format!("{none}.{}.{}", parts[1], parts[2]), 0), Err(AuthError::Algorithm));
        let crit = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","crit":["exp"]}"#);
        assert_eq!(auth.verify(&format!("{crit}.{}.{}", parts[1], parts[2]), 0), Err(AuthError::Algorithm));
        for bad in ["x", "a.b", "a.b.c.d", "!!.!!.!!", &"a".repeat(MAX_TOKEN_BYTES + 1)] {
            assert_eq!(auth.verify(bad, 0), Err(AuthError::Malformed), "{bad}");
        }
        assert_eq!(auth.verify("", 0), Err(AuthError::Missing));
    }

    #[test]
    fn hs256_matches_rfc_7515_appendix_a1() {
        // RFC 7515 A.1: the JWS Signing Input and key of the worked HS256 example.
        let key = URL_SAFE_NO_PAD
            .decode("AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow")
            .expect("key");
        let input = "eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ";
        let tag = ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key), input.as_bytes());
        assert_eq!(URL_SAFE_NO_PAD.encode(tag.as_ref()), "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk");
    }

    #[test]
    fn short_secrets_are_refused_and_generated_ones_are_marked() {
        assert!(Auth::new("short").is_err());
        let auth = Auth::generate().expect("random");
        assert!(auth.is_generated());
        let token = auth.mint(&Grant::admin("ops"), Duration::from_secs(5), unix_now()).expect("mint");
        assert!(auth.verify(&token, unix_now()).is_ok());
        assert!(!format!("{auth:?}").contains("key"), "the secret never reaches a log");
    }

    /// `signalling_json`, crash-7cb06e42: a grant for a room of a thousand
    /// control characters minted a token longer than `verify` reads.
    /// Rooms in tokens are room ids (or `*`) and identities are bounded, so
    /// every token `mint` makes verifies.
    #[test]
    fn only_grants_that_fit_a_token_are_minted() {
        let auth = Auth::new(SECRET).expect("secret");
        let long_room = Grant::participant("\u{3}".repeat(1000), "x");
        assert_eq!(auth.mint(&long_room, Duration::from_secs(60), 0), Err(GrantError::Room));
        let bad_room = Grant::participant("no spaces", "x");
        assert_eq!(auth.mint(&bad_room, Duration::from_secs(60), 0), Err(GrantError::Room));
        let long_identity = Grant::participant("a", "\u{3}".repeat(MAX_IDENTITY_BYTES + 1));
        assert_eq!(auth.mint(&long_identity, Duration::from_secs(60), 0), Err(GrantError::Identity));
        let widest = Grant::participant("r".repeat(64), "\u{3}".repeat(MAX_IDENTITY_BYTES));
        let token = auth.mint(&widest, Duration::from_secs(60), 0).expect("the widest grant mints");
        assert!(token.len() <= MAX_TOKEN_BYTES);
        assert_eq!(auth.verify(&token, 0), Ok(widest));
    }

    #[test]
    fn listed_keys_rotate_by_id_and_plain_tokens_keep_verifying() {
        let plain = Auth::new(SECRET).expect("secret");
        let old = plain.mint(&Grant::participant("demo", "alice"), Duration::from_secs(60), 0).expect("mint");
        let keys = vec![
            ("2026-12".to_owned(), "the december key, thirty-two bytes long".to_owned()),
            ("2026-11".to_owned(), "the november key, thirty-two bytes long".to_owned()),
        ];
        let auth = Auth::with_keys(SECRET, &keys).expect("keys");
        assert!(auth.verify(&old, 0).is_ok(), "a token without kid verifies under auth.secret");
        let new = auth.mint(&Grant::participant("demo", "bob"), Duration::from_secs(60), 0).expect("mint");
        let header: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(new.split('.').next().expect("header")).expect("b64"))
                .expect("json");
        assert_eq!(header["kid"], "2026-12", "minted with the first key");
        assert_eq!(auth.verify_until(&new, 0).map(|(g, exp)| (g.identity, exp)), Ok(("bob".to_owned(), 60)));
        // November's tokens verify while November is listed, and not after it is dropped.
        let november = Auth::with_keys(SECRET, &keys[1..]).expect("keys");
        let nov_token = november.mint(&Grant::listener("demo", "carol"), Duration::from_secs(60), 0).expect("mint");
        assert!(auth.verify(&nov_token, 0).is_ok());
        let rotated = Auth::with_keys(SECRET, &keys[..1]).expect("keys");
        assert_eq!(rotated.verify(&nov_token, 0), Err(AuthError::BadSignature), "its key is gone");
        // A token naming a listed id but signed with the plain secret is refused.
        assert_eq!(plain.verify(&new, 0), Err(AuthError::BadSignature), "kid unknown to a server without keys");
        // Only listed keys: tokens without kid are refused.
        let only_keys = Auth::with_keys("", &keys).expect("keys");
        assert_eq!(only_keys.verify(&old, 0), Err(AuthError::BadSignature));
        assert!(Auth::with_keys(SECRET, &[keys[0].clone(), keys[0].clone()]).is_err(), "ids are unique");
        assert!(Auth::with_keys(SECRET, &[(String::new(), keys[0].1.clone())]).is_err(), "ids are not empty");
        assert!(Auth::with_keys(SECRET, &[("a".to_owned(), "short".to_owned())]).is_err());
        assert!(!format!("{auth:?}").contains("december"), "secrets stay out of Debug");
    }

    #[test]
    fn derived_keys_differ_by_label_and_from_the_secret() {
        let a = derive_key(SECRET.as_bytes(), "cluster-ticket");
        let b = derive_key(SECRET.as_bytes(), "webhook");
        assert_ne!(a, b);
        assert_ne!(&a[..], SECRET.as_bytes());
        assert_eq!(a, derive_key(SECRET.as_bytes(), "cluster-ticket"), "deterministic");
        let by_hand = ring::hmac::sign(
            &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, SECRET.as_bytes()),
            b"tutti v1 cluster-ticket",
        );
        assert_eq!(&a[..], by_hand.as_ref(), "the cluster crate's scheme");
    }

    #[test]
    fn grants_cover_their_room_only() {
        let g = Grant::participant("a", "x");
        assert!(g.may_see("a") && !g.may_see("b") && !g.may_manage("a") && !g.may_list());
        let admin = Grant::admin("ops");
        assert!(admin.may_see("b") && admin.may_manage("b") && admin.may_list());
        let room_admin = Grant { admin: true, ..Grant::participant("a", "host") };
        assert!(room_admin.may_manage("a") && !room_admin.may_manage("b") && !room_admin.may_list());
    }
}
