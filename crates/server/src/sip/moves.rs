//! A re-offer's media (a re-INVITE or UPDATE within a call): a new
//! `c=`/`m=` address re-points the leg (its mix goes there, its packets come
//! from there), and a held leg (`a=sendonly`, `a=inactive`, `c=` 0.0.0.0)
//! is kept for `[sip] hold_timeout_seconds` without RTP instead of
//! `peer_timeout_seconds` (`session::legs`).

use std::time::Duration;

use tutti_rtc::plain::PlainOffer;

use super::endpoint::Edge;

impl Edge {
    /// Follows participant `id`'s re-offer: its new media address (one in
    /// `[rtp_in] trusted`, else `Err` saying why: 488), held or not.
    pub(super) fn follow(&self, id: u64, offer: &str, held: bool) -> Result<(), String> {
        // A hold's 0.0.0.0, a port 0 or an offer tutti does not read moves nothing.
        let moved =
            PlainOffer::parse(offer).ok().map(|o| o.remote).filter(|to| !to.ip().is_unspecified() && to.port() != 0);
        if let Some(to) = moved {
            self.session.move_leg(id, to)?;
        }
        let bound = held.then(|| Duration::from_secs(self.session.cfg.sip.hold_timeout_seconds));
        self.session.hold_leg(id, bound);
        Ok(())
    }
}
