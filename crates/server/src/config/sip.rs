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
    /// What keys a caller presses do, each `"<keys>=<action>"`: the keys
    /// (1 to 8 of `0`-`9`, `*`, `#`, `A`-`D`, pressed within 3 s of each
    /// other) and the action: `mute` (mute toggle: unmutes only a caller
    /// that may speak) or `hand` (raise or lower its hand). Default
    /// `["*6=mute", "*7=hand"]`; empty = keys do nothing (every key is
    /// still a `keypad` event to the room's sockets).
    pub keypad: Vec<String>,
}

/// What a keypad sequence does (`[sip] keypad`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAction {
    /// Mute the caller, or unmute it.
    Mute,
    /// Raise or lower the caller's hand.
    Hand,
}

/// Longest keypad sequence.
const MAX_SEQUENCE: usize = 8;

impl Default for SipConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            listen: SocketAddr::from(([0, 0, 0, 0], 5060)),
            public_address: String::new(),
            room_prefix: String::new(),
            trusted: Vec::new(),
            keypad: vec!["*6=mute".to_owned(), "*7=hand".to_owned()],
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

    /// The keypad map: each sequence and its action (see `keypad`).
    pub fn keypad_map(&self) -> Result<Vec<(String, KeyAction)>, String> {
        let mut map: Vec<(String, KeyAction)> = Vec::new();
        for entry in &self.keypad {
            let (keys, action) =
                entry.split_once('=').ok_or_else(|| format!("'{entry}' must be <keys>=<action>, like *6=mute"))?;
            let keys = keys.trim().to_ascii_uppercase();
            if keys.is_empty()
                || keys.len() > MAX_SEQUENCE
                || !keys.chars().all(|c| c.is_ascii_digit() || "*#ABCD".contains(c))
            {
                return Err(format!("'{entry}': the keys must be 1 to {MAX_SEQUENCE} of 0-9, *, #, A-D"));
            }
            let action = match action.trim() {
                "mute" => KeyAction::Mute,
                "hand" => KeyAction::Hand,
                other => return Err(format!("'{entry}': unknown action '{other}'; the actions are mute, hand")),
            };
            if let Some((other, _)) = map.iter().find(|(k, _)| k.starts_with(&keys) || keys.starts_with(k.as_str())) {
                return Err(format!("'{entry}': {keys} and {other} overlap (one starts the other)"));
            }
            map.push((keys, action));
        }
        Ok(map)
    }

    /// Checks `trusted`, `public_address` and `keypad`.
    pub(crate) fn check(&self) -> Result<(), (&'static str, String)> {
        crate::cidr::parse_all(&self.trusted).map_err(|m| ("sip.trusted", m))?;
        self.keypad_map().map_err(|m| ("sip.keypad", m))?;
        let host = self.public_address.trim();
        if host.contains(char::is_whitespace) || host.contains(['<', '>', ';', '@']) {
            return Err(("sip.public_address", "must be a host or host:port, like 203.0.113.7:5060".into()));
        }
        Ok(())
    }
}
