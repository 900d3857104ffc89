//! Participant attributes: string keys and values an app hangs on a
//! participant (a role, an avatar's address, a seat, a phone call's
//! numbers). They come from the token (the `attributes` claim the backend
//! sets), from an admin (`PATCH …/participants/{id}`), and from the
//! participant itself (the same route, or the room socket's
//! `set_attributes`), which may not touch a reserved key
//! (`limits.reserved_attributes`: `sip.` and `tutti.` by default, so that a
//! caller cannot pass for a phone call). Every source is held to the same
//! bounds, so one participant pins at most [`MAX_TOTAL_BYTES`] here and in
//! every message that carries them (roster, snapshot, events, webhooks).

use std::collections::BTreeMap;

/// A participant's attributes, in key order (so that two equal maps
/// serialize alike on every node).
pub type Attributes = BTreeMap<String, String>;

/// A change: a value sets its key, `null` removes it (a JSON merge patch, RFC 7396).
pub type AttributesPatch = BTreeMap<String, Option<String>>;

/// Most keys a participant holds.
pub const MAX_ATTRIBUTES: usize = 16;

/// The reserved attribute holding a participant's seat in a spatial room
/// (−4 far left to 4 far right): set by the server from the identity at the
/// join, by the token, or by an admin.
pub const SEAT: &str = "tutti.seat";

/// The seat an attribute set names, if it names a valid one.
pub fn seat_of(attributes: &Attributes) -> Option<i8> {
    let seat: i8 = attributes.get(SEAT)?.trim().parse().ok()?;
    (-tutti_mix::MAX_SEAT..=tutti_mix::MAX_SEAT).contains(&seat).then_some(seat)
}
/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 64;
/// Longest value, in bytes.
pub const MAX_VALUE_BYTES: usize = 1024;
/// Most bytes of keys and values together.
pub const MAX_TOTAL_BYTES: usize = 4096;

/// Why attributes were refused; the message says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttributeError {
    /// More keys than [`MAX_ATTRIBUTES`].
    #[error("at most {MAX_ATTRIBUTES} attributes per participant ({0} asked)")]
    TooMany(usize),
    /// A key that is empty, too long or holds other characters.
    #[error("attribute key {0:?} is not one: 1 to {MAX_KEY_BYTES} bytes of letters, digits, '.', '_', '-' and ':'")]
    BadKey(String),
    /// A value too long or with a control character.
    #[error("attribute {0:?}'s value is longer than {MAX_VALUE_BYTES} bytes, or holds a control character")]
    BadValue(String),
    /// More bytes in all than [`MAX_TOTAL_BYTES`].
    #[error("a participant's attributes hold at most {MAX_TOTAL_BYTES} bytes of keys and values ({0} asked)")]
    TooBig(usize),
    /// A reserved key, changed by the participant itself.
    #[error("attribute {0:?} is reserved (limits.reserved_attributes): only the token or an admin sets it")]
    Reserved(String),
}

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_KEY_BYTES
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'))
}

fn valid_value(value: &str) -> bool {
    value.len() <= MAX_VALUE_BYTES && !value.chars().any(char::is_control)
}

/// Checks a whole set against the bounds.
pub fn check(attributes: &Attributes) -> Result<(), AttributeError> {
    if attributes.len() > MAX_ATTRIBUTES {
        return Err(AttributeError::TooMany(attributes.len()));
    }
    let mut total = 0;
    for (k, v) in attributes {
        if !valid_key(k) {
            return Err(AttributeError::BadKey(k.clone()));
        }
        if !valid_value(v) {
            return Err(AttributeError::BadValue(k.clone()));
        }
        total += k.len() + v.len();
    }
    if total > MAX_TOTAL_BYTES {
        return Err(AttributeError::TooBig(total));
    }
    Ok(())
}

/// Whether `key` is reserved: it starts with one of `reserved` (a list of
/// prefixes, `limits.reserved_attributes`).
pub fn is_reserved(key: &str, reserved: &[String]) -> bool {
    reserved.iter().any(|p| !p.is_empty() && key.starts_with(p.as_str()))
}

/// `current` with `patch` applied, checked. Without `may_reserved` (the
/// participant itself), a patch naming a reserved key is refused whole.
/// Returns `None` when nothing changes.
pub fn apply(
    current: &Attributes,
    patch: &AttributesPatch,
    reserved: &[String],
    may_reserved: bool,
) -> Result<Option<Attributes>, AttributeError> {
    if patch.len() > MAX_ATTRIBUTES * 2 {
        return Err(AttributeError::TooMany(patch.len()));
    }
    if !may_reserved && let Some(key) = patch.keys().find(|k| is_reserved(k, reserved)) {
        return Err(AttributeError::Reserved(key.clone()));
    }
    let mut next = current.clone();
    for (k, v) in patch {
        match v {
            Some(v) => next.insert(k.clone(), v.clone()),
            None => next.remove(k),
        };
    }
    if next == *current {
        return Ok(None);
    }
    check(&next)?;
    Ok(Some(next))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pairs: &[(&str, &str)]) -> Attributes {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn patch(pairs: &[(&str, Option<&str>)]) -> AttributesPatch {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), v.map(str::to_owned))).collect()
    }

    #[test]
    fn a_patch_sets_and_removes_keys_and_each_bound_is_held() {
        let reserved = vec!["sip.".to_owned()];
        let now = set(&[("role", "host"), ("seat", "3")]);
        let next = apply(&now, &patch(&[("seat", None), ("mood", Some("calm"))]), &reserved, false).expect("valid");
        assert_eq!(next, Some(set(&[("mood", "calm"), ("role", "host")])));
        assert_eq!(apply(&now, &patch(&[("role", Some("host"))]), &reserved, false), Ok(None), "no change");

        let many: AttributesPatch = (0..=MAX_ATTRIBUTES).map(|i| (format!("k{i}"), Some("v".to_owned()))).collect();
        assert_eq!(apply(&now, &many, &reserved, true), Err(AttributeError::TooMany(MAX_ATTRIBUTES + 3)));
        let long_key = "k".repeat(MAX_KEY_BYTES + 1);
        assert!(matches!(
            apply(&now, &patch(&[(&long_key, Some("v"))]), &reserved, true),
            Err(AttributeError::BadKey(_))
        ));
        assert!(matches!(apply(&now, &patch(&[("a b", Some("v"))]), &reserved, true), Err(AttributeError::BadKey(_))));
        let long_value = "v".repeat(MAX_VALUE_BYTES + 1);
        assert!(matches!(
            apply(&now, &patch(&[("bio", Some(&long_value))]), &reserved, true),
            Err(AttributeError::BadValue(_))
        ));
        assert!(matches!(
            apply(&now, &patch(&[("bio", Some("a\nb"))]), &reserved, true),
            Err(AttributeError::BadValue(_))
        ));
        let big: AttributesPatch = (0..5).map(|i| (format!("k{i}"), Some("v".repeat(MAX_VALUE_BYTES - 2)))).collect();
        assert!(matches!(apply(&Attributes::new(), &big, &reserved, true), Err(AttributeError::TooBig(_))));
    }

    #[test]
    fn a_reserved_key_is_the_tokens_or_an_admins_only() {
        let reserved = vec!["sip.".to_owned(), "tutti.".to_owned()];
        let p = patch(&[("sip.caller", Some("+15550100")), ("name2", Some("x"))]);
        assert_eq!(
            apply(&Attributes::new(), &p, &reserved, false),
            Err(AttributeError::Reserved("sip.caller".to_owned()))
        );
        assert!(apply(&Attributes::new(), &p, &reserved, true).expect("an admin may").is_some());
        // Removing one is changing it too.
        let removal = patch(&[("sip.caller", None)]);
        assert!(matches!(apply(&Attributes::new(), &removal, &reserved, false), Err(AttributeError::Reserved(_))));
        assert!(!is_reserved("sipx", &reserved));
    }
}
