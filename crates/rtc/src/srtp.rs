//! SRTP protection of outgoing RTP, in place: AES-GCM (RFC 7714) and
//! AES-CM with HMAC-SHA1 (RFC 3711), the profiles WebRTC negotiates over
//! DTLS-SRTP (RFC 5764).
//!
//! Send side: stateless per packet; the caller (the lean sender in the
//! crate's `media` module) owns the sequence number and rollover counter of its
//! one SSRC and passes them in, so that state lives in one place.
//!
//! Receive side ([`SrtpReceiver`]): verify the tag (constant time), decrypt
//! in place, and per SSRC the packet index estimate (RFC 3711 §3.3.1,
//! Appendix A: the rollover counter guessed from the sequence number, both
//! ways across a wrap) and a 64-packet replay window ([`ReplayWindow`]),
//! which move only once a packet authenticated. No allocation per packet.
//!
//! SRTCP (RFC 3711 §3.4, RFC 7714 §9): [`SrtcpContext`] protects outgoing
//! RTCP under our own SRTCP index, [`SrtcpReceiver`] opens incoming RTCP
//! (always authenticated, decrypted when its E flag is set) with a replay
//! window per sender SSRC. webrtc-rs keeps its own contexts for everything else.
//!
//! Implementations, picked by numbers (`crates/rtc/cipher-bench`, ns per
//! 80-byte Opus packet with a 24-byte header, min of 15 rounds on the
//! shared 2-core dev box, one run; medians were 2-3× noisier):
//!
//! | operation                  | ring | RustCrypto | aws-lc-rs |
//! |----------------------------|-----:|-----------:|----------:|
//! | AES-128-GCM seal           |   88 |  143 (`aes-gcm` 0.10) | 206 |
//! | AES-128-CTR, 80 bytes      |   —  |   75 (`aes` + `ctr`)  |  60 |
//! | HMAC-SHA1 over 108 bytes   | 1178 |  162 (`hmac` + `sha1`, SHA-NI) | 570 |
//!
//! So AES-GCM is `ring`'s (already in the workspace), AES-CM is RustCrypto's
//! `aes` + `ctr` (`ring` exposes no raw AES-CTR; aws-lc-rs's is within
//! noise and costs a 2.5-minute C build), HMAC-SHA1 RustCrypto's (`ring`'s
//! SHA-1 is portable code without SHA-NI).

use aes::cipher::{BlockEncrypt, InnerIvInit, KeyInit, StreamCipher};
use bytes::BytesMut;
use hmac::Mac;
use rtc::dtls::extension::extension_use_srtp::SrtpProtectionProfile;

/// An SRTP protection profile (RFC 5764 §4.1.2, RFC 7714 §14.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SrtpProfile {
    /// SRTP_AEAD_AES_128_GCM: AES-128-GCM, 16-byte tag.
    AeadAes128Gcm,
    /// SRTP_AEAD_AES_256_GCM: AES-256-GCM, 16-byte tag.
    AeadAes256Gcm,
    /// SRTP_AES128_CM_HMAC_SHA1_80: AES-128 counter mode, 80-bit HMAC-SHA1 tag.
    Aes128CmHmacSha1_80,
    /// SRTP_AES128_CM_HMAC_SHA1_32: as above with a 32-bit tag.
    Aes128CmHmacSha1_32,
}

impl SrtpProfile {
    /// Every profile, strongest first.
    pub const ALL: [SrtpProfile; 4] =
        [Self::AeadAes128Gcm, Self::AeadAes256Gcm, Self::Aes128CmHmacSha1_80, Self::Aes128CmHmacSha1_32];

    /// Bytes of master key.
    pub const fn master_key_len(self) -> usize {
        match self {
            Self::AeadAes256Gcm => 32,
            _ => 16,
        }
    }

    /// Bytes of master salt.
    pub const fn master_salt_len(self) -> usize {
        match self {
            Self::AeadAes128Gcm | Self::AeadAes256Gcm => 12,
            _ => 14,
        }
    }

    /// Bytes of authentication tag appended to each SRTP packet.
    pub const fn tag_len(self) -> usize {
        match self {
            Self::AeadAes128Gcm | Self::AeadAes256Gcm => 16,
            Self::Aes128CmHmacSha1_80 => 10,
            Self::Aes128CmHmacSha1_32 => 4,
        }
    }

    /// Bytes of DTLS keying material both directions' keys are cut from
    /// (RFC 5764 §4.2: two master keys, then two master salts).
    pub const fn keying_material_len(self) -> usize {
        2 * (self.master_key_len() + self.master_salt_len())
    }

    /// The profile as webrtc-rs's statistics name it (`srtp_cipher`).
    pub(crate) fn from_stats_name(name: &str) -> Option<Self> {
        match name {
            "SRTP_AEAD_AES_128_GCM" => Some(Self::AeadAes128Gcm),
            "SRTP_AEAD_AES_256_GCM" => Some(Self::AeadAes256Gcm),
            "SRTP_AES128_CM_HMAC_SHA1_80" => Some(Self::Aes128CmHmacSha1_80),
            "SRTP_AES128_CM_HMAC_SHA1_32" => Some(Self::Aes128CmHmacSha1_32),
            _ => None,
        }
    }

    /// The profile as webrtc-rs's DTLS `use_srtp` extension names it.
    pub(crate) fn to_dtls(self) -> SrtpProtectionProfile {
        match self {
            Self::AeadAes128Gcm => SrtpProtectionProfile::Srtp_Aead_Aes_128_Gcm,
            Self::AeadAes256Gcm => SrtpProtectionProfile::Srtp_Aead_Aes_256_Gcm,
            Self::Aes128CmHmacSha1_80 => SrtpProtectionProfile::Srtp_Aes128_Cm_Hmac_Sha1_80,
            Self::Aes128CmHmacSha1_32 => SrtpProtectionProfile::Srtp_Aes128_Cm_Hmac_Sha1_32,
        }
    }
}

/// Why an SRTP context could not be made or a packet not protected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SrtpError {
    /// The master key or salt has the wrong length for the profile.
    #[error("SRTP {what} must be {expected} bytes, not {got}")]
    KeyLength {
        /// Which: "master key", "master salt" or "keying material".
        what: &'static str,
        /// For the profile.
        expected: usize,
        /// Given.
        got: usize,
    },
    /// The packet is shorter than the header it claims.
    #[error("the RTP or RTCP header ({header} bytes) is longer than the packet ({len} bytes)")]
    ShortPacket {
        /// Header length claimed.
        header: usize,
        /// Packet length.
        len: usize,
    },
    /// The cipher refused (a payload too long for one GCM invocation).
    #[error("the AES-GCM seal failed")]
    Seal,
    /// Not an RTP packet (version 2) whose header fits the datagram with a tag after it.
    #[error("not an SRTP packet")]
    NotSrtp,
    /// The authentication tag does not match: forged, corrupted, or other keys.
    #[error("the SRTP authentication failed")]
    Auth,
    /// This packet index was received already (RFC 3711 §3.3.2).
    #[error("a replayed SRTP packet")]
    Replay,
    /// The packet is older than the replay window remembers (64 packets).
    #[error("an SRTP packet older than the replay window")]
    TooOld,
    /// A new SSRC, with every receive slot taken by others.
    #[error("no receive slot for another SSRC")]
    Streams,
    /// The 31-bit SRTCP index is used up (RFC 3711 §3.3.1): the session
    /// needs new keys before it sends more RTCP.
    #[error("the SRTCP index would pass 2^31 - 1")]
    SrtcpIndex,
}

/// One direction's master key and salt, as DTLS exported them.
#[derive(Clone, PartialEq, Eq)]
pub struct SrtpKeys {
    /// The negotiated profile.
    pub profile: SrtpProfile,
    /// Master key (16 or 32 bytes).
    pub master_key: Vec<u8>,
    /// Master salt (12 or 14 bytes).
    pub master_salt: Vec<u8>,
}

impl std::fmt::Debug for SrtpKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SrtpKeys").field("profile", &self.profile).finish_non_exhaustive()
    }
}

impl SrtpKeys {
    /// Cuts the (local, remote) keys out of DTLS keying material (RFC 5764
    /// §4.2: client key, server key, client salt, server salt).
    pub fn from_keying_material(
        profile: SrtpProfile,
        material: &[u8],
        is_dtls_client: bool,
    ) -> Result<(Self, Self), SrtpError> {
        let (k, s) = (profile.master_key_len(), profile.master_salt_len());
        if material.len() != profile.keying_material_len() {
            return Err(SrtpError::KeyLength {
                what: "keying material",
                expected: profile.keying_material_len(),
                got: material.len(),
            });
        }
        let (client_key, rest) = material.split_at(k);
        let (server_key, rest) = rest.split_at(k);
        let (client_salt, server_salt) = rest.split_at(s);
        let client = Self { profile, master_key: client_key.to_vec(), master_salt: client_salt.to_vec() };
        let server = Self { profile, master_key: server_key.to_vec(), master_salt: server_salt.to_vec() };
        Ok(if is_dtls_client { (client, server) } else { (server, client) })
    }
}

/// RFC 3711 §4.3.1 key derivation (the AES-CM PRF, key derivation rate 0):
/// fills `out` with the session value for `label`. A salt shorter than 14
/// bytes (GCM's 12) sits at the front, zero-padded (as libsrtp and pion do).
fn derive(master_key: &[u8], master_salt: &[u8], label: u8, out: &mut [u8]) -> Result<(), SrtpError> {
    let mut x = [0u8; 16];
    x[..master_salt.len()].copy_from_slice(master_salt);
    x[7] ^= label;
    enum Prf {
        A128(Box<aes::Aes128>),
        A256(Box<aes::Aes256>),
    }
    let prf = match master_key.len() {
        16 => Prf::A128(Box::new(aes::Aes128::new(master_key.into()))),
        32 => Prf::A256(Box::new(aes::Aes256::new(master_key.into()))),
        got => return Err(SrtpError::KeyLength { what: "master key", expected: 16, got }),
    };
    for (i, chunk) in out.chunks_mut(16).enumerate() {
        let mut block = x;
        // At most 2 blocks are ever asked for: the counter fits its 16 bits.
        block[14..].copy_from_slice(&(i as u16).to_be_bytes());
        let mut b = block.into();
        match &prf {
            Prf::A128(c) => c.encrypt_block(&mut b),
            Prf::A256(c) => c.encrypt_block(&mut b),
        }
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
    Ok(())
}

/// RFC 3711 §4.3.1 labels (encryption, authentication, salt) of SRTP's
/// session keys and of SRTCP's.
const LABELS_SRTP: [u8; 3] = [0x00, 0x01, 0x02];
const LABELS_SRTCP: [u8; 3] = [0x03, 0x04, 0x05];

/// Bytes of SRTCP's HMAC-SHA1 tag, with both CM profiles: the _32 one
/// shortens only SRTP's (RFC 5764 §4.1.2: `srtcp_auth_tag_length` 80).
const SRTCP_CM_TAG_LEN: usize = 10;

type HmacSha1 = hmac::Hmac<sha1::Sha1>;
type Aes128Ctr = ctr::Ctr128BE<aes::Aes128>;

/// RFC 7714 §8.1: IV = (00 00 || SSRC || ROC || SEQ) XOR salt.
fn gcm_iv(salt: &[u8; 12], ssrc: u32, roc: u32, seq: u16) -> [u8; 12] {
    let mut iv = [0u8; 12];
    iv[2..6].copy_from_slice(&ssrc.to_be_bytes());
    iv[6..10].copy_from_slice(&roc.to_be_bytes());
    iv[10..12].copy_from_slice(&seq.to_be_bytes());
    for (v, s) in iv.iter_mut().zip(salt) {
        *v ^= s;
    }
    iv
}

/// RFC 3711 §4.1.1: the AES-CM keystream of one packet, from
/// IV = (salt << 16) XOR (SSRC << 64) XOR (index << 16).
fn cm_keystream(aes: &aes::Aes128, salt: &[u8; 14], ssrc: u32, roc: u32, seq: u16) -> Aes128Ctr {
    let mut iv = [0u8; 16];
    iv[..14].copy_from_slice(salt);
    for (v, s) in iv[4..8].iter_mut().zip(ssrc.to_be_bytes()) {
        *v ^= s;
    }
    for (v, s) in iv[8..12].iter_mut().zip(roc.to_be_bytes()) {
        *v ^= s;
    }
    for (v, s) in iv[12..14].iter_mut().zip(seq.to_be_bytes()) {
        *v ^= s;
    }
    Aes128Ctr::from_core(ctr::CtrCore::inner_iv_init(aes.clone(), &iv.into()))
}

/// Both variants hold an expanded key of some hundred bytes; the context
/// lives boxed in its sender.
enum Cipher {
    Gcm { key: ring::aead::LessSafeKey, salt: [u8; 12] },
    // The keyed HMAC boxed, to keep the variants of a size; cloning it per
    // packet copies its state, no allocation.
    Cm { aes: aes::Aes128, auth: Box<HmacSha1>, salt: [u8; 14], tag_len: usize },
}

impl Cipher {
    /// Derives the session keys of SRTP (labels 0, 1, 2) or, `rtcp`, of
    /// SRTCP (labels 3, 4, 5; RFC 3711 §4.3.2) from a master key and salt.
    fn new(keys: &SrtpKeys, rtcp: bool) -> Result<Self, SrtpError> {
        let profile = keys.profile;
        if keys.master_key.len() != profile.master_key_len() {
            return Err(SrtpError::KeyLength {
                what: "master key",
                expected: profile.master_key_len(),
                got: keys.master_key.len(),
            });
        }
        if keys.master_salt.len() != profile.master_salt_len() {
            return Err(SrtpError::KeyLength {
                what: "master salt",
                expected: profile.master_salt_len(),
                got: keys.master_salt.len(),
            });
        }
        let (mk, ms) = (&keys.master_key[..], &keys.master_salt[..]);
        let labels = if rtcp { LABELS_SRTCP } else { LABELS_SRTP };
        let cipher = match profile {
            SrtpProfile::AeadAes128Gcm | SrtpProfile::AeadAes256Gcm => {
                let mut session_key = [0u8; 32];
                let session_key = &mut session_key[..mk.len()];
                derive(mk, ms, labels[0], session_key)?;
                let mut salt = [0u8; 12];
                derive(mk, ms, labels[2], &mut salt)?;
                let alg = if mk.len() == 16 { &ring::aead::AES_128_GCM } else { &ring::aead::AES_256_GCM };
                let key = ring::aead::UnboundKey::new(alg, session_key).map_err(|_| SrtpError::KeyLength {
                    what: "session key",
                    expected: alg.key_len(),
                    got: session_key.len(),
                })?;
                Cipher::Gcm { key: ring::aead::LessSafeKey::new(key), salt }
            }
            SrtpProfile::Aes128CmHmacSha1_80 | SrtpProfile::Aes128CmHmacSha1_32 => {
                let mut session_key = [0u8; 16];
                derive(mk, ms, labels[0], &mut session_key)?;
                let mut auth_key = [0u8; 20];
                derive(mk, ms, labels[1], &mut auth_key)?;
                let mut salt = [0u8; 14];
                derive(mk, ms, labels[2], &mut salt)?;
                Cipher::Cm {
                    aes: aes::Aes128::new(&session_key.into()),
                    // HMAC takes a key of any length: this cannot fail.
                    auth: Box::new(<HmacSha1 as Mac>::new_from_slice(&auth_key).map_err(|_| SrtpError::KeyLength {
                        what: "auth key",
                        expected: 20,
                        got: 20,
                    })?),
                    salt,
                    tag_len: if rtcp { SRTCP_CM_TAG_LEN } else { profile.tag_len() },
                }
            }
        };
        Ok(cipher)
    }

    /// The tag's length: the AEAD's, or the HMAC truncated as the profile
    /// (SRTP) or SRTCP says.
    fn tag_len(&self) -> usize {
        match self {
            Self::Gcm { key, .. } => key.algorithm().tag_len(),
            Self::Cm { tag_len, .. } => *tag_len,
        }
    }
}

/// The send half of an SRTP session for RTP: session keys derived once,
/// each packet protected in place. Holds no per-SSRC state: the caller
/// passes the packet index (ROC and sequence number).
pub struct SrtpContext {
    profile: SrtpProfile,
    cipher: Cipher,
}

impl std::fmt::Debug for SrtpContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SrtpContext").field("profile", &self.profile).finish_non_exhaustive()
    }
}

impl SrtpContext {
    /// Derives the SRTP session keys from a master key and salt.
    pub fn new(keys: &SrtpKeys) -> Result<Self, SrtpError> {
        Ok(Self { profile: keys.profile, cipher: Cipher::new(keys, false)? })
    }

    /// The profile.
    pub fn profile(&self) -> SrtpProfile {
        self.profile
    }

    /// Reads the first and last bytes that protecting a packet reads (the
    /// profile, the cipher's tag, its key's algorithm, its salt), to bring
    /// them into cache ahead of [`SrtpContext::protect_rtp`]. Changes nothing.
    pub fn touch(&self) -> u8 {
        let tag = self.profile.tag_len() as u8;
        match &self.cipher {
            Cipher::Gcm { key, salt } => tag ^ salt[0] ^ key.algorithm().tag_len() as u8,
            Cipher::Cm { salt, tag_len, .. } => tag ^ salt[0] ^ *tag_len as u8,
        }
    }

    /// Bytes appended to each packet.
    pub fn tag_len(&self) -> usize {
        self.profile.tag_len()
    }

    /// Protects the RTP packet in `packet` (a header of `header_len` bytes,
    /// CSRCs and extension included, then the payload) in place: encrypts
    /// the payload and appends the tag. Reserve [`SrtpContext::tag_len`]
    /// bytes of capacity beforehand and nothing is allocated.
    pub fn protect_rtp(
        &self,
        packet: &mut BytesMut,
        header_len: usize,
        ssrc: u32,
        seq: u16,
        roc: u32,
    ) -> Result<(), SrtpError> {
        if header_len > packet.len() {
            return Err(SrtpError::ShortPacket { header: header_len, len: packet.len() });
        }
        match &self.cipher {
            Cipher::Gcm { key, salt } => {
                let iv = gcm_iv(salt, ssrc, roc, seq);
                let (aad, payload) = packet.split_at_mut(header_len);
                let tag = key
                    .seal_in_place_separate_tag(
                        ring::aead::Nonce::assume_unique_for_key(iv),
                        ring::aead::Aad::from(&*aad),
                        payload,
                    )
                    .map_err(|_| SrtpError::Seal)?;
                packet.extend_from_slice(tag.as_ref());
            }
            Cipher::Cm { aes, auth, salt, tag_len } => {
                let mut ctr = cm_keystream(aes, salt, ssrc, roc, seq);
                ctr.apply_keystream(&mut packet[header_len..]);
                // RFC 3711 §4.2: tag over the authenticated portion, then the ROC.
                let mut mac = HmacSha1::clone(auth);
                mac.update(packet);
                mac.update(&roc.to_be_bytes());
                let full = mac.finalize().into_bytes();
                packet.extend_from_slice(&full[..*tag_len]);
            }
        }
        Ok(())
    }

    /// Opens the SRTP packet in `packet` (an RTP header of `header_len`
    /// bytes, the encrypted payload, the tag) in place, for packet index
    /// `roc` · 2¹⁶ + `seq`: checks the tag (constant time) and decrypts
    /// the payload. Returns where the payload now is; on an error the
    /// packet is not to be used.
    pub fn unprotect_rtp(
        &self,
        packet: &mut [u8],
        header_len: usize,
        ssrc: u32,
        seq: u16,
        roc: u32,
    ) -> Result<std::ops::Range<usize>, SrtpError> {
        let tag_len = self.tag_len();
        if header_len + tag_len > packet.len() {
            return Err(SrtpError::ShortPacket { header: header_len + tag_len, len: packet.len() });
        }
        let end = packet.len() - tag_len;
        match &self.cipher {
            Cipher::Gcm { key, salt } => {
                let iv = gcm_iv(salt, ssrc, roc, seq);
                let (aad, rest) = packet.split_at_mut(header_len);
                key.open_in_place(ring::aead::Nonce::assume_unique_for_key(iv), ring::aead::Aad::from(&*aad), rest)
                    .map_err(|_| SrtpError::Auth)?;
            }
            Cipher::Cm { aes, auth, salt, .. } => {
                let (authenticated, tag) = packet.split_at_mut(end);
                let mut mac = HmacSha1::clone(auth);
                mac.update(authenticated);
                mac.update(&roc.to_be_bytes());
                mac.verify_truncated_left(tag).map_err(|_| SrtpError::Auth)?;
                let mut ctr = cm_keystream(aes, salt, ssrc, roc, seq);
                ctr.apply_keystream(&mut authenticated[header_len..]);
            }
        }
        Ok(header_len..end)
    }
}

/// The length of the RTP header (fixed part, CSRCs, header extension) at
/// the front of `packet`, if it is RTP version 2 and the header fits.
pub fn rtp_header_len(packet: &[u8]) -> Option<usize> {
    if packet.len() < 12 || packet[0] >> 6 != 2 {
        return None;
    }
    let mut len = 12 + 4 * usize::from(packet[0] & 0x0F);
    if packet[0] & 0x10 != 0 {
        let words = packet.get(len + 2..len + 4)?;
        len += 4 + 4 * usize::from(u16::from_be_bytes([words[0], words[1]]));
    }
    (len <= packet.len()).then_some(len)
}

/// One SSRC's receive state (RFC 3711 §3.3): the highest packet index
/// authenticated so far and which of the 64 before it were seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayWindow {
    /// Highest index (ROC · 2¹⁶ + SEQ) accepted; meaningless before the first.
    highest: u64,
    /// Bit `d` set: index `highest − d` was accepted.
    seen: u64,
    started: bool,
}

impl ReplayWindow {
    /// Packets the window remembers below the highest.
    pub const SIZE: u64 = 64;

    /// Nothing received yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The rollover counter RFC 3711 Appendix A guesses for `seq`, against
    /// the highest sequence number and ROC so far (the first packet: ROC 0).
    /// `None` for a packet that would lie before ROC 0.
    pub fn estimate(&self, seq: u16) -> Option<u32> {
        if !self.started {
            return Some(0);
        }
        let roc = (self.highest >> 16) as u32;
        let s_l = self.highest as u16;
        let (seq32, s_l32) = (i32::from(seq), i32::from(s_l));
        if s_l < 0x8000 {
            if seq32 - s_l32 > 0x8000 { roc.checked_sub(1) } else { Some(roc) }
        } else if s_l32 - 0x8000 > seq32 {
            roc.checked_add(1)
        } else {
            Some(roc)
        }
    }

    /// Whether the packet with this rollover counter and sequence number
    /// may be new: not seen, not older than the window. Changes nothing.
    pub fn check(&self, roc: u32, seq: u16) -> Result<(), SrtpError> {
        let index = (u64::from(roc) << 16) | u64::from(seq);
        if !self.started || index > self.highest {
            return Ok(());
        }
        let delta = self.highest - index;
        if delta >= Self::SIZE {
            Err(SrtpError::TooOld)
        } else if self.seen & (1 << delta) != 0 {
            Err(SrtpError::Replay)
        } else {
            Ok(())
        }
    }

    /// Records an authenticated packet (after [`ReplayWindow::check`] passed).
    pub fn accept(&mut self, roc: u32, seq: u16) {
        let index = (u64::from(roc) << 16) | u64::from(seq);
        if !self.started {
            *self = Self { highest: index, seen: 1, started: true };
        } else if index > self.highest {
            let shift = index - self.highest;
            self.seen = if shift >= Self::SIZE { 0 } else { self.seen << shift };
            self.seen |= 1;
            self.highest = index;
        } else {
            let delta = self.highest - index;
            if delta < Self::SIZE {
                self.seen |= 1 << delta;
            }
        }
    }

    /// The highest (ROC, sequence number) accepted so far.
    pub fn highest(&self) -> Option<(u32, u16)> {
        self.started.then_some(((self.highest >> 16) as u32, self.highest as u16))
    }
}

/// How many SSRCs one [`SrtpReceiver`] follows (a tutti server sends one
/// stream per peer; a new SSRC beyond these is refused with [`SrtpError::Streams`]).
pub const RECEIVE_STREAMS: usize = 4;

/// A receiver's replay windows, one per SSRC it follows (at most
/// [`RECEIVE_STREAMS`]): fixed size, no allocation.
#[derive(Debug, Clone, Copy)]
struct Streams {
    slots: [(u32, ReplayWindow); RECEIVE_STREAMS],
    used: usize,
}

impl Streams {
    fn new() -> Self {
        Self { slots: [(0, ReplayWindow::new()); RECEIVE_STREAMS], used: 0 }
    }

    /// The window of `ssrc`, if a packet of it was accepted.
    fn get(&self, ssrc: u32) -> Option<&ReplayWindow> {
        self.slots[..self.used].iter().find(|(s, _)| *s == ssrc).map(|(_, w)| w)
    }

    /// `ssrc`'s slot (`None`: new) and a copy of its window (fresh if new),
    /// to check a packet against before anything moves; a new SSRC beyond
    /// [`RECEIVE_STREAMS`] is refused.
    fn window(&self, ssrc: u32) -> Result<(Option<usize>, ReplayWindow), SrtpError> {
        let slot = self.slots[..self.used].iter().position(|(s, _)| *s == ssrc);
        if slot.is_none() && self.used == RECEIVE_STREAMS {
            return Err(SrtpError::Streams);
        }
        Ok((slot, slot.map_or_else(ReplayWindow::new, |i| self.slots[i].1)))
    }

    /// A packet of `ssrc` at index (`high`, `low`) authenticated: its window
    /// moves, in `slot` from [`Streams::window`] or a new one.
    fn accept(&mut self, slot: Option<usize>, ssrc: u32, high: u32, low: u16) {
        let i = slot.unwrap_or_else(|| {
            self.used += 1;
            self.used - 1
        });
        self.slots[i].0 = ssrc;
        self.slots[i].1.accept(high, low);
    }
}

/// The receive half of an SRTP session for RTP: the session keys, and per
/// SSRC the rollover counter and replay window. Fixed size, no allocation
/// per packet.
#[derive(Debug)]
pub struct SrtpReceiver {
    srtp: SrtpContext,
    streams: Streams,
}

impl SrtpReceiver {
    /// Derives the session keys from the remote side's master key and salt.
    pub fn new(keys: &SrtpKeys) -> Result<Self, SrtpError> {
        Ok(Self { srtp: SrtpContext::new(keys)?, streams: Streams::new() })
    }

    /// The profile.
    pub fn profile(&self) -> SrtpProfile {
        self.srtp.profile()
    }

    /// The receive state of `ssrc`, if a packet of it was accepted.
    pub fn window(&self, ssrc: u32) -> Option<&ReplayWindow> {
        self.streams.get(ssrc)
    }

    /// Opens one SRTP packet in place: finds its SSRC's state, estimates
    /// the rollover counter, refuses a replay or a packet too old, checks
    /// the tag, decrypts; only then the state moves. Returns the RTP header
    /// length and where the (decrypted) payload is, padding included.
    pub fn unprotect(&mut self, packet: &mut [u8]) -> Result<(usize, std::ops::Range<usize>), SrtpError> {
        let header_len = rtp_header_len(packet).ok_or(SrtpError::NotSrtp)?;
        let seq = u16::from_be_bytes([packet[2], packet[3]]);
        let ssrc = u32::from_be_bytes([packet[8], packet[9], packet[10], packet[11]]);
        let (slot, window) = self.streams.window(ssrc)?;
        let roc = window.estimate(seq).ok_or(SrtpError::TooOld)?;
        window.check(roc, seq)?;
        let payload = self.srtp.unprotect_rtp(packet, header_len, ssrc, seq, roc)?;
        self.streams.accept(slot, ssrc, roc, seq);
        Ok((header_len, payload))
    }
}

/// Largest SRTCP index (31 bits; RFC 3711 §3.4).
const MAX_SRTCP_INDEX: u32 = 0x7FFF_FFFF;

/// The E flag of the word after an SRTCP payload: the payload is encrypted.
const SRTCP_E_FLAG: u32 = 1 << 31;

/// Bytes of RTCP left in the clear at the front of an SRTCP packet: the
/// header and the sender's SSRC (RFC 3711 §3.4).
const SRTCP_CLEAR: usize = 8;

/// The SRTCP index split the way [`gcm_iv`], [`cm_keystream`] and
/// [`ReplayWindow`] take SRTP's packet index: with the same 16-bit shift,
/// each lays the 31-bit index where RFC 7714 §9.1 and RFC 3711 §4.1.1
/// put it for SRTCP.
fn split_index(index: u32) -> (u32, u16) {
    (index >> 16, index as u16)
}

/// An encrypted SRTCP packet's AES-GCM AAD (RFC 7714 §9.1, §17): its clear
/// first 8 bytes, then E|index.
fn srtcp_aad(packet: &[u8], word: [u8; 4]) -> [u8; SRTCP_CLEAR + 4] {
    let mut aad = [0u8; SRTCP_CLEAR + 4];
    aad[..SRTCP_CLEAR].copy_from_slice(&packet[..SRTCP_CLEAR]);
    aad[SRTCP_CLEAR..].copy_from_slice(&word);
    aad
}

/// Send side of SRTCP for one session: session keys (labels 3, 4, 5) and
/// our SRTCP index. One counter whatever SSRC a packet carries: no (SSRC,
/// index) pair, so no IV, ever repeats, and a receiver's per-SSRC replay
/// window takes the gaps as packets lost.
pub struct SrtcpContext {
    profile: SrtpProfile,
    cipher: Cipher,
    next_index: u32,
}

impl std::fmt::Debug for SrtcpContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SrtcpContext")
            .field("profile", &self.profile)
            .field("next_index", &self.next_index)
            .finish_non_exhaustive()
    }
}

impl SrtcpContext {
    /// `first_index`: the SRTCP index of the first packet (31 bits); a sender
    /// that takes over from another one's SRTCP stream starts above what that one used.
    pub fn new(keys: &SrtpKeys, first_index: u32) -> Result<Self, SrtpError> {
        if first_index > MAX_SRTCP_INDEX {
            return Err(SrtpError::SrtcpIndex);
        }
        Ok(Self { profile: keys.profile, cipher: Cipher::new(keys, true)?, next_index: first_index })
    }

    /// The profile.
    pub fn profile(&self) -> SrtpProfile {
        self.profile
    }

    /// Bytes [`SrtcpContext::protect_rtcp`] appends (E|index and the tag):
    /// reserve them and nothing is allocated.
    pub fn overhead(&self) -> usize {
        4 + self.cipher.tag_len()
    }

    /// The index the next packet gets.
    pub fn next_index(&self) -> u32 {
        self.next_index
    }

    /// Protects one RTCP compound packet in place: encrypts it after its
    /// first 8 bytes, appends E-flag|index and the tag (GCM: RFC 7714 §9,
    /// the tag then E|index, as webrtc-rs and libsrtp lay it out;
    /// CM: RFC 3711 §3.4, E|index then the 80-bit HMAC-SHA1 tag).
    /// Err when the packet is shorter than 8 bytes or the index would pass 2^31-1.
    pub fn protect_rtcp(&mut self, packet: &mut BytesMut) -> Result<(), SrtpError> {
        if packet.len() < SRTCP_CLEAR {
            return Err(SrtpError::ShortPacket { header: SRTCP_CLEAR, len: packet.len() });
        }
        let index = self.next_index;
        if index > MAX_SRTCP_INDEX {
            return Err(SrtpError::SrtcpIndex);
        }
        let ssrc = u32::from_be_bytes([packet[4], packet[5], packet[6], packet[7]]);
        let (high, low) = split_index(index);
        // We always encrypt: E is set.
        let word = (index | SRTCP_E_FLAG).to_be_bytes();
        match &self.cipher {
            Cipher::Gcm { key, salt } => {
                let aad = srtcp_aad(packet, word);
                let nonce = ring::aead::Nonce::assume_unique_for_key(gcm_iv(salt, ssrc, high, low));
                let tag = key
                    .seal_in_place_separate_tag(nonce, ring::aead::Aad::from(aad), &mut packet[SRTCP_CLEAR..])
                    .map_err(|_| SrtpError::Seal)?;
                packet.extend_from_slice(tag.as_ref());
                packet.extend_from_slice(&word);
            }
            Cipher::Cm { aes, auth, salt, tag_len } => {
                cm_keystream(aes, salt, ssrc, high, low).apply_keystream(&mut packet[SRTCP_CLEAR..]);
                packet.extend_from_slice(&word);
                // RFC 3711 §4.2: the tag covers the packet up to and with E|index.
                let mut mac = HmacSha1::clone(auth);
                mac.update(packet);
                packet.extend_from_slice(&mac.finalize().into_bytes()[..*tag_len]);
            }
        }
        // Moves only once the packet is out: a failed seal burns no index.
        self.next_index = index + 1;
        Ok(())
    }
}

/// Receive side of SRTCP: session keys and, per sender SSRC (bytes 4..8),
/// a replay window over the SRTCP index ([`RECEIVE_STREAMS`] SSRCs, fixed
/// size like [`SrtpReceiver`]; no allocation per packet).
pub struct SrtcpReceiver {
    profile: SrtpProfile,
    cipher: Cipher,
    streams: Streams,
}

impl std::fmt::Debug for SrtcpReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SrtcpReceiver")
            .field("profile", &self.profile)
            .field("streams", &&self.streams.slots[..self.streams.used])
            .finish_non_exhaustive()
    }
}

impl SrtcpReceiver {
    /// Derives the SRTCP session keys from the remote side's master key and salt.
    pub fn new(keys: &SrtpKeys) -> Result<Self, SrtpError> {
        Ok(Self { profile: keys.profile, cipher: Cipher::new(keys, true)?, streams: Streams::new() })
    }

    /// The profile.
    pub fn profile(&self) -> SrtpProfile {
        self.profile
    }

    /// The highest SRTCP index accepted from `ssrc`, if any.
    pub fn highest_index(&self, ssrc: u32) -> Option<u32> {
        self.streams.get(ssrc)?.highest().map(|(high, low)| (high << 16) | u32::from(low))
    }

    /// Opens one SRTCP packet in place: checks the tag (constant time),
    /// refuses replays, decrypts (when E is set). Returns the length of the
    /// plain RTCP compound packet at the start of `packet`. The replay state
    /// moves only after the tag verified. Never panics on any input.
    pub fn unprotect_rtcp(&mut self, packet: &mut [u8]) -> Result<usize, SrtpError> {
        let tag_len = self.cipher.tag_len();
        if packet.len() < SRTCP_CLEAR + 4 + tag_len || packet[0] >> 6 != 2 {
            return Err(SrtpError::NotSrtp);
        }
        // Where E|index sits: last (GCM), or before the tag (CM); the RTCP ends
        // before both.
        let (word_at, end) = match self.cipher {
            Cipher::Gcm { .. } => (packet.len() - 4, packet.len() - 4 - tag_len),
            Cipher::Cm { .. } => (packet.len() - tag_len - 4, packet.len() - tag_len - 4),
        };
        let word: [u8; 4] = [packet[word_at], packet[word_at + 1], packet[word_at + 2], packet[word_at + 3]];
        let encrypted = u32::from_be_bytes(word) & SRTCP_E_FLAG != 0;
        let index = u32::from_be_bytes(word) & MAX_SRTCP_INDEX;
        let (high, low) = split_index(index);
        let ssrc = u32::from_be_bytes([packet[4], packet[5], packet[6], packet[7]]);
        let (slot, window) = self.streams.window(ssrc)?;
        window.check(high, low)?;
        match &self.cipher {
            Cipher::Gcm { key, salt } => {
                let nonce = ring::aead::Nonce::assume_unique_for_key(gcm_iv(salt, ssrc, high, low));
                if encrypted {
                    let aad = srtcp_aad(packet, word);
                    key.open_in_place(nonce, ring::aead::Aad::from(aad), &mut packet[SRTCP_CLEAR..word_at])
                        .map_err(|_| SrtpError::Auth)?;
                } else {
                    // RFC 7714 §9.2: all of the RTCP, then E|index, is AAD; the
                    // tag seals nothing. Move E|index up against the RTCP (over
                    // the tag, kept aside) so the AAD is one slice.
                    let mut tag = [0u8; 16];
                    let tag = &mut tag[..tag_len];
                    tag.copy_from_slice(&packet[end..word_at]);
                    packet.copy_within(word_at.., end);
                    key.open_in_place(nonce, ring::aead::Aad::from(&packet[..end + 4]), tag)
                        .map_err(|_| SrtpError::Auth)?;
                }
            }
            Cipher::Cm { aes, auth, salt, .. } => {
                let (authenticated, tag) = packet.split_at_mut(word_at + 4);
                let mut mac = HmacSha1::clone(auth);
                mac.update(authenticated);
                mac.verify_truncated_left(tag).map_err(|_| SrtpError::Auth)?;
                if encrypted {
                    cm_keystream(aes, salt, ssrc, high, low).apply_keystream(&mut authenticated[SRTCP_CLEAR..end]);
                }
            }
        }
        self.streams.accept(slot, ssrc, high, low);
        Ok(end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtc::shared::marshal::Marshal;

    /// webrtc-rs's own SRTP context for the same keys (the reference: it
    /// interoperates with pion and browsers).
    fn reference(keys: &SrtpKeys) -> rtc::srtp::context::Context {
        reference_with(keys, None)
    }

    /// As [`reference`], with SRTCP's replay protection as given (webrtc-rs's
    /// default: none).
    fn reference_with(keys: &SrtpKeys, srtcp: Option<rtc::srtp::option::ContextOption>) -> rtc::srtp::context::Context {
        use rtc::srtp::protection_profile::ProtectionProfile as P;
        let profile = match keys.profile {
            SrtpProfile::AeadAes128Gcm => P::AeadAes128Gcm,
            SrtpProfile::AeadAes256Gcm => P::AeadAes256Gcm,
            SrtpProfile::Aes128CmHmacSha1_80 => P::Aes128CmHmacSha1_80,
            SrtpProfile::Aes128CmHmacSha1_32 => P::Aes128CmHmacSha1_32,
        };
        let provider = rtc::crypto::default_provider().expect("ring is built in");
        rtc::srtp::context::Context::new(&keys.master_key, &keys.master_salt, profile, None, srtcp, provider.crypto())
            .expect("valid keys")
    }

    fn keys(profile: SrtpProfile, seed: u8) -> SrtpKeys {
        SrtpKeys {
            profile,
            master_key: (0..profile.master_key_len()).map(|i| seed.wrapping_mul(31).wrapping_add(i as u8)).collect(),
            master_salt: (0..profile.master_salt_len()).map(|i| seed ^ (i as u8 * 7)).collect(),
        }
    }

    fn rtp(seq: u16, csrc: Vec<u32>, ext: bool, payload_len: usize) -> Vec<u8> {
        let mut header = rtc::rtp::Header {
            version: 2,
            payload_type: 111,
            sequence_number: seq,
            timestamp: 0x1234_5678,
            ssrc: 0xDEAD_BEEF,
            csrc,
            ..Default::default()
        };
        if ext {
            header.set_extension(1, bytes::Bytes::from_static(&[0x25])).expect("valid extension");
        }
        let payload: Vec<u8> = (0..payload_len).map(|i| i as u8).collect();
        rtc::rtp::Packet { header, payload: payload.into() }.marshal().expect("marshals").to_vec()
    }

    fn header_len_of(packet: &[u8]) -> usize {
        let ours = rtp_header_len(packet).expect("an RTP header");
        assert_eq!(ours, header_len(packet), "ours agrees with webrtc-rs");
        ours
    }

    fn header_len(packet: &[u8]) -> usize {
        use rtc::shared::marshal::{MarshalSize, Unmarshal};
        let mut b = packet;
        rtc::rtp::Header::unmarshal(&mut b).expect("valid header").marshal_size()
    }

    #[test]
    fn protection_is_byte_for_byte_webrtc_rs_across_a_rollover() {
        for profile in SrtpProfile::ALL {
            let k = keys(profile, 3);
            let ours = SrtpContext::new(&k).expect("valid keys");
            let mut theirs = reference(&k);
            // Sequence numbers run across 65535 → 0: the ROC turns 1.
            let mut roc = 0u32;
            for (n, seq) in (65_530u16..=65_535).chain(0..6).enumerate() {
                if seq == 0 {
                    roc += 1;
                }
                let plain = rtp(seq, if n % 2 == 0 { vec![1, 2] } else { vec![] }, n % 3 != 0, 60 + n * 7);
                let expected = theirs.encrypt_rtp(&plain).expect("reference encrypts");
                let mut buf = BytesMut::with_capacity(plain.len() + ours.tag_len());
                buf.extend_from_slice(&plain);
                let cap = buf.capacity();
                ours.protect_rtp(&mut buf, header_len(&plain), 0xDEAD_BEEF, seq, roc).expect("protects");
                assert_eq!(&buf[..], &expected[..], "{profile:?} seq {seq}");
                assert_eq!(buf.capacity(), cap, "no reallocation");
            }
        }
    }

    #[test]
    fn the_reference_receiver_opens_what_we_protect() {
        for profile in SrtpProfile::ALL {
            let k = keys(profile, 9);
            let ours = SrtpContext::new(&k).expect("valid keys");
            let mut receiver = reference(&k);
            let plain = rtp(7, vec![], true, 80);
            let mut buf = BytesMut::from(&plain[..]);
            ours.protect_rtp(&mut buf, header_len(&plain), 0xDEAD_BEEF, 7, 0).expect("protects");
            assert_ne!(&buf[..plain.len()], &plain[..], "the payload is encrypted");
            assert_eq!(&receiver.decrypt_rtp(&buf).expect("authentic")[..], &plain[..]);
            // A flipped payload bit fails authentication.
            let mut bad = buf.clone();
            let last = header_len(&plain) + 3;
            bad[last] ^= 1;
            assert!(reference(&k).decrypt_rtp(&bad).is_err(), "{profile:?} authenticates");
        }
    }

    /// `n` packets from sequence number `first` on, protected by webrtc-rs's
    /// sender (which keeps its own rollover counter): (plain, protected).
    fn reference_stream(k: &SrtpKeys, first: u16, n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut theirs = reference(k);
        (0..n)
            .map(|i| {
                let seq = first.wrapping_add(i as u16);
                let plain = rtp(seq, if i % 2 == 0 { vec![7, 8, 9] } else { vec![] }, i % 3 != 0, 40 + i * 5);
                let protected = theirs.encrypt_rtp(&plain).expect("reference encrypts").to_vec();
                (plain, protected)
            })
            .collect()
    }

    #[test]
    fn our_receiver_opens_what_webrtc_rs_protects_across_a_wrap_and_reordered() {
        for profile in SrtpProfile::ALL {
            let k = keys(profile, 5);
            let stream = reference_stream(&k, 65_520, 32); // 65520..=65535, then 0..=15 (ROC 1)
            // Delivery order: around the wrap pairs swap (0 before 65535, 1
            // before 65534, ...), one packet arrives 20 late, the rest in order.
            let mut order: Vec<usize> = (0..32).collect();
            for d in 0..4 {
                order.swap(15 - d, 16 + d);
            }
            let late = order.remove(3);
            order.insert(23, late);
            let mut rx = SrtpReceiver::new(&k).expect("valid keys");
            for &i in &order {
                let (plain, protected) = &stream[i];
                let mut buf = protected.clone();
                let (header_len, payload) = rx.unprotect(&mut buf).unwrap_or_else(|e| panic!("{profile:?} #{i}: {e}"));
                assert_eq!(header_len, header_len_of(plain), "{profile:?} #{i}");
                assert_eq!(&buf[..payload.end], &plain[..], "{profile:?} #{i}: header and payload");
                assert_eq!(payload.end, protected.len() - profile.tag_len());
            }
            assert_eq!(rx.window(0xDEAD_BEEF).and_then(ReplayWindow::highest), Some((1, 15)), "{profile:?}");
            // Every one of them again: replays, all refused.
            for (_, protected) in &stream {
                let mut buf = protected.clone();
                assert_eq!(rx.unprotect(&mut buf), Err(SrtpError::Replay), "{profile:?}");
            }
        }
    }

    #[test]
    fn replays_tampering_and_old_packets_are_refused_and_move_nothing() {
        for profile in SrtpProfile::ALL {
            let k = keys(profile, 11);
            let stream = reference_stream(&k, 100, 80);
            let mut rx = SrtpReceiver::new(&k).expect("valid keys");
            let open = |rx: &mut SrtpReceiver, i: usize| rx.unprotect(&mut stream[i].1.clone()).map(|_| ());
            assert_eq!(open(&mut rx, 70), Ok(()));
            let before = *rx.window(0xDEAD_BEEF).expect("a stream");
            // A tampered tag, header byte (the timestamp) or payload byte, on
            // a packet ahead of the window: refused, and the window stays.
            let (_, good) = &stream[75];
            for at in [good.len() - 1, 5, header_len_of(&stream[75].0) + 1] {
                let mut bad = good.clone();
                bad[at] ^= 0x40;
                assert_eq!(rx.unprotect(&mut bad), Err(SrtpError::Auth), "{profile:?} byte {at}");
                assert_eq!(rx.window(0xDEAD_BEEF), Some(&before), "{profile:?}: nothing moved");
            }
            // A forged packet from another SSRC takes no slot.
            let mut other = good.clone();
            other[8] ^= 1;
            assert_eq!(rx.unprotect(&mut other), Err(SrtpError::Auth));
            assert!(rx.window(0xDEAD_BEEF ^ 0x0100_0000).is_none());
            // The genuine one still opens (its index was not burnt), once.
            assert_eq!(open(&mut rx, 75), Ok(()));
            assert_eq!(open(&mut rx, 75), Err(SrtpError::Replay));
            // Within the window behind: new ones open, old beyond it do not.
            assert_eq!(open(&mut rx, 20), Ok(()), "55 behind");
            assert_eq!(open(&mut rx, 5), Err(SrtpError::TooOld), "70 behind");
            assert_eq!(open(&mut rx, 20), Err(SrtpError::Replay));
            // Not SRTP at all, or a header that runs past the datagram.
            assert_eq!(rx.unprotect(&mut [0x80, 111, 0, 1]), Err(SrtpError::NotSrtp));
            let mut truncated = good[..14].to_vec();
            assert!(rx.unprotect(&mut truncated).is_err());
        }
    }

    #[test]
    fn the_rollover_counter_is_guessed_both_ways_across_a_wrap() {
        let mut w = ReplayWindow::new();
        assert_eq!(w.estimate(65_000), Some(0), "the first packet: ROC 0");
        w.accept(0, 65_530);
        assert_eq!(w.estimate(3), Some(1), "forward across the wrap");
        assert_eq!(w.estimate(65_500), Some(0));
        w.accept(1, 3);
        assert_eq!(w.estimate(65_534), Some(0), "back across the wrap, reordered");
        assert_eq!(w.check(0, 65_530), Err(SrtpError::Replay));
        assert_eq!(w.check(0, 65_531), Ok(()));
        w.accept(1, 20_000);
        assert_eq!(w.check(0, 65_531), Err(SrtpError::TooOld));
        let mut early = ReplayWindow::new();
        early.accept(0, 10);
        assert_eq!(early.estimate(60_000), None, "before ROC 0: no such packet");
        // A window far along: a jump past its size clears it.
        let mut far = ReplayWindow::new();
        far.accept(u32::MAX, 65_535);
        assert_eq!(far.estimate(0), None, "the ROC would overflow");
        assert_eq!(far.highest(), Some((u32::MAX, 65_535)));
    }

    #[test]
    fn keys_are_cut_from_keying_material_by_dtls_role() {
        let p = SrtpProfile::Aes128CmHmacSha1_80;
        let material: Vec<u8> = (0..60).collect();
        let (local, remote) = SrtpKeys::from_keying_material(p, &material, true).expect("60 bytes");
        assert_eq!(local.master_key, (0..16).collect::<Vec<u8>>());
        assert_eq!(remote.master_key, (16..32).collect::<Vec<u8>>());
        assert_eq!(local.master_salt, (32..46).collect::<Vec<u8>>());
        assert_eq!(remote.master_salt, (46..60).collect::<Vec<u8>>());
        let (server_local, _) = SrtpKeys::from_keying_material(p, &material, false).expect("60 bytes");
        assert_eq!(server_local, remote);
        assert!(matches!(
            SrtpKeys::from_keying_material(p, &material[..59], true),
            Err(SrtpError::KeyLength { expected: 60, got: 59, .. })
        ));
    }

    /// A real RTCP compound packet (RFC 3550 §6.1): a sender report with a
    /// reception block, then a receiver report, from SSRC 0x1111_2222; `n`
    /// varies its counters (and with `rr_blocks`, its length).
    fn rtcp(n: u32, rr_blocks: usize) -> Vec<u8> {
        use rtc::rtcp::{
            packet::Packet, receiver_report::ReceiverReport, reception_report::ReceptionReport,
            sender_report::SenderReport,
        };
        let block = |ssrc: u32| ReceptionReport {
            ssrc,
            fraction_lost: 3,
            total_lost: n,
            last_sequence_number: 0x1_0000 + n,
            jitter: 40 + n,
            last_sender_report: 0x1234_5678,
            delay: 655,
        };
        let sr = SenderReport {
            ssrc: 0x1111_2222,
            ntp_time: 0xE000_0000_0000_0000 + u64::from(n),
            rtp_time: 48_000 * n,
            packet_count: 50 * n,
            octet_count: 4_000 * n,
            reports: vec![block(0xDEAD_BEEF)],
            ..Default::default()
        };
        let rr = ReceiverReport {
            ssrc: 0x1111_2222,
            reports: (0..rr_blocks as u32).map(block).collect(),
            ..Default::default()
        };
        let packets: [Box<dyn Packet>; 2] = [Box::new(sr), Box::new(rr)];
        rtc::rtcp::packet::marshal(&packets).expect("marshals").to_vec()
    }

    fn protect_rtcp(ctx: &mut SrtcpContext, plain: &[u8]) -> Vec<u8> {
        let mut buf = BytesMut::with_capacity(plain.len() + ctx.overhead());
        buf.extend_from_slice(plain);
        let cap = buf.capacity();
        ctx.protect_rtcp(&mut buf).expect("protects");
        assert_eq!(buf.capacity(), cap, "no reallocation");
        buf.to_vec()
    }

    #[test]
    fn srtcp_protection_is_byte_for_byte_webrtc_rs_and_it_opens_ours() {
        for profile in SrtpProfile::ALL {
            let k = keys(profile, 21);
            // webrtc-rs's sender gives its first packet index 1.
            let mut ours = SrtcpContext::new(&k, 1).expect("valid keys");
            let (mut theirs, mut their_rx) = (reference(&k), reference(&k));
            for n in 1..=5 {
                let plain = rtcp(n, n as usize % 3);
                let protected = protect_rtcp(&mut ours, &plain);
                assert_eq!(ours.next_index(), n + 1, "{profile:?}");
                assert_eq!(protected.len(), plain.len() + ours.overhead());
                assert_ne!(&protected[8..plain.len()], &plain[8..], "{profile:?}: encrypted");
                assert_eq!(&protected[..], &theirs.encrypt_rtcp(&plain).expect("encrypts")[..], "{profile:?} #{n}");
                assert_eq!(&their_rx.decrypt_rtcp(&protected).expect("authentic")[..], &plain[..], "{profile:?} #{n}");
            }
        }
    }

    #[test]
    fn our_srtcp_receiver_opens_what_webrtc_rs_protects() {
        for profile in SrtpProfile::ALL {
            let k = keys(profile, 22);
            let mut theirs = reference(&k);
            let mut rx = SrtcpReceiver::new(&k).expect("valid keys");
            for n in 1..=5 {
                let plain = rtcp(n, 2);
                let mut buf = theirs.encrypt_rtcp(&plain).expect("encrypts").to_vec();
                let len = rx.unprotect_rtcp(&mut buf).unwrap_or_else(|e| panic!("{profile:?} #{n}: {e}"));
                assert_eq!(&buf[..len], &plain[..], "{profile:?} #{n}");
                assert_eq!(rx.highest_index(0x1111_2222), Some(n));
            }
        }
    }

    #[test]
    fn a_sender_taking_over_starts_above_the_index_used() {
        for profile in SrtpProfile::ALL {
            let k = keys(profile, 23);
            let mut before = reference(&k);
            let mut rx = reference_with(&k, Some(rtc::srtp::option::srtcp_replay_protection(64)));
            let mut our_rx = SrtcpReceiver::new(&k).expect("valid keys");
            for n in 1..=3 {
                let protected = before.encrypt_rtcp(&rtcp(n, 1)).expect("encrypts");
                rx.decrypt_rtcp(&protected).expect("authentic");
                our_rx.unprotect_rtcp(&mut protected.to_vec()).expect("authentic");
            }
            let plain = rtcp(9, 1);
            // Starting within what was used: a replay to both receivers.
            let reused = protect_rtcp(&mut SrtcpContext::new(&k, 2).expect("valid keys"), &plain);
            assert!(rx.decrypt_rtcp(&reused).is_err(), "{profile:?}");
            assert_eq!(our_rx.unprotect_rtcp(&mut reused.clone()), Err(SrtpError::Replay));
            // Starting above: opened.
            let mut ours = SrtcpContext::new(&k, 1000).expect("valid keys");
            for _ in 0..3 {
                let protected = protect_rtcp(&mut ours, &plain);
                assert_eq!(&rx.decrypt_rtcp(&protected).expect("authentic")[..], &plain[..], "{profile:?}");
                let mut buf = protected.clone();
                assert_eq!(our_rx.unprotect_rtcp(&mut buf).map(|len| buf[..len] == plain[..]), Ok(true));
            }
            assert_eq!(ours.next_index(), 1003);
        }
    }

    #[test]
    fn the_srtcp_index_ends_at_2_pow_31() {
        let k = keys(SrtpProfile::Aes128CmHmacSha1_32, 24);
        assert_eq!(SrtcpContext::new(&k, 1 << 31).map(|_| ()), Err(SrtpError::SrtcpIndex));
        let mut ctx = SrtcpContext::new(&k, MAX_SRTCP_INDEX).expect("the last index");
        let protected = protect_rtcp(&mut ctx, &rtcp(1, 0));
        // 80-bit tag with the _32 profile too; E set, the index all ones.
        assert_eq!(ctx.overhead(), 14);
        assert_eq!(protected[protected.len() - 14..protected.len() - 10], [0xFF; 4]);
        let mut rx = SrtcpReceiver::new(&k).expect("valid keys");
        assert!(rx.unprotect_rtcp(&mut protected.clone()).is_ok());
        let mut next = BytesMut::from(&rtcp(2, 0)[..]);
        assert_eq!(ctx.protect_rtcp(&mut next), Err(SrtpError::SrtcpIndex));
        assert_eq!(
            ctx.protect_rtcp(&mut BytesMut::from(&[0x80u8; 7][..])),
            Err(SrtpError::ShortPacket { header: 8, len: 7 })
        );
    }

    #[test]
    fn srtcp_replays_and_tampering_are_refused_and_move_nothing() {
        for profile in SrtpProfile::ALL {
            let k = keys(profile, 25);
            let mut tx = SrtcpContext::new(&k, 7).expect("valid keys");
            let packets: Vec<Vec<u8>> = (0..3).map(|n| protect_rtcp(&mut tx, &rtcp(n, 1))).collect();
            let mut rx = SrtcpReceiver::new(&k).expect("valid keys");
            assert!(rx.unprotect_rtcp(&mut packets[0].clone()).is_ok());
            let good = &packets[1];
            // Every bit of the packet: header, payload, tag, E|index.
            for bit in 0..good.len() * 8 {
                let mut bad = good.clone();
                bad[bit / 8] ^= 1 << (bit % 8);
                assert!(rx.unprotect_rtcp(&mut bad).is_err(), "{profile:?} bit {bit}");
                assert_eq!(rx.highest_index(0x1111_2222), Some(7), "{profile:?} bit {bit}: nothing moved");
            }
            assert_eq!(rx.streams.used, 1, "forged SSRCs take no slot");
            // The genuine one opens once; so does one skipped over, later.
            assert!(rx.unprotect_rtcp(&mut packets[2].clone()).is_ok());
            assert!(rx.unprotect_rtcp(&mut good.clone()).is_ok());
            for p in &packets {
                assert_eq!(rx.unprotect_rtcp(&mut p.clone()), Err(SrtpError::Replay), "{profile:?}");
            }
        }
    }

    /// `plain` sent with E clear (RFC 3711 §3.4, RFC 7714 §9.2: authenticated,
    /// not encrypted), built straight from the RFCs' definitions.
    fn unencrypted(k: &SrtpKeys, plain: &[u8], index: u32) -> Vec<u8> {
        let (mk, ms) = (&k.master_key[..], &k.master_salt[..]);
        let mut out = plain.to_vec();
        let word = index.to_be_bytes();
        if let SrtpProfile::AeadAes128Gcm | SrtpProfile::AeadAes256Gcm = k.profile {
            let mut key = [0u8; 32];
            derive(mk, ms, 3, &mut key[..mk.len()]).expect("derives");
            let mut salt = [0u8; 12];
            derive(mk, ms, 5, &mut salt).expect("derives");
            let alg = if mk.len() == 16 { &ring::aead::AES_128_GCM } else { &ring::aead::AES_256_GCM };
            let key = ring::aead::LessSafeKey::new(ring::aead::UnboundKey::new(alg, &key[..mk.len()]).expect("key"));
            // IV: 00 00 || SSRC || 00 00 || 0 || index, XOR salt.
            let mut iv = [0u8; 12];
            iv[2..6].copy_from_slice(&plain[4..8]);
            iv[8..].copy_from_slice(&word);
            iv.iter_mut().zip(salt).for_each(|(v, s)| *v ^= s);
            let aad = [plain, &word].concat();
            let nonce = ring::aead::Nonce::assume_unique_for_key(iv);
            let tag = key.seal_in_place_separate_tag(nonce, ring::aead::Aad::from(&aad), &mut []).expect("seals");
            out.extend_from_slice(tag.as_ref());
            out.extend_from_slice(&word);
        } else {
            let mut auth = [0u8; 20];
            derive(mk, ms, 4, &mut auth).expect("derives");
            out.extend_from_slice(&word);
            let mut mac = <HmacSha1 as Mac>::new_from_slice(&auth).expect("any length");
            mac.update(&out);
            out.extend_from_slice(&mac.finalize().into_bytes()[..10]);
        }
        out
    }

    #[test]
    fn unencrypted_srtcp_is_authenticated_and_opened() {
        for profile in SrtpProfile::ALL {
            let k = keys(profile, 26);
            let plain = rtcp(4, 2);
            let mut rx = SrtcpReceiver::new(&k).expect("valid keys");
            let mut buf = unencrypted(&k, &plain, 42);
            assert_eq!(rx.unprotect_rtcp(&mut buf).map(|len| buf[..len] == plain[..]), Ok(true), "{profile:?}");
            assert_eq!(rx.unprotect_rtcp(&mut unencrypted(&k, &plain, 42)), Err(SrtpError::Replay));
            let mut bad = unencrypted(&k, &plain, 43);
            bad[20] ^= 1;
            assert_eq!(rx.unprotect_rtcp(&mut bad), Err(SrtpError::Auth), "{profile:?}");
            // A forged one with E clear is not taken on trust (webrtc-rs 0.21.1's
            // CM path returns such a packet without checking its tag).
            let mut forged = unencrypted(&k, &plain, 44);
            let tag_at = forged.len()
                - if matches!(profile, SrtpProfile::AeadAes128Gcm | SrtpProfile::AeadAes256Gcm) { 20 } else { 10 };
            forged[tag_at..tag_at + 4].fill(0);
            forged[9] ^= 1;
            assert_eq!(rx.unprotect_rtcp(&mut forged), Err(SrtpError::Auth), "{profile:?}");
            // Setting E on it does not make it decrypt: the flag is authenticated.
            let mut flagged = unencrypted(&k, &plain, 43);
            let at = if matches!(profile, SrtpProfile::AeadAes128Gcm | SrtpProfile::AeadAes256Gcm) {
                flagged.len() - 4
            } else {
                flagged.len() - 14
            };
            flagged[at] |= 0x80;
            assert_eq!(rx.unprotect_rtcp(&mut flagged), Err(SrtpError::Auth), "{profile:?}");
            assert!(rx.unprotect_rtcp(&mut unencrypted(&k, &plain, 43)).is_ok());
        }
    }

    proptest::proptest! {
        #[test]
        fn srtcp_garbage_and_truncation_are_errors_not_panics(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80),
            cut in 0usize..200,
            p in 0usize..4,
        ) {
            let k = keys(SrtpProfile::ALL[p], 27);
            let mut rx = SrtcpReceiver::new(&k).expect("valid keys");
            proptest::prop_assert!(rx.unprotect_rtcp(&mut bytes.clone()).is_err());
            let mut tx = SrtcpContext::new(&k, 0).expect("valid keys");
            let protected = protect_rtcp(&mut tx, &rtcp(1, 1));
            let mut truncated = protected[..cut.min(protected.len() - 1)].to_vec();
            proptest::prop_assert!(rx.unprotect_rtcp(&mut truncated).is_err());
            let mut short = BytesMut::from(&bytes[..bytes.len().min(7)]);
            proptest::prop_assert!(tx.protect_rtcp(&mut short).is_err());
        }
    }

    #[test]
    fn bad_lengths_are_errors() {
        let mut k = keys(SrtpProfile::AeadAes128Gcm, 1);
        k.master_salt.pop();
        assert!(matches!(SrtpContext::new(&k), Err(SrtpError::KeyLength { what: "master salt", .. })));
        let ctx = SrtpContext::new(&keys(SrtpProfile::AeadAes128Gcm, 1)).expect("valid");
        let mut short = BytesMut::from(&[0x80u8; 8][..]);
        assert!(matches!(ctx.protect_rtp(&mut short, 12, 1, 1, 0), Err(SrtpError::ShortPacket { .. })));
    }
}
