//! The mesh's metrics (rooms spread over several nodes; see
//! `docs/operating/metrics.md`), recorded by the mix clock's mesh glue.

/// Mesh datagrams sent to other nodes, counter.
pub const DATAGRAMS_SENT: &str = "tutti_mesh_datagrams_sent_total";
/// Bytes of them (UDP payloads), counter.
pub const SENT_BYTES: &str = "tutti_mesh_sent_bytes_total";
/// Mesh datagrams received and verified, counter.
pub const DATAGRAMS_RECEIVED: &str = "tutti_mesh_datagrams_received_total";
/// Bytes of them, counter.
pub const RECEIVED_BYTES: &str = "tutti_mesh_received_bytes_total";
/// Mesh datagrams dropped, by `reason`, counter.
pub const DATAGRAMS_DROPPED: &str = "tutti_mesh_datagrams_dropped_total";
/// Ticks of a peer whose selected flags disagreed with this node's selection, counter.
pub const SELECTION_MISMATCHES: &str = "tutti_mesh_selection_mismatches_total";
/// Rooms this node shares with other nodes now, gauge.
pub const ROOMS: &str = "tutti_mesh_rooms";
/// Other nodes of those rooms heard within 200 ms, summed over the rooms, gauge.
pub const PEERS: &str = "tutti_mesh_peers";
/// Participants of other nodes in this node's mixers now, gauge.
pub const REMOTE_PARTICIPANTS: &str = "tutti_mesh_remote_participants";
/// Every one of them.
pub const ALL: &[&str] = &[
    DATAGRAMS_SENT,
    SENT_BYTES,
    DATAGRAMS_RECEIVED,
    RECEIVED_BYTES,
    DATAGRAMS_DROPPED,
    SELECTION_MISMATCHES,
    ROOMS,
    PEERS,
    REMOTE_PARTICIPANTS,
];

/// Help text and units of the mesh's metrics.
pub(crate) fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge};
    describe_counter!(DATAGRAMS_SENT, Unit::Count, "Mesh datagrams sent to the other nodes of spread rooms.");
    describe_counter!(SENT_BYTES, Unit::Bytes, "UDP payload bytes of the mesh datagrams sent.");
    describe_counter!(DATAGRAMS_RECEIVED, Unit::Count, "Mesh datagrams received from other nodes and verified.");
    describe_counter!(RECEIVED_BYTES, Unit::Bytes, "UDP payload bytes of the mesh datagrams received and verified.");
    describe_counter!(DATAGRAMS_DROPPED, Unit::Count, "Mesh datagrams dropped, by reason.");
    describe_counter!(
        SELECTION_MISMATCHES,
        Unit::Count,
        "Ticks where another node's selected speakers (among its participants) differ from this node's selection."
    );
    describe_gauge!(ROOMS, Unit::Count, "Rooms this node shares with other nodes.");
    describe_gauge!(PEERS, Unit::Count, "Other nodes of those rooms heard within 200 ms, summed over the rooms.");
    describe_gauge!(REMOTE_PARTICIPANTS, Unit::Count, "Participants of other nodes in this node's mixers.");
}
