//! What recording metrics costs the hot paths, in nanoseconds per call, off
//! (no recorder: what `--metrics off` runs) and on; and what rendering one
//! scrape costs in-process (per-thread CPU read from /proc included).
//!
//! ```text
//! cargo bench --bench metrics
//! ```
//!
//! Per participant per 20 ms tick the current engine calls `packets_in` and
//! `media` once per received datagram, and `packets_out` once per send batch
//! (about one datagram per participant); `tick` runs once per tick for all.

use std::hint::black_box;
use std::time::{Duration, Instant};

use tutti_rtc::MuxStats;
use tutti_server::metrics;

const CALLS: u32 = 2_000_000;

fn time(mut f: impl FnMut(u32)) -> f64 {
    // Warm up, then the best of three runs.
    for i in 0..CALLS / 10 {
        f(i);
    }
    (0..3)
        .map(|_| {
            let start = Instant::now();
            for i in 0..CALLS {
                f(i);
            }
            start.elapsed().as_nanos() as f64 / f64::from(CALLS)
        })
        .fold(f64::INFINITY, f64::min)
}

fn hot_paths() -> Vec<(&'static str, f64)> {
    let mut last = MuxStats::default();
    let mut stats = MuxStats::default();
    let totals =
        metrics::TickTotals { rooms: 1, participants: 1000, speakers: 5, decodes: 5, encodes: 6, ..Default::default() };
    vec![
        ("packets_in(1, 120)", time(|i| metrics::packets_in(1, 120 + u64::from(i & 1)))),
        ("packets_out(1, 120, 0)", time(|i| metrics::packets_out(1, 120 + u64::from(i & 1), 0))),
        (
            "media(): one audio packet more",
            time(|_| {
                stats.audio_in += 1;
                metrics::media(&mut last, black_box(stats));
            }),
        ),
        ("media(): unchanged", time(|_| metrics::media(&mut last, black_box(stats)))),
        ("tick(duration, totals)", time(|i| metrics::tick(Duration::from_micros(u64::from(i % 4000)), &totals))),
    ]
}

fn main() {
    let off = hot_paths();
    metrics::install().expect("the recorder installs");
    let on = hot_paths();
    println!("| call | off (ns) | on (ns) |");
    println!("|---|---:|---:|");
    for ((name, off), (_, on)) in off.iter().zip(&on) {
        println!("| `{name}` | {off:.1} | {on:.1} |");
    }
    let per_participant = on[0].1 + on[1].1 + on[2].1;
    println!(
        "\nper participant per tick (one datagram in, one out, one mux delta): {per_participant:.0} ns on, {:.1} ns off",
        off[0].1 + off[1].1 + off[2].1
    );

    // One render: what a scrape costs before HTTP.
    let renders = 2_000u32;
    let size = metrics::render().len();
    let start = Instant::now();
    for _ in 0..renders {
        black_box(metrics::render());
    }
    let per = start.elapsed() / renders;
    println!(
        "render(): {per:?} per scrape ({size} bytes, {} threads read from /proc)",
        std::fs::read_dir("/proc/self/task").map_or(0, Iterator::count)
    );
}
