//! # ICE over TCP (RFC 6544, passive), framed per RFC 4571: the sans-IO part
//!
//! Browsers whose network drops UDP can still reach a server over TCP: the
//! answer carries a `tcptype passive` host candidate on the media port, the
//! browser connects to it and sends its ICE checks, DTLS and SRTP over that
//! stream, each packet preceded by its length (RFC 4571: two bytes, big
//! endian). This module holds no socket and reads no clock:
//!
//! ```text
//! io thread: accept() ─► TcpConnections::accept(peer, now) ─► ConnId, or refused (limits)
//!            read()   ─► TcpConnections::receive(id, bytes, now, |frame| mux.handle_datagram(…TCP…))
//!                          first frame must be a STUN Binding request with a USERNAME, before
//!                          `stun_timeout`; oversized/empty frames close the connection
//! mux transmit (TCP) ─► TcpConnections::send(id, datagram) ─► bounded send buffer (full: dropped, counted)
//!            writable ─► TcpConnections::pending(id) ─► write() ─► TcpConnections::consume(id, n)
//!            timers   ─► TcpConnections::handle_timeout(now); poll_closed() ─► drop the socket
//! ```
//!
//! A connection costs at most `max_frame + 2` bytes of receive buffer and
//! `send_buffer` bytes of send buffer, whatever its peer does; a slow reader
//! loses datagrams (audio: better late never than late), it never stalls the
//! loop or grows memory.
//!
//! ## What webrtc-rs `rtc` 0.21.1 does with TCP (read in its sources)
//!
//! * **Passive TCP host candidates work in an ICE-lite answerer that owns no
//!   socket.** `rtc-ice-0.21.1/src/candidate/mod.rs:576-618`
//!   (`unmarshal_candidate`) parses `tcptype passive`; the marshalled
//!   candidate writes it back (`mod.rs:371`), so
//!   `pc.add_local_candidate("candidate:2 1 tcp <prio> <ip> <port> typ host tcptype passive")`
//!   puts it in the answer. ICE-lite only demands host candidates
//!   (`rtc-ice-0.21.1/src/agent/mod.rs:249`). Default network types include
//!   tcp4/tcp6 (`rtc-0.21.1/src/peer_connection/internal.rs:76-79`,
//!   `rtc-ice-0.21.1/src/network_type/mod.rs:26-27`); tutti sets none.
//! * **Inbound:** the agent picks the local candidate by the
//!   `TransportContext`'s `local_addr` *and* `transport_protocol`
//!   (`rtc-ice-0.21.1/src/agent/agent_proto.rs:50-52`,
//!   `agent/mod.rs:1026-1052` `find_local_candidate`). So the mux must hand
//!   TCP frames to `RTCPeerConnection::handle_read` with
//!   `TransportProtocol::TCP` and `local_addr` = the advertised TCP candidate
//!   address (the listening address), `peer_addr` = the connection's remote
//!   address. The browser's own TCP candidates are `tcptype active` with
//!   port 9 and are ignored (`agent/mod.rs:463-472`); its first check
//!   creates a peer-reflexive remote candidate with the *local* candidate's
//!   network type, i.e. tcp (`agent/mod.rs:1421-1437`). That prflx candidate
//!   has tcptype unspecified, so `can_pair_with` (`candidate/mod.rs:441-453`)
//!   refuses to pair it with our passive one in `trigger_request_connectivity_check`,
//!   but the controlled selector adds the pair itself when the request
//!   arrives (`agent/agent_selector.rs:527-529`), answers it and selects it
//!   on USE-CANDIDATE: the same path the UDP checks take today.
//! * **Outbound:** once a pair is selected, every DTLS/SRTP write is
//!   stamped with the selected pair's local base address, remote address and
//!   the local candidate's protocol (`rtc-0.21.1/src/peer_connection/handler/ice.rs:116-129`);
//!   STUN responses likewise (`agent/mod.rs:1501-1530` `send_stun`). So
//!   `poll_write()`'s `msg.transport.transport_protocol` says which socket a
//!   packet goes to; tutti's [`crate::Transmit`] carries it as `tcp`, and the
//!   lean path sends on the selected pair's protocol.
//! * **Priority:** `Candidate::local_preference` follows RFC 6544 §4.2
//!   (`candidate/mod.rs:479-537`): `2^13 * direction_pref + other_pref`,
//!   passive host → 4·8192+8191 = 40959, against 65535 for UDP. But the
//!   priority a browser uses is the number in our candidate line, which
//!   tutti writes itself: [`tcp_candidate`] / [`tcp_candidate_priority`]
//!   compute RFC 8445 §5.1.2.1's `2^24·126 + 2^8·local_pref + 255`
//!   = 2124414975 for the preferred address, below the UDP line's
//!   2130706431, so a browser that can use UDP does.
//! * **The pair can flip between UDP and TCP:** `find_remote_candidate`
//!   matches by address only, not protocol (`agent/mod.rs:1017-1024`); a
//!   client whose UDP and TCP source address were the same ip:port would
//!   confuse it. Not a concern for browsers (distinct ephemeral ports), but
//!   the mux's `by_addr` table must key by (protocol, address) or by
//!   connection, since a UDP and a TCP source may share ip:port.
//!
//! ## ICE restart in rtc 0.21.1 (answerer side)
//!
//! Supported implicitly: `set_remote_description` of a renegotiation offer
//! whose ice-ufrag/pwd changed stages and applies a restart before the
//! answer (`rtc-0.21.1/src/peer_connection/mod.rs:1542-1557`): remote
//! credentials, pairs, selected pair and remote candidates are dropped, local
//! candidates kept unless `with_discard_local_candidates_during_ice_restart`
//! (`internal.rs:1272-1279`), the agent goes back to Checking
//! (`rtc-ice-0.21.1/src/agent/mod.rs:710-730`). DTLS is *not* redone: the
//! ICE handler tunnels DTLS through whatever pair is selected
//! (`handler/ice.rs:95-100`), so SRTP keys and SSRCs survive.
//! Things to know:
//! * The new local credentials come from the `SettingEngine`'s
//!   `with_ice_credentials` (`internal.rs:1248-1254`); tutti sets those to
//!   the peer's fixed ufrag/pwd, so the **answer to a restart carries the
//!   same server ufrag/pwd**. Convenient for the mux (its `by_ufrag` route
//!   stays valid; the new source address is learnt from the first check),
//!   and an `rtc` offerer copes (`tests/tcp_spike.rs`,
//!   `restart_with_fixed_server_credentials`: audio back ~20 ms after the
//!   answer), but RFC 8839 §4.4.1.1.1 says both must change; whether
//!   Chromium and Firefox accept it must be tried in the browser test. To
//!   change them, tutti would build its ufrag with a generation suffix and
//!   needs an `rtc` API to set the restart credentials (none in 0.21.1: the
//!   `SettingEngine` is fixed at build time).
//! * `stage_ice_restart` sets the gathering state back to Gathering
//!   (`internal.rs:1255`): re-add the end-of-candidates marker
//!   (`add_local_candidate(RTCIceCandidateInit::default())`) after
//!   `set_remote_description` so the answer is complete (non-trickle); the
//!   spike does, and the local candidates are kept.
//! * The offerer side has `RTCPeerConnection::restart_ice`
//!   (`mod.rs:1801-1803`), so a Rust test client can restart too.
//!
//! ## How the mux and tutti's io threads use it
//!
//! [`crate::Mux::handle_tcp_frame`] takes each frame with its connection's
//! remote address, keys its routes on (transport, address) and stamps
//! `TransportProtocol::TCP` and the advertised address in the
//! `TransportContext`; its transmits come out with `tcp` set, and the io
//! thread (tutti-server's `media/tcp.rs`) queues them with
//! [`TcpConnections::send`] on the connection [`TcpConnections::find`]
//! names; a connection whose first check names a peer of another io thread
//! moves there with [`TcpConnections::detach`] / [`TcpConnections::attach`].
//! The client side is [`crate::ClientPeer::new_tcp`] with [`crate::ClientPeer::pump_tcp`].

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::stun;

/// The largest frame RFC 4571 can describe (its length is 16 bits).
pub const MAX_RFC4571_FRAME: usize = u16::MAX as usize;

/// Why a TCP stream's framing is broken; the connection must be closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    /// A frame announced more bytes than the limit.
    #[error("a frame of {len} bytes is larger than the limit of {max}")]
    TooLarge {
        /// The announced length.
        len: usize,
        /// The configured limit.
        max: usize,
    },
    /// A frame of zero bytes: no WebRTC packet is empty, and empty frames
    /// would let a peer keep a connection busy with no content.
    #[error("an empty frame")]
    Empty,
}

/// Turns a byte stream into RFC 4571 frames, incrementally and in bounded
/// memory: bytes may arrive in any split, one at a time included; at most
/// one partial frame (`max_frame` bytes) is held. After an error it stays
/// broken (every call returns the same error).
#[derive(Debug)]
pub struct FrameReader {
    max_frame: usize,
    header: [u8; 2],
    header_len: usize,
    /// The length of the frame being read, once its header is complete.
    want: Option<usize>,
    partial: Vec<u8>,
    broken: Option<FramingError>,
}

impl FrameReader {
    /// A reader refusing frames over `max_frame` bytes (at most 65535).
    pub fn new(max_frame: usize) -> Self {
        let max_frame = max_frame.clamp(1, MAX_RFC4571_FRAME);
        Self { max_frame, header: [0; 2], header_len: 0, want: None, partial: Vec::new(), broken: None }
    }

    /// The frame limit.
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// Bytes held of a frame not yet complete (header included).
    pub fn buffered(&self) -> usize {
        self.header_len + self.partial.len()
    }

    /// Capacity the reader holds (bounded by `max_frame`).
    pub fn capacity(&self) -> usize {
        self.partial.capacity()
    }

    /// Takes the next bytes of the stream and calls `on_frame` with each
    /// frame they complete, in order. Returns how many frames were complete.
    /// A frame wholly inside `input` is passed without a copy.
    pub fn read(&mut self, mut input: &[u8], mut on_frame: impl FnMut(&[u8])) -> Result<usize, FramingError> {
        if let Some(e) = self.broken {
            return Err(e);
        }
        let mut frames = 0;
        // Each turn consumes at least one byte or completes a frame that
        // consumed at least one: bounded by input.len() turns.
        while !input.is_empty() {
            let want = match self.want {
                Some(want) => want,
                None => {
                    let take = (2 - self.header_len).min(input.len());
                    self.header[self.header_len..self.header_len + take].copy_from_slice(&input[..take]);
                    self.header_len += take;
                    input = &input[take..];
                    if self.header_len < 2 {
                        break;
                    }
                    let len = usize::from(u16::from_be_bytes(self.header));
                    let err = if len == 0 {
                        Some(FramingError::Empty)
                    } else if len > self.max_frame {
                        Some(FramingError::TooLarge { len, max: self.max_frame })
                    } else {
                        None
                    };
                    if let Some(e) = err {
                        self.broken = Some(e);
                        self.partial = Vec::new();
                        return Err(e);
                    }
                    self.want = Some(len);
                    len
                }
            };
            if self.partial.is_empty() && input.len() >= want {
                on_frame(&input[..want]);
                input = &input[want..];
            } else {
                let take = (want - self.partial.len()).min(input.len());
                if self.partial.capacity() < want {
                    self.partial.reserve_exact(want - self.partial.len());
                }
                self.partial.extend_from_slice(&input[..take]);
                input = &input[take..];
                if self.partial.len() < want {
                    break;
                }
                on_frame(&self.partial);
                self.partial.clear();
            }
            frames += 1;
            self.want = None;
            self.header_len = 0;
        }
        Ok(frames)
    }
}

/// Why a datagram was not queued for a TCP connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The connection's send buffer is full (its reader is slow): the
    /// datagram is dropped and counted.
    #[error("the send buffer is full")]
    Full,
    /// The datagram does not fit a frame (empty, or over 65535 bytes).
    #[error("a datagram of {0} bytes cannot be framed")]
    Unframable(usize),
    /// No such open connection.
    #[error("no such connection")]
    UnknownConnection,
}

/// Frames outgoing datagrams (RFC 4571) into a bounded send buffer. Whole
/// frames are queued or dropped, never cut, so the stream stays in frame
/// even when datagrams are dropped.
#[derive(Debug)]
pub struct FrameWriter {
    buf: VecDeque<u8>,
    limit: usize,
    dropped: u64,
}

impl FrameWriter {
    /// A writer holding at most `limit` bytes (frame headers included).
    pub fn new(limit: usize) -> Self {
        Self { buf: VecDeque::new(), limit, dropped: 0 }
    }

    /// Queues one datagram as a frame, or drops it when it would overflow the buffer.
    pub fn push(&mut self, datagram: &[u8]) -> Result<(), SendError> {
        let len = u16::try_from(datagram.len()).ok().filter(|&l| l > 0).ok_or(SendError::Unframable(datagram.len()))?;
        if self.buf.len() + 2 + datagram.len() > self.limit {
            self.dropped += 1;
            return Err(SendError::Full);
        }
        self.buf.extend(len.to_be_bytes());
        self.buf.extend(datagram);
        Ok(())
    }

    /// The bytes waiting to be written, in order (two slices: a ring buffer).
    pub fn pending(&self) -> (&[u8], &[u8]) {
        self.buf.as_slices()
    }

    /// Forgets the first `n` bytes, written to the socket.
    pub fn consume(&mut self, n: usize) {
        let n = n.min(self.buf.len());
        self.buf.drain(..n);
    }

    /// Bytes waiting.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Datagrams dropped because the buffer was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

/// The limits of the TCP media port. Defaults suit a conference server
/// reached through corporate NATs (many participants behind one address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpLimits {
    /// Largest frame accepted (bytes); larger closes the connection.
    pub max_frame: usize,
    /// Send buffer per connection (bytes, frame headers included).
    pub send_buffer: usize,
    /// Time a new connection has to deliver its first frame, which must be a
    /// STUN Binding request (half-open and slowloris defense).
    pub stun_timeout: Duration,
    /// A connection with no complete frame for this long is closed.
    pub idle_timeout: Duration,
    /// Open connections at most.
    pub max_connections: usize,
    /// Open connections at most from one IPv4 address or one IPv6 /64 (a
    /// host usually holds a whole /64).
    pub max_per_ip: usize,
}

impl Default for TcpLimits {
    fn default() -> Self {
        Self {
            max_frame: 1500,
            send_buffer: 16 * 1024,
            stun_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(30),
            max_connections: 10_000,
            max_per_ip: 256,
        }
    }
}

/// Identifies a TCP connection of one [`TcpConnections`] table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// Why a connection was refused or closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TcpClose {
    /// Refused at accept: `max_connections` open already.
    TooManyConnections,
    /// Refused at accept: `max_per_ip` open already from that address.
    TooManyFromIp,
    /// The first frame was not a STUN Binding request with a USERNAME.
    NotStun,
    /// No first frame within `stun_timeout`.
    StunTimeout,
    /// No frame within `idle_timeout`.
    Idle,
    /// The framing broke (oversized or empty frame).
    BadFrame,
    /// The peer closed its end, or the socket failed (reported by the io thread).
    PeerClosed,
    /// Closed by the owner (the peer it carried went away).
    Local,
}

/// Counters of a [`TcpConnections`] table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpStats {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections open now.
    pub open: u64,
    /// Refused: too many connections.
    pub refused_total: u64,
    /// Refused: too many from one IP.
    pub refused_per_ip: u64,
    /// Closed: first frame not STUN.
    pub closed_not_stun: u64,
    /// Closed: no STUN in time.
    pub closed_stun_timeout: u64,
    /// Closed: idle.
    pub closed_idle: u64,
    /// Closed: bad framing.
    pub closed_bad_frame: u64,
    /// Closed: by the peer or a socket error.
    pub closed_by_peer: u64,
    /// Closed: by the owner.
    pub closed_local: u64,
    /// Frames received (and handed on).
    pub frames_in: u64,
    /// Bytes received (frame headers included).
    pub bytes_in: u64,
    /// Datagrams queued to send.
    pub frames_out: u64,
    /// Datagrams dropped because a send buffer was full.
    pub dropped_out: u64,
    /// Connections handed to another table (another io thread).
    pub detached: u64,
    /// Connections taken from another table.
    pub attached: u64,
}

impl TcpStats {
    fn count(&mut self, why: TcpClose) {
        let c = match why {
            TcpClose::TooManyConnections => &mut self.refused_total,
            TcpClose::TooManyFromIp => &mut self.refused_per_ip,
            TcpClose::NotStun => &mut self.closed_not_stun,
            TcpClose::StunTimeout => &mut self.closed_stun_timeout,
            TcpClose::Idle => &mut self.closed_idle,
            TcpClose::BadFrame => &mut self.closed_bad_frame,
            TcpClose::PeerClosed => &mut self.closed_by_peer,
            TcpClose::Local => &mut self.closed_local,
        };
        *c += 1;
    }
}

/// What [`TcpConnections::receive`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// The bytes were taken; this many frames were handed on.
    Frames(usize),
    /// The connection is closed (drop the socket); frames before the fault
    /// were handed on.
    Closed(TcpClose),
}

/// A connection between two tables (see [`TcpConnections::detach`]).
#[derive(Debug)]
pub struct DetachedConn(Conn);

impl DetachedConn {
    /// Its remote address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.0.peer
    }
}

#[derive(Debug)]
struct Conn {
    peer: SocketAddr,
    reader: FrameReader,
    writer: FrameWriter,
    /// A valid first frame (STUN Binding request) has arrived.
    greeted: bool,
    /// When it closes unless a frame arrives (STUN deadline, then idle).
    deadline: Instant,
}

/// The TCP connections of one media port: limits, the STUN-first rule,
/// timeouts, framing both ways. Sans-IO: the io thread owns the sockets and
/// passes bytes and `now` in.
#[derive(Debug)]
pub struct TcpConnections {
    limits: TcpLimits,
    conns: HashMap<ConnId, Conn>,
    by_addr: HashMap<SocketAddr, ConnId>,
    per_ip: HashMap<IpAddr, usize>,
    /// Deadlines, lazily superseded (an entry is live if it equals the connection's).
    timers: BinaryHeap<Reverse<(Instant, ConnId)>>,
    closed: VecDeque<(ConnId, TcpClose)>,
    next_id: u64,
    stats: TcpStats,
}

impl TcpConnections {
    /// An empty table with these limits.
    pub fn new(limits: TcpLimits) -> Self {
        Self {
            limits,
            conns: HashMap::new(),
            by_addr: HashMap::new(),
            per_ip: HashMap::new(),
            timers: BinaryHeap::new(),
            closed: VecDeque::new(),
            next_id: 0,
            stats: TcpStats::default(),
        }
    }

    /// The limits.
    pub fn limits(&self) -> &TcpLimits {
        &self.limits
    }

    /// The counters.
    pub fn stats(&self) -> TcpStats {
        TcpStats { open: self.conns.len() as u64, ..self.stats }
    }

    /// Open connections.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Whether none is open.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// A connection just accepted from `peer`: its id, or why it must be
    /// closed at once (the limits; counted).
    pub fn accept(&mut self, peer: SocketAddr, now: Instant) -> Result<ConnId, TcpClose> {
        if let Err(why) = self.admit(peer) {
            self.stats.count(why);
            return Err(why);
        }
        let conn = Conn {
            peer,
            reader: FrameReader::new(self.limits.max_frame),
            writer: FrameWriter::new(self.limits.send_buffer),
            greeted: false,
            deadline: now + self.limits.stun_timeout,
        };
        self.stats.accepted += 1;
        Ok(self.insert(conn))
    }

    /// Whether one more connection from `peer` is within the limits.
    fn admit(&self, peer: SocketAddr) -> Result<(), TcpClose> {
        if self.conns.len() >= self.limits.max_connections {
            Err(TcpClose::TooManyConnections)
        } else if self.per_ip.get(&source(peer)).copied().unwrap_or(0) >= self.limits.max_per_ip {
            Err(TcpClose::TooManyFromIp)
        } else {
            Ok(())
        }
    }

    fn insert(&mut self, conn: Conn) -> ConnId {
        let id = ConnId(self.next_id);
        self.next_id += 1;
        let (peer, deadline) = (conn.peer, conn.deadline);
        if let Some(old) = self.by_addr.insert(peer, id) {
            // The OS reused a 4-tuple whose close we have not seen: the old one is gone.
            self.close_with(old, TcpClose::PeerClosed);
            self.by_addr.insert(peer, id);
        }
        self.conns.insert(id, conn);
        *self.per_ip.entry(source(peer)).or_insert(0) += 1;
        self.timers.push(Reverse((deadline, id)));
        id
    }

    /// The connection from `peer`, where the mux's transmits for a TCP
    /// remote address go.
    pub fn find(&self, peer: SocketAddr) -> Option<ConnId> {
        self.by_addr.get(&peer).copied()
    }

    /// The remote address of a connection.
    pub fn peer_addr(&self, id: ConnId) -> Option<SocketAddr> {
        self.conns.get(&id).map(|c| c.peer)
    }

    /// Bytes read from a connection: calls `on_frame` with each complete
    /// frame (the first must be a STUN Binding request with a USERNAME,
    /// else nothing is handed on and the connection closes). A connection
    /// this table no longer holds reads as `Closed(Local)`: drop its socket.
    /// Only complete frames count as activity (a trickle of bytes does not
    /// push the deadline back).
    pub fn receive(&mut self, id: ConnId, bytes: &[u8], now: Instant, mut on_frame: impl FnMut(&[u8])) -> Received {
        let Some(conn) = self.conns.get_mut(&id) else {
            return Received::Closed(TcpClose::Local);
        };
        self.stats.bytes_in += bytes.len() as u64;
        let mut not_stun = false;
        let mut frames = 0usize;
        let greeted = &mut conn.greeted;
        let result = conn.reader.read(bytes, |frame| {
            if not_stun {
                return;
            }
            if !*greeted {
                if !is_binding_request(frame) {
                    not_stun = true;
                    return;
                }
                *greeted = true;
            }
            frames += 1;
            on_frame(frame);
        });
        self.stats.frames_in += frames as u64;
        let fault = match result {
            _ if not_stun => Some(TcpClose::NotStun),
            Err(_) => Some(TcpClose::BadFrame),
            Ok(_) => None,
        };
        if let Some(why) = fault {
            self.close_with(id, why);
            return Received::Closed(why);
        }
        if frames > 0 {
            conn.deadline = now + self.limits.idle_timeout;
            self.timers.push(Reverse((conn.deadline, id)));
        }
        Received::Frames(frames)
    }

    /// Queues a datagram for a connection (framed). A full buffer drops it
    /// (counted): the connection stays open, its reader is just slow.
    pub fn send(&mut self, id: ConnId, datagram: &[u8]) -> Result<(), SendError> {
        let conn = self.conns.get_mut(&id).ok_or(SendError::UnknownConnection)?;
        match conn.writer.push(datagram) {
            Ok(()) => {
                self.stats.frames_out += 1;
                Ok(())
            }
            Err(e) => {
                if e == SendError::Full {
                    self.stats.dropped_out += 1;
                }
                Err(e)
            }
        }
    }

    /// The bytes waiting to be written to a connection (empty if none).
    pub fn pending(&self, id: ConnId) -> (&[u8], &[u8]) {
        self.conns.get(&id).map_or((&[], &[]), |c| c.writer.pending())
    }

    /// `n` bytes of [`TcpConnections::pending`] were written.
    pub fn consume(&mut self, id: ConnId, n: usize) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.writer.consume(n);
        }
    }

    /// Closes a connection (the io thread saw EOF or an error: `PeerClosed`;
    /// or its owner is done: `Local`). Counted; not reported by `poll_closed`.
    pub fn close(&mut self, id: ConnId, why: TcpClose) {
        if self.remove(id).is_some() {
            self.stats.count(why);
        }
    }

    /// Takes a connection out of this table to hand it, with its socket, to
    /// the io thread that owns the peer its first check named (tutti's io
    /// threads each own their peers). Its buffers, deadline and STUN state go
    /// with it; it is counted as detached, not closed. `None` if no such connection.
    pub fn detach(&mut self, id: ConnId) -> Option<DetachedConn> {
        let conn = self.remove(id)?;
        self.stats.detached += 1;
        Some(DetachedConn(conn))
    }

    /// Takes in a connection another table detached: its new id here, or
    /// why it must be closed (this table's limits; counted).
    pub fn attach(&mut self, conn: DetachedConn) -> Result<ConnId, TcpClose> {
        let conn = conn.0;
        if let Err(why) = self.admit(conn.peer) {
            self.stats.count(why);
            return Err(why);
        }
        let id = self.insert(conn);
        self.stats.attached += 1;
        Ok(id)
    }

    /// Closes the connections whose deadline passed (no STUN in time, or idle).
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&Reverse((at, id))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            let Some(conn) = self.conns.get(&id) else { continue };
            if conn.deadline != at {
                continue; // superseded
            }
            let why = if conn.greeted { TcpClose::Idle } else { TcpClose::StunTimeout };
            self.close_with(id, why);
        }
    }

    /// When [`TcpConnections::handle_timeout`] next has work (possibly a superseded entry: harmless).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((at, _))| *at)
    }

    /// The next connection the table closed by itself (timeouts, bad input,
    /// a reused address): drop its socket.
    pub fn poll_closed(&mut self) -> Option<(ConnId, TcpClose)> {
        self.closed.pop_front()
    }

    fn close_with(&mut self, id: ConnId, why: TcpClose) {
        if self.remove(id).is_some() {
            self.stats.count(why);
            self.closed.push_back((id, why));
        }
    }

    fn remove(&mut self, id: ConnId) -> Option<Conn> {
        let conn = self.conns.remove(&id)?;
        if self.by_addr.get(&conn.peer) == Some(&id) {
            self.by_addr.remove(&conn.peer);
        }
        if let Some(n) = self.per_ip.get_mut(&source(conn.peer)) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_ip.remove(&source(conn.peer));
            }
        }
        Some(conn)
    }
}

/// What the per-IP limit counts by: an IPv4 address (IPv4-mapped IPv6
/// included), or an IPv6 /64.
fn source(peer: SocketAddr) -> IpAddr {
    match peer.ip() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
    }
}

/// Whether a frame is a STUN Binding request carrying a USERNAME (an ICE
/// connectivity check), the only acceptable first frame.
fn is_binding_request(frame: &[u8]) -> bool {
    stun::is_stun(frame) && frame[0] == 0x00 && frame[1] == 0x01 && stun::username(frame).is_some()
}

/// The priority of a TCP host candidate (RFC 8445 §5.1.2.1 with RFC 6544
/// §4.2's local preference): type preference 126 (host), local preference
/// `2^13 * direction + other` with direction 4 (passive), component 1.
/// Lower than any UDP host candidate tutti advertises (local preference 65535),
/// so a browser that can use UDP does. `other_pref` (0..=8191) orders
/// several addresses (8191 for the preferred one).
pub fn tcp_candidate_priority(other_pref: u16) -> u32 {
    let local_pref = (1u32 << 13) * 4 + u32::from(other_pref.min(8191));
    (126 << 24) + (local_pref << 8) + (256 - 1)
}

/// The SDP candidate line (without `a=`) of a passive TCP host candidate,
/// to hand to `RTCPeerConnection::add_local_candidate`.
pub fn tcp_candidate(foundation: u32, addr: SocketAddr, other_pref: u16) -> String {
    format!(
        "candidate:{foundation} 1 tcp {} {} {} typ host tcptype passive",
        tcp_candidate_priority(other_pref),
        addr.ip(),
        addr.port()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut v = (payload.len() as u16).to_be_bytes().to_vec();
        v.extend_from_slice(payload);
        v
    }

    /// A minimal STUN Binding request with a USERNAME "srv:cli".
    pub(crate) fn binding_request() -> Vec<u8> {
        let user = b"srv:cli\0"; // 7 bytes + 1 pad
        let mut m = vec![0x00, 0x01, 0x00, 12, 0x21, 0x12, 0xA4, 0x42];
        m.extend_from_slice(&[7; 12]); // transaction id
        m.extend_from_slice(&[0x00, 0x06, 0x00, 7]);
        m.extend_from_slice(user);
        m
    }

    #[test]
    fn reads_frames_split_anywhere() {
        let stream: Vec<u8> = [frame(b"hello"), frame(b"w"), frame(&[9; 300])].concat();
        let mut r = FrameReader::new(1500);
        let mut got = Vec::new();
        for b in &stream {
            r.read(std::slice::from_ref(b), |f| got.push(f.to_vec())).expect("valid stream");
        }
        assert_eq!(got, vec![b"hello".to_vec(), b"w".to_vec(), vec![9; 300]]);
        assert_eq!(r.buffered(), 0);
    }

    #[test]
    fn oversized_and_empty_frames_break_the_stream() {
        let mut r = FrameReader::new(100);
        assert_eq!(r.read(&[0, 101], |_| {}), Err(FramingError::TooLarge { len: 101, max: 100 }));
        assert_eq!(
            r.read(&frame(b"ok"), |_| panic!("a broken reader hands nothing on")),
            Err(FramingError::TooLarge { len: 101, max: 100 })
        );
        let mut r = FrameReader::new(100);
        assert_eq!(r.read(&[0, 0], |_| {}), Err(FramingError::Empty));
        // The full 100 bytes are fine.
        let mut r = FrameReader::new(100);
        assert_eq!(r.read(&frame(&[1; 100]), |_| {}), Ok(1));
    }

    #[test]
    fn writer_drops_whole_frames_when_full() {
        let mut w = FrameWriter::new(10);
        assert_eq!(w.push(b"abcd"), Ok(()));
        assert_eq!(w.push(b"abcd"), Err(SendError::Full)); // 6 + 6 > 10
        assert_eq!(w.push(b"ab"), Ok(())); // 6 + 4 = 10
        assert_eq!(w.dropped(), 1);
        assert_eq!(w.push(&[]), Err(SendError::Unframable(0)));
        assert_eq!(w.push(&vec![0; 70_000]), Err(SendError::Unframable(70_000)));
        let (a, b) = w.pending();
        assert_eq!([a, b].concat(), [frame(b"abcd"), frame(b"ab")].concat());
        w.consume(3);
        assert_eq!(w.len(), 7);
        assert_eq!(w.push(b"x"), Ok(()));
    }

    #[test]
    fn tcp_candidate_sorts_below_udp_host() {
        let udp_host = 2130706431u32; // what tutti's UDP candidate line says
        assert!(tcp_candidate_priority(8191) < udp_host);
        assert!(tcp_candidate_priority(8190) < tcp_candidate_priority(8191));
        // 126<<24 | (4*8192+8191)<<8 | 255, as RFC 6544 §4.2 computes it.
        assert_eq!(tcp_candidate_priority(8191), 2_124_414_975);
        let line = tcp_candidate(2, "192.0.2.1:3478".parse().expect("literal"), 8191);
        assert_eq!(line, "candidate:2 1 tcp 2124414975 192.0.2.1 3478 typ host tcptype passive");
    }

    #[test]
    fn per_ip_limit_counts_ipv6_by_slash_64() {
        let now = Instant::now();
        let mut t = TcpConnections::new(TcpLimits { max_per_ip: 2, ..TcpLimits::default() });
        let a = |s: &str| s.parse::<SocketAddr>().expect("literal");
        assert!(t.accept(a("[2001:db8:1:2::1]:1"), now).is_ok());
        assert!(t.accept(a("[2001:db8:1:2:ffff::9]:1"), now).is_ok());
        assert_eq!(t.accept(a("[2001:db8:1:2::77]:1"), now), Err(TcpClose::TooManyFromIp), "same /64");
        assert!(t.accept(a("[2001:db8:1:3::1]:1"), now).is_ok(), "another /64");
        assert!(t.accept(a("[::ffff:192.0.2.1]:1"), now).is_ok());
        assert!(t.accept(a("192.0.2.1:2"), now).is_ok());
        assert_eq!(t.accept(a("192.0.2.1:3"), now), Err(TcpClose::TooManyFromIp), "IPv4-mapped counts as IPv4");
    }

    #[test]
    fn binding_request_helper_is_one() {
        assert!(is_binding_request(&binding_request()));
        let mut resp = binding_request();
        resp[0] = 0x01; // success response
        assert!(!is_binding_request(&resp));
    }
}
