//! Data messages through the session layer: the room socket's `data` and
//! the backend's `POST /v1/rooms/{room}/data` both send here (see
//! `room::data` for where a message goes).

use std::time::Instant;

use super::sessions::Sessions;
use crate::refusal::{Refusal, Refused};
use crate::room::{DataMessage, Room};

/// The rate limiter's key for the backend's messages to a room.
const BACKEND: u64 = u64::MAX;

impl Sessions {
    /// Sends a data message of `from` (a participant of `room`; `None`: the
    /// backend) on `topic` to `to` (`None`: everyone), at most
    /// `limits.data_messages_per_second` per sender. Returns how many
    /// sockets of this node it was handed to (other nodes' are not counted).
    pub(crate) fn send_data(
        &self,
        room: &Room,
        from: Option<u64>,
        topic: &str,
        payload: &serde_json::value::RawValue,
        to: Option<Vec<u64>>,
    ) -> Refused<usize> {
        let limits = &self.cfg.limits;
        self.data.check((room.key.0, from.unwrap_or(BACKEND)), Instant::now()).map_err(|retry| {
            crate::metrics::data_messages("rate_limited", 1);
            let mut e = Refusal::rate_limited(retry);
            e.message = format!(
                "more than {} data messages per second from this sender (limits.data_messages_per_second); this one was dropped",
                limits.data_messages_per_second
            );
            e
        })?;
        let message = DataMessage::new(from, topic, payload, to, limits.data_max_bytes)?;
        crate::metrics::data_messages("sent", 1);
        Ok(room.send_data(message))
    }
}
