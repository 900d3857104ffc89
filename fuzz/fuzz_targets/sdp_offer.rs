//! SDP offers through the join path's negotiation: `Acceptor::accept`
//! (webrtc-rs's SDP parser and offer/answer, then our codec and extension
//! reading). Whatever the text: an answer or an error, never a panic; an
//! answer is complete and its peer can be adopted by a mux.
#![no_main]

use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use tutti_fuzz::ACCEPTOR;
use tutti_rtc::{Mux, RtcError};

fuzz_target!(|data: &[u8]| {
    let Ok(offer) = std::str::from_utf8(data) else { return };
    let now = Instant::now();
    match ACCEPTOR.accept(offer, now) {
        Ok((peer, answer)) => {
            assert!(answer.contains("a=ice-lite"), "an answer is ICE-lite");
            assert!(answer.contains(peer.ufrag()), "the answer carries the peer's ufrag");
            let mut mux = Mux::with_acceptor(ACCEPTOR.clone());
            let id = peer.id();
            mux.adopt(peer, now);
            assert!(mux.remove(id).is_ok());
        }
        Err(RtcError::BadSdp(_) | RtcError::NoAudio | RtcError::Internal(_)) => {}
        Err(e) => panic!("unexpected error for an offer: {e}"),
    }
});
