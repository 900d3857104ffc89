//! The media side of the server: the UDP socket and its `io-0` thread, the
//! `mix-clock` thread, and the state they share with the API.

use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tutti_mix::{MixPool, Packet, ParticipantId, Room, RoomConfig};
use tutti_rtc::{Mux, MuxEvent, MuxStats, PeerId, Transmit};

use crate::metrics;

/// One 20 ms tick.
pub(crate) const TICK: Duration = Duration::from_millis(20);

/// A room and what the API knows about its participants.
pub(crate) struct RoomEntry {
    pub(crate) room: Room,
    pub(crate) names: BTreeMap<ParticipantId, String>,
}

/// Everything the threads and the API share, behind one lock.
pub(crate) struct Engine {
    pub(crate) mux: Mux,
    pub(crate) rooms: BTreeMap<String, RoomEntry>,
    /// Which room each peer is in (a peer's id is its participant id).
    pub(crate) peer_room: HashMap<PeerId, String>,
}

impl Engine {
    /// Removes a participant from its room and closes its peer.
    pub(crate) fn remove_peer(&mut self, peer: PeerId) {
        if let Some(room) = self.peer_room.remove(&peer)
            && let Some(entry) = self.rooms.get_mut(&room)
        {
            let _ = entry.room.remove_participant(ParticipantId(peer.0));
            entry.names.remove(&ParticipantId(peer.0));
        }
        let _ = self.mux.remove(peer);
    }

    /// Hands the mux's events to the rooms.
    fn route_events(&mut self) {
        while let Some(event) = self.mux.poll_event() {
            match event {
                MuxEvent::Connected(peer) => tracing::info!(%peer, "peer connected"),
                MuxEvent::Audio(peer, a) => {
                    let Some(room) = self.peer_room.get(&peer) else { continue };
                    if let Some(entry) = self.rooms.get_mut(room) {
                        let packet = Packet { seq: a.seq, timestamp: a.timestamp, payload: a.payload, level: a.level };
                        let _ = entry.room.push_packet(ParticipantId(peer.0), packet);
                    }
                }
                MuxEvent::Closed(peer) => {
                    tracing::info!(%peer, "peer closed");
                    self.remove_peer(peer);
                }
            }
        }
    }

    /// What the mux has to send.
    pub(crate) fn take_transmits(&mut self) -> Vec<Transmit> {
        std::iter::from_fn(|| self.mux.poll_transmit()).collect()
    }
}

/// The state shared by the API handlers and the media threads.
pub(crate) struct Shared {
    engine: Mutex<Engine>,
    pub(crate) socket: UdpSocket,
    pub(crate) pool: MixPool,
    pub(crate) stopping: AtomicBool,
    pub(crate) overruns: AtomicU64,
    pub(crate) next_room: AtomicU64,
    pub(crate) room_defaults: RoomConfig,
}

impl Shared {
    pub(crate) fn new(engine: Engine, socket: UdpSocket, pool: MixPool, room_defaults: RoomConfig) -> Self {
        Self {
            engine: Mutex::new(engine),
            socket,
            pool,
            stopping: AtomicBool::new(false),
            overruns: AtomicU64::new(0),
            next_room: AtomicU64::new(1),
            room_defaults,
        }
    }

    /// The engine. A panic elsewhere while holding the lock is a bug, but it
    /// must not take every later request down with it: the state is still used.
    pub(crate) fn engine(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn send(&self, transmits: Vec<Transmit>) {
        let (mut sent, mut bytes, mut errors) = (0, 0, 0);
        for t in transmits {
            match self.socket.send_to(&t.data, t.to) {
                Ok(n) => (sent, bytes) = (sent + 1, bytes + n as u64),
                Err(e) => {
                    errors += 1;
                    tracing::debug!(to = %t.to, error = %e, "send failed");
                }
            }
        }
        metrics::packets_out(sent, bytes, errors);
    }
}

/// Receives datagrams and runs the peers' timers, until `stopping`.
pub(crate) fn spawn_io(shared: Arc<Shared>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name("io-0".into()).spawn(move || {
        let mut buf = vec![0u8; 2048];
        let mut reported = MuxStats::default();
        while !shared.stopping.load(Ordering::Relaxed) {
            let received = shared.socket.recv_from(&mut buf);
            let now = Instant::now();
            let out = {
                let mut engine = shared.engine();
                if let Ok((n, from)) = received {
                    metrics::packets_in(1, n as u64);
                    engine.mux.handle_datagram(from, &buf[..n], now);
                }
                engine.mux.handle_timeout(now);
                engine.route_events();
                metrics::media(&mut reported, engine.mux.stats());
                engine.take_transmits()
            };
            shared.send(out);
        }
    })
}

/// Ticks every room every 20 ms on an absolute schedule and sends each
/// participant their mix, until `stopping`.
pub(crate) fn spawn_clock(shared: Arc<Shared>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name("mix-clock".into()).spawn(move || {
        let start = Instant::now();
        let mut tick = 0u64;
        while !shared.stopping.load(Ordering::Relaxed) {
            let due = start + TICK * u32::try_from(tick).unwrap_or(u32::MAX);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            } else if now - due > TICK {
                // Behind by more than a tick: count it and skip to the present.
                let behind = ((now - due).as_millis() / TICK.as_millis()) as u64;
                shared.overruns.fetch_add(behind, Ordering::Relaxed);
                metrics::tick_overruns(behind);
                tick += behind;
            }
            let started = Instant::now();
            let mut totals = metrics::TickTotals::default();
            let out = {
                let mut engine = shared.engine();
                let now = Instant::now();
                let Engine { mux, rooms, .. } = &mut *engine;
                for entry in rooms.values_mut() {
                    let report = entry.room.tick(&shared.pool, tick);
                    totals.add(&report);
                    for (id, payload) in entry.room.deliveries() {
                        if payload.is_empty() {
                            continue;
                        }
                        // The level of the mix: its loudest speaker other than the receiver.
                        let level = report.speakers.iter().filter(|s| s.id != id).map(|s| s.level).min();
                        let _ = mux.send_audio(PeerId(id.0), payload.clone(), level, now);
                    }
                }
                engine.take_transmits()
            };
            shared.send(out);
            metrics::tick(started.elapsed(), &totals);
            tick += 1;
        }
    })
}

/// Binds the media socket. Reads time out so the I/O loop also serves timers.
pub(crate) fn bind_media(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    let socket = UdpSocket::bind(addr)?;
    socket.set_read_timeout(Some(Duration::from_millis(5)))?;
    Ok(socket)
}
