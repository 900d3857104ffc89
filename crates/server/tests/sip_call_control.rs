//! SIP call control with a raw SIP caller on a UDP socket (exact protocol
//! checks): session timers (RFC 4028: a refresh keeps the call past its
//! interval, none ends it with tutti's BYE, too short an interval gets 422),
//! a late offer (an INVITE without SDP gets tutti's offer, the ACK answers,
//! the room's mix reaches the caller), a re-INVITE moving the caller's
//! media to a new port (the mix follows) and a hold longer than the peer
//! timeout (the call stays, bounded by `[sip] hold_timeout_seconds`).
//! And a real peer: SIPp (Debian's `sip-tester`) runs
//! `tests/sipp/session_timer.xml`, refreshing, then waiting for tutti's BYE.

mod common;
mod ops_tools;
#[path = "common/sip.rs"]
mod sip_common;

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{create_room, start_with};
use ops_tools::{ensure_tool, temp_dir};
use sip_common::{
    final_response, free_udp_port, header, in_dialog, in_dialog_with, next_request, offer, raw_caller, receive,
    reinvite, request, room_with_talker_on, roster, sip_config, wait_roster,
};
use tutti_client::ToneClient;

/// A new non-blocking RTP socket on loopback and its port.
fn rtp_socket() -> (UdpSocket, u16) {
    let rtp = UdpSocket::bind("127.0.0.1:0").expect("bind an RTP socket");
    rtp.set_nonblocking(true).expect("non-blocking");
    let port = rtp.local_addr().expect("bound").port();
    (rtp, port)
}

/// SIP settings whose callers may stay silent for a minute (they only listen).
fn quiet_callers() -> tutti_server::Config {
    let mut cfg = sip_config("127.0.0.0/8");
    cfg.peer_timeout_seconds = 60.0;
    cfg
}

/// The test's SIP socket (reads wait 100 ms) and its address.
fn sip_socket() -> (UdpSocket, SocketAddr) {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket.set_read_timeout(Some(Duration::from_millis(100))).expect("timeout");
    let local = socket.local_addr().expect("bound");
    (socket, local)
}

/// Runs `talker` for `d`; the RTP packets each of `sockets` received meanwhile.
fn count(talker: &mut ToneClient, sockets: &[&UdpSocket], d: Duration) -> Vec<usize> {
    let end = Instant::now() + d;
    let mut got = vec![0; sockets.len()];
    let mut buf = [0u8; 1500];
    while Instant::now() < end {
        tutti_client::run_for(&mut [&mut *talker], Duration::from_millis(5));
        for (n, socket) in got.iter_mut().zip(sockets) {
            while let Ok(len) = socket.recv(&mut buf) {
                *n += usize::from(len >= 12);
            }
        }
    }
    got
}

/// Calls room `id` at `sip` (call `call`) with `sdp` and `extra` headers;
/// returns the final response (asserted 200) and its To, after the ACK.
fn call(socket: &UdpSocket, sip: SocketAddr, id: &str, call: &str, extra: &str, sdp: &str) -> (String, String) {
    let local = socket.local_addr().expect("bound");
    let invite = request("INVITE", &format!("sip:{id}@{sip}"), local, call, sdp).replacen(
        "Contact:",
        &format!("{extra}Contact:"),
        1,
    );
    socket.send_to(invite.as_bytes(), sip).expect("send");
    let ok = final_response(socket, call, Duration::from_secs(3)).expect("a final answer");
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
    let to = header(&ok, "To", "t").to_owned();
    socket.send_to(in_dialog("ACK", local, call, &to, 1).as_bytes(), sip).expect("send");
    (ok, to)
}

/// Sends `message` (CSeq `seq` of `method`) and returns tutti's 2xx to it.
fn answered(socket: &UdpSocket, sip: SocketAddr, message: &str, seq: u32, method: &str) -> String {
    socket.send_to(message.as_bytes(), sip).expect("send");
    let cseq = format!("{seq} {method}");
    receive(socket, Duration::from_secs(3), |t| {
        t.starts_with("SIP/2.0 ") && !t.starts_with("SIP/2.0 1") && header(t, "CSeq", "") == cseq
    })
    .unwrap_or_else(|| panic!("an answer to {cseq}"))
}

#[test]
fn a_session_timer_refresh_keeps_the_call_and_without_one_tutti_sends_bye() {
    let mut cfg = quiet_callers();
    cfg.sip.min_session_expires_seconds = 2;
    let (rt, server, socket) = raw_caller(cfg, "timer");
    let (api, sip) = (server.http_addr(), server.sip_addr().expect("the SIP edge is on"));
    let local = socket.local_addr().expect("bound");

    // Below the minimum: 422 with tutti's Min-SE.
    let short = request("INVITE", &format!("sip:timer@{sip}"), local, "short", &offer("opus/48000/2", 4000)).replacen(
        "Contact:",
        "Supported: timer\r\nSession-Expires: 1\r\nContact:",
        1,
    );
    socket.send_to(short.as_bytes(), sip).expect("send");
    let refused = final_response(&socket, "short", Duration::from_secs(3)).expect("a final answer");
    assert!(refused.starts_with("SIP/2.0 422"), "{refused}");
    assert_eq!(header(&refused, "Min-SE", ""), "2", "{refused}");

    // 3 s, the caller refreshes: it must within 3 - min(32, 3/3) = 2 s.
    let timer = "Supported: timer\r\nSession-Expires: 3;refresher=uac\r\n";
    let (ok, to) = call(&socket, sip, "timer", "st", timer, &offer("opus/48000/2", 4000));
    assert_eq!(header(&ok, "Session-Expires", "x"), "3;refresher=uac", "{ok}");
    assert!(header(&ok, "Require", "").contains("timer"), "{ok}");
    let started = Instant::now();
    // Refreshes: an UPDATE without SDP, then a re-INVITE with it.
    std::thread::sleep(Duration::from_millis(1500));
    let update = answered(&socket, sip, &in_dialog_with("UPDATE", local, "st", &to, 2, timer, ""), 2, "UPDATE");
    assert!(update.starts_with("SIP/2.0 200"), "{update}");
    assert_eq!(header(&update, "Session-Expires", "x"), "3;refresher=uac", "{update}");
    std::thread::sleep(Duration::from_millis(1500));
    let sdp = offer("opus/48000/2", 4000);
    let again = answered(&socket, sip, &in_dialog_with("INVITE", local, "st", &to, 3, timer, &sdp), 3, "INVITE");
    assert!(again.starts_with("SIP/2.0 200"), "{again}");
    assert_eq!(header(&again, "Session-Expires", "x"), "3;refresher=uac", "{again}");
    socket.send_to(in_dialog("ACK", local, "st", &to, 3).as_bytes(), sip).expect("send");
    std::thread::sleep(Duration::from_millis(1000));
    assert!(started.elapsed() > Duration::from_secs(3), "past the first interval");
    assert_eq!(roster(api, "timer").len(), 1, "refreshed: the call goes on");

    // No refresh now: tutti's BYE within the interval, the caller gone.
    let bye = next_request(&socket, "BYE", Duration::from_secs(4)).expect("tutti sends BYE without a refresh");
    assert_eq!(header(&bye, "Call-ID", "i"), "st@test", "{bye}");
    assert!(wait_roster(api, "timer", Duration::from_secs(2), |n| n.is_empty()).is_empty(), "the caller left");
    rt.block_on(server.shutdown());
}

#[test]
fn a_late_offer_gets_tuttis_offer_and_the_mix_after_the_ack() {
    let (rt, server, api, sip, mut talker) = room_with_talker_on(quiet_callers(), "late");
    let (socket, local) = sip_socket();
    let (rtp, port) = rtp_socket();

    // No SDP: tutti's offer in the 200, the answer in the ACK.
    socket.send_to(request("INVITE", &format!("sip:late@{sip}"), local, "lo", "").as_bytes(), sip).expect("send");
    let ok = final_response(&socket, "lo", Duration::from_secs(3)).expect("a final answer");
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
    assert!(ok.contains("m=audio ") && ok.contains("opus/48000/2") && ok.contains("PCMU/8000"), "tutti offers: {ok}");
    let to = header(&ok, "To", "t").to_owned();
    let answer = offer("opus/48000/2", port);
    socket.send_to(in_dialog_with("ACK", local, "lo", &to, 1, "", &answer).as_bytes(), sip).expect("send");
    assert_eq!(wait_roster(api, "late", Duration::from_secs(3), |n| n.len() == 2).len(), 2, "the caller joined");
    let [heard] = count(&mut talker, &[&rtp], Duration::from_secs(2))[..] else { unreachable!() };
    assert!(heard > 40, "the room's mix reaches the late-offer caller: {heard} packets");

    // An ACK without an answer: the call ends with tutti's BYE, nobody joins.
    socket.send_to(request("INVITE", &format!("sip:late@{sip}"), local, "nosdp", "").as_bytes(), sip).expect("send");
    let ok = final_response(&socket, "nosdp", Duration::from_secs(3)).expect("a final answer");
    let to = header(&ok, "To", "t").to_owned();
    socket.send_to(in_dialog("ACK", local, "nosdp", &to, 1).as_bytes(), sip).expect("send");
    let bye = next_request(&socket, "BYE", Duration::from_secs(3)).expect("BYE for an ACK without SDP");
    assert_eq!(header(&bye, "Call-ID", "i"), "nosdp@test", "{bye}");
    assert_eq!(roster(api, "late").len(), 2, "nobody else joined");
    rt.block_on(server.shutdown());
}

#[test]
fn a_reinvite_to_a_new_port_moves_the_mix_there() {
    let (rt, server, api, sip, mut talker) = room_with_talker_on(quiet_callers(), "moves");
    let (socket, local) = sip_socket();
    let ((first, a), (second, b)) = (rtp_socket(), rtp_socket());
    let (_, to) = call(&socket, sip, "moves", "mv", "", &offer("opus/48000/2", a));
    assert_eq!(wait_roster(api, "moves", Duration::from_secs(3), |n| n.len() == 2).len(), 2);
    let before = count(&mut talker, &[&first, &second], Duration::from_secs(2));
    assert!(before[0] > 40 && before[1] == 0, "the mix goes to the first port: {before:?}");

    let moved = answered(&socket, sip, &reinvite(local, "mv", &to, 2, &offer("opus/48000/2", b)), 2, "INVITE");
    assert!(moved.starts_with("SIP/2.0 200"), "{moved}");
    socket.send_to(in_dialog("ACK", local, "mv", &to, 2).as_bytes(), sip).expect("send");
    count(&mut talker, &[&first, &second], Duration::from_millis(300));
    let after = count(&mut talker, &[&first, &second], Duration::from_secs(2));
    assert!(after[0] == 0 && after[1] > 40, "the mix follows the re-INVITE to the new port: {after:?}");

    // A new address outside [rtp_in] trusted: 488, the leg stays where it was.
    let away = offer("opus/48000/2", a).replace("127.0.0.1", "192.0.2.9");
    let refused = answered(&socket, sip, &reinvite(local, "mv", &to, 3, &away), 3, "INVITE");
    assert!(refused.starts_with("SIP/2.0 488"), "{refused}");
    let still = count(&mut talker, &[&first, &second], Duration::from_secs(1));
    assert!(still[1] > 20, "still the second port: {still:?}");
    rt.block_on(server.shutdown());
}

#[test]
fn a_hold_longer_than_the_peer_timeout_keeps_the_call_until_the_hold_timeout() {
    let mut cfg = sip_config("127.0.0.0/8");
    cfg.peer_timeout_seconds = 1.0;
    cfg.sip.hold_timeout_seconds = 4;
    let (rt, server, socket) = raw_caller(cfg, "held");
    let (api, sip) = (server.http_addr(), server.sip_addr().expect("the SIP edge is on"));
    let local = socket.local_addr().expect("bound");
    let (_rtp, port) = rtp_socket();
    let sdp = offer("opus/48000/2", port);
    let (_, to) = call(&socket, sip, "held", "hd", "", &sdp);
    assert_eq!(wait_roster(api, "held", Duration::from_secs(3), |n| n.len() == 1).len(), 1);
    // The ACK confirmed the dialog (a re-INVITE before it is not taken).
    std::thread::sleep(Duration::from_millis(100));
    let held = answered(&socket, sip, &reinvite(local, "hd", &to, 2, &format!("{sdp}a=sendonly\r\n")), 2, "INVITE");
    assert!(held.contains("a=recvonly"), "{held}");
    socket.send_to(in_dialog("ACK", local, "hd", &to, 2).as_bytes(), sip).expect("send");
    let since = Instant::now();

    // Held and silent for 2.5 peer timeouts: no BYE, still in the room.
    let bye = next_request(&socket, "BYE", Duration::from_millis(2500));
    assert!(bye.is_none(), "a held call is not dropped by the peer timeout: {bye:?}");
    assert_eq!(roster(api, "held").len(), 1, "the held caller stays");

    // A phone that vanished while held still ends, after the hold timeout.
    let bye = next_request(&socket, "BYE", Duration::from_secs(4)).expect("BYE after the hold timeout");
    assert!(since.elapsed() >= Duration::from_secs(4), "not before the hold timeout: {:?}", since.elapsed());
    assert_eq!(header(&bye, "Call-ID", "i"), "hd@test", "{bye}");
    rt.block_on(server.shutdown());
}

#[test]
fn sipp_refreshes_its_session_timer_stays_past_it_and_gets_bye_when_it_stops() {
    let sipp = ensure_tool("sipp", "sip-tester");
    let mut cfg = quiet_callers();
    cfg.sip.min_session_expires_seconds = 2;
    let (rt, server) = start_with(cfg);
    let (api, sip) = (server.http_addr(), server.sip_addr().expect("the SIP edge is on"));
    create_room(api, "sipp");
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sipp/session_timer.xml");
    let dir = temp_dir("sipp-timer");
    let (port, media) = (free_udp_port().to_string(), free_udp_port().to_string());
    let mut child = Command::new(sipp)
        .current_dir(&dir)
        .arg("-sf")
        .arg(&scenario)
        .args(["-s", "sipp", &sip.to_string(), "-i", "127.0.0.1", "-p", &port, "-mp", &media])
        .args(["-m", "1", "-timeout", "20", "-timeout_error", "-nostdin", "-trace_err", "-trace_logs"])
        .stdout(Stdio::null())
        .spawn()
        .expect("sipp starts");
    let logs = || {
        let files = std::fs::read_dir(&dir).into_iter().flatten().flatten();
        files.map(|f| std::fs::read_to_string(f.path()).unwrap_or_default()).collect::<Vec<_>>().join("\n")
    };
    // Past the first 3 s interval, refreshed: still in.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(roster(api, "sipp").len(), 1, "SIPp's refreshed call goes on\n{}", logs());
    let end = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("sipp runs") {
            break status;
        }
        if Instant::now() > end {
            child.kill().ok();
            panic!("SIPp did not finish\n{}", logs());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "SIPp's scenario (refreshes, then tutti's BYE) failed: {status}\n{}", logs());
    assert!(wait_roster(api, "sipp", Duration::from_secs(2), |n| n.is_empty()).is_empty(), "the caller left");
    rt.block_on(server.shutdown());
}
