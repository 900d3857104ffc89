//! ICE over TCP (RFC 6544, passive) on the media port: a client that offers
//! only a TCP candidate joins a room over the HTTP API, hears the UDP
//! participants and is heard; TCP abuse (garbage before STUN, an oversized
//! frame, a half-open connection, a slowloris trickle, a flood beyond the
//! per-address cap) is closed and counted while UDP participants in a room
//! keep every packet; several advertised addresses each become a UDP and a
//! TCP candidate, TCP below UDP in priority (with `media_tcp = false`: no
//! TCP candidate and no listener); clients over IPv6 loopback join over UDP
//! and over TCP when the box has `::1`. The TCP client is
//! `tutti_rtc::ClientPeer::new_tcp`, driven by `pump_tcp`
//! (`tutti_client::Transport::Tcp`). Under load the same is run by
//! `tutti load --transport tcp|udp|mixed` (`tests/load_tcp.rs`).

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use common::{create_room, http, start_with, test_config};
use tutti_client::{JoinAs, Requester, ToneClient, Transport, run_until};
use tutti_rtc::{ClientEvent, ClientPeer};

/// How loud `freq` is in what `c` heard after `since`: the median over
/// 100 ms windows (robust to a concealed frame's phase jump on a busy machine).
fn hears(c: &ToneClient, freq: f32, since: Instant) -> f32 {
    let pcm = c.heard_since(since);
    let mut amps: Vec<f32> = pcm.chunks_exact(4800).map(|w| tutti_mix::goertzel(w, freq)).collect();
    if amps.is_empty() {
        return 0.0;
    }
    amps.sort_by(f32::total_cmp);
    amps[amps.len() / 2]
}

fn join(api: SocketAddr, room: &str, freq: f32, transport: Transport) -> ToneClient {
    ToneClient::join_over(api, &Requester::default(), room, freq, JoinAs::Whip, 0, transport)
        .map(|(c, _)| c)
        .expect("join")
}

#[test]
fn a_tcp_only_client_hears_the_room_and_is_heard() {
    let (rt, server) = start_with(test_config());
    let api = server.http_addr();
    create_room(api, "tcp");
    let mut clients = vec![
        join(api, "tcp", 440.0, Transport::Udp),
        join(api, "tcp", 660.0, Transport::Udp),
        join(api, "tcp", 880.0, Transport::Tcp),
    ];
    let mut refs: Vec<&mut ToneClient> = clients.iter_mut().collect();
    let done = run_until(&mut refs, Instant::now() + Duration::from_secs(30), |cs| {
        cs.iter().all(|c| c.sent >= 150 && c.heard.len() >= 140)
    });
    assert!(
        done,
        "every client sent 150 frames and heard 140: {:?}; {:?}",
        clients.iter().map(|c| (c.freq, c.connected, c.closed, c.heard.len())).collect::<Vec<_>>(),
        server.media_stats()
    );
    for c in &clients {
        let (first, last) = (c.heard[0].0, c.heard[c.heard.len() - 1].0);
        let since = first + (last - first) / 4;
        for other in &clients {
            let amp = hears(c, other.freq, since);
            if other.freq == c.freq {
                assert!(amp < 0.01, "{} Hz client hears itself at {amp}", c.freq);
            } else {
                assert!(amp > 0.08, "{} Hz client hears {} Hz only at {amp}", c.freq, other.freq);
            }
        }
    }
    let s = server.media_stats();
    assert_eq!(s.tcp.accepted, 1, "one TCP connection: {s:?}");
    assert_eq!(s.tcp.open, 1, "{s:?}");
    assert!(s.tcp.frames_in >= 150 && s.tcp.frames_out >= 140, "media went over TCP: {s:?}");
    assert_eq!(s.tcp.dropped_out + s.tcp_no_connection, 0, "nothing dropped: {s:?}");
    // The TCP counts show in the metrics (one recorder per process: other
    // tests of this binary add theirs).
    let metrics = server.metrics_addr().expect("metrics on");
    let text = http(metrics, "GET", "/metrics", None, b"").body;
    let value = |name: &str| {
        text.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse::<f64>().ok())).unwrap_or(0.0)
    };
    assert!(value("tutti_media_tcp_accepted_total ") >= 1.0, "{text}");
    assert!(value("tutti_media_tcp_frames_received_total ") >= 150.0, "{text}");
    rt.block_on(server.shutdown());
}

/// A TCP connection from `source` (a loopback address) to `to`.
fn connect_from(source: &str, to: SocketAddr) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    let from: SocketAddr = format!("{source}:0").parse().expect("addr");
    s.bind(&from.into()).expect("bind a loopback source");
    s.connect_timeout(&to.into(), Duration::from_secs(2)).expect("connect");
    let s: TcpStream = s.into();
    s.set_nonblocking(true).expect("nonblocking");
    s
}

/// Whether the server closed the connection (EOF or reset).
fn closed_by_server(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(_) => true,
    }
}

#[test]
fn tcp_abuse_is_closed_and_counted_while_udp_audio_stays_perfect() {
    let mut cfg = test_config();
    cfg.limits.tcp_handshake_timeout_seconds = 1.0;
    cfg.limits.tcp_max_per_ip = 4;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let media = server.media_addr();
    create_room(api, "calm");
    let mut clients = vec![join(api, "calm", 440.0, Transport::Udp), join(api, "calm", 660.0, Transport::Udp)];
    let mut refs: Vec<&mut ToneClient> = clients.iter_mut().collect();
    assert!(
        run_until(&mut refs, Instant::now() + Duration::from_secs(20), |cs| cs.iter().all(|c| c.heard.len() >= 25)),
        "the UDP pair talks before the attack"
    );
    let attack_start = Instant::now();
    // Garbage before STUN, an oversized frame (over the 1500-byte limit), a
    // half-open connection, a slowloris trickle of a frame that never completes.
    let mut garbage = connect_from("127.0.0.2", media);
    garbage.write_all(&[0, 4, b'j', b'u', b'n', b'k']).expect("write");
    let mut oversized = connect_from("127.0.0.3", media);
    oversized.write_all(&[0xFF, 0xFF, 1, 2, 3]).expect("write");
    let mut half_open = connect_from("127.0.0.4", media);
    let mut slowloris = connect_from("127.0.0.6", media);
    slowloris.write_all(&[0x05, 0xDC]).expect("write"); // a 1500-byte frame, to come a byte at a time
    // A flood from one address: 12 connections against a cap of 4 per address.
    let mut flood: Vec<TcpStream> = (0..12).map(|_| connect_from("127.0.0.5", media)).collect();
    let mut trickled = 0;
    let mut refs: Vec<&mut ToneClient> = clients.iter_mut().collect();
    run_until(&mut refs, attack_start + Duration::from_secs(3), |_| {
        let due = (attack_start.elapsed().as_millis() / 100) as usize;
        while trickled < due {
            let _ = slowloris.write(&[0x16]);
            trickled += 1;
        }
        false
    });
    let attack_end = Instant::now();
    assert!(closed_by_server(&mut garbage), "garbage before STUN: closed");
    assert!(closed_by_server(&mut oversized), "oversized frame: closed");
    assert!(closed_by_server(&mut half_open), "half-open: closed after the handshake timeout");
    assert!(closed_by_server(&mut slowloris), "slowloris: closed after the handshake timeout, trickle or not");
    let closed_flood = flood.iter_mut().map(closed_by_server).filter(|c| *c).count();
    assert_eq!(closed_flood, 12, "the flood: refused at once beyond the cap, the rest timed out");
    let s = server.media_stats().tcp;
    assert_eq!(s.closed_not_stun, 1, "{s:?}");
    assert_eq!(s.closed_bad_frame, 1, "{s:?}");
    // The cap (4 per address) is split over the 2 I/O threads: 2 each.
    assert!(s.refused_per_ip >= 8, "at least 8 of the 12 refused: {s:?}");
    assert_eq!(
        s.closed_stun_timeout + s.refused_per_ip,
        2 + 12,
        "half-open, slowloris and the admitted flood connections timed out: {s:?}"
    );
    assert_eq!(s.open, 0, "{s:?}");
    // The UDP participants lost nothing meanwhile: every sequence number of the attack window arrived.
    for c in &clients {
        let seqs: Vec<u16> =
            c.heard.iter().filter(|(at, _)| *at >= attack_start && *at <= attack_end).map(|(_, p)| p.seq).collect();
        assert!(seqs.len() >= 140, "{} Hz client got {} packets in 3 s of attack", c.freq, seqs.len());
        let span = seqs[seqs.len() - 1].wrapping_sub(seqs[0]) as usize + 1;
        assert_eq!(span, seqs.len(), "{} Hz client: no packet lost or reordered during the attack", c.freq);
        let other = if c.freq == 440.0 { 660.0 } else { 440.0 };
        assert!(hears(c, other, attack_start) > 0.08, "{} Hz client still hears {other} Hz", c.freq);
    }
    rt.block_on(server.shutdown());
}

/// The candidate lines of an SDP, component 1 (RTP; the answer repeats them for RTCP).
fn candidates(sdp: &str) -> Vec<String> {
    sdp.lines()
        .filter_map(|l| l.strip_prefix("a=candidate:"))
        .filter(|l| l.split_whitespace().nth(1) == Some("1"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_advertised_address_is_a_udp_and_a_tcp_candidate() {
    let mut cfg = test_config();
    // Documentation addresses: the answer is only read, never dialled.
    cfg.advertise = "127.0.0.1, 203.0.113.7:5000, 2001:db8::7".to_owned();
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let port = server.media_addr().port();
    create_room(api, "many");
    let (_client, offer) = ToneClient::offer(440.0).expect("an offer");
    let r = http(api, "POST", "/v1/rooms/many/participants", Some("application/sdp"), offer.as_bytes());
    assert_eq!(r.status, 201, "{}", r.body);
    let lines = candidates(&r.body);
    let has = |proto: &str, ip: &str, port: u16| {
        lines.iter().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(2).is_some_and(|p| p.eq_ignore_ascii_case(proto))
                && f.get(4) == Some(&ip)
                && f.get(5) == Some(&port.to_string().as_str())
        })
    };
    for (ip, p) in [("127.0.0.1", port), ("203.0.113.7", 5000), ("2001:db8::7", port)] {
        assert!(has("udp", ip, p), "UDP candidate {ip} {p}: {lines:#?}");
        assert!(has("tcp", ip, p), "TCP candidate {ip} {p}: {lines:#?}");
    }
    assert_eq!(lines.len(), 6, "{lines:#?}");
    assert!(lines.iter().filter(|l| l.contains(" tcp ")).all(|l| l.contains("tcptype passive")), "{lines:#?}");
    let priority = |l: &String| l.split_whitespace().nth(3).and_then(|p| p.parse::<u32>().ok()).unwrap_or(0);
    let lowest_udp = lines.iter().filter(|l| l.contains(" udp ")).map(priority).min().unwrap_or(0);
    let highest_tcp = lines.iter().filter(|l| l.contains(" tcp ")).map(priority).max().unwrap_or(u32::MAX);
    assert!(highest_tcp < lowest_udp, "every TCP candidate below every UDP one: {lines:#?}");
    rt.block_on(server.shutdown());
}

#[test]
fn tcp_off_means_no_tcp_candidate_and_no_listener() {
    let mut cfg = test_config();
    cfg.media_tcp = false;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "udp");
    let (_client, offer) = ToneClient::offer(440.0).expect("an offer");
    let r = http(api, "POST", "/v1/rooms/udp/participants", Some("application/sdp"), offer.as_bytes());
    assert_eq!(r.status, 201, "{}", r.body);
    let lines = candidates(&r.body);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].contains(" udp "), "{lines:#?}");
    assert!(TcpStream::connect_timeout(&server.media_addr(), Duration::from_secs(1)).is_err(), "no TCP listener");
    rt.block_on(server.shutdown());
}

/// Joins over IPv6 loopback (UDP and TCP), when the box has `::1`.
#[test]
fn clients_over_ipv6_loopback_join() {
    if UdpSocket::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback here: nothing to test");
        return;
    }
    let mut cfg = test_config();
    cfg.media = "[::1]:0".parse().expect("addr");
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "six");
    let mut peers = Vec::new();
    for tcp in [false, true] {
        let socket = UdpSocket::bind("[::1]:0").expect("bind ::1");
        socket.set_nonblocking(true).expect("nonblocking");
        let (mut peer, offer) = if tcp {
            ClientPeer::new_tcp("::1".parse().expect("ip"), Instant::now()).expect("offer")
        } else {
            ClientPeer::new(socket.local_addr().expect("bound"), Instant::now()).expect("offer")
        };
        let r = http(api, "POST", "/v1/rooms/six/participants", Some("application/sdp"), offer.as_bytes());
        assert_eq!(r.status, 201, "{}", r.body);
        assert!(candidates(&r.body).iter().all(|l| l.contains("::1")), "{}", r.body);
        peer.accept_answer(&r.body, Instant::now()).expect("answer");
        peers.push((peer, socket, tutti_rtc::TcpLink::new(), false));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = vec![0u8; 2048];
    while Instant::now() < deadline && !peers.iter().all(|p| p.3) {
        let now = Instant::now();
        for (peer, socket, link, connected) in &mut peers {
            if peer.is_tcp() {
                let _ = peer.pump_tcp(link, &mut buf, now);
            } else {
                let _ = peer.pump_udp(socket, &mut buf, now);
            }
            while let Some(e) = peer.poll_event() {
                if e == ClientEvent::Connected {
                    *connected = true;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(
        peers.iter().all(|p| p.3),
        "both IPv6 clients connected (UDP, TCP): {:?}",
        peers.iter().map(|p| p.3).collect::<Vec<_>>()
    );
    assert_eq!(server.media_stats().tcp.accepted, 1);
    rt.block_on(server.shutdown());
}
