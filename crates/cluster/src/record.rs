//! Keys derived from the cluster's shared secret, and the signature that
//! makes a node's registry record (`node:<id>`) trustworthy.
//!
//! Redis is shared state, not an authority: anyone who can write to it
//! could otherwise add a `node:<id>` hash with an API URL of their choosing
//! and a `lease:<r>` naming it, and every node would send that room's
//! clients there (a `307`, a WebSocket `moved`). So each node signs the
//! fields of its record with a key derived from the secret all nodes share,
//! and a record whose signature does not check out is ignored (logged,
//! counted as `tutti_cluster_node_records_rejected_total`): never placed on,
//! never redirected to.
//!
//! Keys, one per purpose: `HMAC-SHA256(key = secret, message = "tutti v1 " + purpose)`
//! ([`derive_key`]); the cluster uses the purposes `cluster-node` (records),
//! `cluster-ticket` (redirect tickets), `cluster-control` (room control
//! messages between the nodes of a span) and `cluster-room-config` (the
//! config stored with a room), `cluster-event` (room events between
//! nodes) and `cluster-roster` (rosters' entries), the last three with
//! [`PartsKey`].
//!
//! The signature (field `sig`, base64url) covers the node id and every
//! field but `placements` and `joins` (which other nodes' claims and joins
//! bump between heartbeats; a forged count only skews placement for a
//! second), each as
//! a length-prefixed name and value, so no field can be shifted into
//! another. A second signature (field `at_sig`) covers the same and the
//! time of writing (`at`, Unix ms): a record is trusted only while that
//! time is within `node_ttl_seconds` of the reader's clock, so a node's
//! genuine record kept and written back once the node is gone names no
//! node ([`RecordKey::verify_fresh`]).

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::hmac;

/// Purpose of the key that signs node records.
pub const NODE_RECORD_PURPOSE: &str = "cluster-node";
/// Purpose of the key that signs redirect tickets.
pub const TICKET_PURPOSE: &str = "cluster-ticket";
/// Purpose of the key that signs room control messages (see `control`).
pub const CONTROL_PURPOSE: &str = "cluster-control";
/// Purpose of the key that signs the config stored with a room.
pub const ROOM_CONFIG_PURPOSE: &str = "cluster-room-config";
/// Purpose of the key that signs room events between nodes (see `events`).
pub const EVENT_PURPOSE: &str = "cluster-event";
/// Purpose of the key that signs the entries of rosters (see `roster`).
pub const ROSTER_PURPOSE: &str = "cluster-roster";

/// The fields of a node record the signature covers, in order.
pub(crate) const SIGNED_FIELDS: [&str; 7] =
    ["api_url", "media_addr", "state", "participants", "capacity", "cpu", "tick_p99_seconds"];
/// Fields covered when present, after [`SIGNED_FIELDS`]: a record of a node
/// from before they existed verifies without them, and one that has them
/// cannot lose them (the signature would no longer verify).
pub(crate) const OPTIONAL_SIGNED_FIELDS: [&str; 3] = ["mesh_addr", "number", "sip_addr"];

/// The key for one purpose, derived from the shared secret:
/// `HMAC-SHA256(key = secret, message = "tutti v1 " + purpose)`.
pub fn derive_key(secret: &[u8], purpose: &str) -> [u8; 32] {
    let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, secret), format!("tutti v1 {purpose}").as_bytes());
    let mut key = [0u8; 32];
    key.copy_from_slice(tag.as_ref());
    key
}

/// The key one purpose signs with (from `cluster.secret`) and the keys it
/// also accepts (from `cluster.previous_secrets`, while a new secret rolls
/// out): a signature verifies under any of them, and only the first signs.
pub(crate) struct KeyRing {
    sign: hmac::Key,
    accept: Vec<hmac::Key>,
}

impl KeyRing {
    /// A ring of the one key `key` (already derived for its purpose).
    pub fn new(key: &[u8]) -> Self {
        Self { sign: hmac::Key::new(hmac::HMAC_SHA256, key), accept: Vec::new() }
    }

    /// A ring of the key of `purpose` derived from `secret`.
    pub fn derived(secret: &[u8], purpose: &str) -> Self {
        Self::new(&derive_key(secret, purpose))
    }

    /// Also accepts signatures under `key` (already derived for the purpose).
    pub fn accept(&mut self, key: &[u8]) {
        self.accept.push(hmac::Key::new(hmac::HMAC_SHA256, key));
    }

    /// The key that signs.
    pub fn signer(&self) -> &hmac::Key {
        &self.sign
    }

    /// Whether `tag` is the HMAC of `message` under one of the keys (each
    /// compared in constant time).
    pub fn verifies(&self, message: &[u8], tag: &[u8]) -> bool {
        std::iter::once(&self.sign).chain(&self.accept).any(|k| hmac::verify(k, message, tag).is_ok())
    }
}

/// `base64url(payload) "." base64url(HMAC-SHA256(key, payload))`: the
/// shape of tickets and control messages.
pub(crate) fn seal_signed(key: &hmac::Key, payload: &[u8]) -> String {
    let tag = hmac::sign(key, payload);
    format!("{}.{}", URL_SAFE_NO_PAD.encode(payload), URL_SAFE_NO_PAD.encode(tag.as_ref()))
}

/// The JSON payload of a [`seal_signed`] token of at most `max_bytes`,
/// its tag checked (in constant time) before anything reads the payload;
/// else `malformed` (too long, not two base64url parts, not the JSON) or
/// `bad_tag`.
pub(crate) fn open_signed<T: serde::de::DeserializeOwned, E>(
    key: &KeyRing,
    token: &str,
    max_bytes: usize,
    (malformed, bad_tag): (E, E),
) -> Result<T, E> {
    let payload = (token.len() <= max_bytes)
        .then(|| token.split_once('.'))
        .flatten()
        .and_then(|(payload, tag)| Some((URL_SAFE_NO_PAD.decode(payload).ok()?, URL_SAFE_NO_PAD.decode(tag).ok()?)));
    let Some((payload, tag)) = payload else { return Err(malformed) };
    if !key.verifies(&payload, &tag) {
        return Err(bad_tag);
    }
    serde_json::from_slice(&payload).map_err(|_| malformed)
}

/// 128 random bits as 32 hex digits: a ticket's or control message's nonce.
pub(crate) fn fresh_nonce() -> Result<String, getrandom::Error> {
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce)?;
    Ok(nonce.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `s` has the shape of a [`fresh_nonce`].
pub(crate) fn is_nonce(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Signs and checks node records.
pub(crate) struct RecordKey {
    key: KeyRing,
}

impl RecordKey {
    pub fn new(secret: &[u8]) -> Self {
        Self { key: KeyRing::derived(secret, NODE_RECORD_PURPOSE) }
    }

    /// Also accepts records signed under `secret` (a previous cluster secret).
    pub fn also_accept(mut self, secret: &[u8]) -> Self {
        self.key.accept(&derive_key(secret, NODE_RECORD_PURPOSE));
        self
    }

    fn message<'a>(id: &str, value: impl Fn(&str) -> Option<&'a str>) -> Option<Vec<u8>> {
        let mut m = Vec::with_capacity(256);
        let mut put = |bytes: &[u8]| {
            m.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
            m.extend_from_slice(bytes);
        };
        put(b"node");
        put(id.as_bytes());
        for field in SIGNED_FIELDS {
            put(field.as_bytes());
            put(value(field)?.as_bytes());
        }
        for field in OPTIONAL_SIGNED_FIELDS {
            if let Some(v) = value(field) {
                put(field.as_bytes());
                put(v.as_bytes());
            }
        }
        Some(m)
    }

    /// The `sig` of a record with `fields` (every one of [`SIGNED_FIELDS`]).
    pub fn sign(&self, id: &str, fields: &[(&str, String)]) -> String {
        let message =
            Self::message(id, |k| fields.iter().find(|(f, _)| *f == k).map(|(_, v)| v.as_str())).unwrap_or_default();
        URL_SAFE_NO_PAD.encode(hmac::sign(self.key.signer(), &message).as_ref())
    }

    /// The `at_sig` of a record with `fields` signed at `at_ms` (Unix ms,
    /// in the field `at`): the `sig` message followed by `at`, so that a
    /// record kept and written back later is known for what it is. A
    /// separate field, so that a node from before it still reads `sig`.
    pub fn sign_at(&self, id: &str, fields: &[(&str, String)], at_ms: u64) -> String {
        let at = at_ms.to_string();
        let value = |k: &str| match k {
            "at" => Some(at.as_str()),
            _ => fields.iter().find(|(f, _)| *f == k).map(|(_, v)| v.as_str()),
        };
        let message = Self::message_at(id, value).unwrap_or_default();
        URL_SAFE_NO_PAD.encode(hmac::sign(self.key.signer(), &message).as_ref())
    }

    fn message_at<'a>(id: &str, value: impl Fn(&str) -> Option<&'a str>) -> Option<Vec<u8>> {
        let mut m = Self::message(id, &value)?;
        let at = value("at")?;
        for bytes in [b"at".as_slice(), at.as_bytes()] {
            m.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
            m.extend_from_slice(bytes);
        }
        Some(m)
    }

    /// Whether `record` carries a valid `sig` and `at_sig`, signed at most
    /// `max_age_ms` before `now_ms` (and not later than that after it: a
    /// clock ahead by more is refused too).
    pub fn verify_fresh(&self, id: &str, record: &HashMap<String, String>, now_ms: u64, max_age_ms: u64) -> bool {
        let Some(at) = record.get("at").and_then(|a| a.parse::<u64>().ok()) else { return false };
        if now_ms.abs_diff(at) > max_age_ms || !self.verify(id, record) {
            return false;
        }
        let Some(sig) = record.get("at_sig").and_then(|s| URL_SAFE_NO_PAD.decode(s).ok()) else { return false };
        let Some(message) = Self::message_at(id, |k| record.get(k).map(String::as_str)) else { return false };
        self.key.verifies(&message, &sig)
    }

    /// Whether `record` (a `node:<id>` hash as read) carries a valid `sig`.
    pub fn verify(&self, id: &str, record: &HashMap<String, String>) -> bool {
        let Some(sig) = record.get("sig").and_then(|s| URL_SAFE_NO_PAD.decode(s).ok()) else { return false };
        let Some(message) = Self::message(id, |k| record.get(k).map(String::as_str)) else { return false };
        self.key.verifies(&message, &sig)
    }
}

/// Signs and checks a sequence of parts, each length-prefixed (so that
/// none can be shifted into another), under the key of one purpose; the
/// signature in base64url. For what nodes leave each other in Redis:
///
/// - the config stored with a room (`room:<r>`'s `config`, signed in
///   `config_sig`, parts: room, config; purpose [`ROOM_CONFIG_PURPOSE`]):
///   the limits a room's creator gave, and the lock and bans a drain hands
///   over, applied by whichever node hosts the room afresh; one without a
///   valid signature, or another room's, is ignored (the defaults apply);
/// - room events published for the other nodes (parts: room, origin node,
///   time, event; purpose [`EVENT_PURPOSE`], see `events`);
/// - the entries of a node's roster of a room (parts: room, node, id,
///   summary; purpose [`ROSTER_PURPOSE`], see `roster`).
pub(crate) struct PartsKey {
    key: KeyRing,
    purpose: &'static str,
}

impl PartsKey {
    pub fn new(secret: &[u8], purpose: &'static str) -> Self {
        Self { key: KeyRing::derived(secret, purpose), purpose }
    }

    /// Also accepts signatures under `secret` (a previous cluster secret).
    pub fn also_accept(mut self, secret: &[u8]) -> Self {
        self.key.accept(&derive_key(secret, self.purpose));
        self
    }

    fn message(parts: &[&[u8]]) -> Vec<u8> {
        let mut m = Vec::with_capacity(parts.iter().map(|p| p.len() + 4).sum());
        for bytes in parts {
            m.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
            m.extend_from_slice(bytes);
        }
        m
    }

    /// The signature of `parts`.
    pub fn sign(&self, parts: &[&[u8]]) -> String {
        URL_SAFE_NO_PAD.encode(hmac::sign(self.key.signer(), &Self::message(parts)).as_ref())
    }

    /// Whether `sig` is the signature of `parts`.
    pub fn verify(&self, parts: &[&[u8]], sig: &str) -> bool {
        let Ok(sig) = URL_SAFE_NO_PAD.decode(sig) else { return false };
        self.key.verifies(&Self::message(parts), &sig)
    }
}

/// Milliseconds since the Unix epoch (0 before it): the time records and events carry.
pub(crate) fn unix_now_ms() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields() -> Vec<(&'static str, String)> {
        SIGNED_FIELDS.iter().chain(&OPTIONAL_SIGNED_FIELDS).map(|f| (*f, format!("value of {f}"))).collect()
    }

    #[test]
    fn a_previous_secret_is_accepted_but_never_signs() {
        let (old, new) = (b"the old cluster secret, 32 bytes", b"the new cluster secret, 32 bytes");
        let record = |key: &RecordKey| -> HashMap<String, String> {
            let mut r: HashMap<String, String> = fields().into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            r.insert("sig".into(), key.sign("node-1", &fields()));
            r
        };
        let rolled = RecordKey::new(new).also_accept(old);
        assert!(rolled.verify("node-1", &record(&RecordKey::new(old))), "signed under the old secret");
        assert!(rolled.verify("node-1", &record(&RecordKey::new(new))), "signed under its own");
        assert!(RecordKey::new(new).verify("node-1", &record(&rolled)), "it signs under the new one");
        assert!(!RecordKey::new(old).verify("node-1", &record(&rolled)), "not under the old one");
        let stranger = RecordKey::new(b"an unrelated cluster secret, 32b");
        assert!(!rolled.verify("node-1", &record(&stranger)), "an unrelated secret is refused");
        // Every purpose keeps its own key under each secret.
        let parts: &[&[u8]] = &[b"room", b"config"];
        let configs = PartsKey::new(new, ROOM_CONFIG_PURPOSE).also_accept(old);
        assert!(configs.verify(parts, &PartsKey::new(old, ROOM_CONFIG_PURPOSE).sign(parts)));
        assert!(!configs.verify(parts, &PartsKey::new(old, EVENT_PURPOSE).sign(parts)), "another purpose's key");
    }

    #[test]
    fn a_signed_record_verifies_and_any_change_breaks_it() {
        let key = RecordKey::new(b"0123456789abcdef0123456789abcdef");
        let mut record: HashMap<String, String> = fields().into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        record.insert("sig".into(), key.sign("node-1", &fields()));
        record.insert("placements".into(), "3".into());
        assert!(key.verify("node-1", &record));
        assert!(!key.verify("node-2", &record), "a record copied under another id");
        let other = RecordKey::new(b"another cluster's secret, 32 b..");
        assert!(!other.verify("node-1", &record), "another cluster's key");
        for &field in SIGNED_FIELDS.iter().chain(&OPTIONAL_SIGNED_FIELDS) {
            let mut changed = record.clone();
            changed.insert(field.into(), "http://evil.example".into());
            assert!(!key.verify("node-1", &changed), "{field} changed");
            changed.remove(field);
            assert!(!key.verify("node-1", &changed), "{field} missing");
        }
        record.insert("placements".into(), "99".into());
        record.insert("joins".into(), "99".into());
        assert!(key.verify("node-1", &record), "placements and joins are not covered");
        // A record of a node from before the optional fields verifies without them.
        let old: Vec<(&str, String)> = SIGNED_FIELDS.iter().map(|f| (*f, format!("value of {f}"))).collect();
        let mut older: HashMap<String, String> = old.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
        older.insert("sig".into(), key.sign("node-1", &old));
        assert!(key.verify("node-1", &older), "a record without mesh_addr nor number");
        older.insert("mesh_addr".into(), "10.0.0.9:7000".into());
        assert!(!key.verify("node-1", &older), "a mesh_addr added to an older record");
        record.remove("sig");
        assert!(!key.verify("node-1", &record), "unsigned");
    }

    #[test]
    fn a_record_is_fresh_only_near_its_time_and_with_its_own_time() {
        let key = RecordKey::new(b"0123456789abcdef0123456789abcdef");
        let at = 1_000_000;
        let mut record: HashMap<String, String> = fields().into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        record.insert("sig".into(), key.sign("node-1", &fields()));
        assert!(!key.verify_fresh("node-1", &record, at, 5_000), "no time");
        record.insert("at".into(), at.to_string());
        record.insert("at_sig".into(), key.sign_at("node-1", &fields(), at));
        assert!(key.verify_fresh("node-1", &record, at + 5_000, 5_000));
        assert!(key.verify_fresh("node-1", &record, at - 5_000, 5_000), "a reader's clock a little behind");
        assert!(!key.verify_fresh("node-1", &record, at + 5_001, 5_000), "too old: replayed");
        assert!(!key.verify_fresh("node-1", &record, at - 5_001, 5_000), "too far ahead");
        assert!(!key.verify_fresh("node-2", &record, at, 5_000), "under another id");
        let mut moved = record.clone();
        moved.insert("at".into(), (at + 60_000).to_string());
        assert!(!key.verify_fresh("node-1", &moved, at + 60_000, 5_000), "a time changed by hand");
        let mut changed = record.clone();
        changed.insert("api_url".into(), "http://evil.example".into());
        changed.insert("at_sig".into(), key.sign_at("node-1", &fields(), at));
        assert!(!key.verify_fresh("node-1", &changed, at, 5_000), "a field changed");
    }

    #[test]
    fn the_sip_address_is_signed_when_present() {
        let key = RecordKey::new(b"0123456789abcdef0123456789abcdef");
        let signed = |fields: &[(&str, String)]| -> HashMap<String, String> {
            let mut record: HashMap<String, String> =
                fields.iter().map(|(f, v)| ((*f).to_owned(), v.clone())).collect();
            record.insert("sig".into(), key.sign("n", fields));
            record
        };
        let with = signed(&fields());
        assert!(key.verify("n", &with));
        // Where calls are redirected: changed or dropped by a writer to Redis, the record is ignored.
        let mut moved = with.clone();
        moved.insert("sip_addr".into(), "198.51.100.7:5060".into());
        assert!(!key.verify("n", &moved), "a SIP address changed");
        let mut dropped = with.clone();
        dropped.remove("sip_addr");
        assert!(!key.verify("n", &dropped), "a SIP address dropped");
        // A node without a SIP edge (or from before it) publishes none and verifies.
        let without: Vec<_> = fields().into_iter().filter(|(f, _)| *f != "sip_addr").collect();
        assert!(key.verify("n", &signed(&without)));
    }

    #[test]
    fn fields_cannot_be_shifted_into_each_other() {
        let key = RecordKey::new(b"0123456789abcdef0123456789abcdef");
        let mut a = fields();
        a[0].1 = "http://a".into();
        a[1].1 = "b:1".into();
        let mut b = fields();
        b[0].1 = "http://ab".into();
        b[1].1 = ":1".into();
        assert_ne!(key.sign("n", &a), key.sign("n", &b));
    }

    #[test]
    fn a_room_config_verifies_with_its_room_only() {
        let secret = b"0123456789abcdef0123456789abcdef";
        let key = PartsKey::new(secret, ROOM_CONFIG_PURPOSE);
        let parts = |room: &'static str, config: &'static str| [room.as_bytes(), config.as_bytes()];
        let sig = key.sign(&parts("r", r#"{"max_participants":5}"#));
        assert!(key.verify(&parts("r", r#"{"max_participants":5}"#), &sig));
        assert!(!key.verify(&parts("r", r#"{"max_participants":1}"#), &sig), "changed");
        assert!(!key.verify(&parts("other", r#"{"max_participants":5}"#), &sig), "moved to another room");
        assert!(!key.verify(&parts("r{\"max_", r#"participants":5}"#), &sig), "shifted");
        assert!(!key.verify(&parts("r", r#"{"max_participants":5}"#), "not base64 !"), "garbage");
        let other = PartsKey::new(b"another cluster's secret, 32 b..", ROOM_CONFIG_PURPOSE);
        assert!(!other.verify(&parts("r", r#"{"max_participants":5}"#), &sig), "another cluster's key");
        let events = PartsKey::new(secret, EVENT_PURPOSE);
        assert!(!events.verify(&parts("r", r#"{"max_participants":5}"#), &sig), "another purpose's key");
    }

    #[test]
    fn keys_differ_per_purpose() {
        let s = b"0123456789abcdef0123456789abcdef";
        assert_ne!(derive_key(s, NODE_RECORD_PURPOSE), derive_key(s, TICKET_PURPOSE));
        assert_ne!(derive_key(s, CONTROL_PURPOSE), derive_key(s, TICKET_PURPOSE));
        assert_ne!(derive_key(s, CONTROL_PURPOSE), derive_key(s, NODE_RECORD_PURPOSE));
        assert_ne!(derive_key(s, ROOM_CONFIG_PURPOSE), derive_key(s, NODE_RECORD_PURPOSE));
        assert_ne!(
            derive_key(s, NODE_RECORD_PURPOSE),
            derive_key(b"0123456789abcdef0123456789abcdeF", NODE_RECORD_PURPOSE)
        );
    }
}
