//! RTCP report data: what the remote side's last sender report said
//! ([`SenderReportInfo`], [`ReceptionBlock`]), how often our own reports go
//! out, and the NTP time they carry. The reports are sent and read in
//! `timers.rs`.

use std::time::{Duration, Instant, SystemTime};

/// The last RTCP sender report (RFC 3550 §6.4.1) received from the remote side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderReportInfo {
    /// The sender's SSRC.
    pub ssrc: u32,
    /// Its NTP timestamp (seconds since 1900 in the high 32 bits).
    pub ntp_time: u64,
    /// The RTP timestamp of the same instant.
    pub rtp_time: u32,
    /// RTP packets it sent so far.
    pub packet_count: u32,
    /// Payload octets it sent so far.
    pub octet_count: u32,
    /// Its first reception report block: what it got of our stream.
    pub reception: Option<ReceptionBlock>,
}

/// A reception report block (RFC 3550 §6.4.1): what the remote side got of
/// one of our streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceptionBlock {
    /// The stream reported on (our SSRC).
    pub ssrc: u32,
    /// Lost since the previous report, in 1/256.
    pub fraction_lost: u8,
    /// Lost in all (24 bits).
    pub total_lost: u32,
    /// The extended highest sequence number received (wraps in the high 16 bits).
    pub highest_sequence: u32,
    /// Interarrival jitter, in timestamp units.
    pub jitter: u32,
}

/// How often a connection sends its RTCP report (sender report with a
/// reception block, or a receiver report): every 5 s, as browsers do for
/// audio (Chrome's default audio report interval; RFC 3550 §6.2's minimum),
/// on both paths (webrtc-rs's report interceptors are set to it too).
pub(crate) const REPORT_INTERVAL: Duration = Duration::from_secs(5);

/// The first report goes out this soon after the first packet (RFC 3550
/// §6.2 halves the first interval; a receiver learns the RTP–NTP mapping
/// early).
pub(crate) const FIRST_REPORT: Duration = Duration::from_secs(1);

/// Seconds from the NTP epoch (1900) to the Unix epoch (1970).
const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

/// The NTP timestamp (RFC 3550 §4: seconds since 1900, 32.32 fixed point)
/// of `now`, from an (instant, wall-clock time) pair taken together.
pub(crate) fn ntp_time(wall: (Instant, SystemTime), now: Instant) -> u64 {
    let t = wall.1 + now.saturating_duration_since(wall.0);
    let since_unix = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = since_unix.as_secs().wrapping_add(NTP_UNIX_OFFSET);
    let frac = (u64::from(since_unix.subsec_nanos()) << 32) / 1_000_000_000;
    (secs << 32) | frac
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ntp_times_count_from_1900() {
        let now = Instant::now();
        let wall = (now, SystemTime::UNIX_EPOCH + Duration::from_millis(1500));
        assert_eq!(ntp_time(wall, now), ((NTP_UNIX_OFFSET + 1) << 32) | (1u64 << 31));
        assert_eq!(ntp_time(wall, now + Duration::from_millis(500)) >> 32, NTP_UNIX_OFFSET + 2);
    }
}
