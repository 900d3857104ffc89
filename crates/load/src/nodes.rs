//! A run across a cluster: which node each room landed on, which node each
//! client joined on, and whether it got there directly or through a
//! redirect (a `307` to the owner, or a WebSocket's `moved`), so that the
//! report can say, per node: rooms, participants, join time (p50/p95) direct
//! against redirected, quality, and the node's CPU when it runs on this
//! machine (its PID found from the API's listening socket in /proc).
//!
//! ```text
//! create room via --url ─► 307? follow ─► the answering address = the room's node
//! join via --url        ─► 307 / moved? follow ─► the answering address = the client's node
//! window start / end    ─► /proc/PID/stat of every node found listening here ─► cores
//! ```
//!
//! Nodes are told apart by their API address (what a redirect names), and
//! carry the node id the API's create answer gave, when it did.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Instant;

use crate::cpu::process_cpu_seconds;
use crate::model::{ClientState, JoinTimes, NodeSummary};
use crate::report::{ClientReport, percentile};

/// Join times of one kind from their durations, ms.
fn join_times(mut ms: Vec<f64>) -> JoinTimes {
    ms.sort_by(f64::total_cmp);
    let q = |p: f64| percentile(&ms, p).unwrap_or(0.0);
    JoinTimes { count: ms.len(), p50_ms: q(0.5), p95_ms: q(0.95) }
}

/// How one client joined.
#[derive(Debug, Clone, Copy)]
pub(crate) struct JoinRecord {
    /// The API address that answered the join.
    pub(crate) node: SocketAddr,
    /// Redirects (or WebSocket moves) followed.
    pub(crate) redirects: usize,
    /// Request to answer, ms.
    pub(crate) ms: f64,
}

#[derive(Default)]
struct NodeState {
    id: Option<String>,
    pid: Option<u32>,
    cpu_start: Option<(Instant, f64)>,
    cpu_end: Option<(Instant, f64)>,
}

/// What a run learns about the nodes as it goes.
#[derive(Default)]
pub(crate) struct Nodes {
    nodes: BTreeMap<SocketAddr, NodeState>,
    /// The node of each room, by room index.
    rooms: BTreeMap<usize, SocketAddr>,
    /// How each client joined, by client index.
    joins: BTreeMap<usize, JoinRecord>,
}

impl Nodes {
    fn node(&mut self, addr: SocketAddr) -> &mut NodeState {
        self.nodes.entry(addr).or_insert_with(|| NodeState { pid: listening_pid(addr), ..NodeState::default() })
    }

    /// Room `room` is held by the node at `addr` (named `id`, when known).
    pub(crate) fn room(&mut self, room: usize, addr: SocketAddr, id: Option<String>) {
        let n = self.node(addr);
        if id.is_some() {
            n.id = id;
        }
        self.rooms.insert(room, addr);
    }

    /// Client `index` joined as `join` says.
    pub(crate) fn joined(&mut self, index: usize, join: JoinRecord) {
        self.node(join.node);
        self.joins.insert(index, join);
    }

    /// The API address client `index` joined on.
    pub(crate) fn node_of(&self, index: usize) -> Option<SocketAddr> {
        self.joins.get(&index).map(|j| j.node)
    }

    /// Reads every local node's CPU: the start (`end` false) or the end of the window.
    pub(crate) fn mark(&mut self, end: bool) {
        for n in self.nodes.values_mut() {
            let Some(pid) = n.pid else { continue };
            let reading = process_cpu_seconds(&pid.to_string()).map(|c| (Instant::now(), c));
            if end {
                n.cpu_end = reading;
            } else {
                n.cpu_start = reading;
            }
        }
    }

    /// The per-node figures, nodes in address order.
    pub(crate) fn summaries(&self, clients: &[ClientReport]) -> Vec<NodeSummary> {
        self.nodes
            .iter()
            .map(|(addr, n)| {
                let mine: Vec<&ClientReport> = clients
                    .iter()
                    .filter(|c| self.joins.get(&c.figures.index).is_some_and(|j| j.node == *addr))
                    .collect();
                let times = |redirected: bool| {
                    join_times(
                        self.joins
                            .values()
                            .filter(|j| j.node == *addr && (j.redirects > 0) == redirected)
                            .map(|j| j.ms)
                            .collect(),
                    )
                };
                let (lost, expected) =
                    mine.iter().fold((0u64, 0u64), |(l, e), c| (l + c.figures.lost, e + c.figures.expected));
                let mut mos: Vec<f64> = mine.iter().map(|c| c.mos).collect();
                mos.sort_by(f64::total_cmp);
                let cpu_cores = match (n.cpu_start, n.cpu_end) {
                    (Some((t0, c0)), Some((t1, c1))) if t1 > t0 => Some((c1 - c0) / (t1 - t0).as_secs_f64()),
                    _ => None,
                };
                NodeSummary {
                    api: addr.to_string(),
                    node: n.id.clone(),
                    rooms: self.rooms.values().filter(|a| *a == addr).count(),
                    participants: self.joins.values().filter(|j| j.node == *addr).count(),
                    connected: mine.iter().filter(|c| c.figures.state == ClientState::Connected).count(),
                    direct: times(false),
                    redirected: times(true),
                    loss_percent: if expected == 0 { 0.0 } else { 100.0 * lost as f64 / expected as f64 },
                    mos_p5: percentile(&mos, 0.05).unwrap_or(0.0),
                    pid: n.pid,
                    cpu_cores,
                }
            })
            .collect()
    }
}

/// The per-node table of a run.
pub fn nodes_text(nodes: &[NodeSummary]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<22} {:<12} {:>5} {:>6} {:>6}  {:>20}  {:>20}  {:>6} {:>6} {:>7}",
        "node", "id", "rooms", "joined", "conn", "direct n p50/p95 ms", "redirect n p50/p95", "loss%", "MOSp5", "CPU"
    );
    let times = |t: &JoinTimes| {
        if t.count == 0 { "-".to_owned() } else { format!("{} {:.1}/{:.1}", t.count, t.p50_ms, t.p95_ms) }
    };
    for n in nodes {
        let cpu = n.cpu_cores.map_or("-".to_owned(), |c| format!("{:.0} %", 100.0 * c));
        let _ = writeln!(
            out,
            "{:<22} {:<12} {:>5} {:>6} {:>6}  {:>20}  {:>20}  {:>6.2} {:>6.2} {:>7}",
            n.api,
            n.node.as_deref().unwrap_or("?"),
            n.rooms,
            n.participants,
            n.connected,
            times(&n.direct),
            times(&n.redirected),
            n.loss_percent,
            n.mos_p5,
            cpu
        );
    }
    out
}

/// The PID of the process of this machine listening on TCP `addr` (or on
/// its port at 0.0.0.0), from /proc/net/tcp and the processes' descriptors.
pub fn listening_pid(addr: SocketAddr) -> Option<u32> {
    let SocketAddr::V4(v4) = addr else { return None };
    let text = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let inode = listening_inode(&text, u32::from_le_bytes(v4.ip().octets()), v4.port())?;
    let want = format!("socket:[{inode}]");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else { continue };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == want.as_str()) {
                return Some(pid);
            }
        }
    }
    None
}

/// The inode of the listening socket on `ip` (as /proc/net/tcp writes it)
/// and `port`, or on the port at any address.
fn listening_inode(text: &str, ip: u32, port: u16) -> Option<u64> {
    let exact = format!("{ip:08X}:{port:04X}");
    let any = format!("00000000:{port:04X}");
    text.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (local, state, inode) = (f.get(1)?, f.get(3)?, f.get(9)?);
        let ours = local.eq_ignore_ascii_case(&exact) || local.eq_ignore_ascii_case(&any);
        (ours && *state == "0A").then(|| inode.parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_listening_socket() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0300007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1\n   1: 0300007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 5555 1\n   2: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 77 1\n";
        let ip = u32::from_le_bytes([127, 0, 0, 3]);
        assert_eq!(listening_inode(text, ip, 8080), Some(4242));
        assert_eq!(listening_inode(text, ip, 80), Some(77), "0.0.0.0 listens on every address");
        assert_eq!(listening_inode(text, ip, 81), None);
    }

    #[test]
    fn finds_this_process_listening() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("bound");
        assert_eq!(listening_pid(addr), Some(std::process::id()));
    }

    #[test]
    fn join_times_split_by_kind() {
        let mut nodes = Nodes::default();
        let a: SocketAddr = "127.0.0.2:1".parse().expect("addr");
        let b: SocketAddr = "127.0.0.3:1".parse().expect("addr");
        nodes.room(0, a, Some("node-2".into()));
        nodes.room(1, b, None);
        for (i, (node, redirects, ms)) in [(a, 0, 5.0), (a, 0, 7.0), (b, 1, 9.0), (b, 0, 3.0)].into_iter().enumerate() {
            nodes.joined(i, JoinRecord { node, redirects, ms });
        }
        let s = nodes.summaries(&[]);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].rooms, s[0].participants, s[0].node.as_deref()), (1, 2, Some("node-2")));
        assert_eq!((s[0].direct.count, s[0].direct.p50_ms, s[0].redirected.count), (2, 5.0, 0));
        assert_eq!((s[1].direct.count, s[1].redirected.count, s[1].redirected.p95_ms), (1, 1, 9.0));
        assert!(nodes_text(&s).contains("node-2"));
    }
}
