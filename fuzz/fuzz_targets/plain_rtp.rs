//! Plain RTP in (`[rtp_in]`): any text as a plain RTP/AVP offer into
//! `PlainOffer::parse` (and its answer), any bytes as a datagram into
//! `parse_rtp`. Checks: what parses is consistent (a port, a dynamic
//! payload type for Opus, 0 or 8 or a dynamic one for G.711, a payload
//! inside the datagram), and an answer names both.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tutti_rtc::plain::{PlainOffer, RTP_HEADER_BYTES, is_plain_offer, parse_rtp};

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = parse_rtp(data) {
        assert!(!v.payload.is_empty() && v.payload.len() + RTP_HEADER_BYTES <= data.len());
        assert_eq!(v.payload_type, data[1] & 0x7F);
    }
    let text = String::from_utf8_lossy(data);
    let _ = is_plain_offer(&text);
    if let Ok(offer) = PlainOffer::parse(&text) {
        assert!(offer.remote.port() > 0 && offer.codec.fits(offer.payload_type), "{offer:?}");
        assert!(!offer.remote.ip().is_unspecified());
        let answer = offer.answer("192.0.2.1:4002".parse().expect("an address"), 1, None);
        assert!(answer.contains(&format!("m=audio 4002 RTP/AVP {}", offer.payload_type)));
    }
});
