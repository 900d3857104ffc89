//! Dispatch by PIN: a call on a trunk with `pin` (or on `[sip] trusted`
//! with `[sip] pin`) is answered at once, without a room, and asked for
//! its PIN by spoken prompts played to it alone; the right PIN joins the
//! room `[sip] pins` gives it, a wrong one (or none in time) is told so,
//! and after the last try the caller hears goodbye and gets a BYE. No
//! participant exists until the PIN is right.
//!
//! ```text
//! INVITE (pin trunk) ─► offer checked as a join's ─► a lobby leg on the rtp-in thread ─► 200 OK
//!   ─► "enter the PIN" ─► keys (RFC 4733 on the leg, or INFO) ─► PinEntry ─► room_for
//!        right ─► "joining" ─► the leg leaves the lobby ─► the ONE join (as `calls`) ─► the call goes on
//!        wrong ─► "not valid" ─► again, `pin_attempts` tries ─► "goodbye" ─► BYE
//! ```
//!
//! The prompts are Ogg/Opus clips read at start (built in, or `[sip] prompts`)
//! and played by the leg's thread; this side only waits (tokio timers).

use std::sync::Arc;
use std::time::Duration;

use rsipstack::dialog::dialog::DialogState;
use rsipstack::dialog::invite_dialog::InviteDialog;
use rsipstack::sip::{Header, StatusCode, headers::ContentType};
use tokio::sync::mpsc;

use super::calls::{Caller, join_request, refuse};
use super::endpoint::{Call, Edge};
use super::pins::{PinEntry, Step, room_for};
use super::status;
use crate::auth::Grant;
use crate::room::playback::Clip;
use crate::session::join::{Joined, Offer};
use crate::sync::lock;

/// Takes the lobby leg out (of the desk and the rtp-in thread) however the call goes.
struct Leaves<'a> {
    edge: &'a Edge,
    leg: u64,
}

impl Drop for Leaves<'_> {
    fn drop(&mut self) {
        self.edge.pin.forget(self.leg);
        self.edge.session.lobby_leave(self.leg);
    }
}

impl Edge {
    /// A call that enters a PIN: answered, prompted, then joined or sent away.
    pub(super) async fn pin_call(self: Arc<Self>, dialog: InviteDialog, caller: Caller) {
        let (leg, answer) = match self.session.lobby_enter(&caller.sdp, caller.source.ip()) {
            Ok(entered) => entered,
            Err(r) => {
                let reason = if r.status == axum::http::StatusCode::BAD_REQUEST { "media" } else { "join" };
                crate::metrics::sip_refused(reason);
                return refuse(&dialog, status::for_refusal(&r), &r.message);
            }
        };
        let leaves = Leaves { edge: &self, leg };
        let Some(mut pressed) = self.pin.wait_for(leg, dialog.id().to_string()) else {
            return refuse(&dialog, StatusCode::ServiceUnavailable, "too many calls are entering a PIN");
        };
        if matches!(dialog.state(), DialogState::Terminated(..)) {
            return;
        }
        let headers = vec![Header::ContentType(ContentType::new("application/sdp"))];
        if let Err(e) = dialog.accept(Some(headers), Some(answer.clone().into_bytes())) {
            tracing::info!(error = %e, "SIP answer not sent");
            return;
        }
        tracing::info!(leg, trunk = %caller.trunk, identity = %caller.identity, "SIP call answered: PIN entry");
        let ended = dialog.cancel_token().clone();
        let room = tokio::select! {
            room = self.enter_pin(leg, &mut pressed) => room,
            _ = ended.cancelled() => return,
        };
        let Some(room) = room else {
            crate::metrics::sip_refused("pin");
            tracing::info!(leg, identity = %caller.identity, "no right PIN: BYE");
            dialog.bye().await.ok();
            return;
        };
        // Out of the lobby before the join: the leg's address becomes the participant's.
        drop(leaves);
        self.join_by_pin(dialog, caller, room, answer).await;
    }

    /// Prompts and reads the PIN until it is right (its room) or the tries
    /// run out (`None`, goodbye said).
    async fn enter_pin(&self, leg: u64, pressed: &mut mpsc::Receiver<char>) -> Option<String> {
        let desk = &self.pin;
        let mut entry = PinEntry::new(desk.tries);
        self.say(leg, &desk.prompts.enter).await;
        loop {
            let step = match tokio::time::timeout(desk.digit_timeout, pressed.recv()).await {
                Ok(Some(key)) => entry.key(key),
                Ok(None) => return None,
                // No key in time: the try ends, unfinished.
                Err(_) => Step::Check(None),
            };
            let Step::Check(pin) = step else { continue };
            if let Some(room) = pin.as_deref().and_then(|p| room_for(&desk.pins, p)) {
                self.say(leg, &desk.prompts.joining).await;
                return Some(room.to_owned());
            }
            tracing::info!(leg, "SIP caller entered a wrong PIN (or none in time)");
            self.say(leg, &desk.prompts.invalid).await;
            if !entry.failed() {
                self.say(leg, &desk.prompts.goodbye).await;
                return None;
            }
            self.say(leg, &desk.prompts.enter).await;
        }
    }

    /// Plays `prompt` to lobby leg `leg` and waits until it is over.
    async fn say(&self, leg: u64, prompt: &Arc<Clip>) {
        self.session.lobby_play(leg, prompt);
        let lasts = Duration::from_secs_f64(prompt.duration_seconds()) + Duration::from_millis(100);
        tokio::time::sleep(lasts).await;
    }

    /// The PIN was right: the call joins `room` through the one join; the
    /// call keeps the answer it was given (the same address and codec). A
    /// refused join ends the call (BYE): it was answered already.
    async fn join_by_pin(&self, dialog: InviteDialog, caller: Caller, room: String, answer: String) {
        let Caller { sdp, source, identity, name, attributes, trunk } = caller;
        let grant = Grant { attributes, ..Grant::participant(room.as_str(), identity.as_str()) };
        let joined = self.session.join(join_request(&room, &grant, source), || Ok(Offer { sdp, name })).await;
        let id = match joined {
            Ok(Joined::Here { id, .. }) => id,
            Ok(Joined::Elsewhere(_)) => {
                tracing::info!(%room, "SIP PIN call: the room is on another node: BYE");
                dialog.bye().await.ok();
                return;
            }
            Err(r) => {
                crate::metrics::sip_refused("join");
                tracing::info!(%room, reason = %r.message, "SIP PIN call: join refused: BYE");
                dialog.bye().await.ok();
                return;
            }
        };
        let Ok(state) = self.session.rooms.get(&room) else { return };
        let events = state.subscribe();
        lock(&self.calls).insert(dialog.id().to_string(), Call { room: state.clone(), id, answer });
        if matches!(dialog.state(), DialogState::Terminated(..)) {
            self.hang_up(&dialog.id());
            return;
        }
        tracing::info!(%room, participant = id, %identity, %trunk, "SIP caller joined by PIN");
        self.watch(state, events, id, dialog).await;
    }
}
