//! `[sip]`: the SIP edge (docs/features/sip.md). Phones and PBXs call a
//! room by its name; the call joins as a plain RTP participant (RTP in).

use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

/// The SIP edge: INVITEs over UDP from trusted networks join the room the
/// Request-URI names, with Opus over plain RTP (the `[rtp_in]` path).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SipConfig {
    /// Answer SIP on `listen`. Off by default.
    pub enabled: bool,
    /// UDP address of the SIP endpoint.
    pub listen: SocketAddr,
    /// The host (and port) put in Contact headers; empty = the first
    /// `advertise` address's IP (else the media address's), with the
    /// `listen` port. Behind NAT: the address callers reach.
    pub public_address: String,
    /// Put before the Request-URI's user part to make the room's name
    /// (`sip:standup@…` with prefix `phone-` joins room `phone-standup`).
    pub room_prefix: String,
    /// Networks (CIDR) whose SIP requests are answered. Empty (the
    /// default) = every INVITE is refused with 403 (logged, counted in
    /// `tutti_sip_refused_total{reason="source"}`). The callers' RTP
    /// addresses must also be in `[rtp_in] trusted`. Environment and
    /// flags: comma-separated.
    pub trusted: Vec<String>,
}

impl Default for SipConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            listen: SocketAddr::from(([0, 0, 0, 0], 5060)),
            public_address: String::new(),
            room_prefix: String::new(),
            trusted: Vec::new(),
        }
    }
}

impl SipConfig {
    /// The Contact host and port: `public_address`, else `fallback` (the
    /// advertised media IP) with the port `bound` on.
    pub fn contact(&self, fallback: IpAddr, bound: SocketAddr) -> String {
        if !self.public_address.is_empty() {
            return self.public_address.clone();
        }
        let ip = if bound.ip().is_unspecified() { fallback } else { bound.ip() };
        SocketAddr::new(ip, bound.port()).to_string()
    }

    /// Checks `trusted` and `public_address`.
    pub(crate) fn check(&self) -> Result<(), (&'static str, String)> {
        crate::cidr::parse_all(&self.trusted).map_err(|m| ("sip.trusted", m))?;
        let host = self.public_address.trim();
        if host.contains(char::is_whitespace) || host.contains(['<', '>', ';', '@']) {
            return Err(("sip.public_address", "must be a host or host:port, like 203.0.113.7:5060".into()));
        }
        Ok(())
    }
}
