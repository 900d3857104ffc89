//! Inputs the fuzz targets (`fuzz/`) found, each kept as a test.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tutti_rtc::{Acceptor, ClientPeer, Mux, MuxEvent, RawRtp, RtcError};

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

/// A client and a mux connected in memory (no sockets, a virtual clock).
fn connected_pair() -> (ClientPeer, Mux, Instant) {
    let server: SocketAddr = "10.0.0.1:4000".parse().expect("addr");
    let client_addr: SocketAddr = "10.0.0.2:5000".parse().expect("addr");
    let mut now = Instant::now();
    let acceptor = Acceptor::new(server, Duration::from_secs(10)).expect("acceptor");
    let mut mux = Mux::with_acceptor(acceptor);
    let (mut client, offer) = ClientPeer::new(client_addr, now).expect("offer");
    let (_, answer) = mux.accept_offer(&offer, now).expect("answer");
    client.accept_answer(&answer, now).expect("answer applies");
    let mut server_up = false;
    for _ in 0..400 {
        mux.handle_timeout(now);
        client.handle_timeout(now);
        while let Some(t) = client.poll_transmit() {
            mux.handle_datagram(client_addr, &t.data, now);
        }
        while let Some(t) = mux.poll_transmit() {
            client.handle_datagram(server, &t.data, now);
        }
        while let Some(e) = mux.poll_event() {
            server_up |= matches!(e, MuxEvent::Connected(_));
        }
        while client.poll_event().is_some() {}
        if server_up && client.is_connected() {
            return (client, mux, now);
        }
        now += Duration::from_millis(5);
    }
    panic!("the in-memory pair did not connect");
}

/// `media_datagram`, crash-40da12db: an RTP packet with an empty one-byte
/// header extension value. webrtc-rs (rtc-rtp 0.21.1) accepts it in
/// `Header::set_extension`, then panics marshalling it (`len - 1`
/// underflows). Refused before it gets there; values over 16 bytes too.
#[test]
fn empty_or_long_header_extensions_are_refused_before_webrtc_rs_marshals_them() {
    let (mut client, _mux, now) = connected_pair();
    for len in [0usize, 17, 200] {
        let raw = RawRtp { padding: true, extensions: vec![(148, Bytes::from(vec![7u8; len]))], ..RawRtp::default() };
        assert!(matches!(client.send_raw_rtp(raw, now), Err(RtcError::BadPacket(_))), "{len}-byte extension");
    }
    let ok = RawRtp {
        extensions: vec![(0, Bytes::from_static(&[30]))],
        payload: Bytes::from_static(&[1, 2, 3]),
        ..RawRtp::default()
    };
    assert!(client.send_raw_rtp(ok, now).is_ok(), "a 1-byte level still goes out");
}
