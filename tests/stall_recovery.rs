//! A mixer that misses its deadline (here: the whole server stopped for
//! half a second, as a starved machine would stop it) counts the ticks it
//! skipped, says so in its log, and recovers without lasting delay: the
//! outgoing RTP timestamps jump by the frames it missed, so listeners
//! conceal a gap and their stream stays on real time.

mod common;

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use tutti_client::{JoinAs, ToneClient, request, run_for, run_until};

/// Wall time minus RTP time of each packet heard in `[from, to)`, in
/// seconds, both counted from the first packet heard (RTP time wraps).
fn offsets(c: &ToneClient, from: Instant, to: Instant) -> Vec<f64> {
    let Some((t0, first)) = c.heard.first().map(|(at, p)| (*at, p.timestamp)) else { return vec![f64::NAN] };
    c.heard
        .iter()
        .filter(|(at, _)| *at >= from && *at < to)
        .map(|(at, p)| at.duration_since(t0).as_secs_f64() - f64::from(p.timestamp.wrapping_sub(first)) / 48_000.0)
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

#[test]
fn a_stalled_mixer_counts_logs_and_recovers_without_growing_delay() {
    let (served, metrics) = common::serve_open_with_metrics(&[]);
    let api = served.api;
    // The rest of the banner is a few lines: the pipe holds them.

    let r = request(api, "POST", "/v1/rooms", Some("application/json"), br#"{"id":"stall"}"#).expect("API");
    assert_eq!(r.status, 201, "{}", r.body);
    let mut talker = ToneClient::join(api, "stall", 440.0, JoinAs::Whip).expect("join");
    let mut listener = ToneClient::join(api, "stall", 660.0, JoinAs::Whip).expect("join");
    listener.talking = false;
    listener.dtx = true;
    let mut both = [&mut talker, &mut listener];
    assert!(run_until(&mut both, Instant::now() + Duration::from_secs(10), |cs| cs.iter().all(|c| c.connected)));
    let t0 = Instant::now();
    run_for(&mut both, Duration::from_secs(2));
    let before_end = Instant::now();

    // The stall: nothing of the server runs for half a second (25 ticks).
    let pid = served.pid();
    kill(pid, Signal::SIGSTOP).expect("stop");
    run_for(&mut both, Duration::from_millis(500));
    kill(pid, Signal::SIGCONT).expect("continue");
    run_for(&mut both, Duration::from_secs(3));
    let end = Instant::now();
    let [_, listener] = both;

    // The stream is back on real time: the offset between arrival and RTP
    // time after the stall is what it was before it, not half a second more.
    let before = median(offsets(listener, t0 + Duration::from_millis(500), before_end));
    let after = median(offsets(listener, end - Duration::from_secs(1), end));
    eprintln!("arrival − RTP time: {before:.3} s before the stall, {after:.3} s after");
    assert!((after - before).abs() < 0.1, "delay grew by {:.3} s after the stall", after - before);
    assert!(listener.hears(440.0, end - Duration::from_secs(1)) > 0.05, "the listener hears the talker again");

    // Counted and logged.
    let overruns = common::metric(metrics, "tutti_mix_tick_overruns_total");
    assert!(overruns >= 15.0, "the skipped ticks are counted: {overruns}");
    kill(pid, Signal::SIGTERM).expect("term");
    let mut served = served;
    let _ = served.child.wait();
    let logs = served.logs();
    assert!(logs.contains("mixer fell behind; ticks skipped"), "and logged:\n{logs}");
}
