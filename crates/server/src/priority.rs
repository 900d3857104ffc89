//! Scheduling priority of the server's threads (Linux: per thread).
//!
//! The media threads (`io-N`, `mix-N`, `mix-clock`) must keep their 20 ms
//! deadline when other processes on the machine are busy but the machine
//! is not saturated: they run at `media_thread_nice` (default −10), above
//! everything at the default 0. The API threads run at +5 (below the
//! media threads even without privileges). Raising priority needs
//! `CAP_SYS_NICE` (root, or `setcap cap_sys_nice+ep` on the binary, or the
//! capability granted by the container runtime); without it the media
//! threads keep nice 0 and one warning says so.

use std::sync::atomic::{AtomicBool, Ordering};

/// Changes the calling thread's nice value by `delta` (negative: more
/// priority, which needs `CAP_SYS_NICE`).
pub(crate) fn renice_current_thread(delta: i32) -> std::io::Result<()> {
    let tid = rustix::thread::gettid();
    let current = rustix::process::getpriority_process(Some(tid))?;
    rustix::process::setpriority_process(Some(tid), current.saturating_add(delta).clamp(-20, 19))
        .map_err(std::io::Error::from)
}

static WARNED: AtomicBool = AtomicBool::new(false);

/// Sets the calling thread's nice value to `nice` (not relative).
fn set_current_thread(nice: i32) -> std::io::Result<()> {
    rustix::process::setpriority_process(Some(rustix::thread::gettid()), nice.clamp(-20, 19))
        .map_err(std::io::Error::from)
}

/// Gives the calling media thread its nice value (`nice` ≤ 0, absolute,
/// whatever the thread that started it ran at; 0 leaves it alone). A
/// refusal is logged once per process, not an error: the thread runs on at
/// the priority it has.
pub(crate) fn media_thread(nice: i32) {
    if nice == 0 {
        return;
    }
    if let Err(e) = set_current_thread(nice)
        && !WARNED.swap(true, Ordering::Relaxed)
    {
        tracing::warn!(
            nice,
            error = %e,
            "could not raise the media threads' priority (needs CAP_SYS_NICE); they run at nice 0 and may miss \
             ticks when other processes keep the machine busy"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nice_now() -> i32 {
        rustix::process::getpriority_process(Some(rustix::thread::gettid())).expect("getpriority")
    }

    #[test]
    fn a_thread_is_reniced_alone_or_refused_with_permission_denied() {
        let outer = nice_now();
        let (before, after, result, child) = std::thread::spawn(|| {
            let before = nice_now();
            let result = renice_current_thread(-3);
            let after = nice_now();
            // A thread it starts inherits its value (so media threads set theirs absolutely).
            let child = std::thread::spawn(nice_now).join().expect("thread");
            (before, after, result, child)
        })
        .join()
        .expect("thread");
        match result {
            Ok(()) => assert_eq!(after, (before - 3).max(-20), "reniced"),
            Err(e) => {
                assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
                assert_eq!(after, before, "unchanged when refused");
            }
        }
        assert_eq!(child, after, "a new thread starts from its creator's value");
        assert_eq!(nice_now(), outer, "other threads of the process are not affected (Linux nice is per thread)");
        let lowered = std::thread::spawn(|| {
            let before = nice_now();
            renice_current_thread(4).expect("lowering needs no privilege");
            nice_now() - before
        })
        .join()
        .expect("thread");
        assert_eq!(lowered, 4);
    }
}
