//! What the lean paths learn of the DTLS session from webrtc-rs: its SRTP
//! profile, our DTLS role, whether the `alert` module reads its records, and
//! both directions' SRTP keys from the exporter capture.

use std::time::Instant;

use rtc::peer_connection::RTCPeerConnection;
use rtc::peer_connection::transport::RTCDtlsRole;
use rtc::statistics::StatsSelector;

use crate::alert;
use crate::keys::ExporterSlot;
use crate::srtp::{SrtpKeys, SrtpProfile};

/// Where the lean sender's keys come from: the tap's exporter capture, the
/// profile and DTLS role from webrtc-rs's transport statistics.
pub(super) fn lean_keys(pc: &mut RTCPeerConnection, slot: &ExporterSlot, now: Instant) -> Option<(u64, SrtpKeys)> {
    lean_key_pair(pc, slot, now).map(|(generation, local, _)| (generation, local))
}

/// Both directions' keys: (generation, local, remote).
pub(super) fn lean_key_pair(
    pc: &mut RTCPeerConnection,
    slot: &ExporterSlot,
    now: Instant,
) -> Option<(u64, SrtpKeys, SrtpKeys)> {
    dtls_session(pc, now).and_then(|session| session.keys(slot))
}

/// What webrtc-rs's transport statistics tell of the DTLS session.
pub(super) struct DtlsSession {
    profile: SrtpProfile,
    /// Our DTLS role.
    pub(super) is_client: bool,
    /// Its records are ones the `alert` module reads and writes.
    pub(super) alerts_readable: bool,
}

/// The DTLS session's profile and roles, once DTLS is up (one statistics read).
pub(super) fn dtls_session(pc: &mut RTCPeerConnection, now: Instant) -> Option<DtlsSession> {
    let report = pc.get_stats(now, StatsSelector::None);
    let transport = report.transport()?;
    let is_client = match transport.dtls_role {
        RTCDtlsRole::Client => true,
        RTCDtlsRole::Server => false,
        _ => return None,
    };
    Some(DtlsSession {
        profile: SrtpProfile::from_stats_name(&transport.srtp_cipher)?,
        is_client,
        alerts_readable: alert::suite_supported(&transport.dtls_cipher),
    })
}

impl DtlsSession {
    /// Both directions' SRTP keys from the exporter capture: (generation, local, remote).
    pub(super) fn keys(&self, slot: &ExporterSlot) -> Option<(u64, SrtpKeys, SrtpKeys)> {
        let (generation, material) = slot.keying_material(self.profile.keying_material_len())?;
        let (local, remote) = SrtpKeys::from_keying_material(self.profile, &material, self.is_client).ok()?;
        Some((generation, local, remote))
    }
}
