//! N real WebRTC clients in one process against a running tutti server:
//! loads a room and reports what the clients received, and their own CPU.
//!
//! ```text
//! cargo run --release -- serve &
//! export TOKEN=…   # the admin token `tutti serve` prints (or `tutti token --room '*' --admin …`)
//! cargo run --release --example clients -- 127.0.0.1:8080 50 30 0.1   # API, clients, seconds, talkers
//! ```
//!
//! Joins beyond the server's join rate (`limits.join_rate_per_second` per
//! address; all these clients share 127.0.0.1) are answered 429: they are
//! retried after the `Retry-After` the server gives. For big runs, start
//! the server with `--set limits.join_rate_per_second=0`.
//!
//! Talkers send a tone with its RFC 6464 level; the others send Opus
//! silence marked level 127, every 20 ms, on an absolute schedule. Each
//! client has its own UDP socket on 127.0.0.1.

use std::error::Error;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tutti_mix::{FRAME_SAMPLES, level_of, tone};
use tutti_rtc::{ClientEvent, ClientPeer};
use tutti_server::client::{Caller, Response, request_as};

struct Client {
    peer: ClientPeer,
    socket: UdpSocket,
    talker: bool,
    sent: u64,
    next_send: Option<Instant>,
    received: u64,
    first_seq: Option<u16>,
    last_seq: u16,
}

/// User + system CPU seconds of this process, from /proc.
fn own_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks: f64 = fields.get(11..13).map_or(0.0, |f| f.iter().filter_map(|v| v.parse::<f64>().ok()).sum());
    ticks / 100.0
}

/// Joins the room, waiting out 429s as the server's `Retry-After` says (at most 30 tries).
fn join(api: SocketAddr, caller: &Caller<'_>, offer: &str) -> std::io::Result<Response> {
    let path = "/v1/rooms/load/participants";
    let mut r = request_as(api, caller, "POST", path, Some("application/sdp"), offer.as_bytes())?;
    for _ in 0..30 {
        if r.status != 429 {
            break;
        }
        let wait = r.header("retry-after").and_then(|s| s.parse().ok()).unwrap_or(1u64);
        std::thread::sleep(Duration::from_secs(wait));
        r = request_as(api, caller, "POST", path, Some("application/sdp"), offer.as_bytes())?;
    }
    Ok(r)
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let api: SocketAddr = args.first().map_or("127.0.0.1:8080", String::as_str).parse()?;
    let n: usize = args.get(1).map_or(Ok(10), |s| s.parse())?;
    let seconds: u64 = args.get(2).map_or(Ok(20), |s| s.parse())?;
    let talkers: f64 = args.get(3).map_or(Ok(0.1), |s| s.parse())?;

    let token = std::env::var("TOKEN").ok();
    let caller = Caller { token: token.as_deref(), from: None };
    let r = request_as(api, &caller, "POST", "/v1/rooms", Some("application/json"), br#"{"id":"load"}"#)?;
    if r.status != 201 && r.code() != "room_exists" {
        return Err(format!("creating the room: {} {}", r.status, r.body).into());
    }
    let mut enc = opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Voip)?;
    let talk: Vec<(Bytes, u8)> = (0..50u64)
        .map(|k| {
            let pcm = tone(300.0, 0.2, k * FRAME_SAMPLES as u64);
            Ok((Bytes::from(enc.encode_vec_float(&pcm, 1500)?), level_of(&pcm)))
        })
        .collect::<Result<_, opus::Error>>()?;
    let silence = Bytes::from(enc.encode_vec_float(&[0.0; FRAME_SAMPLES], 1500)?);

    let talker_every = if talkers > 0.0 { (1.0 / talkers).round() as usize } else { usize::MAX };
    let mut clients = Vec::with_capacity(n);
    for i in 0..n {
        let socket = UdpSocket::bind("127.0.0.1:0")?;
        socket.set_nonblocking(true)?;
        let (mut peer, offer) = ClientPeer::new(socket.local_addr()?, Instant::now())?;
        let r = join(api, &caller, &offer)?;
        if r.status != 201 {
            return Err(format!("join {i}: {} {}", r.status, r.body).into());
        }
        peer.accept_answer(&r.body, Instant::now())?;
        let talker = i % talker_every == 0;
        clients.push(Client {
            peer,
            socket,
            talker,
            sent: 0,
            next_send: None,
            received: 0,
            first_seq: None,
            last_seq: 0,
        });
    }
    println!("{n} clients joined ({} talking)", clients.iter().filter(|c| c.talker).count());

    let cpu_start = own_cpu_seconds();
    let start = Instant::now();
    let end = start + Duration::from_secs(seconds);
    let mut buf = vec![0u8; 2048];
    while Instant::now() < end {
        let now = Instant::now();
        for c in &mut clients {
            c.peer.pump_udp(&c.socket, &mut buf, now)?;
            while let Some(event) = c.peer.poll_event() {
                match event {
                    ClientEvent::Connected => c.next_send = Some(now),
                    ClientEvent::Audio(p) => {
                        c.received += 1;
                        c.first_seq.get_or_insert(p.seq);
                        c.last_seq = p.seq;
                    }
                    ClientEvent::Closed => c.next_send = None,
                }
            }
            if let Some(due) = c.next_send.filter(|due| now >= *due) {
                let (payload, level) =
                    if c.talker { talk[(c.sent % 50) as usize].clone() } else { (silence.clone(), 127) };
                let _ = c.peer.send_audio(payload, Some(level), now);
                c.sent += 1;
                c.next_send = Some(due + Duration::from_millis(20));
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = own_cpu_seconds() - cpu_start;

    let connected = clients.iter().filter(|c| c.first_seq.is_some()).count();
    let (mut expected, mut received) = (0u64, 0u64);
    let mut min_rx = u64::MAX;
    for c in &clients {
        if let Some(first) = c.first_seq {
            expected += u64::from(c.last_seq.wrapping_sub(first)) + 1;
            received += c.received;
        }
        min_rx = min_rx.min(c.received);
    }
    let loss = if expected > 0 { 100.0 * (expected.saturating_sub(received)) as f64 / expected as f64 } else { 100.0 };
    println!("{connected}/{n} clients received audio over {elapsed:.1} s");
    println!(
        "packets received: {received} (min per client {min_rx}, {:.1}/s per client), loss {loss:.2} %",
        received as f64 / n as f64 / elapsed
    );
    println!("clients' own CPU: {cpu:.2} s over {elapsed:.1} s ({:.1} % of one core)", 100.0 * cpu / elapsed);
    for c in &mut clients {
        c.peer.close();
        while let Some(t) = c.peer.poll_transmit() {
            let _ = c.socket.send_to(&t.data, t.to);
        }
    }
    Ok(())
}
