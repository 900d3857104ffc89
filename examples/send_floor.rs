//! The per-packet floor of the media path: the datagrams the server sends
//! each tick to N participants (one ~120-byte SRTP audio packet each), sent
//! by a bare `sendmmsg` loop on loopback with no RTP, no SRTP and no peer
//! state, 64 per call as the io threads do. What the server spends per
//! participant per tick above this is RTP/SRTP and bookkeeping.
//!
//!   cargo run --release --example send_floor [-- N [TICKS] [--drain]]
//!
//! Prints the sender thread's CPU per participant per tick (its own
//! CLOCK_THREAD_CPUTIME_ID, so other processes on the box do not count).
//!
//! On loopback the sender's `sendmmsg` also delivers each datagram into its
//! receiver's socket, and wakes whoever waits on it. By default nobody reads
//! the receivers (a full buffer drops on delivery: no wake-ups). With
//! `--drain`, two threads read them as `tutti load`'s two workers read their
//! connected clients (each in its 1 ms send slot, no epoll), so the sender
//! pays what it pays under `tutti load` (a delivery, no epoll callback, no
//! wake-up): that is the floor to compare a `tutti load` run with.

use std::io::IoSlice;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::sys::socket::{MsgFlags, MultiHeaders, SockaddrStorage, sendmmsg};
use nix::time::{ClockId, clock_gettime};

/// Bytes of one audio datagram: 12 RTP header + 8 level extension + ~84 Opus + 16 GCM tag.
const DATAGRAM: usize = 120;
const BATCH: usize = 64;
/// `tutti load`'s send slots per 20 ms frame.
const SLOTS: usize = 20;

fn thread_cpu() -> Duration {
    let t = clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).expect("thread CPU clock");
    Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32)
}

/// Reads `sockets` until `stop` as one `tutti load` worker reads its
/// connected clients: each millisecond one twentieth of them (a send
/// slot's), each until it would block; no socket is on an epoll, so a
/// delivery runs no callback and wakes nobody.
fn drain(sockets: Vec<UdpSocket>, stop: Arc<AtomicBool>) {
    for s in &sockets {
        s.set_nonblocking(true).expect("non-blocking");
    }
    let mut buf = [0u8; 1500];
    let mut slot = 0;
    // Bounded by `stop`, which main sets after its last tick.
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(1));
        for s in sockets.iter().skip(slot).step_by(SLOTS) {
            while s.recv(&mut buf).is_ok() {}
        }
        slot = (slot + 1) % SLOTS;
    }
}

fn main() {
    let drained = std::env::args().any(|a| a == "--drain");
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let n: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let ticks: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(250);
    // The participants: sockets nobody reads (a full receive buffer drops on
    // delivery, which costs the sender about what a delivery does).
    let receivers: Vec<UdpSocket> = (0..n).map(|_| UdpSocket::bind("127.0.0.1:0").expect("bind")).collect();
    let addrs: Vec<SockaddrStorage> =
        receivers.iter().map(|s| SockaddrStorage::from(s.local_addr().expect("addr"))).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    let receivers = if drained {
        let mut all: Vec<UdpSocket> = receivers;
        let half = all.split_off(all.len() / 2);
        for part in [all, half] {
            let stop = stop.clone();
            readers.push(std::thread::spawn(move || drain(part, stop)));
        }
        Vec::new()
    } else {
        receivers
    };
    let sender = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let payload = vec![0x5au8; DATAGRAM];
    let mut headers: MultiHeaders<SockaddrStorage> = MultiHeaders::preallocate(BATCH, None);
    let start = Instant::now();
    let cpu0 = thread_cpu();
    let mut sent = 0usize;
    for tick in 0..ticks {
        for chunk in addrs.chunks(BATCH) {
            let iovs: Vec<[IoSlice<'_>; 1]> = chunk.iter().map(|_| [IoSlice::new(&payload)]).collect();
            let to: Vec<Option<SockaddrStorage>> = chunk.iter().map(|a| Some(*a)).collect();
            if let Ok(r) = sendmmsg(sender.as_raw_fd(), &mut headers, iovs.iter(), &to, [], MsgFlags::empty()) {
                sent += r.count();
            }
        }
        // On the 20 ms clock, as the mixer's ticks.
        let due = start + Duration::from_millis(20 * (tick as u64 + 1));
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    let cpu = thread_cpu() - cpu0;
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        let _ = r.join();
    }
    let per = cpu.as_secs_f64() * 1e6 / (n * ticks) as f64;
    let _: Vec<SocketAddr> = receivers.iter().filter_map(|r| r.local_addr().ok()).collect();
    println!(
        "send floor{}: {n} participants x {ticks} ticks, {sent} datagrams of {DATAGRAM} bytes by sendmmsg ({BATCH}/call): \
         sender CPU {:.3} s = {per:.2} us per participant per tick ({:.0} ns per datagram)",
        if drained { " (receivers drained by 2 threads, each socket once per 20 ms)" } else { "" },
        cpu.as_secs_f64(),
        cpu.as_secs_f64() * 1e9 / sent.max(1) as f64
    );
}
