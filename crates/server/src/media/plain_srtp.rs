//! SRTP of a plain RTP leg keyed by SDES (a SIP call's `a=crypto`): the
//! contexts the `rtp-in` thread opens the caller's packets with and
//! protects its mix with. The SRTP itself is tutti-rtc's (the one WebRTC's
//! lean path uses), here keyed from the SDP instead of DTLS.
//!
//! ```text
//! caller's SRTP ─► Srtp::open (tag checked, replay window, decrypted in place) ─► RTP as a plain leg's
//! mix as RTP ─► Srtp::protect (rollover counter of our one SSRC) ─► SRTP to the caller
//! ```
//!
//! Per packet: no allocation (the protected copy goes in a buffer kept
//! here). No key is logged: the contexts' `Debug` shows the profile only.

use bytes::BytesMut;
use tutti_rtc::sdes::Sdes;
use tutti_rtc::srtp::{SrtpContext, SrtpError, SrtpReceiver, rtp_header_len};

/// One leg's SRTP, both ways.
#[derive(Debug)]
pub(crate) struct Srtp {
    /// Opens the caller's packets (its key).
    rx: SrtpReceiver,
    /// Protects ours (our key).
    tx: SrtpContext,
    /// The rollover counter of our SSRC's sequence numbers.
    roc: u32,
    /// The sequence number of our last packet, once one was sent.
    last_seq: Option<u16>,
    /// The protected packet being sent.
    out: BytesMut,
}

impl Srtp {
    /// The contexts of a call's keys.
    pub(crate) fn new(keys: &Sdes) -> Result<Self, SrtpError> {
        Ok(Self {
            rx: SrtpReceiver::new(&keys.remote.keys())?,
            tx: SrtpContext::new(&keys.local.keys())?,
            roc: 0,
            last_seq: None,
            out: BytesMut::with_capacity(1500),
        })
    }

    /// Opens the caller's SRTP packet in place; returns the length of the
    /// RTP packet it now is (the tag cut off).
    pub(crate) fn open(&mut self, packet: &mut [u8]) -> Result<usize, SrtpError> {
        self.rx.unprotect(packet).map(|(_, payload)| payload.end)
    }

    /// Protects our RTP packet `packet` (sent in sequence-number order);
    /// returns the SRTP packet to send.
    pub(crate) fn protect(&mut self, packet: &[u8]) -> Result<&[u8], SrtpError> {
        let header = rtp_header_len(packet).ok_or(SrtpError::NotSrtp)?;
        let seq = u16::from_be_bytes([packet[2], packet[3]]);
        let ssrc = u32::from_be_bytes([packet[8], packet[9], packet[10], packet[11]]);
        // Our sequence numbers only go up by one: a smaller one is a wrap.
        if self.last_seq.is_some_and(|last| seq < last) {
            self.roc = self.roc.wrapping_add(1);
        }
        self.last_seq = Some(seq);
        self.out.clear();
        self.out.extend_from_slice(packet);
        self.tx.protect_rtp(&mut self.out, header, ssrc, seq, self.roc)?;
        Ok(&self.out)
    }
}

/// What to send for our RTP packet `packet`: itself on a plain leg, its
/// SRTP on a leg with `srtp`; `None` when it could not be protected.
pub(crate) fn outgoing<'a>(srtp: Option<&'a mut Srtp>, packet: &'a [u8]) -> Option<&'a [u8]> {
    match srtp {
        None => Some(packet),
        Some(s) => s.protect(packet).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tutti_rtc::plain::{parse_rtp, write_rtp};
    use tutti_rtc::sdes::Crypto;

    fn keys(suite: &str) -> Sdes {
        let line = |k: &[u8]| {
            use base64::Engine as _;
            format!("1 {suite} inline:{}", base64::engine::general_purpose::STANDARD.encode(k))
        };
        let n = if suite.contains("256") {
            44
        } else if suite.contains("GCM") {
            28
        } else {
            30
        };
        Sdes {
            remote: Crypto::parse(&line(&vec![1u8; n])).expect("a line"),
            local: Crypto::parse(&line(&vec![2u8; n])).expect("a line"),
        }
    }

    /// Two legs with each other's keys talk, across a sequence-number wrap,
    /// for every suite; a forged or replayed packet is refused.
    #[test]
    fn two_legs_with_crossed_keys_talk_across_a_wrap_and_refuse_forgeries() {
        for suite in ["AES_CM_128_HMAC_SHA1_80", "AES_CM_128_HMAC_SHA1_32", "AEAD_AES_128_GCM", "AEAD_AES_256_GCM"] {
            let ours = keys(suite);
            let theirs = Sdes { remote: ours.local, local: ours.remote };
            let (mut a, mut b) = (Srtp::new(&ours).expect("a"), Srtp::new(&theirs).expect("b"));
            let mut rtp = Vec::new();
            for i in 0..6u16 {
                let seq = 65_533u16.wrapping_add(i);
                write_rtp(&mut rtp, 0, false, seq, 160 * u32::from(i), 0xABCD, &[i as u8; 160]);
                let mut wire = a.protect(&rtp).expect("protected").to_vec();
                assert_ne!(&wire[12..172], &rtp[12..], "{suite}: encrypted");
                let replay = wire.clone();
                let n = b.open(&mut wire).unwrap_or_else(|e| panic!("{suite} seq {seq}: {e}"));
                let opened = parse_rtp(&wire[..n]).expect("RTP");
                assert_eq!((opened.seq, opened.payload), (seq, &[i as u8; 160][..]), "{suite}");
                assert_eq!(b.open(&mut replay.clone()), Err(SrtpError::Replay), "{suite}");
            }
            write_rtp(&mut rtp, 0, false, 3, 0, 0xABCD, &[9; 160]);
            let mut forged = a.protect(&rtp).expect("protected").to_vec();
            forged[20] ^= 1;
            assert_eq!(b.open(&mut forged), Err(SrtpError::Auth), "{suite}");
            assert_eq!(outgoing(None, &rtp), Some(&rtp[..]), "a plain leg sends its RTP as is");
            assert!(outgoing(Some(&mut a), &[1, 2, 3]).is_none(), "not RTP: nothing sent");
        }
    }
}
