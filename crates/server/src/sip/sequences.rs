//! What a caller's keys make: the `[sip] keypad` sequence a caller's keys
//! complete, and the key a SIP INFO body carries. No I/O and no clock (the
//! time of each key is passed in).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::config::KeyAction;

/// Keys further apart than this start a new sequence.
const SEQUENCE_GAP: Duration = Duration::from_secs(3);

/// The keys each caller pressed towards a sequence of the map.
#[derive(Debug, Default)]
pub(super) struct Sequences {
    map: Vec<(String, KeyAction)>,
    /// By participant: the keys so far (at most the longest sequence) and when the last came.
    pending: HashMap<u64, (String, Instant)>,
}

impl Sequences {
    pub(super) fn new(map: Vec<(String, KeyAction)>) -> Self {
        Self { map, pending: HashMap::new() }
    }

    /// Participant `id` pressed `key` at `now`: the action of the sequence it completes, if any.
    pub(super) fn press(&mut self, id: u64, key: char, now: Instant) -> Option<KeyAction> {
        let (keys, last) = self.pending.entry(id).or_insert_with(|| (String::new(), now));
        if now.saturating_duration_since(*last) > SEQUENCE_GAP {
            keys.clear();
        }
        *last = now;
        keys.push(key);
        let starts = |keys: &str| self.map.iter().any(|(k, _)| k.starts_with(keys));
        if !starts(keys) {
            // Not on the way to a sequence: this key may start one.
            keys.clear();
            keys.push(key);
            if !starts(keys) {
                self.pending.remove(&id);
                return None;
            }
        }
        let action = self.map.iter().find(|(k, _)| k == keys).map(|(_, a)| *a);
        if action.is_some() {
            self.pending.remove(&id);
        }
        action
    }

    /// The caller is gone.
    pub(super) fn forget(&mut self, id: u64) {
        self.pending.remove(&id);
    }
}

/// The key a SIP INFO body carries: `Signal=5` (application/dtmf-relay)
/// or the key alone (application/dtmf); `None` for anything else.
pub(super) fn info_key(content_type: &str, body: &str) -> Option<char> {
    let ct = content_type.trim().to_ascii_lowercase();
    let value = if ct.starts_with("application/dtmf-relay") {
        body.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            k.trim().eq_ignore_ascii_case("signal").then_some(v.trim())
        })?
    } else if ct.starts_with("application/dtmf") {
        body.trim()
    } else {
        return None;
    };
    let mut chars = value.chars();
    let key = chars.next()?.to_ascii_uppercase();
    (chars.next().is_none() && (key.is_ascii_digit() || "*#ABCD".contains(key))).then_some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_complete_restart_and_expire() {
        let mut s = Sequences::new(vec![("*6".into(), KeyAction::Mute), ("*7".into(), KeyAction::Hand)]);
        let t = Instant::now();
        assert_eq!(s.press(1, '*', t), None);
        assert_eq!(s.press(1, '6', t), Some(KeyAction::Mute));
        assert_eq!(s.press(1, '6', t), None, "a 6 alone is nothing");
        // A stray key before: the * starts again.
        assert_eq!(s.press(1, '5', t), None);
        assert_eq!(s.press(1, '*', t), None);
        assert_eq!(s.press(2, '*', t), None, "each caller has its own keys");
        assert_eq!(s.press(1, '*', t), None, "** : the second * starts anew");
        assert_eq!(s.press(1, '7', t), Some(KeyAction::Hand));
        assert_eq!(s.press(2, '6', t + SEQUENCE_GAP * 2), None, "too late: the * is forgotten");
        s.forget(2);
        assert!(s.pending.is_empty());
        let mut none = Sequences::new(Vec::new());
        assert_eq!(none.press(1, '*', t), None);
        assert!(none.pending.is_empty(), "nothing kept without a map");
    }

    #[test]
    fn info_bodies_carry_one_key() {
        assert_eq!(info_key("application/dtmf-relay", "Signal=5\r\nDuration=160\r\n"), Some('5'));
        assert_eq!(info_key("Application/DTMF-Relay", "signal= *\r\n"), Some('*'));
        assert_eq!(info_key("application/dtmf", "#"), Some('#'));
        assert_eq!(info_key("application/dtmf", "d\r\n"), Some('D'));
        assert_eq!(info_key("application/dtmf", "12"), None);
        assert_eq!(info_key("application/dtmf-relay", "Duration=160"), None);
        assert_eq!(info_key("text/plain", "5"), None);
        assert_eq!(info_key("application/dtmf", "x"), None);
    }
}
