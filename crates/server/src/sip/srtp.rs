//! A call's SRTP: the trunk's `srtp` mode (`off`, `allow`, `require`)
//! applied to the INVITE's offer before the join. The join then takes what
//! is left: an offer with an `a=crypto` line tutti takes is answered with a
//! fresh key of tutti's own and its RTP is SRTP (tutti-rtc's `sdes`, the
//! `rtp-in` thread's `plain_srtp`).
//!
//! ```text
//! off      RTP/SAVP ─► 488        RTP/AVP + a=crypto ─► the lines dropped: plain RTP
//! allow    as offered (RTP/SAVP without a line tutti takes: 488 from the join)
//! require  no a=crypto line tutti takes ─► 488
//! ```
//!
//! Decided without I/O; the offer's keys are neither logged nor kept here.

use std::borrow::Cow;

use tutti_rtc::plain::{PlainOffer, PlainSdpError};

use crate::config::SrtpMode;

/// The offer to join with under `mode`, or why it is refused (488): a
/// sentence for the answer's `Warning` and the log, naming what to change.
pub(super) fn apply(mode: SrtpMode, sdp: &str) -> Result<Cow<'_, str>, &'static str> {
    let offer = match PlainOffer::parse(sdp) {
        Ok(offer) => offer,
        Err(PlainSdpError::NoCrypto(_)) if mode == SrtpMode::Off => return Err(OFF),
        // The join refuses it with the parser's reason.
        Err(_) => return Ok(Cow::Borrowed(sdp)),
    };
    match mode {
        SrtpMode::Off if offer.savp => Err(OFF),
        SrtpMode::Off if offer.crypto.is_some() => Ok(Cow::Owned(without_crypto(sdp))),
        SrtpMode::Require if offer.crypto.is_none() => Err(REQUIRED),
        _ => Ok(Cow::Borrowed(sdp)),
    }
}

const OFF: &str = "SRTP is off for this trunk: offer RTP/AVP";
const REQUIRED: &str = "this trunk requires SRTP: offer RTP/SAVP with a=crypto AES_CM_128_HMAC_SHA1_80 (or _32, AEAD_AES_128_GCM, AEAD_AES_256_GCM)";

/// `sdp` without its `a=crypto` lines.
fn without_crypto(sdp: &str) -> String {
    let mut out = String::with_capacity(sdp.len());
    for line in sdp.lines().filter(|l| !l.trim_start().starts_with("a=crypto:")) {
        out.push_str(line.trim_end_matches('\r'));
        out.push_str("\r\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz";

    fn offer(profile: &str, crypto: &str) -> String {
        format!("v=0\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\nm=audio 4000 {profile} 0\r\n{crypto}")
    }

    #[test]
    fn each_mode_takes_or_refuses_each_kind_of_offer() {
        let good = format!("a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:{KEY}\r\n");
        let odd = "a=crypto:1 F8_128_HMAC_SHA1_80 inline:x\r\n";
        let (savp, best, plain) = (offer("RTP/SAVP", &good), offer("RTP/AVP", &good), offer("RTP/AVP", ""));
        let (savp_odd, best_odd) = (offer("RTP/SAVP", odd), offer("RTP/AVP", odd));
        use SrtpMode::*;
        let same = |mode, sdp: &str| apply(mode, sdp).map(|s| s == sdp);
        // allow: everything as offered (the join refuses RTP/SAVP without a usable line).
        for sdp in [&savp, &best, &plain, &savp_odd, &best_odd] {
            assert_eq!(same(Allow, sdp), Ok(true), "{sdp}");
        }
        // require: a line tutti takes, with either profile.
        assert_eq!(same(Require, &savp), Ok(true));
        assert_eq!(same(Require, &best), Ok(true));
        for sdp in [&plain, &best_odd] {
            assert_eq!(apply(Require, sdp), Err(REQUIRED), "{sdp}");
        }
        // off: RTP/SAVP refused, RTP/AVP's lines dropped.
        assert_eq!(apply(Off, &savp), Err(OFF));
        assert_eq!(apply(Off, &savp_odd), Err(OFF));
        let dropped = apply(Off, &best).expect("taken");
        assert!(!dropped.contains("a=crypto") && dropped.contains("m=audio 4000 RTP/AVP 0\r\n"), "{dropped}");
        assert_eq!(PlainOffer::parse(&dropped).expect("parses").crypto, None);
        assert_eq!(same(Off, &plain), Ok(true));
        // Not an offer the join takes: left to the join's own refusal.
        assert_eq!(same(Require, "garbage"), Ok(true));
    }
}
