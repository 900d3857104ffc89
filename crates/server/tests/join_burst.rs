//! A burst of joins far above the rate limit, from one address, while a
//! call runs: the excess is refused cleanly (429 `rate_limited` with
//! `Retry-After`, nothing half-made), and the call's participants keep
//! receiving every frame (loopback: no loss allowed).

mod common;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{create_room, start_with, test_config};
use tutti_client::{JoinAs, Requester, ToneClient, request_as, run_until};

const THREADS: usize = 8;
/// The flood lasts this long, or until each thread has made `MAX_PER_THREAD` joins.
const FLOOD: Duration = Duration::from_secs(3);
const MAX_PER_THREAD: usize = 2_000;
const RATE: f64 = 2.0;
const BURST: u32 = 5;

#[test]
fn a_join_flood_is_refused_and_the_call_goes_on() {
    let mut cfg = test_config();
    cfg.limits.join_rate_per_second = RATE;
    cfg.limits.join_burst = BURST;
    cfg.peer_timeout_seconds = 3.0;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    create_room(api, "call");
    let mut call: Vec<ToneClient> =
        [440.0, 660.0, 880.0].iter().map(|&f| ToneClient::join(api, "call", f, JoinAs::Whip).expect("join")).collect();
    let mut refs: Vec<&mut ToneClient> = call.iter_mut().collect();
    assert!(
        run_until(&mut refs, Instant::now() + Duration::from_secs(20), |cs| cs.iter().all(|c| c.heard.len() > 50)),
        "the call is up"
    );
    let before: Vec<usize> = refs.iter().map(|c| c.heard.len()).collect();

    // The flood: another address, real offers, as fast as 8 threads go.
    let offer = Arc::new(ToneClient::offer(100.0).expect("offer").1);
    let flood_started = Instant::now();
    let flood: Vec<_> = (0..THREADS)
        .map(|_| {
            let offer = offer.clone();
            std::thread::spawn(move || {
                // The flood stands for clients elsewhere: it gets what CPU the server leaves.
                let _ = tutti_server::lower_thread_priority(19);
                let requester = Requester { token: None, from: Some("127.0.0.2".parse::<IpAddr>().expect("ip")) };
                let mut answers = Vec::new();
                while flood_started.elapsed() < FLOOD && answers.len() < MAX_PER_THREAD {
                    let r = request_as(
                        api,
                        &requester,
                        "POST",
                        "/v1/rooms/call/participants",
                        Some("application/sdp"),
                        offer.as_bytes(),
                    )
                    .expect("the API answers");
                    answers.push((r.status, r.code(), r.header("retry-after").map(str::to_owned)));
                }
                answers
            })
        })
        .collect();
    // The call goes on meanwhile.
    while !flood.iter().all(std::thread::JoinHandle::is_finished) {
        let now = Instant::now();
        for c in refs.iter_mut() {
            c.pump(now);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let flood_took = flood_started.elapsed();
    let answers: Vec<(u16, String, Option<String>)> =
        flood.into_iter().flat_map(|t| t.join().expect("flood thread")).collect();
    tutti_client::run_for(&mut refs, Duration::from_secs(1));
    let window = flood_started.elapsed();

    let admitted = answers.iter().filter(|a| a.0 == 201).count();
    let refused: Vec<_> = answers.iter().filter(|a| a.0 != 201).collect();
    assert!(
        refused.iter().all(|(status, code, retry)| *status == 429 && code == "rate_limited" && retry.is_some()),
        "every refusal is a 429 rate_limited with Retry-After: {:?}",
        refused.iter().find(|a| a.0 != 429 || a.1 != "rate_limited" || a.2.is_none())
    );
    let allowed = f64::from(BURST) + RATE * flood_took.as_secs_f64() + 1.0;
    assert!((admitted as f64) <= allowed, "{admitted} admitted in {flood_took:?}: the limit allows {allowed:.0}");
    assert!(admitted >= BURST as usize, "the burst itself is admitted: {admitted}");

    // Every frame of the call arrived while the flood ran, in order, none lost.
    let expected = window.as_millis() as f64 / 20.0;
    let mut figures = Vec::new();
    for (c, &from) in refs.iter().zip(&before) {
        let heard = &c.heard[from..];
        let gaps = heard.windows(2).filter(|w| w[1].1.seq != w[0].1.seq.wrapping_add(1)).count();
        let max_gap = heard.windows(2).map(|w| w[1].0 - w[0].0).max().unwrap_or_default();
        figures.push((heard.len(), gaps, max_gap));
        assert_eq!(gaps, 0, "{} Hz: no frame lost or reordered during the flood", c.freq);
        // One frame per 20 ms tick: all of them, but for the window's two edges.
        assert!(heard.len() as f64 >= expected - 3.0, "{} Hz heard {} of ~{expected:.0} frames", c.freq, heard.len());
    }
    println!(
        "flood: {} joins from one address in {flood_took:?}: {admitted} admitted, {} refused (429); \
         the call's 3 clients in {window:?} (~{expected:.0} frames each): (frames, gaps, largest inter-arrival) {figures:?}; \
         mixer overruns {}",
        answers.len(),
        refused.len(),
        server.tick_overruns()
    );
    // The admitted joiners never connect: they are timed out and freed.
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.participants() > 3 && Instant::now() < deadline {
        tutti_client::run_for(&mut refs, Duration::from_millis(100));
    }
    assert_eq!(server.participants(), 3, "the flood's admitted joiners were timed out");
    assert_eq!(server.resources().pending_peers, 0);
    rt.block_on(server.shutdown());
}
