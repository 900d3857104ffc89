//! Just enough STUN (RFC 8489) to route a new peer's first datagrams: is
//! this a Binding request, and what is its USERNAME? Parses untrusted bytes
//! without panicking; the full check (MESSAGE-INTEGRITY) is the ICE agent's.

const MAGIC_COOKIE: [u8; 4] = [0x21, 0x12, 0xA4, 0x42];
const HEADER_LEN: usize = 20;
const ATTR_USERNAME: u16 = 0x0006;

/// Whether `data` looks like a STUN message (first two bits zero, magic cookie).
pub fn is_stun(data: &[u8]) -> bool {
    data.len() >= HEADER_LEN && data[0] < 4 && data[4..8] == MAGIC_COOKIE
}

/// The USERNAME attribute of a STUN message, if it has a well-formed one.
pub fn username(data: &[u8]) -> Option<&str> {
    if !is_stun(data) {
        return None;
    }
    let body_len = usize::from(u16::from_be_bytes([data[2], data[3]]));
    let body = data.get(HEADER_LEN..HEADER_LEN.checked_add(body_len)?)?;
    let mut rest = body;
    while rest.len() >= 4 {
        let kind = u16::from_be_bytes([rest[0], rest[1]]);
        let len = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
        let value = rest.get(4..4 + len)?;
        if kind == ATTR_USERNAME {
            return std::str::from_utf8(value).ok();
        }
        let padded = (4 + len).checked_next_multiple_of(4)?;
        rest = rest.get(padded..)?;
    }
    None
}

/// The local (server) ufrag of an ICE USERNAME "local:remote".
pub fn local_ufrag(username: &str) -> Option<&str> {
    username.split_once(':').map(|(local, _)| local)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(attrs: &[(u16, &[u8])]) -> Vec<u8> {
        let mut body = Vec::new();
        for (kind, value) in attrs {
            body.extend_from_slice(&kind.to_be_bytes());
            body.extend_from_slice(&(value.len() as u16).to_be_bytes());
            body.extend_from_slice(value);
            while body.len() % 4 != 0 {
                body.push(0);
            }
        }
        let mut m = vec![0x00, 0x01];
        m.extend_from_slice(&(body.len() as u16).to_be_bytes());
        m.extend_from_slice(&MAGIC_COOKIE);
        m.extend_from_slice(&[7; 12]);
        m.extend_from_slice(&body);
        m
    }

    #[test]
    fn finds_the_username_after_other_attributes() {
        let m = message(&[(0x0024, &[0, 0, 0, 1]), (ATTR_USERNAME, b"srv1:cli"), (0x0008, &[0; 20])]);
        assert!(is_stun(&m));
        assert_eq!(username(&m), Some("srv1:cli"));
        assert_eq!(local_ufrag("srv1:cli"), Some("srv1"));
    }

    #[test]
    fn garbage_is_not_routed_and_never_panics() {
        assert_eq!(username(&[]), None);
        assert_eq!(username(&[0x80; 40]), None, "RTP-looking");
        let mut m = message(&[(ATTR_USERNAME, b"abc:def")]);
        m[3] = 200; // body length beyond the datagram
        assert_eq!(username(&m), None);
        let mut m = message(&[(ATTR_USERNAME, b"abc:def")]);
        m[22] = 0xFF; // attribute length beyond the body
        assert_eq!(username(&m), None);
        for len in 0..m.len() {
            let _ = username(&m[..len]);
        }
        let mut seed = 7u32;
        for _ in 0..10_000 {
            let mut d = message(&[(ATTR_USERNAME, b"x:y")]);
            for b in d.iter_mut().skip(20) {
                seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                *b = (seed >> 16) as u8;
            }
            let _ = username(&d);
        }
    }
}
