//! SDES keys (`a=crypto`, RFC 4568) of a SIP call's offer: any text as an
//! `a=crypto` value into `Crypto::parse`, and as the audio section of an
//! `RTP/SAVP` offer into `PlainOffer::parse`. Checks: a parsed line has the
//! suite's key and salt lengths and prints back to a line that parses to
//! the same; no key is in its `Debug`; a parsed `RTP/SAVP` offer has a line,
//! and its answer carries the offer's profile and tag.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tutti_rtc::plain::PlainOffer;
use tutti_rtc::sdes::{Crypto, Sdes};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(c) = Crypto::parse(&text) {
        let keys = c.keys();
        assert_eq!(keys.master_key.len(), c.profile.master_key_len());
        assert_eq!(keys.master_salt.len(), c.profile.master_salt_len());
        assert_eq!(Crypto::parse(&c.to_value()), Ok(c), "prints back");
        let shown = format!("{c:?}");
        assert!(!shown.contains(c.to_value().rsplit(':').next().unwrap_or("-")), "{shown}");
    }
    let sdp = format!("v=0\r\nc=IN IP4 192.0.2.9\r\nt=0 0\r\nm=audio 4000 RTP/SAVP 0\r\na=crypto:{text}\r\n");
    if let Ok(offer) = PlainOffer::parse(&sdp) {
        let remote = offer.crypto.expect("an RTP/SAVP offer parses only with a line");
        let sdes = Sdes { remote, local: remote };
        let answer = offer.answer("192.0.2.1:4002".parse().expect("an address"), 1, Some(&sdes));
        assert!(answer.contains("m=audio 4002 RTP/SAVP 0\r\n"), "{answer}");
        assert!(answer.contains(&format!("a=crypto:{} ", remote.tag)), "{answer}");
    }
});
