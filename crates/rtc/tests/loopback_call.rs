//! A real WebRTC call on loopback between a `ClientPeer` and the `Mux`:
//! ICE (lite on the server), DTLS, SRTP, Opus both ways, RFC 6464 levels
//! read on the server; garbage datagrams on the media port change nothing.

mod common;

use std::collections::HashMap;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tutti_mix::{FRAME_SAMPLES, goertzel, tone};
use tutti_rtc::{ClientEvent, ClientPeer, Contributor, Mux, MuxEvent, Route, RtcError};

fn socket() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind loopback");
    s.set_nonblocking(true).expect("nonblocking");
    s
}

fn opus_encoder() -> opus::Encoder {
    opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Voip).expect("encoder")
}

fn decode_all(packets: &[Bytes]) -> Vec<f32> {
    let mut dec = opus::Decoder::new(48_000, opus::Channels::Mono).expect("decoder");
    let mut out = Vec::new();
    for p in packets {
        let mut pcm = [0.0f32; FRAME_SAMPLES];
        let n = dec.decode_float(p, &mut pcm, false).expect("valid Opus");
        out.extend_from_slice(&pcm[..n]);
    }
    out
}

#[test]
fn a_call_over_loopback_carries_audio_and_levels_both_ways() {
    let (server_sock, client_sock, attacker) = (socket(), socket(), socket());
    let server_addr = server_sock.local_addr().expect("addr");
    let client_addr = client_sock.local_addr().expect("addr");
    let start = Instant::now();

    let mut mux = Mux::new(server_addr).expect("mux");
    let (mut client, offer) = ClientPeer::new(client_addr, start).expect("client");
    assert!(offer.contains("ssrc-audio-level"), "the client offers RFC 6464");
    let (peer, answer) = mux.accept_offer(&offer, start).expect("answer");
    assert!(answer.contains("a=ice-lite"), "the server is ICE-lite");
    assert!(answer.contains("usedtx=1"), "the server asks clients for DTX: {answer}");
    assert!(answer.contains(&format!("{} {} typ host", server_addr.ip(), server_addr.port())));
    client.accept_answer(&answer, start).expect("answer accepted");

    let (mut client_enc, mut server_enc) = (opus_encoder(), opus_encoder());
    let mut sent_levels = HashMap::new();
    let (mut at_server, mut at_client) = (Vec::new(), Vec::new());
    let (mut client_up, mut server_up) = (false, false);
    let mut frames_sent = 0u64;
    let mut next_frame = start;
    let mut garbage_sent = 0;
    let mut buf = vec![0u8; 2048];
    let limit = start + Duration::from_secs(20);

    while Instant::now() < limit && (at_server.len() < 100 || at_client.len() < 100) {
        let now = Instant::now();
        common::pump_server(&mut mux, &server_sock, &mut buf, now);
        client.pump_udp(&client_sock, &mut buf, now).expect("client socket");
        while let Some(event) = mux.poll_event() {
            match event {
                MuxEvent::Connected(id) => {
                    assert_eq!(id, peer);
                    server_up = true;
                }
                MuxEvent::Audio(id, packet) => {
                    assert_eq!(id, peer);
                    at_server.push(packet);
                }
                MuxEvent::Closed(id, why) => panic!("peer {id} closed: {why:?}"),
            }
        }
        while let Some(event) = client.poll_event() {
            match event {
                ClientEvent::Connected => client_up = true,
                ClientEvent::Audio(packet) => at_client.push(packet),
                ClientEvent::Closed => panic!("client closed"),
            }
        }
        // Once both ends are up: one 20 ms frame each way per 20 ms, on an absolute schedule.
        if client_up && server_up && now >= next_frame {
            next_frame += Duration::from_millis(20);
            let at = frames_sent * FRAME_SAMPLES as u64;
            let level = 10 + (frames_sent % 50) as u8;
            let payload = Bytes::from(client_enc.encode_vec_float(&tone(880.0, 0.3, at), 1500).expect("encode"));
            // Keyed by frame number: the stream starts at a random sequence number.
            sent_levels.insert(frames_sent as u16, level);
            client.send_audio(payload, Some(level), now).expect("client sends");
            let payload = Bytes::from(server_enc.encode_vec_float(&tone(440.0, 0.3, at), 1500).expect("encode"));
            let mixed = [Contributor { ssrc: 0xA11CE, level: 30 }, Contributor { ssrc: 0xB0B, level: 40 }];
            mux.send_audio(peer, payload, Some(20), &mixed, now).expect("server sends");
            frames_sent += 1;
            // Mid-call, someone sprays the media port with garbage.
            if frames_sent == 30 {
                for i in 0..200u32 {
                    let junk: Vec<u8> = (0..(20 + i % 180)).map(|j| (i.wrapping_mul(31) ^ (j * 7)) as u8).collect();
                    let _ = attacker.send_to(&junk, server_addr);
                    garbage_sent += 1;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }

    assert!(client_up && server_up, "connected (client {client_up}, server {server_up})");
    assert!(at_server.len() >= 100, "server received {} of {frames_sent}", at_server.len());
    assert!(at_client.len() >= 100, "client received {} of {frames_sent}", at_client.len());
    assert!(mux.stats().unrouted >= garbage_sent, "garbage counted: {:?}", mux.stats());
    // Levels arrive as sent, packet by packet.
    let first_seq = at_server.first().map(|p| p.seq).unwrap_or_default();
    for p in &at_server {
        let frame = p.seq.wrapping_sub(first_seq);
        assert_eq!(p.level, sent_levels.get(&frame).copied(), "level of packet {}", p.seq);
    }
    // Sequence numbers are contiguous: nothing lost on loopback, garbage or not.
    for w in at_server.windows(2) {
        assert_eq!(w[1].seq, w[0].seq.wrapping_add(1));
    }
    // The audio is the audio: each end hears the other's tone.
    let heard = decode_all(&at_server.iter().map(|p| p.payload.clone()).collect::<Vec<_>>());
    assert!(goertzel(&heard[heard.len() / 2..], 880.0) > 0.15, "server hears the client's 880 Hz");
    let heard = decode_all(&at_client.iter().map(|p| p.payload.clone()).collect::<Vec<_>>());
    assert!(goertzel(&heard[heard.len() / 2..], 440.0) > 0.15, "client hears the server's 440 Hz");
    assert_eq!(at_client.last().and_then(|p| p.level), Some(20), "the server's level reaches the client");
    assert!(offer.contains("csrc-audio-level") && answer.contains("csrc-audio-level"), "RFC 6465 negotiated");
    let contributors = at_client.last().map(|p| p.contributors.clone()).unwrap_or_default();
    assert_eq!(
        contributors,
        [Contributor { ssrc: 0xA11CE, level: 30 }, Contributor { ssrc: 0xB0B, level: 40 }],
        "CSRCs with their RFC 6465 levels reach the client"
    );
    assert!(at_server.iter().all(|p| p.contributors.is_empty()), "a client's own stream has no CSRCs");
    // Both ends sent on the lean path (the default), and each decrypted the other.
    assert!(matches!(mux.send_path(peer), Some(tutti_rtc::SendPath::Lean(_))), "{:?}", mux.send_path(peer));
    assert!(matches!(client.send_path(), tutti_rtc::SendPath::Lean(_)));
    assert_eq!(mux.stats().lean_out, frames_sent);

    mux.remove(peer).expect("remove");
    assert!(mux.is_empty());
    let unrouted = mux.stats().unrouted;
    assert_eq!(
        mux.handle_datagram(client_addr, &[0x80; 20], Instant::now()),
        Route::Unrouted,
        "a removed peer's address is forgotten"
    );
    assert_eq!(mux.stats().unrouted, unrouted + 1);
    assert!(matches!(
        mux.send_audio(peer, Bytes::from_static(&[0xF8]), None, &[], Instant::now()),
        Err(RtcError::UnknownPeer(_))
    ));
}

#[test]
fn offers_without_usable_audio_are_refused_clearly() {
    let mut mux = Mux::new("127.0.0.1:9".parse().expect("addr")).expect("mux");
    let now = Instant::now();
    assert!(matches!(mux.accept_offer("hello", now), Err(RtcError::NoAudio)));
    let video_only = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 0.0.0.0\r\na=rtpmap:96 VP8/90000\r\n";
    assert!(matches!(mux.accept_offer(video_only, now), Err(RtcError::NoAudio)));
    let broken = "v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\nthis is not sdp\r\n";
    match mux.accept_offer(broken, now) {
        Err(RtcError::BadSdp(msg)) => assert!(!msg.is_empty()),
        other => panic!("expected BadSdp, got {other:?}"),
    }
    assert!(mux.is_empty(), "nothing is kept from a refused offer");
}
