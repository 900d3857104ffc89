//! Twenty simulated participants against a real tutti server on loopback:
//! everyone connects, nothing is lost, the probes' markers arrive within a
//! plausible mouth-to-ear time, nobody hears themselves, and MOS is high.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tutti_load::{CpuSource, LoadConfig, Progress, run};
use tutti_server::{Config, Server};

#[test]
fn twenty_clients_get_clean_audio() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let cfg = Config {
        http: "127.0.0.1:0".parse().expect("addr"),
        media: "127.0.0.1:0".parse().expect("addr"),
        mix_threads: 2,
        ..Config::default()
    };
    let server = rt.block_on(Server::start(cfg)).expect("server starts");

    let mut load = LoadConfig::new(server.http_addr(), 20);
    load.room = "e2e".into();
    load.join_interval = Duration::from_millis(10);
    load.warmup = Duration::from_secs(1);
    load.window = Some(Duration::from_secs(5));
    load.life = Some(Duration::from_secs(30)); // a bound, should joins stall
    load.marker_period = Duration::from_millis(1500);
    load.probe_talkers = 3;
    load.probe_listeners = 6;
    load.talkers = 0.1;
    load.server_cpu = CpuSource::Process(std::process::id());
    let stop = AtomicBool::new(false);
    let mut summaries = 0;
    let report = run(&load, &stop, &mut |p| {
        if let Progress::Summary(_) = p {
            summaries += 1;
        }
    })
    .expect("the run completes");
    let s = &report.summary;
    println!("{}", s.to_text());

    assert_eq!(s.connected, 20, "all connected: {}", s.to_text());
    assert_eq!(s.join_failed, 0);
    assert!(s.window_s >= 4.5, "measured over the window: {}", s.window_s);
    assert_eq!(s.loss_total_percent, 0.0, "no loss on loopback");
    assert!(s.packets_per_second.min > 40.0, "{:?}", s.packets_per_second);
    assert!(s.mos_p5 > 4.0, "p5 MOS {}", s.mos_p5);
    assert_eq!(s.self_echo, 0, "nobody hears themselves");
    assert!(s.markers_sent >= 3, "markers sent: {}", s.markers_sent);
    assert!(s.latency.pairs >= 10, "latency pairs: {}", s.latency.pairs);
    assert_eq!(s.latency.missed, 0, "every marker heard");
    let p95 = s.latency.p95_ms.expect("mouth-to-ear measured");
    assert!(s.latency.ms.min > 10.0 && p95 < 200.0, "mouth-to-ear {:?}, p95 {p95}", s.latency.ms);
    // A probe talker hears the other probes' markers.
    assert!(report.clients.iter().filter(|c| c.figures.index < 3).all(|c| c.figures.markers_heard > 0));
    assert!(report.clients.iter().all(|c| c.figures.received > 200));
    assert!(s.server_cpu_cores.is_some() && s.generator.cpu_cores.is_some());
    assert!(!report.latencies_ms.is_empty());
    let json = serde_json::to_string(&report).expect("JSON");
    assert!(json.contains("\"mos_p5\""));

    rt.block_on(server.shutdown());
}
