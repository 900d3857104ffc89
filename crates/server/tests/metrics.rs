//! `GET /metrics` after a short real call: the mixer, media, API, per-thread
//! and process metrics are there with plausible values, labels carry route
//! templates and never a room or participant id, and a peer that leaves
//! leaves the connected gauge.

mod common;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use common::{http, scrape, series, start};
use tutti_client::{JoinAs, ToneClient};

#[test]
fn a_call_shows_up_in_the_metrics() {
    let (rt, server) = start();
    let api = server.http_addr();
    let metrics = server.metrics_addr().expect("metrics are on");
    assert_eq!(http(api, "POST", "/v1/rooms", Some("application/json"), br#"{"id":"duo"}"#).status, 201);
    assert_eq!(http(api, "GET", "/v1/rooms/ghost-room", None, b"").status, 404);
    let mut clients = vec![
        ToneClient::join(api, "duo", 440.0, JoinAs::Whip).expect("join"),
        ToneClient::join(api, "duo", 660.0, JoinAs::Whip).expect("join"),
    ];
    let garbage = UdpSocket::bind("127.0.0.1:0").expect("bind");
    for i in 0..10u8 {
        garbage.send_to(&[i; 32], server.media_addr()).expect("send");
    }

    let limit = Instant::now() + Duration::from_secs(20);
    while Instant::now() < limit && clients.iter().any(|c| c.sent < 100 || c.heard.len() < 90) {
        let now = Instant::now();
        for c in &mut clients {
            c.pump(now);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(clients.iter().all(|c| c.heard.len() >= 90), "the call ran");

    let m = scrape(metrics);
    let get = |name: &str, labels: &[(&str, &str)]| {
        let key = series(name, labels);
        *m.get(&key).unwrap_or_else(|| panic!("no series {key} in {m:#?}"))
    };
    // Mixer.
    assert!(get("tutti_mix_ticks_total", &[]) >= 100.0);
    assert!(get("tutti_mix_tick_duration_seconds_count", &[]) >= 100.0);
    assert!(get("tutti_mix_tick_duration_seconds_bucket", &[("le", "+Inf")]) >= 100.0);
    assert_eq!(get("tutti_mix_rooms", &[]), 1.0);
    assert_eq!(get("tutti_mix_participants", &[]), 2.0);
    assert!(get("tutti_mix_speakers", &[]) >= 1.0);
    assert!(get("tutti_mix_decodes_total", &[]) >= 90.0);
    assert!(get("tutti_mix_encodes_total", &[]) >= 100.0);
    // Exported (whether a tick overran depends on how busy the machine is: a
    // timing figure, not behaviour).
    assert!(get("tutti_mix_tick_overruns_total", &[]) >= 0.0);
    // Two talkers: the mix, not pass-through; the series are there all the same.
    assert!(get("tutti_mix_forwarded_frames_total", &[]) >= 0.0);
    assert!(get("tutti_mix_dtx_frames_total", &[]) >= 0.0);
    assert!(get("tutti_mix_shed_level", &[]) >= 0.0);
    // Media.
    let packets_in = get("tutti_media_packets_received_total", &[]);
    assert!(packets_in >= 180.0, "{packets_in}");
    assert!(get("tutti_media_received_bytes_total", &[]) > 20.0 * packets_in);
    assert!(get("tutti_media_packets_sent_total", &[]) >= 180.0);
    assert!(get("tutti_media_sent_bytes_total", &[]) > 0.0);
    assert!(get("tutti_media_audio_packets_received_total", &[]) >= 180.0);
    assert!(get("tutti_media_audio_packets_sent_total", &[]) >= 180.0);
    // Lean is the default: every audio packet went out on it.
    assert_eq!(get("tutti_media_lean_packets_sent_total", &[]), get("tutti_media_audio_packets_sent_total", &[]));
    assert!(get("tutti_media_unrouted_packets_total", &[]) >= 10.0);
    assert_eq!(get("tutti_media_peers", &[("state", "connected")]), 2.0);
    assert_eq!(get("tutti_media_peers", &[("state", "connecting")]), 0.0);
    assert_eq!(get("tutti_media_peer_failures_total", &[("kind", "ice")]), 0.0);
    assert_eq!(get("tutti_media_jitter_lost_frames_total", &[]), 0.0, "loopback loses nothing");
    // API: route templates, never ids.
    let join = [("method", "POST"), ("route", "/v1/rooms/{room}/participants"), ("status", "201")];
    assert_eq!(get("tutti_api_requests_total", &join), 2.0);
    assert_eq!(
        get("tutti_api_requests_total", &[("method", "GET"), ("route", "/v1/rooms/{room}"), ("status", "404")]),
        1.0
    );
    assert_eq!(get("tutti_api_join_duration_seconds_count", &[]), 2.0);
    assert!(m.keys().all(|k| !k.contains("ghost-room") && !k.contains("duo")), "no ids in labels");
    // Threads, by role, and the process.
    for thread in ["mix-0", "mix-1", "mix-clock", "io-0", "api-0", "api-1"] {
        assert!(get("tutti_thread_cpu_seconds_total", &[("thread", thread)]) >= 0.0);
    }
    // A call this light is mixed on mix-clock itself (the pool takes heavy ticks).
    let mix_cpu = ["mix-0", "mix-1", "mix-clock"]
        .iter()
        .map(|t| get("tutti_thread_cpu_seconds_total", &[("thread", t)]))
        .sum::<f64>();
    assert!(mix_cpu > 0.0, "the mixer spent CPU on the call");
    let process_cpu = get("process_cpu_seconds_total", &[]);
    let threads_cpu: f64 =
        m.iter().filter(|(k, _)| k.starts_with("tutti_thread_cpu_seconds_total{")).map(|(_, v)| v).sum();
    assert!(threads_cpu <= process_cpu + 0.05, "threads {threads_cpu} s, process {process_cpu} s");
    assert!(get("process_resident_memory_bytes", &[]) > 1e6);
    assert!(get("process_open_fds", &[]) >= 5.0);
    assert!(get("process_max_fds", &[]) >= get("process_open_fds", &[]));
    assert!(get("process_threads", &[]) >= 7.0);

    // One leaves: the connected gauge follows within a few I/O turns.
    let location = "/v1/rooms/duo/participants/1";
    assert_eq!(http(api, "DELETE", location, None, b"").status, 204);
    let limit = Instant::now() + Duration::from_secs(5);
    let mut connected = 2.0;
    while Instant::now() < limit && connected != 1.0 {
        std::thread::sleep(Duration::from_millis(20));
        connected = scrape(metrics)[&series("tutti_media_peers", &[("state", "connected")])];
    }
    assert_eq!(connected, 1.0);
    rt.block_on(server.shutdown());
}
