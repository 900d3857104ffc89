//! Inputs the fuzz targets (`fuzz/`) found, each kept as a test.

use std::time::{Duration, Instant};

use tutti_rtc::{Acceptor, RtcError};

fn acceptor() -> Acceptor {
    Acceptor::new("127.0.0.1:4000".parse().expect("addr"), Duration::from_secs(10)).expect("acceptor")
}

/// `sdp_offer`, crash-77595ff7: an offer cut off in its Opus fmtp line.
/// webrtc-rs dropped the audio section and answered with none, which the
/// join path took as a success (a participant who could never connect).
#[test]
fn an_offer_whose_audio_section_is_dropped_is_refused() {
    const OFFER: &str = "v=0\r\no=- 421577524044924 771795094 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\na=fingerprint:sha-256 20:D5:1A:11:61:0A:52:50:42:5F:D6:F7:53:D6:70:8F:BC:FC:86:31:B5:F0:DF:79:40:17:99:78:90:C2:5B:53\r\na=extmap-allow-mixed\r\na=group:BUNDLE 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\nc=IN IP4 0.0.0.0\r\na=setup:actpass\r\na=mid:0\r\na=ice-ufrag:LYrxfITPtyxxWyzk\r\na=ice-pwd:tzLrtnaXuEXeOmhBtwuwqKGyaKGJSbDC\r\na=rtcp-mux\r\na=rtcp-rsize\r\na=rtpmap:111 opus/48000/2\r\na=fmtp:111 minptiv=0105";
    assert!(matches!(acceptor().accept(OFFER, Instant::now()), Err(RtcError::NoAudio)));
}

/// Every answer the acceptor gives has an active audio section with its ufrag.
#[test]
fn answers_always_carry_audio_and_the_ufrag() {
    let (_, offer) = tutti_rtc::ClientPeer::new("127.0.0.1:9".parse().expect("addr"), Instant::now()).expect("offer");
    let (peer, answer) = acceptor().accept(&offer, Instant::now()).expect("answer");
    assert!(answer.lines().any(|l| l.starts_with("m=audio ") && !l.starts_with("m=audio 0 ")));
    assert!(answer.contains(&format!("a=ice-ufrag:{}", peer.ufrag())));
}
