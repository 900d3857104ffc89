//! A re-offer's media (a re-INVITE or UPDATE within a call): a new
//! `c=`/`m=` address re-points the leg (its mix goes there, its packets come
//! from there), and a held leg (`a=sendonly`, `a=inactive`, `c=` 0.0.0.0)
//! is kept for `[sip] hold_timeout_seconds` without RTP instead of
//! `peer_timeout_seconds`. Both are commands to the `rtp-in` thread; nothing
//! waits on it.

use std::time::Duration;

use tutti_rtc::plain::PlainOffer;

use super::endpoint::Edge;
use crate::media::Steer;

impl Edge {
    /// Follows participant `id`'s re-offer: its new media address (one in
    /// `[rtp_in] trusted`, else `Err` saying why: 488), held or not.
    pub(super) fn follow(&self, id: u64, offer: &str, held: bool) -> Result<(), String> {
        // A hold's 0.0.0.0, a port 0 or an offer tutti does not read moves nothing.
        let moved =
            PlainOffer::parse(offer).ok().map(|o| o.remote).filter(|to| !to.ip().is_unspecified() && to.port() != 0);
        let media = &self.session.media;
        if let Some(to) = moved {
            // Validated at start: a bad entry cannot be here.
            let trusted = crate::cidr::parse_all(&self.session.cfg.rtp_in.trusted).unwrap_or_default();
            if !crate::cidr::any_contains(&trusted, to.ip()) {
                return Err(format!("the offer's RTP address {} is not in a trusted network", to.ip()));
            }
            if !media.steer(id, Steer::Remote(to)) {
                tracing::warn!(participant = id, %to, "SIP re-offer: the leg's new address not passed on");
            }
        }
        let bound = held.then(|| Duration::from_secs(self.session.cfg.sip.hold_timeout_seconds));
        if !media.steer(id, Steer::Hold(bound)) {
            tracing::warn!(participant = id, held, "SIP re-offer: hold not passed on to the leg");
        }
        Ok(())
    }
}
