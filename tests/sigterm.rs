//! `tutti serve` as a user runs it, stopped with SIGTERM in the middle of a
//! call: WebSocket subscribers are told, every peer gets its DTLS
//! close_notify, the process exits cleanly within the shutdown bound. It
//! runs on the embedded defaults' auth: a generated secret, and the admin
//! token the banner prints.

mod common;

use std::io::BufRead;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use tutti_client::{JoinAs, Requester, ToneClient, request_as, run_until};

#[test]
fn sigterm_tells_everyone_closes_peers_and_exits_in_time() {
    let mut served = common::serve_loopback(&[
        "--set",
        "shutdown_timeout_seconds=3",
        // No drain: this is the stop itself (tests/drain.rs drains first).
        "--set",
        "drain_seconds=0",
    ]);
    let api = served.api;
    let mut line = String::new();
    // "admin token (24 h): export TUTTI_TOKEN=eyJ…"
    let mut token = String::new();
    for _ in 0..10 {
        line.clear();
        served.stdout.read_line(&mut line).expect("banner");
        if let Some(t) = line.split("export TUTTI_TOKEN=").nth(1) {
            token = t.trim().to_owned();
            break;
        }
    }
    assert!(token.starts_with("eyJ"), "the banner prints a ready token: {line:?}");
    let admin = Requester::token(&token);

    let r = request_as(api, &Requester::default(), "POST", "/v1/rooms", Some("application/json"), br#"{"id":"call"}"#)
        .expect("API");
    assert_eq!(r.status, 401, "no token, no room: {}", r.body);
    let r = request_as(api, &admin, "POST", "/v1/rooms", Some("application/json"), br#"{"id":"call"}"#).expect("API");
    assert_eq!(r.status, 201, "{}", r.body);
    let stream = TcpStream::connect(api).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let (mut ws, _) =
        tungstenite::client(format!("ws://{api}/v1/rooms/call/ws?token={token}"), stream).expect("WebSocket");
    ws.get_ref().set_read_timeout(Some(Duration::from_millis(20))).expect("timeout");
    let mut a = ToneClient::join_as(api, &admin, "call", 440.0, JoinAs::Whip).expect("join");
    let mut b = ToneClient::join_as(api, &admin, "call", 660.0, JoinAs::Json).expect("join");
    let mut both = [&mut a, &mut b];
    assert!(
        run_until(&mut both, Instant::now() + Duration::from_secs(15), |cs| cs.iter().all(|c| c.heard.len() > 25)),
        "the call is up"
    );

    let pid = served.pid();
    kill(pid, Signal::SIGTERM).expect("SIGTERM");
    let signalled = Instant::now();

    // Subscribers are told.
    let mut told = false;
    while !told && signalled.elapsed() < Duration::from_secs(5) {
        match ws.read() {
            Ok(tungstenite::Message::Text(t)) => told = t.as_str().contains(r#""type":"shutdown""#),
            Ok(_) => {}
            Err(tungstenite::Error::Io(e)) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
    }
    assert!(told, "the WebSocket said the server is shutting down");
    // Peers are closed with a DTLS alert, not left to time out.
    let closed = run_until(&mut both, Instant::now() + Duration::from_secs(5), |cs| cs.iter().all(|c| c.closed));
    assert!(closed, "both peers got their close_notify");
    // The process exits, successfully, within the bound.
    let status = loop {
        if let Some(status) = served.child.try_wait().expect("wait") {
            break status;
        }
        assert!(signalled.elapsed() < Duration::from_secs(4), "tutti still running 4 s after SIGTERM (bound: 3 s)");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit status {status}");
    let stderr = served.logs();
    assert!(!stderr.contains("panicked"), "no panic: {stderr}");
    assert!(stderr.contains("tutti stopped"), "a clean stop is logged: {stderr}");
}
