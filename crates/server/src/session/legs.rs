//! A phone leg's media changed within its call (the SIP edge's re-offers):
//! a new address to send the mix to, and hold (no RTP expected for a
//! while). Commands to the plain RTP thread; nothing waits on it.

use std::net::SocketAddr;
use std::time::Duration;

use super::sessions::Sessions;
use crate::media::Steer;

impl Sessions {
    /// Participant `id`'s media moved to `to`: its mix goes there, its
    /// packets come from there. `Err` (why) when `to` is not in `[rtp_in] trusted`.
    pub(crate) fn move_leg(&self, id: u64, to: SocketAddr) -> Result<(), String> {
        // Validated at start: a bad entry cannot be here.
        let trusted = crate::cidr::parse_all(&self.cfg.rtp_in.trusted).unwrap_or_default();
        if !crate::cidr::any_contains(&trusted, to.ip()) {
            return Err(format!("the offer's RTP address {} is not in a trusted network", to.ip()));
        }
        if !self.media.steer(id, Steer::Remote(to)) {
            tracing::warn!(participant = id, %to, "the leg's new address not passed on (plain RTP off or busy)");
        }
        Ok(())
    }

    /// Participant `id` held (`Some(bound)`: removed only when silent that
    /// long) or resumed (`None`: the peer timeout again).
    pub(crate) fn hold_leg(&self, id: u64, bound: Option<Duration>) {
        if !self.media.steer(id, Steer::Hold(bound)) {
            tracing::warn!(
                participant = id,
                held = bound.is_some(),
                "hold not passed on to the leg (plain RTP off or busy)"
            );
        }
    }
}
