//! RFC 4571 framing and the TCP connection table, as the io thread will
//! drive them: property tests on random streams and splits, and the
//! connection rules (STUN first, timeouts, limits) on a virtual clock.

mod tcp_framing_check;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use tutti_rtc::tcp::{FrameReader, FramingError, Received, SendError, TcpClose, TcpConnections, TcpLimits};

fn frame(payload: &[u8]) -> Vec<u8> {
    let mut v = u16::try_from(payload.len()).expect("test payloads fit a frame").to_be_bytes().to_vec();
    v.extend_from_slice(payload);
    v
}

/// A STUN Binding request with USERNAME "srv:cli" (what an ICE check looks like to the table).
fn check() -> Vec<u8> {
    let mut m = vec![0x00, 0x01, 0x00, 12, 0x21, 0x12, 0xA4, 0x42];
    m.extend_from_slice(&[7; 12]);
    m.extend_from_slice(&[0x00, 0x06, 0x00, 7]);
    m.extend_from_slice(b"srv:cli\0");
    m
}

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("literal address")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any split of a concatenation of frames gives back exactly those frames.
    #[test]
    fn random_splits_reassemble(
        payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..1500), 0..20),
        cuts in prop::collection::vec(1usize..200, 1..50),
    ) {
        let stream: Vec<u8> = payloads.iter().flat_map(|p| frame(p)).collect();
        let mut r = FrameReader::new(1500);
        let mut got = Vec::new();
        let mut rest = &stream[..];
        let mut i = 0;
        while !rest.is_empty() {
            let n = cuts[i % cuts.len()].min(rest.len());
            i += 1;
            let (a, b) = rest.split_at(n);
            r.read(a, |f| got.push(f.to_vec())).expect("a valid stream");
            prop_assert!(r.buffered() <= 1502);
            prop_assert!(r.capacity() <= 1500);
            rest = b;
        }
        prop_assert_eq!(got, payloads);
        prop_assert_eq!(r.buffered(), 0);
    }

    /// A frame over the limit breaks the stream where it starts, whatever the split.
    #[test]
    fn oversized_frame_is_an_error(
        before in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..100), 0..5),
        len in 101usize..=65535,
        split in 1usize..10,
    ) {
        let mut stream: Vec<u8> = before.iter().flat_map(|p| frame(p)).collect();
        stream.extend_from_slice(&u16::try_from(len).expect("in range").to_be_bytes());
        stream.extend_from_slice(&[0; 50]);
        let mut r = FrameReader::new(100);
        let mut got = Vec::new();
        let mut err = None;
        for chunk in stream.chunks(split) {
            if let Err(e) = r.read(chunk, |f| got.push(f.to_vec())) {
                err = Some(e);
                break;
            }
        }
        prop_assert_eq!(got, before);
        prop_assert_eq!(err, Some(FramingError::TooLarge { len, max: 100 }));
    }

    /// The shared fuzz check on arbitrary bytes.
    #[test]
    fn fuzz_check_on_random_bytes(data in prop::collection::vec(any::<u8>(), 0..3000)) {
        tcp_framing_check::run(&data);
    }

    /// The shared fuzz check on streams that start with a valid check.
    #[test]
    fn fuzz_check_on_plausible_streams(
        limit in any::<[u8; 2]>(),
        seed in any::<u8>(),
        payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..10),
    ) {
        let mut data = limit.to_vec();
        data.push(seed);
        data.extend(frame(&check()));
        for p in &payloads {
            data.extend(frame(p));
        }
        tcp_framing_check::run(&data);
    }
}

/// A few thousand seeded random inputs through the fuzz target's entry
/// point (for machines without nightly cargo-fuzz).
#[test]
fn fuzz_entry_point_over_seeded_inputs() {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..4000 {
        let len = (next() % 2000) as usize;
        let mut data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if i % 2 == 0 && data.len() >= 3 {
            // Half start with a valid check, so the table's later paths run too.
            let mut d = data[..3].to_vec();
            d.extend(frame(&check()));
            d.extend_from_slice(&data[3..]);
            data = d;
        }
        tcp_framing_check::run(&data);
    }
}

#[test]
fn first_frame_must_be_a_stun_check() {
    let now = Instant::now();
    let mut t = TcpConnections::new(TcpLimits::default());
    let a = t.accept(addr("127.0.0.2:1000"), now).expect("under the limits");
    let mut frames = 0;
    // A DTLS record first: closed, nothing handed on.
    assert_eq!(t.receive(a, &frame(&[22, 254, 253, 0]), now, |_| frames += 1), Received::Closed(TcpClose::NotStun));
    assert_eq!(frames, 0);
    assert!(t.find(addr("127.0.0.2:1000")).is_none());
    // A STUN check first, then anything: all handed on.
    let b = t.accept(addr("127.0.0.2:1001"), now).expect("under the limits");
    let stream = [frame(&check()), frame(&[22, 254, 253, 0])].concat();
    assert_eq!(t.receive(b, &stream, now, |_| frames += 1), Received::Frames(2));
    assert_eq!(frames, 2);
    assert_eq!(t.find(addr("127.0.0.2:1001")), Some(b));
    let s = t.stats();
    assert_eq!((s.accepted, s.open, s.closed_not_stun, s.frames_in), (2, 1, 1, 2));
}

#[test]
fn silent_and_trickling_connections_time_out() {
    let t0 = Instant::now();
    let limits = TcpLimits {
        stun_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(30),
        ..TcpLimits::default()
    };
    let mut t = TcpConnections::new(limits);
    let silent = t.accept(addr("127.0.0.2:1"), t0).expect("under the limits");
    let trickle = t.accept(addr("127.0.0.3:1"), t0).expect("under the limits");
    let good = t.accept(addr("127.0.0.4:1"), t0).expect("under the limits");
    assert_eq!(t.poll_timeout(), Some(t0 + Duration::from_secs(5)));
    // The trickler sends one byte of a check a second: never a whole frame.
    let c = frame(&check());
    for (i, b) in c.iter().take(4).enumerate() {
        let now = t0 + Duration::from_secs(i as u64);
        assert_eq!(t.receive(trickle, std::slice::from_ref(b), now, |_| {}), Received::Frames(0));
        t.handle_timeout(now);
    }
    assert_eq!(t.receive(good, &c, t0 + Duration::from_secs(1), |_| {}), Received::Frames(1));
    t.handle_timeout(t0 + Duration::from_millis(4999));
    assert_eq!(t.len(), 3);
    t.handle_timeout(t0 + Duration::from_secs(5));
    let mut closed: Vec<_> = std::iter::from_fn(|| t.poll_closed()).collect();
    closed.sort_by_key(|(id, _)| *id);
    assert_eq!(closed, vec![(silent, TcpClose::StunTimeout), (trickle, TcpClose::StunTimeout)]);
    assert_eq!(t.len(), 1);
    // The good one: frames keep it alive, silence closes it.
    assert_eq!(t.receive(good, &c, t0 + Duration::from_secs(20), |_| {}), Received::Frames(1));
    t.handle_timeout(t0 + Duration::from_secs(49));
    assert_eq!(t.len(), 1, "a frame at 20 s moved the idle deadline to 50 s");
    t.handle_timeout(t0 + Duration::from_secs(50));
    assert_eq!(t.poll_closed(), Some((good, TcpClose::Idle)));
    let s = t.stats();
    assert_eq!((s.closed_stun_timeout, s.closed_idle, s.open), (2, 1, 0));
    t.handle_timeout(t0 + Duration::from_secs(100));
    assert_eq!(t.poll_timeout(), None, "superseded timer entries drain");
}

#[test]
fn connection_limits_total_and_per_ip() {
    let now = Instant::now();
    let mut t = TcpConnections::new(TcpLimits { max_connections: 5, max_per_ip: 2, ..TcpLimits::default() });
    let a1 = t.accept(addr("127.0.0.2:1"), now).expect("1st from .2");
    t.accept(addr("127.0.0.2:2"), now).expect("2nd from .2");
    assert_eq!(t.accept(addr("127.0.0.2:3"), now), Err(TcpClose::TooManyFromIp));
    t.accept(addr("127.0.0.3:1"), now).expect("other address");
    t.accept(addr("127.0.0.4:1"), now).expect("other address");
    t.accept(addr("127.0.0.5:1"), now).expect("5th");
    assert_eq!(t.accept(addr("127.0.0.6:1"), now), Err(TcpClose::TooManyConnections));
    // Closing one frees its slot, for its IP too.
    t.close(a1, TcpClose::PeerClosed);
    t.accept(addr("127.0.0.2:3"), now).expect("a slot was freed");
    let s = t.stats();
    assert_eq!((s.refused_per_ip, s.refused_total, s.closed_by_peer, s.open, s.accepted), (1, 1, 1, 5, 6));
    assert_eq!(t.poll_closed(), None, "closes the io thread asked for are not reported back");
}

#[test]
fn oversized_frame_closes_only_that_connection() {
    let now = Instant::now();
    let mut t = TcpConnections::new(TcpLimits { max_frame: 1500, ..TcpLimits::default() });
    let bad = t.accept(addr("127.0.0.2:1"), now).expect("under the limits");
    let good = t.accept(addr("127.0.0.3:1"), now).expect("under the limits");
    assert_eq!(t.receive(good, &frame(&check()), now, |_| {}), Received::Frames(1));
    assert_eq!(t.receive(bad, &frame(&check()), now, |_| {}), Received::Frames(1));
    assert_eq!(t.receive(bad, &[0x05, 0xDD], now, |_| {}), Received::Closed(TcpClose::BadFrame)); // 1501
    assert_eq!(t.receive(good, &frame(&[1; 1500]), now, |_| {}), Received::Frames(1));
    assert_eq!(t.poll_closed(), Some((bad, TcpClose::BadFrame)));
    assert_eq!(t.stats().closed_bad_frame, 1);
    assert_eq!(t.receive(bad, &frame(&check()), now, |_| {}), Received::Closed(TcpClose::Local));
}

#[test]
fn a_slow_reader_loses_datagrams_not_memory() {
    let now = Instant::now();
    let mut t = TcpConnections::new(TcpLimits { send_buffer: 1000, ..TcpLimits::default() });
    let id = t.accept(addr("127.0.0.2:1"), now).expect("under the limits");
    let mut queued = 0;
    for _ in 0..100 {
        if t.send(id, &[0xAB; 98]).is_ok() {
            queued += 1;
        }
    }
    assert_eq!(queued, 10, "ten 100-byte frames fit 1000 bytes");
    assert_eq!(t.stats().dropped_out, 90);
    let (a, b) = t.pending(id);
    assert_eq!(a.len() + b.len(), 1000);
    // The socket takes 250 bytes: two and a half frames; room for two more.
    t.consume(id, 250);
    assert_eq!(t.send(id, &[1; 98]), Ok(()));
    assert_eq!(t.send(id, &[1; 98]), Ok(()));
    assert_eq!(t.send(id, &[1; 98]), Err(SendError::Full));
    // What is written is still a valid frame stream from where the socket stopped.
    let (a, b) = t.pending(id);
    let rest = [a, b].concat();
    let mut r = FrameReader::new(1500);
    let mut frames = 0;
    // Resynchronize: the first 50 bytes finish the frame the socket was writing.
    r.read(&rest[50..], |f| {
        assert_eq!(f.len(), 98);
        frames += 1;
    })
    .expect("whole frames");
    assert_eq!(frames, 9);
    assert_eq!(t.send(tutti_rtc::tcp::ConnId(999), &[1]), Err(SendError::UnknownConnection));
}

#[test]
fn a_connection_moves_to_the_io_thread_that_owns_its_peer() {
    let t0 = Instant::now();
    let limits = TcpLimits { idle_timeout: Duration::from_secs(30), ..TcpLimits::default() };
    let mut accepting = TcpConnections::new(limits);
    let mut owner = TcpConnections::new(limits);
    let peer = addr("127.0.0.2:7000");
    let id = accepting.accept(peer, t0).expect("under the limits");
    // The first check arrives with half of the next frame: that half moves too.
    let next = frame(&[22, 254, 253, 1, 2, 3]);
    let stream = [frame(&check()), next[..3].to_vec()].concat();
    assert_eq!(accepting.receive(id, &stream, t0, |_| {}), Received::Frames(1));
    let conn = accepting.detach(id).expect("open");
    assert_eq!(conn.peer_addr(), peer);
    assert!(accepting.is_empty() && accepting.find(peer).is_none());
    let moved = owner.attach(conn).expect("under the owner's limits");
    assert_eq!(owner.find(peer), Some(moved));
    let mut got = Vec::new();
    // Already greeted: a DTLS record is fine now, and the half frame completes.
    assert_eq!(owner.receive(moved, &next[3..], t0, |f| got.push(f.to_vec())), Received::Frames(1));
    assert_eq!(got, vec![vec![22, 254, 253, 1, 2, 3]]);
    // The idle deadline moved with it.
    owner.handle_timeout(t0 + Duration::from_secs(30));
    assert_eq!(owner.poll_closed(), Some((moved, TcpClose::Idle)));
    assert_eq!((accepting.stats().detached, owner.stats().attached), (1, 1));
    // The owner's limits apply on attach.
    let mut full = TcpConnections::new(TcpLimits { max_per_ip: 0, ..limits });
    let id = accepting.accept(peer, t0).expect("under the limits");
    let conn = accepting.detach(id).expect("open");
    assert_eq!(full.attach(conn).map(|_| ()), Err(TcpClose::TooManyFromIp));
    assert_eq!(full.stats().refused_per_ip, 1);
}
