//! A call's keypad: the keys a caller presses (RFC 4733 on its RTP, read
//! by the media plane; or SIP INFO) are told to the room (`keypad`), and a
//! sequence of `[sip] keypad` does its action through the session layer,
//! as the API's mute and hand do.
//!
//! ```text
//! rtp-in thread ─► Keypress (bounded channel) ─┐
//! INFO (application/dtmf-relay, application/dtmf) ─┴─► Edge::key ─► `keypad` event
//!                                                     ─► Sequences::press ─► toggle mute / hand
//! ```

use std::sync::Arc;
use std::time::Instant;

use rsipstack::sip::{Header, StatusCode};
use rsipstack::transaction::Transaction;

use super::endpoint::Edge;
use super::sequences::info_key;
use crate::config::KeyAction;
use crate::sync::lock;

impl Edge {
    /// Reads the keys the media plane hears until the server stops.
    pub(super) async fn keypresses(self: Arc<Self>) {
        let Some(mut pressed) = self.session.keypresses() else {
            return std::future::pending().await;
        };
        while let Some(p) = pressed.recv().await {
            self.key(p.id, p.key);
        }
        std::future::pending().await
    }

    /// Participant `id` pressed `key`: the room is told, and a completed
    /// sequence does its action.
    pub(super) fn key(&self, id: u64, key: char) {
        // A call entering its PIN (`pin`): its keys are the PIN's.
        if self.pin.key(id, key) {
            return;
        }
        let Some(room) = self.session.rooms.room_of(id) else { return };
        self.session.keypress(&room, id, key);
        let Some(action) = lock(&self.keys).press(id, key, Instant::now()) else { return };
        let done = match action {
            KeyAction::Mute => self.session.toggle_mute(&room, id).map(|muted| format!("muted {muted}")),
            KeyAction::Hand => self.session.toggle_hand(&room, id).map(|raised| format!("hand raised {raised}")),
        };
        match done {
            Ok(now) => tracing::info!(room = %room.id, participant = id, ?action, %now, "keypad action"),
            Err(r) => {
                tracing::info!(room = %room.id, participant = id, ?action, reason = %r.message, "keypad action refused")
            }
        }
    }

    /// An INFO within a call: a key (application/dtmf-relay or
    /// application/dtmf) is pressed, as by RFC 4733; another body is
    /// answered 415, a call that is not (or no longer) here 481.
    pub(super) fn info(&self, tx: &Transaction) -> StatusCode {
        let Some(dialog) = self.dialogs.match_dialog(tx) else {
            return StatusCode::CallTransactionDoesNotExist;
        };
        let dialog = dialog.id().to_string();
        let Some(id) = lock(&self.calls).get(&dialog).map(|c| c.id).or_else(|| self.pin.leg_of(&dialog)) else {
            return StatusCode::CallTransactionDoesNotExist;
        };
        let content_type = tx
            .original
            .headers
            .iter()
            .find_map(|h| match h {
                Header::ContentType(c) => Some(c.value().to_owned()),
                _ => None,
            })
            .unwrap_or_default();
        if tx.original.body.is_empty() {
            // An empty INFO: a keep-alive (RFC 6086).
            return StatusCode::OK;
        }
        match info_key(&content_type, &String::from_utf8_lossy(&tx.original.body)) {
            Some(key) => {
                self.key(id, key);
                StatusCode::OK
            }
            None => StatusCode::UnsupportedMediaType,
        }
    }
}
