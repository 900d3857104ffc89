//! CPU time, where it can be read: /proc for this process, its threads and a
//! local server process; a Prometheus `/metrics` endpoint for a remote one.

use std::net::SocketAddr;
use std::time::Instant;

/// CPU seconds used so far by process `pid` ("self" for this one).
pub fn process_cpu_seconds(pid: &str) -> Option<f64> {
    tutti_procfs::read_stat(pid).map(|s| s.cpu_seconds())
}

/// CPU seconds used so far by each thread of process `pid`, by thread name.
pub fn thread_cpu_seconds(pid: &str) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> =
        tutti_procfs::thread_stats(pid).into_iter().map(|(_, s)| (s.comm.clone(), s.cpu_seconds())).collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The process of this machine listening on TCP `addr` (a server the run
/// targets on loopback, or on one of this machine's addresses), found from
/// /proc/net/tcp{,6} and the processes' open sockets; `None` when `addr`
/// is not here, or its process is not visible (another user's, without
/// the right to read its descriptors).
pub fn local_listener_pid(addr: SocketAddr) -> Option<u32> {
    let inode = listening_inode(addr)?;
    let target = format!("socket:[{inode}]");
    let me = std::process::id();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else { continue };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == target.as_str()) {
                return Some(pid);
            }
        }
    }
    None
}

/// The inode of the listening socket on `addr` (or on its port at the
/// unspecified address), from /proc/net/tcp and tcp6.
fn listening_inode(addr: SocketAddr) -> Option<u64> {
    const LISTEN: &str = "0A";
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(file) else { continue };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else { continue };
            if *state != LISTEN {
                continue;
            }
            let Some((ip_hex, port_hex)) = local.split_once(':') else { continue };
            if u16::from_str_radix(port_hex, 16).ok() != Some(addr.port()) {
                continue;
            }
            let ip = parse_proc_ip(ip_hex);
            let matches = ip.is_some_and(|ip| ip == addr.ip() || ip.is_unspecified())
                || (addr.ip().is_loopback() && ip.is_some_and(|ip| ip.is_loopback()));
            if matches {
                return inode.parse().ok();
            }
        }
    }
    None
}

/// An address as /proc/net/tcp{,6} writes it: 32-bit words in host (little-endian) order.
fn parse_proc_ip(hex: &str) -> Option<std::net::IpAddr> {
    let words: Vec<u32> =
        (0..hex.len() / 8).map(|i| u32::from_str_radix(&hex[i * 8..i * 8 + 8], 16)).collect::<Result<_, _>>().ok()?;
    match words.as_slice() {
        [w] => Some(std::net::IpAddr::V4(std::net::Ipv4Addr::from(w.swap_bytes()))),
        [a, b, c, d] => {
            let mut bytes = [0u8; 16];
            for (i, w) in [a, b, c, d].iter().enumerate() {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
            }
            let v6 = std::net::Ipv6Addr::from(bytes);
            Some(v6.to_ipv4_mapped().map_or(std::net::IpAddr::V6(v6), std::net::IpAddr::V4))
        }
        _ => None,
    }
}

/// A process's name (`comm`), or `?`.
fn process_name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).map_or_else(|_| "?".into(), |s| s.trim().to_owned())
}

/// Busy and total jiffies of the whole machine, from /proc/stat.
pub fn machine_jiffies() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().next()?;
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let total: u64 = v.iter().take(8).sum();
    // idle + iowait are not busy.
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// The value of `process_cpu_seconds_total` in a Prometheus text exposition.
pub fn parse_process_cpu(metrics: &str) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.strip_prefix("process_cpu_seconds_total").is_some_and(|rest| rest.starts_with([' ', '{', '\t'])))
        .and_then(|l| l.split_whitespace().nth(1).or_else(|| l.rsplit_once('}').map(|(_, v)| v.trim())))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Datagrams the kernel dropped on the IPv4 UDP socket bound to `addr`
/// (its receive buffer was full), from /proc/net/udp: only for a socket of
/// this machine.
pub fn udp_drops(addr: SocketAddr) -> Option<u64> {
    let SocketAddr::V4(v4) = addr else { return None };
    let want = format!("{:08X}:{:04X}", u32::from_le_bytes(v4.ip().octets()), v4.port());
    let text = std::fs::read_to_string("/proc/net/udp").ok()?;
    parse_udp_drops(&text, &want)
}

fn parse_udp_drops(text: &str, local: &str) -> Option<u64> {
    text.lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(1).is_some_and(|a| a.eq_ignore_ascii_case(local)))
        .and_then(|f| f.last()?.parse().ok())
}

/// Where a server's CPU time is read from.
#[derive(Debug, Clone)]
pub enum CpuSource {
    /// A local process: /proc/PID.
    Process(u32),
    /// A Prometheus endpoint (`http://` or `https://`).
    Metrics {
        /// Where it is.
        origin: tutti_client::Origin,
        /// Its path, `/metrics`.
        path: String,
        /// The client that reads it (its trusted roots).
        http: tutti_client::Client,
    },
    /// Not known.
    Unknown,
}

impl CpuSource {
    /// CPU seconds used so far, when it can be read.
    pub fn cpu_seconds(&self) -> Option<f64> {
        match self {
            Self::Process(pid) => process_cpu_seconds(&pid.to_string()),
            Self::Metrics { origin, path, http } => {
                let r = http.send(origin, &Default::default(), "GET", path, None, b"").ok()?;
                if r.status != 200 {
                    return None;
                }
                parse_process_cpu(&r.body)
            }
            Self::Unknown => None,
        }
    }

    /// Per-thread CPU seconds (a local process only).
    pub fn threads(&self) -> Vec<(String, f64)> {
        match self {
            Self::Process(pid) => thread_cpu_seconds(&pid.to_string()),
            _ => Vec::new(),
        }
    }

    /// What it is, for reports.
    pub fn describe(&self) -> String {
        match self {
            Self::Process(pid) => format!("/proc/{pid} (process {})", process_name(*pid)),
            Self::Metrics { origin, path, .. } => format!("{} process_cpu_seconds_total", origin.url(path)),
            Self::Unknown => "unknown (the server is not on this machine: give --metrics-url)".into(),
        }
    }
}

/// A reading of every CPU counter a run reports, taken at one instant.
#[derive(Debug, Clone)]
pub struct CpuMark {
    /// When.
    pub at: Instant,
    /// This process (the generator).
    pub own: Option<f64>,
    /// This process's threads, by name.
    pub own_threads: Vec<(String, f64)>,
    /// The server, when readable.
    pub server: Option<f64>,
    /// The server's threads, by name (local server only).
    pub server_threads: Vec<(String, f64)>,
    /// Machine busy and total jiffies.
    pub machine: Option<(u64, u64)>,
    /// Drops on the server's media socket (a local server only).
    pub server_drops: Option<u64>,
}

impl CpuMark {
    /// Reads everything now; `media` is the server's UDP media address.
    pub fn now(server: &CpuSource, media: Option<SocketAddr>) -> Self {
        Self {
            at: Instant::now(),
            own: process_cpu_seconds("self"),
            own_threads: thread_cpu_seconds("self"),
            server: server.cpu_seconds(),
            server_threads: server.threads(),
            machine: machine_jiffies(),
            server_drops: media.and_then(udp_drops),
        }
    }
}

/// CPU use between two marks, each in cores (1.0 = one core busy).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CpuUse {
    /// Seconds between the marks.
    pub seconds: f64,
    /// The generator process.
    pub generator_cores: Option<f64>,
    /// The generator's threads, by name (threads sharing a name are added up).
    pub generator_threads: Vec<(String, f64)>,
    /// The server process.
    pub server_cores: Option<f64>,
    /// The server's threads (local server only), by name (threads sharing a name are added up).
    pub server_threads: Vec<(String, f64)>,
    /// The whole machine, as a share of all its cores (0..1).
    pub machine_busy: Option<f64>,
    /// Datagrams dropped by the kernel on the server's media socket.
    pub server_udp_drops: Option<u64>,
}

fn thread_delta(a: &[(String, f64)], b: &[(String, f64)], secs: f64) -> Vec<(String, f64)> {
    // Threads with the same name (e.g. tokio workers) are added up.
    let mut out: Vec<(String, f64)> = Vec::new();
    for (name, end) in b {
        match out.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => *v += end,
            None => out.push((name.clone(), *end)),
        }
    }
    for (name, v) in out.iter_mut() {
        let start: f64 = a.iter().filter(|(n, _)| n == name).map(|(_, v)| *v).sum();
        *v = ((*v - start) / secs).max(0.0);
    }
    out.sort_by(|x, y| y.1.total_cmp(&x.1));
    out
}

impl CpuUse {
    /// The CPU used from `a` to `b`.
    pub fn between(a: &CpuMark, b: &CpuMark) -> Self {
        let secs = b.at.saturating_duration_since(a.at).as_secs_f64().max(1e-3);
        let rate = |x: Option<f64>, y: Option<f64>| Some(((y? - x?) / secs).max(0.0));
        Self {
            seconds: secs,
            generator_cores: rate(a.own, b.own),
            generator_threads: thread_delta(&a.own_threads, &b.own_threads, secs),
            server_cores: rate(a.server, b.server),
            server_threads: thread_delta(&a.server_threads, &b.server_threads, secs),
            machine_busy: match (a.machine, b.machine) {
                (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => Some((b1 - b0) as f64 / (t1 - t0) as f64),
                _ => None,
            },
            server_udp_drops: match (a.server_drops, b.server_drops) {
                (Some(x), Some(y)) => Some(y.saturating_sub(x)),
                _ => None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_proc_stat() {
        let stat = "1234 (load 0) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 4 0 100 7 8";
        let s = tutti_procfs::parse_stat(stat).expect("parses");
        assert_eq!(s.comm, "load 0");
        assert_eq!(s.cpu_seconds(), 300.0 / tutti_procfs::clock_ticks() as f64);
        assert!(process_cpu_seconds("self").is_some());
        assert!(!thread_cpu_seconds("self").is_empty());
    }

    #[test]
    fn reads_udp_drops() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
                    \x20 12: 0100007F:0FA0 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 17\n";
        assert_eq!(parse_udp_drops(text, "0100007F:0FA0"), Some(17));
        assert_eq!(parse_udp_drops(text, "0100007F:0FA1"), None);
        let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        assert_eq!(udp_drops(s.local_addr().expect("addr")), Some(0));
    }

    #[test]
    fn reads_prometheus_cpu() {
        let text = "# HELP process_cpu_seconds_total CPU\n# TYPE process_cpu_seconds_total counter\n\
                    process_cpu_seconds_total_other 9\nprocess_cpu_seconds_total 12.5\n";
        assert_eq!(parse_process_cpu(text), Some(12.5));
        assert_eq!(parse_process_cpu("process_cpu_seconds_total{job=\"x\"} 3.25 1700000000\n"), Some(3.25));
        assert_eq!(parse_process_cpu("nothing 1\n"), None);
    }
}
