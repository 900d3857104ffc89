//! The media threads run above the default priority and the API threads
//! below it (per-thread nice values, read back from /proc).

mod common;

use std::collections::BTreeMap;

#[test]
fn media_threads_run_above_the_api_threads() {
    let (rt, server) = common::start();
    let root = rustix::process::geteuid().is_root();
    // Root has CAP_SYS_NICE: the default −10 is granted; others keep 0 (and a warning is logged).
    let media = if root { -10 } else { 0 };
    let names = ["io-0", "io-1", "mix-0", "mix-1", "mix-clock"];
    // A new thread names itself and sets its priority when it first runs:
    // give them a moment.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let nice = loop {
        let nice: BTreeMap<String, i64> =
            tutti_procfs::thread_stats("self").into_iter().map(|(_, s)| (s.comm, s.nice)).collect();
        if names.iter().all(|n| nice.get(*n) == Some(&media)) || std::time::Instant::now() > deadline {
            break nice;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    for name in names {
        assert_eq!(nice.get(name), Some(&media), "{name}: {nice:?}");
    }
    assert_eq!(nice.get("api-0"), Some(&5), "{nice:?}");
    rt.block_on(server.shutdown());
}
