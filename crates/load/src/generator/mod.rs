//! The many-client engine: creates the run's rooms, joins N simulated
//! participants one by one (round-robin over the rooms) through each room's
//! WebSocket `join` message as the browser page does (or over REST with
//! `websocket` off), then drives them on a few `load-N` threads, each owning
//! a share of the clients (their sans-IO peers, UDP sockets and WebSockets,
//! readiness by epoll through `mio`), sending on an absolute 20 ms schedule.
//! A worker sleeps to its next 1 ms send slot and then reads what arrived,
//! without letting a datagram wake it: on loopback the sender pays for the
//! receiver's wake-up, and each datagram of the server's burst that found a
//! worker waiting would wake it. Once connected, a UDP client's socket
//! leaves the epoll and is read in the client's own send slot, once per
//! 20 ms: on loopback the server would otherwise run the epoll's callback
//! for each datagram it delivers. The figures take each UDP datagram's
//! kernel arrival stamp, so reading late changes none of them (ICE-TCP
//! clients: the read time).
//!
//! The parts: `client` (one simulated client and its link), `join` (rooms
//! and joins over the API), `worker` (a `load-N` thread and its loop), with
//! its `receive` path, `send` schedule and `moves` between nodes.

mod client;
mod join;
mod moves;
mod receive;
mod send;
mod worker;

use std::collections::{BinaryHeap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use mio::Poll;

use client::NewClient;
pub(crate) use join::caller;
use join::{JoinedPeer, ensure_room_at, join_one};
use worker::{SLOTS, Shared, ToWorker, Worker, WorkerConfig, lock};

use crate::LoadError;
use crate::arrival;
use crate::audio::Material;
use crate::cpu::CpuMark;
use crate::handover::{self, Known};
use crate::marker::MAX_PROBES;
use crate::model::{Lateness, LoadConfig, Role, ThreadView};
use crate::nodes::{JoinRecord, Nodes};
use crate::report::{self, LoadReport, Summary};
use crate::rooms::{self, RoleMix};

/// Threads that rejoin moved clients (joins block on HTTP; a drain moves a
/// node's clients at once).
const REJOIN_THREADS: usize = 4;

/// Joins in flight at once: each starts at its slot (`--cint` apart)
/// without waiting for the answers to the ones before it, up to this many.
const JOINERS: usize = 4;

/// What a run tells its observer as it goes.
#[derive(Debug)]
pub enum Progress<'a> {
    /// Joining: how many have joined, failed, of how many.
    Joining {
        /// Joined so far.
        joined: usize,
        /// Joins refused so far.
        failed: usize,
        /// All.
        total: usize,
    },
    /// A periodic summary.
    Summary(&'a Summary),
}

/// The joiner's record of each participant.
struct Joined {
    room: usize,
    role: Role,
    location: Option<String>,
    error: Option<String>,
}

/// The joins that failed: (client, room, role, why).
fn failures(joined: &[Joined]) -> Vec<(usize, usize, Role, String)> {
    joined.iter().enumerate().filter_map(|(i, j)| j.error.as_ref().map(|e| (i, j.room, j.role, e.clone()))).collect()
}

/// Runs a load test: joins, drives, measures, reports. Stops at the end of
/// `cfg.life` or when `stop` is set. `observe` sees join progress and the
/// periodic summaries.
pub fn run(
    cfg: &LoadConfig,
    stop: &AtomicBool,
    observe: &mut dyn FnMut(Progress<'_>),
) -> Result<LoadReport, LoadError> {
    if cfg.clients == 0 {
        return Err(LoadError::Config("at least one participant".into()));
    }
    if !(0.0..=1.0).contains(&cfg.no_level_share) {
        return Err(LoadError::Config(format!("the no-level share must be 0 to 1, not {}", cfg.no_level_share)));
    }
    let sizes = rooms::sizes(cfg).map_err(LoadError::Config)?;
    let room_names: Vec<String> = (0..sizes.len()).map(|r| rooms::name(cfg, r, sizes.len())).collect();
    let threads = cfg.threads.clamp(1, 64);
    let probes = cfg.probe_talkers.min(MAX_PROBES).min(sizes.iter().copied().max().unwrap_or(0).saturating_sub(1));
    let speech = match &cfg.speech {
        Some(s) => s.clone(),
        None => crate::audio::speech_like(8.0, cfg.seed),
    };
    let material = Arc::new(Material::new(&speech, probes)?);
    let mut nodes = Nodes::default();
    // Entries for rejoins: every node seen.
    let known = Arc::new(Known::default());
    known.add(cfg.api);
    for (r, name) in room_names.iter().enumerate() {
        let (at, id) =
            ensure_room_at(&cfg.http, cfg.api, cfg.token.as_deref(), name, cfg.record, cfg.record_per_speaker)?;
        nodes.room(r, at, id);
        known.add(at);
    }

    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        window_start: OnceLock::new(),
        markers: Mutex::new(Vec::new()),
        detections: Mutex::new(Vec::new()),
        views: (0..threads).map(|_| Mutex::new(ThreadView::default())).collect(),
        locations: Mutex::new(HashMap::new()),
    });
    let wcfg = WorkerConfig {
        silence: cfg.silence,
        seed: cfg.seed,
        marker_period: cfg.marker_period,
        probes,
        rejoin_attempts: cfg.rejoin_attempts,
        lean_receive: !cfg.rtc_receive,
    };
    let channels: Vec<(Sender<ToWorker>, Receiver<ToWorker>)> =
        (0..threads).map(|_| std::sync::mpsc::channel()).collect();
    let senders: Vec<Sender<ToWorker>> = channels.iter().map(|(tx, _)| tx.clone()).collect();
    let room_names = Arc::new(room_names);
    let pool = (cfg.rejoin_attempts > 0)
        .then(|| {
            let (token, websocket, http) = (cfg.token.clone(), cfg.websocket, cfg.http.clone());
            let tcp_share = (cfg.clients, cfg.tcp_share);
            let deliver = senders.clone();
            let stopping = shared.clone();
            handover::Pool::start(
                REJOIN_THREADS,
                cfg.http.clone(),
                known.clone(),
                move |req: &handover::Request, to: &handover::Target| {
                    let token = to.token.as_deref().or(token.as_deref());
                    let tcp = rooms::without_level(req.index, tcp_share.0, tcp_share.1);
                    let name = format!("load-{}", req.index);
                    join_one(&http, to.api, token, &req.room, websocket, &name, tcp)
                },
                move |reply: handover::Reply<JoinedPeer>| {
                    if let Some(tx) = deliver.get(reply.thread) {
                        let _ = tx.send(ToWorker::Rejoined {
                            slot: reply.slot,
                            result: reply.result,
                            ticket: reply.ticket,
                        });
                    }
                },
                move || stopping.stop.load(Ordering::Relaxed),
            )
        })
        .transpose()
        .map_err(LoadError::Io)?;
    let mut handles = Vec::new();
    for (id, (_, rx)) in channels.into_iter().enumerate() {
        let worker = Worker {
            id,
            poll: Poll::new().map_err(|e| LoadError::Io(format!("epoll: {e}")))?,
            clients: Vec::new(),
            slots: vec![Vec::new(); SLOTS],
            timers: BinaryHeap::new(),
            rx,
            shared: shared.clone(),
            rejoin: pool.as_ref().map(handover::Pool::sender),
            retries: BinaryHeap::new(),
            closing: Vec::new(),
            room_names: room_names.clone(),
            material: material.clone(),
            cfg: wcfg.clone(),
            lateness: Lateness::default(),
            measuring: false,
            buf: vec![0u8; 2048],
            stamps: arrival::Stamps::new(),
            ws_pending: Vec::new(),
        };
        let h = std::thread::Builder::new()
            .name(format!("load-{id}"))
            .spawn(move || worker.run())
            .map_err(|e| LoadError::Io(format!("starting load-{id}: {e}")))?;
        handles.push(h);
    }

    let mix = RoleMix {
        talkers: cfg.talkers,
        probe_talkers: probes,
        probe_listeners: cfg.probe_listeners,
        probe_rooms: cfg.probe_rooms,
    };
    let room_roles = rooms::fleet_roles(&sizes, mix);
    let roles: Vec<(usize, Role, Option<usize>)> = rooms::join_order(&sizes)
        .into_iter()
        .map(|(r, place)| {
            let (role, probe) = room_roles[r][place];
            (r, role, probe)
        })
        .collect();
    let start = Instant::now();
    let mut end = cfg.life.map(|l| start + l);
    let past_end = |now: Instant, end: Option<Instant>| end.is_some_and(|e| now >= e) || stop.load(Ordering::Relaxed);
    // By client index; a client not answered yet is neither joined nor failed.
    let mut joined: Vec<Joined> =
        roles.iter().map(|&(room, role, _)| Joined { room, role, location: None, error: None }).collect();
    let mut last_progress = start;
    let mut next_summary = start + cfg.summary_interval;
    let mut cpu_window_start: Option<CpuMark> = None;
    let mut server_media: Option<SocketAddr> = None;
    let summary_at = |now: Instant, joined: &[Joined], cpu0: Option<&CpuMark>, media: Option<SocketAddr>| {
        let views: Vec<ThreadView> = shared.views.iter().map(|v| lock(v).clone()).collect();
        report::summarize(&report::RunState {
            cfg,
            start,
            now,
            window_start: shared.window_start.get().copied().filter(|&w| now >= w),
            views: &views,
            room_names: &room_names,
            room_sizes: &sizes,
            failed: failures(joined),
            total: cfg.clients,
            markers: &lock(&shared.markers),
            detections: &lock(&shared.detections),
            cpu: cpu0.map(|c| crate::cpu::CpuUse::between(c, &CpuMark::now(&cfg.server_cpu, media))),
            threads,
        })
    };

    // Joins run on JOINERS threads, each started at its slot without
    // waiting for the ones before it to be answered (as independent browsers
    // join); the answers are taken here, in whatever order they come.
    let mut dispatched = 0;
    let (done, failed) = std::thread::scope(|scope| {
        let roles = &roles;
        let (jobs_tx, jobs_rx) = std::sync::mpsc::sync_channel::<(usize, Instant)>(0);
        let jobs_rx = Arc::new(Mutex::new(jobs_rx));
        let (results_tx, results) = std::sync::mpsc::channel::<(usize, Instant, Result<JoinedPeer, String>)>();
        for _ in 0..JOINERS {
            let (jobs_rx, results_tx, room_names) = (jobs_rx.clone(), results_tx.clone(), &room_names);
            scope.spawn(move || {
                loop {
                    let job = lock(&jobs_rx).recv();
                    let Ok((index, asked)) = job else { break };
                    let (room, _, _) = roles[index];
                    let name = format!("load-{index}");
                    let tcp = rooms::without_level(index, cfg.clients, cfg.tcp_share);
                    let r = join_one(
                        &cfg.http,
                        cfg.api,
                        cfg.token.as_deref(),
                        &room_names[room],
                        cfg.websocket,
                        &name,
                        tcp,
                    );
                    if results_tx.send((index, asked, r)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(results_tx);
        // What an answer changes, passed in so the loop below can read it between answers.
        struct Tally<'a> {
            joined: &'a mut Vec<Joined>,
            nodes: &'a mut Nodes,
            server_media: &'a mut Option<SocketAddr>,
            done: usize,
            failed: usize,
        }
        let mut t =
            Tally { joined: &mut joined, nodes: &mut nodes, server_media: &mut server_media, done: 0, failed: 0 };
        let take = |t: &mut Tally<'_>, index: usize, asked: Instant, result: Result<JoinedPeer, String>| {
            let (room, role, probe) = roles[index];
            t.done += 1;
            match result {
                Ok(j) => {
                    let ms = asked.elapsed().as_secs_f64() * 1000.0;
                    t.nodes.joined(index, JoinRecord { node: j.node, redirects: j.redirects, ms });
                    known.add(j.node);
                    if t.server_media.is_none() {
                        *t.server_media = j.media;
                    }
                    let location = j.location;
                    let mut peer = j.peer;
                    peer.set_lean_receive(!cfg.rtc_receive);
                    let level =
                        role == Role::ProbeTalker || !rooms::without_level(index, cfg.clients, cfg.no_level_share);
                    let c = NewClient {
                        index,
                        room,
                        level,
                        ws: j.ws,
                        role,
                        probe,
                        peer,
                        link: j.link,
                        joined_at: Instant::now(),
                        node: j.node,
                    };
                    t.joined[index] = if senders[index % threads].send(ToWorker::New(c)).is_err() {
                        t.failed += 1;
                        Joined { room, role, location: Some(location), error: Some("generator thread ended".into()) }
                    } else {
                        Joined { room, role, location: Some(location), error: None }
                    };
                }
                Err(e) => {
                    t.failed += 1;
                    t.joined[index] = Joined { room, role, location: None, error: Some(e) };
                }
            }
        };
        for index in 0..roles.len() {
            let due = start + cfg.join_interval.mul_f64(index as f64);
            while Instant::now() < due && !past_end(Instant::now(), end) {
                let wait = due.saturating_duration_since(Instant::now()).min(Duration::from_millis(50));
                if let Ok((i, asked, r)) = results.recv_timeout(wait) {
                    take(&mut t, i, asked, r);
                }
            }
            if past_end(Instant::now(), end) {
                break;
            }
            // Blocks while JOINERS joins are in flight: their answers are taken meanwhile.
            let mut job = (index, Instant::now());
            loop {
                match jobs_tx.try_send(job) {
                    Ok(()) => break,
                    Err(std::sync::mpsc::TrySendError::Full(j)) => {
                        job = j;
                        if let Ok((i, asked, r)) = results.recv_timeout(Duration::from_millis(1)) {
                            take(&mut t, i, asked, r);
                        }
                    }
                    Err(std::sync::mpsc::TrySendError::Disconnected(_)) => unreachable!("the joiners outlive the jobs"),
                }
            }
            dispatched += 1;
            while let Ok((i, asked, r)) = results.try_recv() {
                take(&mut t, i, asked, r);
            }
            let now = Instant::now();
            if now - last_progress >= Duration::from_millis(500) {
                last_progress = now;
                observe(Progress::Joining { joined: t.done - t.failed, failed: t.failed, total: cfg.clients });
            }
            if now >= next_summary {
                next_summary += cfg.summary_interval;
                let s = summary_at(now, t.joined, None, *t.server_media);
                observe(Progress::Summary(&s));
            }
        }
        drop(jobs_tx);
        // The joins in flight: each is bounded by its requests' timeouts.
        for (i, asked, r) in results.iter() {
            take(&mut t, i, asked, r);
        }
        (t.done, t.failed)
    });
    joined.truncate(dispatched);
    observe(Progress::Joining { joined: done - failed, failed, total: cfg.clients });
    let window_start = Instant::now() + cfg.warmup;
    let _ = shared.window_start.set(window_start);
    if let Some(w) = cfg.window {
        end = Some(window_start + w);
    }

    loop {
        let now = Instant::now();
        if past_end(now, end) {
            break;
        }
        if cpu_window_start.is_none() && now >= window_start {
            cpu_window_start = Some(CpuMark::now(&cfg.server_cpu, server_media));
            nodes.mark(false);
        }
        if now >= next_summary {
            next_summary += cfg.summary_interval;
            let s = summary_at(now, &joined, cpu_window_start.as_ref(), server_media);
            observe(Progress::Summary(&s));
        }
        let mut wake = next_summary;
        if cpu_window_start.is_none() {
            wake = wake.min(window_start);
        }
        if let Some(e) = end {
            wake = wake.min(e);
        }
        std::thread::sleep(wake.saturating_duration_since(Instant::now()).min(Duration::from_millis(100)));
    }
    let cpu_end = CpuMark::now(&cfg.server_cpu, server_media);
    nodes.mark(true);
    shared.stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.join();
    }
    let finished = Instant::now();
    let views: Vec<ThreadView> = shared.views.iter().map(|v| lock(v).clone()).collect();
    let cpu = cpu_window_start.as_ref().map(|c| crate::cpu::CpuUse::between(c, &cpu_end));
    let state = report::RunState {
        cfg,
        start,
        now: cpu_end.at.min(finished),
        window_start: shared.window_start.get().copied().filter(|&w| cpu_end.at >= w),
        views: &views,
        room_names: &room_names,
        room_sizes: &sizes,
        failed: failures(&joined),
        total: cfg.clients,
        markers: &lock(&shared.markers),
        detections: &lock(&shared.detections),
        cpu,
        threads,
    };
    let mut report = report::final_report(&state);
    report.nodes = nodes.summaries(&report.clients);
    if report.nodes.len() > 1 {
        report.latency_by_node = Some(report::latency_by_node(&state, |i| nodes.node_of(i)));
    }
    // The rejoin threads end with the run (each finishes the try it is in).
    drop(pool);
    if cfg.leave {
        let moved = lock(&shared.locations).clone();
        for (index, j) in joined.iter().enumerate() {
            // Where the participant is now: the node that answered its (re)join.
            let (at, loc) = match moved.get(&index) {
                Some((at, loc)) => (*at, Some(loc.as_str())),
                None => (nodes.node_of(index).unwrap_or(cfg.api), j.location.as_deref()),
            };
            if let Some(loc) = loc.filter(|l| !l.is_empty()) {
                let _ = cfg.http.request_as(at, &caller(cfg.token.as_deref()), "DELETE", loc, None, b"");
            }
        }
    }
    Ok(report)
}
