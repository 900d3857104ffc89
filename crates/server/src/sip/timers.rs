//! Session timers (RFC 4028): a call whose INVITE supports them (`Supported:
//! timer`, or a `Session-Expires` from a proxy) is answered with the
//! interval and who refreshes it; every re-INVITE or UPDATE within the call
//! is a refresh. When the caller refreshes (`refresher=uac`, and the
//! default) and none comes by the expiry less min(32 s, interval / 3),
//! tutti sends BYE and the participant leaves (`timed_out`). When tutti
//! refreshes (`refresher=uas`) it sends an UPDATE every half interval, and
//! a refresh that is not answered 2xx ends the call the same way.
//!
//! ```text
//! INVITE ─► negotiate: none │ 422 + Min-SE (below `[sip] min_session_expires_seconds`)
//!          │ Timer { seconds, refresher } ─► 200 OK + Session-Expires, Require: timer
//!          ─► run (a SIP task): wait ─► refreshed? wait again : (uas: UPDATE) │ BYE
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rsipstack::sip::{Header, HeadersExt, Request};
use tokio::sync::Notify;

/// Who refreshes the session (RFC 4028's `refresher` parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refresher {
    /// The caller (the INVITE's sender).
    Uac,
    /// tutti.
    Uas,
}

/// A call's session timer as answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SessionTimer {
    pub(super) seconds: u64,
    pub(super) refresher: Refresher,
    /// The caller supports timers (`Supported: timer`): the answer requires them.
    supported: bool,
}

/// What an INVITE asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Asked {
    /// No session timer.
    Nothing,
    /// This one.
    Timer(SessionTimer),
    /// An interval below tutti's minimum: 422 with this `Min-SE`.
    TooSmall(u64),
}

/// The leading decimal of a header value (`1800;refresher=uac`).
fn seconds(value: &str) -> Option<u64> {
    value.split(';').next()?.trim().parse().ok()
}

/// What `request`'s `Session-Expires`, `Min-SE` and `Supported` ask, given
/// tutti's `default` interval and its `min`imum.
pub(super) fn negotiate(request: &Request, default: u64, min: u64) -> Asked {
    let supported = request.header_contains_token("Supported", "timer");
    let their_min = request.header_value("Min-SE").as_deref().and_then(seconds).unwrap_or(0);
    let Some(value) = request.header_value("Session-Expires") else {
        return match supported {
            true => {
                Asked::Timer(SessionTimer { seconds: default.max(their_min), refresher: Refresher::Uac, supported })
            }
            false => Asked::Nothing,
        };
    };
    let Some(n) = seconds(&value) else { return Asked::Nothing };
    if n < min {
        return Asked::TooSmall(min);
    }
    let asked = value.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim().eq_ignore_ascii_case("refresher").then(|| v.trim().to_ascii_lowercase())
    });
    // The caller refreshes when it asks to or names nobody, if it can (it supports timers).
    let refresher = match asked.as_deref() {
        Some("uas") => Refresher::Uas,
        _ if supported => Refresher::Uac,
        _ => Refresher::Uas,
    };
    Asked::Timer(SessionTimer { seconds: n, refresher, supported })
}

impl SessionTimer {
    /// The headers of an answer (the INVITE's 200, a refresh's 200).
    pub(super) fn headers(&self) -> Vec<Header> {
        let who = match self.refresher {
            Refresher::Uac => "uac",
            Refresher::Uas => "uas",
        };
        let mut headers = vec![Header::Other("Session-Expires".into(), format!("{};refresher={who}", self.seconds))];
        if self.supported {
            headers.push(Header::Other("Require".into(), "timer".into()));
        }
        headers
    }

    /// How long a turn of the timer waits: to the expiry less min(32 s, interval / 3)
    /// for the caller's refresh, half the interval before tutti's own.
    pub(super) fn turn(&self) -> Duration {
        match self.refresher {
            Refresher::Uac => Duration::from_secs(self.seconds - (self.seconds / 3).min(32)),
            Refresher::Uas => Duration::from_secs(self.seconds.div_ceil(2)),
        }
    }
}

/// The 422's header: tutti's minimum.
pub(super) fn min_se(min: u64) -> Header {
    Header::Other("Min-SE".into(), min.to_string())
}

/// The running session timers, by dialog id, each with its refresh signal.
#[derive(Default)]
pub(super) struct Timers(pub(super) Mutex<HashMap<String, (SessionTimer, Arc<Notify>)>>);

#[cfg(test)]
mod tests {
    use super::*;

    fn invite(headers: &str) -> Request {
        let text = format!(
            "INVITE sip:a@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bKx\r\n\
             From: <sip:b@127.0.0.1>;tag=1\r\nTo: <sip:a@127.0.0.1>\r\nCall-ID: c\r\nCSeq: 1 INVITE\r\n\
             {headers}Content-Length: 0\r\n\r\n"
        );
        Request::try_from(text.as_str()).expect("parses")
    }

    #[test]
    fn the_caller_refreshes_unless_it_asks_tutti_and_short_intervals_get_422() {
        let timer = |s, r| Asked::Timer(SessionTimer { seconds: s, refresher: r, supported: true });
        assert_eq!(negotiate(&invite(""), 1800, 90), Asked::Nothing);
        assert_eq!(negotiate(&invite("Supported: timer\r\n"), 1800, 90), timer(1800, Refresher::Uac));
        assert_eq!(negotiate(&invite("Supported: timer\r\nMin-SE: 2000\r\n"), 1800, 90), timer(2000, Refresher::Uac));
        let asks = |se: &str| negotiate(&invite(&format!("Supported: timer\r\nSession-Expires: {se}\r\n")), 1800, 90);
        assert_eq!(asks("600"), timer(600, Refresher::Uac));
        assert_eq!(asks("600;refresher=uas"), timer(600, Refresher::Uas));
        assert_eq!(asks("60;refresher=uac"), Asked::TooSmall(90));
        // A proxy's Session-Expires for a caller without timers: tutti refreshes.
        let proxied = negotiate(&invite("Session-Expires: 300\r\n"), 1800, 90);
        assert_eq!(proxied, Asked::Timer(SessionTimer { seconds: 300, refresher: Refresher::Uas, supported: false }));
        let t = SessionTimer { seconds: 90, refresher: Refresher::Uac, supported: true };
        assert_eq!(t.turn(), Duration::from_secs(60), "expiry less min(32, 90/3)");
        assert_eq!(SessionTimer { seconds: 1800, ..t }.turn(), Duration::from_secs(1768));
        assert_eq!(SessionTimer { refresher: Refresher::Uas, ..t }.turn(), Duration::from_secs(45));
        let headers: Vec<String> = t.headers().iter().map(ToString::to_string).collect();
        assert_eq!(headers, ["Session-Expires: 90;refresher=uac", "Require: timer"]);
    }
}
