//! The lean receive path's SRTP (`tutti_rtc::srtp::SrtpReceiver`), against
//! its own sender (`SrtpContext::protect_rtp`) with a fixed master key and
//! salt per profile (the input's first byte picks one), and a naive model
//! of RFC 3711's receive state kept beside it.
//!
//! The input is a sequence of operations:
//! - any bytes, or a well-formed RTP header for one of a few SSRCs followed
//!   by any bytes, into `SrtpReceiver::unprotect`;
//! - protect a packet (SSRC from a small set — more than the receiver
//!   follows — sequence number, rollover counter chosen by the input or the
//!   stream's next index, CSRCs, header extension, padding bit, payload);
//! - deliver one of the protected packets again (any order, any number of
//!   times), untouched, with bits flipped, cut short or lengthened.
//!
//! Checks: nothing panics; whatever is accepted is byte for byte one of the
//! packets this input protected, decrypts to what was protected, and was
//! not accepted before (no replay) nor older than the 64-packet window; an
//! untouched packet delivered for the first time, within the window and
//! unambiguous for the rollover estimate (within 2¹⁵ of the stream's
//! highest index, or the stream's first packet with ROC 0), is accepted
//! when its SSRC has a slot; the receiver follows at most
//! `RECEIVE_STREAMS` SSRCs and its windows agree with the model.
#![no_main]

use std::collections::{HashMap, HashSet};

use arbitrary::Arbitrary;
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tutti_rtc::SrtpProfile;
use tutti_rtc::srtp::{RECEIVE_STREAMS, ReplayWindow, SrtpContext, SrtpKeys, SrtpReceiver, rtp_header_len};

/// The SSRCs packets are protected for: more than a receiver follows.
const SSRCS: [u32; 6] = [0xDEAD_BEEF, 1, 0, 0xFFFF_FFFF, 0x1234_5678, 42];
/// Protected packets `Deliver` picks from (the most recent).
const MAX_SENT: usize = 64;
/// Operations per input (bounded).
const MAX_OPS: usize = 256;

#[derive(Arbitrary, Debug)]
enum Roc {
    /// The stream's highest rollover counter so far (0 before its first packet), plus this.
    Current(i8),
    /// Any.
    Any(u32),
}

#[derive(Arbitrary, Debug)]
enum Tamper {
    None,
    Flip { at: u16, mask: u8 },
    Cut(u8),
    Append(u8),
}

#[derive(Arbitrary, Debug)]
enum Op {
    /// Any bytes.
    Raw(Vec<u8>),
    /// An RTP header for a known SSRC, then any bytes (a forged tag).
    Forge { ssrc: u8, seq: u16, cc: u8, body: Vec<u8> },
    /// Protect a packet with a chosen sequence number and rollover counter.
    Protect { ssrc: u8, seq: u16, roc: Roc, shape: Shape },
    /// Protect the packet `step` indices after the stream's highest accepted one
    /// (crossing sequence number 65535 → 0 moves the rollover counter).
    Next { ssrc: u8, step: u8, shape: Shape },
    /// Deliver the `back`-th most recently protected packet.
    Deliver { back: u8, tamper: Tamper },
}

#[derive(Arbitrary, Debug)]
struct Shape {
    marker: bool,
    padding: bool,
    timestamp: u32,
    csrc: Vec<u32>,
    ext: Option<(u16, Vec<u8>)>,
    payload: Vec<u8>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    profile: u8,
    ops: Vec<Op>,
}

/// A packet this input protected.
struct Sent {
    ssrc: u32,
    index: u64,
    header_len: usize,
    plain: Vec<u8>,
    wire: Vec<u8>,
}

/// What RFC 3711 says the receiver holds, kept naively: per SSRC (in the
/// order they took a slot) the highest index and every index accepted.
#[derive(Default)]
struct Model {
    streams: Vec<(u32, u64, HashSet<u64>)>,
}

impl Model {
    fn stream(&self, ssrc: u32) -> Option<&(u32, u64, HashSet<u64>)> {
        self.streams.iter().find(|s| s.0 == ssrc)
    }

    /// Whether a first delivery of the untouched packet (`ssrc`, `index`) must be accepted.
    fn must_accept(&self, ssrc: u32, index: u64) -> bool {
        match self.stream(ssrc) {
            None => self.streams.len() < RECEIVE_STREAMS && index >> 16 == 0,
            Some((_, highest, seen)) => {
                !seen.contains(&index) && index.abs_diff(*highest) < 0x8000 && highest.saturating_sub(index) < 64
            }
        }
    }

    /// Whether accepting (`ssrc`, `index`) is allowed at all.
    fn may_accept(&self, ssrc: u32, index: u64) -> bool {
        match self.stream(ssrc) {
            None => self.streams.len() < RECEIVE_STREAMS,
            Some((_, highest, seen)) => !seen.contains(&index) && highest.saturating_sub(index) < 64,
        }
    }

    fn accept(&mut self, ssrc: u32, index: u64) {
        match self.streams.iter_mut().find(|s| s.0 == ssrc) {
            Some((_, highest, seen)) => {
                *highest = (*highest).max(index);
                seen.insert(index);
            }
            None => self.streams.push((ssrc, index, HashSet::from([index]))),
        }
    }
}

fn keys(profile: SrtpProfile) -> SrtpKeys {
    SrtpKeys {
        profile,
        master_key: (0..profile.master_key_len()).map(|i| 0xA5 ^ (i as u8).wrapping_mul(17)).collect(),
        master_salt: (0..profile.master_salt_len()).map(|i| 0x3C ^ (i as u8).wrapping_mul(29)).collect(),
    }
}

/// A plain RTP packet and its header length.
fn rtp(ssrc: u32, seq: u16, shape: &Shape) -> (Vec<u8>, usize) {
    let csrc = &shape.csrc[..shape.csrc.len().min(15)];
    let mut p = vec![0x80 | (u8::from(shape.padding) << 5) | csrc.len() as u8, (u8::from(shape.marker) << 7) | 111];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&shape.timestamp.to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    for c in csrc {
        p.extend_from_slice(&c.to_be_bytes());
    }
    if let Some((profile, ext)) = &shape.ext {
        p[0] |= 0x10;
        let ext = &ext[..ext.len().min(64)];
        let words = ext.len().div_ceil(4);
        p.extend_from_slice(&profile.to_be_bytes());
        p.extend_from_slice(&(words as u16).to_be_bytes());
        p.extend_from_slice(ext);
        p.resize(p.len() + words * 4 - ext.len(), 0);
    }
    let header_len = p.len();
    p.extend_from_slice(&shape.payload[..shape.payload.len().min(1200)]);
    (p, header_len)
}

fn profile_of(b: u8) -> SrtpProfile {
    SrtpProfile::ALL[usize::from(b % 4)]
}

fuzz_target!(|input: Input| {
    let profile = profile_of(input.profile);
    let k = keys(profile);
    let ctx = SrtpContext::new(&k).expect("fixed keys of the profile's lengths");
    let mut rx = SrtpReceiver::new(&k).expect("fixed keys of the profile's lengths");
    let mut model = Model::default();
    // Every packet protected (at most one per operation), and by its bytes:
    // what the receiver may ever accept.
    let mut all: Vec<Sent> = Vec::new();
    let mut protected: HashMap<Vec<u8>, Vec<usize>> = HashMap::new();
    // The most recent ones, which `Deliver` picks from (indices into `all`).
    let mut sent: Vec<usize> = Vec::new();

    for op in input.ops.into_iter().take(MAX_OPS) {
        let delivery: Option<(Vec<u8>, Option<usize>)> = match op {
            Op::Raw(bytes) => Some((bytes, None)),
            Op::Forge { ssrc, seq, cc, body } => {
                let mut p = vec![0x80 | (cc & 0x1F), 111];
                p.extend_from_slice(&seq.to_be_bytes());
                p.extend_from_slice(&[0, 0, 0, 0]);
                p.extend_from_slice(&SSRCS[usize::from(ssrc) % SSRCS.len()].to_be_bytes());
                p.extend_from_slice(&body);
                Some((p, None))
            }
            Op::Protect { ssrc, seq, roc, shape } => {
                let ssrc = SSRCS[usize::from(ssrc) % SSRCS.len()];
                let roc = match roc {
                    Roc::Current(d) => {
                        let current = model.stream(ssrc).map_or(0, |s| (s.1 >> 16) as u32);
                        current.saturating_add_signed(i32::from(d))
                    }
                    Roc::Any(r) => r,
                };
                protect(
                    &ctx,
                    &mut sent,
                    &mut all,
                    &mut protected,
                    ssrc,
                    (u64::from(roc) << 16) | u64::from(seq),
                    &shape,
                );
                None
            }
            Op::Next { ssrc, step, shape } => {
                let ssrc = SSRCS[usize::from(ssrc) % SSRCS.len()];
                let index = model.stream(ssrc).map_or(u64::from(step), |s| s.1 + u64::from(step));
                if index >> 48 == 0 {
                    protect(&ctx, &mut sent, &mut all, &mut protected, ssrc, index, &shape);
                }
                None
            }
            Op::Deliver { back, tamper } => {
                if sent.is_empty() {
                    None
                } else {
                    let i = sent.len() - 1 - usize::from(back) % sent.len();
                    let i = sent[i];
                    let mut wire = all[i].wire.clone();
                    match tamper {
                        Tamper::None => {}
                        Tamper::Flip { at, mask } => {
                            let at = usize::from(at) % wire.len();
                            wire[at] ^= mask;
                        }
                        Tamper::Cut(n) => wire.truncate(wire.len().saturating_sub(usize::from(n))),
                        Tamper::Append(b) => wire.push(b),
                    }
                    Some((wire, Some(i)))
                }
            }
        };
        let Some((wire, from_sent)) = delivery else { continue };
        // The untouched packet, if the bytes are one.
        let original = from_sent.filter(|&i| all[i].wire == wire).map(|i| &all[i]);
        let must = original.is_some_and(|s| model.must_accept(s.ssrc, s.index));
        let mut buf = wire.clone();
        match rx.unprotect(&mut buf) {
            Ok((header_len, payload)) => {
                // Accepted: one of the packets protected here (its first delivery), opened to its plaintext.
                let candidates = protected.get(&wire).expect("the receiver accepted bytes no sender protected");
                let s = candidates
                    .iter()
                    .map(|&i| &all[i])
                    .find(|s| model.may_accept(s.ssrc, s.index))
                    .expect("the receiver accepted a replay, a packet too old, or an SSRC beyond its slots");
                assert_eq!(header_len, s.header_len, "header length");
                assert_eq!(payload, s.header_len..wire.len() - profile.tag_len(), "payload range");
                assert_eq!(&buf[..payload.end], &s.plain[..], "decrypts to what was protected");
                let (ssrc, index) = (s.ssrc, s.index);
                model.accept(ssrc, index);
            }
            Err(e) => {
                assert!(!must, "an authentic packet, new and within the window, was refused: {e:?}");
            }
        }
        // The receiver's state agrees with the model.
        for &ssrc in &SSRCS {
            let ours = rx.window(ssrc).and_then(ReplayWindow::highest);
            let model = model.stream(ssrc).map(|s| ((s.1 >> 16) as u32, s.1 as u16));
            assert_eq!(ours, model, "the highest index of SSRC {ssrc:#x}");
        }
        assert!(SSRCS.iter().filter(|&&s| rx.window(s).is_some()).count() <= RECEIVE_STREAMS);
    }
});

fn protect(
    ctx: &SrtpContext,
    sent: &mut Vec<usize>,
    all: &mut Vec<Sent>,
    protected: &mut HashMap<Vec<u8>, Vec<usize>>,
    ssrc: u32,
    index: u64,
    shape: &Shape,
) {
    let (seq, roc) = (index as u16, (index >> 16) as u32);
    let (plain, header_len) = rtp(ssrc, seq, shape);
    assert_eq!(rtp_header_len(&plain), Some(header_len), "the header length as the receiver reads it");
    let mut buf = BytesMut::with_capacity(plain.len() + ctx.tag_len());
    buf.extend_from_slice(&plain);
    ctx.protect_rtp(&mut buf, header_len, ssrc, seq, roc).expect("a packet of at most 1,200 bytes payload");
    assert_eq!(buf.len(), plain.len() + ctx.tag_len());
    assert_eq!(&buf[..header_len], &plain[..header_len], "the header stays in the clear");
    let wire = buf.to_vec();
    protected.entry(wire.clone()).or_default().push(all.len());
    if sent.len() == MAX_SENT {
        sent.remove(0);
    }
    sent.push(all.len());
    all.push(Sent { ssrc, index, header_len, plain, wire });
}
