//! One simulated client as its `load-N` thread holds it: its peer, its link
//! to the media port (UDP, or ICE-TCP with RFC 4571 framing), what it listens
//! for, its moves between nodes, and the snapshot of its figures that the
//! thread publishes.

use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::time::Instant;

use tutti_rtc::{ClientPeer, FrameReader, FrameWriter};

use crate::events::{EventSocket, Moved};
use crate::marker::MarkerDetector;
use crate::model::{ClientSnapshot, ClientState, Role, WsFigures};
use crate::quality::StreamQuality;
use crate::talk::TalkModel;

/// While silent in DTX, one frame in this many is sent (400 ms).
pub(super) const DTX_EVERY: u32 = 20;

/// A client handed from the joiner to its thread.
pub(super) struct NewClient {
    pub(super) index: usize,
    pub(super) room: usize,
    pub(super) level: bool,
    pub(super) ws: Option<EventSocket>,
    pub(super) role: Role,
    pub(super) probe: Option<usize>,
    pub(super) peer: ClientPeer,
    pub(super) link: NewLink,
    pub(super) joined_at: Instant,
    /// The node (API address) that answered its join.
    pub(super) node: SocketAddr,
}

/// A client's way to the media port, as the joiner made it.
pub(super) enum NewLink {
    Udp(UdpSocket),
    /// ICE-TCP: connected to the server's passive candidate.
    Tcp(std::net::TcpStream, SocketAddr),
}

/// A client's way to the media port, registered with its thread's poll.
pub(super) enum Link {
    Udp(mio::net::UdpSocket),
    Tcp(Box<TcpSide>),
}

/// An ICE-TCP client connection: RFC 4571 frames both ways, bounded send buffer.
pub(super) struct TcpSide {
    pub(super) stream: mio::net::TcpStream,
    pub(super) server: SocketAddr,
    pub(super) reader: FrameReader,
    pub(super) writer: FrameWriter,
    pub(super) broken: bool,
}

impl TcpSide {
    /// Writes what the buffer holds, without blocking (the rest waits).
    pub(super) fn flush(&mut self) {
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

pub(super) struct Listen {
    pub(super) decoder: opus::Decoder,
    pub(super) detector: MarkerDetector,
    pub(super) pcm: Vec<f32>,
    pub(super) heard: u64,
}

pub(super) struct Sim {
    pub(super) index: usize,
    pub(super) room: usize,
    pub(super) level: bool,
    pub(super) ws: Option<EventSocket>,
    pub(super) role: Role,
    pub(super) probe: Option<usize>,
    pub(super) peer: ClientPeer,
    pub(super) link: Link,
    /// Its UDP socket is on the worker's epoll: until connected. A connected
    /// client's socket is read in its send slot instead (see `Worker::fire`).
    pub(super) polled: bool,
    pub(super) state: ClientState,
    pub(super) joined_at: Instant,
    pub(super) connected_at: Option<Instant>,
    pub(super) talk: Option<TalkModel>,
    pub(super) clip_pos: usize,
    /// Frames since the last one sent while silent (DTX).
    pub(super) silent_run: u32,
    pub(super) next_marker: Option<Instant>,
    pub(super) marker_frame: Option<usize>,
    pub(super) listen: Option<Listen>,
    pub(super) quality: StreamQuality,
    /// After a move: the last packet's arrival on the old call, until the
    /// first packet on the new one measures the gap.
    pub(super) gap_from: Option<Instant>,
    /// Its moves between nodes (cold: touched on a move only).
    pub(super) hand: Hand,
    pub(super) sent: u64,
    /// Frames are due from here (the window start or the first packet).
    pub(super) since: Option<Instant>,
    pub(super) timer: Option<Instant>,
}

impl Sim {
    pub(super) fn snapshot(&self, now: Instant) -> ClientSnapshot {
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
pub(super) struct Hand {
    /// A rejoin is asked for or waits for its next try.
    pub(super) moving: bool,
    /// Tries of the current move that failed.
    pub(super) failed: u32,
    /// Where `moved` said to go (its ticket used by the first try).
    pub(super) moved: Option<Moved>,
    /// When the current move began.
    pub(super) began: Option<Instant>,
    /// The node (API address) its call is on.
    pub(super) node: Option<SocketAddr>,
    /// Moves begun.
    pub(super) moves: u32,
    /// Moves completed (a new call joined).
    pub(super) rejoins: u32,
    /// Of those, joined with a token redeemed from the `moved` ticket.
    pub(super) tickets: u32,
    /// Why it could not rejoin (its call is lost).
    pub(super) lost: Option<String>,
    /// Audio gap of each move: last packet before to first after, ms (moves
    /// in a row with no audio between them make one gap).
    pub(super) gaps_ms: Vec<f64>,
}

pub(super) fn send_all(peer: &mut ClientPeer, link: &mut Link) {
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
