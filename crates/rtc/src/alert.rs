//! DTLS 1.2 alerts after the handshake, read and written without webrtc-rs.
//!
//! A retired peer (see the `media` module: its webrtc-rs connection dropped
//! once the call is up, to free the ~80 KiB it holds) still has to hear a
//! client hang up over DTLS (close_notify) and to say goodbye the same way.
//! An audio-only call sends nothing else over DTLS once the handshake is
//! done: no SCTP, no renegotiation (DTLS-SRTP has none). So this reads and
//! writes only alerts, for the one suite family browsers negotiate with our
//! ECDSA certificate, AES-128-GCM (RFC 5288, with the nonce of RFC 5246
//! §6.2.3.3: a 4-byte implicit IV and an 8-byte explicit part in the
//! record). A peer whose suite is another one is not retired.
//!
//! The keys are the handshake's own (the key block, see
//! `ExporterSlot::record_key_block`): an alert is acted on only when it
//! authenticates, so a forged datagram cannot end a call.

use ring::aead::{AES_128_GCM, Aad, LessSafeKey, Nonce, UnboundKey};

/// DTLS record header: type, version, epoch, sequence number, length.
const HEADER_LEN: usize = 13;
const EXPLICIT_NONCE_LEN: usize = 8;
const TAG_LEN: usize = 16;
const CONTENT_ALERT: u8 = 21;
const DTLS_1_2: [u8; 2] = [0xFE, 0xFD];
/// The epoch of the records after the handshake's ChangeCipherSpec.
const EPOCH: u16 = 1;
/// The first sequence number of our own records: well above the few that
/// webrtc-rs's handshake used in this epoch (Finished and its retransmits),
/// so the peer's replay window takes ours as new.
const FIRST_SEQUENCE: u64 = 1 << 20;
const LEVEL_FATAL: u8 = 2;
const CLOSE_NOTIFY: u8 = 0;

/// The suite name webrtc-rs's transport statistics give (`dtls_cipher`)
/// when its records are AES-128-GCM.
pub(crate) fn suite_supported(stats_name: &str) -> bool {
    stats_name.ends_with("_WITH_AES_128_GCM_SHA256")
}

/// One connection's record keys, both directions, and our next sequence number.
pub(crate) struct DtlsAlerts {
    read: LessSafeKey,
    read_iv: [u8; 4],
    write: LessSafeKey,
    write_iv: [u8; 4],
    next_sequence: u64,
}

impl std::fmt::Debug for DtlsAlerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DtlsAlerts").field("next_sequence", &self.next_sequence).finish_non_exhaustive()
    }
}

impl DtlsAlerts {
    /// From the key block (client key, server key, client IV, server IV);
    /// `we_are_client`: our DTLS role.
    pub(crate) fn new(key_block: &[u8; 40], we_are_client: bool) -> Option<Self> {
        let (client_key, rest) = key_block.split_at(16);
        let (server_key, ivs) = rest.split_at(16);
        let (client_iv, server_iv) = ivs.split_at(4);
        let key = |k: &[u8]| UnboundKey::new(&AES_128_GCM, k).ok().map(LessSafeKey::new);
        let iv = |v: &[u8]| <[u8; 4]>::try_from(v).ok();
        let (ours, theirs) = if we_are_client {
            ((client_key, client_iv), (server_key, server_iv))
        } else {
            ((server_key, server_iv), (client_key, client_iv))
        };
        Some(Self {
            read: key(theirs.0)?,
            read_iv: iv(theirs.1)?,
            write: key(ours.0)?,
            write_iv: iv(ours.1)?,
            next_sequence: FIRST_SEQUENCE,
        })
    }

    /// Whether `datagram` carries an authenticated alert that ends the
    /// session: close_notify, or any fatal alert. Anything else (another
    /// epoch, another record type, a record that does not authenticate)
    /// is not. Never panics, allocates once per alert record read.
    pub(crate) fn ends_session(&self, datagram: &[u8]) -> bool {
        let mut rest = datagram;
        while rest.len() >= HEADER_LEN {
            let len = usize::from(u16::from_be_bytes([rest[11], rest[12]]));
            let Some(record) = rest.get(..HEADER_LEN + len) else { return false };
            rest = &rest[HEADER_LEN + len..];
            let epoch = u16::from_be_bytes([record[3], record[4]]);
            if record[0] != CONTENT_ALERT || epoch != EPOCH || len < EXPLICIT_NONCE_LEN + TAG_LEN {
                continue;
            }
            let mut nonce = [0u8; 12];
            nonce[..4].copy_from_slice(&self.read_iv);
            nonce[4..].copy_from_slice(&record[HEADER_LEN..HEADER_LEN + EXPLICIT_NONCE_LEN]);
            let sealed = &record[HEADER_LEN + EXPLICIT_NONCE_LEN..];
            let aad = additional_data(&record[..HEADER_LEN], sealed.len() - TAG_LEN);
            let mut plain = sealed.to_vec();
            let Ok(opened) = self.read.open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(aad), &mut plain)
            else {
                continue;
            };
            if let [level, description] = opened[..]
                && (description == CLOSE_NOTIFY || level == LEVEL_FATAL)
            {
                return true;
            }
        }
        false
    }

    /// Our close_notify: one record, sealed with our key.
    pub(crate) fn close_notify(&mut self) -> Vec<u8> {
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        let mut header = [0u8; HEADER_LEN];
        header[0] = CONTENT_ALERT;
        header[1..3].copy_from_slice(&DTLS_1_2);
        header[3..5].copy_from_slice(&EPOCH.to_be_bytes());
        header[5..11].copy_from_slice(&sequence.to_be_bytes()[2..]);
        let len = EXPLICIT_NONCE_LEN + 2 + TAG_LEN;
        header[11..13].copy_from_slice(&(len as u16).to_be_bytes());
        // The explicit nonce is the record's epoch and sequence number: unique per key.
        let explicit: [u8; 8] = header[3..11].try_into().unwrap_or_default();
        let mut nonce = [0u8; 12];
        nonce[..4].copy_from_slice(&self.write_iv);
        nonce[4..].copy_from_slice(&explicit);
        let mut body = vec![1, CLOSE_NOTIFY];
        let aad = additional_data(&header, body.len());
        // Sealing a 2-byte message with a valid key cannot fail.
        let _ = self.write.seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), &mut body);
        let mut out = Vec::with_capacity(HEADER_LEN + len);
        out.extend_from_slice(&header);
        out.extend_from_slice(&explicit);
        out.extend_from_slice(&body);
        out
    }
}

/// The AEAD's additional data (RFC 5246 §6.2.3.3, DTLS: the 64-bit
/// sequence number is epoch || sequence): epoch and sequence, type,
/// version, and the plaintext's length.
fn additional_data(header: &[u8], plain_len: usize) -> [u8; 13] {
    let mut aad = [0u8; 13];
    aad[..8].copy_from_slice(&header[3..11]);
    aad[8..11].copy_from_slice(&header[..3]);
    aad[11..].copy_from_slice(&(plain_len as u16).to_be_bytes());
    aad
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block() -> [u8; 40] {
        std::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(11))
    }

    #[test]
    fn a_close_notify_is_read_by_the_other_side_only() {
        let mut client = DtlsAlerts::new(&block(), true).expect("keys");
        let mut server = DtlsAlerts::new(&block(), false).expect("keys");
        let from_client = client.close_notify();
        assert!(server.ends_session(&from_client));
        assert!(!client.ends_session(&from_client), "our own key does not open it");
        let from_server = server.close_notify();
        assert!(client.ends_session(&from_server));
        // Behind another record in the same datagram, too.
        let mut two = vec![23, 0xFE, 0xFD, 0, 1, 0, 0, 0, 0, 0, 9, 0, 3, 1, 2, 3];
        two.extend_from_slice(&from_client);
        assert!(server.ends_session(&two));
    }

    #[test]
    fn forged_or_damaged_alerts_end_nothing() {
        let mut client = DtlsAlerts::new(&block(), true).expect("keys");
        let server = DtlsAlerts::new(&block(), false).expect("keys");
        let good = client.close_notify();
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x01;
            assert!(!server.ends_session(&bad), "bit flipped at {i}");
        }
        let other_keys = DtlsAlerts::new(&[7; 40], false).expect("keys");
        assert!(!other_keys.ends_session(&good));
        assert!(!server.ends_session(&good[..good.len() - 1]), "truncated");
        assert!(!server.ends_session(&[]));
        assert!(!server.ends_session(&[21, 0xFE, 0xFD, 0, 1, 0, 0, 0, 0, 0, 1, 0xFF, 0xFF]));
    }

    #[test]
    fn only_aes_128_gcm_suites_are_supported() {
        assert!(suite_supported("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"));
        assert!(suite_supported("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"));
        assert!(!suite_supported("TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA"));
        assert!(!suite_supported("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"));
    }
}
