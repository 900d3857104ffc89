//! What the handle's calls answer with: where a room lives ([`Owner`],
//! [`Placement`], [`JoinPlacement`]), the notice of a room lost
//! ([`Fenced`]), the directory's rooms ([`RoomEntry`]) and spans ([`Span`]).

/// Fencing notices kept for the server before the oldest is dropped (counted).
pub const FENCED_CHANNEL_CAPACITY: usize = 1024;

/// The live node holding a room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Node id.
    pub node_id: String,
    /// The lease's epoch: goes up on every new claim of the room.
    pub epoch: u64,
    /// Where to redirect clients (the owner's public API URL).
    pub api_url: String,
    /// The owner's media address.
    pub media_addr: String,
    /// The owner's SIP address (`host:port`), where a call to the room is
    /// redirected; empty when it has no SIP edge.
    pub sip_addr: String,
}

/// Where a room lives after [`Cluster::place`](crate::Cluster::place) or [`Cluster::claim`](crate::Cluster::claim).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// This node holds the room's lease at `epoch`: host it here.
    Local {
        /// The lease's epoch.
        epoch: u64,
        /// The epoch was taken just now (a new room, or one whose owner died),
        /// rather than already held.
        new: bool,
    },
    /// Another node holds it: redirect there.
    Remote(Owner),
}

/// This node lost a room to another owner (or the room was closed
/// elsewhere): the server must close its copy and disconnect its clients
/// (they rejoin through any node and are redirected to the new owner).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fenced {
    /// The room.
    pub room: String,
    /// The epoch this node held.
    pub epoch: u64,
    /// What Redis holds instead (`node:epoch`, or `owner:epoch` of the room's record).
    pub holder: String,
}

/// A room of the directory, as [`Cluster::list_rooms`](crate::Cluster::list_rooms) sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomEntry {
    /// Room name.
    pub room: String,
    /// The last epoch given out.
    pub epoch: u64,
    /// The config JSON stored by the claim that created it, if any and
    /// signed with the cluster's key (see `Cluster::room_config`).
    pub config: Option<String>,
    /// The node recorded as owner (alive or not).
    pub recorded_owner: Option<String>,
    /// The live owner, when the lease is held and its node is alive; `None`
    /// means the room is placed again on its next join.
    pub owner: Option<Owner>,
}

/// Where a join of a room goes ([`Cluster::place_join`](crate::Cluster::place_join)), when rooms may
/// span several nodes (`room_spread`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinPlacement {
    /// Host the participant here. `owner`: this node holds the room's lease
    /// (its control and recording are here); else this node is a member of
    /// the room's span at `epoch` (its copy mixes its own participants and
    /// meets the others over the mesh).
    Here {
        /// The room's epoch.
        epoch: u64,
        /// This node holds the lease.
        owner: bool,
    },
    /// Send the join to this node: the owner, or another node of (or for) the span.
    Elsewhere(Owner),
}

/// A node of a room's span as the directory holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanMember {
    /// Node id.
    pub node_id: String,
    /// The room epoch it joined the span at.
    pub epoch: u64,
    /// Its mesh socket's address, from its signed record.
    pub mesh_addr: Option<std::net::SocketAddr>,
    /// Its node number, from its signed record.
    pub number: Option<u32>,
    /// Its API URL, from its signed record.
    pub api_url: String,
}

/// A room's span: its lease and the live nodes hosting its participants.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Span {
    /// The room.
    pub room: String,
    /// The lease: owner node and epoch (`None`: nobody holds it now).
    pub lease: Option<(String, u64)>,
    /// Members whose node is alive and whose record is signed (this node
    /// included when it is one), sorted by id.
    pub members: Vec<SpanMember>,
}
