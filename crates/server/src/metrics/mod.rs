//! # Metrics: what tutti tells Prometheus
//!
//! Every metric tutti exports is named here, once, with its help text and
//! unit. The engine and the API record through the small typed functions
//! below ([`tick`], [`packets_in`], [`media`], [`api_request`], …), never
//! through the `metrics` macros directly, so names and labels stay in one
//! file.
//!
//! ```text
//! engine, API ─► metrics::tick / packets_in / media / api_request … ─► metrics-exporter-prometheus (atomics)
//! GET /metrics (own address) ─► exporter render ─┬─► text format
//! /proc/self/task/*/stat, /proc/self/{stat,fd} ──┘   (per-thread and process CPU, memory, fds: read at scrape time)
//! ```
//!
//! Recording is off until [`install`] runs (the server does it when
//! `Config::metrics` is set): each function then costs one atomic load.
//! Once installed, a counter is one atomic add on a handle made at install
//! time; no function allocates except [`api_request`].
//!
//! Names follow Prometheus conventions: `tutti_<subsystem>_<name>_<unit>`,
//! base units (`_seconds`, `_bytes`), `_total` on counters. Labels carry
//! bounded values only: a thread's name (threads are named by role), a
//! failure kind, a peer state, an HTTP method, a route template and a status
//! code; never a room or participant id.
//!
//! Per-thread CPU comes from `/proc/self/task/<tid>/stat` (its `comm`, the
//! thread's name, and `utime + stime` in clock ticks, divided by
//! `sysconf(CLK_TCK)`). Threads with the same name are summed into one
//! series; a thread that exits keeps its CPU in its name's series, so every
//! series only grows (a counter). Linux only: elsewhere these series are
//! absent.

pub mod mesh;
pub mod outputs;
mod procfs;
mod ticks;

pub use procfs::{
    PROCESS_CPU_SECONDS, PROCESS_MAX_FDS, PROCESS_OPEN_FDS, PROCESS_RESIDENT_MEMORY_BYTES, PROCESS_START_TIME_SECONDS,
    PROCESS_THREADS, PROCESS_VIRTUAL_MEMORY_BYTES, THREAD_CPU_SECONDS,
};
pub use ticks::tick_p99;
mod tcp;

pub use tcp::TCP_NAMES;

use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics::{Counter, Gauge, Histogram, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tutti_mix::TickReport;
use tutti_rtc::MuxStats;

/// Wall time of one mixer clock tick: every room mixed and its output sent, seconds.
pub const MIX_TICK_DURATION_SECONDS: &str = "tutti_mix_tick_duration_seconds";
/// Mixer clock ticks run.
pub const MIX_TICKS: &str = "tutti_mix_ticks_total";
/// Ticks skipped because the mixer fell more than a tick behind.
pub const MIX_TICK_OVERRUNS: &str = "tutti_mix_tick_overruns_total";
/// Opus decodes run by the mixer (concealment included).
pub const MIX_DECODES: &str = "tutti_mix_decodes_total";
/// Opus encodes run by the mixer.
pub const MIX_ENCODES: &str = "tutti_mix_encodes_total";
/// Selected speakers over all rooms, at the last tick.
pub const MIX_SPEAKERS: &str = "tutti_mix_speakers";
/// Frames forwarded unchanged to listeners (one speaker: no decode, no encode), counter.
pub const MIX_FORWARDED: &str = "tutti_mix_forwarded_frames_total";
/// DTX frames sent to listeners while nobody speaks, counter.
pub const MIX_DTX: &str = "tutti_mix_dtx_frames_total";
/// Speaker frames processed, by `stage` (`noise_suppression`, `loudness`), counter.
pub const MIX_VOICE_FRAMES: &str = "tutti_mix_voice_frames_total";
/// The load-shedding level every room ticks at (0 = none), gauge.
pub const MIX_SHED_LEVEL: &str = "tutti_mix_shed_level";
/// Changes of the load-shedding level, counter.
pub const MIX_SHED_CHANGES: &str = "tutti_mix_shed_changes_total";
/// Rooms, at the last tick.
pub const MIX_ROOMS: &str = "tutti_mix_rooms";
/// Participants over all rooms, at the last tick.
pub const MIX_PARTICIPANTS: &str = "tutti_mix_participants";

/// UDP datagrams received on the media port.
pub const MEDIA_PACKETS_RECEIVED: &str = "tutti_media_packets_received_total";
/// Bytes of UDP payload received on the media port.
pub const MEDIA_RECEIVED_BYTES: &str = "tutti_media_received_bytes_total";
/// UDP datagrams sent from the media port.
pub const MEDIA_PACKETS_SENT: &str = "tutti_media_packets_sent_total";
/// Bytes of UDP payload sent from the media port.
pub const MEDIA_SENT_BYTES: &str = "tutti_media_sent_bytes_total";
/// UDP sends that failed (the datagram is lost).
pub const MEDIA_SEND_ERRORS: &str = "tutti_media_send_errors_total";
/// Audio (RTP) packets received from peers, decrypted.
pub const MEDIA_AUDIO_PACKETS_RECEIVED: &str = "tutti_media_audio_packets_received_total";
/// Audio (RTP) packets sent to peers.
pub const MEDIA_AUDIO_PACKETS_SENT: &str = "tutti_media_audio_packets_sent_total";
/// Of the audio packets sent, those sent on the lean RTP/SRTP path, counter.
pub const MEDIA_LEAN_PACKETS_SENT: &str = "tutti_media_lean_packets_sent_total";
/// Of the audio packets received, those read on the lean SRTP path, counter.
pub const MEDIA_LEAN_PACKETS_RECEIVED: &str = "tutti_media_lean_packets_received_total";
/// Consent checks (STUN) answered on the lean receive path, without webrtc-rs's ICE agent, counter.
pub const MEDIA_LEAN_CHECKS: &str = "tutti_media_lean_checks_total";
/// Peers whose webrtc-rs connection was retired once their call was up (`retire_peers`), counter.
pub const MEDIA_RETIRED_PEERS: &str = "tutti_media_retired_peers_total";
/// SRTP packets the lean receive path dropped (failed authentication, replays), counter.
pub const MEDIA_LEAN_PACKETS_DROPPED: &str = "tutti_media_lean_packets_dropped_total";
/// Datagrams that belonged to no peer (dropped).
pub const MEDIA_UNROUTED_PACKETS: &str = "tutti_media_unrouted_packets_total";
/// Audio packets the jitter buffers dropped because their turn had passed.
pub const MEDIA_JITTER_LATE_PACKETS: &str = "tutti_media_jitter_late_packets_total";
/// Audio frames the jitter buffers found missing (receive loss).
pub const MEDIA_JITTER_LOST_FRAMES: &str = "tutti_media_jitter_lost_frames_total";
/// Missing frames concealed by the decoder (PLC or in-band FEC).
pub const MEDIA_JITTER_CONCEALED_FRAMES: &str = "tutti_media_jitter_concealed_frames_total";
/// Peer connections that failed (`kind`: `ice` never connected, `dtls`
/// handshake did not complete, `lost` connectivity lost after connecting).
pub const MEDIA_PEER_FAILURES: &str = "tutti_media_peer_failures_total";
/// Peers by `state`: `connecting` (answered, ICE/DTLS under way) or `connected`.
pub const MEDIA_PEERS: &str = "tutti_media_peers";

/// HTTP API requests by `method`, `route` (the matched route template, or
/// `unmatched`) and `status`.
pub const API_REQUESTS: &str = "tutti_api_requests_total";
/// Time to answer a successful join (SDP offer in, answer out), seconds.
pub const API_JOIN_DURATION_SECONDS: &str = "tutti_api_join_duration_seconds";
/// ICE restarts asked for through the API, by `result` (`ok`, `failed`).
pub const API_ICE_RESTARTS: &str = "tutti_api_ice_restarts_total";
/// Room event batches that WebSockets missed by falling behind their room's
/// event queue (a local socket then gets a fresh `room` snapshot), counter.
pub const API_WS_LAGGED: &str = "tutti_api_ws_lagged_batches_total";
/// HTTP connections or requests refused for want of a connection slot, by
/// `limit`: `server` (`limits.max_connections`), `address`
/// (`limits.max_connections_per_address`), `identity`
/// (`limits.max_connections_per_identity`), counter.
pub const API_CONNECTIONS_REFUSED: &str = "tutti_api_connections_refused_total";
/// Writes of this node's rosters of spread rooms to Redis (one per round,
/// every room changed in it), by `result` (`ok`, `failed`), counter.
pub const CLUSTER_ROSTER_WRITES: &str = "tutti_cluster_roster_writes_total";
/// Participant changes beyond a room's bounded queue of roster changes
/// (the room's roster is then rewritten whole), counter.
pub const CLUSTER_ROSTER_OVERFLOW: &str = "tutti_cluster_roster_overflow_total";
/// Roster entries read from Redis and ignored (not a participant of the
/// node whose roster holds it, not a summary, or a roster over the room's
/// size), counter.
pub const CLUSTER_ROSTER_REFUSED: &str = "tutti_cluster_roster_refused_total";
/// Events of other nodes' participants of spread rooms, by `result`
/// (`taken`: told to this node's sockets; `refused`: from a node not in
/// the room's span, or about a participant not of that node), counter.
pub const CLUSTER_SPAN_EVENTS: &str = "tutti_cluster_span_events_total";
/// Always 1; the `version` label tells which tutti runs.
pub const BUILD_INFO: &str = "tutti_build_info";
/// 1 while the node drains (SIGTERM or `POST /v1/node/drain`), else 0.
pub const NODE_DRAINING: &str = "tutti_node_draining";
/// Stage actions by `action` (`grant`, `revoke`, `hand_raised`,
/// `hand_lowered`, `deafened`, `undeafened`, `lock`, `unlock`, `resize`, `mute_all`, `kick`, `ban`) and
/// joins refused by them (`refused_locked`, `refused_banned`), counter.
pub const STAGE_ACTIONS: &str = "tutti_stage_actions_total";
/// Participant moves to another room (`POST …/participants/{id}/move`), by
/// `result`: `moved`, `room_elsewhere`, `redirected`, or the error's code.
pub const PARTICIPANT_MOVES: &str = "tutti_participant_moves_total";
/// Room control messages from other nodes of a spread room applied here,
/// by `kind` (`update`, `ban`, `joined`), counter.
pub const CLUSTER_CONTROL_APPLIED: &str = "tutti_cluster_control_applied_total";
/// Data messages by `result`: `sent` (handed to the room), `rate_limited`
/// (dropped), `lagged` (a socket fell behind and lost them), `relayed`
/// (from another node of a spread room), counter.
pub const DATA_MESSAGES: &str = "tutti_data_messages_total";

/// Plain RTP participants now (`[rtp_in]`: SIP gateways), gauge.
pub const RTP_IN_PARTICIPANTS: &str = "tutti_rtp_in_participants";
/// Plain RTP audio packets taken into rooms, counter.
pub const RTP_IN_PACKETS_RECEIVED: &str = "tutti_rtp_in_packets_received_total";
/// Plain RTP packets sent to plain RTP participants (their mix), counter.
pub const RTP_IN_PACKETS_SENT: &str = "tutti_rtp_in_packets_sent_total";
/// RTCP reports on plain RTP legs, by `direction`: `in` (a leg's sender or
/// receiver report read), `out` (tutti's sender report sent), counter.
pub const RTP_IN_RTCP_REPORTS: &str = "tutti_rtp_in_rtcp_reports_total";
/// Plain RTP refused, by `reason`: `forbidden` (a join from an untrusted
/// network, or with plain RTP off), `source` (a packet from an address no
/// participant has), `malformed` (also a G.711 payload over 120 ms),
/// `payload_type` (not the answered codec's, keys' or comfort noise's type), `rtcp`
/// (ignored); counter.
pub const RTP_IN_REJECTED: &str = "tutti_rtp_in_rejected_total";
/// SIP requests refused by the SIP edge, by `reason`: `source` (not from a
/// `[sip] trusted` network), `media` (no Opus, G.722, PCMU or PCMA in the
/// offer, or no offer: 488), `join` (the join was refused: room not found, full, locked…); counter.
pub const SIP_REFUSED: &str = "tutti_sip_refused_total";

/// Every metric tutti exports (histograms also as `_bucket`, `_sum` and `_count`).
pub const NAMES: &[&str] = &[
    THREAD_CPU_SECONDS,
    PROCESS_CPU_SECONDS,
    PROCESS_RESIDENT_MEMORY_BYTES,
    PROCESS_VIRTUAL_MEMORY_BYTES,
    PROCESS_OPEN_FDS,
    PROCESS_MAX_FDS,
    PROCESS_THREADS,
    PROCESS_START_TIME_SECONDS,
    MIX_TICK_DURATION_SECONDS,
    MIX_TICKS,
    MIX_TICK_OVERRUNS,
    MIX_DECODES,
    MIX_ENCODES,
    MIX_SPEAKERS,
    MIX_FORWARDED,
    MIX_DTX,
    MIX_VOICE_FRAMES,
    MIX_SHED_LEVEL,
    MIX_SHED_CHANGES,
    MIX_ROOMS,
    MIX_PARTICIPANTS,
    MEDIA_PACKETS_RECEIVED,
    MEDIA_RECEIVED_BYTES,
    MEDIA_PACKETS_SENT,
    MEDIA_SENT_BYTES,
    MEDIA_SEND_ERRORS,
    MEDIA_AUDIO_PACKETS_RECEIVED,
    MEDIA_AUDIO_PACKETS_SENT,
    MEDIA_LEAN_PACKETS_SENT,
    MEDIA_LEAN_PACKETS_RECEIVED,
    MEDIA_LEAN_CHECKS,
    MEDIA_RETIRED_PEERS,
    MEDIA_LEAN_PACKETS_DROPPED,
    MEDIA_UNROUTED_PACKETS,
    MEDIA_JITTER_LATE_PACKETS,
    MEDIA_JITTER_LOST_FRAMES,
    MEDIA_JITTER_CONCEALED_FRAMES,
    MEDIA_PEER_FAILURES,
    MEDIA_PEERS,
    API_REQUESTS,
    API_JOIN_DURATION_SECONDS,
    API_ICE_RESTARTS,
    API_WS_LAGGED,
    API_CONNECTIONS_REFUSED,
    CLUSTER_ROSTER_WRITES,
    CLUSTER_ROSTER_OVERFLOW,
    CLUSTER_ROSTER_REFUSED,
    CLUSTER_SPAN_EVENTS,
    NODE_DRAINING,
    BUILD_INFO,
    STAGE_ACTIONS,
    PARTICIPANT_MOVES,
    CLUSTER_CONTROL_APPLIED,
    DATA_MESSAGES,
    RTP_IN_PARTICIPANTS,
    RTP_IN_PACKETS_RECEIVED,
    RTP_IN_PACKETS_SENT,
    RTP_IN_RTCP_REPORTS,
    RTP_IN_REJECTED,
    SIP_REFUSED,
];

/// The histograms among [`NAMES`].
pub const HISTOGRAMS: &[&str] = &[MIX_TICK_DURATION_SECONDS, API_JOIN_DURATION_SECONDS];

/// The route template of a join: its requests feed [`API_JOIN_DURATION_SECONDS`].
pub const JOIN_ROUTE: &str = "/v1/rooms/{room}/participants";

/// Histogram buckets of [`MIX_TICK_DURATION_SECONDS`]: fine below the 20 ms budget, then past it.
const TICK_BUCKETS: &[f64] =
    &[0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.0175, 0.02, 0.025, 0.04, 0.08, 0.2];
/// Histogram buckets of [`API_JOIN_DURATION_SECONDS`].
const JOIN_BUCKETS: &[f64] = &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];
/// How often the exporter's histogram buffers are drained when nobody scrapes.
const UPKEEP_PERIOD: Duration = Duration::from_secs(5);

/// Handles made once, at install: recording is an atomic add, no lookup.
struct Handles {
    tick_duration: Histogram,
    ticks: Counter,
    overruns: Counter,
    decodes: Counter,
    encodes: Counter,
    speakers: Gauge,
    forwarded: Counter,
    dtx: Counter,
    suppressed: Counter,
    normalised: Counter,
    shed_level: Gauge,
    shed_changes: Counter,
    rooms: Gauge,
    participants: Gauge,
    packets_in: Counter,
    bytes_in: Counter,
    packets_out: Counter,
    bytes_out: Counter,
    send_errors: Counter,
    audio_in: Counter,
    audio_out: Counter,
    lean_out: Counter,
    lean_in: Counter,
    lean_dropped: Counter,
    lean_checks: Counter,
    retired: Counter,
    unrouted: Counter,
    late: Counter,
    lost: Counter,
    concealed: Counter,
    ice_failures: Counter,
    dtls_failures: Counter,
    lost_peers: Counter,
    connecting: Gauge,
    connected: Gauge,
    join_duration: Histogram,
}

struct Installed {
    prometheus: PrometheusHandle,
    handles: Handles,
    proc: Mutex<procfs::Reader>,
}

static INSTALLED: OnceLock<Result<Installed, String>> = OnceLock::new();

/// Reports what one I/O thread's TCP table counted since `last` (and the
/// transmits it dropped for want of a connection).
pub fn tcp(last: &(tutti_rtc::TcpStats, u64), now: &(tutti_rtc::TcpStats, u64)) {
    if installed() {
        tcp::report(last, now);
    }
}

/// Whether the recorder is installed (recording is on).
fn installed() -> bool {
    handles().is_some()
}

fn handles() -> Option<&'static Handles> {
    match INSTALLED.get() {
        Some(Ok(installed)) => Some(&installed.handles),
        _ => None,
    }
}

/// Installs the process-wide recorder (once; later calls return the first
/// outcome). [`crate::Server::start`] calls it when metrics are on. Metrics
/// are process-wide: several servers in one process (as in tests) share them.
pub fn install() -> Result<(), String> {
    let installed = INSTALLED.get_or_init(|| {
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Full(MIX_TICK_DURATION_SECONDS.into()), TICK_BUCKETS)
            .and_then(|b| b.set_buckets_for_metric(Matcher::Full(API_JOIN_DURATION_SECONDS.into()), JOIN_BUCKETS))
            .map_err(|e| e.to_string())?;
        let prometheus = builder.install_recorder().map_err(|e| format!("installing the metrics recorder: {e}"))?;
        describe();
        metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
        metrics::gauge!(NODE_DRAINING).set(0.0);
        let handles = Handles {
            tick_duration: metrics::histogram!(MIX_TICK_DURATION_SECONDS),
            ticks: metrics::counter!(MIX_TICKS),
            overruns: metrics::counter!(MIX_TICK_OVERRUNS),
            decodes: metrics::counter!(MIX_DECODES),
            encodes: metrics::counter!(MIX_ENCODES),
            speakers: metrics::gauge!(MIX_SPEAKERS),
            forwarded: metrics::counter!(MIX_FORWARDED),
            dtx: metrics::counter!(MIX_DTX),
            suppressed: metrics::counter!(MIX_VOICE_FRAMES, "stage" => "noise_suppression"),
            normalised: metrics::counter!(MIX_VOICE_FRAMES, "stage" => "loudness"),
            shed_level: metrics::gauge!(MIX_SHED_LEVEL),
            shed_changes: metrics::counter!(MIX_SHED_CHANGES),
            rooms: metrics::gauge!(MIX_ROOMS),
            participants: metrics::gauge!(MIX_PARTICIPANTS),
            packets_in: metrics::counter!(MEDIA_PACKETS_RECEIVED),
            bytes_in: metrics::counter!(MEDIA_RECEIVED_BYTES),
            packets_out: metrics::counter!(MEDIA_PACKETS_SENT),
            bytes_out: metrics::counter!(MEDIA_SENT_BYTES),
            send_errors: metrics::counter!(MEDIA_SEND_ERRORS),
            audio_in: metrics::counter!(MEDIA_AUDIO_PACKETS_RECEIVED),
            audio_out: metrics::counter!(MEDIA_AUDIO_PACKETS_SENT),
            lean_out: metrics::counter!(MEDIA_LEAN_PACKETS_SENT),
            lean_in: metrics::counter!(MEDIA_LEAN_PACKETS_RECEIVED),
            lean_dropped: metrics::counter!(MEDIA_LEAN_PACKETS_DROPPED),
            lean_checks: metrics::counter!(MEDIA_LEAN_CHECKS),
            retired: metrics::counter!(MEDIA_RETIRED_PEERS),
            unrouted: metrics::counter!(MEDIA_UNROUTED_PACKETS),
            late: metrics::counter!(MEDIA_JITTER_LATE_PACKETS),
            lost: metrics::counter!(MEDIA_JITTER_LOST_FRAMES),
            concealed: metrics::counter!(MEDIA_JITTER_CONCEALED_FRAMES),
            ice_failures: metrics::counter!(MEDIA_PEER_FAILURES, "kind" => "ice"),
            dtls_failures: metrics::counter!(MEDIA_PEER_FAILURES, "kind" => "dtls"),
            lost_peers: metrics::counter!(MEDIA_PEER_FAILURES, "kind" => "lost"),
            connecting: metrics::gauge!(MEDIA_PEERS, "state" => "connecting"),
            connected: metrics::gauge!(MEDIA_PEERS, "state" => "connected"),
            join_duration: metrics::histogram!(API_JOIN_DURATION_SECONDS),
        };
        Ok(Installed { prometheus, handles, proc: Mutex::new(procfs::Reader::new()) })
    });
    installed.as_ref().map(|_| ()).map_err(Clone::clone)
}

/// Help text and units of the recorded metrics (those read from /proc are
/// described where they are rendered).
fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    mesh::describe();
    describe_histogram!(
        MIX_TICK_DURATION_SECONDS,
        Unit::Seconds,
        "Wall time of one mixer clock tick (every room mixed, output sent); the budget is 0.02."
    );
    describe_counter!(MIX_TICKS, Unit::Count, "Mixer clock ticks run.");
    describe_counter!(MIX_TICK_OVERRUNS, Unit::Count, "Ticks skipped because the mixer fell more than a tick behind.");
    describe_counter!(MIX_DECODES, Unit::Count, "Opus decodes run by the mixer, concealment included.");
    describe_counter!(MIX_ENCODES, Unit::Count, "Opus encodes run by the mixer.");
    describe_counter!(MIX_FORWARDED, Unit::Count, "Frames forwarded unchanged to listeners while one speaker talks.");
    describe_counter!(MIX_DTX, Unit::Count, "DTX frames sent to listeners while nobody talks.");
    describe_counter!(
        MIX_VOICE_FRAMES,
        Unit::Count,
        "Selected speakers' frames noise suppressed or loudness normalised, by stage."
    );
    describe_gauge!(
        MIX_SHED_LEVEL,
        Unit::Count,
        "Load-shedding level of the mixer (0 none; 1-2 lower encoder complexity; 3-5 fewer speakers)."
    );
    describe_counter!(MIX_SHED_CHANGES, Unit::Count, "Changes of the mixer's load-shedding level.");
    describe_gauge!(MIX_SPEAKERS, Unit::Count, "Selected speakers over all rooms at the last tick.");
    describe_gauge!(MIX_ROOMS, Unit::Count, "Rooms at the last tick.");
    describe_gauge!(MIX_PARTICIPANTS, Unit::Count, "Participants over all rooms at the last tick.");
    describe_counter!(MEDIA_PACKETS_RECEIVED, Unit::Count, "UDP datagrams received on the media port.");
    describe_counter!(MEDIA_RECEIVED_BYTES, Unit::Bytes, "UDP payload bytes received on the media port.");
    describe_counter!(MEDIA_PACKETS_SENT, Unit::Count, "UDP datagrams sent from the media port.");
    describe_counter!(MEDIA_SENT_BYTES, Unit::Bytes, "UDP payload bytes sent from the media port.");
    describe_counter!(MEDIA_SEND_ERRORS, Unit::Count, "UDP sends that failed (the datagram is lost).");
    describe_counter!(MEDIA_AUDIO_PACKETS_RECEIVED, Unit::Count, "Audio RTP packets received from peers, decrypted.");
    describe_counter!(MEDIA_AUDIO_PACKETS_SENT, Unit::Count, "Audio RTP packets sent to peers.");
    describe_counter!(
        MEDIA_LEAN_PACKETS_SENT,
        Unit::Count,
        "Audio RTP packets sent on the lean path (tutti's own RTP and SRTP), of all sent."
    );
    describe_counter!(
        MEDIA_LEAN_PACKETS_RECEIVED,
        Unit::Count,
        "Audio RTP packets read on the lean path (tutti's own SRTP), of all received."
    );
    describe_counter!(
        MEDIA_LEAN_CHECKS,
        Unit::Count,
        "Consent checks (STUN) answered on the lean path, without webrtc-rs's ICE agent."
    );
    describe_counter!(
        MEDIA_RETIRED_PEERS,
        Unit::Count,
        "Peers whose webrtc-rs connection was dropped once their call was up (retire_peers)."
    );
    describe_counter!(
        MEDIA_LEAN_PACKETS_DROPPED,
        Unit::Count,
        "SRTP packets the lean receive path dropped: failed authentication, replayed or too old."
    );
    describe_counter!(MEDIA_UNROUTED_PACKETS, Unit::Count, "Datagrams that belonged to no peer (dropped).");
    describe_counter!(
        MEDIA_JITTER_LATE_PACKETS,
        Unit::Count,
        "Audio packets the jitter buffers dropped because their turn had passed."
    );
    describe_counter!(MEDIA_JITTER_LOST_FRAMES, Unit::Count, "Audio frames the jitter buffers found missing.");
    describe_counter!(MEDIA_JITTER_CONCEALED_FRAMES, Unit::Count, "Missing frames concealed (PLC or in-band FEC).");
    describe_counter!(
        MEDIA_PEER_FAILURES,
        Unit::Count,
        "Peer connections that failed: kind=ice (never connected), dtls (handshake incomplete), lost (after connecting)."
    );
    describe_gauge!(MEDIA_PEERS, Unit::Count, "Peers by state: connecting or connected.");
    describe_counter!(API_REQUESTS, Unit::Count, "HTTP API requests by method, route template and status.");
    describe_histogram!(
        API_JOIN_DURATION_SECONDS,
        Unit::Seconds,
        "Time to answer a successful join (offer in, answer out)."
    );
    describe_counter!(
        API_ICE_RESTARTS,
        Unit::Count,
        "ICE restarts asked for through the API (a participant's new offer), by result: ok or failed."
    );
    describe_counter!(
        API_WS_LAGGED,
        Unit::Count,
        "Room event batches WebSockets missed by falling behind (a local socket gets a fresh snapshot)."
    );
    describe_counter!(
        API_CONNECTIONS_REFUSED,
        Unit::Count,
        "HTTP connections refused for want of a slot, by limit: server, address (not authenticated) or identity."
    );
    describe_counter!(
        CLUSTER_ROSTER_WRITES,
        Unit::Count,
        "Writes of this node's rosters of spread rooms to Redis, by result (ok, failed)."
    );
    describe_counter!(
        CLUSTER_ROSTER_OVERFLOW,
        Unit::Count,
        "Participant changes beyond a room's bounded roster queue (the roster is rewritten whole)."
    );
    describe_counter!(
        CLUSTER_ROSTER_REFUSED,
        Unit::Count,
        "Roster entries read from Redis and ignored (not that node's participant, not a summary, over the cap)."
    );
    describe_counter!(
        CLUSTER_SPAN_EVENTS,
        Unit::Count,
        "Events of other nodes' participants of spread rooms, by result (taken, refused)."
    );
    describe_gauge!(BUILD_INFO, Unit::Count, "Always 1; the version label tells which tutti runs.");
    describe_gauge!(NODE_DRAINING, Unit::Count, "1 while the node drains (no new rooms; calls go on), else 0.");
    outputs::describe();
    describe_counter!(
        PARTICIPANT_MOVES,
        Unit::Count,
        "Participant moves to another room of the node, by result (moved, room_elsewhere, or the error code)."
    );
    describe_counter!(
        STAGE_ACTIONS,
        Unit::Count,
        "Stage actions (speak rights, hands, lock, mute-all, kicks, bans) by action."
    );
    describe_counter!(
        CLUSTER_CONTROL_APPLIED,
        Unit::Count,
        "Room control messages from other nodes of a spread room applied here, by kind."
    );
    describe_counter!(
        DATA_MESSAGES,
        Unit::Count,
        "Data messages by result: sent, rate_limited (dropped), lagged (lost by a slow socket), relayed (from another node)."
    );
}

/// What one mixer clock tick did, over every room: add each room's report.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TickTotals {
    /// Rooms ticked.
    pub rooms: usize,
    /// Participants in them.
    pub participants: usize,
    /// Selected speakers.
    pub speakers: usize,
    /// Opus decodes.
    pub decodes: usize,
    /// Opus encodes.
    pub encodes: usize,
    /// Participants sent a forwarded frame.
    pub forwarded: usize,
    /// Participants sent a DTX frame.
    pub dtx: usize,
    /// Speaker frames noise suppressed.
    pub suppressed: usize,
    /// Speaker frames loudness normalised.
    pub normalised: usize,
    /// Frames lost.
    pub lost: u64,
    /// Frames concealed.
    pub concealed: u64,
    /// Packets dropped as late.
    pub late: u64,
}

impl TickTotals {
    /// Adds one room's tick.
    pub fn add(&mut self, report: &TickReport) {
        self.rooms += 1;
        self.participants += report.participants;
        self.speakers += report.speakers.len();
        self.decodes += report.decodes;
        self.encodes += report.encodes;
        self.forwarded += report.forwarded;
        self.dtx += report.dtx;
        self.suppressed += report.suppressed;
        self.normalised += report.normalised;
        self.lost += report.lost;
        self.concealed += report.concealed;
        self.late += report.late;
    }
}

/// One mixer clock tick ran: its wall time and what it did.
pub fn tick(duration: Duration, totals: &TickTotals) {
    ticks::record(duration);
    let Some(h) = handles() else { return };
    h.tick_duration.record(duration.as_secs_f64());
    h.ticks.increment(1);
    h.decodes.increment(totals.decodes as u64);
    h.encodes.increment(totals.encodes as u64);
    h.forwarded.increment(totals.forwarded as u64);
    h.dtx.increment(totals.dtx as u64);
    h.suppressed.increment(totals.suppressed as u64);
    h.normalised.increment(totals.normalised as u64);
    h.speakers.set(totals.speakers as f64);
    h.rooms.set(totals.rooms as f64);
    h.participants.set(totals.participants as f64);
    if totals.lost > 0 {
        h.lost.increment(totals.lost);
    }
    if totals.concealed > 0 {
        h.concealed.increment(totals.concealed);
    }
    if totals.late > 0 {
        h.late.increment(totals.late);
    }
}

/// The mixer's load-shedding level changed to `level`.
pub fn shed_level(level: u8) {
    if let Some(h) = handles() {
        h.shed_level.set(f64::from(level));
        h.shed_changes.increment(1);
    }
}

/// The mixer clock skipped `ticks` ticks (it fell behind).
pub fn tick_overruns(ticks: u64) {
    if let Some(h) = handles() {
        h.overruns.increment(ticks);
    }
}

/// Datagrams received on the media port.
pub fn packets_in(packets: u64, bytes: u64) {
    if let Some(h) = handles() {
        h.packets_in.increment(packets);
        h.bytes_in.increment(bytes);
    }
}

/// Datagrams sent from the media port, and sends that failed.
pub fn packets_out(packets: u64, bytes: u64, errors: u64) {
    if let Some(h) = handles() {
        h.packets_out.increment(packets);
        h.bytes_out.increment(bytes);
        if errors > 0 {
            h.send_errors.increment(errors);
        }
    }
}

/// Reports what one [`tutti_rtc::Mux`] counted since `last` (which becomes
/// `now`): audio packets, unrouted datagrams, failures, and the change in its
/// peers by state. Each I/O thread keeps its own `last` for its own mux, so
/// several muxes add up.
pub fn media(last: &mut MuxStats, now: MuxStats) {
    let Some(h) = handles() else { return };
    if *last == now {
        return;
    }
    // Only what changed: usually one or two of these per call.
    let grew = |counter: &Counter, new: u64, old: u64| {
        if new > old {
            counter.increment(new - old);
        }
    };
    grew(&h.audio_in, now.audio_in, last.audio_in);
    grew(&h.audio_out, now.audio_out, last.audio_out);
    grew(&h.lean_out, now.lean_out, last.lean_out);
    grew(&h.lean_in, now.lean_in, last.lean_in);
    grew(&h.lean_dropped, now.lean_dropped, last.lean_dropped);
    grew(&h.lean_checks, now.lean_checks, last.lean_checks);
    grew(&h.retired, now.retired, last.retired);
    grew(&h.unrouted, now.unrouted, last.unrouted);
    grew(&h.ice_failures, now.ice_failures, last.ice_failures);
    grew(&h.dtls_failures, now.dtls_failures, last.dtls_failures);
    // Lost: webrtc-rs declared a connected peer failed, or it went silent for the idle timeout.
    grew(&h.lost_peers, now.lost + now.timed_out, last.lost + last.timed_out);
    let moved = |gauge: &Gauge, new: u64, old: u64| {
        if new != old {
            gauge.increment(new as f64 - old as f64);
        }
    };
    moved(&h.connecting, now.connecting, last.connecting);
    moved(&h.connected, now.connected, last.connected);
    *last = now;
}

/// The plain RTP thread's figures since its last call: the change in its
/// participants (a delta, so several servers in one process add up),
/// packets taken and sent, and packets refused by reason. Registers the
/// series on first use; a handful of lookups per call (once per loop turn,
/// not per packet).
pub fn rtp_in(
    participants_change: i64,
    received: u64,
    sent: u64,
    (rtcp_in, rtcp_out): (u64, u64),
    rejected: &[(&'static str, u64)],
) {
    if handles().is_none() {
        return;
    }
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    DESCRIBED.call_once(|| {
        use metrics::{describe_counter, describe_gauge};
        describe_gauge!(RTP_IN_PARTICIPANTS, Unit::Count, "Plain RTP (rtp_in) participants now.");
        describe_counter!(RTP_IN_PACKETS_RECEIVED, Unit::Count, "Plain RTP audio packets taken into rooms.");
        describe_counter!(RTP_IN_PACKETS_SENT, Unit::Count, "Plain RTP packets sent to plain RTP participants.");
        describe_counter!(
            RTP_IN_RTCP_REPORTS,
            Unit::Count,
            "RTCP reports on plain RTP legs, read (in) and sent (out)."
        );
        describe_counter!(
            RTP_IN_REJECTED,
            Unit::Count,
            "Plain RTP refused by reason: forbidden (join), source, malformed, payload_type, rtcp, srtp (packets)."
        );
        // Every series present from the start (at 0).
        metrics::gauge!(RTP_IN_PARTICIPANTS).increment(0.0);
        metrics::counter!(RTP_IN_PACKETS_RECEIVED).increment(0);
        metrics::counter!(RTP_IN_PACKETS_SENT).increment(0);
        for direction in ["in", "out"] {
            metrics::counter!(RTP_IN_RTCP_REPORTS, "direction" => direction).increment(0);
        }
        for reason in ["forbidden", "source", "malformed", "payload_type", "rtcp", "srtp"] {
            metrics::counter!(RTP_IN_REJECTED, "reason" => reason).increment(0);
        }
    });
    if participants_change != 0 {
        metrics::gauge!(RTP_IN_PARTICIPANTS).increment(participants_change as f64);
    }
    if received > 0 {
        metrics::counter!(RTP_IN_PACKETS_RECEIVED).increment(received);
    }
    if sent > 0 {
        metrics::counter!(RTP_IN_PACKETS_SENT).increment(sent);
    }
    for (direction, n) in [("in", rtcp_in), ("out", rtcp_out)] {
        if n > 0 {
            metrics::counter!(RTP_IN_RTCP_REPORTS, "direction" => direction).increment(n);
        }
    }
    for &(reason, n) in rejected {
        if n > 0 {
            metrics::counter!(RTP_IN_REJECTED, "reason" => reason).increment(n);
        }
    }
}

/// A plain RTP join was refused as not allowed (403 `rtp_in_forbidden`).
pub fn rtp_in_forbidden() {
    if handles().is_some() {
        metrics::counter!(RTP_IN_REJECTED, "reason" => "forbidden").increment(1);
    }
}

/// A SIP request refused by the SIP edge, for `reason` (see [`SIP_REFUSED`]).
pub fn sip_refused(reason: &'static str) {
    if handles().is_none() {
        return;
    }
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    DESCRIBED.call_once(|| {
        metrics::describe_counter!(
            SIP_REFUSED,
            Unit::Count,
            "SIP requests (and TCP/TLS connections) refused by reason: source (untrusted network), challenge, credentials, number, media (no Opus, G.722 or G.711: 488), join (refused join), connections ([sip] max_connections open)."
        );
    });
    metrics::counter!(SIP_REFUSED, "reason" => reason).increment(1);
}

/// One HTTP API request answered. `route` is the matched route template
/// (never the raw path, which carries room and participant ids).
pub fn api_request(method: &Method, route: &str, status: StatusCode) {
    if handles().is_none() {
        return;
    }
    let method = match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::PUT => "PUT",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    };
    metrics::counter!(API_REQUESTS, "method" => method, "route" => route.to_owned(), "status" => status.as_str().to_owned())
        .increment(1);
}

/// A join was answered in `duration`.
pub fn join_latency(duration: Duration) {
    if let Some(h) = handles() {
        h.join_duration.record(duration.as_secs_f64());
    }
}

/// An ICE restart was answered (`ok`) or refused (`failed`).
pub fn ice_restart(ok: bool) {
    if handles().is_some() {
        metrics::counter!(API_ICE_RESTARTS, "result" => if ok { "ok" } else { "failed" }).increment(1);
    }
}

/// A connection or request was refused at `limit` (see [`API_CONNECTIONS_REFUSED`]).
pub fn connection_refused(limit: &'static str) {
    if handles().is_some() {
        metrics::counter!(API_CONNECTIONS_REFUSED, "limit" => limit).increment(1);
    }
}

/// Whether the node drains (see [`NODE_DRAINING`]).
pub fn set_draining(on: bool) {
    if handles().is_some() {
        metrics::gauge!(NODE_DRAINING).set(if on { 1.0 } else { 0.0 });
    }
}

/// `n` event batches a WebSocket missed (see [`API_WS_LAGGED`]).
pub fn ws_lagged(n: u64) {
    if handles().is_some() {
        metrics::counter!(API_WS_LAGGED).increment(n);
    }
}

/// A round of roster writes (see [`CLUSTER_ROSTER_WRITES`]).
pub fn roster_write(ok: bool) {
    if handles().is_some() {
        metrics::counter!(CLUSTER_ROSTER_WRITES, "result" => if ok { "ok" } else { "failed" }).increment(1);
    }
}

/// `n` roster changes that overflowed (see [`CLUSTER_ROSTER_OVERFLOW`]).
pub fn roster_overflow(n: u64) {
    if handles().is_some() && n > 0 {
        metrics::counter!(CLUSTER_ROSTER_OVERFLOW).increment(n);
    }
}

/// `n` roster entries ignored (see [`CLUSTER_ROSTER_REFUSED`]).
pub fn roster_refused(n: u64) {
    if handles().is_some() && n > 0 {
        metrics::counter!(CLUSTER_ROSTER_REFUSED).increment(n);
    }
}

/// `n` events of other nodes taken or refused (see [`CLUSTER_SPAN_EVENTS`]).
pub fn span_events(taken: bool, n: u64) {
    if handles().is_some() && n > 0 {
        metrics::counter!(CLUSTER_SPAN_EVENTS, "result" => if taken { "taken" } else { "refused" }).increment(n);
    }
}

/// One participant move's outcome (see [`PARTICIPANT_MOVES`]).
pub fn participant_move(result: &'static str) {
    if handles().is_some() {
        metrics::counter!(PARTICIPANT_MOVES, "result" => result).increment(1);
    }
}

/// A room control message from another node applied here
/// (`tutti_cluster_control_applied_total{kind}`).
pub fn cluster_control_applied(kind: &'static str) {
    if handles().is_some() {
        metrics::counter!(CLUSTER_CONTROL_APPLIED, "kind" => kind).increment(1);
    }
}

/// Data messages by result (see [`DATA_MESSAGES`]).
pub fn data_messages(result: &'static str, n: u64) {
    if handles().is_some() {
        metrics::counter!(DATA_MESSAGES, "result" => result).increment(n);
    }
}

/// One stage action (see [`STAGE_ACTIONS`]).
pub fn stage_action(action: &'static str) {
    if handles().is_some() {
        metrics::counter!(STAGE_ACTIONS, "action" => action).increment(1);
    }
}

/// axum middleware: counts every request by route template and status, and
/// times successful joins.
pub async fn track_api(req: Request, next: Next) -> Response {
    if handles().is_none() {
        return next.run(req).await;
    }
    let started = Instant::now();
    let method = req.method().clone();
    let route = req.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned());
    let response = next.run(req).await;
    let route = route.as_deref().unwrap_or("unmatched");
    api_request(&method, route, response.status());
    if route == JOIN_ROUTE && method == Method::POST && response.status().is_success() {
        join_latency(started.elapsed());
    }
    response
}

/// Every metric name tutti can export, once each: [`NAMES`], the
/// recording, webhook and RTP-out ones ([`outputs::NAMES`]), the ICE-TCP
/// ones ([`TCP_NAMES`]), the cluster's ([`cluster_names`]) and the mesh's
/// (`tutti_mesh_*`, rooms spread over nodes).
pub fn all_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = NAMES.iter().chain(outputs::NAMES).chain(TCP_NAMES).copied().collect();
    names.extend(cluster_names());
    names.extend(mesh::ALL);
    names
}

/// The `tutti_cluster_*` names exported in cluster mode (see [`cluster`]), once each.
pub fn cluster_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> =
        tutti_cluster::ClusterStats::default().samples().into_iter().map(|s| s.name).collect();
    names.dedup();
    names
}

/// The cluster's figures ([`tutti_cluster::ClusterStats::samples`]) as
/// `tutti_cluster_*` series, set to their current values; the server calls
/// it every second in cluster mode. No-op until [`install`].
pub fn cluster(stats: &tutti_cluster::ClusterStats) {
    if handles().is_none() {
        return;
    }
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    let samples = stats.samples();
    DESCRIBED.call_once(|| {
        for s in &samples {
            match s.kind {
                tutti_cluster::SampleKind::Counter if !s.name.ends_with("_seconds_total") => {
                    metrics::describe_counter!(s.name, s.help)
                }
                _ => metrics::describe_gauge!(s.name, s.help),
            }
        }
    });
    for s in samples {
        // The metrics crate's counters are integers: a counter of seconds
        // goes out through a gauge (it still only grows; rate() works on it).
        let kind = if s.name.ends_with("_seconds_total") { tutti_cluster::SampleKind::Gauge } else { s.kind };
        match (kind, s.label) {
            (tutti_cluster::SampleKind::Counter, None) => metrics::counter!(s.name).absolute(s.value as u64),
            (tutti_cluster::SampleKind::Counter, Some((k, v))) => {
                metrics::counter!(s.name, k => v).absolute(s.value as u64)
            }
            (tutti_cluster::SampleKind::Gauge, None) => metrics::gauge!(s.name).set(s.value),
            (tutti_cluster::SampleKind::Gauge, Some((k, v))) => metrics::gauge!(s.name, k => v).set(s.value),
        }
    }
}

/// Everything, in the Prometheus text format: the recorded metrics, then
/// per-thread CPU and the process metrics read from /proc now. Empty when
/// metrics are not installed.
pub fn render() -> String {
    let Some(Ok(installed)) = INSTALLED.get() else { return String::new() };
    let mut out = installed.prometheus.render();
    let mut proc = crate::sync::lock(&installed.proc);
    proc.render(&mut out);
    out
}

async fn metrics_endpoint() -> Response {
    let body = render();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response()
}

/// Serves `GET /metrics` on `listener` until `stop` turns true, and drains the
/// exporter's histogram buffers every few seconds meanwhile.
pub(crate) async fn serve(listener: tokio::net::TcpListener, mut stop: tokio::sync::watch::Receiver<bool>) {
    let app = axum::Router::new().route("/metrics", axum::routing::get(metrics_endpoint));
    let mut upkeep_stop = stop.clone();
    let upkeep = async move {
        let mut every = tokio::time::interval(UPKEEP_PERIOD);
        loop {
            tokio::select! {
                _ = every.tick() => {
                    if let Some(Ok(installed)) = INSTALLED.get() {
                        installed.prometheus.run_upkeep();
                    }
                }
                _ = upkeep_stop.wait_for(|s| *s) => break,
            }
        }
    };
    let shutdown = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let server = axum::serve(listener, app).with_graceful_shutdown(shutdown);
    let (served, ()) = tokio::join!(server, upkeep);
    if let Err(e) = served {
        tracing::error!(error = %e, "metrics endpoint failed");
    }
}

/// Binds the metrics address.
pub(crate) async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}
