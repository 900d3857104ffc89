//! Inbound trunks: which trunk an INVITE came in on (its source, the
//! number it calls, its credentials), decided without I/O.
//!
//! ```text
//! source in no trunk's networks ─► 403 (reason "source")
//! the trunk: of those at the source taking the number (else of all at the
//! source), the one the credentials' user names, else the first
//! the trunk has credentials:
//!   no Authorization (or Proxy-Authorization) for our realm ─► 401 + WWW-Authenticate,
//!   or with `challenge = "proxy"` 407 + Proxy-Authenticate (reason "challenge")
//!   a nonce we did not make, another user, a wrong response ─► 403 (reason "credentials")
//!   a nonce of ours, too old ─► 401 (407) stale=true (reason "challenge")
//! no trunk at the source takes the number ─► 404 (reason "number")
//! ─► the call, on that trunk
//! ```
//!
//! A nonce is `<unix seconds, hex>.<HMAC-SHA-256 of the time and the
//! source IP, under a key made at start>`: nothing is stored per request,
//! and a nonce lives `NONCE_SECONDS`. The digest itself (RFC 2617 / 8760:
//! MD5 or SHA-256, qop auth) is the stack's `DigestGenerator`.

use std::net::IpAddr;

use rsipstack::sip::headers::auth::Algorithm;
use rsipstack::sip::headers::typed::Authorization;
use rsipstack::sip::{DigestGenerator, Header, Request, StatusCode};

use crate::cidr::Cidr;
use crate::config::{SipConfig, TrunkConfig};

/// How long a challenge's nonce may be answered.
pub(super) const NONCE_SECONDS: u64 = 300;

/// The name of the implicit trunk of `[sip] trusted`.
pub(super) const TRUSTED: &str = "trusted";

/// One trunk, its networks parsed.
pub(super) struct Trunk {
    pub(super) name: String,
    networks: Vec<Cidr>,
    username: String,
    password: String,
    /// The digest algorithms it challenges with and accepts (`SHA-256`, `MD5`).
    digest: Vec<&'static str>,
    numbers: Vec<String>,
    /// The fixed room, if any.
    pub(super) room: Option<String>,
    /// Put before the number to name the room.
    pub(super) room_prefix: String,
    /// Its calls enter a PIN to choose their room (`sip/pin.rs`).
    pub(super) pin: bool,
    /// SRTP for its calls.
    pub(super) srtp: crate::config::SrtpMode,
    /// 407 and `Proxy-Authenticate` rather than 401 and `WWW-Authenticate`.
    proxy: bool,
}

impl Trunk {
    fn new(cfg: &TrunkConfig, sip: &SipConfig) -> Self {
        Self {
            name: cfg.name.trim().to_owned(),
            // Validated at load: a bad entry cannot be here.
            networks: crate::cidr::parse_all(&cfg.networks).unwrap_or_default(),
            username: cfg.username.clone(),
            password: cfg.password.clone(),
            digest: crate::config::DIGESTS
                .into_iter()
                .filter(|k| cfg.digest.iter().any(|d| d.eq_ignore_ascii_case(k)))
                .collect(),
            numbers: cfg.numbers.iter().map(|n| n.trim().to_owned()).collect(),
            room: (!cfg.room.is_empty()).then(|| cfg.room.clone()),
            room_prefix: cfg.room_prefix.clone().unwrap_or_else(|| sip.room_prefix.clone()),
            pin: cfg.pin.unwrap_or(sip.pin),
            srtp: cfg.srtp.unwrap_or(sip.srtp),
            proxy: cfg.challenge == crate::config::Challenge::Proxy,
        }
    }

    fn authenticates(&self) -> bool {
        !self.username.is_empty()
    }

    fn takes(&self, number: Option<&str>) -> bool {
        self.numbers.is_empty() || number.is_some_and(|n| self.numbers.iter().any(|m| m == n))
    }
}

/// What to do with an INVITE.
pub(super) enum Admission<'a> {
    /// Take the call on this trunk.
    Call(&'a Trunk),
    /// Answer with this status (401, or 407 for a `proxy` trunk) and these
    /// `WWW-Authenticate` (`Proxy-Authenticate`) headers.
    Challenge(StatusCode, Vec<Header>),
    /// Refuse with this status; `reason` is the metric's label.
    Refuse { code: StatusCode, reason: &'static str, why: &'static str },
}

/// The trunks of `[sip]`: the `[[sip.trunks]]` in order, then `trusted`.
pub(super) struct Trunks {
    list: Vec<Trunk>,
    realm: String,
    key: ring::hmac::Key,
}

impl Trunks {
    pub(super) fn new(cfg: &SipConfig) -> Self {
        let mut list: Vec<Trunk> = cfg.trunks.iter().map(|t| Trunk::new(t, cfg)).collect();
        if !cfg.trusted.is_empty() {
            let trusted =
                TrunkConfig { name: TRUSTED.to_owned(), networks: cfg.trusted.clone(), ..TrunkConfig::default() };
            list.push(Trunk::new(&trusted, cfg));
        }
        let rng = ring::rand::SystemRandom::new();
        // The system's random source failing at start leaves no safe nonce key: a fixed
        // key would let nonces be forged, so refuse to start.
        let key = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng).expect("the system's random source works");
        Self { list, realm: cfg.realm.clone(), key }
    }

    /// Whether no trunk takes any call.
    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Whether `source` may send SIP at all (in some trunk's networks).
    pub(super) fn knows(&self, source: IpAddr) -> bool {
        self.list.iter().any(|t| crate::cidr::any_contains(&t.networks, source))
    }

    /// The trunk an INVITE from `source` comes in on, a challenge, or a refusal.
    pub(super) fn admit<'a>(&'a self, request: &Request, source: IpAddr, now: u64) -> Admission<'a> {
        let at_source: Vec<&Trunk> =
            self.list.iter().filter(|t| crate::cidr::any_contains(&t.networks, source)).collect();
        if at_source.is_empty() {
            return refuse(StatusCode::Forbidden, "source", "not from a trunk's networks");
        }
        let number = request.uri.auth.as_ref().map(|a| a.user.as_str());
        let taking: Vec<&Trunk> = at_source.iter().copied().filter(|t| t.takes(number)).collect();
        let credentials = authorization(request, &self.realm);
        // Several trunks at one source: the one the credentials name, else the first. A
        // number no trunk takes is told (404) only to a caller that authenticated.
        let pick = |among: &[&'a Trunk]| -> Option<&'a Trunk> {
            let named = credentials
                .as_ref()
                .and_then(|a| among.iter().copied().find(|t| t.authenticates() && t.username == a.username));
            named.or_else(|| among.first().copied())
        };
        let Some(trunk) = pick(&taking).or_else(|| pick(&at_source)) else {
            return refuse(StatusCode::Forbidden, "source", "not from a trunk's networks");
        };
        if trunk.authenticates() {
            let Some(credentials) = credentials.as_ref() else {
                return self.challenge(trunk, source, now, false);
            };
            if let Some(refusal) = self.check(trunk, credentials, request, source, now) {
                return refusal;
            }
        }
        if taking.is_empty() {
            return refuse(StatusCode::NotFound, "number", "no trunk at this source takes the number");
        }
        Admission::Call(trunk)
    }

    /// A challenge or a refusal when `credentials` do not prove `trunk`'s.
    fn check(
        &self,
        trunk: &Trunk,
        credentials: &Authorization,
        request: &Request,
        source: IpAddr,
        now: u64,
    ) -> Option<Admission<'static>> {
        match self.nonce_age(&credentials.nonce, source, now) {
            None => return Some(refuse(StatusCode::Forbidden, "credentials", "a nonce tutti did not make")),
            Some(age) if age > NONCE_SECONDS => return Some(self.challenge(trunk, source, now, true)),
            Some(_) => {}
        }
        let algorithm = match credentials.algorithm.unwrap_or(Algorithm::Md5) {
            Algorithm::Md5 => "MD5",
            Algorithm::Sha256 => "SHA-256",
            _ => "",
        };
        if credentials.username != trunk.username || !trunk.digest.contains(&algorithm) {
            return Some(refuse(StatusCode::Forbidden, "credentials", "wrong credentials"));
        }
        let expected = DigestGenerator::from(credentials, &trunk.password, &request.method).compute();
        if !same(expected.as_bytes(), credentials.response.to_ascii_lowercase().as_bytes()) {
            return Some(refuse(StatusCode::Forbidden, "credentials", "wrong credentials"));
        }
        None
    }

    /// The challenge: one `WWW-Authenticate` per algorithm of the trunk,
    /// in its order (RFC 8760: SHA-256 first, then MD5 for older UAs).
    fn challenge(&self, trunk: &Trunk, source: IpAddr, now: u64, stale: bool) -> Admission<'static> {
        let nonce = self.nonce(source, now);
        let stale = if stale { ", stale=true" } else { "" };
        let headers = trunk
            .digest
            .iter()
            .map(|algorithm| {
                let value = format!(
                    "Digest realm=\"{}\", nonce=\"{nonce}\", algorithm={algorithm}, qop=\"auth\"{stale}",
                    self.realm
                );
                match trunk.proxy {
                    true => Header::ProxyAuthenticate(rsipstack::sip::headers::ProxyAuthenticate::new(value)),
                    false => Header::WwwAuthenticate(rsipstack::sip::headers::WwwAuthenticate::new(value)),
                }
            })
            .collect();
        let code = if trunk.proxy { StatusCode::ProxyAuthenticationRequired } else { StatusCode::Unauthorized };
        Admission::Challenge(code, headers)
    }

    fn nonce(&self, source: IpAddr, now: u64) -> String {
        let time = format!("{now:x}");
        format!("{time}.{}", self.mac(&time, source))
    }

    fn mac(&self, time: &str, source: IpAddr) -> String {
        let tag = ring::hmac::sign(&self.key, format!("{time}|{source}").as_bytes());
        tag.as_ref().iter().take(16).map(|b| format!("{b:02x}")).collect()
    }

    /// How old a nonce of ours for `source` is; `None`: not one of ours.
    fn nonce_age(&self, nonce: &str, source: IpAddr, now: u64) -> Option<u64> {
        let (time, mac) = nonce.split_once('.')?;
        if !same(self.mac(time, source).as_bytes(), mac.as_bytes()) {
            return None;
        }
        Some(now.saturating_sub(u64::from_str_radix(time, 16).ok()?))
    }
}

fn refuse(code: StatusCode, reason: &'static str, why: &'static str) -> Admission<'static> {
    Admission::Refuse { code, reason, why }
}

/// The request's `Authorization`, parsed by the stack (which spells
/// RFC 8760's `SHA-256` as `SHA256`).
/// `Proxy-Authorization` (the answer to a 407) is read as well, for `realm`.
fn authorization(request: &Request, realm: &str) -> Option<Authorization> {
    request
        .headers
        .iter()
        .filter_map(|h| match h {
            Header::Authorization(a) => Some(a.value()),
            Header::ProxyAuthorization(a) => Some(a.value()),
            _ => None,
        })
        .filter_map(|value| {
            let value = value.replace("SHA-256", "SHA256").replace("sha-256", "SHA256");
            Authorization::parse(&value).ok()
        })
        .find(|a| a.realm == realm)
}

/// Equal, in a time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsipstack::sip::headers::auth::AuthQop;

    fn config(trunks: Vec<TrunkConfig>) -> SipConfig {
        SipConfig { trunks, ..SipConfig::default() }
    }

    fn carrier() -> TrunkConfig {
        TrunkConfig {
            name: "carrier".into(),
            networks: vec!["192.0.2.0/24".into()],
            username: "acme".into(),
            password: "s3cret".into(),
            numbers: vec!["4711".into()],
            ..TrunkConfig::default()
        }
    }

    fn invite(number: &str, authorization: Option<String>) -> Request {
        let mut text = format!(
            "INVITE sip:{number}@198.51.100.1 SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.7:5060;branch=z9hG4bK1\r\n\
             From: <sip:a@192.0.2.7>;tag=1\r\nTo: <sip:{number}@198.51.100.1>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\n"
        );
        if let Some(a) = authorization {
            text.push_str(&format!("Authorization: {a}\r\n"));
        }
        text.push_str("Content-Length: 0\r\n\r\n");
        Request::try_from(text.as_str()).expect("a request")
    }

    /// What a UA answers to `nonce`: SHA-256 computed here as RFC 8760 says
    /// (ring's SHA-256, not the stack's); MD5 by the stack's generator, as
    /// its client side does (baresip checks MD5 independently in tests/sip.rs).
    fn answer(user: &str, password: &str, nonce: &str, algorithm: &str, number: &str) -> String {
        let uri = format!("sip:{number}@198.51.100.1");
        let response = if algorithm == "MD5" {
            let parsed = rsipstack::sip::Uri::try_from(uri.as_str()).expect("a uri");
            let qop = AuthQop::Auth { cnonce: "abc".into(), nc: 1 };
            DigestGenerator {
                username: user,
                password,
                nonce,
                uri: &parsed,
                realm: "tutti",
                method: &rsipstack::sip::Method::Invite,
                qop: Some(&qop),
                algorithm: Algorithm::Md5,
            }
            .compute()
        } else {
            let hash = |s: String| -> String {
                let digest = ring::digest::digest(&ring::digest::SHA256, s.as_bytes());
                digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
            };
            let ha1 = hash(format!("{user}:tutti:{password}"));
            let ha2 = hash(format!("INVITE:{uri}"));
            hash(format!("{ha1}:{nonce}:00000001:abc:auth:{ha2}"))
        };
        format!(
            "Digest username=\"{user}\", realm=\"tutti\", nonce=\"{nonce}\", uri=\"{uri}\", response=\"{response}\", \
             algorithm={algorithm}, qop=auth, nc=00000001, cnonce=\"abc\""
        )
    }

    fn nonce_of(a: &Admission<'_>) -> String {
        let Admission::Challenge(_, headers) = a else { panic!("not a challenge") };
        let value = headers[0].to_string();
        let start = value.find("nonce=\"").expect("a nonce") + 7;
        value[start..].split('"').next().expect("closed").to_owned()
    }

    fn outcome(a: &Admission<'_>) -> String {
        match a {
            Admission::Call(t) => format!("call {}", t.name),
            Admission::Challenge(code, h) => format!("{} x{}", u16::from(code.clone()), h.len()),
            Admission::Refuse { code, reason, .. } => format!("{} {reason}", u16::from(code.clone())),
        }
    }

    #[test]
    fn a_proxy_trunk_challenges_with_407_and_reads_proxy_authorization() {
        let proxy = TrunkConfig { challenge: crate::config::Challenge::Proxy, ..carrier() };
        let trunks = Trunks::new(&config(vec![proxy]));
        let at: IpAddr = "192.0.2.7".parse().expect("ip");
        let challenge = trunks.admit(&invite("4711", None), at, 9);
        assert_eq!(outcome(&challenge), "407 x2");
        let Admission::Challenge(_, headers) = &challenge else { panic!("{}", outcome(&challenge)) };
        assert!(headers.iter().all(|h| matches!(h, Header::ProxyAuthenticate(_))), "{headers:?}");
        let good = answer("acme", "s3cret", &nonce_of(&challenge), "MD5", "4711");
        let as_proxy = |a: &str| {
            let text = invite("4711", Some(a.to_owned())).to_string().replace("Authorization:", "Proxy-Authorization:");
            Request::try_from(text.as_str()).expect("a request")
        };
        assert_eq!(outcome(&trunks.admit(&as_proxy(&good), at, 10)), "call carrier");
        let wrong = answer("acme", "guess", &nonce_of(&challenge), "MD5", "4711");
        assert_eq!(outcome(&trunks.admit(&as_proxy(&wrong), at, 10)), "403 credentials");
    }

    #[test]
    fn source_number_then_credentials() {
        let trunks = Trunks::new(&config(vec![carrier()]));
        let at: IpAddr = "192.0.2.7".parse().expect("ip");
        let now = 1_000_000;
        assert_eq!(
            outcome(&trunks.admit(&invite("4711", None), "203.0.113.9".parse().expect("ip"), now)),
            "403 source"
        );
        let unknown = trunks.admit(&invite("4712", None), at, now);
        assert_eq!(outcome(&unknown), "401 x2", "which numbers exist is told only after the credentials");
        let challenge = trunks.admit(&invite("4711", None), at, now);
        assert_eq!(outcome(&challenge), "401 x2");
        let nonce = nonce_of(&challenge);
        for algorithm in ["MD5", "SHA-256"] {
            let good = answer("acme", "s3cret", &nonce, algorithm, "4711");
            assert_eq!(
                outcome(&trunks.admit(&invite("4711", Some(good)), at, now + 10)),
                "call carrier",
                "{algorithm}"
            );
            let wrong = answer("acme", "guess", &nonce, algorithm, "4711");
            assert_eq!(outcome(&trunks.admit(&invite("4711", Some(wrong)), at, now + 10)), "403 credentials");
        }
        let good = answer("acme", "s3cret", &nonce, "MD5", "4712");
        assert_eq!(outcome(&trunks.admit(&invite("4712", Some(good)), at, now)), "404 number");
        // Another source cannot reuse the nonce; an old one is challenged again (stale).
        let good = || Some(answer("acme", "s3cret", &nonce, "MD5", "4711"));
        let other: IpAddr = "192.0.2.8".parse().expect("ip");
        assert_eq!(outcome(&trunks.admit(&invite("4711", good()), other, now)), "403 credentials");
        let late = trunks.admit(&invite("4711", good()), at, now + NONCE_SECONDS + 1);
        let Admission::Challenge(_, headers) = &late else { panic!("{}", outcome(&late)) };
        assert!(headers[0].to_string().contains("stale=true"), "{}", headers[0]);
        // A forged nonce.
        let forged = answer("acme", "s3cret", &format!("{now:x}.00"), "MD5", "4711");
        assert_eq!(outcome(&trunks.admit(&invite("4711", Some(forged)), at, now)), "403 credentials");
    }

    #[test]
    fn an_md5_only_trunk_challenges_with_md5_and_refuses_sha_256() {
        let trunks = Trunks::new(&config(vec![TrunkConfig { digest: vec!["md5".into()], ..carrier() }]));
        let at: IpAddr = "192.0.2.7".parse().expect("ip");
        let challenge = trunks.admit(&invite("4711", None), at, 9);
        let Admission::Challenge(_, headers) = &challenge else { panic!("{}", outcome(&challenge)) };
        assert_eq!(headers.len(), 1);
        assert!(headers[0].to_string().contains("algorithm=MD5"), "{}", headers[0]);
        let nonce = nonce_of(&challenge);
        let sha = answer("acme", "s3cret", &nonce, "SHA-256", "4711");
        assert_eq!(outcome(&trunks.admit(&invite("4711", Some(sha)), at, 9)), "403 credentials", "no downgrade");
        let md5 = answer("acme", "s3cret", &nonce, "MD5", "4711");
        assert_eq!(outcome(&trunks.admit(&invite("4711", Some(md5)), at, 9)), "call carrier");
    }

    #[test]
    fn trusted_is_a_trunk_after_the_others_and_credentials_pick_the_trunk() {
        let open = TrunkConfig {
            name: "pbx".into(),
            networks: vec!["10.0.0.0/8".into()],
            room: "lobby".into(),
            ..TrunkConfig::default()
        };
        let second = TrunkConfig { name: "second".into(), username: "other".into(), ..carrier() };
        let cfg = SipConfig { trusted: vec!["127.0.0.0/8".into()], ..config(vec![carrier(), second, open]) };
        let trunks = Trunks::new(&cfg);
        let now = 5_000;
        let local: IpAddr = "127.0.0.1".parse().expect("ip");
        assert_eq!(outcome(&trunks.admit(&invite("anything", None), local, now)), "call trusted");
        let pbx = trunks.admit(&invite("9", None), "10.1.2.3".parse().expect("ip"), now);
        let Admission::Call(pbx) = pbx else { panic!("{}", outcome(&pbx)) };
        assert_eq!((pbx.name.as_str(), pbx.room.as_deref()), ("pbx", Some("lobby")));
        let at: IpAddr = "192.0.2.7".parse().expect("ip");
        let nonce = nonce_of(&trunks.admit(&invite("4711", None), at, now));
        let as_other = answer("other", "s3cret", &nonce, "MD5", "4711");
        assert_eq!(outcome(&trunks.admit(&invite("4711", Some(as_other)), at, now)), "call second");
    }
}
