//! `tutti load --transport mixed`: half of twelve simulated participants
//! reach the server over ICE-TCP (an active TCP candidate, RFC 4571 framing),
//! the rest over UDP; everyone connects, loses nothing on loopback and
//! receives the room's audio, and the server counts the TCP connections.
//! Server and generator share this process and a busy machine: a run that
//! misses the bar is run again, up to three times.

mod common;

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tutti_load::{CpuSource, LoadConfig, LoadReport, run};

fn check(report: &LoadReport) -> Result<(), String> {
    let s = &report.summary;
    let fail = |what: &str| Err(format!("{what}\n{}", s.to_text()));
    if (s.connected, s.join_failed) != (12, 0) {
        return fail("not all connected");
    }
    if s.loss_total_percent >= 0.5 {
        return fail("loss on loopback");
    }
    if !report.clients.iter().all(|c| c.figures.received > 150) {
        return fail("a client received under 150 frames");
    }
    Ok(())
}

#[test]
fn half_the_clients_over_tcp_get_clean_audio() {
    let (rt, server, token) = common::loopback_server();
    let mut outcome = Err(String::new());
    let mut attempts = 0;
    for attempt in 1..=3 {
        attempts = attempt;
        let mut load = LoadConfig::new(server.http_addr(), 12);
        load.room = format!("tcp-mixed-{attempt}");
        load.token = Some(token.clone());
        load.tcp_share = 0.5;
        load.join_interval = Duration::from_millis(10);
        load.warmup = Duration::from_secs(1);
        load.window = Some(Duration::from_secs(4));
        load.life = Some(Duration::from_secs(30)); // a bound, should joins stall
        load.talkers = 0.25;
        load.probe_talkers = 2;
        load.probe_listeners = 2;
        load.server_cpu = CpuSource::Process(std::process::id());
        load.leave = true;
        let report = run(&load, &AtomicBool::new(false), &mut |_| {}).expect("the run completes");
        println!("attempt {attempt}:\n{}", report.summary.to_text());
        outcome = check(&report);
        if outcome.is_ok() {
            break;
        }
    }
    if let Err(e) = outcome {
        panic!("{e}");
    }
    let tcp = server.media_stats().tcp;
    assert_eq!(tcp.accepted, 6 * attempts, "six clients over TCP a run: {tcp:?}");
    // Silent clients send DTX (one packet in 20); every client receives the mix.
    assert!(tcp.frames_in > 6 * 20 && tcp.frames_out > 6 * 150, "{tcp:?}");
    assert_eq!(tcp.closed_not_stun + tcp.closed_bad_frame + tcp.closed_stun_timeout, 0, "{tcp:?}");
    rt.block_on(server.shutdown());
}
