//! The demux's own STUN reading (`tutti_rtc::stun`): bounds and UTF-8 on
//! untrusted bytes, and agreement with a naive re-implementation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tutti_rtc::stun;

fuzz_target!(|data: &[u8]| {
    let found = stun::username(data);
    if let Some(u) = found {
        assert!(stun::is_stun(data));
        assert!(u.len() <= data.len());
        let _ = stun::local_ufrag(u);
    }
    assert_eq!(found, naive(data), "the parser agrees with the naive reading");
});

/// The first USERNAME attribute within the declared body, read the slow way.
fn naive(data: &[u8]) -> Option<&str> {
    if data.len() < 20 || data[0] >= 4 || data[4..8] != [0x21, 0x12, 0xA4, 0x42] {
        return None;
    }
    let body_len = usize::from(u16::from_be_bytes([data[2], data[3]]));
    if data.len() < 20 + body_len {
        return None;
    }
    let body = &data[20..20 + body_len];
    let mut at = 0usize;
    while at + 4 <= body.len() {
        let kind = u16::from_be_bytes([body[at], body[at + 1]]);
        let len = usize::from(u16::from_be_bytes([body[at + 2], body[at + 3]]));
        if at + 4 + len > body.len() {
            return None;
        }
        if kind == 0x0006 {
            return std::str::from_utf8(&body[at + 4..at + 4 + len]).ok();
        }
        at += (4 + len).div_ceil(4) * 4;
        if at > body.len() {
            return None;
        }
    }
    None
}
