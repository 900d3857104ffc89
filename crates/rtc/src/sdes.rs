//! SDES keys for SRTP (RFC 4568): the `a=crypto` lines of a plain RTP
//! offer (a SIP phone's, a PBX's) and the one of tutti's answer.
//!
//! ```text
//! a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:<base64 of key || salt>[|2^31][|1:1] [session params]
//!   ─► Crypto::parse ─► { tag 1, profile, the offerer's master key and salt }
//! answer: a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:<our own fresh key || salt>
//! ```
//!
//! Taken: the suites `AES_CM_128_HMAC_SHA1_80`, `AES_CM_128_HMAC_SHA1_32`
//! (RFC 4568), `AEAD_AES_128_GCM` and `AEAD_AES_256_GCM` (RFC 7714); one
//! key per line, a lifetime (ignored: a call never sends 2^31 packets), an
//! MKI of length 0 (none in the packets). Refused, so that the offer's next
//! line (or plain RTP) is taken: other suites, several keys or an MKI (both
//! need MKIs in the packets), session parameters that change the packets
//! (`UNENCRYPTED_SRTP`, `UNAUTHENTICATED_SRTP`, `KDR` other than 0, FEC).
//!
//! Pure functions, no allocation beyond the error's text; nothing here
//! panics on input, and no key is ever in a `Debug` or an error.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::srtp::{SrtpKeys, SrtpProfile};

/// The longest master key and salt (AES-256-GCM: 32 + 12 bytes).
const MAX_KEY_SALT: usize = 44;

/// The longest `a=crypto` value read (a line longer is refused unread).
pub const MAX_CRYPTO_LINE: usize = 512;

/// Why an `a=crypto` line is not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    /// Not `<tag> <suite> <key params> [<session params>]`.
    #[error("a=crypto must be '<tag> <suite> inline:<key>', like 'a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:…'")]
    Syntax,
    /// The tag is not 1 to 9 digits.
    #[error("the a=crypto tag must be 1 to 9 digits")]
    Tag,
    /// A suite tutti does not take (its name, cut to 64 characters).
    #[error(
        "the crypto suite '{0}' is not taken: offer AES_CM_128_HMAC_SHA1_80, AES_CM_128_HMAC_SHA1_32, AEAD_AES_128_GCM or AEAD_AES_256_GCM"
    )]
    Suite(String),
    /// The key is not `inline:` base64 of the suite's key and salt length.
    #[error("the a=crypto key must be inline:<base64 of {expected} bytes of master key and salt>")]
    Key {
        /// Bytes of key and salt the suite needs.
        expected: usize,
    },
    /// More than one key, or a master key identifier the packets would carry.
    #[error("several keys or an MKI in one a=crypto line are not taken: offer one key without MKI")]
    Mki,
    /// A lifetime that is not a number or `2^<n>`.
    #[error("the a=crypto key lifetime must be a number or 2^<n>")]
    Lifetime,
    /// A session parameter that changes the packets (its name, cut to 64 characters).
    #[error("the a=crypto session parameter '{0}' is not taken")]
    SessionParam(String),
}

/// One `a=crypto` line: its tag, suite and the offerer's master key and salt.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Crypto {
    /// The tag (the answer repeats it).
    pub tag: u32,
    /// The suite.
    pub profile: SrtpProfile,
    key_salt: [u8; MAX_KEY_SALT],
}

impl std::fmt::Debug for Crypto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Crypto").field("tag", &self.tag).field("profile", &self.profile).finish_non_exhaustive()
    }
}

/// The SDES name of a profile.
pub fn suite_name(profile: SrtpProfile) -> &'static str {
    match profile {
        SrtpProfile::Aes128CmHmacSha1_80 => "AES_CM_128_HMAC_SHA1_80",
        SrtpProfile::Aes128CmHmacSha1_32 => "AES_CM_128_HMAC_SHA1_32",
        SrtpProfile::AeadAes128Gcm => "AEAD_AES_128_GCM",
        SrtpProfile::AeadAes256Gcm => "AEAD_AES_256_GCM",
    }
}

fn suite(name: &str) -> Option<SrtpProfile> {
    SrtpProfile::ALL.into_iter().find(|p| suite_name(*p) == name)
}

fn key_len(profile: SrtpProfile) -> usize {
    profile.master_key_len() + profile.master_salt_len()
}

fn cut(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(64).collect()
}

impl Crypto {
    /// Parses the value of an `a=crypto:` attribute (what follows the colon).
    pub fn parse(value: &str) -> Result<Self, CryptoError> {
        if value.len() > MAX_CRYPTO_LINE {
            return Err(CryptoError::Syntax);
        }
        let mut fields = value.split_ascii_whitespace();
        let (Some(tag), Some(name), Some(params)) = (fields.next(), fields.next(), fields.next()) else {
            return Err(CryptoError::Syntax);
        };
        if tag.is_empty() || tag.len() > 9 || !tag.bytes().all(|b| b.is_ascii_digit()) {
            return Err(CryptoError::Tag);
        }
        let tag: u32 = tag.parse().map_err(|_| CryptoError::Tag)?;
        let profile = suite(name).ok_or_else(|| CryptoError::Suite(cut(name)))?;
        for param in fields {
            let known_harmless =
                param.starts_with("WSH=") || param == "KDR=0" || param.eq_ignore_ascii_case("UNENCRYPTED_SRTCP");
            if !known_harmless {
                return Err(CryptoError::SessionParam(cut(param)));
            }
        }
        if params.contains(';') {
            return Err(CryptoError::Mki);
        }
        let expected = key_len(profile);
        let info = params.strip_prefix("inline:").ok_or(CryptoError::Key { expected })?;
        let mut parts = info.split('|');
        let key = parts.next().unwrap_or_default();
        for part in parts {
            if let Some((mki, len)) = part.split_once(':') {
                let number = |s: &str| !s.is_empty() && s.len() <= 3 && s.bytes().all(|b| b.is_ascii_digit());
                // An MKI of length 0: nothing in the packets, so nothing to do.
                if !number(mki) || !number(len) || len.parse::<u32>().ok() != Some(0) {
                    return Err(CryptoError::Mki);
                }
            } else {
                let power = part.strip_prefix("2^").unwrap_or(part);
                if power.is_empty() || power.len() > 20 || !power.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(CryptoError::Lifetime);
                }
            }
        }
        // Base64 of 30 or 44 bytes is 40 or 60 characters.
        if key.len() > 64 {
            return Err(CryptoError::Key { expected });
        }
        let mut decoded = [0u8; 48];
        let n = STANDARD.decode_slice(key, &mut decoded).map_err(|_| CryptoError::Key { expected })?;
        if n != expected {
            return Err(CryptoError::Key { expected });
        }
        let mut key_salt = [0u8; MAX_KEY_SALT];
        key_salt[..n].copy_from_slice(&decoded[..n]);
        Ok(Self { tag, profile, key_salt })
    }

    /// A line of ours: `tag` and `profile`, our master key and salt from
    /// `key_salt` (its first bytes: the suite's key and salt length).
    /// `None` when `key_salt` is shorter than that.
    pub fn ours(tag: u32, profile: SrtpProfile, key_salt: &[u8]) -> Option<Self> {
        let n = key_len(profile);
        let mut own = [0u8; MAX_KEY_SALT];
        own[..n].copy_from_slice(key_salt.get(..n)?);
        Some(Self { tag, profile, key_salt: own })
    }

    /// A fresh line of ours with the tag and suite of `offered`, its key
    /// and salt from the system's random source.
    pub fn fresh(offered: &Crypto) -> Result<Self, getrandom::Error> {
        let mut key_salt = [0u8; MAX_KEY_SALT];
        getrandom::fill(&mut key_salt[..key_len(offered.profile)])?;
        Ok(Self { tag: offered.tag, profile: offered.profile, key_salt })
    }

    /// The master key and salt, for an SRTP context.
    pub fn keys(&self) -> SrtpKeys {
        let (k, s) = (self.profile.master_key_len(), self.profile.master_salt_len());
        SrtpKeys {
            profile: self.profile,
            master_key: self.key_salt[..k].to_vec(),
            master_salt: self.key_salt[k..k + s].to_vec(),
        }
    }

    /// The attribute's value: `<tag> <suite> inline:<base64 key || salt>`.
    pub fn to_value(&self) -> String {
        let key = STANDARD.encode(&self.key_salt[..key_len(self.profile)]);
        format!("{} {} inline:{key}", self.tag, suite_name(self.profile))
    }
}

/// The SDES keys of a call: the offer's line tutti took (the caller's
/// key) and tutti's own (the answer's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sdes {
    /// The caller's: its packets are opened with it.
    pub remote: Crypto,
    /// tutti's: its packets are protected with it.
    pub local: Crypto,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4568 §9.1's example key (30 bytes).
    const KEY: &str = "WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz";

    #[test]
    fn the_rfc_example_and_its_variants_parse() {
        let c = Crypto::parse(&format!("1 AES_CM_128_HMAC_SHA1_80 inline:{KEY}|2^20|1:4")).expect_err("refused");
        assert_eq!(c, CryptoError::Mki, "an MKI of 4 bytes in each packet is not taken");
        let c = Crypto::parse(&format!("1 AES_CM_128_HMAC_SHA1_80 inline:{KEY}|2^20")).expect("parses");
        assert_eq!((c.tag, c.profile), (1, SrtpProfile::Aes128CmHmacSha1_80));
        let keys = c.keys();
        assert_eq!((keys.master_key.len(), keys.master_salt.len()), (16, 14));
        assert_eq!(&keys.master_key[..3], b"YS_");
        assert_eq!(c.to_value(), format!("1 AES_CM_128_HMAC_SHA1_80 inline:{KEY}"));
        let c = Crypto::parse(&format!("7 AES_CM_128_HMAC_SHA1_32 inline:{KEY}|1:0 WSH=64")).expect("MKI length 0");
        assert_eq!((c.tag, c.profile), (7, SrtpProfile::Aes128CmHmacSha1_32));
        let gcm = STANDARD.encode([5u8; 44]);
        let c = Crypto::parse(&format!("2 AEAD_AES_256_GCM inline:{gcm}")).expect("GCM 256");
        assert_eq!(c.keys().master_key, vec![5u8; 32]);
        assert_eq!(Crypto::parse(&c.to_value()), Ok(c), "our own line parses back");
    }

    #[test]
    fn malformed_lines_are_refused_with_what_is_wrong() {
        let bad = |v: &str| Crypto::parse(v).expect_err("refused");
        assert_eq!(bad(""), CryptoError::Syntax);
        assert_eq!(bad("1 AES_CM_128_HMAC_SHA1_80"), CryptoError::Syntax);
        assert_eq!(bad(&format!("x AES_CM_128_HMAC_SHA1_80 inline:{KEY}")), CryptoError::Tag);
        assert_eq!(bad(&format!("1234567890 AES_CM_128_HMAC_SHA1_80 inline:{KEY}")), CryptoError::Tag);
        assert_eq!(
            bad(&format!("1 F8_128_HMAC_SHA1_80 inline:{KEY}")),
            CryptoError::Suite("F8_128_HMAC_SHA1_80".into())
        );
        assert_eq!(bad(&format!("1 AES_CM_128_HMAC_SHA1_80 {KEY}")), CryptoError::Key { expected: 30 });
        assert_eq!(bad("1 AES_CM_128_HMAC_SHA1_80 inline:AAAA"), CryptoError::Key { expected: 30 }, "short");
        assert_eq!(bad("1 AES_CM_128_HMAC_SHA1_80 inline:!!!!"), CryptoError::Key { expected: 30 });
        assert_eq!(bad(&format!("1 AEAD_AES_128_GCM inline:{KEY}")), CryptoError::Key { expected: 28 });
        assert_eq!(bad(&format!("1 AES_CM_128_HMAC_SHA1_80 inline:{KEY};inline:{KEY}")), CryptoError::Mki);
        assert_eq!(bad(&format!("1 AES_CM_128_HMAC_SHA1_80 inline:{KEY}|2^x")), CryptoError::Lifetime);
        assert_eq!(bad(&format!("1 AES_CM_128_HMAC_SHA1_80 inline:{KEY}|")), CryptoError::Lifetime);
        assert_eq!(bad(&format!("1 AES_CM_128_HMAC_SHA1_80 inline:{KEY}|a:0")), CryptoError::Mki);
        assert_eq!(
            bad(&format!("1 AES_CM_128_HMAC_SHA1_80 inline:{KEY} UNENCRYPTED_SRTP")),
            CryptoError::SessionParam("UNENCRYPTED_SRTP".into())
        );
        assert_eq!(
            bad(&format!("1 AES_CM_128_HMAC_SHA1_80 inline:{KEY} KDR=24")),
            CryptoError::SessionParam("KDR=24".into())
        );
        let long = format!("1 AES_CM_128_HMAC_SHA1_80 inline:{}", "A".repeat(600));
        assert_eq!(bad(&long), CryptoError::Syntax);
        let long_key = format!("1 AES_CM_128_HMAC_SHA1_80 inline:{}", "A".repeat(100));
        assert_eq!(bad(&long_key), CryptoError::Key { expected: 30 });
    }

    #[test]
    fn no_key_in_debug_or_errors() {
        let c = Crypto::parse(&format!("1 AES_CM_128_HMAC_SHA1_80 inline:{KEY}")).expect("parses");
        let shown = format!("{c:?} {:?} {:?}", c.keys(), Sdes { remote: c, local: c });
        assert!(!shown.contains(KEY) && !shown.contains("89, 83"), "{shown}");
        let fresh = Crypto::fresh(&c).expect("random");
        assert_eq!((fresh.tag, fresh.profile), (1, SrtpProfile::Aes128CmHmacSha1_80));
        assert_ne!(fresh.keys().master_key, c.keys().master_key);
        assert_ne!(fresh.keys().master_key, vec![0u8; 16], "filled");
    }

    /// Seeded mutated lines (the stable counterpart of the `sdes_crypto`
    /// fuzz target): no panic, and what parses prints back to a line that
    /// parses to the same.
    #[test]
    fn random_and_mutated_lines_never_panic() {
        let mut next = crate::plain::tests::xorshift(0x2545_F491_4F6C_DD1D);
        let valid = format!("1 AES_CM_128_HMAC_SHA1_80 inline:{KEY}|2^31|1:0 WSH=64");
        for _ in 0..20_000 {
            let mut line = valid.clone().into_bytes();
            for _ in 0..next() % 6 {
                let i = (next() as usize) % line.len();
                line[i] = b" 0123456789|:;^=/+AEHKMSW_inl"[(next() % 29) as usize];
            }
            if let Ok(c) = Crypto::parse(&String::from_utf8_lossy(&line)) {
                assert_eq!(Crypto::parse(&c.to_value()), Ok(c));
            }
        }
    }
}
