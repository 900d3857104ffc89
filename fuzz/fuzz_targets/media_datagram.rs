//! Datagrams into the media demux (`Mux::handle_datagram`), and what comes
//! out into a jitter buffer, as an attacker on the network can shape them:
//!
//! - anything, from any of a few addresses (unrouted: a new address is
//!   routed only by a check whose MESSAGE-INTEGRITY verifies, which the
//!   fuzzer cannot sign);
//! - STUN binding requests naming the connected peer's ufrag, with any
//!   attributes after the USERNAME (the mux checks their integrity before
//!   routing, and ICE again);
//! - anything from the connected client's own address (forged SRTP, DTLS
//!   records after the handshake, STUN);
//! - RTP with every field the sender controls (sequence, timestamp,
//!   marker, padding, CSRCs, audio-level extension values, payload) and
//!   RTCP of any bytes, sent through the real client, so that they pass
//!   SRTP and reach webrtc-rs's RTP/RTCP parsing and our audio-level reading;
//! - decrypted bytes straight into webrtc-rs's RTP and RTCP parsers, as
//!   its SRTP layer hands them over, and our audio-level reading after them
//!   (`tutti_rtc::parse_rtp`, `parse_rtcp`): the paths above only reach
//!   them with packets a real sender marshals;
//! - time passing (timers, keepalives, the idle timeout).
//!
//! Every audio packet the mux hands out is pushed into a jitter buffer,
//! popped once per 20 ms of virtual time.
//!
//! The server reads audio on its lean receive path (tutti's own SRTP,
//! `Media::read_lean`, the default), which turns itself off for good after
//! 16 failures before the first authentic packet. So each thread keeps two
//! pairs and the input's first byte picks one: a warm pair, whose client
//! sent one real audio packet after the handshake (the lean path stays on
//! whatever follows: forged SRTP from the client's address is dropped by
//! it, `Rtp` ops are read by it), and a cold one, left to the inputs (its
//! lean path opens or falls back to webrtc-rs as they make it).
#![no_main]

use std::cell::RefCell;
use std::net::SocketAddr;
use std::time::Duration;

use arbitrary::Arbitrary;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tutti_fuzz::{CLIENT, Pair};
use tutti_mix::{JitterBuffer, JitterConfig, Packet};
use tutti_rtc::RawRtp;

#[derive(Arbitrary, Debug)]
enum Op {
    Raw {
        from: u8,
        data: Vec<u8>,
    },
    FromClient(Vec<u8>),
    Stun {
        from: u8,
        class: u8,
        transaction: [u8; 12],
        remote_ufrag: Vec<u8>,
        attrs: Vec<u8>,
    },
    Rtp {
        seq: u16,
        timestamp: u32,
        marker: bool,
        padding: bool,
        csrc: Vec<u32>,
        ext: Vec<(u8, Vec<u8>)>,
        payload: Vec<u8>,
    },
    Rtcp(Vec<u8>),
    ParseRtp(Vec<u8>),
    ParseRtcp(Vec<u8>),
    Wait(u16),
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// The warm pair (lean receive path open) or the cold one.
    warm: bool,
    ops: Vec<Op>,
}

thread_local! {
    static PAIRS: RefCell<[Option<Pair>; 2]> = const { RefCell::new([None, None]) };
    static JITTER: RefCell<Option<JitterBuffer>> = const { RefCell::new(None) };
}

fn address(n: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 1, n % 8], 6000 + u16::from(n % 3)))
}

/// A STUN binding request (or another class) whose USERNAME names `ufrag`.
fn stun(class: u8, transaction: [u8; 12], ufrag: &str, remote: &[u8], attrs: &[u8]) -> Vec<u8> {
    let mut username = ufrag.as_bytes().to_vec();
    username.push(b':');
    username.extend_from_slice(&remote[..remote.len().min(64)]);
    let mut body = Vec::new();
    body.extend_from_slice(&0x0006u16.to_be_bytes());
    body.extend_from_slice(&(username.len() as u16).to_be_bytes());
    body.extend_from_slice(&username);
    while body.len() % 4 != 0 {
        body.push(0);
    }
    body.extend_from_slice(&attrs[..attrs.len().min(512)]);
    let mut m = vec![class & 0x01, 0x01];
    m.extend_from_slice(&(body.len() as u16).to_be_bytes());
    m.extend_from_slice(&[0x21, 0x12, 0xA4, 0x42]);
    m.extend_from_slice(&transaction);
    m.extend_from_slice(&body);
    m
}

fuzz_target!(|input: Input| {
    let Input { warm, ops } = input;
    PAIRS.with_borrow_mut(|pairs| {
        let slot = &mut pairs[usize::from(warm)];
        if slot.as_ref().is_none_or(|p| p.closed) {
            // In memory, with no loss, a handshake always completes.
            let mut pair = Pair::connect().expect("a fresh pair connects");
            if warm {
                assert!(pair.open_lean(), "the server reads a real client's first audio on the lean path");
            }
            *slot = Some(pair);
        }
        let Some(pair) = slot.as_mut() else { return };
        JITTER.with_borrow_mut(|jb| {
            let jb = jb.get_or_insert_with(|| JitterBuffer::new(JitterConfig::default()));
            let ufrag = ufrag_of(pair);
            let mut since_pop = Duration::ZERO;
            for op in ops.into_iter().take(64) {
                let now = pair.now;
                match op {
                    Op::Raw { from, data } => {
                        pair.mux.handle_datagram(address(from), &data, now);
                    }
                    Op::FromClient(data) => {
                        pair.mux.handle_datagram(CLIENT, &data, now);
                    }
                    Op::Stun { from, class, transaction, remote_ufrag, attrs } => {
                        let from = if from % 4 == 0 { CLIENT } else { address(from) };
                        let m = stun(class, transaction, &ufrag, &remote_ufrag, &attrs);
                        pair.mux.handle_datagram(from, &m, now);
                    }
                    Op::Rtp { seq, timestamp, marker, padding, csrc, ext, payload } => {
                        let raw = RawRtp {
                            seq,
                            timestamp,
                            marker,
                            padding,
                            csrc,
                            extensions: ext.into_iter().take(4).map(|(k, v)| (k, Bytes::from(v))).collect(),
                            payload: Bytes::from(payload),
                        };
                        let _ = pair.client.send_raw_rtp(raw, now);
                    }
                    Op::Rtcp(bytes) => {
                        let _ = pair.client.send_raw_rtcp(Bytes::from(bytes), now);
                    }
                    Op::ParseRtp(bytes) => {
                        if let Some(a) = tutti_rtc::parse_rtp(&bytes) {
                            assert!(a.level.is_none_or(|l| l <= 127));
                            assert!(a.contributors.iter().all(|c| c.level <= 127));
                            pair.audio.push(a);
                        }
                    }
                    Op::ParseRtcp(bytes) => {
                        let _ = tutti_rtc::parse_rtcp(&bytes);
                    }
                    Op::Wait(ms) => {
                        let step = Duration::from_millis(u64::from(ms % 2000));
                        pair.now += step;
                        since_pop += step;
                    }
                }
                pair.pump();
                for a in pair.audio.drain(..) {
                    let _ = jb.push(Packet { seq: a.seq, timestamp: a.timestamp, payload: a.payload, level: a.level });
                }
                while since_pop >= Duration::from_millis(20) {
                    since_pop -= Duration::from_millis(20);
                    let _ = jb.pop();
                }
                if pair.closed {
                    break;
                }
            }
            // Bounded: pops never exceed what a buffer may hold.
            assert!(jb.buffered() <= JitterConfig::default().max_frames);
        });
    });
});

/// The server ufrag of the pair's peer (the mux knows it; the fuzzer names it).
fn ufrag_of(pair: &Pair) -> String {
    pair.mux.ufrag_of(pair.peer).map(str::to_owned).unwrap_or_default()
}
