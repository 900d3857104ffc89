//! Which peers are present: a peer whose datagrams stop for longer than the
//! timeout (200 ms, ten ticks, by default) is absent, and drops out of
//! selection; it is present again with its next verified datagram. A pure
//! function of the receive times given to it (no clock inside).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::wire::NodeId;

/// Default time without a datagram after which a peer is absent (10 ticks).
pub const ABSENT_AFTER: Duration = Duration::from_millis(200);

/// Last receive time per peer.
#[derive(Debug, Clone)]
pub struct Liveness {
    timeout: Duration,
    heard: HashMap<NodeId, Option<Instant>>,
}

impl Liveness {
    /// Tracks `peers`, none heard yet (absent until their first datagram).
    pub fn new(timeout: Duration, peers: impl IntoIterator<Item = NodeId>) -> Self {
        Self { timeout, heard: peers.into_iter().map(|p| (p, None)).collect() }
    }

    /// Replaces the peer set; peers kept keep their last receive time.
    pub fn set_peers(&mut self, peers: impl IntoIterator<Item = NodeId>) {
        let old = std::mem::take(&mut self.heard);
        self.heard = peers.into_iter().map(|p| (p, old.get(&p).copied().flatten())).collect();
    }

    /// A verified datagram from `peer` arrived at `now` (unknown peers are ignored).
    pub fn heard(&mut self, peer: NodeId, now: Instant) {
        if let Some(t) = self.heard.get_mut(&peer) {
            *t = Some(t.map_or(now, |t| t.max(now)));
        }
    }

    /// Whether `peer` was heard within the timeout before `now`.
    pub fn present(&self, peer: NodeId, now: Instant) -> bool {
        self.heard.get(&peer).copied().flatten().is_some_and(|t| now.saturating_duration_since(t) <= self.timeout)
    }

    /// The peers absent at `now`, sorted.
    pub fn absent(&self, now: Instant) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = self.heard.keys().copied().filter(|&p| !self.present(p, now)).collect();
        v.sort_unstable();
        v
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_silent_for_ten_ticks_is_absent_and_returns_with_its_next_datagram() {
        let t0 = Instant::now();
        let tick = Duration::from_millis(20);
        let (a, b) = (NodeId(1), NodeId(2));
        let mut l = Liveness::new(ABSENT_AFTER, [a, b]);
        assert_eq!(l.absent(t0), vec![a, b], "never heard");
        for n in 0..50u32 {
            l.heard(a, t0 + tick * n);
            if n < 20 {
                l.heard(b, t0 + tick * n);
            }
        }
        let at = |n: u32| t0 + tick * n;
        assert!(l.present(b, at(29)), "b's last datagram was at tick 19: 10 ticks ago");
        assert!(!l.present(b, at(30)), "11 ticks ago: absent");
        assert_eq!(l.absent(at(31)), vec![b]);
        assert!(l.present(a, at(49)));
        l.heard(b, at(60));
        assert!(l.present(b, at(60)));
        // An unknown sender changes nothing; a late-arriving old time does not go back.
        l.heard(NodeId(9), at(60));
        l.heard(b, at(1));
        assert!(l.present(b, at(65)));
        l.set_peers([b]);
        assert!(l.present(b, at(65)));
        assert!(!l.present(a, at(49)), "a left the peer set");
    }
}
