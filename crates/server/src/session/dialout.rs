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

use axum::http::StatusCode;

use super::dialer::{DialRequest, Dialer, Dialling};
use super::sessions::Sessions;
use crate::refusal::{Refusal, Refused};

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
