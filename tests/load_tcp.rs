//! `tutti load --transport mixed`: half of twelve simulated participants
//! reach the server over ICE-TCP (an active TCP candidate, RFC 4571 framing),
//! the rest over UDP; everyone connects, loses nothing on loopback and
//! receives the room's audio, and the server counts the TCP connections.

mod common;

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tutti_load::{CpuSource, LoadConfig, run};

#[test]
fn half_the_clients_over_tcp_get_clean_audio() {
    let (rt, server, token) = common::loopback_server();
    let mut load = LoadConfig::new(server.http_addr(), 12);
    load.room = "tcp-mixed".into();
    load.token = Some(token);
    load.tcp_share = 0.5;
    load.join_interval = Duration::from_millis(10);
    load.warmup = Duration::from_secs(1);
    load.window = Some(Duration::from_secs(4));
    load.life = Some(Duration::from_secs(30)); // a bound, should joins stall
    load.talkers = 0.25;
    load.probe_talkers = 2;
    load.probe_listeners = 2;
    load.server_cpu = CpuSource::Process(std::process::id());
    let report = run(&load, &AtomicBool::new(false), &mut |_| {}).expect("the run completes");
    let s = &report.summary;
    println!("{}", s.to_text());
    assert_eq!((s.connected, s.join_failed), (12, 0), "{}", s.to_text());
    assert!(s.loss_total_percent < 0.5, "{}", s.to_text());
    assert!(report.clients.iter().all(|c| c.figures.received > 150), "{}", s.to_text());
    let tcp = server.media_stats().tcp;
    assert_eq!(tcp.accepted, 6, "six clients over TCP: {tcp:?}");
    // Silent clients send DTX (one packet in 20); every client receives the mix.
    assert!(tcp.frames_in > 6 * 20 && tcp.frames_out > 6 * 150, "{tcp:?}");
    rt.block_on(server.shutdown());
}
