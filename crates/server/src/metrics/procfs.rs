//! Per-thread and process metrics read from /proc at scrape time, rendered
//! in the Prometheus text format next to the exporter's.
//!
//! A thread's name is its `comm` (field 2 of `/proc/self/task/<tid>/stat`,
//! the same text as `/proc/self/task/<tid>/comm`, at most 15 bytes); its CPU
//! is `utime + stime` (fields 14 and 15) in clock ticks. Threads that share
//! a name are summed. A thread that exits (or is renamed) leaves its last
//! reading behind in its name's "retired" total, so each series only grows,
//! as a counter must. At most [`MAX_NAMES`] names get their own series;
//! any further ones are summed under `other`.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

/// CPU time of the process's threads of one name (`thread` label: `mix-0`, `io-0`, `mix-clock`, `api-0`, …), seconds.
pub const THREAD_CPU_SECONDS: &str = "tutti_thread_cpu_seconds_total";
/// CPU time of the whole process (user + system), seconds.
pub const PROCESS_CPU_SECONDS: &str = "process_cpu_seconds_total";
/// Resident memory, bytes.
pub const PROCESS_RESIDENT_MEMORY_BYTES: &str = "process_resident_memory_bytes";
/// Virtual memory, bytes.
pub const PROCESS_VIRTUAL_MEMORY_BYTES: &str = "process_virtual_memory_bytes";
/// Open file descriptors (sockets included).
pub const PROCESS_OPEN_FDS: &str = "process_open_fds";
/// The soft limit on open file descriptors.
pub const PROCESS_MAX_FDS: &str = "process_max_fds";
/// Threads of the process.
pub const PROCESS_THREADS: &str = "process_threads";
/// When the process started, seconds since the Unix epoch.
pub const PROCESS_START_TIME_SECONDS: &str = "process_start_time_seconds";

/// Distinct thread names with a series of their own.
const MAX_NAMES: usize = 64;
/// The label of names past [`MAX_NAMES`].
const OTHER: &str = "other";

/// A thread seen at the last reading.
#[derive(Debug)]
struct Live {
    name: String,
    /// CPU ticks at the last reading.
    ticks: u64,
    /// Ticks it had when it took this name (0 unless renamed).
    base: u64,
}

/// Per-thread CPU over time, keyed by (tid, start time) so a reused tid is a new thread.
#[derive(Debug, Default)]
pub(super) struct ThreadCpu {
    live: HashMap<(u64, u64), Live>,
    retired: BTreeMap<String, u64>,
}

impl ThreadCpu {
    /// Takes one reading: every thread's (tid, name, start time, CPU ticks).
    /// Returns CPU ticks by name, retired threads included.
    pub(super) fn update<'a>(
        &mut self,
        threads: impl IntoIterator<Item = (u64, &'a str, u64, u64)>,
    ) -> BTreeMap<String, u64> {
        let mut live = HashMap::with_capacity(self.live.len());
        for (tid, comm, start, ticks) in threads {
            let name = if self.retired.contains_key(comm) || self.names() < MAX_NAMES { comm } else { OTHER };
            let entry = match self.live.remove(&(tid, start)) {
                Some(prev) if prev.name == name => {
                    Live { name: prev.name, ticks: ticks.max(prev.ticks), base: prev.base }
                }
                Some(prev) => {
                    // Renamed: what it spent under its old name stays there.
                    *self.retired.entry(prev.name).or_default() += prev.ticks - prev.base;
                    Live { name: name.to_owned(), ticks: ticks.max(prev.ticks), base: prev.ticks }
                }
                None => Live { name: name.to_owned(), ticks, base: 0 },
            };
            self.retired.entry(entry.name.clone()).or_default();
            live.insert((tid, start), entry);
        }
        // Threads gone since the last reading.
        for (_, gone) in self.live.drain() {
            *self.retired.entry(gone.name).or_default() += gone.ticks - gone.base;
        }
        self.live = live;
        let mut totals = self.retired.clone();
        for l in self.live.values() {
            *totals.entry(l.name.clone()).or_default() += l.ticks - l.base;
        }
        totals
    }

    /// Names with a series (every name seen gets a `retired` entry).
    fn names(&self) -> usize {
        self.retired.len()
    }
}

/// Reads /proc and renders what it read.
#[derive(Debug)]
pub(super) struct Reader {
    clock_ticks: f64,
    page_size: u64,
    /// Boot time, seconds since the epoch (`btime` of /proc/stat).
    boot_time: Option<u64>,
    threads: ThreadCpu,
}

impl Reader {
    pub(super) fn new() -> Self {
        let boot_time = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| s.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok()));
        Self {
            clock_ticks: tutti_procfs::clock_ticks() as f64,
            page_size: tutti_procfs::page_size(),
            boot_time,
            threads: ThreadCpu::default(),
        }
    }

    /// Appends per-thread CPU and the process metrics. Writes nothing for what
    /// cannot be read (no /proc).
    pub(super) fn render(&mut self, out: &mut String) {
        let parsed = tutti_procfs::thread_stats("self");
        if !parsed.is_empty() {
            let totals = self
                .threads
                .update(parsed.iter().map(|(tid, s)| (*tid, s.comm.as_str(), s.starttime, s.utime + s.stime)));
            header(
                out,
                THREAD_CPU_SECONDS,
                "counter",
                "CPU time (user + system) of the process's threads of this name, in seconds.",
            );
            for (name, ticks) in &totals {
                let _ = writeln!(
                    out,
                    "{THREAD_CPU_SECONDS}{{thread=\"{}\"}} {}",
                    escape(name),
                    *ticks as f64 / self.clock_ticks
                );
            }
        }

        let Some(me) = tutti_procfs::read_stat("self") else { return };
        let cpu = (me.utime + me.stime) as f64 / self.clock_ticks;
        sample(out, PROCESS_CPU_SECONDS, "counter", "Total user and system CPU time spent in seconds.", cpu);
        let rss = me.rss_pages.saturating_mul(self.page_size);
        sample(out, PROCESS_RESIDENT_MEMORY_BYTES, "gauge", "Resident memory size in bytes.", rss as f64);
        sample(out, PROCESS_VIRTUAL_MEMORY_BYTES, "gauge", "Virtual memory size in bytes.", me.vsize as f64);
        sample(out, PROCESS_THREADS, "gauge", "Number of OS threads in the process.", me.num_threads as f64);
        if let Some(boot) = self.boot_time {
            let start = boot as f64 + me.starttime as f64 / self.clock_ticks;
            sample(
                out,
                PROCESS_START_TIME_SECONDS,
                "gauge",
                "Start time of the process since unix epoch in seconds.",
                start,
            );
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            // The listing's own descriptor is counted too, as every exporter does.
            sample(out, PROCESS_OPEN_FDS, "gauge", "Number of open file descriptors.", fds.count() as f64);
        }
        if let Some(max) = max_fds() {
            sample(out, PROCESS_MAX_FDS, "gauge", "Maximum number of open file descriptors.", max as f64);
        }
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, kind: &str, help: &str, value: f64) {
    header(out, name, kind, help);
    let _ = writeln!(out, "{name} {value}");
}

/// A label value in the text format: backslash, double quote and newline escaped.
pub(super) fn escape(value: &str) -> String {
    let mut s = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// The soft limit of "Max open files" in /proc/self/limits.
fn max_fds() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files").split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_reads_its_own_threads() {
        let mut out = String::new();
        Reader::new().render(&mut out);
        assert!(out.contains("# TYPE tutti_thread_cpu_seconds_total counter"), "{out}");
        assert!(out.contains("process_cpu_seconds_total "), "{out}");
        assert!(out.contains("process_open_fds "), "{out}");
    }

    #[test]
    fn threads_of_one_name_are_summed_and_a_series_never_shrinks() {
        let mut cpu = ThreadCpu::default();
        let t = cpu.update([(1, "api-0", 10, 5), (2, "api-blocking", 11, 7), (3, "api-blocking", 12, 3)]);
        assert_eq!((t["api-0"], t["api-blocking"]), (5, 10));
        // Thread 3 exits; thread 2 goes on; a new thread reuses tid 3.
        let t = cpu.update([(1, "api-0", 10, 6), (2, "api-blocking", 11, 8), (3, "api-blocking", 99, 1)]);
        assert_eq!((t["api-0"], t["api-blocking"]), (6, 12));
        // Every blocking thread exits: the series keeps what they spent.
        let t = cpu.update([(1, "api-0", 10, 6)]);
        assert_eq!(t["api-blocking"], 12);
        // A thread renamed after start: its earlier CPU stays with its first name.
        let t = cpu.update([(1, "api-0", 10, 6), (7, "tutti", 50, 2)]);
        assert_eq!(t["tutti"], 2);
        let t = cpu.update([(1, "api-0", 10, 6), (7, "io-0", 50, 9)]);
        assert_eq!((t["tutti"], t["io-0"]), (2, 7));
    }

    #[test]
    fn names_past_the_limit_share_one_series() {
        let mut cpu = ThreadCpu::default();
        let names: Vec<String> = (0..MAX_NAMES + 10).map(|i| format!("t-{i}")).collect();
        let t = cpu.update(names.iter().enumerate().map(|(i, n)| (i as u64, n.as_str(), 0, 1)));
        assert_eq!(t.len(), MAX_NAMES + 1);
        assert_eq!(t[OTHER], 10);
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
