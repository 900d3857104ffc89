//! Retiring webrtc-rs's connection once a server's call is up: when it may
//! be, the retirement itself, and how the retired connection (`Retired`, in
//! the parent) then reads the peer's SRTCP and DTLS alerts alone.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::connection::local_sdp;
use super::datagram::{is_dtls, is_rtcp};
use super::dtls::dtls_session;
use super::{LeanReceiver, Media, Retired, RetiredRead};
#[cfg(doc)]
use crate::alert;
use crate::alert::DtlsAlerts;
use crate::srtp::{SrtcpContext, SrtcpReceiver, SrtpReceiver};

/// A connected server peer is retired ([`Media::retire`]) this long after
/// it connected at the earliest (and at its next timer run, within a
/// second): webrtc-rs's handshake is over (the client's authenticated media
/// or RTCP says it has our last flight). Short, because the handshakes in
/// flight during a wave of joins are what the allocator keeps afterwards:
/// 0.5 s against 2 s left ~6 KiB less RSS per participant (400 pion clients).
pub(crate) const RETIRE_AFTER: Duration = Duration::from_millis(500);

/// SRTCP indexes left unused between webrtc-rs's last report and our first
/// after a retirement (we count what it sent; the margin covers nothing
/// but is cheap: the receiver's replay window only moves forward).
const SRTCP_INDEX_MARGIN: u32 = 16;

impl Media {
    /// That this connection retires webrtc-rs's peer once the call is up
    /// ([`Media::retire`]); servers only.
    pub(crate) fn set_retire(&mut self, retire: bool) {
        self.retire_wanted = retire;
    }

    /// Whether webrtc-rs's peer is gone ([`Media::retire`]).
    pub(crate) fn is_retired(&self) -> bool {
        self.retired.is_some()
    }

    /// Whether everything a retired connection needs is in place: connected
    /// for [`RETIRE_AFTER`], ICE steady and no restart's grace running, both
    /// RTP directions on the lean paths with this DTLS session's keys, our
    /// own reception reports and consent answers, and the peer has shown
    /// that it has the keys (authenticated media or RTCP from it).
    pub(super) fn retirable(&self, now: Instant) -> bool {
        let settled = self.connected_at.is_some_and(|at| now >= at + RETIRE_AFTER);
        let generation = self.keys.generation();
        // Lean, or to be (nothing sent yet: a silent room; decided at the retirement).
        let sending = self.lean.as_ref().map_or(!self.decided && self.lean_wanted, |l| l.generation == generation)
            && !self.rekey_pending;
        let receiving = self.lean_receive
            && self.own_reports
            && self.lean_rx_off != Some(generation)
            && self.lean_rx.as_ref().is_none_or(|rx| rx.generation == generation);
        let heard = self.remote_rtcp || self.lean_rx.as_ref().is_some_and(|rx| rx.opened);
        let checks = self.checks.as_ref().is_some_and(|c| c.all_to_agent_until.is_none_or(|t| now >= t));
        settled && self.ice_steady && sending && receiving && heard && checks && self.remote.is_some()
    }

    /// Drops webrtc-rs's connection, keeping what the call needs
    /// ([`Retired`]): ~80 KiB of peer state (handler queues, descriptions,
    /// DTLS handshake state, interceptors, statistics) freed per
    /// participant. Not done (and not asked again) when the DTLS suite's
    /// records are not ones we can read ([`alert::suite_supported`]).
    pub(super) fn retire(&mut self, now: Instant) {
        self.decide(now);
        if self.lean.is_none() {
            self.retire_wanted = false;
            return;
        }
        let Some(pc) = self.pc.as_deref_mut() else { return };
        let Some(session) = dtls_session(pc, now) else { return };
        if !session.alerts_readable {
            self.retire_wanted = false;
            return;
        }
        let Some((generation, local, remote)) = session.keys(&self.keys) else { return };
        let Ok(answer) = local_sdp(pc) else { return };
        let answer = answer.into_boxed_str();
        let (Some(block), true) = (self.keys.record_key_block(), generation == self.keys.generation()) else { return };
        let first_index = self.rtcp_sent.saturating_add(SRTCP_INDEX_MARGIN);
        let (Some(alerts), Ok(srtcp), Ok(srtcp_rx)) = (
            DtlsAlerts::new(&block, session.is_client),
            SrtcpContext::new(&local, first_index),
            SrtcpReceiver::new(&remote),
        ) else {
            self.retire_wanted = false;
            return;
        };
        if self.lean_rx.is_none() {
            // Nothing received yet on the lean path (a client that has sent
            // only RTCP so far): its receiver now, webrtc-rs's path being gone.
            let Ok(srtp) = SrtpReceiver::new(&remote) else { return };
            self.lean_rx = Some(Box::new(LeanReceiver { srtp, generation, opened: false, failures: 0 }));
        }
        self.retired = Some(Box::new(Retired { srtcp, srtcp_rx, alerts, answer }));
        self.pc = None;
        self.keys.forget();
    }

    /// A datagram for a retired connection that is neither RTP nor STUN:
    /// SRTCP (opened with our own receiver, its sender reports taken) or a
    /// DTLS record (an authenticated close_notify or fatal alert ends the
    /// call). `scratch` is the caller's buffer to open it in.
    pub(crate) fn read_retired(
        &mut self,
        data: &[u8],
        from: SocketAddr,
        tcp: bool,
        now: Instant,
        scratch: &mut Vec<u8>,
    ) -> RetiredRead {
        let Some(retired) = self.retired.as_deref_mut() else { return RetiredRead::Nothing };
        if is_dtls(data) {
            if !self.closed && retired.alerts.ends_session(data) {
                self.closed = true;
                return RetiredRead::Closed;
            }
            return RetiredRead::Nothing;
        }
        if !is_rtcp(data) {
            return RetiredRead::Nothing;
        }
        scratch.clear();
        scratch.extend_from_slice(data);
        let Ok(len) = retired.srtcp_rx.unprotect_rtcp(scratch) else { return RetiredRead::Nothing };
        let mut plain = &scratch[..len];
        let Ok(packets) = rtc::rtcp::packet::unmarshal(&mut plain) else { return RetiredRead::Nothing };
        self.authenticated_from(from, tcp);
        self.on_rtcp(&packets, now);
        RetiredRead::Rtcp
    }
}
