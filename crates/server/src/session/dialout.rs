//! Dial-out's seam: the API asks for a call, the SIP edge places it.
//!
//! `api` and `sip` are two fronts beside each other and never import one
//! another (tests/layers.rs). The SIP edge, when it starts, registers
//! itself here as the node's [`Dialer`] ([`Sessions::set_dialer`]); the
//! route `POST /v1/rooms/{room}/calls` asks [`Sessions::dial`], which
//! answers 503 `sip_off` when no edge registered. The call itself (the
//! INVITE, the answer's join through the one join, the digits, the end)
//! is the edge's (`sip::dialout`); what comes back is a [`Dialling`]: the
//! call's id at once, and its outcome on a one-shot channel (one value,
//! nothing queued).

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use tokio::sync::oneshot;

use super::sessions::Sessions;
use crate::refusal::{Refusal, Refused};

/// A call to place from a room.
#[derive(Debug, Clone)]
pub(crate) struct DialRequest {
    pub(crate) room: String,
    /// A SIP URI (`sip:alice@example.com`) or a number (sent to the trunk's address).
    pub(crate) to: String,
    /// The `[[sip.outbound]]` trunk's name.
    pub(crate) trunk: String,
    /// The callee's name in the room.
    pub(crate) name: String,
    /// The callee's identity; `None`: `sip:<to>#<Call-ID>`.
    pub(crate) identity: Option<String>,
    pub(crate) ringing_timeout: Duration,
    /// The longest the call may last once answered; `None`: no limit.
    pub(crate) max_duration: Option<Duration>,
    /// Keypad digits sent (RFC 4733) once it is answered; empty = none.
    pub(crate) digits: String,
}

/// How a placed call ended up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DialOutcome {
    /// Answered: the callee is participant `id` of the room.
    Answered { id: u64 },
    /// Not answered: the SIP status (486, 603, 408 for no answer in time…;
    /// 0 when none came, the trunk unreachable) and why, for a person.
    Failed { sip_status: u16, reason: String },
}

/// A call being placed: its SIP Call-ID, and its outcome when known.
pub(crate) struct Dialling {
    pub(crate) call_id: String,
    pub(crate) outcome: oneshot::Receiver<DialOutcome>,
}

/// What places calls: the SIP edge, registered at its start.
pub(crate) trait Dialer: Send + Sync {
    /// Starts the call, or refuses it at once (unknown trunk, too many calls).
    fn dial(&self, request: DialRequest) -> Refused<Dialling>;
}

impl Sessions {
    /// The SIP edge registers itself (once; a second registration is ignored).
    pub(crate) fn set_dialer(&self, dialer: Arc<dyn Dialer>) {
        let _ = self.dialer.set(dialer);
    }

    /// Places a call through the registered dialer; 503 `sip_off` without one.
    pub(crate) fn dial(&self, request: DialRequest) -> Refused<Dialling> {
        let dialer = self.dialer.get().ok_or_else(|| {
            Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "sip_off",
                "dial-out needs the SIP edge: set [sip] enabled = true and an [[sip.outbound]] trunk",
            )
        })?;
        dialer.dial(request)
    }
}

/// The API's `code` for a call's final SIP status.
pub(crate) fn failure_code(status: u16) -> &'static str {
    match status {
        486 | 600 => "callee_busy",
        603 | 403 => "callee_declined",
        408 | 480 | 487 => "no_answer",
        _ => "call_failed",
    }
}

/// Digits to send after the answer: none, or up to 32 of `0`-`9`, `*`, `#`, `A`-`D`.
pub(crate) fn check_digits(digits: &str) -> Refused<()> {
    let ok = |c: char| c.is_ascii_digit() || "*#ABCDabcd".contains(c);
    if digits.chars().count() > 32 || !digits.chars().all(ok) {
        return Err(Refusal::bad_request("bad_digits", "`digits` must be up to 32 of 0-9, *, #, A-D"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_name_their_failure_and_digits_are_checked() {
        assert_eq!(failure_code(486), "callee_busy");
        assert_eq!(failure_code(603), "callee_declined");
        assert_eq!(failure_code(408), "no_answer");
        assert_eq!(failure_code(503), "call_failed");
        assert!(check_digits("").is_ok() && check_digits("12*#a").is_ok());
        assert!(check_digits("12x").is_err() && check_digits(&"1".repeat(33)).is_err());
    }
}
