//! # tutti-cluster: many tutti nodes behind one API
//!
//! A room lives on one node; nodes share a directory in Redis. This crate is
//! that control plane, and nothing else: it knows no HTTP, no rooms'
//! media, no server types. The server drives it through a [`Cluster`]
//! handle and a handful of values ([`Placement`], [`Owner`], [`Fenced`],
//! [`Load`], [`ClusterStats`]).
//!
//! ## Keys (under `key_prefix`, `tutti:` by default)
//!
//! ```text
//! nodes               set of node ids (for enumeration; stale ids cleaned on read)
//! node:<id>           hash api_url media_addr state participants capacity cpu
//!                     tick_p99_seconds mesh_addr number sip_addr sig at at_sig placements joins; rewritten
//!                     every heartbeat (MULTI: HSET + PEXPIRE node_ttl + SADD). Gone = dead:
//!                     Redis' clock decides; `at` (Unix ms) must also be within node_ttl of
//!                     the reader's clock (a replayed record is ignored: keep clocks in sync).
//!                     `sig`: HMAC of the id and the fields but placements under
//!                     the cluster's node key, `at_sig` the same and `at`; unsigned records are ignored.
//! rooms               set of room names with a record
//! room:<r>            hash owner epoch config config_sig (signed for r: see `record::PartsKey`)
//! lease:<r>           "<node>:<epoch>", PX lease_ttl, renewed by the owner
//! span:<r>            hash node → epoch: the nodes hosting participants of room r
//!                     (a room spread over nodes); rewritten by each member every
//!                     few seconds, PX 3 × lease_ttl; a member whose node key is
//!                     gone, or of another epoch than the lease's, does not count
//! roster:<r>:<node>   hash participant id → public summary (JSON, signed in it): that node's participants
//!                     of spread room r, written by that node only (see `roster`), PX as its
//!                     span membership; read only for the span's members, by their signed numbers
//! ticket:<nonce>      burnt redirect tickets (SET NX EX)
//! node_numbers        counter: INCR gives a starting node its number (participant ids' high bits)
//! number:<n>          the node holding number n (SET NX at start, rewritten every heartbeat, PX node_ttl);
//!                     a number another live node's signed record names is skipped too
//! events:<r>          pub/sub channel of room r's events ("<origin node>\n<at> <sig>\n<event>",
//!                     signed, see `events`): each node
//!                     hosting r publishes its own participants' (never another node's)
//! control             pub/sub channel of signed room control messages, every room (see `control`)
//! ```
//!
//! (`lease:<r>` rather than the design's `room:<r>:lease`, so that a room
//! named `x:lease` cannot collide with room `x`'s lease.)
//!
//! ## Data flow
//!
//! ```text
//! join/create room r on node A ─► Cluster::place(r)
//!   r in A's leases            ─► Local (no Redis: works while Redis is down)
//!   else nodes() ─► choose(): lighter of two random eligible nodes
//!        ─► claim script for the chosen node B (atomic in Redis):
//!             live lease holder?  → that owner stands (Remote / Local)
//!             B's node key gone?  → "dead": choose again (3 tries)
//!             else epoch+1, owner=B, lease B:epoch, B.placements+1
//!   Remote(owner) ─► 307 to redirect_location(owner.api_url, path, mint_ticket(.., (method, path)))
//! client at B ─► verify_ticket (HMAC, same method and path, SET NX: once) ─► Cluster::claim(r)
//!             ─► lease is B's → Local, B renews it from now on
//! heartbeat task (every 1 s): node key; every lease_ttl/3: renew script
//!   lease lost to another node:epoch → Fenced on the channel: close the room
//! ```
//!
//! ## Decisions
//!
//! - **A room may span nodes; its owner stays one node.** With
//!   `room_spread` (`when_full`, the default, or `always`) a join may land
//!   on a node that does not hold the room's lease: that node records
//!   itself in `span:<r>` at the lease's epoch and hosts a copy of the room
//!   with its own participants; the nodes meet over the mesh (tutti-mesh),
//!   with the peers and their addresses read here. The lease holder is the
//!   room's owner (control, recording) as before; a member never claims a
//!   held room, so joining a span fences nobody. A new epoch (the owner
//!   died and the room was claimed again) makes the members join again at
//!   it, with new mesh keys.
//! - **The placer claims for the chosen node.** The claim script takes the
//!   node id and checks that node's registry key exists inside the same
//!   atomic step, so a node that died after the registry read is never made
//!   owner (the placer chooses again). Two placers racing on one room both
//!   end on the same owner (the second sees the first's lease), so the
//!   client is redirected once, not bounced. The chosen node learns of the
//!   room when the redirected client arrives and its server calls
//!   [`Cluster::claim`], which finds the lease already its own; if no client
//!   ever arrives, the lease lapses after `lease_ttl` and the room is placed
//!   afresh on its next join. A node only ever *renews* its own leases.
//! - **Fencing by epoch.** Each claim increments `room:<r>.epoch`; the
//!   lease value is `node:epoch`. Renewal compares both; a node whose
//!   renewal finds something else gets a [`Fenced`] notice and must close its
//!   copy. A lease that merely lapsed (Redis unreachable, or restarted
//!   empty) and that nobody took is restored at the same epoch.
//! - **Losing Redis is not losing rooms.** Every operation has a timeout
//!   (`op_timeout_seconds`, 500 ms) and fails with
//!   [`ClusterError::Unavailable`]; local leases are kept; the task backs off
//!   (≤ 2 s) and logs once per change; on reconnection it renews at once.
//!   While a node is cut off from Redis longer than its node TTL, another
//!   node may take its rooms on their next join (two copies for a while);
//!   the first renewal after reconnection fences the old copy.
//! - **Redis is shared state, not an authority.** Redis takes a password
//!   (`redis_password`, or in the URL) and TLS (`rediss://`, rustls, the
//!   system's roots or `redis_ca_file`); a refusal (wrong password, bad
//!   certificate) stops [`Cluster::start`] with [`ClusterError::Refused`].
//!   And since whoever writes to Redis could name a node of their own, a
//!   node record counts only when signed with a key derived from the shared
//!   secret (`record`, [`derive_key`]): a forged or foreign record is never
//!   placed on nor redirected to ([`ClusterError::Untrusted`] → 503),
//!   and is counted (`tutti_cluster_node_records_rejected_total`).
//! - **Ids name their node; control reaches the span.** Each node takes a
//!   number at start ([`Cluster::node_number`], in its signed record), and
//!   the server's participant ids carry it, so a request for a participant
//!   hosted elsewhere in a room's span is redirected to its node
//!   ([`Cluster::span_node`]). A room-wide change one node applied is
//!   published, signed with its own derived key and fenced by epoch, time
//!   and nonce, on the `control` channel ([`Cluster::publish_control`]);
//!   every other node of the span applies it to its copy
//!   ([`Cluster::take_control`]) and never sends it on. Best effort, like
//!   room events: the answer tells what the first node did.
//! - **Tickets are single-use cluster-wide** (Redis `SET NX`), not per node:
//!   if the owner dies and the room moves, a ticket cannot be replayed on the
//!   new owner. Without Redis a ticket cannot be checked: 503, like any
//!   other cross-node join.
//! - **Placements counted in.** The claim script bumps the target's
//!   `placements`; load adds `placements × room_size_estimate / capacity`
//!   until the target's next heartbeat resets it (Jicofo's correction of
//!   stale stats). Pending placements rank nodes but never exclude one: only
//!   draining nodes and nodes whose *measured* load reached 1 are skipped,
//!   so a burst larger than foreseen still lands, on the least pending node.
//!
//! ## Using it from the server
//!
//! The crate depends on nothing of the server; the server holds one
//! `Option<Cluster>` (None = single node, no Redis at all) and calls:
//!
//! | when | call | then |
//! |---|---|---|
//! | start, `cluster.redis_url` set | [`Cluster::start`]`(config, auth.secret)` | spawn a task draining [`Cluster::take_fenced`] |
//! | every second or so | [`Cluster::set_load`] (participants, busiest thread CPU, tick p99) | |
//! | create room / WHIP or WS join of a room not hosted here | [`Cluster::place`]`(room, config JSON)` | `Local` → create/join here; `Remote(owner)` → 307 (below); `Err(Unavailable \| NoEligibleNode)` → 503 + `Retry-After:` [`ClusterError::retry_after_seconds`] |
//! | 307 | `Location:` [`redirect_location`]`(owner.api_url, path_and_query, `[`Cluster::mint_ticket`]`(room, sub, least grants, (method, path)))`, [`Cluster::record_redirect`] | WHIP clients follow it; the browser page moves to `owner.api_url` with a ticket |
//! | request with `?ticket=` (instead of a bearer token) | [`Cluster::verify_ticket`]`(ticket, room, (method, path))` → the claims stand in for the token | refused → 401; `Unavailable` → 503 |
//! | a join, `room_spread` not `off` | [`Cluster::place_join`]`(room, ticketed)` | `Here { owner }` → host it here (`owner: false`: as a member of the room's span); `Elsewhere(node)` → 307 to that node |
//! | every ~250 ms, for the rooms hosted here | [`Cluster::spans`]`(rooms)`, [`Cluster::join_spans`] now and then | the mesh's peers: the members at the lease's epoch, addresses from signed records |
//! | the last local participant of a spread room left | [`Cluster::leave_span`]`(room)` | |
//! | a room closes here (last participant left, deleted) | [`Cluster::release`]`(room)` | |
//! | a [`Fenced`] notice arrives | close the local copy of `room` (disconnect its peers: they rejoin and are redirected to the new owner) | |
//! | a room event is published locally | [`Cluster::publish_event`]`(room, json)` (never blocks) | |
//! | start | [`Cluster::node_number`] | participant ids from `number << 32` ([`NODE_NUMBER_SHIFT`]); [`node_number_of`] maps an id back |
//! | a participant's route for an id not hosted here | [`Cluster::span_node`]`(room, number)` | 307 to that node of the span (signed records only), else 404 |
//! | a spread room's participants change here | [`Cluster::write_rosters`] (coalesced, off the media path) | this node's roster; [`Cluster::join_spans`] keeps it alive, [`Cluster::leave_span`] deletes it |
//! | `GET /v1/rooms/{room}`, a room socket's snapshot, of a spread room | [`Cluster::rosters`]`(room, span members, cap)` | the other nodes' participants |
//! | a room-wide change applied here (lock, mute-all, ban…) | [`Cluster::publish_control`]`(room, body)` (never blocks) | the other nodes of the span get it from [`Cluster::take_control`] and apply it to their copies |
//! | WS watching a room held elsewhere | [`Cluster::watch`]`(room)` → events from the owner | |
//! | hosting a room placed here by a join (not a create) | [`Cluster::room_config`]`(room)` → the config stored at its creation | create the room with it |
//! | `GET /v1/rooms`, `GET /v1/rooms/{room}` | [`Cluster::list_rooms`], [`Cluster::locate`] (owner id and URL in the answer) | |
//! | SIGTERM | [`Cluster::set_draining`], then as today; at exit [`Cluster::shutdown`] | |
//! | `/metrics` | [`Cluster::stats`]`.`[`samples()`](ClusterStats::samples) → `tutti_cluster_*` counters and gauges | |
//!
//! Nothing here may run on a media thread: every call is async (bounded by
//! `op_timeout_seconds`) or non-blocking (`set_load`, `publish_event`,
//! `stats`, `owned_epoch`).
//!
//! ## Example
//!
//! ```no_run
//! # async fn demo() -> Result<(), tutti_cluster::ClusterError> {
//! use tutti_cluster::{Cluster, ClusterConfig, Placement};
//! let config = ClusterConfig {
//!     redis_url: "redis://127.0.0.1:6379".into(),
//!     api_url: "http://127.0.0.2:8080".into(),
//!     media_addr: "127.0.0.2:3478".into(),
//!     ..ClusterConfig::default()
//! };
//! let cluster = Cluster::start(config, b"the auth.secret all nodes share!").await?;
//! match cluster.place("standup", None).await? {
//!     Placement::Local { epoch, .. } => println!("host it here (epoch {epoch})"),
//!     Placement::Remote(owner) => {
//!         let whip = ("POST", "/v1/rooms/standup/whip");
//!         let ticket = cluster.mint_ticket("standup", "alice", serde_json::json!({"publish": true}), whip)
//!             .expect("claims encode");
//!         let location = tutti_cluster::redirect_location(&owner.api_url, "/v1/rooms/standup/whip", &ticket);
//!         println!("307 to {location}");
//!     }
//! }
//! cluster.shutdown().await
//! # }
//! ```

mod cluster;
mod config;
mod control;
mod error;
mod events;
mod placement;
mod record;
mod roster;
mod scripts;
mod stats;
mod ticket;

pub use cluster::{
    Cluster, FENCED_CHANNEL_CAPACITY, Fenced, JoinPlacement, MAX_NODE_NUMBER, NODE_NUMBER_SHIFT, Owner, Placement,
    RoomEntry, Span, SpanMember, node_number_of, redirect_location,
};
pub use config::{ClusterConfig, MAX_NODE_ID_BYTES, RoomSpread};
pub use control::{CONTROL_MAX_AGE_MS, CONTROL_QUEUE_CAPACITY, ControlMessage, ControlRefusal, MAX_CONTROL_BYTES};
pub use error::{ClusterError, TicketError};
pub use events::{EVENT_QUEUE_CAPACITY, RoomEvent, WATCH_CAPACITY};
pub use placement::{Load, NodeInfo, NodeState, choose, choose_for_join};
pub use record::{CONTROL_PURPOSE, NODE_RECORD_PURPOSE, TICKET_PURPOSE, derive_key};
pub use roster::{MAX_ROSTER_ENTRY_BYTES, RosterEntry, RosterWrite, Rosters};
pub use stats::{ClusterStats, LATENCY_BUCKETS_SECONDS, Sample, SampleKind};
pub use ticket::{MAX_TICKET_BYTES, TicketClaims, TicketKey};
