//! RTCP on a phone leg: a PCMA participant joins through the plain RTP
//! route as a phone (its RTP on port P, its RTCP on P + 1, as RFC 3550
//! has it) and sends 100 packets of which 10 are lost. Within its first
//! seconds tutti's sender report reaches P + 1: tutti's SSRC (the one its
//! audio carries), what it sent, and a reception block on the phone's
//! stream that counts the 10 lost. The phone's own receiver report on
//! tutti's stream is read and counted; one from a stranger's address is not.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use common::{create_room, http, scrape, series, start_with, test_config};

/// Two sockets on adjacent ports (RTP, RTCP).
fn rtp_and_rtcp() -> (UdpSocket, UdpSocket) {
    for _ in 0..100 {
        let rtp = UdpSocket::bind("127.0.0.1:0").expect("bind loopback");
        let port = rtp.local_addr().expect("bound").port();
        if port == u16::MAX {
            continue;
        }
        if let Ok(rtcp) = UdpSocket::bind(("127.0.0.1", port + 1)) {
            return (rtp, rtcp);
        }
    }
    panic!("no two adjacent free ports on loopback");
}

fn rtp(seq: u16, ts: u32, ssrc: u32) -> Vec<u8> {
    let mut p = vec![0x80, 8];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&ts.to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend(std::iter::repeat_n(0xD5, 160));
    p
}

/// A receiver report from `ssrc` on `about`'s stream: `lost` packets lost, up to `highest`.
fn receiver_report(ssrc: u32, about: u32, lost: u32, highest: u32) -> Vec<u8> {
    let mut p = vec![0x81, 201, 0, 7];
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend_from_slice(&about.to_be_bytes());
    p.push(0);
    p.extend_from_slice(&lost.to_be_bytes()[1..]);
    p.extend_from_slice(&highest.to_be_bytes());
    p.extend_from_slice(&[0; 12]);
    p
}

#[test]
fn a_phone_leg_gets_sender_reports_with_its_loss_and_its_reports_are_read() {
    let mut cfg = test_config();
    cfg.rtp_in.trusted = vec!["127.0.0.0/8".into()];
    let (_rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "line");
    let (rtp_sock, rtcp_sock) = rtp_and_rtcp();
    let port = rtp_sock.local_addr().expect("bound").port();
    let offer = format!(
        "v=0\r\no=phone 1 1 IN IP4 127.0.0.1\r\ns=call\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio {port} RTP/AVP 8\r\n"
    );
    let r = http(api, "POST", "/v1/rooms/line/participants", Some("application/sdp"), offer.as_bytes());
    assert_eq!(r.status, 201, "{}", r.body);
    let ours: u16 = r
        .body
        .lines()
        .find_map(|l| l.strip_prefix("m=audio "))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .expect("a port in the answer");
    assert!(r.body.contains(&format!("a=rtcp:{ours}\r\n")), "the answer says where our RTCP comes in: {}", r.body);
    let tutti: SocketAddr = ([127, 0, 0, 1], ours).into();

    // 100 packets (2 s), 10 lost; tutti's audio to the RTP socket tells its SSRC.
    let phone_ssrc = 0x5eed_0001;
    rtp_sock.set_read_timeout(Some(Duration::from_millis(5))).expect("timeout");
    let mut tutti_ssrc = None;
    let mut buf = [0u8; 1500];
    for n in 0..100u16 {
        if n % 10 != 7 {
            rtp_sock.send_to(&rtp(1_000 + n, 160 * u32::from(n), phone_ssrc), tutti).expect("sent");
        }
        std::thread::sleep(Duration::from_millis(15));
        while let Ok((len, _)) = rtp_sock.recv_from(&mut buf) {
            if len >= 12 && buf[1] & 0x7F == 8 {
                tutti_ssrc = Some(u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]));
            }
        }
    }
    let tutti_ssrc = tutti_ssrc.expect("the phone leg was sent its mix");

    // Tutti's sender report on the RTCP port: the first within ~1 s of its
    // first packet, then every 5 s; the latest must count all 10 lost.
    rtcp_sock.set_read_timeout(Some(Duration::from_millis(200))).expect("timeout");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut report = None;
    while Instant::now() < deadline {
        // Keep sending, so the leg stays up.
        let (len, from) = match rtcp_sock.recv_from(&mut buf) {
            Ok(r) => r,
            Err(_) => continue,
        };
        assert_eq!(from, tutti, "RTCP from tutti's RTP port");
        let sr = &buf[..len];
        assert_eq!(sr[1], 200, "a sender report first: {sr:?}");
        assert_eq!(u32::from_be_bytes([sr[4], sr[5], sr[6], sr[7]]), tutti_ssrc, "tutti's SSRC");
        let blocks = sr[0] & 0x1F;
        if blocks == 1 {
            let about = u32::from_be_bytes([sr[28], sr[29], sr[30], sr[31]]);
            let lost = u32::from_be_bytes([0, sr[33], sr[34], sr[35]]);
            let highest = u32::from_be_bytes([sr[36], sr[37], sr[38], sr[39]]);
            report = Some((about, lost, highest));
            if lost == 10 {
                break;
            }
        }
    }
    // The first report may come before the phone's last packets; a later one has them all.
    assert_eq!(report, Some((phone_ssrc, 10, 1_099)), "the block on the phone's stream");

    // The phone's receiver report on tutti's stream is read; a stranger's is not.
    let metrics = server.metrics_addr().expect("metrics on");
    let read = |s: &std::collections::BTreeMap<String, f64>| {
        s.get(&series("tutti_rtp_in_rtcp_reports_total", &[("direction", "in")])).copied().unwrap_or(0.0)
    };
    let before = read(&scrape(metrics));
    rtcp_sock.send_to(&receiver_report(phone_ssrc, tutti_ssrc, 3, 40), tutti).expect("sent");
    let stranger = UdpSocket::bind("127.0.0.1:0").expect("bind loopback");
    stranger.send_to(&receiver_report(phone_ssrc, tutti_ssrc, 3, 40), tutti).expect("sent");
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut after = before;
    while Instant::now() < deadline && after < before + 1.0 {
        std::thread::sleep(Duration::from_millis(300));
        after = read(&scrape(metrics));
    }
    std::thread::sleep(Duration::from_millis(1_200));
    let s = scrape(metrics);
    assert_eq!(read(&s) - before, 1.0, "the phone's report is read, the stranger's is not");
    let out = s.get(&series("tutti_rtp_in_rtcp_reports_total", &[("direction", "out")])).copied().unwrap_or(0.0);
    assert!(out >= 1.0, "sender reports sent: {out}");
}
