//! The fleet: how a run's N clients are split into rooms, the order they
//! join in, and who does what in each room. Pure arithmetic, no I/O.
//!
//! - **Layouts.** One room (`--room`, the default), `--rooms R` (R rooms,
//!   sizes as equal as they can be: the first `N mod R` rooms hold one more),
//!   or a size mix `--room-sizes 2:30,10:50,100:15,1000:5` (SIZE:PERCENT of
//!   *rooms*, percents adding up to 100). A mix is drawn room by room by
//!   smooth weighted round-robin (each draw adds every size's percent to its
//!   credit, takes the size with the most credit, ties to the one listed
//!   first, and takes 100 off it), each room filled to its size; the last room
//!   drawn holds what is left of N, so it may be smaller. The draw is
//!   deterministic: over any 20 consecutive rooms the mix above gives 6 of 2,
//!   10 of 10, 3 of 100 and 1 of 1000. `tutti capacity --room-size S` is the
//!   mix `S:100`: rooms of S, the last one the rest (⌈N/S⌉ rooms).
//! - **Join order.** Round-robin over the rooms that still have someone to
//!   join, so rooms fill at the same pace (a small room is complete early).
//! - **Roles per room.** Talkers: every room gets ⌊share·size⌋ or
//!   ⌈share·size⌉, the fractions carried from room to room so that the run
//!   holds round(share·N) talkers. Probes (mouth-to-ear needs the probe
//!   talker and its listeners in the same room): the `probe_rooms` largest
//!   rooms of at least 2 (ties: the first) each get the probe talkers
//!   (at most size − 1, so someone hears them) and probe listeners; other
//!   rooms have none.

use crate::marker::MAX_PROBES;
use crate::model::{LoadConfig, Role, RoomLayout, SizeShare};

/// Largest room size a layout accepts.
pub const MAX_ROOM_SIZE: usize = 100_000;

/// Parses a room-size mix: `SIZE:PERCENT[,SIZE:PERCENT…]`, sizes 1 to
/// [`MAX_ROOM_SIZE`], each size once, percents above 0 adding up to 100
/// (±0.01).
pub fn parse_room_sizes(text: &str) -> Result<Vec<SizeShare>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty room-size mix; expected SIZE:PERCENT[,SIZE:PERCENT…], e.g. 2:30,10:70".into());
    }
    let mut out: Vec<SizeShare> = Vec::new();
    for item in text.split(',') {
        let item = item.trim();
        let Some((size, percent)) = item.split_once(':') else {
            return Err(format!("'{item}': expected SIZE:PERCENT, e.g. 10:50"));
        };
        let size: usize =
            size.trim().parse().map_err(|_| format!("'{item}': the size '{}' is not a whole number", size.trim()))?;
        if size == 0 || size > MAX_ROOM_SIZE {
            return Err(format!("'{item}': the size must be 1 to {MAX_ROOM_SIZE}"));
        }
        let percent: f64 = percent
            .trim()
            .parse()
            .map_err(|_| format!("'{item}': the percent '{}' is not a number", percent.trim()))?;
        if !percent.is_finite() || percent <= 0.0 || percent > 100.0 {
            return Err(format!("'{item}': the percent must be above 0 and at most 100"));
        }
        if out.iter().any(|s| s.size == size) {
            return Err(format!("the size {size} is listed twice"));
        }
        out.push(SizeShare { size, percent });
    }
    let sum: f64 = out.iter().map(|s| s.percent).sum();
    if (sum - 100.0).abs() > 0.01 {
        return Err(format!("the percents add up to {sum}, not 100"));
    }
    Ok(out)
}

/// The room sizes of `n` clients under `layout`, in room order (they add up
/// to `n`).
pub fn split(n: usize, layout: &RoomLayout) -> Result<Vec<usize>, String> {
    if n == 0 {
        return Err("at least one participant".into());
    }
    match layout {
        RoomLayout::Single => Ok(vec![n]),
        RoomLayout::Count(0) => Err("at least one room".into()),
        RoomLayout::Count(r) if *r > n => Err(format!("{r} rooms for {n} participants: a room would be empty")),
        RoomLayout::Count(r) => Ok((0..*r).map(|i| n / r + usize::from(i < n % r)).collect()),
        RoomLayout::Mix(mix) => {
            if mix.is_empty() {
                return Err("empty room-size mix".into());
            }
            let total: f64 = mix.iter().map(|s| s.percent).sum();
            let mut credit = vec![0.0f64; mix.len()];
            let mut left = n;
            let mut sizes = Vec::new();
            while left > 0 {
                for (c, s) in credit.iter_mut().zip(mix) {
                    *c += s.percent;
                }
                let mut pick = 0;
                for k in 1..mix.len() {
                    if credit[k] > credit[pick] + 1e-9 {
                        pick = k;
                    }
                }
                credit[pick] -= total;
                let size = mix[pick].size.clamp(1, MAX_ROOM_SIZE).min(left);
                sizes.push(size);
                left -= size;
            }
            Ok(sizes)
        }
    }
}

/// The room sizes of a run, in room order.
pub fn sizes(cfg: &LoadConfig) -> Result<Vec<usize>, String> {
    split(cfg.clients, &cfg.rooms)
}

/// The name of room `i` of `count`: the configured name for a single room,
/// `<room>-<i>` otherwise.
pub fn name(cfg: &LoadConfig, i: usize, count: usize) -> String {
    if count == 1 && cfg.rooms == RoomLayout::Single { cfg.room.clone() } else { format!("{}-{i}", cfg.room) }
}

/// The order clients join in: (room, place in the room), round-robin over
/// the rooms still short.
pub fn join_order(sizes: &[usize]) -> Vec<(usize, usize)> {
    let total: usize = sizes.iter().sum();
    let mut out = Vec::with_capacity(total);
    let mut placed = vec![0usize; sizes.len()];
    while out.len() < total {
        for (r, &size) in sizes.iter().enumerate() {
            if placed[r] < size {
                out.push((r, placed[r]));
                placed[r] += 1;
            }
        }
    }
    out
}

/// Roles for one room of `n`: probe talkers first, then `talkers` talkers and
/// `listeners` probe listeners spread evenly over the rest. Returns (role,
/// probe index).
pub fn room_roles(n: usize, talkers: usize, probes: usize, listeners: usize) -> Vec<(Role, Option<usize>)> {
    let probes = probes.min(MAX_PROBES).min(n);
    let rest = n - probes;
    let talkers = talkers.min(rest);
    let silent = rest - talkers;
    let listeners = listeners.min(silent);
    let spread = |j: usize, k: usize, of: usize| of > 0 && (j + 1) * k / of > j * k / of;
    let mut out: Vec<(Role, Option<usize>)> = (0..probes).map(|p| (Role::ProbeTalker, Some(p))).collect();
    let mut s = 0;
    for j in 0..rest {
        if spread(j, talkers, rest) {
            out.push((Role::Talker, None));
        } else {
            out.push((if spread(s, listeners, silent) { Role::ProbeListener } else { Role::Silent }, None));
            s += 1;
        }
    }
    out
}

/// What the roles of a fleet are made from.
#[derive(Debug, Clone, Copy)]
pub struct RoleMix {
    /// Share of participants that talk (0..1).
    pub talkers: f64,
    /// Probe talkers per probe room.
    pub probe_talkers: usize,
    /// Probe listeners per probe room.
    pub probe_listeners: usize,
    /// Rooms that get probes.
    pub probe_rooms: usize,
}

/// The rooms that get probes: the `count` largest of at least 2 (ties: the first).
pub fn probe_rooms(sizes: &[usize], count: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..sizes.len()).filter(|&r| sizes[r] >= 2).collect();
    order.sort_by_key(|&r| (std::cmp::Reverse(sizes[r]), r));
    order.truncate(count);
    order.sort_unstable();
    order
}

/// Roles of every room: `out[room][place]`.
pub fn fleet_roles(sizes: &[usize], mix: RoleMix) -> Vec<Vec<(Role, Option<usize>)>> {
    let share = mix.talkers.clamp(0.0, 1.0);
    let probed = probe_rooms(sizes, mix.probe_rooms);
    let mut cumulative = 0usize;
    let mut talkers_before = 0usize;
    sizes
        .iter()
        .enumerate()
        .map(|(r, &size)| {
            cumulative += size;
            let upto = (share * cumulative as f64).round() as usize;
            let talkers = upto.saturating_sub(talkers_before);
            talkers_before = upto;
            let (probes, listeners) = if probed.contains(&r) {
                (mix.probe_talkers.min(MAX_PROBES).min(size.saturating_sub(1)), mix.probe_listeners)
            } else {
                (0, 0)
            };
            room_roles(size, talkers, probes, listeners)
        })
        .collect()
}

/// Whether client `index` of `n` sends no RFC 6464 level, for a share
/// `share` of clients without (spread evenly over the join order).
pub fn without_level(index: usize, n: usize, share: f64) -> bool {
    let k = (share.clamp(0.0, 1.0) * n as f64).round() as usize;
    n > 0 && (index + 1) * k / n > index * k / n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mix(text: &str) -> RoomLayout {
        RoomLayout::Mix(parse_room_sizes(text).expect("a valid mix"))
    }

    #[test]
    fn parses_a_mix() {
        let m = parse_room_sizes(" 2:30, 10:50,100:15,1000:5").expect("valid");
        assert_eq!(m.len(), 4);
        assert_eq!((m[0].size, m[0].percent), (2, 30.0));
        assert_eq!((m[3].size, m[3].percent), (1000, 5.0));
        assert_eq!(parse_room_sizes("10:100").expect("valid"), vec![SizeShare { size: 10, percent: 100.0 }]);
        assert!(parse_room_sizes("3:33.34,6:33.33,9:33.33").is_ok());
    }

    #[test]
    fn bad_mixes_say_why() {
        let err = |t: &str| parse_room_sizes(t).expect_err("must be refused");
        assert!(err("").contains("empty"));
        assert!(err("10").contains("expected SIZE:PERCENT"));
        assert!(err("ten:100").contains("not a whole number"));
        assert!(err("10:x").contains("not a number"));
        assert!(err("0:100").contains("size must be"));
        assert!(err("200000:100").contains("size must be"));
        assert!(err("10:0,2:100").contains("above 0"));
        assert!(err("10:-5,2:105").contains("above 0"));
        assert!(err("10:nan").contains("above 0"));
        assert!(err("10:50,10:50").contains("twice"));
        assert!(err("2:30,10:50").contains("add up to 80"));
        assert!(err("2:30,,10:70").contains("expected SIZE:PERCENT"));
    }

    #[test]
    fn equal_rooms() {
        assert_eq!(split(20, &RoomLayout::Count(4)).expect("ok"), vec![5; 4]);
        assert_eq!(split(10, &RoomLayout::Count(4)).expect("ok"), vec![3, 3, 2, 2]);
        assert_eq!(split(7, &RoomLayout::Single).expect("ok"), vec![7]);
        assert!(split(3, &RoomLayout::Count(4)).expect_err("too many rooms").contains("empty"));
        assert!(split(3, &RoomLayout::Count(0)).is_err());
        assert!(split(0, &RoomLayout::Single).is_err());
    }

    #[test]
    fn rooms_of_one_size_are_filled_one_by_one() {
        assert_eq!(split(25, &mix("10:100")).expect("ok"), vec![10, 10, 5]);
        assert_eq!(split(30, &mix("10:100")).expect("ok"), vec![10, 10, 10]);
        assert_eq!(split(3, &mix("10:100")).expect("ok"), vec![3]);
    }

    #[test]
    fn a_mix_is_drawn_in_its_proportions() {
        let sizes = split(100_000, &mix("2:30,10:50,100:15,1000:5")).expect("ok");
        assert_eq!(sizes.iter().sum::<usize>(), 100_000);
        // Every full window of 20 rooms holds the mix exactly.
        let window = &sizes[..20];
        let count = |s: usize| window.iter().filter(|&&x| x == s).count();
        assert_eq!((count(2), count(10), count(100), count(1000)), (6, 10, 3, 1));
        // The first draws: 10 (most credit), then 2, 10, 100, …
        assert_eq!(&sizes[..4], &[10, 2, 10, 100]);
        // Deterministic.
        assert_eq!(sizes, split(100_000, &mix("2:30,10:50,100:15,1000:5")).expect("ok"));
        // The last room holds the rest.
        let small = split(15, &mix("2:50,10:50")).expect("ok");
        assert_eq!(small, vec![2, 10, 2, 1]);
    }

    #[test]
    fn joins_go_round_robin_over_rooms() {
        let order = join_order(&[2, 3, 1]);
        assert_eq!(order, vec![(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (1, 2)]);
    }

    #[test]
    fn every_room_gets_its_share_of_talkers() {
        let sizes = vec![10; 5];
        let m = RoleMix { talkers: 0.1, probe_talkers: 3, probe_listeners: 2, probe_rooms: 2 };
        let roles = fleet_roles(&sizes, m);
        for (r, room) in roles.iter().enumerate() {
            assert_eq!(room.len(), 10);
            assert_eq!(room.iter().filter(|x| x.0 == Role::Talker).count(), 1, "room {r}");
            let probes = room.iter().filter(|x| x.0 == Role::ProbeTalker).count();
            let listeners = room.iter().filter(|x| x.0 == Role::ProbeListener).count();
            if r < 2 {
                assert_eq!((probes, listeners), (3, 2), "room {r} is a probe room");
            } else {
                assert_eq!((probes, listeners), (0, 0), "room {r} has no probes");
            }
        }
        // Fractions carry over: rooms of 5 at 10 % get 1, 0, 1, 0 (2 of 20).
        let roles = fleet_roles(&[5; 4], RoleMix { probe_rooms: 0, ..m });
        let t: Vec<usize> = roles.iter().map(|r| r.iter().filter(|x| x.0 == Role::Talker).count()).collect();
        assert_eq!(t, vec![1, 0, 1, 0]);
    }

    #[test]
    fn probes_go_to_the_largest_rooms_and_leave_someone_to_hear() {
        assert_eq!(probe_rooms(&[2, 100, 10, 100, 1], 2), vec![1, 3]);
        assert_eq!(probe_rooms(&[1, 1, 3], 4), vec![2]);
        let m = RoleMix { talkers: 0.0, probe_talkers: 3, probe_listeners: 8, probe_rooms: 1 };
        let roles = fleet_roles(&[2], m);
        assert_eq!(roles[0], vec![(Role::ProbeTalker, Some(0)), (Role::ProbeListener, None)]);
        // One room: the old single-room roles (probes first, talkers spread).
        let one = fleet_roles(&[20], RoleMix { talkers: 0.1, probe_talkers: 3, probe_listeners: 6, probe_rooms: 1 });
        assert_eq!(one[0].iter().filter(|x| x.0 == Role::Talker).count(), 2);
        assert_eq!(one[0].iter().filter(|x| x.0 == Role::ProbeListener).count(), 6);
        assert_eq!(
            &one[0][..3],
            &[(Role::ProbeTalker, Some(0)), (Role::ProbeTalker, Some(1)), (Role::ProbeTalker, Some(2))]
        );
    }

    #[test]
    fn level_share_is_spread() {
        let without = (0..100).filter(|&i| without_level(i, 100, 0.3)).count();
        assert_eq!(without, 30);
        assert!(!(0..10).any(|i| without_level(i, 10, 0.0)));
        assert!((0..10).all(|i| without_level(i, 10, 1.0)));
    }
}
