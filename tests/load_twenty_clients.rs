//! Twenty simulated participants against a real tutti server on loopback:
//! everyone connects, nothing is lost, the probes' markers arrive within a
//! plausible mouth-to-ear time, nobody hears themselves, and MOS is high.
//!
//! Server and generator share this process and the machine's cores with
//! whatever else runs. A run the generator itself flags as contended
//! (INVALID, or the machine saturated) and that misses the bar is run again,
//! up to three times; a clean run that misses it fails at once.

mod common;

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tutti_load::{CpuSource, LoadConfig, LoadReport, run};

fn check(report: &LoadReport) -> Result<(), String> {
    let s = &report.summary;
    let fail = |what: &str| Err(format!("{what}\n{}", s.to_text()));
    if s.connected != 20 || s.join_failed != 0 {
        return fail("not all connected");
    }
    if s.window_s < 4.5 {
        return fail("window too short");
    }
    if s.loss_total_percent != 0.0 {
        return fail("loss on loopback");
    }
    if s.packets_per_second.min <= 40.0 {
        return fail("a client received under 40 packets/s");
    }
    if s.mos_p5 <= 4.0 {
        return fail("p5 MOS not above 4");
    }
    if s.self_echo != 0 {
        return fail("a probe heard itself");
    }
    if s.markers_sent < 3 || s.latency.pairs < 10 {
        return fail("too few markers judged");
    }
    if s.latency.missed != 0 {
        return fail("a marker was missed");
    }
    let p95 = s.latency.p95_ms.unwrap_or(f64::INFINITY);
    if s.latency.ms.min <= 10.0 || p95 >= 200.0 {
        return fail("mouth-to-ear implausible");
    }
    // A probe talker hears the other probes' markers.
    if !report.clients.iter().filter(|c| c.figures.index < 3).all(|c| c.figures.markers_heard > 0) {
        return fail("a probe talker heard no marker");
    }
    if !report.clients.iter().all(|c| c.figures.received > 200) {
        return fail("a client received under 200 frames");
    }
    Ok(())
}

#[test]
fn twenty_clients_get_clean_audio() {
    let (rt, server, token) = common::loopback_server();
    // Auth stays on, as `tutti serve` runs: the tester joins with a token.

    let mut outcome = Err(String::new());
    for attempt in 1..=3 {
        let mut load = LoadConfig::new(server.http_addr(), 20);
        load.room = format!("e2e-{attempt}");
        load.token = Some(token.clone());
        load.join_interval = Duration::from_millis(10);
        load.warmup = Duration::from_secs(1);
        load.window = Some(Duration::from_secs(5));
        load.life = Some(Duration::from_secs(30)); // a bound, should joins stall
        load.marker_period = Duration::from_millis(1500);
        load.probe_talkers = 3;
        load.probe_listeners = 6;
        load.talkers = 0.1;
        load.server_cpu = CpuSource::Process(std::process::id());
        let report = run(&load, &AtomicBool::new(false), &mut |_| {}).expect("the run completes");
        let s = &report.summary;
        println!("attempt {attempt}:\n{}", s.to_text());
        assert!(s.server_cpu_cores.is_some() && s.generator.cpu_cores.is_some());
        let json = serde_json::to_string(&report).expect("JSON");
        assert!(json.contains("\"mos_p5\""));
        outcome = check(&report);
        let contended = !s.valid || s.machine_busy.is_some_and(|m| m > 0.95);
        if outcome.is_ok() || !contended {
            break;
        }
    }
    rt.block_on(server.shutdown());
    if let Err(e) = outcome {
        panic!("{e}");
    }
}
