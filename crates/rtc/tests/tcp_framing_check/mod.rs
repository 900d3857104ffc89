//! The RFC 4571 framing check shared by the `tcp_framing` fuzz target
//! (`fuzz/fuzz_targets/tcp_framing.rs` includes this file) and the
//! `tcp_framing` test, which runs it over seeded random inputs.
//!
//! Input layout: byte 0–1 the frame limit (1..=2048), byte 2 a seed for
//! the chunk sizes, the rest a TCP byte stream. The stream goes through a
//! [`FrameReader`] in chunks and through a [`TcpConnections`] table, and
//! both must agree with a naive parse of the whole stream.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tutti_rtc::tcp::{FrameReader, FramingError, Received, TcpClose, TcpConnections, TcpLimits};

/// The frames of `stream` read the slow way, and the error that ends it, if any.
pub fn naive(stream: &[u8], max: usize) -> (Vec<Vec<u8>>, Option<FramingError>) {
    let mut frames = Vec::new();
    let mut at = 0;
    while at + 2 <= stream.len() {
        let len = usize::from(u16::from_be_bytes([stream[at], stream[at + 1]]));
        if len == 0 {
            return (frames, Some(FramingError::Empty));
        }
        if len > max {
            return (frames, Some(FramingError::TooLarge { len, max }));
        }
        if at + 2 + len > stream.len() {
            break;
        }
        frames.push(stream[at + 2..at + 2 + len].to_vec());
        at += 2 + len;
    }
    (frames, None)
}

/// Whether a frame is a STUN Binding request with a USERNAME, read the slow way.
fn naive_is_check(f: &[u8]) -> bool {
    f.len() >= 20
        && f[0] == 0
        && f[1] == 1
        && f[4..8] == [0x21, 0x12, 0xA4, 0x42]
        && tutti_rtc::stun::username(f).is_some()
}

/// Chunk sizes from a seed (xorshift), 1..=97 bytes each.
fn chunks(stream: &[u8], seed: u8) -> Vec<&[u8]> {
    let mut x = u32::from(seed).wrapping_mul(2_654_435_761) | 1;
    let mut out = Vec::new();
    let mut rest = stream;
    while !rest.is_empty() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let n = (x % 97 + 1) as usize;
        let (a, b) = rest.split_at(n.min(rest.len()));
        out.push(a);
        rest = b;
    }
    out
}

/// Runs one input; panics on any disagreement.
pub fn run(data: &[u8]) {
    if data.len() < 3 {
        return;
    }
    let max = usize::from(u16::from_be_bytes([data[0], data[1]]) % 2048) + 1;
    let seed = data[2];
    let stream = &data[3..];
    let (want, want_err) = naive(stream, max);

    // The reader alone.
    let mut reader = FrameReader::new(max);
    let mut got = Vec::new();
    let mut err = None;
    for chunk in chunks(stream, seed) {
        match reader.read(chunk, |f| got.push(f.to_vec())) {
            Ok(_) => {}
            Err(e) => {
                err = Some(e);
                break;
            }
        }
        assert!(reader.buffered() <= max + 2, "at most one partial frame is held");
        assert!(reader.capacity() <= max, "the buffer never outgrows the frame limit");
    }
    assert_eq!(got, want, "frames agree with the naive parse");
    assert_eq!(err, want_err, "errors agree with the naive parse");

    // The connection table: the STUN-first rule on top.
    let now = Instant::now();
    let limits = TcpLimits { max_frame: max, ..TcpLimits::default() };
    let mut table = TcpConnections::new(limits);
    let peer: SocketAddr = "127.0.0.2:50000".parse().expect("literal");
    let id = table.accept(peer, now).expect("the first connection is under every limit");
    let mut handed = Vec::new();
    let mut closed = None;
    for chunk in chunks(stream, seed) {
        match table.receive(id, chunk, now, |f| handed.push(f.to_vec())) {
            Received::Frames(_) => {}
            Received::Closed(why) => {
                closed = Some(why);
                break;
            }
        }
    }
    let first_ok = want.first().is_none_or(|f| naive_is_check(f));
    if first_ok {
        assert_eq!(handed, want, "a connection that starts with a check hands every frame on");
        assert_eq!(closed, want_err.map(|_| TcpClose::BadFrame));
    } else {
        assert!(handed.is_empty(), "nothing is handed on before a valid check");
        assert_eq!(closed, Some(TcpClose::NotStun));
    }
    let s = table.stats();
    assert_eq!(s.frames_in, handed.len() as u64);
    assert_eq!(s.open, u64::from(closed.is_none()));
    // Whatever happened, time closes it: the STUN deadline or the idle timeout.
    table.handle_timeout(now + Duration::from_secs(3600));
    assert!(table.is_empty());
}
