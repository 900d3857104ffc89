//! ICE over TCP (RFC 6544, passive) on the media port, in the I/O threads.
//!
//! Each I/O thread owns a TCP listener on the media port (SO_REUSEPORT,
//! like its UDP socket: the kernel spreads new connections over the
//! threads) and the connections it accepted, all registered with one
//! level-triggered epoll instance whose descriptor the thread's `ppoll`
//! waits on beside the UDP socket and the wake-up eventfd. No thread per
//! connection, no blocking call:
//!
//! ```text
//! epoll ready ─► accept (≤ ACCEPTS_PER_TURN) ─► TcpConnections::accept (limits) ─► registered
//!             ─► read (≤ READS_PER_TURN × READ_CHUNK per connection) ─► TcpConnections::receive
//!                 ─► frames (first must be a STUN check) ─► the thread routes them to its Mux
//! Mux transmit with tcp ─► TcpPlane::send ─► bounded send buffer (full: dropped, counted)
//! end of turn ─► TcpPlane::flush: non-blocking writes; the rest waits for the next turn
//! ```
//!
//! The sans-IO rules (limits, STUN-first, slowloris and idle timeouts,
//! framing, bounded buffers) live in [`tutti_rtc::tcp`]; this file only
//! moves bytes between sockets and that table. A connection whose first
//! check names a peer another I/O thread owns moves there, socket, buffers
//! and all ([`TcpPlane::detach`] / [`TcpPlane::attach`]).

use std::collections::{HashMap, HashSet};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Instant;

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use tutti_rtc::{ConnId, DetachedConn, Received, TcpClose, TcpConnections, TcpLimits, TcpStats, Transmit};

/// New connections taken per loop turn (the rest wait in the backlog).
const ACCEPTS_PER_TURN: usize = 64;
/// Reads per ready connection per loop turn: a flooding peer cannot hold the loop.
const READS_PER_TURN: usize = 4;
/// Bytes per read.
const READ_CHUNK: usize = 16 * 1024;
/// Ready descriptors taken per turn.
const EVENTS: usize = 256;
/// The epoll token of the listener (connections use their `ConnId`).
const LISTENER: u64 = u64::MAX;
/// Listen backlog.
const BACKLOG: i32 = 1024;

/// Binds `n` TCP listeners on `addr` (the UDP media address, its port
/// fixed), each with SO_REUSEPORT, non-blocking.
pub(crate) fn bind(addr: SocketAddr, n: usize) -> std::io::Result<Vec<TcpListener>> {
    let mut listeners = Vec::with_capacity(n);
    for _ in 0..n {
        let s = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
        s.set_reuse_address(true)?;
        s.set_reuse_port(true)?;
        s.set_nonblocking(true)?;
        s.bind(&addr.into())?;
        s.listen(BACKLOG)?;
        listeners.push(s.into());
    }
    Ok(listeners)
}

/// A frame read from a connection, for the thread to route.
pub(crate) struct Frame {
    pub(crate) conn: ConnId,
    pub(crate) from: SocketAddr,
    pub(crate) data: Vec<u8>,
}

/// A connection on its way to another I/O thread (see [`TcpPlane::detach`]).
pub(crate) struct MovingConn {
    pub(crate) stream: TcpStream,
    pub(crate) conn: DetachedConn,
}

/// One I/O thread's TCP side: its listener, its connections, their table.
pub(crate) struct TcpPlane {
    listener: TcpListener,
    epoll: Epoll,
    table: TcpConnections,
    socks: HashMap<ConnId, TcpStream>,
    /// Connections with bytes waiting to be written.
    dirty: HashSet<ConnId>,
    events: Vec<EpollEvent>,
    buf: Vec<u8>,
    /// Transmits for a TCP address with no connection here (it closed), dropped.
    no_connection: u64,
}

impl TcpPlane {
    /// Takes a bound listener (see [`bind`]).
    pub(crate) fn new(listener: TcpListener, limits: TcpLimits) -> std::io::Result<Self> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(std::io::Error::from)?;
        epoll.add(&listener, EpollEvent::new(EpollFlags::EPOLLIN, LISTENER)).map_err(std::io::Error::from)?;
        Ok(Self {
            listener,
            epoll,
            table: TcpConnections::new(limits),
            socks: HashMap::new(),
            dirty: HashSet::new(),
            events: vec![EpollEvent::empty(); EVENTS],
            buf: vec![0; READ_CHUNK],
            no_connection: 0,
        })
    }

    /// The descriptor to wait on: readable when the listener or a connection is.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.epoll.0.as_fd()
    }

    /// Whether bytes wait to be written (the thread then waits less long).
    pub(crate) fn has_pending_writes(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// When [`TcpPlane::handle_timeout`] next has work.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.table.poll_timeout()
    }

    /// The table's counters, with the transmits dropped for want of a connection.
    pub(crate) fn stats(&self) -> (TcpStats, u64) {
        (self.table.stats(), self.no_connection)
    }

    /// Accepts and reads what is ready, without waiting; complete frames go to `frames`.
    pub(crate) fn receive(&mut self, now: Instant, frames: &mut Vec<Frame>) {
        let n = match self.epoll.wait(&mut self.events, EpollTimeout::ZERO) {
            Ok(n) => n,
            Err(_) => return, // EINTR: next turn
        };
        let ready: Vec<(u64, EpollFlags)> = self.events[..n].iter().map(|e| (e.data(), e.events())).collect();
        for (token, flags) in ready {
            if token == LISTENER {
                self.accept(now);
            } else {
                self.read(ConnId(token), flags, now, frames);
            }
        }
    }

    fn accept(&mut self, now: Instant) {
        for _ in 0..ACCEPTS_PER_TURN {
            let (stream, from) = match self.listener.accept() {
                Ok(c) => c,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                // ECONNABORTED, EMFILE, …: this one is lost; try again next turn.
                Err(e) => {
                    tracing::debug!(error = %e, "TCP accept failed");
                    return;
                }
            };
            // Refused by the limits (counted by the table): dropping the stream closes it.
            let Ok(id) = self.table.accept(from, now) else { continue };
            if stream.set_nonblocking(true).is_err() || self.register(&stream, id).is_err() {
                self.table.close(id, TcpClose::PeerClosed);
                continue;
            }
            let _ = stream.set_nodelay(true);
            self.socks.insert(id, stream);
        }
    }

    fn register(&self, stream: &TcpStream, id: ConnId) -> nix::Result<()> {
        self.epoll.add(stream, EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP, id.0))
    }

    fn read(&mut self, id: ConnId, flags: EpollFlags, now: Instant, frames: &mut Vec<Frame>) {
        let Some(from) = self.table.peer_addr(id) else {
            self.drop_socket(id);
            return;
        };
        for _ in 0..READS_PER_TURN {
            let Some(stream) = self.socks.get_mut(&id) else { return };
            let n = match stream.read(&mut self.buf) {
                Ok(0) => {
                    self.close(id, TcpClose::PeerClosed);
                    return;
                }
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.close(id, TcpClose::PeerClosed);
                    return;
                }
            };
            let got = self.table.receive(id, &self.buf[..n], now, |f| {
                frames.push(Frame { conn: id, from, data: f.to_vec() });
            });
            if let Received::Closed(why) = got {
                tracing::debug!(%from, ?why, "TCP media connection closed");
                self.drop_socket(id);
                return;
            }
            if n < self.buf.len() {
                break;
            }
        }
        if flags.contains(EpollFlags::EPOLLERR) {
            self.close(id, TcpClose::PeerClosed);
        }
    }

    /// Queues a transmit the mux stamped TCP on the connection from its
    /// address (framed; a full buffer drops it, counted by the table).
    pub(crate) fn send(&mut self, t: &Transmit) {
        match self.table.find(t.to) {
            Some(id) => {
                if self.table.send(id, &t.data).is_ok() {
                    self.dirty.insert(id);
                }
            }
            None => self.no_connection += 1,
        }
    }

    /// Writes what waits, without blocking: what the kernel does not take
    /// now waits for the next turn (the table bounds it).
    pub(crate) fn flush(&mut self) {
        if self.dirty.is_empty() {
            return;
        }
        let dirty: Vec<ConnId> = self.dirty.drain().collect();
        for id in dirty {
            let mut broken = false;
            // Bounded: each turn writes some bytes or stops.
            for _ in 0..8 {
                let (a, _) = self.table.pending(id);
                if a.is_empty() {
                    break;
                }
                let Some(stream) = self.socks.get_mut(&id) else { break };
                match stream.write(a) {
                    Ok(0) => {
                        broken = true;
                        break;
                    }
                    Ok(n) => self.table.consume(id, n),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => {
                        broken = true;
                        break;
                    }
                }
            }
            if broken {
                self.close(id, TcpClose::PeerClosed);
            } else if !self.table.pending(id).0.is_empty() {
                self.dirty.insert(id);
            }
        }
    }

    /// Closes connections past their deadline (no STUN in time, idle), and
    /// drops the sockets of every connection the table closed.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        self.table.handle_timeout(now);
        while let Some((id, why)) = self.table.poll_closed() {
            tracing::debug!(?why, "TCP media connection closed");
            self.drop_socket(id);
        }
    }

    /// Closes a connection (counted under `why`).
    pub(crate) fn close(&mut self, id: ConnId, why: TcpClose) {
        self.table.close(id, why);
        self.drop_socket(id);
    }

    fn drop_socket(&mut self, id: ConnId) {
        if let Some(stream) = self.socks.remove(&id) {
            let _ = self.epoll.delete(&stream);
        }
        self.dirty.remove(&id);
    }

    /// Takes a connection out, to hand to the I/O thread that owns its peer.
    pub(crate) fn detach(&mut self, id: ConnId) -> Option<MovingConn> {
        let stream = self.socks.remove(&id)?;
        let _ = self.epoll.delete(&stream);
        self.dirty.remove(&id);
        let conn = self.table.detach(id)?;
        Some(MovingConn { stream, conn })
    }

    /// Takes in a connection another thread detached: its id here, or
    /// `None` when this table's limits refuse it (closed, counted).
    pub(crate) fn attach(&mut self, moving: MovingConn) -> Option<ConnId> {
        let MovingConn { stream, conn } = moving;
        let id = self.table.attach(conn).ok()?;
        if self.register(&stream, id).is_err() {
            self.table.close(id, TcpClose::PeerClosed);
            return None;
        }
        self.socks.insert(id, stream);
        // Its send buffer may hold bytes already.
        self.dirty.insert(id);
        Some(id)
    }
}

/// Adds one thread's TCP counters into a sum.
pub(crate) fn add_stats(sum: &mut TcpStats, s: &TcpStats) {
    sum.accepted += s.accepted;
    sum.open += s.open;
    sum.refused_total += s.refused_total;
    sum.refused_per_ip += s.refused_per_ip;
    sum.closed_not_stun += s.closed_not_stun;
    sum.closed_stun_timeout += s.closed_stun_timeout;
    sum.closed_idle += s.closed_idle;
    sum.closed_bad_frame += s.closed_bad_frame;
    sum.closed_by_peer += s.closed_by_peer;
    sum.closed_local += s.closed_local;
    sum.frames_in += s.frames_in;
    sum.bytes_in += s.bytes_in;
    sum.frames_out += s.frames_out;
    sum.dropped_out += s.dropped_out;
    sum.detached += s.detached;
    sum.attached += s.attached;
}
