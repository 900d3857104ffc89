//! # The session layer: where a participant joins, leaves, moves and is changed
//!
//! The control planes — the REST routes and the room WebSocket (`api`),
//! RTP in (a plain RTP/AVP offer on the REST route), and later a SIP edge
//! — each parse their own protocol and authenticate in their own way, then
//! ask this layer to join, leave, move, mute, grant speech, kick or ban.
//! Every check of a join runs here, once, in one order
//! ([`join::Sessions::join`](sessions::Sessions::join)); placement in a
//! cluster (here, another node, spread) is decided by the cluster's own
//! module (`crate::cluster`), which this layer calls down into. Operations
//! answer a [`crate::refusal::Refusal`] that each plane renders its own way
//! (the API as JSON with an HTTP status), and hand the room domain's
//! effects to the media plane.
//!
//! The files, from the bottom: `resumes` (the resume slots of lost
//! sockets), `grants` (what a grant may see and do), `sessions` (the
//! state); then what acts on it: `join`, `members` (leave, kick, ban,
//! changes), `moves` (breakouts), `rooms` (create, change, delete, reap,
//! drain), `keys` (a phone leg's keypad, both ways), `calls` (where a phone
//! call's room is in a cluster, before its INVITE is answered), `dialout`
//! (the seam through which the API has the SIP edge place a call).

pub(crate) mod calls;
pub(crate) mod data;
pub(crate) mod dialer;
pub(crate) mod dialout;
pub(crate) mod grants;
pub(crate) mod join;
pub(crate) mod keys;
pub(crate) mod legs;
pub(crate) mod lobby;
pub(crate) mod members;
pub(crate) mod moves;
pub(crate) mod resumes;
pub(crate) mod rooms;
pub(crate) mod sessions;
