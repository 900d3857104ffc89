//! Which peer is where: the room it belongs to, the I/O thread that owns it,
//! and the peers accepted by the API that wait for their first ICE check.
//!
//! An I/O thread that receives an ICE check for a server ufrag its mux does
//! not know asks [`Registry::claim`]; the answer is a decision, not an
//! action: [`Claim::Adopt`] (the peer was waiting: take it), [`Claim::Forward`]
//! (another I/O thread owns it: pass the datagram there) or
//! [`Claim::Unknown`]. The thread then does what it was told.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tutti_rtc::{PeerId, ServerPeer};

use super::member::ListenOnly;
use super::room::Room;

/// Where a peer is.
pub(crate) struct Home {
    pub(crate) room: Arc<Room>,
    /// The I/O thread that adopted it; `None` while it waits for its first ICE check.
    pub(crate) io: Option<usize>,
    pub(crate) ufrag: String,
    /// Its audio is dropped on arrival while set (see `Member::listen_only`).
    pub(crate) listen_only: ListenOnly,
}

/// A peer accepted by the API, waiting for the I/O thread its first ICE check reaches.
struct Pending {
    peer: ServerPeer,
    since: Instant,
}

/// What an I/O thread should do with an ICE check for a ufrag it does not know.
pub(crate) enum Claim {
    /// The peer waited for its first check: this thread owns it from now on.
    Adopt {
        /// The peer.
        peer: ServerPeer,
        /// Its room.
        room: Arc<Room>,
        /// Its audio is dropped on arrival while set (an admin may change it).
        listen_only: ListenOnly,
    },
    /// Another I/O thread owns the peer: pass the datagram there.
    Forward(usize),
    /// No such peer (gone, never was, or this thread owns it already).
    Unknown,
}

/// Every peer's place; one lock (in `Rooms`), so adoption and removal never race.
#[derive(Default)]
pub(crate) struct Registry {
    homes: HashMap<PeerId, Home>,
    /// Accepted peers by server ufrag, until adopted.
    pending: HashMap<String, Pending>,
    /// Adopted peers' ufrags, for checks that reach another I/O thread's
    /// socket (that thread then keeps the client's address in a table of its
    /// own: no datagram looks here but a verified ICE check).
    ufrags: HashMap<String, PeerId>,
}

impl Registry {
    /// Registers a peer accepted for `room`; it waits for its first ICE check.
    pub(crate) fn insert(&mut self, peer: ServerPeer, room: Arc<Room>, listen_only: ListenOnly, now: Instant) {
        let ufrag = peer.ufrag().to_owned();
        self.homes.insert(peer.id(), Home { room, io: None, ufrag: ufrag.clone(), listen_only });
        self.pending.insert(ufrag, Pending { peer, since: now });
    }

    /// Registers a participant that is no ICE peer (plain RTP): owned by
    /// I/O thread `io` from the start, never pending, no ufrag.
    pub(crate) fn insert_plain(&mut self, id: PeerId, room: Arc<Room>, listen_only: ListenOnly, io: usize) {
        self.homes.insert(id, Home { room, io: Some(io), ufrag: format!("plain:{}", id.0), listen_only });
    }

    /// Forgets a peer. Returns the I/O thread that owns it, if one adopted it.
    pub(crate) fn remove(&mut self, id: PeerId) -> Option<usize> {
        let home = self.homes.remove(&id)?;
        self.pending.remove(&home.ufrag);
        self.ufrags.remove(&home.ufrag);
        home.io
    }

    /// Moves a peer to another room. Returns the I/O thread that owns it,
    /// if one adopted it (a pending peer is adopted with its new room).
    pub(crate) fn rehome(&mut self, id: PeerId, room: Arc<Room>) -> Option<usize> {
        let home = self.homes.get_mut(&id)?;
        home.room = room;
        home.io
    }

    /// The room a peer is in.
    pub(crate) fn room_of(&self, id: PeerId) -> Option<Arc<Room>> {
        self.homes.get(&id).map(|h| h.room.clone())
    }

    /// Whether a peer is a plain RTP participant (no ICE peer).
    pub(crate) fn is_plain(&self, id: PeerId) -> bool {
        self.homes.get(&id).is_some_and(|h| h.ufrag.starts_with("plain:"))
    }

    /// Decides what I/O thread `io` does with an ICE check for `ufrag` (one
    /// its mux verified: see `tutti_rtc::Mux::handle_packet`).
    pub(crate) fn claim(&mut self, ufrag: &str, io: usize) -> Claim {
        if let Some(p) = self.pending.remove(ufrag) {
            let id = p.peer.id();
            let Some(home) = self.homes.get_mut(&id) else { return Claim::Unknown };
            home.io = Some(io);
            let (room, listen_only) = (home.room.clone(), home.listen_only.clone());
            self.ufrags.insert(ufrag.to_owned(), id);
            return Claim::Adopt { peer: p.peer, room, listen_only };
        }
        let Some(&id) = self.ufrags.get(ufrag) else { return Claim::Unknown };
        match self.homes.get(&id).and_then(|h| h.io) {
            Some(owner) if owner != io => Claim::Forward(owner),
            _ => Claim::Unknown,
        }
    }

    /// Peers accepted longer than `timeout` before `now` whose first ICE
    /// check never came: (room, participant id).
    pub(crate) fn stale(&self, now: Instant, timeout: Duration) -> Vec<(Arc<Room>, u64)> {
        self.pending
            .values()
            .filter(|p| now.saturating_duration_since(p.since) > timeout)
            .filter_map(|p| self.homes.get(&p.peer.id()).map(|h| (h.room.clone(), p.peer.id().0)))
            .collect()
    }

    /// The I/O thread that owns a peer: `None` for no such peer,
    /// `Some(None)` while it waits for its first ICE check.
    pub(crate) fn io_of(&self, id: PeerId) -> Option<Option<usize>> {
        self.homes.get(&id).map(|h| h.io)
    }

    /// (registered, pending).
    pub(crate) fn sizes(&self) -> (usize, usize) {
        (self.homes.len(), self.pending.len())
    }
}
