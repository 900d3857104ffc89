//! # tutti-procfs: CPU and memory from Linux /proc
//!
//! One parser of `/proc/<pid>/stat` and `/proc/<pid>/task/<tid>/stat` for
//! the two places tutti reads them: the server's metrics (per-thread CPU at
//! scrape time) and the load tester (the CPU of a local server and of its
//! own threads). CPU times are converted with the kernel's real tick rate
//! (`sysconf(_SC_CLK_TCK)`), not an assumed one.
//!
//! ```
//! let me = tutti_procfs::read_stat("self").expect("Linux /proc");
//! let cpu = me.cpu_seconds();
//! assert!(cpu >= 0.0);
//! ```
//!
//! Nothing here panics on what /proc holds: a line cut short or a thread
//! that exits between listing and reading is `None` or left out.

/// The fields of a `stat` line tutti reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// The command name (a thread's name for a task), at most 15 bytes on Linux.
    pub comm: String,
    /// CPU time in user mode, in clock ticks.
    pub utime: u64,
    /// CPU time in kernel mode, in clock ticks.
    pub stime: u64,
    /// Nice value (−20 to 19; of the thread, for a task).
    pub nice: i64,
    /// Threads of the process.
    pub num_threads: u64,
    /// Start time after boot, in clock ticks.
    pub starttime: u64,
    /// Virtual memory size, in bytes.
    pub vsize: u64,
    /// Resident set size, in pages.
    pub rss_pages: u64,
}

impl Stat {
    /// User + system CPU time, in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        (self.utime + self.stime) as f64 / clock_ticks() as f64
    }
}

/// Parses a `stat` line. The name sits in parentheses and may itself hold
/// spaces and parentheses, so the fields are counted from the last `)`.
pub fn parse_stat(line: &str) -> Option<Stat> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let comm = line.get(open + 1..close)?;
    // Fields from 3 (state) on; field n is at index n - 3.
    let rest: Vec<&str> = line.get(close + 1..)?.split_whitespace().collect();
    let field = |n: usize| rest.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    let signed = |n: usize| rest.get(n - 3).and_then(|v| v.parse::<i64>().ok());
    Some(Stat {
        comm: comm.to_owned(),
        utime: field(14)?,
        stime: field(15)?,
        nice: signed(19)?,
        num_threads: field(20)?,
        starttime: field(22)?,
        vsize: field(23)?,
        rss_pages: field(24)?,
    })
}

/// The stat of process `pid` (`"self"` for this one).
pub fn read_stat(pid: &str) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Every thread of process `pid` (`"self"` for this one): (tid, stat).
/// Threads that exit while they are read are left out.
pub fn thread_stats(pid: &str) -> Vec<(u64, Stat)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    dir.flatten()
        .filter_map(|entry| {
            let tid = entry.file_name().to_str()?.parse::<u64>().ok()?;
            let line = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            Some((tid, parse_stat(&line)?))
        })
        .collect()
}

/// Clock ticks per second, the unit of `utime`, `stime` and `starttime`:
/// `sysconf(_SC_CLK_TCK)` (100 only if sysconf fails).
pub fn clock_ticks() -> u64 {
    sysconf_or(SysVar::ClockTicks, 100)
}

/// The page size, the unit of `rss_pages`: `sysconf(_SC_PAGESIZE)` (4096 if it fails).
pub fn page_size() -> u64 {
    sysconf_or(SysVar::PageSize, 4096)
}

enum SysVar {
    ClockTicks,
    PageSize,
}

#[cfg(target_os = "linux")]
fn sysconf_or(var: SysVar, fallback: u64) -> u64 {
    use nix::unistd::{SysconfVar, sysconf};
    let var = match var {
        SysVar::ClockTicks => SysconfVar::CLK_TCK,
        SysVar::PageSize => SysconfVar::PAGE_SIZE,
    };
    match sysconf(var) {
        Ok(Some(v)) if v > 0 => v.unsigned_abs(),
        _ => fallback,
    }
}

#[cfg(not(target_os = "linux"))]
fn sysconf_or(_: SysVar, fallback: u64) -> u64 {
    fallback
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_with_spaces_and_parentheses_in_the_name_parses() {
        let line = "4242 (mix (x) 1) S 1 4242 4242 0 -1 4194368 2505 0 0 0 731 129 0 0 10 -10 9 0 12345 \
                    1234567 890 18446744073709551615 1 1 0 0 0 0 0 4096 17663 0 0 0 17 1 0 0 0 0 0";
        let s = parse_stat(line).expect("parses");
        assert_eq!(s.comm, "mix (x) 1");
        assert_eq!(s.nice, -10);
        assert_eq!(
            (s.utime, s.stime, s.num_threads, s.starttime, s.vsize, s.rss_pages),
            (731, 129, 9, 12345, 1234567, 890)
        );
        assert_eq!(parse_stat("12 (cut short) S 1 2"), None);
        assert_eq!(parse_stat("no parentheses"), None);
    }

    #[test]
    fn this_process_and_its_threads_read_back() {
        let me = read_stat("self").expect("Linux /proc");
        assert!(me.num_threads >= 1);
        let threads = thread_stats("self");
        assert!(!threads.is_empty());
        assert!(threads.iter().all(|(tid, _)| *tid > 0));
        assert_eq!(clock_ticks(), 100, "Linux reports CPU times in USER_HZ = 100");
        assert!(page_size() >= 4096);
    }
}
