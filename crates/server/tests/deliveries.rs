//! What listeners are sent, through real WebRTC and Opus: one speaker's own
//! frames forwarded (no encode), DTX while nobody speaks, and RTP
//! timestamps that follow the mixer's clock across DTX pauses.

mod common;

use std::time::{Duration, Instant};

use common::{create_room, scrape, start};
use tutti_client::{JoinAs, ToneClient, run_for, run_until};

#[test]
fn one_speaker_is_forwarded_and_silence_is_dtx_on_the_clock() {
    let (rt, server) = start();
    let api = server.http_addr();
    create_room(api, "d");
    let mut talker = ToneClient::join(api, "d", 440.0, JoinAs::Whip).expect("talker joins");
    let mut listener = ToneClient::join(api, "d", 660.0, JoinAs::Whip).expect("listener joins");
    listener.talking = false;
    listener.dtx = true;
    let mut both = [&mut talker, &mut listener];
    assert!(run_until(&mut both, Instant::now() + Duration::from_secs(10), |cs| cs.iter().all(|c| c.connected)));

    // One speaker: the listener hears it, and the mixer encoded nothing for that.
    run_for(&mut both, Duration::from_millis(500));
    let m0 = scrape(server.metrics_addr().expect("metrics on"));
    let since = Instant::now();
    run_for(&mut both, Duration::from_secs(2));
    let m1 = scrape(server.metrics_addr().expect("metrics on"));
    let [talker, listener] = both;
    let tone = listener.hears(440.0, since);
    assert!(tone > 0.05, "the listener hears the talker: {tone}");
    let delta = |name: &str| m1.get(name).copied().unwrap_or(0.0) - m0.get(name).copied().unwrap_or(0.0);
    assert!(
        delta("tutti_mix_forwarded_frames_total") >= 80.0,
        "forwarded {}",
        delta("tutti_mix_forwarded_frames_total")
    );
    assert!(delta("tutti_mix_encodes_total") <= 10.0, "encodes {}", delta("tutti_mix_encodes_total"));
    assert!(talker.hears(440.0, since) < 0.01, "the talker does not hear itself");

    // Nobody speaks: DTX, a frame every 400 ms, stamped with real time.
    talker.talking = false;
    talker.dtx = true;
    let mut both = [talker, listener];
    run_for(&mut both, Duration::from_millis(600));
    let quiet = Instant::now();
    run_for(&mut both, Duration::from_secs(3));
    let [_, listener] = both;
    let heard: Vec<_> =
        listener.heard.iter().filter(|(at, _)| *at >= quiet).map(|(at, p)| (*at, p.timestamp)).collect();
    assert!((5..=11).contains(&heard.len()), "about 7 DTX frames in 3 s, got {}", heard.len());
    let (first, last) = (heard[0], heard[heard.len() - 1]);
    let wall = last.0.duration_since(first.0).as_secs_f64();
    let rtp = f64::from(last.1.wrapping_sub(first.1)) / 48_000.0;
    assert!((rtp - wall).abs() < 0.15, "RTP time {rtp:.3} s follows wall time {wall:.3} s");
    for pair in heard.windows(2) {
        assert_eq!(pair[1].1.wrapping_sub(pair[0].1) % 960, 0, "whole 20 ms frames");
    }
    rt.block_on(server.shutdown());
}
