//! What the rest of the server asks an I/O thread to do, and how it asks:
//! a channel plus an eventfd that wakes the thread from its poll.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use nix::sys::eventfd::EventFd;
use tutti_rtc::{MuxStats, PeerId, RtcError};

use crate::room::RoomMix;

/// A command for an I/O thread.
pub(crate) enum IoCommand {
    /// Send one tick's mixes to this thread's peers in those rooms.
    Deliver(Arc<Vec<RoomMix>>),
    /// Close (DTLS close_notify) and forget a peer.
    Close(PeerId),
    /// A peer was moved to another room: re-read its room (`Rooms::room_of`).
    Rehome(PeerId),
    /// Answer a connected peer's ICE-restart offer; the answer (or why not) goes to `reply`.
    Restart { peer: PeerId, offer: String, reply: tokio::sync::oneshot::Sender<Result<String, RtcError>> },
    /// A datagram for one of this thread's peers that reached another socket.
    Forward { from: SocketAddr, data: Vec<u8> },
    /// Close every peer and stop.
    Shutdown,
    /// A TCP media connection whose first check named one of this thread's
    /// peers, moved here from the thread that accepted it, with the frames
    /// read from it there and not yet handed on.
    TcpConn(Box<super::tcp::MovingConn>, Vec<Vec<u8>>),
}

/// Counters of one I/O thread (read by the stats and the metrics).
#[derive(Debug, Default)]
pub(crate) struct IoCounters {
    /// The thread's mux's counters, as of the end of its last loop turn.
    pub(crate) mux: Mutex<MuxStats>,
    /// ICE checks for a server ufrag no peer has (besides the mux's own unrouted).
    pub(crate) unknown_ufrag: AtomicU64,
    pub(crate) send_errors: AtomicU64,
    /// Verified ICE checks this thread asked the shared registry about (`Rooms::claim`).
    pub(crate) claims: AtomicU64,
    /// Client addresses this thread forwards to another (its `forwards` table), now.
    pub(crate) forwarded: AtomicU64,
    pub(crate) listen_only_dropped: AtomicU64,
    /// The thread's TCP connection table's counters (ICE-TCP), and the TCP
    /// transmits dropped for want of a connection.
    pub(crate) tcp: Mutex<(tutti_rtc::TcpStats, u64)>,
}

/// How to reach an I/O thread.
pub(crate) struct IoHandle {
    pub(crate) tx: Sender<IoCommand>,
    pub(crate) wake: Arc<EventFd>,
    pub(crate) counters: Arc<IoCounters>,
}

impl IoHandle {
    /// Queues a command and wakes the thread.
    pub(crate) fn send(&self, cmd: IoCommand) {
        if self.tx.send(cmd).is_ok() {
            // A full eventfd counter (2^64 − 2 wake-ups pending) is as awake as it gets.
            let _ = self.wake.write(1);
        }
    }
}
