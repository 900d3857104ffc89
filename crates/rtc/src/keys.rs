//! Where the lean send path gets its SRTP master keys.
//!
//! webrtc-rs `rtc` 0.21 derives the SRTP keys inside its DTLS handler and
//! hands them straight to its private SRTP contexts: no public API exports
//! the keying material, the DTLS state or the contexts. What it does expose
//! is the crypto provider (`SettingEngineBuilder::with_crypto_provider`),
//! which every DTLS PRF computation goes through.
//!
//! So each peer gets a [`KeyTap`]: a provider that delegates every operation
//! to the real one, and watches HMAC-SHA256 for the first round of the
//! RFC 5705 exporter, `HMAC(master_secret, "EXTRACTOR-dtls_srtp" || client_random || server_random)`
//! (TLS 1.2 PRF, RFC 5246 §5: A(1) = HMAC(secret, label || seed)). It keeps
//! that key and input, and [`ExporterSlot::keying_material`] recomputes
//! P_SHA256 from them: the same bytes webrtc-rs cut its own SRTP keys from
//! (RFC 5764 §4.2). Nothing per packet goes through the tap: only
//! HMAC-SHA256 keys are wrapped, which DTLS uses for its PRF alone.
//!
//! The same capture gives the DTLS record keys ([`ExporterSlot::record_key_block`]),
//! with which a retired peer reads and writes its alerts (the `alert` module).
//!
//! Each DTLS handshake (a new DTLS session after an ICE restart, in a later
//! `rtc`) captures anew and bumps [`ExporterSlot::generation`]: the lean
//! sender re-keys when it sees a new generation.
//!
//! What would make this tap unnecessary upstream: a public
//! `export_keying_material` on the peer connection's DTLS transport (rtc-dtls's
//! `State::export_keying_material` exists but is reachable only from the
//! private DTLS handler), or the negotiated SRTP master keys in an event.
//! The profile and DTLS role are public already (`get_stats` transport
//! `srtp_cipher`, `dtls_role`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rtc::crypto::{
    ActiveKeyExchange, AeadAlgorithm, AeadCipher, BlockCipherAlgorithm, CbcAlgorithm, CbcCipher, CryptoAlgorithm,
    CryptoError, HashAlgorithm, HmacAlgorithm, KeyExchangeAlgorithm, Mac, PublicKey, RTCCrypto, RTCCryptoProvider,
    RTCRandom, SignatureScheme, SigningKey, StreamCipher, StreamCipherAlgorithm,
};

/// The RFC 5764 exporter label.
const EXTRACTOR_DTLS_SRTP: &[u8] = b"EXTRACTOR-dtls_srtp";

/// What the exporter's first PRF round revealed: the master secret and
/// label || client_random || server_random.
struct Captured {
    secret: Vec<u8>,
    seed: Vec<u8>,
}

/// One peer's captured DTLS exporter input, refreshed by each handshake.
#[derive(Default)]
pub(crate) struct ExporterSlot {
    captured: Mutex<Option<Captured>>,
    generation: AtomicU64,
}

impl ExporterSlot {
    /// How many handshakes have exported SRTP keys so far (0: none yet).
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn capture(&self, secret: &[u8], seed: &[u8]) {
        let mut slot = self.captured.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *slot = Some(Captured { secret: secret.to_vec(), seed: seed.to_vec() });
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The first `len` bytes of the DTLS-SRTP keying material of the last
    /// handshake, with its generation: P_SHA256(master_secret, label || randoms).
    pub(crate) fn keying_material(&self, len: usize) -> Option<(u64, Vec<u8>)> {
        let slot = self.captured.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let c = slot.as_ref()?;
        let mut out = vec![0u8; len];
        p_sha256(&c.secret, &c.seed, &mut out);
        Some((self.generation(), out))
    }

    /// Forgets the captured secret: a retired peer has derived all it needs
    /// from it, and nothing of the handshake should outlive the handshake.
    pub(crate) fn forget(&self) {
        let mut slot = self.captured.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *slot = None;
    }

    /// The DTLS record keys of the last handshake, for a suite with 16-byte
    /// keys, 4-byte implicit IVs and the SHA-256 PRF (AES-128-GCM): the
    /// first 40 bytes of the key block, P_SHA256(master_secret, "key
    /// expansion" || server_random || client_random) (RFC 5246 §6.3), as
    /// client key, server key, client IV, server IV.
    pub(crate) fn record_key_block(&self) -> Option<[u8; 40]> {
        let slot = self.captured.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let c = slot.as_ref()?;
        let randoms = c.seed.strip_prefix(EXTRACTOR_DTLS_SRTP).filter(|r| r.len() == 64)?;
        let (client_random, server_random) = randoms.split_at(32);
        let mut seed = Vec::with_capacity(13 + 64);
        seed.extend_from_slice(b"key expansion");
        seed.extend_from_slice(server_random);
        seed.extend_from_slice(client_random);
        let mut out = [0u8; 40];
        p_sha256(&c.secret, &seed, &mut out);
        Some(out)
    }
}

/// The TLS 1.2 PRF's expansion (RFC 5246 §5) filling `out`:
/// P_SHA256(secret, seed) = HMAC(secret, A(1) || seed) || HMAC(secret, A(2) || seed) || …,
/// A(0) = seed, A(i) = HMAC(secret, A(i-1)). `seed` is label || seed.
fn p_sha256(secret: &[u8], seed: &[u8], out: &mut [u8]) {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    let mut a = ring::hmac::sign(&key, seed);
    for chunk in out.chunks_mut(32) {
        let mut ctx = ring::hmac::Context::with_key(&key);
        ctx.update(a.as_ref());
        ctx.update(seed);
        chunk.copy_from_slice(&ctx.sign().as_ref()[..chunk.len()]);
        a = ring::hmac::sign(&key, a.as_ref());
    }
}

/// A crypto provider that delegates to `inner` and captures the DTLS-SRTP
/// exporter's input into its [`ExporterSlot`].
pub(crate) struct KeyTap {
    crypto: TapCrypto,
}

impl KeyTap {
    /// A tap over `inner` filling `slot`.
    pub(crate) fn new(inner: Arc<dyn RTCCryptoProvider>, slot: Arc<ExporterSlot>) -> Self {
        Self { crypto: TapCrypto { inner, slot } }
    }
}

impl RTCCryptoProvider for KeyTap {
    fn name(&self) -> &'static str {
        self.crypto.inner.name()
    }

    fn crypto(&self) -> &dyn RTCCrypto {
        &self.crypto
    }

    fn random(&self) -> &dyn RTCRandom {
        self.crypto.inner.random()
    }
}

struct TapCrypto {
    inner: Arc<dyn RTCCryptoProvider>,
    slot: Arc<ExporterSlot>,
}

impl RTCCrypto for TapCrypto {
    fn supports(&self, algorithm: CryptoAlgorithm) -> bool {
        self.inner.crypto().supports(algorithm)
    }

    fn hash(&self, algorithm: HashAlgorithm, data: &[u8]) -> Result<Vec<u8>, CryptoError> {
        self.inner.crypto().hash(algorithm, data)
    }

    fn block_encrypt(&self, algorithm: BlockCipherAlgorithm, key: &[u8], block: &mut [u8]) -> Result<(), CryptoError> {
        self.inner.crypto().block_encrypt(algorithm, key, block)
    }

    fn new_hmac(&self, algorithm: HmacAlgorithm, key: &[u8]) -> Result<Box<dyn Mac>, CryptoError> {
        let mac = self.inner.crypto().new_hmac(algorithm, key)?;
        if algorithm == HmacAlgorithm::Sha256 {
            Ok(Box::new(TapMac { inner: mac, key: key.to_vec(), slot: self.slot.clone() }))
        } else {
            Ok(mac)
        }
    }

    fn new_stream_cipher(
        &self,
        algorithm: StreamCipherAlgorithm,
        key: &[u8],
    ) -> Result<Box<dyn StreamCipher>, CryptoError> {
        self.inner.crypto().new_stream_cipher(algorithm, key)
    }

    fn new_aead(&self, algorithm: AeadAlgorithm, key: &[u8]) -> Result<Box<dyn AeadCipher>, CryptoError> {
        self.inner.crypto().new_aead(algorithm, key)
    }

    fn new_cbc(&self, algorithm: CbcAlgorithm, key: &[u8]) -> Result<Box<dyn CbcCipher>, CryptoError> {
        self.inner.crypto().new_cbc(algorithm, key)
    }

    fn start_key_exchange(&self, algorithm: KeyExchangeAlgorithm) -> Result<Box<dyn ActiveKeyExchange>, CryptoError> {
        self.inner.crypto().start_key_exchange(algorithm)
    }

    fn generate_signing_key(&self, scheme: SignatureScheme) -> Result<Arc<dyn SigningKey>, CryptoError> {
        self.inner.crypto().generate_signing_key(scheme)
    }

    fn import_signing_key(
        &self,
        scheme: SignatureScheme,
        pkcs8_der: &[u8],
    ) -> Result<Arc<dyn SigningKey>, CryptoError> {
        self.inner.crypto().import_signing_key(scheme, pkcs8_der)
    }

    fn verify_signature(
        &self,
        scheme: SignatureScheme,
        public_key: PublicKey<'_>,
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), CryptoError> {
        self.inner.crypto().verify_signature(scheme, public_key, message, signature)
    }
}

/// An HMAC-SHA256 that notices the exporter's first PRF round.
struct TapMac {
    inner: Box<dyn Mac>,
    key: Vec<u8>,
    slot: Arc<ExporterSlot>,
}

impl Mac for TapMac {
    fn output_len(&self) -> usize {
        self.inner.output_len()
    }

    fn sign(&mut self, input: &[&[u8]], output: &mut [u8]) -> Result<(), CryptoError> {
        // A(1) = HMAC(secret, A(0)), A(0) = label || seed: one slice. The
        // later rounds pass (A(i), seed) and start with a hash, not the label.
        if let [only] = input
            && only.starts_with(EXTRACTOR_DTLS_SRTP)
        {
            self.slot.capture(&self.key, only);
        }
        self.inner.sign(input, output)
    }

    fn verify(&mut self, input: &[&[u8]], expected: &[u8]) -> Result<(), CryptoError> {
        self.inner.verify(input, expected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The recomputed material equals the PRF run through the tapped
    /// provider, as rtc-dtls runs it (RFC 5246 §5 P_SHA256).
    #[test]
    fn the_recomputed_keying_material_is_the_prf_output() {
        let inner = rtc::crypto::default_provider().expect("ring is built in");
        let slot = Arc::new(ExporterSlot::default());
        let tap = KeyTap::new(inner, slot.clone());
        let secret = [0x42u8; 48];
        let mut seed = EXTRACTOR_DTLS_SRTP.to_vec();
        seed.extend((0..64).map(|i| i as u8));
        assert_eq!(slot.generation(), 0);
        assert!(slot.keying_material(60).is_none(), "nothing before a handshake");
        // P_hash as rtc-dtls computes it, through the tap.
        let hmac = |parts: &[&[u8]]| {
            let mut mac = tap.crypto().new_hmac(HmacAlgorithm::Sha256, &secret).expect("sha256");
            let mut out = [0u8; 32];
            mac.sign(parts, &mut out).expect("signs");
            out
        };
        let mut expected = Vec::new();
        let mut a = seed.clone();
        while expected.len() < 60 {
            a = hmac(&[&a]).to_vec();
            expected.extend_from_slice(&hmac(&[&a, &seed]));
        }
        expected.truncate(60);
        let (generation, material) = slot.keying_material(60).expect("captured");
        assert_eq!(generation, 1);
        assert_eq!(material, expected);
        // A second handshake is a new generation.
        hmac(&[&seed]);
        assert_eq!(slot.generation(), 2);
    }
}
