//! Room control across the nodes of a room's span: what one node applied to
//! its copy of a room (a lock, a mute-all, a ban…), told to every other node
//! hosting the room so that each applies it to its own copy.
//!
//! ```text
//! node A: Cluster::publish_control(room, body) ─► sign ─► bounded queue ─► PUBLISH control
//! node B: SUBSCRIBE control (the relay's RESP3 connection) ─► bounded queue
//!         ─► task: open (size, tag) ─► own? skip ─► room hosted here? ─► fresh? ─► nonce unseen?
//!            ─► at this node's epoch? ─► bounded queue ─► the server applies it (Cluster::take_control)
//! ```
//!
//! One channel (`<prefix>control`) for every room: control is rare (an
//! admin's click), so every node reading every room's messages costs
//! nothing, and one subscription needs no bookkeeping per room.
//!
//! A message is `base64url(JSON) "." base64url(HMAC-SHA256(key, JSON))`,
//! with a key derived from the cluster's secret for this purpose only
//! (`cluster-control`, see [`derive_key`](crate::derive_key)). The JSON
//! names the room, the room's epoch at the sender, the sender's node id, the
//! sender's clock (Unix milliseconds) and 128 random bits. A node refuses
//! (and counts, `tutti_cluster_control_refused_total{reason}`):
//!
//! - `malformed`: too long, not two base64url parts, not the JSON above;
//! - `bad_tag`: not signed with this cluster's control key (written into
//!   Redis by hand, or by another cluster);
//! - `stale`: sent more than [`CONTROL_MAX_AGE_MS`] from this node's clock,
//!   either way (the node clocks must roughly agree, as for tickets);
//! - `replayed`: a nonce seen within that window (a window of at most
//!   [`SEEN_CAPACITY`] nonces; past it, `flood`);
//! - `epoch`: for a room this node hosts at another epoch (the room was
//!   claimed again meanwhile: an old owner's word no longer counts);
//! - `queue_full`: the server's queue was full.
//!
//! Its own messages, which Redis hands back to the sender too, are skipped
//! (a node never applies, nor publishes again, what it sent: no loops), as
//! are (well signed) messages for rooms this node does not host; neither is
//! counted, nor takes a place among the nonces remembered.
//! The body is the server's (opaque JSON here).

use std::collections::{HashSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::record::{CONTROL_PURPOSE, KeyRing, derive_key, fresh_nonce, is_nonce, open_signed, seal_signed};

/// Longest control message accepted.
pub const MAX_CONTROL_BYTES: usize = 8192;
/// How far a message's timestamp may be from this node's clock.
pub const CONTROL_MAX_AGE_MS: u64 = 5_000;
/// Control messages waiting for the server before new ones are dropped.
pub const CONTROL_QUEUE_CAPACITY: usize = 256;
/// Nonces remembered (those of the last [`CONTROL_MAX_AGE_MS`] window).
pub(crate) const SEEN_CAPACITY: usize = 4096;

/// A control message for one room, as signed and as handed to the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlMessage {
    /// The room.
    pub room: String,
    /// The room's epoch at the sender.
    pub epoch: u64,
    /// The node that applied it first and sent it.
    pub origin: String,
    /// When it was sent, Unix milliseconds of the sender's clock.
    pub ts_ms: u64,
    /// 128 random bits, hex.
    pub nonce: String,
    /// What to apply (the server's JSON).
    pub body: serde_json::Value,
}

/// Why a control message was refused (the `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlRefusal {
    /// Too long, or not a message.
    Malformed,
    /// Not signed with this cluster's control key.
    BadTag,
    /// Its timestamp is too far from this node's clock.
    Stale,
    /// Its nonce was seen already.
    Replayed,
    /// Too many fresh nonces to remember.
    Flood,
    /// For a room hosted here at another epoch.
    Epoch,
    /// The server's queue was full.
    QueueFull,
}

impl ControlRefusal {
    /// Every reason, in the order of the counters.
    pub const ALL: [ControlRefusal; 7] =
        [Self::Malformed, Self::BadTag, Self::Stale, Self::Replayed, Self::Flood, Self::Epoch, Self::QueueFull];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::BadTag => "bad_tag",
            Self::Stale => "stale",
            Self::Replayed => "replayed",
            Self::Flood => "flood",
            Self::Epoch => "epoch",
            Self::QueueFull => "queue_full",
        }
    }

    /// Its index in [`ControlRefusal::ALL`].
    pub fn index(self) -> usize {
        Self::ALL.iter().position(|r| *r == self).unwrap_or(0)
    }
}

/// Signs and opens control messages.
pub(crate) struct ControlKey {
    key: KeyRing,
}

impl ControlKey {
    pub fn new(secret: &[u8]) -> Self {
        Self { key: KeyRing::derived(secret, CONTROL_PURPOSE) }
    }

    /// Also accepts messages signed under `secret` (a previous cluster secret).
    pub fn also_accept(mut self, secret: &[u8]) -> Self {
        self.key.accept(&derive_key(secret, CONTROL_PURPOSE));
        self
    }

    /// A fresh message for `room` at `epoch` from `origin`, sent at `now_ms`.
    pub fn seal(&self, room: &str, epoch: u64, origin: &str, body: serde_json::Value, now_ms: u64) -> Option<String> {
        let msg = ControlMessage {
            room: room.to_owned(),
            epoch,
            origin: origin.to_owned(),
            ts_ms: now_ms,
            nonce: fresh_nonce().ok()?,
            body,
        };
        self.sign(&msg)
    }

    pub fn sign(&self, msg: &ControlMessage) -> Option<String> {
        let wire = seal_signed(self.key.signer(), &serde_json::to_vec(msg).ok()?);
        (wire.len() <= MAX_CONTROL_BYTES).then_some(wire)
    }

    /// The message, if `wire` is one signed with this key (the tag checked
    /// in constant time before the JSON is parsed).
    pub fn open(&self, wire: &str) -> Result<ControlMessage, ControlRefusal> {
        let refusals = (ControlRefusal::Malformed, ControlRefusal::BadTag);
        let msg: ControlMessage = open_signed(&self.key, wire, MAX_CONTROL_BYTES, refusals)?;
        if !is_nonce(&msg.nonce) {
            return Err(ControlRefusal::Malformed);
        }
        Ok(msg)
    }
}

/// The nonces of the messages accepted within the freshness window
/// (bounded: [`SEEN_CAPACITY`]), in arrival order.
pub(crate) struct Seen {
    order: VecDeque<(u64, String)>,
    set: HashSet<String>,
    capacity: usize,
}

impl Seen {
    pub fn new(capacity: usize) -> Self {
        Self { order: VecDeque::new(), set: HashSet::new(), capacity }
    }

    /// Accepts `msg` at `now_ms` if it is fresh and its nonce new (and
    /// remembers the nonce); else why not.
    pub fn check(&mut self, msg: &ControlMessage, now_ms: u64) -> Result<(), ControlRefusal> {
        if msg.ts_ms.abs_diff(now_ms) > CONTROL_MAX_AGE_MS {
            return Err(ControlRefusal::Stale);
        }
        // Nonces of messages now stale need not be kept: those are refused anyway.
        let horizon = now_ms.saturating_sub(CONTROL_MAX_AGE_MS);
        while self.order.front().is_some_and(|(ts, _)| *ts < horizon) {
            if let Some((_, n)) = self.order.pop_front() {
                self.set.remove(&n);
            }
        }
        if self.set.contains(&msg.nonce) {
            return Err(ControlRefusal::Replayed);
        }
        if self.order.len() >= self.capacity {
            return Err(ControlRefusal::Flood);
        }
        self.set.insert(msg.nonce.clone());
        self.order.push_back((msg.ts_ms, msg.nonce.clone()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
    const NOW: u64 = 1_800_000_000_000;

    fn sealed(key: &ControlKey) -> String {
        key.seal("r1", 7, "node-a", serde_json::json!({"kind": "update", "locked": true}), NOW).expect("seal")
    }

    #[test]
    fn a_sealed_message_opens_with_its_key_only() {
        let key = ControlKey::new(SECRET);
        let msg = key.open(&sealed(&key)).expect("opens");
        assert_eq!((msg.room.as_str(), msg.epoch, msg.origin.as_str(), msg.ts_ms), ("r1", 7, "node-a", NOW));
        assert_eq!(msg.body["locked"], true);
        // Another cluster's secret, or the same secret's key of another purpose.
        let other = ControlKey::new(b"another cluster's secret, 32 b..");
        assert_eq!(other.open(&sealed(&key)), Err(ControlRefusal::BadTag));
        let ticket_key = ControlKey { key: KeyRing::derived(SECRET, "cluster-ticket") };
        assert_eq!(ticket_key.open(&sealed(&key)), Err(ControlRefusal::BadTag));
    }

    #[test]
    fn a_tampered_message_is_refused() {
        let key = ControlKey::new(SECRET);
        let wire = sealed(&key);
        let (payload, tag) = wire.split_once('.').expect("two parts");
        let json = String::from_utf8(URL_SAFE_NO_PAD.decode(payload).expect("b64")).expect("utf8");
        for (from, to) in [("\"r1\"", "\"r2\""), ("\"locked\":true", "\"locked\":false"), ("node-a", "node-b")] {
            let forged = format!("{}.{tag}", URL_SAFE_NO_PAD.encode(json.replace(from, to)));
            assert_eq!(key.open(&forged), Err(ControlRefusal::BadTag), "{from} → {to}");
        }
        // A signed message whose JSON is not a message, or whose nonce is not one.
        let mut msg = key.open(&wire).expect("opens");
        msg.nonce = "short".into();
        assert_eq!(key.open(&key.sign(&msg).expect("sign")), Err(ControlRefusal::Malformed));
        for junk in ["", ".", "abc", "a.b.c", "!!!.???", &"x".repeat(MAX_CONTROL_BYTES + 1)] {
            assert!(matches!(key.open(junk), Err(ControlRefusal::Malformed | ControlRefusal::BadTag)), "{junk:.20}");
        }
    }

    #[test]
    fn stale_and_replayed_messages_are_refused() {
        let key = ControlKey::new(SECRET);
        let msg = key.open(&sealed(&key)).expect("opens");
        let mut seen = Seen::new(SEEN_CAPACITY);
        assert_eq!(seen.check(&msg, NOW + CONTROL_MAX_AGE_MS + 1), Err(ControlRefusal::Stale), "too old");
        assert_eq!(seen.check(&msg, NOW - CONTROL_MAX_AGE_MS - 1), Err(ControlRefusal::Stale), "from the future");
        assert_eq!(seen.check(&msg, NOW + 100), Ok(()));
        assert_eq!(seen.check(&msg, NOW + 200), Err(ControlRefusal::Replayed));
        // Past the window it is stale, and its nonce forgotten.
        assert_eq!(seen.check(&msg, NOW + CONTROL_MAX_AGE_MS + 1), Err(ControlRefusal::Stale));
        let fresh = key.open(&key.seal("r1", 7, "a", serde_json::Value::Null, NOW + 6_000).expect("seal")).expect("o");
        assert_eq!(seen.check(&fresh, NOW + 6_000), Ok(()));
        assert_eq!(seen.order.len(), 1, "the stale nonce was let go");
    }

    #[test]
    fn the_nonce_window_is_bounded() {
        let key = ControlKey::new(SECRET);
        let mut seen = Seen::new(3);
        let next = || key.open(&sealed(&key)).expect("opens");
        for _ in 0..3 {
            assert_eq!(seen.check(&next(), NOW), Ok(()));
        }
        assert_eq!(seen.check(&next(), NOW), Err(ControlRefusal::Flood));
        // Once the window moves on, room again.
        let later = key.open(&key.seal("r1", 7, "a", serde_json::Value::Null, NOW + 6_000).expect("s")).expect("o");
        assert_eq!(seen.check(&later, NOW + 6_000), Ok(()));
    }

    #[test]
    fn refusal_labels_are_distinct() {
        let labels: HashSet<&str> = ControlRefusal::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels.len(), ControlRefusal::ALL.len());
        assert!(ControlRefusal::ALL.iter().enumerate().all(|(i, r)| r.index() == i));
    }
}
