//! Just enough STUN (RFC 8489) to route a new peer's first datagrams (is
//! this a Binding request, and what is its USERNAME?), and to answer a
//! connected peer's consent checks (RFC 7675) without webrtc-rs's ICE agent
//! ([`CheckAnswerer`]). Parses untrusted bytes without panicking.

use std::net::SocketAddr;

use bytes::BytesMut;
use ring::hmac;

const MAGIC_COOKIE: [u8; 4] = [0x21, 0x12, 0xA4, 0x42];
const HEADER_LEN: usize = 20;
const ATTR_USERNAME: u16 = 0x0006;
const ATTR_MESSAGE_INTEGRITY: u16 = 0x0008;
const ATTR_XOR_MAPPED_ADDRESS: u16 = 0x0020;
const ATTR_PRIORITY: u16 = 0x0024;
const ATTR_USE_CANDIDATE: u16 = 0x0025;
const ATTR_FINGERPRINT: u16 = 0x8028;
const ATTR_ICE_CONTROLLED: u16 = 0x8029;
const ATTR_ICE_CONTROLLING: u16 = 0x802A;
const BINDING_REQUEST: [u8; 2] = [0x00, 0x01];
const BINDING_SUCCESS: [u8; 2] = [0x01, 0x01];
const FINGERPRINT_XOR: u32 = 0x5354_554E;
/// A consent check bigger than this is not answered here (a browser's is ~100 bytes).
const CHECK_MAX: usize = 548;
/// The biggest answer: header, XOR-MAPPED-ADDRESS (IPv6), MESSAGE-INTEGRITY, FINGERPRINT.
pub(crate) const ANSWER_MAX: usize = HEADER_LEN + 24 + 24 + 8;

/// Whether `data` looks like a STUN message (first two bits zero, magic cookie).
pub fn is_stun(data: &[u8]) -> bool {
    data.len() >= HEADER_LEN && data[0] < 4 && data[4..8] == MAGIC_COOKIE
}

/// The USERNAME attribute of a STUN message, if it has a well-formed one.
pub fn username(data: &[u8]) -> Option<&str> {
    if !is_stun(data) {
        return None;
    }
    let (_, _, value) = attributes(data).find(|&(_, kind, _)| kind == ATTR_USERNAME)?;
    std::str::from_utf8(value).ok()
}

/// The attributes of STUN message `m` (header included), in order: where
/// each starts in `m`, its type and its value. Nothing when the header's
/// length runs past `m`; it stops before an attribute that runs past it.
fn attributes(m: &[u8]) -> impl Iterator<Item = (usize, u16, &[u8])> {
    let body_len = m.get(2..4).map_or(0, |l| usize::from(u16::from_be_bytes([l[0], l[1]])));
    let end = if HEADER_LEN + body_len <= m.len() { HEADER_LEN + body_len } else { 0 };
    let mut at = HEADER_LEN;
    std::iter::from_fn(move || {
        let head = m[..end].get(at..at + 4)?;
        let kind = u16::from_be_bytes([head[0], head[1]]);
        let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
        let value = m[..end].get(at + 4..at + 4 + len)?;
        let start = at;
        at += (4 + len).next_multiple_of(4);
        Some((start, kind, value))
    })
}

/// The local (server) ufrag of an ICE USERNAME "local:remote".
pub fn local_ufrag(username: &str) -> Option<&str> {
    username.split_once(':').map(|(local, _)| local)
}

/// Answers a connected peer's consent checks (RFC 7675: Binding requests
/// on the selected pair) as webrtc-rs's ICE-lite agent does, for a
/// fraction of its cost (it builds and hashes message structs, allocates,
/// and walks the whole connection's handler chain per check). Only the
/// plain case: a Binding request whose USERNAME is exactly
/// "<our ufrag>:<their ufrag>", that says the peer controls (ICE-CONTROLLING),
/// whose MESSAGE-INTEGRITY checks with our password and whose FINGERPRINT
/// (if any) is right, with no attribute that must be understood other than
/// USERNAME, PRIORITY, USE-CANDIDATE and MESSAGE-INTEGRITY. Anything else
/// (a restart's new credentials, a role conflict, a forgery) is the agent's.
pub(crate) struct CheckAnswerer {
    username: Box<[u8]>,
    key: hmac::Key,
}

impl std::fmt::Debug for CheckAnswerer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckAnswerer").field("username", &String::from_utf8_lossy(&self.username)).finish()
    }
}

impl CheckAnswerer {
    /// For checks to `local_ufrag` (password `local_pwd`) from the agent
    /// that named itself `remote_ufrag`.
    pub(crate) fn new(local_ufrag: &str, local_pwd: &str, remote_ufrag: &str) -> Self {
        let username = format!("{local_ufrag}:{remote_ufrag}").into_bytes().into_boxed_slice();
        Self { username, key: hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, local_pwd.as_bytes()) }
    }

    /// Whether `request` is a consent check this answerer takes (see the
    /// type): authenticated, from the peer it names.
    pub(crate) fn verify(&self, request: &[u8]) -> bool {
        self.check(request).is_some()
    }

    /// Writes the Binding success answer to `request`, from `from`, into
    /// `out` (emptied first; reserve [`ANSWER_MAX`]). Returns false, with
    /// `out` empty, when the request is not one to answer here.
    pub(crate) fn answer(&self, request: &[u8], from: SocketAddr, out: &mut BytesMut) -> bool {
        out.clear();
        let Some(txid) = self.check(request) else { return false };
        out.extend_from_slice(&BINDING_SUCCESS);
        out.extend_from_slice(&[0, 0]); // length, set below
        out.extend_from_slice(&MAGIC_COOKIE);
        out.extend_from_slice(txid);
        // XOR-MAPPED-ADDRESS (RFC 8489 §14.2): the address XORed with the
        // cookie (IPv4) or the cookie and transaction id (IPv6).
        let mut octets = [0u8; 16];
        let (family, ip) = match from {
            SocketAddr::V4(a) => {
                octets[..4].copy_from_slice(&a.ip().octets());
                (0x01, &octets[..4])
            }
            SocketAddr::V6(a) => {
                octets = a.ip().octets();
                (0x02, &octets[..])
            }
        };
        out.extend_from_slice(&ATTR_XOR_MAPPED_ADDRESS.to_be_bytes());
        out.extend_from_slice(&(4 + ip.len() as u16).to_be_bytes());
        out.extend_from_slice(&[0, family]);
        out.extend_from_slice(&(from.port() ^ 0x2112).to_be_bytes());
        let mask = MAGIC_COOKIE.iter().chain(txid.iter());
        out.extend(ip.iter().zip(mask).map(|(b, m)| b ^ m));
        // MESSAGE-INTEGRITY over the message so far, its length counting the attribute.
        let len = out.len() - HEADER_LEN + 24;
        set_length(out, len);
        let tag = hmac::sign(&self.key, out);
        out.extend_from_slice(&ATTR_MESSAGE_INTEGRITY.to_be_bytes());
        out.extend_from_slice(&20u16.to_be_bytes());
        out.extend_from_slice(tag.as_ref());
        // FINGERPRINT over everything before it, the length now counting it too.
        let len = out.len() - HEADER_LEN + 8;
        set_length(out, len);
        let crc = crc32(out) ^ FINGERPRINT_XOR;
        out.extend_from_slice(&ATTR_FINGERPRINT.to_be_bytes());
        out.extend_from_slice(&4u16.to_be_bytes());
        out.extend_from_slice(&crc.to_be_bytes());
        true
    }

    /// The transaction id of a request to answer here, or `None`.
    fn check<'a>(&self, m: &'a [u8]) -> Option<&'a [u8]> {
        let r = Request::read(m)?;
        if r.username != Some(&*self.username) || !r.controlling || r.controlled || r.unknown_required {
            return None;
        }
        r.signed_with(&self.key, m).then(|| &m[8..HEADER_LEN])
    }
}

/// Whether a Binding request carries USE-CANDIDATE (RFC 8445 §7.1.2: the
/// controlling agent nominates the pair it arrived on). Says nothing of its
/// authenticity: ask only of a check that verified.
pub(crate) fn nominates(m: &[u8]) -> bool {
    is_stun(m) && m.len() <= CHECK_MAX && attributes(m).any(|(_, kind, _)| kind == ATTR_USE_CANDIDATE)
}

/// The short-term credential of a peer's ICE checks (RFC 8489 §9.1.1):
/// MESSAGE-INTEGRITY is an HMAC-SHA1 keyed with the server's ICE password.
/// The demux learns a new remote address from a check only when it verifies
/// (a forged check routes nothing and keeps no peer alive).
pub(crate) struct CheckKey(hmac::Key);

impl std::fmt::Debug for CheckKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CheckKey")
    }
}

impl CheckKey {
    /// The key of ICE password `pwd`.
    pub(crate) fn new(pwd: &str) -> Self {
        Self(hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, pwd.as_bytes()))
    }

    /// Whether `m` is a Binding request signed with this key (and, when it
    /// has a FINGERPRINT, a right one), whatever else it carries: its
    /// USERNAME, role and other attributes are the ICE agent's to judge.
    pub(crate) fn verifies(&self, m: &[u8]) -> bool {
        Request::read(m).is_some_and(|r| r.signed_with(&self.0, m))
    }
}

/// A Binding request read up to its MESSAGE-INTEGRITY: one walk over its
/// attributes serves [`CheckAnswerer`] and [`CheckKey`].
struct Request<'a> {
    username: Option<&'a [u8]>,
    controlling: bool,
    controlled: bool,
    /// A comprehension-required attribute other than USERNAME, PRIORITY,
    /// USE-CANDIDATE, ICE-CONTROLLED and MESSAGE-INTEGRITY.
    unknown_required: bool,
    /// Where MESSAGE-INTEGRITY starts.
    integrity_at: usize,
}

impl<'a> Request<'a> {
    /// `None` unless `m` is a well-formed Binding request of at most
    /// [`CHECK_MAX`] bytes with a MESSAGE-INTEGRITY, followed by nothing or
    /// by a right FINGERPRINT, last.
    fn read(m: &'a [u8]) -> Option<Self> {
        if m.len() > CHECK_MAX || !is_stun(m) || m[..2] != BINDING_REQUEST {
            return None;
        }
        let body_len = usize::from(u16::from_be_bytes([m[2], m[3]]));
        if HEADER_LEN + body_len != m.len() || !body_len.is_multiple_of(4) {
            return None;
        }
        let mut r =
            Request { username: None, controlling: false, controlled: false, unknown_required: false, integrity_at: 0 };
        let mut integrity = None;
        // Where the attributes read so far end: the message's end once all are.
        let mut walked = HEADER_LEN;
        for (at, kind, value) in attributes(m) {
            walked = at + (4 + value.len()).next_multiple_of(4);
            if integrity.is_some() {
                // After MESSAGE-INTEGRITY only FINGERPRINT, last (RFC 8489 §14.5, §14.7).
                if kind != ATTR_FINGERPRINT || value.len() != 4 || walked != m.len() {
                    return None;
                }
                let want = u32::from_be_bytes([value[0], value[1], value[2], value[3]]);
                if crc32(&m[..at]) ^ FINGERPRINT_XOR != want {
                    return None;
                }
                break;
            }
            match kind {
                ATTR_USERNAME => r.username = Some(value),
                ATTR_ICE_CONTROLLING => r.controlling = value.len() == 8,
                ATTR_ICE_CONTROLLED => r.controlled = true,
                ATTR_PRIORITY | ATTR_USE_CANDIDATE => {}
                ATTR_MESSAGE_INTEGRITY => {
                    if value.len() != 20 {
                        return None;
                    }
                    integrity = Some(at);
                }
                // Comprehension-required and unknown here.
                k if k < 0x8000 => r.unknown_required = true,
                _ => {}
            }
        }
        // A malformed attribute stopped the walk short.
        if walked != m.len() {
            return None;
        }
        r.integrity_at = integrity?;
        Some(r)
    }

    /// Whether its MESSAGE-INTEGRITY is the HMAC of `m` with `key`.
    fn signed_with(&self, key: &hmac::Key, m: &[u8]) -> bool {
        let mi_at = self.integrity_at;
        // The HMAC covers the message up to the attribute, with a length
        // that ends just after it (RFC 8489 §14.5).
        let mut head = [0u8; HEADER_LEN];
        head.copy_from_slice(&m[..HEADER_LEN]);
        head[2..4].copy_from_slice(&((mi_at - HEADER_LEN + 24) as u16).to_be_bytes());
        let mut ctx = hmac::Context::with_key(key);
        ctx.update(&head);
        ctx.update(&m[HEADER_LEN..mi_at]);
        let tag = ctx.sign();
        let got = &m[mi_at + 4..mi_at + 24];
        // Constant time: a forger learns nothing from how long this takes.
        let diff = tag.as_ref().iter().zip(got).fold(0u8, |d, (a, b)| d | (a ^ b));
        diff == 0
    }
}

/// Sets a STUN message's length field (the bytes after the header).
fn set_length(m: &mut [u8], len: usize) {
    m[2..4].copy_from_slice(&(len as u16).to_be_bytes());
}

/// CRC-32 (ISO HDLC, as FINGERPRINT uses: RFC 8489 §14.7).
fn crc32(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 == 1 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    !data.iter().fold(!0u32, |c, &b| TABLE[((c ^ u32::from(b)) & 0xFF) as usize] ^ (c >> 8))
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

    use rtc::ice::attributes::control::{AttrControlled, AttrControlling};
    use rtc::ice::attributes::priority::PriorityAttr;
    use rtc::ice::attributes::use_candidate::UseCandidateAttr;
    use rtc::stun::fingerprint::FINGERPRINT;
    use rtc::stun::integrity::MessageIntegrity;
    use rtc::stun::message::{BINDING_REQUEST as REQUEST, Getter, Message, Setter, TransactionId};
    use rtc::stun::textattrs::Username;
    use rtc::stun::xoraddr::XorMappedAddress;

    const LOCAL: (&str, &str) = ("srvA", "0123456789abcdef01234567");
    const REMOTE: &str = "cliB";

    /// A consent check as webrtc-rs's controlling agent builds it, with
    /// `extra` attributes after the standard ones, signed with `pwd`.
    fn check_with(username: &str, pwd: &str, controlled: bool, extra: Vec<Box<dyn Setter>>) -> Message {
        let crypto = rtc::crypto::default_provider().expect("crypto provider");
        let mut setters: Vec<Box<dyn Setter>> = vec![
            Box::new(REQUEST),
            Box::new(TransactionId::new()),
            Box::new(Username::new(rtc::stun::attributes::ATTR_USERNAME, username.to_owned())),
            Box::<UseCandidateAttr>::default(),
        ];
        if controlled {
            setters.push(Box::new(AttrControlled(7)));
        } else {
            setters.push(Box::new(AttrControlling(7)));
        }
        setters.push(Box::new(PriorityAttr(1_853_817_087)));
        setters.extend(extra);
        setters
            .push(Box::new(MessageIntegrity::new_short_term_integrity_with_provider(pwd.to_owned(), crypto.crypto())));
        setters.push(Box::new(FINGERPRINT));
        let mut m = Message::new();
        m.build(&setters).expect("a check");
        m
    }

    /// Any attribute, as bytes.
    struct RawAttr(u16, Vec<u8>);

    impl Setter for RawAttr {
        fn add_to(&self, m: &mut Message) -> rtc::shared::error::Result<()> {
            m.add(rtc::stun::attributes::AttrType(self.0), &self.1);
            Ok(())
        }
    }

    fn check() -> Message {
        check_with(&format!("{}:{REMOTE}", LOCAL.0), LOCAL.1, false, Vec::new())
    }

    fn answerer() -> CheckAnswerer {
        CheckAnswerer::new(LOCAL.0, LOCAL.1, REMOTE)
    }

    #[test]
    fn answers_a_consent_check_as_webrtc_rs_reads_an_answer() {
        let crypto = rtc::crypto::default_provider().expect("crypto provider");
        for from in ["127.0.0.1:40000", "[2001:db8::7]:5000"] {
            let from: SocketAddr = from.parse().expect("address");
            let req = check();
            assert!(answerer().verify(&req.raw));
            // Chrome adds GOOG-NETWORK-INFO: comprehension-optional, so ignored.
            let user = format!("{}:{REMOTE}", LOCAL.0);
            let chrome =
                check_with(&user, LOCAL.1, false, vec![Box::new(RawAttr(0xC057, vec![0, 1, 0, 999u16 as u8]))]);
            assert!(answerer().verify(&chrome.raw));
            let mut out = BytesMut::new();
            assert!(answerer().answer(&req.raw, from, &mut out));
            assert!(out.len() <= ANSWER_MAX);
            // webrtc-rs decodes it, and checks its integrity (our password) and fingerprint.
            let mut m = Message { raw: out.to_vec(), ..Message::default() };
            m.decode().expect("decodes");
            assert_eq!(m.typ, rtc::stun::message::BINDING_SUCCESS);
            assert_eq!(m.transaction_id, req.transaction_id);
            MessageIntegrity::check(&mut m, LOCAL.1.as_bytes(), crypto.crypto()).expect("integrity");
            FINGERPRINT.check(&m).expect("fingerprint");
            let mut mapped = XorMappedAddress::default();
            mapped.get_from(&m).expect("mapped address");
            assert_eq!(SocketAddr::new(mapped.ip, mapped.port), from);
        }
    }

    #[test]
    fn leaves_the_agent_anything_but_a_plain_authenticated_check() {
        let a = answerer();
        let from: SocketAddr = "127.0.0.1:40000".parse().expect("address");
        let user = format!("{}:{REMOTE}", LOCAL.0);
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("wrong password", check_with(&user, "not-the-password-at-all!", false, Vec::new()).raw),
            ("a restart's new remote ufrag", check_with(&format!("{}:newB", LOCAL.0), LOCAL.1, false, Vec::new()).raw),
            ("another peer's ufrag", check_with(&format!("srvZ:{REMOTE}"), LOCAL.1, false, Vec::new()).raw),
            ("role conflict (both controlled)", check_with(&user, LOCAL.1, true, Vec::new()).raw),
            (
                "an attribute to understand (REQUESTED-TRANSPORT)",
                check_with(&user, LOCAL.1, false, vec![Box::new(RawAttr(0x0019, vec![17, 0, 0, 0]))]).raw,
            ),
            ("a response, not a request", {
                let mut m = check().raw;
                m[0] = 0x01;
                m[1] = 0x01;
                m
            }),
            ("a flipped payload bit", {
                let mut m = check().raw;
                m[24] ^= 1;
                m
            }),
            ("a wrong fingerprint", {
                let mut m = check().raw;
                let n = m.len();
                m[n - 1] ^= 1;
                m
            }),
        ];
        for (what, m) in cases {
            let mut out = BytesMut::new();
            assert!(!a.verify(&m), "{what}");
            assert!(!a.answer(&m, from, &mut out), "{what}");
            assert!(out.is_empty(), "{what}");
        }
        // Without FINGERPRINT (it is optional) the check stands; with bytes
        // after MESSAGE-INTEGRITY that are no whole attribute, it does not.
        let mut bare = check().raw;
        bare.truncate(bare.len() - 8);
        let len = bare.len() - HEADER_LEN;
        set_length(&mut bare, len);
        assert!(a.verify(&bare), "a check without FINGERPRINT");
        bare.extend_from_slice(&[0x80, 0x22, 0, 8]);
        let len = bare.len() - HEADER_LEN;
        set_length(&mut bare, len);
        assert!(!a.verify(&bare), "a torn attribute after MESSAGE-INTEGRITY");
        // Every truncation, and random bytes after a valid header, neither answered nor a panic.
        let m = check().raw;
        for len in 0..m.len() {
            assert!(!a.verify(&m[..len]));
        }
        let mut seed = 11u32;
        for _ in 0..10_000 {
            let mut d = m.clone();
            for b in d.iter_mut().skip(20) {
                seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                *b = (seed >> 16) as u8;
            }
            assert!(!a.verify(&d));
        }
    }

    #[test]
    fn a_check_key_verifies_signed_checks_whatever_their_role_or_username() {
        let key = CheckKey::new(LOCAL.1);
        let user = format!("{}:{REMOTE}", LOCAL.0);
        assert!(key.verifies(&check().raw));
        // Role and USERNAME are the agent's to judge; only the signature counts here.
        assert!(key.verifies(&check_with(&user, LOCAL.1, true, Vec::new()).raw), "controlled");
        assert!(key.verifies(&check_with(&format!("{}:newB", LOCAL.0), LOCAL.1, false, Vec::new()).raw));
        assert!(!key.verifies(&check_with(&user, "not-the-password-at-all!", false, Vec::new()).raw));
        let mut flipped = check().raw;
        flipped[24] ^= 1;
        assert!(!key.verifies(&flipped), "a flipped bit");
        let mut response = check().raw;
        response[..2].copy_from_slice(&BINDING_SUCCESS);
        assert!(!key.verifies(&response), "not a request");
        let unsigned = message(&[(ATTR_USERNAME, user.as_bytes())]);
        assert!(!key.verifies(&unsigned), "no MESSAGE-INTEGRITY");
        let m = check().raw;
        for len in 0..m.len() {
            assert!(!key.verifies(&m[..len]));
        }
    }

    #[test]
    fn crc32_is_the_fingerprint_crc() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
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
