//! What data messages cost the server: N room sockets in one room, and
//! messages sent to all of them at RATE per second for SECONDS, from the
//! backend route (`POST /v1/rooms/{room}/data`: one sender; raise the
//! sender's limit for rates above 10/s). Each message is serialized once
//! and written to every socket, so the figure that matters is the server's
//! CPU per delivery (one message to one socket) and the bytes per socket.
//!
//!   target/release/tutti serve --set auth.disabled=true --set room.empty_timeout_seconds=0 \
//!     --set limits.max_connections_per_address=4000 --set limits.data_messages_per_second=1000 \
//!     --set limits.data_message_burst=1000
//!   cargo run --release --example data_fanout -- 127.0.0.1:8080 <server pid> [SOCKETS] [RATE] [SECONDS] [BYTES]
//!
//! Defaults: 1,000 sockets, 100 messages a second (ten senders at 10/s),
//! 20 s, a 100-byte payload. The server's CPU is read from
//! `/proc/<pid>/stat` (user + system) over the sending window; every
//! socket's messages are counted, so a socket that missed some shows.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const ROOM: &str = "fanout";

/// One HTTP/1.1 request (a fresh connection), its status.
fn http(api: SocketAddr, method: &str, path: &str, body: &str) -> u16 {
    let mut s = TcpStream::connect(api).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {api}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("send");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// The process's CPU time so far (user + system), from `/proc/<pid>/stat`.
fn cpu_of(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the server's /proc/<pid>/stat");
    // Fields after the command's closing parenthesis: utime is the 14th field of the line, stime the 15th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    // After the command: state (0), …, utime (11), stime (12).
    let ticks = field(11) + field(12);
    // /proc counts in USER_HZ, 100 on Linux whatever the kernel's own tick.
    Duration::from_millis(ticks * 10)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let api: SocketAddr = args
        .first()
        .and_then(|a| a.parse().ok())
        .expect("usage: data_fanout ADDR PID [SOCKETS] [RATE] [SECONDS] [BYTES]");
    let pid: u32 = args.get(1).and_then(|a| a.parse().ok()).expect("the server's pid");
    let n: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let rate: u64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(100);
    let seconds: u64 = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(20);
    let bytes: usize = args.get(5).and_then(|a| a.parse().ok()).unwrap_or(100);
    let created = http(api, "POST", "/v1/rooms", &format!("{{\"id\":\"{ROOM}\"}}"));
    assert!(matches!(created, 201 | 409), "the room: HTTP {created}");

    // The sockets, each read to its snapshot, then non-blocking.
    let mut sockets = Vec::with_capacity(n);
    for i in 0..n {
        let stream = TcpStream::connect(api).unwrap_or_else(|e| panic!("socket {i}: {e}"));
        stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        let (mut ws, _) = tungstenite::client(format!("ws://{api}/v1/rooms/{ROOM}/ws?events="), stream)
            .unwrap_or_else(|e| panic!("socket {i}: {e}"));
        let _ = ws.read().expect("the snapshot");
        ws.get_mut().set_nonblocking(true).expect("non-blocking");
        sockets.push(ws);
    }
    println!("{n} sockets open in room {ROOM}");

    // Two readers (as the load tool's two workers), counting every data message and its bytes.
    let stop = Arc::new(AtomicBool::new(false));
    let (got, got_bytes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let per_socket: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    let half = n.div_ceil(2);
    let mut readers = Vec::new();
    let mut chunks: Vec<Vec<(usize, tungstenite::WebSocket<TcpStream>)>> = vec![Vec::new(), Vec::new()];
    for (i, ws) in sockets.into_iter().enumerate() {
        chunks[usize::from(i >= half)].push((i, ws));
    }
    for mut chunk in chunks {
        let (stop, got, got_bytes, per_socket) = (stop.clone(), got.clone(), got_bytes.clone(), per_socket.clone());
        readers.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mut any = false;
                for (i, ws) in &mut chunk {
                    while let Ok(msg) = ws.read() {
                        if let tungstenite::Message::Text(t) = msg {
                            any = true;
                            if t.as_str().contains("\"type\":\"data\"") {
                                got.fetch_add(1, Ordering::Relaxed);
                                got_bytes.fetch_add(t.len() as u64, Ordering::Relaxed);
                                per_socket[*i].fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
                if !any {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }));
    }

    let payload = "x".repeat(bytes);
    let body = format!("{{\"topic\":\"bench\",\"payload\":\"{payload}\"}}");
    let path = format!("/v1/rooms/{ROOM}/data");
    let (cpu0, t0) = (cpu_of(pid), Instant::now());
    let mut sent = 0u64;
    let mut refused = 0u64;
    while t0.elapsed() < Duration::from_secs(seconds) {
        let due = (t0.elapsed().as_secs_f64() * rate as f64) as u64;
        while sent + refused < due {
            if http(api, "POST", &path, &body) == 202 { sent += 1 } else { refused += 1 }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let (cpu, wall) = (cpu_of(pid) - cpu0, t0.elapsed());
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        let _ = r.join();
    }
    let (got, got_bytes) = (got.load(Ordering::Relaxed), got_bytes.load(Ordering::Relaxed));
    let counts: Vec<u64> = per_socket.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    let min = counts.iter().min().copied().unwrap_or(0);
    let short = counts.iter().filter(|c| **c < sent).count();
    println!(
        "sent {sent} messages ({refused} refused) in {:.1} s to {n} sockets: {got} deliveries ({:.1} % of {}), every socket at least {min}, {short} short",
        wall.as_secs_f64(),
        100.0 * got as f64 / (sent as f64 * n as f64).max(1.0),
        sent * n as u64
    );
    println!(
        "server CPU {:.2} s over {:.1} s ({:.1} % of one core): {:.2} µs per delivery, {:.0} µs per message sent",
        cpu.as_secs_f64(),
        wall.as_secs_f64(),
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
        cpu.as_secs_f64() * 1e6 / (got.max(1) as f64),
        cpu.as_secs_f64() * 1e6 / (sent.max(1) as f64)
    );
    println!(
        "per socket: {:.0} bytes/s of data messages ({:.0} bytes each)",
        got_bytes as f64 / n as f64 / wall.as_secs_f64(),
        got_bytes as f64 / got.max(1) as f64
    );
}
