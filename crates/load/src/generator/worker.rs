//! A `load-N` thread: what it shares with the run's controller and is
//! handed by it, its clients and their timers, adding a joined client, and
//! its loop (sleep to the next send slot, then read what arrived without
//! waiting). What it receives, sends and does when a client moves are in
//! `receive`, `send` and `moves`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};
use tutti_mix::FRAME_SAMPLES;
use tutti_rtc::{FrameReader, FrameWriter};

use super::client::{Hand, Link, Listen, NewClient, NewLink, Sim, TcpSide, send_all};
use super::join::JoinedPeer;
use crate::arrival;
use crate::audio::Material;
use crate::events::EventSocket;
use crate::handover;
use crate::marker::MarkerDetector;
use crate::model::{ClientState, Detection, Lateness, MarkerSent, Role, SilenceMode, ThreadView};
use crate::quality::StreamQuality;
use crate::talk::{Rng, TalkModel};

/// Send slots per 20 ms frame: each client sends in its own 1 ms slot, so a
/// thread's packets are spread over the frame as real clients' are, not sent
/// in one burst.
pub(super) const SLOTS: usize = 20;
/// One slot.
pub(super) const SLOT: Duration = Duration::from_millis(1);
/// Sockets read between two looks at the send schedule.
const RECEIVES_BETWEEN_SEND_CHECKS: usize = 32;

/// A client's WebSocket is polled under its index plus this (its UDP socket: the index).
pub(super) const WS_TOKEN: usize = 1 << 30;

/// How often each thread publishes its clients' figures.
const PUBLISH_EVERY: Duration = Duration::from_millis(250);

/// State the threads share with the run's controller.
pub(crate) struct Shared {
    pub(super) stop: AtomicBool,
    /// Start of the measurement window, once known.
    pub(super) window_start: OnceLock<Instant>,
    pub(crate) markers: Mutex<Vec<MarkerSent>>,
    pub(crate) detections: Mutex<Vec<Detection>>,
    pub(super) views: Vec<Mutex<ThreadView>>,
    /// Where each rejoined client's participant is now (node, location), for the final DELETE.
    pub(super) locations: Mutex<HashMap<usize, (SocketAddr, String)>>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panicked thread's data is still the best figures there are.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a `load-N` thread is handed.
pub(super) enum ToWorker {
    /// A client, from the joiner.
    New(NewClient),
    /// A client's rejoin (from a `rejoin-K` thread): its new call, or why not.
    Rejoined { slot: usize, result: Result<JoinedPeer, String>, ticket: bool },
}

pub(super) struct Worker {
    pub(super) id: usize,
    pub(super) poll: Poll,
    pub(super) clients: Vec<Sim>,
    pub(super) slots: Vec<Vec<usize>>,
    pub(super) timers: BinaryHeap<Reverse<(Instant, usize)>>,
    pub(super) rx: Receiver<ToWorker>,
    pub(super) shared: Arc<Shared>,
    /// Asks the rejoin threads (`None`: a closed call stays closed).
    pub(super) rejoin: Option<Sender<handover::Request>>,
    /// Clients whose rejoin is tried again at a time (backoff).
    pub(super) retries: BinaryHeap<Reverse<(Instant, usize)>>,
    /// Old WebSockets of moved clients finishing their close handshake (until a time).
    pub(super) closing: Vec<(EventSocket, Instant)>,
    pub(super) room_names: Arc<Vec<String>>,
    pub(super) material: Arc<Material>,
    pub(super) cfg: WorkerConfig,
    pub(super) lateness: Lateness,
    pub(super) measuring: bool,
    pub(super) buf: Vec<u8>,
    /// Reads the UDP sockets with the kernel's arrival stamps.
    pub(super) stamps: arrival::Stamps,
    /// Clients whose WebSocket may have more to read.
    pub(super) ws_pending: Vec<usize>,
}

#[derive(Clone)]
pub(super) struct WorkerConfig {
    pub(super) silence: SilenceMode,
    pub(super) seed: u64,
    pub(super) marker_period: Duration,
    pub(super) probes: usize,
    /// Tries of one rejoin before the call counts as lost.
    pub(super) rejoin_attempts: u32,
    /// Clients read through tutti's lean SRTP receive.
    pub(super) lean_receive: bool,
}

impl Worker {
    /// Registers a joined client's link with the poll under `i`.
    pub(super) fn register(&self, link: NewLink, i: usize) -> std::io::Result<Link> {
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

    pub(super) fn reschedule(&mut self, i: usize) {
        let c = &mut self.clients[i];
        let next = c.peer.poll_timeout();
        if next != c.timer {
            c.timer = next;
            if let Some(t) = next {
                self.timers.push(Reverse((t, i)));
            }
        }
    }

    fn publish(&self, now: Instant) {
        let mut view = lock(&self.shared.views[self.id]);
        view.clients = self.clients.iter().map(|c| c.snapshot(now)).collect();
        view.lateness = self.lateness.clone();
    }

    pub(super) fn run(mut self) {
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
