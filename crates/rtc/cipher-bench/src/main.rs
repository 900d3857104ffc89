//! SRTP cipher micro-bench: ns per ~80-byte Opus packet (24-byte header as AAD), min and median of 15 rounds.
use std::hint::black_box;
use std::time::Instant;

const N: u32 = 100_000;

fn time(name: &str, mut f: impl FnMut(u32)) {
    for i in 0..20_000 { f(i); }
    let mut samples = Vec::new();
    for _ in 0..15 {
        let t = Instant::now();
        for i in 0..N { f(i); }
        samples.push(t.elapsed().as_nanos() as f64 / N as f64);
        std::thread::yield_now();
    }
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("{name:<44} min {:8.1}  median {:8.1} ns/packet", samples[0], samples[samples.len() / 2]);
}

fn main() {
    let key = [7u8; 16];
    let mut pkt = [0x5au8; 24 + 80 + 16];
    let nonce12 = |i: u32| { let mut n = [3u8; 12]; n[8..12].copy_from_slice(&i.to_be_bytes()); n };

    // ring AES-128-GCM
    {
        use ring::aead::*;
        let k = LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &key).unwrap());
        time("ring AES-128-GCM seal", |i| {
            let (aad, rest) = pkt.split_at_mut(24);
            let tag = k.seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce12(i)), Aad::from(&*aad), &mut rest[..80]).unwrap();
            rest[80..].copy_from_slice(tag.as_ref());
            black_box(&rest);
        });
    }
    // RustCrypto aes-gcm
    {
        use aes_gcm::{Aes128Gcm, KeyInit, AeadInPlace, Nonce};
        let k = Aes128Gcm::new_from_slice(&key).unwrap();
        time("RustCrypto aes-gcm 0.10 AES-128-GCM seal", |i| {
            let (aad, rest) = pkt.split_at_mut(24);
            let tag = k.encrypt_in_place_detached(Nonce::from_slice(&nonce12(i)), aad, &mut rest[..80]).unwrap();
            rest[80..].copy_from_slice(&tag);
            black_box(&rest);
        });
    }
    #[cfg(feature = "aws")]
    {
        use aws_lc_rs::aead::*;
        let k = LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &key).unwrap());
        time("aws-lc-rs AES-128-GCM seal", |i| {
            let (aad, rest) = pkt.split_at_mut(24);
            let tag = k.seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce12(i)), Aad::from(&*aad), &mut rest[..80]).unwrap();
            rest[80..].copy_from_slice(tag.as_ref());
            black_box(&rest);
        });
    }
    // AES-CM + HMAC-SHA1-80
    let auth = [9u8; 20];
    let iv16 = |i: u32| { let mut n = [3u8; 16]; n[10..14].copy_from_slice(&i.to_be_bytes()); n[14] = 0; n[15] = 0; n };
    {
        use aes::cipher::{InnerIvInit, StreamCipher};
        use hmac::{Hmac, Mac};
        type Ctr = ctr::Ctr128BE<aes::Aes128>;
        let aes = <aes::Aes128 as aes::cipher::KeyInit>::new_from_slice(&key).unwrap();
        let mac0 = <Hmac<sha1::Sha1> as Mac>::new_from_slice(&auth).unwrap();
        time("RustCrypto ctr+aes CM only", |i| {
            let mut c = Ctr::from_core(ctr::CtrCore::inner_iv_init(aes.clone(), &iv16(i).into()));
            c.apply_keystream(&mut pkt[24..104]);
            black_box(&pkt);
        });
        time("RustCrypto hmac+sha1 (keyed, cloned) only", |i| {
            let mut m = mac0.clone();
            m.update(&pkt[..104]);
            m.update(&i.to_be_bytes());
            let t = m.finalize().into_bytes();
            pkt[104..114].copy_from_slice(&t[..10]);
            black_box(&pkt);
        });
        time("RustCrypto AES_CM_128_HMAC_SHA1_80", |i| {
            let mut c = Ctr::from_core(ctr::CtrCore::inner_iv_init(aes.clone(), &iv16(i).into()));
            c.apply_keystream(&mut pkt[24..104]);
            let mut m = mac0.clone();
            m.update(&pkt[..104]);
            m.update(&i.to_be_bytes());
            let t = m.finalize().into_bytes();
            pkt[104..114].copy_from_slice(&t[..10]);
            black_box(&pkt);
        });
        let rk = ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, &auth);
        time("ring hmac sha1 only", |i| {
            let mut ctx = ring::hmac::Context::with_key(&rk);
            ctx.update(&pkt[..104]);
            ctx.update(&i.to_be_bytes());
            let t = ctx.sign();
            pkt[104..114].copy_from_slice(&t.as_ref()[..10]);
            black_box(&pkt);
        });
        time("RustCrypto ctr + ring hmac-sha1 (CM_80)", |i| {
            let mut c = Ctr::from_core(ctr::CtrCore::inner_iv_init(aes.clone(), &iv16(i).into()));
            c.apply_keystream(&mut pkt[24..104]);
            let mut ctx = ring::hmac::Context::with_key(&rk);
            ctx.update(&pkt[..104]);
            ctx.update(&i.to_be_bytes());
            let t = ctx.sign();
            pkt[104..114].copy_from_slice(&t.as_ref()[..10]);
            black_box(&pkt);
        });
    }
    #[cfg(feature = "aws")]
    {
        use aws_lc_rs::cipher::*; use aws_lc_rs::iv::FixedLength;
        let ek = EncryptingKey::ctr(UnboundCipherKey::new(&AES_128, &key).unwrap()).unwrap();
        time("aws-lc-rs AES-128-CTR only", |i| {
            let ctx = EncryptionContext::Iv128(FixedLength::from(iv16(i)));
            ek.less_safe_encrypt(&mut pkt[24..104], ctx).unwrap();
            black_box(&pkt);
        });
        let hk = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, &auth);
        time("aws-lc-rs hmac sha1 only", |i| {
            let mut ctx = aws_lc_rs::hmac::Context::with_key(&hk);
            ctx.update(&pkt[..104]);
            ctx.update(&i.to_be_bytes());
            let t = ctx.sign();
            pkt[104..114].copy_from_slice(&t.as_ref()[..10]);
            black_box(&pkt);
        });
    }
}
