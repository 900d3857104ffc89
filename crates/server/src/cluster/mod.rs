//! # This node in a cluster
//!
//! Where a room lives and how this node keeps its part of the directory
//! true: locating and placing rooms, hosting them, the locks that order a
//! room's claim against its lease given back, redirect tickets, the spans
//! of rooms spread over nodes with their rosters and control messages, the
//! load reports, and the drain that hands rooms over. On a single node (no
//! Redis) the same calls answer from this node alone. The session layer
//! and the API call down into it; it never reaches up into them.
//!
//! ```text
//! request for room r ─► r hosted here? ─► serve it (no Redis needed)
//!   else Cluster::place(r) (Cluster::claim(r) when the request carries ?ticket=)
//!     Local  ─► create r here (with the config stored at its creation, else the
//!               defaults; a create: the creator's config), relay its events
//!     Remote ─► the API answers 307 Location: <owner api_url><path>?ticket=<single-use ticket>
//!     Unavailable | NoEligibleNode | Untrusted ─► 503 cluster_unavailable + Retry-After
//! ```
//!
//! A redirect ticket carries the least grant its request needs
//! ([`tickets::least_grant`]: the room, never `*`; `admin` only for a
//! request that may need it, never for a join or a read) and is bound to
//! the request's method and path: an admin's `DELETE` is redirected with a
//! ticket that deletes that room once, and does nothing else.
//!
//! In a room spread over nodes, a participant's routes go to the node
//! hosting the participant ([`locate::participant_here`]: its id carries
//! the node's number), and room-wide changes reach the other nodes as
//! control messages ([`control`]).
//!
//! A WebSocket handshake does not follow redirects: on a node that does
//! not hold the room the socket opens and says `{"type": "moved", "room",
//! "node", "api_url", "ticket"}` ([`tickets::moved_ticket`]). The page
//! never carries its bearer token to another origin: it goes to
//! `<api_url>/v1/rooms/{room}/enter?ticket=…`, which burns the ticket and
//! answers `303` to the page at that origin with a fresh token for that
//! room only, expiring when the original one does.
//!
//! The files, from the bottom: `node` (this node and what it keeps),
//! `locks`, `nodes` (the other nodes), `options` (a room's options that
//! travel), `roster`, `tickets`; then what acts
//! on a [`node::Node`]: `hosting`, `locate`, `control`, `spans`, `load`,
//! `handover` (the drain).

pub(crate) mod control;
pub(crate) mod drain;
pub(crate) mod handover;
pub(crate) mod hosting;
pub(crate) mod load;
pub(crate) mod locate;
pub(crate) mod locks;
pub(crate) mod node;
pub(crate) mod nodes;
pub(crate) mod options;
pub(crate) mod roster;
pub(crate) mod spans;
pub(crate) mod tickets;

#[cfg(test)]
mod tests;
