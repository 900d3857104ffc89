//! A PIN being entered: the keys of one try, how many tries are left, and
//! the room a PIN opens (compared in constant time). No I/O and no clock:
//! the driver (`pin`) passes the keys and the timeouts in.

use crate::config::MAX_PIN;

/// What a key (or a timeout) leads to.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Keep listening.
    More,
    /// A try ended (`#`): check these digits (`None`: not a PIN at all,
    /// too long or with a key that is not a digit; wrong, surely).
    Check(Option<String>),
}

/// One caller's entry.
#[derive(Debug)]
pub(super) struct PinEntry {
    digits: String,
    /// A key that cannot be in a PIN came (a letter, too many digits).
    spoiled: bool,
    tries_left: u32,
}

impl PinEntry {
    pub(super) fn new(tries: u32) -> Self {
        Self { digits: String::with_capacity(MAX_PIN), spoiled: false, tries_left: tries.max(1) }
    }

    /// A key: `#` ends the try, `*` starts it again, a digit adds to it.
    pub(super) fn key(&mut self, key: char) -> Step {
        match key {
            '#' => {
                let spoiled = std::mem::take(&mut self.spoiled);
                let digits = std::mem::take(&mut self.digits);
                Step::Check((!spoiled && !digits.is_empty()).then_some(digits))
            }
            '*' => {
                self.digits.clear();
                self.spoiled = false;
                Step::More
            }
            d if d.is_ascii_digit() && self.digits.len() < MAX_PIN => {
                self.digits.push(d);
                Step::More
            }
            _ => {
                self.spoiled = true;
                Step::More
            }
        }
    }

    /// A try failed (wrong, or no `#` in time): whether another is left.
    pub(super) fn failed(&mut self) -> bool {
        self.digits.clear();
        self.spoiled = false;
        self.tries_left = self.tries_left.saturating_sub(1);
        self.tries_left > 0
    }
}

/// The room `entered` opens among `pins` (PIN, room). Every PIN is
/// compared, each in the same time whatever its digits (padded to
/// [`MAX_PIN`]), so the time of an answer tells nothing of how close a
/// guess was.
pub(super) fn room_for<'a>(pins: &'a [(String, String)], entered: &str) -> Option<&'a str> {
    let mut found = None;
    for (pin, room) in pins {
        if same(pin.as_bytes(), entered.as_bytes()) {
            found = Some(room.as_str());
        }
    }
    found
}

fn same(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..MAX_PIN {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0);
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn type_in(entry: &mut PinEntry, keys: &str) -> Vec<Step> {
        keys.chars().map(|k| entry.key(k)).filter(|s| *s != Step::More).collect()
    }

    #[test]
    fn hash_ends_a_try_star_restarts_it_and_tries_run_out() {
        let mut e = PinEntry::new(3);
        assert_eq!(type_in(&mut e, "12#"), [Step::Check(Some("12".into()))]);
        assert_eq!(type_in(&mut e, "9*47#"), [Step::Check(Some("47".into()))], "* starts again");
        assert_eq!(type_in(&mut e, "#"), [Step::Check(None)], "nothing entered");
        assert_eq!(type_in(&mut e, "1A2#"), [Step::Check(None)], "a letter spoils the try");
        assert_eq!(type_in(&mut e, &"1".repeat(MAX_PIN + 1)), [], "digits beyond the longest PIN");
        assert_eq!(type_in(&mut e, "#"), [Step::Check(None)], "too long");
        assert!(e.failed());
        assert!(e.failed());
        assert!(!e.failed(), "three tries, then none");
        assert!(!PinEntry::new(0).failed(), "at least one try");
    }

    #[test]
    fn a_pin_opens_its_room_only() {
        let pins = vec![("4711".to_owned(), "standup".to_owned()), ("0815".to_owned(), "board".to_owned())];
        assert_eq!(room_for(&pins, "4711"), Some("standup"));
        assert_eq!(room_for(&pins, "0815"), Some("board"));
        for wrong in ["", "471", "47110", "4712", "815", "0815\0"] {
            assert_eq!(room_for(&pins, wrong), None, "{wrong:?}");
        }
        assert!(same(b"", b""));
        assert!(!same(b"1", b"1\0"), "lengths count");
    }
}
