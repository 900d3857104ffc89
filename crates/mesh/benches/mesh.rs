//! What one node's tick message costs, in nanoseconds: encode + seal on
//! the sender, header check + open + decode on a receiver, for K = 3, 4, 5
//! candidates with 80-byte Opus frames (20 ms at 32 kb/s); the AEAD alone,
//! AES-256-GCM against ChaCha20-Poly1305 on the same body; and deriving a
//! sender's key (once per peer session). Rounds alternate and the best of
//! each is kept: on a shared box only the ratios mean much.
//!
//! ```text
//! cargo bench -p tutti-mesh --bench mesh
//! ```

#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::time::Instant;

use ring::aead::{AES_256_GCM, Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};
use tutti_mesh::{Candidate, Header, NodeId, Opener, RoomId, RoomKey, Sealer, Summary};

const MESSAGES: u64 = 20_000;
const ROUNDS: usize = 7;
const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

fn candidates(k: usize) -> Vec<Candidate> {
    (0..k as u64)
        .map(|p| Candidate {
            participant: 1_000 + p,
            level: 25,
            rank: 100 * 256,
            selected: p == 0,
            seq: p as u16,
            rtp_time: 960,
            frame: (0..80u32).map(|i| (i * 7 + p as u32) as u8).collect(),
        })
        .collect()
}

/// (seal ns/message, open ns/message, bytes/message) for K frames.
fn message(k: usize, round: usize) -> (f64, f64, usize) {
    let room = RoomId::from_name("bench");
    let (a, b) = (NodeId(1), NodeId(2));
    let session = round as u64 + 1;
    let mut sealer = Sealer::new(&RoomKey::derive(SECRET, room, 1), a, session);
    let mut opener = Opener::new(RoomKey::derive(SECRET, room, 1), b, [a]);
    let cands = candidates(k);
    let mut out = Vec::new();
    let mut all = Vec::with_capacity(MESSAGES as usize);
    let start = Instant::now();
    for tick in 0..MESSAGES {
        sealer.seal_tick(tick, Summary { participants: 300, talking: 4, candidates: 0 }, &cands, &mut out).unwrap();
        all.push(out[0].clone());
    }
    // The clone is the receiver's buffer: counted on the sender's side, as a send copy would be.
    let seal = start.elapsed().as_nanos() as f64 / MESSAGES as f64;
    let bytes = all[0].len();
    let start = Instant::now();
    for d in &mut all {
        let h = Header::read(d).unwrap();
        black_box(opener.open(&h, d).unwrap());
    }
    let open = start.elapsed().as_nanos() as f64 / MESSAGES as f64;
    (seal, open, bytes)
}

/// seal + open of one body with a raw ring AEAD, ns.
fn aead(alg: &'static ring::aead::Algorithm, body: usize) -> f64 {
    let key = LessSafeKey::new(UnboundKey::new(alg, &[7u8; 32]).unwrap());
    let mut buf = vec![0u8; body];
    let aad = [1u8; 44];
    let start = Instant::now();
    for i in 0..MESSAGES {
        let mut n = [0u8; 12];
        n[..8].copy_from_slice(&i.to_be_bytes());
        buf.truncate(body);
        let tag = key.seal_in_place_separate_tag(Nonce::assume_unique_for_key(n), Aad::from(&aad), &mut buf).unwrap();
        buf.extend_from_slice(tag.as_ref());
        black_box(key.open_in_place(Nonce::assume_unique_for_key(n), Aad::from(&aad), &mut buf).unwrap());
    }
    start.elapsed().as_nanos() as f64 / MESSAGES as f64
}

fn derive() -> f64 {
    let room = RoomId::from_name("bench");
    let start = Instant::now();
    for i in 0..MESSAGES / 10 {
        black_box(Sealer::new(&RoomKey::derive(SECRET, room, i), NodeId(1), i));
    }
    start.elapsed().as_nanos() as f64 / (MESSAGES / 10) as f64
}

fn main() {
    let ks = [3usize, 4, 5];
    let mut best = vec![(f64::INFINITY, f64::INFINITY, 0usize); ks.len()];
    let (mut aes, mut chacha, mut der) = (f64::INFINITY, f64::INFINITY, f64::INFINITY);
    for round in 0..ROUNDS {
        for (i, &k) in ks.iter().enumerate() {
            let (s, o, b) = message(k, round);
            best[i] = (best[i].0.min(s), best[i].1.min(o), b);
        }
        // Alternate which AEAD goes first.
        if round % 2 == 0 {
            aes = aes.min(aead(&AES_256_GCM, 500));
            chacha = chacha.min(aead(&CHACHA20_POLY1305, 500));
        } else {
            chacha = chacha.min(aead(&CHACHA20_POLY1305, 500));
            aes = aes.min(aead(&AES_256_GCM, 500));
        }
        der = der.min(derive());
    }
    println!("| K frames (80 B) | bytes | encode+seal ns | check+open+decode ns | total ns | total / K=3 |");
    println!("|---|---|---|---|---|---|");
    let base = best[0].0 + best[0].1;
    for (&k, &(s, o, b)) in ks.iter().zip(&best) {
        println!("| {k} | {b} | {s:.0} | {o:.0} | {:.0} | {:.2} |", s + o, (s + o) / base);
    }
    println!();
    println!(
        "AEAD seal+open of a 500-byte body: AES-256-GCM {aes:.0} ns, ChaCha20-Poly1305 {chacha:.0} ns (ratio {:.2})",
        chacha / aes
    );
    println!("room key + sender key derivation (HKDF-SHA256, once per peer session): {der:.0} ns");
}
