//! ICE-TCP metrics (the TCP side of the media port): connections open,
//! accepted, refused and closed by reason, frames in and out, and frames
//! dropped because a connection's send buffer was full. Recorded by each
//! I/O thread at the end of a loop turn, only when its counters moved.

use std::sync::Once;

use metrics::Unit;
use tutti_rtc::TcpStats;

/// TCP media connections open now (gauge).
pub const MEDIA_TCP_CONNECTIONS: &str = "tutti_media_tcp_connections";
/// TCP media connections accepted (within the limits).
pub const MEDIA_TCP_ACCEPTED: &str = "tutti_media_tcp_accepted_total";
/// TCP media connections refused or closed, by `reason`: `too_many`,
/// `too_many_from_ip`, `not_stun`, `stun_timeout`, `idle`, `bad_frame`,
/// `peer_closed`, `local`.
pub const MEDIA_TCP_CLOSED: &str = "tutti_media_tcp_closed_total";
/// RFC 4571 frames received over TCP.
pub const MEDIA_TCP_FRAMES_RECEIVED: &str = "tutti_media_tcp_frames_received_total";
/// Frames queued to send over TCP.
pub const MEDIA_TCP_FRAMES_SENT: &str = "tutti_media_tcp_frames_sent_total";
/// Frames dropped: a slow reader's send buffer was full, or its connection was gone.
pub const MEDIA_TCP_DROPPED: &str = "tutti_media_tcp_dropped_frames_total";

/// Every ICE-TCP metric.
pub const TCP_NAMES: &[&str] = &[
    MEDIA_TCP_CONNECTIONS,
    MEDIA_TCP_ACCEPTED,
    MEDIA_TCP_CLOSED,
    MEDIA_TCP_FRAMES_RECEIVED,
    MEDIA_TCP_FRAMES_SENT,
    MEDIA_TCP_DROPPED,
];

fn describe() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        use metrics::{describe_counter, describe_gauge};
        describe_gauge!(MEDIA_TCP_CONNECTIONS, Unit::Count, "ICE-TCP media connections open.");
        describe_counter!(MEDIA_TCP_ACCEPTED, Unit::Count, "ICE-TCP media connections accepted.");
        describe_counter!(MEDIA_TCP_CLOSED, Unit::Count, "ICE-TCP media connections refused or closed, by reason.");
        describe_counter!(MEDIA_TCP_FRAMES_RECEIVED, Unit::Count, "RFC 4571 frames received over TCP.");
        describe_counter!(MEDIA_TCP_FRAMES_SENT, Unit::Count, "Frames queued to send over TCP.");
        describe_counter!(MEDIA_TCP_DROPPED, Unit::Count, "Frames dropped: send buffer full or connection gone.");
    });
}

/// Reports what one I/O thread's TCP table counted since `last` (and the
/// transmits it dropped for want of a connection); the recorder is installed.
pub(super) fn report(last: &(TcpStats, u64), now: &(TcpStats, u64)) {
    describe();
    let (l, n) = (&last.0, &now.0);
    let grew = |new: u64, old: u64| new.saturating_sub(old);
    metrics::gauge!(MEDIA_TCP_CONNECTIONS).increment(n.open as f64 - l.open as f64);
    let pairs = [
        (MEDIA_TCP_ACCEPTED, None, grew(n.accepted, l.accepted)),
        (MEDIA_TCP_FRAMES_RECEIVED, None, grew(n.frames_in, l.frames_in)),
        (MEDIA_TCP_FRAMES_SENT, None, grew(n.frames_out, l.frames_out)),
        (MEDIA_TCP_DROPPED, None, grew(n.dropped_out, l.dropped_out) + grew(now.1, last.1)),
        (MEDIA_TCP_CLOSED, Some("too_many"), grew(n.refused_total, l.refused_total)),
        (MEDIA_TCP_CLOSED, Some("too_many_from_ip"), grew(n.refused_per_ip, l.refused_per_ip)),
        (MEDIA_TCP_CLOSED, Some("not_stun"), grew(n.closed_not_stun, l.closed_not_stun)),
        (MEDIA_TCP_CLOSED, Some("stun_timeout"), grew(n.closed_stun_timeout, l.closed_stun_timeout)),
        (MEDIA_TCP_CLOSED, Some("idle"), grew(n.closed_idle, l.closed_idle)),
        (MEDIA_TCP_CLOSED, Some("bad_frame"), grew(n.closed_bad_frame, l.closed_bad_frame)),
        (MEDIA_TCP_CLOSED, Some("peer_closed"), grew(n.closed_by_peer, l.closed_by_peer)),
        (MEDIA_TCP_CLOSED, Some("local"), grew(n.closed_local, l.closed_local)),
    ];
    for (name, reason, d) in pairs {
        if d == 0 {
            continue;
        }
        match reason {
            Some(r) => metrics::counter!(name, "reason" => r).increment(d),
            None => metrics::counter!(name).increment(d),
        }
    }
}
