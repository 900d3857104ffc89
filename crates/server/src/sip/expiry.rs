//! A call's session timer at work (the rules: `timers`): the INVITE's 422
//! or timer, each refresh noted, and the task that ends a call nobody
//! refreshed (or whose refresh by tutti failed) with BYE.

use std::sync::Arc;

use rsipstack::dialog::invite_dialog::InviteDialog;
use rsipstack::sip::{Header, StatusCode, StatusCodeKind};
use rsipstack::transaction::Transaction;
use tokio::sync::Notify;

use super::endpoint::Edge;
use super::timers::{Asked, Refresher, SessionTimer, min_se, negotiate};
use crate::room::LeaveReason;
use crate::sync::lock;

/// An INVITE's interval was too short (answered 422).
pub(super) struct TooShort;

impl Edge {
    /// The INVITE's session timer (`[sip] session_expires_seconds`,
    /// `min_session_expires_seconds`); `Err` when it asks for too short an
    /// interval: answered 422 here.
    pub(super) async fn session_timer(&self, tx: &mut Transaction) -> Result<Option<SessionTimer>, TooShort> {
        let cfg = &self.session.cfg.sip;
        match negotiate(&tx.original, cfg.session_expires_seconds, cfg.min_session_expires_seconds) {
            Asked::Nothing => Ok(None),
            Asked::Timer(t) => Ok(Some(t)),
            Asked::TooSmall(min) => {
                tracing::info!(min, "SIP INVITE's Session-Expires below the minimum: 422");
                tx.reply_with(StatusCode::SessionIntervalTooSmall, vec![min_se(min)], None).await.ok();
                Err(TooShort)
            }
        }
    }

    /// A re-INVITE or UPDATE within call `dialog`: a refresh. The headers of its answer.
    pub(super) fn refreshed(&self, dialog: &str) -> Vec<Header> {
        match lock(&self.timers.0).get(dialog) {
            Some((timer, refreshed)) => {
                refreshed.notify_one();
                timer.headers()
            }
            None => Vec::new(),
        }
    }

    /// Runs call `dialog`'s session timer until the call ends or expires
    /// (then BYE, and participant `id` leaves).
    pub(super) async fn run_timer(&self, timer: SessionTimer, dialog: InviteDialog, id: u64) {
        let key = dialog.id().to_string();
        let refreshed = Arc::new(Notify::new());
        lock(&self.timers.0).insert(key.clone(), (timer, refreshed.clone()));
        let ended = dialog.cancel_token().clone();
        let why = loop {
            tokio::select! {
                _ = ended.cancelled() => break None,
                _ = refreshed.notified() => continue,
                _ = tokio::time::sleep(timer.turn()) => {}
            }
            if timer.refresher == Refresher::Uac {
                break Some("no refresh (re-INVITE or UPDATE) came within the session interval");
            }
            match dialog.update(Some(timer.headers()), None).await {
                Ok(Some(r)) if r.status_code.kind() == StatusCodeKind::Successful => {}
                _ => break Some("tutti's refresh (UPDATE) was not answered 2xx"),
            }
        };
        lock(&self.timers.0).remove(&key);
        let Some(why) = why else { return };
        let call = lock(&self.calls).remove(&key);
        if let Some(call) = call {
            lock(&self.keys).forget(call.id);
            tracing::info!(room = %call.room.id, participant = id, seconds = timer.seconds, reason = why, "SIP session timer expired: BYE");
            self.session.leave(&call.room, call.id, LeaveReason::TimedOut);
            dialog.bye().await.ok();
        }
    }
}
