//! Data messages: what participants (and the backend) send each other over
//! the room — a chat line, a reaction, an app's JSON — with a topic.
//!
//! ```text
//! socket `data` / POST …/data ─► DataMessage::new (bounds, serialized once) ─► Room::send_data
//!   ─► the room's data channel (bounded) ─► every room socket of this node: sent as it is, to all,
//!      or only to the sockets of the participants named in `to`; never back to its sender
//!   ─► (a spread room) the relay publishes this node's own to the other nodes, which check
//!      that the sender is one of the publishing node's participants and deliver them there
//! ```
//!
//! Best effort: a message reaches the sockets connected when it is sent; a
//! socket that falls more than [`DATA_QUEUE`] messages behind loses the
//! oldest (counted); nothing is stored. Per sender, messages arrive in the
//! order sent (one channel per room, one publisher per node). Nothing here
//! runs on a media thread.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::broadcast;

use super::RoomError;

/// Messages a room's data channel holds for its slowest socket.
pub(crate) const DATA_QUEUE: usize = 256;
/// Longest topic, in bytes.
pub(crate) const MAX_TOPIC_BYTES: usize = 64;
/// Most participants one message names in `to`.
pub(crate) const MAX_TARGETS: usize = 64;

/// One data message, serialized once for every socket it goes to.
#[derive(Debug)]
pub(crate) struct DataMessage {
    /// The participant that sent it; `None`: the backend (`POST …/data`).
    pub(crate) from: Option<u64>,
    /// Only the sockets of these participants get it; `None`: everyone.
    pub(crate) to: Option<Box<[u64]>>,
    /// `{"type":"data","from":…,"topic":…,"payload":…}`, as sockets get it.
    pub(crate) json: Bytes,
    /// Relayed from another node of a spread room: never published again.
    pub(crate) relayed: bool,
}

/// What the other nodes of a spread room are sent of a data message.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Wire<'a> {
    #[serde(rename = "type")]
    kind: std::borrow::Cow<'a, str>,
    from: Option<u64>,
    topic: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    payload: &'a serde_json::value::RawValue,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    to: Option<Vec<u64>>,
}

impl DataMessage {
    /// A message of `from` on `topic` with `payload` (any JSON: a string,
    /// an object…) at most `max_bytes` long serialized, to `to` (`None`:
    /// everyone). Refused with what to change.
    pub(crate) fn new(
        from: Option<u64>,
        topic: &str,
        payload: &serde_json::value::RawValue,
        to: Option<Vec<u64>>,
        max_bytes: usize,
    ) -> Result<Self, RoomError> {
        if topic.len() > MAX_TOPIC_BYTES || topic.chars().any(char::is_control) {
            return Err(RoomError::BadValue(format!(
                "a data message's topic is at most {MAX_TOPIC_BYTES} bytes, without control characters"
            )));
        }
        if payload.get().len() > max_bytes {
            return Err(RoomError::BadValue(format!(
                "a data message's payload is at most {max_bytes} bytes (limits.data_max_bytes); this one is {}",
                payload.get().len()
            )));
        }
        if let Some(to) = &to
            && (to.is_empty() || to.len() > MAX_TARGETS)
        {
            return Err(RoomError::BadValue(format!(
                "`to` names 1 to {MAX_TARGETS} participants (leave it out to send to everyone)"
            )));
        }
        let json = serde_json::json!({ "type": "data", "from": from, "topic": topic, "payload": payload });
        Ok(Self {
            from,
            to: to.map(Vec::into_boxed_slice),
            json: Bytes::from(serde_json::to_vec(&json).unwrap_or_default()),
            relayed: false,
        })
    }

    /// Whether the socket of participant `me` (`None`: a socket that has not
    /// joined) gets it: everyone but its sender, or only those named.
    pub(crate) fn is_for(&self, me: Option<u64>) -> bool {
        if me.is_some() && me == self.from {
            return false;
        }
        match &self.to {
            None => true,
            Some(to) => me.is_some_and(|me| to.contains(&me)),
        }
    }

    /// The message as the other nodes of a spread room are sent it.
    pub(crate) fn wire(&self) -> Option<String> {
        #[derive(serde::Deserialize)]
        struct Out<'a> {
            topic: std::borrow::Cow<'a, str>,
            #[serde(borrow)]
            payload: &'a serde_json::value::RawValue,
        }
        let out: Out<'_> = serde_json::from_slice(&self.json).ok()?;
        let wire = Wire {
            kind: "data".into(),
            from: self.from,
            topic: out.topic,
            payload: out.payload,
            to: self.to.as_ref().map(|t| t.to_vec()),
        };
        serde_json::to_string(&wire).ok()
    }

    /// A message another node published (its [`DataMessage::wire`]), if it
    /// is one, within the bounds, and sent by one of that node's
    /// participants (`mine`) or its backend.
    pub(crate) fn relayed(json: &str, mine: impl Fn(u64) -> bool, max_bytes: usize) -> Option<Self> {
        let wire: Wire<'_> = serde_json::from_str(json).ok()?;
        if wire.kind != "data" || wire.from.is_some_and(|id| !mine(id)) {
            return None;
        }
        let mut message = Self::new(wire.from, &wire.topic, wire.payload, wire.to, max_bytes).ok()?;
        message.relayed = true;
        Some(message)
    }
}

/// A room's data channel.
pub(crate) fn channel() -> broadcast::Sender<Arc<DataMessage>> {
    broadcast::channel(DATA_QUEUE).0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<serde_json::value::RawValue> {
        serde_json::value::RawValue::from_string(s.to_owned()).expect("JSON")
    }

    #[test]
    fn a_message_is_serialized_once_bounded_and_goes_where_it_is_sent() {
        let m = DataMessage::new(Some(1), "chat", &raw(r#""hi""#), None, 100).expect("valid");
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&m.json).expect("JSON"),
            serde_json::json!({"type": "data", "from": 1, "topic": "chat", "payload": "hi"})
        );
        assert!(!m.is_for(Some(1)), "not back to its sender");
        assert!(m.is_for(Some(2)) && m.is_for(None), "everyone else, observers too");
        let to = DataMessage::new(None, "x", &raw("{}"), Some(vec![3]), 100).expect("valid");
        assert!(to.is_for(Some(3)) && !to.is_for(Some(2)) && !to.is_for(None));

        assert!(DataMessage::new(Some(1), &"t".repeat(65), &raw("1"), None, 100).is_err(), "long topic");
        assert!(DataMessage::new(Some(1), "t", &raw(&format!("\"{}\"", "x".repeat(100))), None, 100).is_err());
        assert!(DataMessage::new(Some(1), "t", &raw("1"), Some(vec![]), 100).is_err(), "an empty `to`");
        assert!(DataMessage::new(Some(1), "t", &raw("1"), Some((0..65).collect()), 100).is_err());
    }

    #[test]
    fn another_nodes_message_is_taken_only_from_its_own_participants() {
        let m = DataMessage::new(Some(5), "react", &raw(r#"{"emoji":"👏"}"#), Some(vec![7]), 100).expect("valid");
        let wire = m.wire().expect("wire");
        let back = DataMessage::relayed(&wire, |id| id == 5, 100).expect("relayed");
        assert!(back.relayed && back.json == m.json && back.to.as_deref() == Some(&[7][..]));
        assert!(DataMessage::relayed(&wire, |id| id == 6, 100).is_none(), "another node's participant");
        assert!(DataMessage::relayed(&wire, |_| true, 5).is_none(), "past this node's bound");
        assert!(DataMessage::relayed(r#"{"type":"events","events":[]}"#, |_| true, 100).is_none());
    }
}
