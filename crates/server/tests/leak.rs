//! 1 000 join/leave cycles leak nothing: after them the server holds no
//! participant, peer or route, resident memory is back within 10 % of its
//! value after a warm-up, and the thread and file descriptor counts are
//! unchanged. Every cycle makes a real WebRTC offer and answer; every 20th
//! also connects (ICE, DTLS, SRTP, audio both ways) before leaving. The
//! server runs in this process, so /proc/self tells what it holds. A leak
//! test, not a timing test.

mod common;

use std::time::{Duration, Instant};

use common::{create_room, http, start};
use tutti_client::{JoinAs, ToneClient, run_until};
use tutti_rtc::ClientPeer;
use tutti_server::Resources;

const CYCLES: usize = 1_000;
const WARM_UP: usize = 100;
const CONNECT_EVERY: usize = 20;

/// A field of /proc/self/status, in its unit (kB for memory).
fn status(field: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':')?.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

/// Open file descriptors, by what they point at.
fn fd_targets() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok()).map(|p| p.display().to_string()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// The descriptor count once closing connections are done (at most 3 s).
fn fds_settled(want: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let n = fd_targets().len();
        if n <= want || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn cycle(api: std::net::SocketAddr, i: usize) {
    if i.is_multiple_of(CONNECT_EVERY) {
        let mut c = ToneClient::join(api, "leak", 440.0, JoinAs::Whip).expect("join");
        let heard = run_until(&mut [&mut c], Instant::now() + Duration::from_secs(15), |cs| cs[0].heard.len() >= 5);
        assert!(heard, "cycle {i}: the connecting client hears the room");
        assert_eq!(http(api, "DELETE", &c.location, None, b"").status, 204);
        let closed = run_until(&mut [&mut c], Instant::now() + Duration::from_secs(5), |cs| cs[0].closed);
        assert!(closed, "cycle {i}: the server closed the peer");
    } else {
        let (_, offer) = ClientPeer::new("127.0.0.1:9".parse().expect("addr"), Instant::now()).expect("offer");
        let r = http(api, "POST", "/v1/rooms/leak/participants", Some("application/sdp"), offer.as_bytes());
        assert_eq!(r.status, 201, "cycle {i}: {}", r.body);
        let location = r.header("location").expect("location");
        assert_eq!(http(api, "DELETE", location, None, b"").status, 204, "cycle {i}");
    }
}

/// Waits until the server holds nothing but the room (I/O threads drop peers asynchronously).
fn settle(server: &tutti_server::Server) -> Resources {
    let empty = Resources { rooms: 1, rate_limited_addresses: 0, ..Resources::default() };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = server.resources();
        if r == empty || Instant::now() > deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_thousand_joins_and_leaves_leak_nothing() {
    let (rt, server) = start();
    let api = server.http_addr();
    create_room(api, "leak");
    let started = Instant::now();
    for i in 0..WARM_UP {
        cycle(api, i);
    }
    let before = settle(&server);
    std::thread::sleep(Duration::from_millis(300));
    let (rss0, threads0, fds0) = (status("VmRSS"), status("Threads"), fd_targets().len());
    let fd_list0 = fd_targets();
    for i in 0..CYCLES {
        cycle(api, i);
    }
    let after = settle(&server);
    let (rss1, threads1, fds1) = (status("VmRSS"), status("Threads"), fds_settled(fds0));
    let growth = (rss1 as f64 - rss0 as f64) / rss0 as f64 * 100.0;
    println!(
        "{CYCLES} cycles ({} connected) in {:.1} s: RSS {rss0} kB → {rss1} kB ({growth:+.1} %), \
         threads {threads0} → {threads1}, fds {fds0} → {fds1}, peak RSS {} kB; {after:?}",
        CYCLES / CONNECT_EVERY,
        started.elapsed().as_secs_f64(),
        status("VmHWM"),
    );
    assert_eq!(before, after, "the server holds nothing after the cycles");
    assert_eq!(after.participants + after.registered_peers + after.pending_peers, 0);
    assert_eq!(after.io_peers, 0, "the I/O threads freed every peer");
    assert!(growth <= 10.0, "resident memory grew {growth:.1} % ({rss0} kB → {rss1} kB)");
    assert_eq!(threads1, threads0, "no thread leaked");
    assert_eq!(fds1, fds0, "no file descriptor leaked: before {fd_list0:?}, after {:?}", fd_targets());
    rt.block_on(server.shutdown());
}
