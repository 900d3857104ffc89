//! Consent checks (RFC 7675) answered without webrtc-rs: on the lean receive
//! path all but those its ICE agent is fed, and on a retired connection every
//! one that verifies.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::datagram::{Spare, Transmit};
use super::{LeanChecks, Media};
use crate::stun::{ANSWER_MAX, CheckAnswerer};

impl Media {
    /// Answers consent checks with `answerer` (the current ICE credentials:
    /// set again after a restart, with `all_to_agent_until`), but hands
    /// webrtc-rs's agent one authenticated check every `feed_every`, and
    /// every check until `all_to_agent_until`.
    pub(crate) fn set_check_answerer(
        &mut self,
        answerer: CheckAnswerer,
        feed_every: Duration,
        all_to_agent_until: Option<Instant>,
    ) {
        self.checks = Some(Box::new(LeanChecks { answerer, feed_every, all_to_agent_until, fed: None }));
    }

    /// The lean receive path for STUN: answers a consent check (see
    /// [`CheckAnswerer`]) from the selected pair's remote address of a
    /// connected peer whose ICE is steady, into `transmits`. Returns false
    /// when the datagram is webrtc-rs's: anything else, every check for a
    /// while after a restart, and the check due to feed its agent (the
    /// first from an address, then one every `feed_every`).
    pub(crate) fn answer_check(
        &mut self,
        data: &[u8],
        from: SocketAddr,
        tcp: bool,
        now: Instant,
        transmits: &mut VecDeque<Transmit>,
        spare: &mut Spare,
    ) -> bool {
        if self.retired.is_some() {
            return self.answer_retired_check(data, from, tcp, transmits, spare);
        }
        let steady = self.lean_receive && self.is_connected() && self.ice_steady;
        let Some(checks) = self.checks.as_mut().filter(|_| steady) else { return false };
        if self.remote != Some(from) || self.remote_tcp != tcp || checks.all_to_agent_until.is_some_and(|t| now < t) {
            return false;
        }
        let due = checks.fed.is_none_or(|(at, addr, on_tcp)| {
            addr != from || on_tcp != tcp || now.saturating_duration_since(at) >= checks.feed_every
        });
        if due {
            // Only an authenticated check counts as fed: a forged one (the
            // peer's address spoofed) cannot starve the agent of real ones.
            if checks.answerer.verify(data) {
                checks.fed = Some((now, from, tcp));
            }
            return false;
        }
        let mut buf = spare.take(ANSWER_MAX);
        if !checks.answerer.answer(data, from, &mut buf) {
            spare.give(buf);
            return false;
        }
        transmits.push_back(Transmit { to: from, data: buf, tcp });
        true
    }

    /// A retired connection answers every check that verifies, from any
    /// address: there is no agent to hand one to. A nomination
    /// (USE-CANDIDATE) moves where we send, as webrtc-rs's agent would
    /// select the pair; so does authenticated media ([`Media::authenticated_from`]).
    fn answer_retired_check(
        &mut self,
        data: &[u8],
        from: SocketAddr,
        tcp: bool,
        transmits: &mut VecDeque<Transmit>,
        spare: &mut Spare,
    ) -> bool {
        let Some(checks) = self.checks.as_ref() else { return false };
        let mut buf = spare.take(ANSWER_MAX);
        if !checks.answerer.answer(data, from, &mut buf) {
            spare.give(buf);
            return false;
        }
        if crate::stun::nominates(data) {
            self.remote = Some(from);
            self.remote_tcp = tcp;
        }
        transmits.push_back(Transmit { to: from, data: buf, tcp });
        true
    }
}
