//! Durations as a person writes them on the command line (`--ttl 90m`).

use std::time::Duration;

/// A duration as a person writes it: `3600` (seconds), `45s`, `90m`, `1h`,
/// `1h30m`, `7d`; at least one second, at most ten years.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("'{text}' is not a duration: seconds (3600) or a number with s, m, h or d (90m, 1h30m, 7d)");
    let text = text.trim();
    if let Ok(secs) = text.parse::<u64>() {
        return check_duration(secs, text);
    }
    let (mut total, mut number, mut any) = (0u64, String::new(), false);
    for c in text.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(bad()),
        };
        let n: u64 = number.parse().map_err(|_| bad())?;
        total = n.checked_mul(unit).and_then(|v| total.checked_add(v)).ok_or_else(bad)?;
        number.clear();
        any = true;
    }
    if !any || !number.is_empty() {
        return Err(bad());
    }
    check_duration(total, text)
}

fn check_duration(secs: u64, text: &str) -> Result<Duration, String> {
    const TEN_YEARS: u64 = 10 * 366 * 86_400;
    if secs == 0 || secs > TEN_YEARS {
        return Err(format!("'{text}': a duration is at least 1 s and at most 10 years"));
    }
    Ok(Duration::from_secs(secs))
}
