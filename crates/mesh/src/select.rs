//! The global top-K: every node of a room runs [`select`] on the same
//! candidates and gets the same speakers.
//!
//! Determinism without shared hidden state: the only state hysteresis
//! needs (who was selected last tick) travels *in the candidates*: each
//! origin node marks its own participants that its previous selection held
//! (`selected`, the incumbency flag). [`select`] is then a pure function of
//! one tick's candidates: two nodes given the same candidates, in any
//! order, choose the same set; two nodes that saw different candidates
//! (a lost datagram) agree again at the first tick they see the same ones.
//! Hold is the origin's: a participant stays a candidate while talking
//! within its hold time, and an origin always sends its incumbents.
//!
//! The rule (the mixer's, across nodes): incumbents (at most K, by rank)
//! keep their seats; free seats go to the loudest challengers; then a
//! challenger replaces the weakest incumbent only when louder by the
//! hysteresis margin. Ties are broken by (node id, participant id),
//! smaller first, the same everywhere.

use std::cmp::Ordering;

use crate::wire::NodeId;

/// One candidate as selection sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The node the participant is on.
    pub node: NodeId,
    /// The participant.
    pub participant: u64,
    /// Smoothed loudness, 1/256 dB (larger is louder).
    pub rank: u16,
    /// The origin's previous selection held this participant.
    pub incumbent: bool,
}

/// A selected speaker.
pub type Speaker = (NodeId, u64);

/// The fixed order: louder first, then smaller (node, participant); a total
/// order (ending with incumbents first), so that which of two duplicates is kept
/// never depends on the order they arrived in (a property test found it).
fn order(a: &Entry, b: &Entry) -> Ordering {
    b.rank
        .cmp(&a.rank)
        .then(a.node.cmp(&b.node))
        .then(a.participant.cmp(&b.participant))
        .then(b.incumbent.cmp(&a.incumbent))
}

/// Chooses at most `k` speakers among `entries` (local and remote, any
/// order; a duplicated (node, participant) counts once, at its loudest).
/// `hysteresis` is in the unit of `rank` (1/256 dB). The result is sorted
/// by (node, participant).
pub fn select(k: usize, hysteresis: u16, entries: &[Entry]) -> Vec<Speaker> {
    let mut all: Vec<Entry> = entries.to_vec();
    all.sort_unstable_by(order);
    // Keep the first (loudest) of a duplicated participant.
    let mut seen = std::collections::HashSet::with_capacity(all.len());
    all.retain(|e| seen.insert((e.node, e.participant)));

    let (incumbents, challengers): (Vec<Entry>, Vec<Entry>) = all.into_iter().partition(|e| e.incumbent);
    let mut chosen: Vec<Entry> = incumbents.into_iter().take(k).collect();
    let mut challengers = challengers.into_iter().peekable();
    while chosen.len() < k {
        let Some(c) = challengers.next() else { break };
        chosen.push(c);
    }
    // `chosen` stays in `order`: its last entry is the weakest.
    chosen.sort_unstable_by(order);
    while let (Some(c), Some(weakest)) = (challengers.peek().copied(), chosen.last().copied()) {
        if u32::from(c.rank) <= u32::from(weakest.rank) + u32::from(hysteresis) {
            break;
        }
        challengers.next();
        chosen.pop();
        let at = chosen.partition_point(|e| order(e, &c) == Ordering::Less);
        chosen.insert(at, c);
    }
    let mut out: Vec<Speaker> = chosen.into_iter().map(|e| (e.node, e.participant)).collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn e(node: u64, participant: u64, db: u16, incumbent: bool) -> Entry {
        Entry { node: NodeId(node), participant, rank: db * 256, incumbent }
    }

    #[test]
    fn loudest_first_then_fixed_tie_break() {
        let es = [e(2, 1, 50, false), e(1, 9, 50, false), e(1, 3, 60, false), e(3, 1, 40, false)];
        assert_eq!(select(2, 0, &es), vec![(NodeId(1), 3), (NodeId(1), 9)]);
        assert_eq!(select(3, 0, &es), vec![(NodeId(1), 3), (NodeId(1), 9), (NodeId(2), 1)]);
        assert!(select(0, 0, &es).is_empty());
        assert_eq!(select(9, 0, &es).len(), 4);
    }

    #[test]
    fn an_incumbent_keeps_its_seat_within_the_margin() {
        let h = 6 * 256;
        // Incumbent at 50 dB, challenger at 55: stays. At 57: replaced.
        assert_eq!(select(1, h, &[e(1, 1, 50, true), e(2, 2, 55, false)]), vec![(NodeId(1), 1)]);
        assert_eq!(select(1, h, &[e(1, 1, 50, true), e(2, 2, 57, false)]), vec![(NodeId(2), 2)]);
        // More incumbents than seats (nodes disagreed last tick): the loudest keep them.
        let es = [e(1, 1, 50, true), e(2, 2, 52, true), e(3, 3, 40, true)];
        assert_eq!(select(2, h, &es), vec![(NodeId(1), 1), (NodeId(2), 2)]);
    }

    fn entries() -> impl Strategy<Value = Vec<Entry>> {
        prop::collection::vec((0u64..4, 0u64..6, 0u16..40, any::<bool>()), 0..24).prop_map(|v| {
            v.into_iter()
                .map(|(n, p, r, i)| Entry { node: NodeId(n), participant: p, rank: r * 64, incumbent: i })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn same_candidates_in_any_order_same_speakers(es in entries(), k in 0usize..7, h in 0u16..2000, seed in any::<u64>()) {
            let a = select(k, h, &es);
            // Another node receives the same candidates in another order.
            let mut shuffled = es.clone();
            let mut x = seed | 1;
            for i in (1..shuffled.len()).rev() {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                shuffled.swap(i, (x % (i as u64 + 1)) as usize);
            }
            let b = select(k, h, &shuffled);
            prop_assert_eq!(&a, &b);
            // At most k, each a real candidate, no duplicates.
            prop_assert!(a.len() <= k);
            prop_assert!(a.iter().all(|s| es.iter().any(|e| (e.node, e.participant) == *s)));
            let mut d = a.clone(); d.dedup();
            prop_assert_eq!(d.len(), a.len());
            // Without hysteresis it is exactly the top k by the fixed order.
            let mut top = es.clone();
            top.sort_by(order);
            let mut seen = std::collections::HashSet::new();
            top.retain(|e| seen.insert((e.node, e.participant)));
            let mut want: Vec<Speaker> = top.iter().take(k).map(|e| (e.node, e.participant)).collect();
            want.sort();
            let plain: Vec<Entry> = es.iter().map(|e| Entry { incumbent: false, ..*e }).collect();
            prop_assert_eq!(select(k, h, &plain), want);
        }

        #[test]
        fn three_nodes_ticking_agree_at_every_tick_without_loss(
            ranks in prop::collection::vec(prop::collection::vec(0u16..30, 12), 1..40),
            losses in prop::collection::vec((0usize..40, 0usize..3, 0usize..3), 0..6),
            k in 1usize..5,
        ) {
            // Three nodes, four participants each; every tick each node flags
            // its own participants that its previous choice held, sends its
            // candidates, and chooses from its own and what it received.
            // A lost message makes one node choose from less, for that tick.
            let node = |n: usize| NodeId(n as u64 * 7 + 3);
            let mut prev: Vec<Vec<Speaker>> = vec![Vec::new(); 3];
            for (t, r) in ranks.iter().enumerate() {
                let sent: Vec<Vec<Entry>> = (0..3)
                    .map(|n| {
                        (0..4)
                            .map(|i| {
                                let p = (n * 4 + i) as u64;
                                Entry { node: node(n), participant: p, rank: r[n * 4 + i] * 256, incumbent: prev[n].contains(&(node(n), p)) }
                            })
                            .collect()
                    })
                    .collect();
                let lossy = losses.iter().any(|&(lt, to, from)| lt == t && to != from);
                let chosen: Vec<Vec<Speaker>> = (0..3)
                    .map(|n| {
                        let seen: Vec<Entry> = (0..3)
                            .filter(|&m| m == n || !losses.iter().any(|&(lt, to, from)| lt == t && to == n && from == m))
                            .flat_map(|m| sent[m].iter().copied())
                            .collect();
                        select(k, 6 * 256, &seen)
                    })
                    .collect();
                if !lossy {
                    prop_assert_eq!(&chosen[0], &chosen[1], "tick {}", t);
                    prop_assert_eq!(&chosen[1], &chosen[2], "tick {}", t);
                }
                prev = chosen;
            }
        }

        #[test]
        fn nodes_that_diverged_agree_again_on_the_same_candidates(es in entries(), k in 1usize..5, h in 0u16..2000) {
            // Whatever each node believed before, incumbency flags come from
            // the candidates, so the same candidates give the same choice.
            prop_assert_eq!(select(k, h, &es), select(k, h, &es.iter().rev().copied().collect::<Vec<_>>()));
        }
    }
}
