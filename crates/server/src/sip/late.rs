//! Late offer: an INVITE without SDP is answered 200 with tutti's offer
//! (its RTP in address: Opus, PCMU, PCMA, telephone-event), and the caller's
//! answer comes in the ACK. That answer is then the call's "offer" for the
//! one join (it names the caller's address and the one codec it chose).
//! No ACK, an ACK without SDP or with one tutti cannot use ends the call
//! with BYE.
//!
//! The stack's server dialog keeps the ACK it confirmed with
//! (`last_remote_ack`); this waits for the dialog to be confirmed (a SIP
//! task, polling its state every 20 ms, at most 64 × T1 = 32 s).

use std::time::Duration;

use rsipstack::dialog::invite_dialog::InviteDialog;
use rsipstack::sip::{Header, headers::ContentType};

use super::endpoint::Edge;

/// How long the ACK may take (RFC 3261: 64 × T1).
const ACK_WITHIN: Duration = Duration::from_secs(32);
/// How often the dialog's state is looked at meanwhile.
const POLL: Duration = Duration::from_millis(20);

/// tutti's offer: receive on `local`, Opus (96), PCMU (0), PCMA (8) and
/// telephone-event at 8 kHz (101); `session` its `o=` session id.
pub(super) fn offer(local: std::net::SocketAddr, session: u64) -> String {
    let ip = local.ip();
    let kind = if ip.is_ipv4() { "IP4" } else { "IP6" };
    format!(
        "v=0\r\no=tutti {session} 1 IN {kind} {ip}\r\ns=tutti\r\nc=IN {kind} {ip}\r\nt=0 0\r\n\
         m=audio {port} RTP/AVP 96 0 8 101\r\na=rtpmap:96 opus/48000/2\r\na=fmtp:96 minptime=10;useinbandfec=1\r\n\
         a=rtpmap:0 PCMU/8000\r\na=rtpmap:8 PCMA/8000\r\na=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-15\r\n\
         a=ptime:20\r\na=sendrecv\r\n",
        port = local.port(),
    )
}

/// `answer` (the join's) with `offer`'s `o=` line: one session throughout.
pub(super) fn same_origin(answer: &str, offer: &str) -> String {
    let origin = offer.lines().find(|l| l.starts_with("o=")).unwrap_or_default();
    answer.lines().map(|l| if l.starts_with("o=") { origin } else { l }).fold(String::new(), |s, l| s + l + "\r\n")
}

impl Edge {
    /// Answers `dialog`'s INVITE without SDP with tutti's offer (and
    /// `headers`), and returns the caller's answer from its ACK with the
    /// offer; `None` when the call ended (the caller hung up, or it got a
    /// BYE saying why here).
    pub(super) async fn late_offer(&self, dialog: &InviteDialog, mut headers: Vec<Header>) -> Option<(String, String)> {
        let Some((local, _)) = self.session.media.plain_rtp() else {
            tracing::info!("SIP INVITE without SDP refused (488): plain RTP is off");
            dialog.reject(Some(rsipstack::sip::StatusCode::NotAcceptableHere), None).ok();
            return None;
        };
        let offer = offer(local, crate::auth::unix_now());
        headers.push(Header::ContentType(ContentType::new("application/sdp")));
        if let Err(e) = dialog.accept(Some(headers), Some(offer.clone().into_bytes())) {
            tracing::info!(error = %e, "SIP late offer not sent");
            return None;
        }
        let end = tokio::time::Instant::now() + ACK_WITHIN;
        while !dialog.state().is_confirmed() {
            if dialog.state().is_terminated() || tokio::time::Instant::now() > end {
                return None;
            }
            tokio::time::sleep(POLL).await;
        }
        let ack = dialog.last_remote_ack().map(|a| String::from_utf8_lossy(&a.body).into_owned()).unwrap_or_default();
        if ack.trim().is_empty() {
            self.end_late(dialog, "the ACK to tutti's offer carried no SDP answer").await;
            return None;
        }
        Some((ack, offer))
    }

    /// Ends an answered late-offer call whose answer tutti cannot use.
    pub(super) async fn end_late(&self, dialog: &InviteDialog, why: &str) {
        tracing::info!(dialog = %dialog.id(), reason = why, "SIP late offer: the caller's answer is not usable: BYE");
        dialog.bye().await.ok();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuttis_offer_parses_as_opus_with_keys_and_the_answer_keeps_its_origin() {
        let local: std::net::SocketAddr = "192.0.2.7:40000".parse().expect("addr");
        let sdp = offer(local, 42);
        let parsed = tutti_rtc::plain::PlainOffer::parse(&sdp).expect("parses");
        assert_eq!(parsed.remote, local);
        assert_eq!(parsed.codec, tutti_rtc::plain::Codec::Opus);
        assert!(parsed.events.is_some());
        let answer = same_origin("v=0\r\no=tutti 9 1 IN IP4 192.0.2.7\r\ns=tutti\r\n", &sdp);
        assert_eq!(answer, "v=0\r\no=tutti 42 1 IN IP4 192.0.2.7\r\ns=tutti\r\n");
    }
}
