//! The SIP tests' shared helpers: a server with the SIP edge on loopback,
//! a raw SIP caller on a UDP socket (requests, responses, headers) and a
//! room with a WebRTC talker.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use tutti_client::{JoinAs, ToneClient};
use tutti_server::Config;

use super::{create_room, room, start_with, test_config};

/// Test settings with the SIP edge on a loopback port, trusting loopback
/// for SIP (`sip_trusted`) and for the callers' RTP.
pub fn sip_config(sip_trusted: &str) -> Config {
    let mut cfg = test_config();
    cfg.rtp_in.trusted = vec!["127.0.0.0/8".into()];
    cfg.sip.enabled = true;
    cfg.sip.listen = "127.0.0.1:0".parse().expect("addr");
    cfg.sip.trusted = vec![sip_trusted.into()];
    cfg
}

/// The names of the room's participants.
pub fn roster(api: SocketAddr, id: &str) -> Vec<String> {
    room(api, id)["participants"]
        .as_array()
        .expect("participants")
        .iter()
        .map(|p| p["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Waits up to `within` for `ok` on the room's roster.
pub fn wait_roster(api: SocketAddr, id: &str, within: Duration, ok: impl Fn(&[String]) -> bool) -> Vec<String> {
    let end = Instant::now() + within;
    loop {
        let names = roster(api, id);
        if ok(&names) || Instant::now() > end {
            return names;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").and_then(|s| s.local_addr()).map(|a| a.port()).expect("a free port")
}

/// A SIP request from the test's UDP socket.
pub fn request(method: &str, ruri: &str, local: SocketAddr, call: &str, sdp: &str) -> String {
    let ctype = if sdp.is_empty() { String::new() } else { "Content-Type: application/sdp\r\n".to_owned() };
    format!(
        "{method} {ruri} SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bK{call};rport\r\nMax-Forwards: 70\r\n\
         From: <sip:probe@{ip}>;tag=t{call}\r\nTo: <{ruri}>\r\nCall-ID: {call}@test\r\nCSeq: 1 {method}\r\n\
         Contact: <sip:probe@{local}>\r\n{ctype}Content-Length: {len}\r\n\r\n{sdp}",
        ip = local.ip(),
        len = sdp.len(),
    )
}

/// The status codes of the responses to `call` within `within` (the last one final).
pub fn statuses(socket: &UdpSocket, call: &str, within: Duration) -> Vec<u16> {
    let end = Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < end {
        let Ok(n) = socket.recv(&mut buf) else { continue };
        let text = String::from_utf8_lossy(&buf[..n]);
        if !text.contains(&format!("Call-ID: {call}@test")) && !text.contains(&format!("i: {call}@test")) {
            continue;
        }
        if let Some(code) = text.strip_prefix("SIP/2.0 ").and_then(|t| t.get(..3)).and_then(|c| c.parse().ok()) {
            got.push(code);
            if code >= 200 {
                break;
            }
        }
    }
    got
}

/// The first message within `within` that `want` takes.
pub fn receive(socket: &UdpSocket, within: Duration, want: impl Fn(&str) -> bool) -> Option<String> {
    let end = Instant::now() + within;
    let mut buf = [0u8; 4096];
    while Instant::now() < end {
        let Ok(n) = socket.recv(&mut buf) else { continue };
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        if want(&text) {
            return Some(text);
        }
    }
    None
}

/// The next request `method` tutti sends (a BYE), within `within`.
pub fn next_request(socket: &UdpSocket, method: &str, within: Duration) -> Option<String> {
    receive(socket, within, |text| text.starts_with(&format!("{method} ")))
}

/// A header's value in a SIP message (full name or compact form).
pub fn header<'a>(msg: &'a str, name: &str, compact: &str) -> &'a str {
    msg.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim().eq_ignore_ascii_case(name) || k.trim().eq_ignore_ascii_case(compact)).then_some(v.trim())
        })
        .unwrap_or_default()
}

/// The final response to `call`'s INVITE, whole.
pub fn final_response(socket: &UdpSocket, call: &str, within: Duration) -> Option<String> {
    receive(socket, within, |text| {
        text.starts_with("SIP/2.0 ")
            && !text.starts_with("SIP/2.0 1")
            && header(text, "Call-ID", "i") == format!("{call}@test")
            && header(text, "CSeq", "").ends_with("INVITE")
    })
}

/// The in-dialog request `method` (CSeq `seq`) of `call` after a 200 whose To carries tutti's tag.
pub fn in_dialog(method: &str, local: SocketAddr, call: &str, to: &str, seq: u32) -> String {
    format!(
        "{method} sip:tutti@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bK{call}{method}{seq};rport\r\n\
         Max-Forwards: 70\r\nFrom: <sip:probe@{ip}>;tag=t{call}\r\nTo: {to}\r\nCall-ID: {call}@test\r\n\
         CSeq: {seq} {method}\r\nContent-Length: 0\r\n\r\n",
        ip = local.ip(),
    )
}

pub fn ask(socket: &UdpSocket, to: SocketAddr, method: &str, ruri: &str, call: &str, sdp: &str) -> Vec<u16> {
    let local = socket.local_addr().expect("bound");
    socket.send_to(request(method, ruri, local, call, sdp).as_bytes(), to).expect("send");
    statuses(socket, call, Duration::from_secs(3))
}

pub fn offer(codec: &str, port: u16) -> String {
    format!(
        "v=0\r\no=t 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
         m=audio {port} RTP/AVP 96\r\na=rtpmap:96 {codec}\r\n"
    )
}

/// A server (`cfg`), a room `id`, and the test's UDP socket (the caller).
pub fn raw_caller(cfg: Config, id: &str) -> (tokio::runtime::Runtime, tutti_server::Server, UdpSocket) {
    let (rt, server) = start_with(cfg);
    create_room(server.http_addr(), id);
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket.set_read_timeout(Some(Duration::from_millis(100))).expect("timeout");
    (rt, server, socket)
}

/// A re-INVITE of `call` (CSeq `seq`) carrying `sdp`.
pub fn reinvite(local: SocketAddr, call: &str, to: &str, seq: u32, sdp: &str) -> String {
    in_dialog_with("INVITE", local, call, to, seq, "", sdp)
}

/// The in-dialog request `method` of `call` with `extra` headers (each
/// ending in CRLF) and `sdp` (none when empty).
pub fn in_dialog_with(
    method: &str,
    local: SocketAddr,
    call: &str,
    to: &str,
    seq: u32,
    extra: &str,
    sdp: &str,
) -> String {
    let head = in_dialog(method, local, call, to, seq);
    let head = head.trim_end_matches("Content-Length: 0\r\n\r\n");
    let ctype = if sdp.is_empty() { "" } else { "Content-Type: application/sdp\r\n" };
    format!("{head}Contact: <sip:probe@{local}>\r\n{extra}{ctype}Content-Length: {}\r\n\r\n{sdp}", sdp.len())
}

/// A server with the SIP edge, room `id` and a WebRTC participant in it
/// playing 440 Hz; the API's and the SIP edge's addresses.
pub fn room_with_talker(
    id: &str,
) -> (tokio::runtime::Runtime, tutti_server::Server, SocketAddr, SocketAddr, ToneClient) {
    room_with_talker_on(sip_config("127.0.0.0/8"), id)
}

/// [`room_with_talker`] on a server with `cfg`.
pub fn room_with_talker_on(
    cfg: Config,
    id: &str,
) -> (tokio::runtime::Runtime, tutti_server::Server, SocketAddr, SocketAddr, ToneClient) {
    let (rt, server) = start_with(cfg);
    let (api, sip) = (server.http_addr(), server.sip_addr().expect("the SIP edge is on"));
    create_room(api, id);
    let webrtc = ToneClient::join(api, id, 440.0, JoinAs::Whip).expect("a WebRTC participant joins");
    (rt, server, api, sip, webrtc)
}
