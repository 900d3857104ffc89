//! SIP over TCP and TLS, 407 challenges, and dial-out's refusals and
//! authentication, with real peers (Debian's baresip and SIPp, installed
//! with apt-get when missing).
//!
//! - baresip dials `sip:standup@<tutti>;transport=tcp` (TCP on the UDP
//!   port) and, with a self-signed certificate made here (rcgen) as its
//!   `sip_cafile`, `…;transport=tls` on `[sip] tls_listen`: each call talks
//!   both ways (the WebRTC talker hears baresip's 600 Hz, baresip's dump
//!   holds the room's 440 Hz). A raw INVITE over TCP is answered on its
//!   connection, the 200's Contact saying `transport=tcp`.
//! - A trunk with `challenge = "proxy"`: a raw INVITE gets 407 with
//!   `Proxy-Authenticate`; baresip answers it (Proxy-Authorization) and
//!   talks; with a wrong password it gets 403, counted as `credentials`.
//! - TCP connections are bounded: with `max_connections = 2` a third is
//!   closed at once and counted (`reason="connections"`), a stranger's
//!   (127.0.0.2, outside the trunks) is closed, an idle one is closed after
//!   `connection_idle_seconds`.
//! - A certificate file that does not load stops the start, naming it.
//! - Dial-out against a SIPp UAS: one that declines (603) comes back
//!   409 `callee_declined` with `sip_status` 603; one that challenges with
//!   401 or 407 is answered with the trunk's credentials (SIPp checks them)
//!   and the call is answered; the same over TCP (`transport = "tcp"`).

mod common;
mod ops_tools;
#[path = "common/sip.rs"]
mod sip_common;

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{create_room, start_with};
use ops_tools::{ensure_tool, temp_dir};
use sip_common::*;
use tutti_server::{Challenge, Config, OutboundConfig};

/// A TCP port free on 127.0.0.1 (for `tls_listen`).
fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

#[test]
fn baresip_calls_over_tcp_and_talks_with_the_room() {
    let (rt, server, _api, sip, mut webrtc) = room_with_talker("standup");
    let call_seconds = 10;
    let uri = format!("sip:standup@{sip};transport=tcp");
    let mut baresip = Baresip::call(&uri, "", "opus.so", "opus/48000/2", 48_000, call_seconds, &LOCAL);
    talks_both_ways(&mut baresip, &mut webrtc, call_seconds, "baresip over TCP");
    assert!(baresip.log().contains("TCP") || baresip.log().contains("tcp"), "{}", baresip.log());
    rt.block_on(server.shutdown());
}

/// A self-signed certificate for 127.0.0.1 and its key, written to `dir`.
fn certificate(dir: &std::path::Path) -> (String, String) {
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).expect("a certificate");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, made.cert.pem()).expect("write the certificate");
    std::fs::write(&key, made.signing_key.serialize_pem()).expect("write the key");
    (cert.display().to_string(), key.display().to_string())
}

#[test]
fn baresip_calls_over_tls_and_talks_with_the_room() {
    let dir = temp_dir("sip-tls");
    let (cert, key) = certificate(&dir);
    let tls = SocketAddr::from(([127, 0, 0, 1], free_tcp_port()));
    let mut cfg = sip_config("127.0.0.0/8");
    cfg.sip.tls_listen = tls.to_string();
    cfg.sip.tls_cert = cert.clone();
    cfg.sip.tls_key = key;
    let (rt, server, _api, _sip, mut webrtc) = room_with_talker_on(cfg, "standup");
    let call_seconds = 10;
    let uri = format!("sip:standup@{tls};transport=tls");
    let extra = format!("sip_cafile {cert}\n");
    let mut baresip = Baresip::call(&uri, &extra, "opus.so", "opus/48000/2", 48_000, call_seconds, &LOCAL);
    talks_both_ways(&mut baresip, &mut webrtc, call_seconds, "baresip over TLS");
    rt.block_on(server.shutdown());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_certificate_that_does_not_load_stops_the_start_naming_it() {
    let dir = temp_dir("sip-bad-cert");
    let bad = dir.join("cert.pem");
    std::fs::write(&bad, "not a certificate").expect("write");
    let mut cfg = sip_config("127.0.0.0/8");
    cfg.sip.tls_listen = format!("127.0.0.1:{}", free_tcp_port());
    cfg.sip.tls_cert = bad.display().to_string();
    cfg.sip.tls_key = dir.join("missing.pem").display().to_string();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    let err = rt.block_on(tutti_server::Server::start(cfg)).err().expect("the start fails").to_string();
    assert!(err.contains("sip.tls_cert") && err.contains(&bad.display().to_string()), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `trunk_config` with the trunk challenging by 407.
fn proxy_trunk_config() -> Config {
    let mut cfg = trunk_config();
    cfg.sip.trunks[0].challenge = Challenge::Proxy;
    cfg
}

#[test]
fn a_proxy_challenge_trunk_answers_407_takes_proxy_authorization_and_refuses_a_wrong_password() {
    let (rt, server, api, sip, mut webrtc) = room_with_talker_on(proxy_trunk_config(), "standup");

    // A raw INVITE without credentials: 407 with Proxy-Authenticate, no WWW-Authenticate.
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let local = socket.local_addr().expect("bound");
    let invite = format!(
        "INVITE sip:standup@{sip} SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bKproxy1;rport\r\n\
         Max-Forwards: 70\r\nFrom: <sip:caller@{local}>;tag=p1\r\nTo: <sip:standup@{sip}>\r\n\
         Call-ID: proxy-raw\r\nCSeq: 1 INVITE\r\nContact: <sip:caller@{local}>\r\nContent-Length: 0\r\n\r\n"
    );
    socket.send_to(invite.as_bytes(), sip).expect("send");
    socket.set_read_timeout(Some(Duration::from_secs(3))).expect("timeout");
    let mut buf = vec![0u8; 4096];
    let n = socket.recv(&mut buf).expect("an answer");
    let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(answer.starts_with("SIP/2.0 407"), "{answer}");
    let lower = answer.to_ascii_lowercase();
    assert!(lower.contains("proxy-authenticate: digest") && !lower.contains("www-authenticate"), "{answer}");

    // baresip with a wrong password: 403, counted.
    let before = refused(&server, "credentials");
    let wrong = Caller { ip: "127.0.0.1", account: ";auth_user=acme;auth_pass=guess" };
    let baresip = Baresip::dial(sip, "standup", "opus.so", "opus/48000/2", 48_000, 8, &wrong);
    let log = closed_with(&baresip, "403 Forbidden");
    assert!(log.contains("403 Forbidden"), "a wrong password is refused with 403:\n{log}");
    drop(baresip);
    assert!(refused(&server, "credentials") > before, "the wrong password is counted");

    // baresip with the trunk's password answers the 407 and talks.
    let call_seconds = 10;
    let good = Caller { ip: "127.0.0.1", account: GOOD };
    let mut baresip = Baresip::dial(sip, "standup", "opus.so", "opus/48000/2", 48_000, call_seconds, &good);
    let names = wait_roster(api, "standup", Duration::from_secs(6), |n| n.len() == 2);
    assert_eq!(names.len(), 2, "the caller answering the 407 joins: {names:?}\n{}", baresip.log());
    talks_both_ways(&mut baresip, &mut webrtc, call_seconds, "the proxy trunk's caller");
    rt.block_on(server.shutdown());
}

/// Whether the server closed `stream` (a read sees the end) within `within`.
fn closed(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).expect("timeout");
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
    }
}

#[test]
fn tcp_connections_are_bounded_strangers_closed_and_idle_ones_closed() {
    let mut cfg = sip_config("127.0.0.1/32");
    cfg.sip.max_connections = 2;
    cfg.sip.connection_idle_seconds = 5;
    let (rt, server) = start_with(cfg);
    let sip = server.sip_addr().expect("the SIP edge is on");
    let before = refused(&server, "connections");

    let mut first = TcpStream::connect(sip).expect("a first connection");
    let _second = TcpStream::connect(sip).expect("a second connection");
    std::thread::sleep(Duration::from_millis(300));
    let mut third = TcpStream::connect(sip).expect("the third is accepted by the kernel");
    assert!(closed(&mut third, Duration::from_secs(2)), "the third connection is closed at once");
    assert!(refused(&server, "connections") >= before + 1.0, "and counted");

    // From 127.0.0.2, outside the trusted network: closed.
    let stranger = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("a socket");
    stranger.bind(&SocketAddr::from(([127, 0, 0, 2], 0)).into()).expect("bind 127.0.0.2");
    stranger.connect(&sip.into()).expect("connects");
    let mut stranger: TcpStream = stranger.into();
    assert!(closed(&mut stranger, Duration::from_secs(2)), "a stranger's connection is closed");

    // OPTIONS over a held connection is answered; then, idle, it is closed.
    use std::io::Write;
    let local = first.local_addr().expect("bound");
    let options = format!(
        "OPTIONS sip:tutti@{sip} SIP/2.0\r\nVia: SIP/2.0/TCP {local};branch=z9hG4bKtcp1\r\nMax-Forwards: 70\r\n\
         From: <sip:probe@{local}>;tag=t1\r\nTo: <sip:tutti@{sip}>\r\nCall-ID: tcp-options\r\nCSeq: 1 OPTIONS\r\n\
         Content-Length: 0\r\n\r\n"
    );
    first.write_all(options.as_bytes()).expect("send");
    first.set_read_timeout(Some(Duration::from_secs(3))).expect("timeout");
    let mut buf = vec![0u8; 2048];
    let n = first.read(&mut buf).expect("an answer");
    let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(answer.starts_with("SIP/2.0 200"), "OPTIONS over TCP: {answer}");
    let started = Instant::now();
    assert!(closed(&mut first, Duration::from_secs(9)), "an idle connection is closed");
    assert!(started.elapsed() >= Duration::from_secs(3), "after its idle time: {:?}", started.elapsed());
    rt.block_on(server.shutdown());
}

/// A SIPp UAS on 127.0.0.1 running `scenario` once (`transport`: `u1` or `t1`).
struct Uas {
    dir: std::path::PathBuf,
    child: std::process::Child,
    addr: SocketAddr,
}

impl Uas {
    fn start(scenario: &str, transport: &str) -> Self {
        let sipp = ensure_tool("sipp", "sip-tester");
        let dir = temp_dir("sipp-uas");
        std::fs::write(dir.join("uas.xml"), scenario).expect("write the scenario");
        let port = free_sip_port("127.0.0.1");
        let child = Command::new(sipp)
            .current_dir(&dir)
            .args(["-sf", "uas.xml", "-i", "127.0.0.1", "-p", &port.to_string(), "-t", transport, "-m", "1"])
            .args(["-nostdin", "-trace_err", "-trace_msg", "-timeout", "30s"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.join("stderr.log")).expect("a log"))
            .spawn()
            .expect("sipp starts");
        std::thread::sleep(Duration::from_millis(500));
        Self { dir, child, addr: SocketAddr::from(([127, 0, 0, 1], port)) }
    }

    /// SIPp's message trace and errors.
    fn log(&self) -> String {
        let mut all = String::new();
        for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".log") {
                all.push_str(&format!("== {name}\n{}\n", std::fs::read_to_string(entry.path()).unwrap_or_default()));
            }
        }
        all
    }

    /// Whether SIPp ended its one call successfully (exit status 0), within `within`.
    fn succeeded(&mut self, within: Duration) -> bool {
        let end = Instant::now() + within;
        while Instant::now() < end {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }
}

impl Drop for Uas {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A response of SIPp's to the last request: status line, then its own headers.
fn response(status: &str, to_tag: bool, headers: &str, sdp: bool) -> String {
    let tag = if to_tag { ";tag=[pid]SIPpTag01[call_number]" } else { "" };
    let body = if sdp {
        "Content-Type: application/sdp\nContent-Length: [len]\n\nv=0\no=- 1 1 IN IP[local_ip_type] [local_ip]\ns=-\n\
         c=IN IP[media_ip_type] [media_ip]\nt=0 0\nm=audio [media_port] RTP/AVP 0\na=rtpmap:0 PCMU/8000\n"
    } else {
        "Content-Length: 0\n"
    };
    format!(
        "<send><![CDATA[\n{status}\n[last_Via:]\n[last_From:]\n[last_To:]{tag}\n[last_Call-ID:]\n[last_CSeq:]\n\
         Contact: <sip:callee@[local_ip]:[local_port];transport=[transport]>\n{headers}{body}\n]]></send>\n"
    )
}

/// SIPp answering an INVITE with `status` (a decline: 603).
fn declining(status: &str) -> String {
    format!(
        "<?xml version=\"1.0\"?>\n<scenario name=\"decline\">\n<recv request=\"INVITE\"/>\n{}\
         <recv request=\"ACK\"/>\n</scenario>\n",
        response(status, true, "", false)
    )
}

/// SIPp challenging the INVITE (`code` 401 or 407) and answering 200 to
/// the INVITE that answers it, then taking tutti's BYE. A 401's answer is
/// checked by SIPp (`verifyauth`: acme / s3cret); SIPp checks only an
/// `Authorization`, so of a 407's it checks that `Proxy-Authorization`
/// names the user, the realm and the nonce with a response (the digest is
/// the stack's, the same as the 401's).
fn challenging(code: u16) -> String {
    let (status, header, check) = match code {
        407 => (
            "SIP/2.0 407 Proxy Authentication Required",
            "Proxy-Authenticate",
            "<ereg regexp=\"username=&quot;acme&quot;.*realm=&quot;carrier&quot;.*nonce=&quot;5f3a0c1b&quot;.*response=&quot;[0-9a-f]{32}&quot;\" \
             search_in=\"hdr\" header=\"Proxy-Authorization:\" assign_to=\"good\"/>",
        ),
        _ => (
            "SIP/2.0 401 Unauthorized",
            "WWW-Authenticate",
            "<verifyauth assign_to=\"good\" username=\"acme\" password=\"s3cret\"/>",
        ),
    };
    let challenge = format!("{header}: Digest realm=\"carrier\", nonce=\"5f3a0c1b\", algorithm=MD5\n");
    format!(
        "<?xml version=\"1.0\"?>\n<scenario name=\"challenge\">\n<recv request=\"INVITE\"/>\n{}\
         <recv request=\"ACK\"/>\n\
         <recv request=\"INVITE\"><action>{check}</action></recv>\n\
         <nop test=\"good\" next=\"answer\"/>\n{}<recv request=\"ACK\"/>\n<nop next=\"end\"/>\n\
         <label id=\"answer\"/>\n{}<recv request=\"ACK\"/>\n<recv request=\"BYE\"/>\n{}<label id=\"end\"/>\n</scenario>\n",
        response(status, true, &challenge, false),
        response("SIP/2.0 403 Forbidden", true, "", false),
        response("SIP/2.0 200 OK", true, "", true),
        response("SIP/2.0 200 OK", false, "", false),
    )
}

/// The SIP edge on loopback and the outbound trunk `carrier` to `uas`
/// (`transport`), with credentials acme / s3cret.
fn outbound_config(uas: SocketAddr, transport: &str) -> Config {
    let mut cfg = sip_config("127.0.0.0/8");
    cfg.sip.outbound = vec![OutboundConfig {
        name: "carrier".into(),
        address: uas.to_string(),
        transport: transport.into(),
        username: "acme".into(),
        password: "s3cret".into(),
        ..OutboundConfig::default()
    }];
    cfg
}

/// `POST /v1/rooms/{room}/calls` to `uas`, waiting: the status and the JSON answer.
fn dial_out(api: SocketAddr, room: &str, uas: SocketAddr, max_seconds: u64) -> (u16, serde_json::Value) {
    let body = serde_json::json!({"to": format!("sip:callee@{uas}"), "trunk": "carrier", "wait": true,
        "ringing_timeout_seconds": 8, "max_duration_seconds": max_seconds});
    let r = common::http(
        api,
        "POST",
        &format!("/v1/rooms/{room}/calls"),
        Some("application/json"),
        body.to_string().as_bytes(),
    );
    (r.status, serde_json::from_str(&r.body).unwrap_or_default())
}

#[test]
fn a_declining_callee_comes_back_with_603_in_the_api_answer() {
    let uas = Uas::start(&declining("SIP/2.0 603 Decline"), "u1");
    let (rt, server) = start_with(outbound_config(uas.addr, "udp"));
    let api = server.http_addr();
    create_room(api, "declined");
    let (status, body) = dial_out(api, "declined", uas.addr, 5);
    assert_eq!(
        (status, body["code"].as_str(), body["sip_status"].as_u64()),
        (409, Some("callee_declined"), Some(603)),
        "{body}\n{}",
        uas.log()
    );
    assert!(body["call_id"].is_string(), "{body}");
    rt.block_on(server.shutdown());
}

/// Dials a challenging SIPp UAS (`code`) over `transport` (SIPp's `u1`/`t1`).
fn dial_through_a_challenge(code: u16, transport: &str, sipp_transport: &str) {
    let mut uas = Uas::start(&challenging(code), sipp_transport);
    let (rt, server) = start_with(outbound_config(uas.addr, transport));
    let api = server.http_addr();
    create_room(api, "dialled");
    let (status, body) = dial_out(api, "dialled", uas.addr, 2);
    assert_eq!((status, body["state"].as_str()), (201, Some("answered")), "{code}: {body}\n{}", uas.log());
    assert!(uas.succeeded(Duration::from_secs(10)), "SIPp saw good credentials and tutti's BYE:\n{}", uas.log());
    rt.block_on(server.shutdown());
}

#[test]
fn dial_out_answers_a_401_with_the_trunks_credentials() {
    dial_through_a_challenge(401, "udp", "u1");
}

#[test]
fn dial_out_answers_a_407_with_the_trunks_credentials() {
    dial_through_a_challenge(407, "udp", "u1");
}

#[test]
fn dial_out_over_tcp_answers_a_challenge_and_is_answered() {
    dial_through_a_challenge(407, "tcp", "t1");
}

#[test]
fn an_invite_over_tcp_is_answered_on_its_connection_with_a_tcp_contact() {
    use std::io::Write;
    let (rt, server, api, sip, _webrtc) = room_with_talker("standup");
    let mut stream = TcpStream::connect(sip).expect("connects");
    let local = stream.local_addr().expect("bound");
    let sdp = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
               m=audio 40990 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n";
    let invite = format!(
        "INVITE sip:standup@{sip};transport=tcp SIP/2.0\r\nVia: SIP/2.0/TCP {local};branch=z9hG4bKtcpinv1\r\n\
         Max-Forwards: 70\r\nFrom: \"phone\" <sip:phone@{local}>;tag=ti1\r\nTo: <sip:standup@{sip}>\r\n\
         Call-ID: tcp-invite\r\nCSeq: 1 INVITE\r\nContact: <sip:phone@{local};transport=tcp>\r\n\
         Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp}",
        sdp.len()
    );
    stream.write_all(invite.as_bytes()).expect("send");
    stream.set_read_timeout(Some(Duration::from_millis(200))).expect("timeout");
    let mut got = String::new();
    let end = Instant::now() + Duration::from_secs(5);
    let mut buf = vec![0u8; 4096];
    while !got.contains("SIP/2.0 200") && Instant::now() < end {
        if let Ok(n) = stream.read(&mut buf) {
            got.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }
    let ok = got
        .split("SIP/2.0 ")
        .find(|r| r.starts_with("200"))
        .unwrap_or_else(|| panic!("no 200 on the connection: {got}"));
    let contact = ok.lines().find(|l| l.to_ascii_lowercase().starts_with("contact:")).expect("a Contact");
    assert!(contact.to_ascii_lowercase().contains("transport=tcp"), "{contact}");
    assert!(contact.contains(&sip.port().to_string()), "{contact}");
    assert_eq!(wait_roster(api, "standup", Duration::from_secs(3), |n| n.len() == 2).len(), 2, "the caller joined");
    rt.block_on(server.shutdown());
}
