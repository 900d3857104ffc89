//! `[limits]`: rate, size and time limits on what clients send, and their
//! defaults.

use serde::{Deserialize, Serialize};

/// Limits on what clients may send, each answered with a clear error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Joins per second per client address (IPv4 address, IPv6 /64), on
    /// average; beyond: 429 `rate_limited` with `Retry-After`. 0 = no limit.
    pub join_rate_per_second: f64,
    /// Joins a client address may make at once before the rate applies.
    pub join_burst: u32,
    /// Open HTTP connections (WebSockets included); beyond: a connection
    /// that has not sent a request yet is closed to make room, else 503
    /// `too_many_connections`.
    pub max_connections: usize,
    /// Open HTTP connections from one IPv4 address or IPv6 /64 (its share
    /// of `max_connections`) that have not shown a valid token; beyond, as
    /// for the cap, with 503 `too_many_connections` "from your address".
    pub max_connections_per_address: usize,
    /// Open HTTP connections (WebSockets included) per token identity, all
    /// its tokens together (a token without one: per token), once a request
    /// on them carried a valid token: they then leave their address's
    /// share. Beyond: 429 `too_many_connections`. Tokens that administer
    /// every room are counted by address instead.
    pub max_connections_per_identity: usize,
    /// Reverse proxies (CIDR networks or addresses) whose `X-Forwarded-For`
    /// (or `Forwarded`) names the client: its address is then the one the
    /// per-address limits and the join rate see. Empty: no header is read.
    pub trusted_proxies: Vec<String>,
    /// Open WebSockets per token identity (over all rooms), and never more
    /// than half of `max_connections`; beyond: 429 `too_many_sockets`. 0 =
    /// half of `max_connections`. Admins of the room are not counted.
    pub ws_max_per_identity: usize,
    /// Per-speaker feeds (`GET /v1/rooms/{room}/speakers`) open at once
    /// per room; beyond: 429 `too_many_feeds`.
    pub speaker_feeds_per_room: usize,
    /// `PATCH …/participants/{id}` per second per participant, on average;
    /// beyond: 429 `rate_limited` with `Retry-After`. 0 = no limit.
    pub participant_updates_per_second: f64,
    /// Updates a participant may take at once before the rate applies.
    pub participant_update_burst: u32,
    /// Data messages (a room socket's `data`, `POST …/data`) per second per
    /// sender, on average; beyond: dropped, with an `error` `rate_limited`
    /// (at most one a second). 0 = no limit.
    pub data_messages_per_second: f64,
    /// Data messages a sender may send at once before the rate applies.
    pub data_message_burst: u32,
    /// Largest data message payload (its JSON), in bytes; beyond: refused
    /// (`bad_value`). A socket's whole message is also held to
    /// `ws_max_message_bytes`, a backend's body to `max_body_bytes`.
    pub data_max_bytes: usize,
    /// Attribute key prefixes a participant may not set on itself: only its
    /// token or an admin sets them (the SIP edge's `sip.` call attributes).
    pub reserved_attributes: Vec<String>,
    /// Time a client has to send a request's headers, in seconds.
    pub http_header_timeout_seconds: f64,
    /// Time a request (its body included) may take, in seconds; beyond: 408 `request_timeout`.
    pub http_request_timeout_seconds: f64,
    /// Largest WebSocket message a client may send, in bytes; beyond: closed with 1009.
    pub ws_max_message_bytes: usize,
    /// WebSocket messages per second a client may send, on average; beyond:
    /// an `error` `rate_limited`, then closed with 1008.
    pub ws_messages_per_second: f64,
    /// WebSocket messages a client may send at once before the rate applies.
    pub ws_message_burst: u32,
    /// A WebSocket from which nothing (not even a pong to our pings, sent
    /// every third of this) arrives for this long is closed with 4408, in seconds.
    pub ws_idle_timeout_seconds: f64,
    /// A participant that joined over a WebSocket and lost it (no close
    /// frame: a network change) stays this long for a new socket to
    /// `resume` it, in seconds; 0 = it leaves with its socket.
    pub ws_resume_seconds: f64,
    /// Open ICE-TCP media connections at most (beyond: refused at once).
    /// Each I/O thread enforces an even share (rounded up) of this and of
    /// `tcp_max_per_ip`, so a burst may be refused a little below the cap.
    pub tcp_max_connections: usize,
    /// Open ICE-TCP media connections at most from one IPv4 address or IPv6 /64.
    pub tcp_max_per_ip: usize,
    /// Time a new TCP media connection has to send its first ICE check, in seconds.
    pub tcp_handshake_timeout_seconds: f64,
    /// A TCP media connection with no complete frame for this long is closed, in seconds.
    pub tcp_idle_timeout_seconds: f64,
    /// Send buffer per TCP media connection, in bytes (full: packets dropped, counted).
    pub tcp_send_buffer_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            join_rate_per_second: 10.0,
            join_burst: 20,
            max_connections: 10_000,
            max_connections_per_address: 256,
            max_connections_per_identity: 32,
            trusted_proxies: Vec::new(),
            ws_max_per_identity: 32,
            speaker_feeds_per_room: 4,
            participant_updates_per_second: 5.0,
            participant_update_burst: 10,
            data_messages_per_second: 10.0,
            data_message_burst: 20,
            data_max_bytes: 16 * 1024,
            reserved_attributes: vec!["sip.".to_owned(), "tutti.".to_owned()],
            http_header_timeout_seconds: 10.0,
            http_request_timeout_seconds: 10.0,
            ws_max_message_bytes: 64 * 1024,
            ws_messages_per_second: 10.0,
            ws_message_burst: 20,
            ws_idle_timeout_seconds: 60.0,
            ws_resume_seconds: 10.0,
            tcp_max_connections: 10_000,
            tcp_max_per_ip: 256,
            tcp_handshake_timeout_seconds: 5.0,
            tcp_idle_timeout_seconds: 30.0,
            tcp_send_buffer_bytes: 64 * 1024,
        }
    }
}
