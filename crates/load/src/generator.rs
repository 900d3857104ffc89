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

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};
use tutti_client::{Client, Requester};
use tutti_mix::FRAME_SAMPLES;
use tutti_rtc::{ClientEvent, ClientPeer, FrameReader, FrameWriter};

use crate::LoadError;
use crate::arrival;
use crate::audio::{Frame, Material};
use crate::cpu::CpuMark;
use crate::events::{EventSocket, Moved};
use crate::handover::{self, Known};
use crate::marker::{MAX_PROBES, MarkerDetector};
use crate::model::{
    ClientSnapshot, ClientState, Detection, Lateness, LoadConfig, MarkerSent, Role, SilenceMode, ThreadView, WsFigures,
};
use crate::nodes::{JoinRecord, Nodes};
use crate::quality::StreamQuality;
use crate::report::{self, LoadReport, Summary};
use crate::rooms::{self, RoleMix};
use crate::talk::{Rng, TalkModel};

/// Send slots per 20 ms frame: each client sends in its own 1 ms slot, so a
/// thread's packets are spread over the frame as real clients' are, not sent
/// in one burst.
const SLOTS: usize = 20;
/// One slot.
const SLOT: Duration = Duration::from_millis(1);
/// Sockets read between two looks at the send schedule.
const RECEIVES_BETWEEN_SEND_CHECKS: usize = 32;

/// While silent in DTX, one frame in this many is sent (400 ms).
const DTX_EVERY: u32 = 20;
/// A client's WebSocket is polled under its index plus this (its UDP socket: the index).
const WS_TOKEN: usize = 1 << 30;
/// Reads of one WebSocket per readiness event before the thread looks at its
/// send schedule (the rest is read on the next round).
const WS_PUMPS_PER_EVENT: usize = 4;
/// How often each thread publishes its clients' figures.
const PUBLISH_EVERY: Duration = Duration::from_millis(250);
/// How long an old WebSocket, closed after its client moved, may take to
/// finish the close handshake before it is dropped anyway.
const CLOSE_WAIT: Duration = Duration::from_secs(2);
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

/// State the threads share with the run's controller.
pub(crate) struct Shared {
    stop: AtomicBool,
    /// Start of the measurement window, once known.
    window_start: OnceLock<Instant>,
    pub(crate) markers: Mutex<Vec<MarkerSent>>,
    pub(crate) detections: Mutex<Vec<Detection>>,
    views: Vec<Mutex<ThreadView>>,
    /// Where each rejoined client's participant is now (node, location), for the final DELETE.
    locations: Mutex<HashMap<usize, (SocketAddr, String)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panicked thread's data is still the best figures there are.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a `load-N` thread is handed.
enum ToWorker {
    /// A client, from the joiner.
    New(NewClient),
    /// A client's rejoin (from a `rejoin-K` thread): its new call, or why not.
    Rejoined { slot: usize, result: Result<JoinedPeer, String>, ticket: bool },
}

/// A client handed from the joiner to its thread.
struct NewClient {
    index: usize,
    room: usize,
    level: bool,
    ws: Option<EventSocket>,
    role: Role,
    probe: Option<usize>,
    peer: ClientPeer,
    link: NewLink,
    joined_at: Instant,
    /// The node (API address) that answered its join.
    node: SocketAddr,
}

/// A client's way to the media port, as the joiner made it.
enum NewLink {
    Udp(UdpSocket),
    /// ICE-TCP: connected to the server's passive candidate.
    Tcp(std::net::TcpStream, SocketAddr),
}

/// A client's way to the media port, registered with its thread's poll.
enum Link {
    Udp(mio::net::UdpSocket),
    Tcp(Box<TcpSide>),
}

/// An ICE-TCP client connection: RFC 4571 frames both ways, bounded send buffer.
struct TcpSide {
    stream: mio::net::TcpStream,
    server: SocketAddr,
    reader: FrameReader,
    writer: FrameWriter,
    broken: bool,
}

impl TcpSide {
    /// Writes what the buffer holds, without blocking (the rest waits).
    fn flush(&mut self) {
        // Bounded: each write takes bytes or stops.
        while !self.broken && !self.writer.is_empty() {
            let (a, _) = self.writer.pending();
            match self.stream.write(a) {
                Ok(0) => self.broken = true,
                Ok(n) => self.writer.consume(n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => self.broken = true,
            }
        }
    }
}

struct Listen {
    decoder: opus::Decoder,
    detector: MarkerDetector,
    pcm: Vec<f32>,
    heard: u64,
}

struct Sim {
    index: usize,
    room: usize,
    level: bool,
    ws: Option<EventSocket>,
    role: Role,
    probe: Option<usize>,
    peer: ClientPeer,
    link: Link,
    /// Its UDP socket is on the worker's epoll: until connected. A connected
    /// client's socket is read in its send slot instead (see [`Worker::fire`]).
    polled: bool,
    state: ClientState,
    joined_at: Instant,
    connected_at: Option<Instant>,
    talk: Option<TalkModel>,
    clip_pos: usize,
    /// Frames since the last one sent while silent (DTX).
    silent_run: u32,
    next_marker: Option<Instant>,
    marker_frame: Option<usize>,
    listen: Option<Listen>,
    quality: StreamQuality,
    /// After a move: the last packet's arrival on the old call, until the
    /// first packet on the new one measures the gap.
    gap_from: Option<Instant>,
    /// Its moves between nodes (cold: touched on a move only).
    hand: Hand,
    sent: u64,
    /// Frames are due from here (the window start or the first packet).
    since: Option<Instant>,
    timer: Option<Instant>,
}

impl Sim {
    fn snapshot(&self, now: Instant) -> ClientSnapshot {
        let q = &self.quality;
        let received = q.loss.received();
        let since = self.since.or(q.first_arrival);
        let span = since.map_or(0.0, |s| now.saturating_duration_since(s).as_secs_f64());
        let ws = self.ws.as_ref().map(|w| {
            let span = now.saturating_duration_since(w.since).as_secs_f64();
            let rate = |v: u64| if span > 0.0 { v as f64 / span } else { 0.0 };
            WsFigures {
                open: w.open,
                snapshot: w.snapshot,
                messages: w.messages,
                bytes: w.bytes,
                messages_per_second: rate(w.messages),
                bytes_per_second: rate(w.bytes),
                closed: w.closed.clone(),
            }
        });
        ClientSnapshot {
            index: self.index,
            room: self.room,
            level: self.level,
            ws,
            role: self.role,
            state: self.state,
            connect_ms: self.connected_at.map(|c| (c - self.joined_at).as_secs_f64() * 1000.0),
            sent: self.sent,
            received,
            expected: q.loss.expected(),
            lost: q.loss.lost(),
            loss_percent: if received == 0 { 100.0 } else { q.loss.loss_percent() },
            jitter_ms: q.jitter.jitter_ms(),
            drift_ms: q.drift.current_ms(),
            max_drift_ms: q.drift.max_ms(),
            packets_per_second: if span > 0.0 { received as f64 / span } else { 0.0 },
            frames_due: (span * 50.0) as u64,
            frames_covered: match (q.first_arrival, q.last_arrival) {
                (Some(first), Some(last)) if received > 0 => {
                    let head = since.map_or(0.0, |s| first.saturating_duration_since(s).as_secs_f64());
                    let tail = now.saturating_duration_since(last).as_secs_f64();
                    // A quiet edge counts up to one DTX interval (20 frames) and a frame of slack.
                    let edge = |secs: f64| ((secs * 50.0) as u64).min(u64::from(DTX_EVERY) + 1);
                    q.drift.progress_frames() + 1 + edge(head) + edge(tail)
                }
                _ => 0,
            },
            own_marker_peak: self.probe.and_then(|p| self.listen.as_ref().map(|l| l.detector.peak(p))),
            markers_heard: self.listen.as_ref().map_or(0, |l| l.heard),
            moves: self.hand.moves,
            rejoins: self.hand.rejoins,
            ticket_rejoins: self.hand.tickets,
            lost_call: self.hand.lost.is_some(),
            gaps_ms: self.hand.gaps_ms.clone(),
            error: self.hand.lost.clone(),
            connected_at: self.connected_at,
            lean_receive: {
                let r = self.peer.receive_stats();
                (r.lean, r.dropped)
            },
        }
    }
}

/// A client's moves: a drain's `moved`, or its call closed by its node.
#[derive(Default)]
struct Hand {
    /// A rejoin is asked for or waits for its next try.
    moving: bool,
    /// Tries of the current move that failed.
    failed: u32,
    /// Where `moved` said to go (its ticket used by the first try).
    moved: Option<Moved>,
    /// When the current move began.
    began: Option<Instant>,
    /// The node (API address) its call is on.
    node: Option<SocketAddr>,
    /// Moves begun.
    moves: u32,
    /// Moves completed (a new call joined).
    rejoins: u32,
    /// Of those, joined with a token redeemed from the `moved` ticket.
    tickets: u32,
    /// Why it could not rejoin (its call is lost).
    lost: Option<String>,
    /// Audio gap of each move: last packet before to first after, ms (moves
    /// in a row with no audio between them make one gap).
    gaps_ms: Vec<f64>,
}

struct Worker {
    id: usize,
    poll: Poll,
    clients: Vec<Sim>,
    slots: Vec<Vec<usize>>,
    timers: BinaryHeap<Reverse<(Instant, usize)>>,
    rx: Receiver<ToWorker>,
    shared: Arc<Shared>,
    /// Asks the rejoin threads (`None`: a closed call stays closed).
    rejoin: Option<Sender<handover::Request>>,
    /// Clients whose rejoin is tried again at a time (backoff).
    retries: BinaryHeap<Reverse<(Instant, usize)>>,
    /// Old WebSockets of moved clients finishing their close handshake (until a time).
    closing: Vec<(EventSocket, Instant)>,
    room_names: Arc<Vec<String>>,
    material: Arc<Material>,
    cfg: WorkerConfig,
    lateness: Lateness,
    measuring: bool,
    buf: Vec<u8>,
    /// Reads the UDP sockets with the kernel's arrival stamps.
    stamps: arrival::Stamps,
    /// Clients whose WebSocket may have more to read.
    ws_pending: Vec<usize>,
}

#[derive(Clone)]
struct WorkerConfig {
    silence: SilenceMode,
    seed: u64,
    marker_period: Duration,
    probes: usize,
    /// Tries of one rejoin before the call counts as lost.
    rejoin_attempts: u32,
    /// Clients read through tutti's lean SRTP receive.
    lean_receive: bool,
}

fn send_all(peer: &mut ClientPeer, link: &mut Link) {
    match link {
        Link::Udp(socket) => {
            while let Some(t) = peer.poll_transmit() {
                // A failed send is a lost datagram: the figures will show it.
                let _ = socket.send_to(&t.data, t.to);
                peer.recycle(t.data);
            }
        }
        Link::Tcp(side) => {
            while let Some(t) = peer.poll_transmit() {
                // A full buffer drops the packet, as a lost datagram.
                let _ = side.writer.push(&t.data);
                peer.recycle(t.data);
            }
            side.flush();
        }
    }
}

impl Worker {
    /// Registers a joined client's link with the poll under `i`.
    fn register(&self, link: NewLink, i: usize) -> std::io::Result<Link> {
        Ok(match link {
            NewLink::Udp(socket) => {
                let mut socket = mio::net::UdpSocket::from_std(socket);
                self.poll.registry().register(&mut socket, Token(i), Interest::READABLE)?;
                Link::Udp(socket)
            }
            NewLink::Tcp(stream, server) => {
                let mut stream = mio::net::TcpStream::from_std(stream);
                // Readable only: on loopback a write rarely leaves bytes behind, and what
                // does goes with the next send (a writable event per ACK would double
                // the wake-ups).
                self.poll.registry().register(&mut stream, Token(i), Interest::READABLE)?;
                Link::Tcp(Box::new(TcpSide {
                    stream,
                    server,
                    reader: FrameReader::new(tutti_rtc::tcp::MAX_RFC4571_FRAME),
                    writer: FrameWriter::new(256 * 1024),
                    broken: false,
                }))
            }
        })
    }

    fn add(&mut self, c: NewClient, now: Instant) -> std::io::Result<()> {
        let i = self.clients.len();
        let link = self.register(c.link, i)?;
        if let Some(ws) = &c.ws {
            ws.register(self.poll.registry(), Token(WS_TOKEN + i))?;
        }
        let talk = (c.role == Role::Talker).then(|| TalkModel::new(self.cfg.seed ^ ((c.index as u64 + 1) * 0x9E37)));
        let mut rng = Rng::new(self.cfg.seed.wrapping_add(c.index as u64));
        let clip_pos = rng.below(self.material.speech.len() as u64) as usize;
        let listen = matches!(c.role, Role::ProbeTalker | Role::ProbeListener)
            .then(|| opus::Decoder::new(48_000, opus::Channels::Mono).ok())
            .flatten()
            .map(|decoder| Listen {
                decoder,
                detector: MarkerDetector::new(self.cfg.probes),
                pcm: vec![0.0; FRAME_SAMPLES * 6],
                heard: 0,
            });
        let mut sim = Sim {
            index: c.index,
            room: c.room,
            level: c.level,
            ws: c.ws,
            role: c.role,
            probe: c.probe,
            peer: c.peer,
            link,
            polled: true,
            state: ClientState::Connecting,
            joined_at: c.joined_at,
            connected_at: None,
            talk,
            clip_pos,
            silent_run: 0,
            next_marker: None,
            marker_frame: None,
            listen,
            quality: StreamQuality::default(),
            gap_from: None,
            hand: Hand { node: Some(c.node), ..Hand::default() },
            sent: 0,
            since: None,
            timer: None,
        };
        sim.peer.handle_timeout(now);
        send_all(&mut sim.peer, &mut sim.link);
        self.slots[c.index % SLOTS].push(i);
        self.clients.push(sim);
        self.reschedule(i);
        // Whatever arrived between the join and the registration (edge-triggered poll).
        self.ws_pending.push(i);
        Ok(())
    }

    /// Reads client `i`'s WebSocket; remembers it when more may be waiting.
    /// A `moved` (the room handed over) or a socket closed by the server
    /// starts the client's move.
    fn read_ws(&mut self, i: usize, now: Instant) {
        let Some(ws) = self.clients[i].ws.as_mut() else { return };
        let mut more = true;
        for _ in 0..WS_PUMPS_PER_EVENT {
            more = ws.pump();
            if !more {
                break;
            }
        }
        let (moved, open) = (ws.moved.take(), ws.open);
        if more && open {
            self.ws_pending.push(i);
        }
        if let Some(m) = moved {
            self.begin_move(i, Some(m), now);
        } else if !open {
            self.begin_move(i, None, now);
        }
    }

    /// Client `i`'s call moves: `moved` names where its room went (its
    /// old call goes on until the new one is joined); `None`: the node
    /// closed the call. Asks for a rejoin unless one is under way, the
    /// call is already lost, or rejoins are off.
    fn begin_move(&mut self, i: usize, moved: Option<Moved>, now: Instant) {
        let c = &mut self.clients[i];
        if self.rejoin.is_none() || self.cfg.rejoin_attempts == 0 || c.hand.lost.is_some() {
            return;
        }
        if c.hand.moving {
            // Under way: a later `moved` says better where to go.
            if moved.is_some() {
                c.hand.moved = moved;
            }
            return;
        }
        c.hand.moving = true;
        c.hand.failed = 0;
        c.hand.moves += 1;
        c.hand.began = Some(now);
        c.hand.moved = moved;
        self.ask_rejoin(i);
    }

    /// Sends client `i`'s next rejoin try to the rejoin threads.
    fn ask_rejoin(&mut self, i: usize) {
        let c = &mut self.clients[i];
        let req = handover::Request {
            thread: self.id,
            slot: i,
            index: c.index,
            room: self.room_names.get(c.room).cloned().unwrap_or_default(),
            attempt: c.hand.failed,
            // The ticket is single-use: the first try takes it.
            moved: c.hand.moved.take(),
            current: c.hand.node,
        };
        let sent = self.rejoin.as_ref().is_some_and(|tx| tx.send(req).is_ok());
        if !sent {
            self.rejoin_failed(i, "the rejoin threads ended".into(), Instant::now());
        }
    }

    /// A rejoin try failed: another after a backoff, or the call is lost.
    fn rejoin_failed(&mut self, i: usize, why: String, now: Instant) {
        let attempts = self.cfg.rejoin_attempts;
        let c = &mut self.clients[i];
        c.hand.failed += 1;
        if c.hand.failed >= attempts {
            c.hand.moving = false;
            c.hand.lost = Some(format!("lost its call: {} rejoin tries failed, the last: {why}", c.hand.failed));
            c.state = ClientState::Closed;
        } else {
            self.retries.push(Reverse((now + handover::backoff(c.hand.failed), i)));
        }
    }

    /// Client `i` rejoined: the new call takes the old one's place (the old
    /// WebSocket is closed only now, so the participant it held there leaves
    /// once the new one is in), and the stream's baselines start again.
    fn swap(&mut self, i: usize, j: JoinedPeer, now: Instant) {
        let link = match self.register(j.link, i) {
            Ok(l) => l,
            Err(e) => return self.rejoin_failed(i, format!("registering a socket: {e}"), now),
        };
        let registry = self.poll.registry();
        let c = &mut self.clients[i];
        match &mut c.link {
            Link::Udp(socket) if c.polled => {
                let _ = registry.deregister(socket);
            }
            Link::Udp(_) => {}
            Link::Tcp(side) => {
                let _ = registry.deregister(&mut side.stream);
            }
        }
        c.peer.close();
        send_all(&mut c.peer, &mut c.link);
        if let Some(mut old) = c.ws.take() {
            old.deregister(registry);
            old.close();
            // Kept until the server answers the close: dropped now, with
            // unread events in its buffer, the connection would be reset,
            // and the server would keep the old participant for a resume.
            self.closing.push((old, now + CLOSE_WAIT));
        }
        if let Some(ws) = &j.ws
            && let Err(e) = ws.register(registry, Token(WS_TOKEN + i))
        {
            eprintln!("load-{}: registering a WebSocket: {e}", self.id);
        }
        let mut peer = j.peer;
        peer.set_lean_receive(self.cfg.lean_receive);
        c.peer = peer;
        c.link = link;
        c.ws = j.ws;
        c.polled = true;
        c.state = ClientState::Connecting;
        c.timer = None;
        // A move begun before the last one's new call delivered audio: one
        // gap, from the last audio heard before both.
        c.gap_from = c.gap_from.or(c.quality.last_arrival).or(c.hand.began);
        c.quality.rebase();
        c.hand.moving = false;
        c.hand.failed = 0;
        c.hand.moved = None;
        c.hand.rejoins += 1;
        c.hand.node = Some(j.node);
        let index = c.index;
        c.peer.handle_timeout(now);
        send_all(&mut c.peer, &mut c.link);
        lock(&self.shared.locations).insert(index, (j.node, j.location));
        self.reschedule(i);
        self.ws_pending.push(i);
    }

    fn reschedule(&mut self, i: usize) {
        let c = &mut self.clients[i];
        let next = c.peer.poll_timeout();
        if next != c.timer {
            c.timer = next;
            if let Some(t) = next {
                self.timers.push(Reverse((t, i)));
            }
        }
    }

    /// Takes every datagram waiting on client `i`'s socket.
    fn receive(&mut self, i: usize) {
        // An RTP packet moves no timer: the deadline is asked for again only
        // after anything else (STUN, DTLS, RTCP) arrived.
        let mut timers_moved = false;
        if matches!(self.clients[i].link, Link::Tcp(_)) {
            self.receive_tcp(i);
            return;
        }
        loop {
            let c = &mut self.clients[i];
            let Link::Udp(socket) = &c.link else { break };
            let (n, from, arrived) = match self.stamps.recv(socket, &mut self.buf) {
                Ok(r) => r,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // ICMP errors (e.g. the server went away) end nothing here.
                Err(_) => break,
            };
            timers_moved |= !tutti_rtc::is_rtp(&self.buf[..n]);
            // The peer's clock only moves forward; the figures take the arrival.
            c.peer.handle_datagram(from, &self.buf[..n], Instant::now());
            self.events(i, arrived);
        }
        let c = &mut self.clients[i];
        send_all(&mut c.peer, &mut c.link);
        if timers_moved || c.timer.is_none() {
            self.reschedule(i);
        }
    }

    /// Takes every frame waiting on client `i`'s TCP connection (edge-triggered:
    /// read until it would block), and writes what waits.
    fn receive_tcp(&mut self, i: usize) {
        let mut frames: Vec<Vec<u8>> = Vec::new();
        {
            let c = &mut self.clients[i];
            let Link::Tcp(side) = &mut c.link else { return };
            side.flush();
            loop {
                match side.stream.read(&mut self.buf) {
                    Ok(0) => {
                        side.broken = true;
                        break;
                    }
                    Ok(n) => {
                        if side.reader.read(&self.buf[..n], |f| frames.push(f.to_vec())).is_err() {
                            side.broken = true;
                            break;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        side.broken = true;
                        break;
                    }
                }
            }
        }
        let mut timers_moved = false;
        for f in frames {
            let now = Instant::now();
            timers_moved |= !tutti_rtc::is_rtp(&f);
            let c = &mut self.clients[i];
            let Link::Tcp(side) = &c.link else { return };
            let server = side.server;
            c.peer.handle_datagram(server, &f, now);
            self.events(i, now);
        }
        let c = &mut self.clients[i];
        if let Link::Tcp(side) = &c.link
            && side.broken
            && c.state != ClientState::Closed
        {
            // The server closed the connection: the call is over (it moves, if it can).
            c.state = ClientState::Closed;
            send_all(&mut c.peer, &mut c.link);
            self.begin_move(i, None, Instant::now());
            return;
        }
        send_all(&mut c.peer, &mut c.link);
        if timers_moved || c.timer.is_none() {
            self.reschedule(i);
        }
    }

    fn events(&mut self, i: usize, now: Instant) {
        let marker_period = self.cfg.marker_period;
        let probes = self.cfg.probes.max(1);
        let c = &mut self.clients[i];
        let mut closed = false;
        while let Some(event) = c.peer.poll_event() {
            match event {
                ClientEvent::Connected => {
                    c.state = ClientState::Connected;
                    if let Link::Udp(socket) = &mut c.link
                        && c.polled
                    {
                        // Off the epoll: on loopback the server's `sendmmsg`
                        // ran its callback for every datagram delivered.
                        c.polled = self.poll.registry().deregister(socket).is_err();
                    }
                    if c.connected_at.is_some() {
                        continue; // a rejoin: the first connect and the marker schedule stand
                    }
                    c.connected_at = Some(now);
                    if let Some(p) = c.probe {
                        // Probes take turns: probe p fires p/P of a period after the others.
                        let offset = marker_period.mul_f64(p as f64 / probes as f64);
                        c.next_marker = Some(now + Duration::from_secs(1) + offset);
                    }
                }
                ClientEvent::Closed => {
                    c.state = ClientState::Closed;
                    closed = true;
                }
                ClientEvent::Audio(p) => {
                    c.quality.on_packet(now, p.seq, p.timestamp);
                    if let Some(from) = c.gap_from {
                        // The first packet after a move.
                        c.gap_from = None;
                        c.hand.gaps_ms.push(now.saturating_duration_since(from).as_secs_f64() * 1000.0);
                    }
                    let Some(l) = &mut c.listen else { continue };
                    let Ok(n) = l.decoder.decode_float(&p.payload, &mut l.pcm, false) else { continue };
                    for onset in l.detector.push(&l.pcm[..n]) {
                        if Some(onset.probe) == c.probe {
                            continue; // self-echo is judged by the peak
                        }
                        l.heard += 1;
                        let shift = Duration::from_secs_f64(onset.offset_samples.unsigned_abs() as f64 / 48_000.0);
                        let at = if onset.offset_samples >= 0 { now + shift } else { now - shift };
                        lock(&self.shared.detections).push(Detection { listener: c.index, probe: onset.probe, at });
                    }
                }
            }
        }
        if closed {
            // Its node closed the call (DTLS close_notify): it moves, if it can.
            self.begin_move(i, None, now);
        }
    }

    /// Reads this slot's connected UDP clients (what arrived since their
    /// last slot, with its kernel arrival stamps), then sends each its next frame.
    fn fire(&mut self, slot: usize, now: Instant) {
        for k in 0..self.slots[slot].len() {
            let i = self.slots[slot][k];
            if !self.clients[i].polled {
                self.receive(i);
            }
        }
        for k in 0..self.slots[slot].len() {
            let i = self.slots[slot][k];
            let c = &mut self.clients[i];
            if c.state != ClientState::Connected {
                continue;
            }
            let m = &*self.material;
            let frame: Option<&Frame> = match (c.role, c.probe) {
                (Role::ProbeTalker, Some(p)) => {
                    if c.marker_frame.is_none() && c.next_marker.is_some_and(|t| now >= t) {
                        c.marker_frame = Some(0);
                        c.next_marker = c.next_marker.map(|t| t + self.cfg.marker_period);
                        let at = Instant::now();
                        lock(&self.shared.markers).push(MarkerSent { room: c.room, probe: p, client: c.index, at });
                    }
                    match c.marker_frame {
                        Some(f) => {
                            let frames = &m.markers[p];
                            c.marker_frame = (f + 1 < frames.len()).then_some(f + 1);
                            frames.get(f)
                        }
                        None => Some(&m.silence),
                    }
                }
                _ => {
                    let talking = c.talk.as_mut().is_some_and(TalkModel::next_frame);
                    if talking {
                        c.clip_pos = (c.clip_pos + 1) % m.speech.len();
                        m.speech.get(c.clip_pos)
                    } else {
                        Some(&m.silence)
                    }
                }
            };
            // DTX: of the silent frames, one in DTX_EVERY goes out; the
            // others are skipped, and the next packet's timestamp shows it.
            let silent = frame.is_some_and(|f| std::ptr::eq(f, &m.silence));
            let frame = if silent && self.cfg.silence == SilenceMode::Dtx {
                c.silent_run += 1;
                if c.silent_run % DTX_EVERY == 1 {
                    frame
                } else {
                    c.peer.skip_frames(1);
                    None
                }
            } else {
                c.silent_run = 0;
                frame
            };
            if let Some(f) = frame
                && c.peer.send_audio(f.payload.clone(), c.level.then_some(f.level), now).is_ok()
            {
                c.sent += 1;
                send_all(&mut c.peer, &mut c.link);
                // Sending sets no earlier timer (RTCP reports run on their own
                // period); the next received packet reschedules anyway.
            }
        }
    }

    fn publish(&self, now: Instant) {
        let mut view = lock(&self.shared.views[self.id]);
        view.clients = self.clients.iter().map(|c| c.snapshot(now)).collect();
        view.lateness = self.lateness.clone();
    }

    /// Fires the send slots that are due, in order (when more than a second
    /// behind, skips ahead). Returns when the next one is due.
    fn fire_due(&mut self, start: Instant, slot_n: &mut u64, now: Instant) -> Instant {
        let slot_at = |n: u64| start + SLOT * u32::try_from(n).unwrap_or(u32::MAX);
        let mut due = slot_at(*slot_n);
        if now.saturating_duration_since(due) > Duration::from_secs(1) {
            *slot_n += (now - due).as_millis() as u64;
            due = slot_at(*slot_n);
        }
        while due <= now {
            let fired = Instant::now();
            self.lateness.record(fired - due);
            self.fire((*slot_n % SLOTS as u64) as usize, fired);
            *slot_n += 1;
            due = slot_at(*slot_n);
        }
        due
    }

    fn run(mut self) {
        let start = Instant::now();
        let mut events = Events::with_capacity(1024);
        let mut slot_n: u64 = 0;
        let mut next_publish = start;
        loop {
            let now = Instant::now();
            if self.shared.stop.load(Ordering::Relaxed) {
                break;
            }
            while let Ok(m) = self.rx.try_recv() {
                match m {
                    ToWorker::New(c) => {
                        if let Err(e) = self.add(c, now) {
                            // The client cannot be polled; it stays out of the run.
                            eprintln!("load-{}: registering a socket: {e}", self.id);
                        }
                    }
                    ToWorker::Rejoined { slot, result, ticket } if slot < self.clients.len() => match result {
                        Ok(j) => {
                            self.clients[slot].hand.tickets += u32::from(ticket);
                            self.swap(slot, j, now);
                        }
                        Err(e) => self.rejoin_failed(slot, e, now),
                    },
                    ToWorker::Rejoined { .. } => {}
                }
            }
            // Rejoins due again (bounded: each client has one try pending at most).
            while let Some(&Reverse((t, i))) = self.retries.peek() {
                if t > now {
                    break;
                }
                self.retries.pop();
                self.ask_rejoin(i);
            }
            if !self.measuring && self.shared.window_start.get().is_some_and(|&w| now >= w) {
                self.measuring = true;
                self.lateness = Lateness::default();
                for c in &mut self.clients {
                    c.quality = StreamQuality::default();
                    c.sent = 0;
                    c.since = Some(now);
                    if let Some(ws) = &mut c.ws {
                        ws.reset(now);
                    }
                }
            }
            let due = self.fire_due(start, &mut slot_n, now);
            let now = Instant::now();
            while let Some(&Reverse((t, i))) = self.timers.peek() {
                if t > now {
                    break;
                }
                self.timers.pop();
                if self.clients[i].timer != Some(t) {
                    continue; // superseded
                }
                let c = &mut self.clients[i];
                c.timer = None;
                c.peer.handle_timeout(now);
                self.events(i, now);
                let c = &mut self.clients[i];
                send_all(&mut c.peer, &mut c.link);
                self.reschedule(i);
            }
            if now >= next_publish {
                self.publish(now);
                next_publish = now + PUBLISH_EVERY;
                // Old sockets read to their close (bounded per socket; dropped at their time).
                self.closing.retain_mut(|(ws, until)| {
                    ws.pump();
                    ws.open && now < *until
                });
            }
            let mut wake = due.min(next_publish);
            if let Some(&Reverse((t, _))) = self.timers.peek() {
                wake = wake.min(t);
            }
            if let Some(&Reverse((t, _))) = self.retries.peek() {
                wake = wake.min(t);
            }
            let timeout = if self.ws_pending.is_empty() {
                wake.saturating_duration_since(Instant::now())
            } else {
                Duration::ZERO
            };
            // Asleep to the next deadline with no socket able to wake the
            // thread, then a look without waiting: the server's burst is read
            // in one pass (with the kernel's arrival stamps), and on loopback,
            // where the sender pays the receiver's wake-ups, the server's
            // `sendmmsg` wakes nobody.
            if !timeout.is_zero() {
                std::thread::sleep(timeout);
            }
            self.stamps.refresh();
            if let Err(e) = self.poll.poll(&mut events, Some(Duration::ZERO))
                && e.kind() != std::io::ErrorKind::Interrupted
            {
                eprintln!("load-{}: poll failed: {e}", self.id);
                break;
            }
            // The server sends every participant's mix at once each tick: a
            // burst of hundreds of datagrams per thread. Sending keeps its
            // schedule through it (a bounded amount of receiving between checks).
            let now = Instant::now();
            for i in std::mem::take(&mut self.ws_pending) {
                self.read_ws(i, now);
            }
            for (n, ev) in events.iter().enumerate() {
                let i = ev.token().0;
                if i < self.clients.len() {
                    self.receive(i);
                } else if i >= WS_TOKEN && i - WS_TOKEN < self.clients.len() {
                    self.read_ws(i - WS_TOKEN, now);
                }
                if n % RECEIVES_BETWEEN_SEND_CHECKS == RECEIVES_BETWEEN_SEND_CHECKS - 1 {
                    self.fire_due(start, &mut slot_n, Instant::now());
                }
            }
        }
        let now = Instant::now();
        self.publish(now);
        for c in &mut self.clients {
            c.peer.close();
            send_all(&mut c.peer, &mut c.link);
            if let Some(ws) = &mut c.ws {
                ws.close();
            }
        }
    }
}

/// The joiner's record of each participant.
struct Joined {
    room: usize,
    role: Role,
    location: Option<String>,
    error: Option<String>,
}

/// The API caller the generator is: with the token, if any.
pub(crate) fn caller(token: Option<&str>) -> Requester<'_> {
    Requester { token, from: None }
}

/// The joins that failed: (client, room, role, why).
fn failures(joined: &[Joined]) -> Vec<(usize, usize, Role, String)> {
    joined.iter().enumerate().filter_map(|(i, j)| j.error.as_ref().map(|e| (i, j.room, j.role, e.clone()))).collect()
}

/// Redirects (`307`, WebSocket `moved`) a request follows: a cluster
/// node sends a client to the room's owner once.
const MAX_REDIRECTS: usize = 2;

/// Creates the room unless it exists, following a cluster's redirect to the
/// node that holds it. Returns that node's API address and its id (when
/// the answer names it). With `record`, the room records from its first join.
pub(crate) fn ensure_room_at(
    http: &Client,
    api: SocketAddr,
    token: Option<&str>,
    room: &str,
    record: bool,
) -> Result<(SocketAddr, Option<String>), LoadError> {
    let body =
        if record { serde_json::json!({ "id": room, "record": true }) } else { serde_json::json!({ "id": room }) };
    let body = body.to_string();
    let (r, at, _) = http
        .request_following(
            api,
            &caller(token),
            "POST",
            "/v1/rooms",
            Some("application/json"),
            body.as_bytes(),
            MAX_REDIRECTS,
        )
        .map_err(|e| LoadError::Api(format!("creating room '{room}': {e}")))?;
    if r.status == 201 || r.code() == "room_exists" {
        let node =
            serde_json::from_str::<serde_json::Value>(&r.body).ok().and_then(|v| v["node"].as_str().map(str::to_owned));
        Ok((at, node))
    } else {
        Err(LoadError::Api(format!("creating room '{room}': {} {}", r.status, r.body)))
    }
}

/// The address of the first host candidate in an SDP: the server's media address.
fn candidate_addr(sdp: &str) -> Option<SocketAddr> {
    let line = sdp.lines().find(|l| l.starts_with("a=candidate:"))?;
    let f: Vec<&str> = line.split_whitespace().collect();
    format!("{}:{}", f.get(4)?, f.get(5)?).parse().ok()
}

/// The address of the first passive TCP candidate in an SDP (ICE-TCP).
fn tcp_candidate_addr(sdp: &str) -> Option<SocketAddr> {
    let line =
        sdp.lines().find(|l| l.starts_with("a=candidate:") && l.contains(" tcp ") && l.contains("tcptype passive"))?;
    let f: Vec<&str> = line.split_whitespace().collect();
    let ip: std::net::IpAddr = f.get(4)?.parse().ok()?;
    Some(SocketAddr::new(ip, f.get(5)?.parse().ok()?))
}

/// A joined client, before its thread takes it.
struct JoinedPeer {
    peer: ClientPeer,
    link: NewLink,
    ws: Option<EventSocket>,
    location: String,
    media: Option<SocketAddr>,
    /// The API address that answered the join (the room's node).
    node: SocketAddr,
    /// Redirects followed to get there.
    redirects: usize,
}

/// Joins one client into `room`: through the room's WebSocket (`join`
/// message, the socket kept open) when `websocket`, else over REST.
fn join_one(
    http: &Client,
    api: SocketAddr,
    token: Option<&str>,
    room: &str,
    websocket: bool,
    name: &str,
    tcp: bool,
) -> Result<JoinedPeer, String> {
    let (mut peer, offer, socket) = if tcp {
        let (peer, offer) =
            ClientPeer::new_tcp(std::net::Ipv4Addr::LOCALHOST.into(), Instant::now()).map_err(|e| e.to_string())?;
        (peer, offer, None)
    } else {
        let socket = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("binding a UDP socket: {e}"))?;
        socket.set_nonblocking(true).map_err(|e| e.to_string())?;
        arrival::enable(&socket).map_err(|e| format!("SO_TIMESTAMPNS: {e}"))?;
        let local = socket.local_addr().map_err(|e| e.to_string())?;
        let (peer, offer) = ClientPeer::new(local, Instant::now()).map_err(|e| e.to_string())?;
        (peer, offer, Some(socket))
    };
    // ICE-TCP: the connection goes to the answer's passive TCP candidate.
    let link = |answer: &str| -> Result<NewLink, String> {
        match socket {
            Some(s) => Ok(NewLink::Udp(s)),
            None => {
                let server = tcp_candidate_addr(answer).ok_or("the answer has no TCP candidate (is media_tcp off?)")?;
                let s = std::net::TcpStream::connect_timeout(&server, Duration::from_secs(5))
                    .map_err(|e| format!("connecting to the TCP candidate {server}: {e}"))?;
                s.set_nonblocking(true).map_err(|e| e.to_string())?;
                let _ = s.set_nodelay(true);
                Ok(NewLink::Tcp(s, server))
            }
        }
    };
    if websocket {
        let (mut ws, node, redirects) = EventSocket::connect_following(http, api, room, token, MAX_REDIRECTS)?;
        let (id, answer) = ws.join(&offer, name)?;
        ws.set_nonblocking()?;
        peer.accept_answer(&answer, Instant::now()).map_err(|e| e.to_string())?;
        let location = format!("/v1/rooms/{room}/participants/{id}");
        let link = link(&answer)?;
        let media = candidate_addr(&answer);
        return Ok(JoinedPeer { peer, link, ws: Some(ws), location, media, node, redirects });
    }
    // JSON `{sdp, name}` rather than WHIP's bare SDP: the participant
    // carries the client's name, as a WebSocket join's does.
    let path = format!("/v1/rooms/{room}/participants");
    let body = serde_json::json!({ "sdp": offer, "name": name }).to_string();
    let (r, node, redirects) = http
        .request_following(api, &caller(token), "POST", &path, Some("application/json"), body.as_bytes(), MAX_REDIRECTS)
        .map_err(|e| format!("join request: {e}"))?;
    if r.status != 201 {
        return Err(format!("join refused: {} {}", r.status, r.body.trim()));
    }
    let answer = serde_json::from_str::<serde_json::Value>(&r.body)
        .ok()
        .and_then(|v| v["sdp"].as_str().map(str::to_owned))
        .ok_or_else(|| format!("join answer without an SDP: {}", r.body.trim()))?;
    peer.accept_answer(&answer, Instant::now()).map_err(|e| e.to_string())?;
    let location = r.header("location").unwrap_or_default().to_owned();
    let link = link(&answer)?;
    Ok(JoinedPeer { peer, link, ws: None, location, media: candidate_addr(&answer), node, redirects })
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
        let (at, id) = ensure_room_at(&cfg.http, cfg.api, cfg.token.as_deref(), name, cfg.record)?;
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
