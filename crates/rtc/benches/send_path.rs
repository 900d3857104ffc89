//! The per-packet send cost, old (webrtc-rs's write pipeline) against lean
//! (tutti's own RTP + SRTP), on both sides of a call: `Mux::send_audio` on
//! the server (2 CSRCs with RFC 6465 levels, RFC 6464 level) and
//! `ClientPeer::send_audio` in the load generator, an 80-byte Opus payload,
//! datagrams drained and their buffers handed back (`recycle`), as the
//! server's I/O thread and the load generator do; "fresh buf" drops them
//! instead (a buffer allocated per packet). Each pair is connected in memory (no
//! sockets) on a virtual clock. Also the SRTP protection alone.
//!
//! The receive side too: `ClientPeer::handle_datagram` of the server's
//! lean-protected packets (as above) read on the client's lean receive path
//! or through webrtc-rs's read pipeline; the server's `Mux::handle_datagram`
//! of the client's packets, on its lean receive path or webrtc-rs's; and the
//! SRTP open alone.
//!
//! `cargo bench -p tutti-rtc --bench send_path -- --warm-up-time 1 --measurement-time 3`
//! runs criterion, then prints tables of ns per packet from interleaved
//! rounds (min and median of 15), the figures to compare in one run.

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, criterion_group};
use tutti_rtc::srtp::{SrtpContext, SrtpKeys};
use tutti_rtc::{
    Acceptor, ClientEvent, ClientPeer, Contributor, Mux, MuxEvent, PeerId, ReceivePath, SendPath, SrtpProfile,
};

const PAYLOAD: [u8; 80] = [0x5A; 80];
const MIXED: [Contributor; 2] = [Contributor { ssrc: 0xA11CE, level: 30 }, Contributor { ssrc: 0xB0B, level: 40 }];

/// A connected call, both sides on the lean path or both on webrtc-rs's.
struct Pair {
    mux: Mux,
    client: ClientPeer,
    peer: PeerId,
    now: Instant,
    /// Hand sent buffers back to the sender.
    recycle: bool,
}

impl Pair {
    fn new(lean: bool, profile: SrtpProfile) -> Self {
        Self::with_receive(lean, profile, true)
    }

    /// As [`Pair::new`], with the server's lean receive path on or off.
    fn with_receive(lean: bool, profile: SrtpProfile, server_lean_receive: bool) -> Self {
        let server: SocketAddr = "127.0.0.1:4000".parse().expect("literal address");
        let me: SocketAddr = "127.0.0.1:50000".parse().expect("literal address");
        let mut now = Instant::now();
        let mut acceptor = Acceptor::new(server, Duration::from_secs(3600)).expect("acceptor");
        acceptor.set_lean_send(lean);
        acceptor.set_lean_receive(server_lean_receive);
        acceptor.set_srtp_profiles(&[profile]);
        let mut mux = Mux::with_acceptor(acceptor);
        let (mut client, offer) = ClientPeer::new(me, now).expect("client");
        client.set_lean_send(lean);
        let (peer, answer) = mux.accept_offer(&offer, now).expect("answer");
        client.accept_answer(&answer, now).expect("answer accepted");
        let mut up = (false, false);
        for _ in 0..500 {
            now += Duration::from_millis(10);
            mux.handle_timeout(now);
            client.handle_timeout(now);
            while let Some(t) = client.poll_transmit() {
                mux.handle_datagram(me, &t.data, now);
            }
            while let Some(t) = mux.poll_transmit() {
                client.handle_datagram(server, &t.data, now);
            }
            while let Some(e) = mux.poll_event() {
                up.0 |= matches!(e, MuxEvent::Connected(_));
            }
            while let Some(e) = client.poll_event() {
                up.1 |= matches!(e, ClientEvent::Connected);
            }
            if up == (true, true) {
                break;
            }
        }
        assert_eq!(up, (true, true), "the in-memory call connects");
        let mut pair = Self { mux, client, peer, now, recycle: true };
        // The first packet picks the path and arms the report timers.
        pair.server_send();
        pair.client_send();
        let expected = |p: SendPath| if lean { p == SendPath::Lean(profile) } else { p == SendPath::Rtc };
        assert!(expected(pair.mux.send_path(peer).expect("known peer")) && expected(pair.client.send_path()));
        pair
    }

    fn server_send(&mut self) {
        let payload = Bytes::from_static(&PAYLOAD);
        self.mux.send_audio(self.peer, payload, Some(20), &MIXED, self.now).expect("connected");
        while let Some(t) = self.mux.poll_transmit() {
            let t = black_box(t);
            if self.recycle {
                self.mux.recycle(t.data);
            }
        }
    }

    fn client_send(&mut self) {
        self.client.send_audio(Bytes::from_static(&PAYLOAD), Some(20), self.now).expect("connected");
        while let Some(t) = self.client.poll_transmit() {
            let t = black_box(t);
            if self.recycle {
                self.client.recycle(t.data);
            }
        }
    }
}

/// SRTP protection of one 80-byte packet (24-byte header), datagram buffer included.
fn protect(ctx: &SrtpContext, seq: u16) -> BytesMut {
    let mut buf = BytesMut::with_capacity(24 + 80 + ctx.tag_len());
    buf.extend_from_slice(&[0x90, 111, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xBE, 0xDE, 0, 1, 0x10, 20, 0, 0]);
    buf.extend_from_slice(&[0; 4]);
    buf.extend_from_slice(&PAYLOAD);
    ctx.protect_rtp(&mut buf, 24, 1, seq, 0).expect("valid packet");
    buf
}

fn context(profile: SrtpProfile) -> SrtpContext {
    let keys = SrtpKeys {
        profile,
        master_key: vec![7; profile.master_key_len()],
        master_salt: vec![9; profile.master_salt_len()],
    };
    SrtpContext::new(&keys).expect("valid keys")
}

type Case = (&'static str, Box<dyn FnMut()>);

fn cases() -> Vec<Case> {
    let mut v: Vec<Case> = Vec::new();
    for (lean, profile, name) in [
        (false, SrtpProfile::AeadAes128Gcm, "old  GCM"),
        (true, SrtpProfile::AeadAes128Gcm, "lean GCM"),
        (false, SrtpProfile::Aes128CmHmacSha1_80, "old  CM80"),
        (true, SrtpProfile::Aes128CmHmacSha1_80, "lean CM80"),
    ] {
        let mut pair = Pair::new(lean, profile);
        let label: &'static str = Box::leak(format!("server {name}").into_boxed_str());
        v.push((label, Box::new(move || pair.server_send())));
        let mut pair = Pair::new(lean, profile);
        let label: &'static str = Box::leak(format!("client {name}").into_boxed_str());
        v.push((label, Box::new(move || pair.client_send())));
    }
    let mut pair = Pair::new(true, SrtpProfile::AeadAes128Gcm);
    pair.recycle = false;
    v.push(("server lean GCM fresh buf", Box::new(move || pair.server_send())));
    for (profile, name) in
        [(SrtpProfile::AeadAes128Gcm, "srtp only GCM (ring)"), (SrtpProfile::Aes128CmHmacSha1_80, "srtp only CM80")]
    {
        let ctx = context(profile);
        let mut seq = 0u16;
        v.push((
            name,
            Box::new(move || {
                seq = seq.wrapping_add(1);
                black_box(protect(&ctx, seq));
            }),
        ));
    }
    v
}

/// A receive case: `n` fresh packets made (untimed), then the timed part
/// takes them in; returns the time that took.
type ReceiveCase = (&'static str, Box<dyn FnMut(u64) -> Duration>);

impl Pair {
    /// The server's next `n` datagrams to the client (each packet can be
    /// received once: a replay costs less).
    fn server_datagrams(&mut self, n: u64) -> Vec<BytesMut> {
        let mut out = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let payload = Bytes::from_static(&PAYLOAD);
            self.mux.send_audio(self.peer, payload, Some(20), &MIXED, self.now).expect("connected");
            while let Some(t) = self.mux.poll_transmit() {
                out.push(t.data);
            }
        }
        out
    }

    /// The client's next `n` datagrams to the server.
    fn client_datagrams(&mut self, n: u64) -> Vec<BytesMut> {
        let mut out = Vec::with_capacity(n as usize);
        for _ in 0..n {
            self.client.send_audio(Bytes::from_static(&PAYLOAD), Some(20), self.now).expect("connected");
            while let Some(t) = self.client.poll_transmit() {
                out.push(t.data);
            }
        }
        out
    }

    /// The server takes `datagrams` in and hands out their audio.
    fn server_receive(&mut self, datagrams: &[BytesMut]) {
        let me: SocketAddr = "127.0.0.1:50000".parse().expect("literal address");
        for d in datagrams {
            self.mux.handle_datagram(me, d, self.now);
            while let Some(e) = self.mux.poll_event() {
                black_box(e);
            }
            while let Some(t) = self.mux.poll_transmit() {
                black_box(t);
            }
        }
    }

    /// The client takes `datagrams` in and hands out their audio.
    fn client_receive(&mut self, datagrams: &[BytesMut]) {
        let server: SocketAddr = "127.0.0.1:4000".parse().expect("literal address");
        for d in datagrams {
            self.client.handle_datagram(server, d, self.now);
            while let Some(e) = self.client.poll_event() {
                black_box(e);
            }
            while let Some(t) = self.client.poll_transmit() {
                black_box(t);
            }
        }
    }
}

fn receive_cases() -> Vec<ReceiveCase> {
    let mut v: Vec<ReceiveCase> = Vec::new();
    for (lean, profile, name) in [
        (false, SrtpProfile::AeadAes128Gcm, "client rtc  GCM"),
        (true, SrtpProfile::AeadAes128Gcm, "client lean GCM"),
        (false, SrtpProfile::Aes128CmHmacSha1_80, "client rtc  CM80"),
        (true, SrtpProfile::Aes128CmHmacSha1_80, "client lean CM80"),
    ] {
        // The server sends on the lean path either way (it is the cheaper to make).
        let mut pair = Pair::new(true, profile);
        pair.client.set_lean_receive(lean);
        let first = pair.server_datagrams(1);
        pair.client_receive(&first);
        let path = pair.client.receive_path();
        assert_eq!(path, if lean { ReceivePath::Lean(profile) } else { ReceivePath::Rtc }, "{name}");
        v.push((
            name,
            Box::new(move |n| {
                let datagrams = pair.server_datagrams(n);
                let t = Instant::now();
                pair.client_receive(&datagrams);
                t.elapsed()
            }),
        ));
    }
    for (lean, profile, name) in
        [(false, SrtpProfile::AeadAes128Gcm, "server rtc  GCM"), (true, SrtpProfile::AeadAes128Gcm, "server lean GCM")]
    {
        // The server's Mux::handle_datagram of the client's audio (the
        // client sends on the lean path either way).
        let mut pair = Pair::with_receive(true, profile, lean);
        v.push((
            name,
            Box::new(move |n| {
                let datagrams = pair.client_datagrams(n);
                let t = Instant::now();
                pair.server_receive(&datagrams);
                t.elapsed()
            }),
        ));
    }
    for (profile, name) in
        [(SrtpProfile::AeadAes128Gcm, "srtp open only GCM"), (SrtpProfile::Aes128CmHmacSha1_80, "srtp open only CM80")]
    {
        let ctx = context(profile);
        let packet = protect(&ctx, 1);
        v.push((
            name,
            Box::new(move |n| {
                let t = Instant::now();
                for _ in 0..n {
                    // A copy per packet, as the lean path reads into its own buffer.
                    let mut buf = packet.clone();
                    black_box(ctx.unprotect_rtp(&mut buf, 24, 1, 1, 0).expect("authentic"));
                }
                t.elapsed()
            }),
        ));
    }
    v
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("send_path");
    for (name, mut f) in cases() {
        g.bench_function(name, |b| b.iter(&mut f));
    }
    g.finish();
    let mut g = c.benchmark_group("receive_path");
    for (name, mut f) in receive_cases() {
        g.bench_function(name, |b| b.iter_custom(&mut f));
    }
    g.finish();
}

/// [`table`] for the receive cases.
fn receive_table() {
    const ROUNDS: usize = 15;
    const PER_ROUND: u64 = 10_000;
    let mut cases = receive_cases();
    let mut samples = vec![Vec::with_capacity(ROUNDS); cases.len()];
    for (_, f) in cases.iter_mut() {
        f(2_000);
    }
    for _ in 0..ROUNDS {
        for (i, (_, f)) in cases.iter_mut().enumerate() {
            samples[i].push(f(PER_ROUND).as_nanos() as f64 / PER_ROUND as f64);
        }
    }
    println!("\nns per received packet (80-byte Opus, 2 CSRCs), {ROUNDS} interleaved rounds of {PER_ROUND}:");
    println!("{:<26} {:>9} {:>9}", "case", "min", "median");
    for (i, (name, _)) in cases.iter().enumerate() {
        let s = &mut samples[i];
        s.sort_by(f64::total_cmp);
        println!("{name:<26} {:>9.0} {:>9.0}", s[0], s[ROUNDS / 2]);
    }
}

/// Interleaved rounds, so that a noisy neighbour hits every case alike.
fn table() {
    const ROUNDS: usize = 15;
    const PER_ROUND: u32 = 20_000;
    let mut cases = cases();
    let mut samples = vec![Vec::with_capacity(ROUNDS); cases.len()];
    for (_, f) in cases.iter_mut() {
        for _ in 0..2_000 {
            f();
        }
    }
    for _ in 0..ROUNDS {
        for (i, (_, f)) in cases.iter_mut().enumerate() {
            let t = Instant::now();
            for _ in 0..PER_ROUND {
                f();
            }
            samples[i].push(t.elapsed().as_nanos() as f64 / f64::from(PER_ROUND));
        }
    }
    println!("\nns per packet (80-byte Opus), {ROUNDS} interleaved rounds of {PER_ROUND}:");
    println!("{:<26} {:>9} {:>9}", "case", "min", "median");
    for (i, (name, _)) in cases.iter().enumerate() {
        let s = &mut samples[i];
        s.sort_by(f64::total_cmp);
        println!("{name:<26} {:>9.0} {:>9.0}", s[0], s[ROUNDS / 2]);
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(2)).sample_size(20);
    targets = bench
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    table();
    receive_table();
}
