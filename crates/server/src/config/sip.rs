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
    /// Take SIP over TCP too, on the same address as `listen`.
    pub tcp: bool,
    /// The address of SIP over TLS (`sips`), like `0.0.0.0:5061`; empty = off.
    /// Needs `tls_cert` and `tls_key`.
    pub tls_listen: String,
    /// The TLS certificate chain (PEM file) of `tls_listen`.
    pub tls_cert: String,
    /// The TLS private key (PEM file, PKCS#8, PKCS#1 or SEC1) of `tls_listen`.
    pub tls_key: String,
    /// TCP and TLS connections open at once (all peers); more are closed at
    /// once (logged, `tutti_sip_refused_total{reason="connections"}`).
    pub max_connections: usize,
    /// A TCP or TLS connection that carries nothing for this long is closed
    /// (a TLS handshake must end within 10 s).
    pub connection_idle_seconds: u64,
    /// The host (and port) put in Contact headers; empty = the first
    /// `advertise` address's IP (else the media address's), with the
    /// `listen` port. Behind NAT: the address callers reach.
    pub public_address: String,
    /// Put before the Request-URI's user part to make the room's name
    /// (`sip:standup@…` with prefix `phone-` joins room `phone-standup`).
    pub room_prefix: String,
    /// Networks (CIDR) whose SIP requests are answered without
    /// credentials: an implicit trunk named `trusted`, any number, after
    /// the `trunks`. With neither, every INVITE is refused with 403
    /// (logged, counted in `tutti_sip_refused_total{reason="source"}`).
    /// The callers' RTP addresses must also be in `[rtp_in] trusted`.
    /// Environment and flags: comma-separated.
    pub trusted: Vec<String>,
    /// The realm of the digest challenges of trunks with credentials.
    pub realm: String,
    /// SRTP with SDES keys (`a=crypto`) for the calls of trunks that do not
    /// say (and of `trusted`): `off`, `allow` (the default) or `require`.
    pub srtp: SrtpMode,
    /// Inbound trunks (`[[sip.trunks]]`): who may call (source networks,
    /// digest credentials), which numbers, and into which room.
    pub trunks: Vec<TrunkConfig>,
    /// Outbound trunks (`[[sip.outbound]]`): where dial-out calls go.
    pub outbound: Vec<super::outbound::OutboundConfig>,
    /// Dial-out calls up at once (ringing or answered) into one room; more are 429.
    pub max_calls_per_room: usize,
    /// What keys a caller presses do, each `"<keys>=<action>"`: the keys
    /// (1 to 8 of `0`-`9`, `*`, `#`, `A`-`D`, pressed within 3 s of each
    /// other) and the action: `mute` (mute toggle: unmutes only a caller
    /// that may speak) or `hand` (raise or lower its hand). Default
    /// `["*6=mute", "*7=hand"]`; empty = keys do nothing (every key is
    /// still a `keypad` event to the room's sockets).
    pub keypad: Vec<String>,
    /// Calls on `trusted` (and on trunks that do not say otherwise) enter
    /// a PIN by keypad to choose their room, instead of naming it.
    pub pin: bool,
    /// The PINs and their rooms, each `"<PIN>=<room>"` (1 to 16 digits).
    /// Environment: comma-separated.
    pub pins: Vec<String>,
    /// Tries at the PIN before tutti says goodbye and hangs up.
    pub pin_attempts: u32,
    /// Seconds to wait for each key of a PIN (and for the first after the
    /// prompt); a try that runs out counts as a wrong one.
    pub pin_digit_timeout_seconds: u64,
    /// A directory of prompts replacing the built-in ones (`enter.opus`,
    /// `invalid.opus`, `joining.opus`, `goodbye.opus`: Ogg/Opus, 20 ms
    /// frames); a missing file is the built-in one. Empty = built-in only.
    pub prompts: String,
    /// The session interval (RFC 4028) tutti asks for when a caller that
    /// supports session timers names none: the caller refreshes the call
    /// within it, else tutti ends it.
    pub session_expires_seconds: u64,
    /// The shortest session interval tutti takes (`Min-SE`): a caller's
    /// shorter one is answered 422. RFC 4028 says 90; lower is for tests.
    pub min_session_expires_seconds: u64,
    /// How long a held call (`a=sendonly`, `a=inactive`, `c=` 0.0.0.0)
    /// stays without any RTP before it is ended: its media timeout while
    /// held, instead of `peer_timeout_seconds`.
    pub hold_timeout_seconds: u64,
}

/// One inbound trunk (`[[sip.trunks]]`): a carrier's SBC, a PBX.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrunkConfig {
    /// Its name: in logs and in the call's `sip.trunk` attribute.
    pub name: String,
    /// Networks (CIDR) the trunk's INVITEs come from (at least one).
    pub networks: Vec<String>,
    /// Digest credentials (both or neither): with them, an INVITE is
    /// challenged (401) and must answer with them.
    pub username: String,
    /// The digest password (never logged).
    pub password: String,
    /// The digest algorithms challenged with, in order of preference:
    /// `SHA-256` and/or `MD5` (RFC 8760). Default both, SHA-256 first; a
    /// UA that fails on a challenge it does not know (some take only MD5)
    /// needs `["MD5"]`. Only these are accepted in the answer.
    pub digest: Vec<String>,
    /// Called numbers (Request-URI user parts) it may call; empty = any.
    pub numbers: Vec<String>,
    /// A fixed room for every call on the trunk; empty = the room the
    /// number names (with `room_prefix`).
    pub room: String,
    /// Put before the number to name the room; absent = `[sip] room_prefix`.
    pub room_prefix: Option<String>,
    /// Its calls enter a PIN (`[sip] pins`) to choose their room; absent =
    /// `[sip] pin`.
    pub pin: Option<bool>,
    /// SRTP for its calls; absent = `[sip] srtp`.
    pub srtp: Option<SrtpMode>,
    /// How calls are challenged: `www` (401, `WWW-Authenticate`) or `proxy`
    /// (407, `Proxy-Authenticate`, answered with `Proxy-Authorization`).
    pub challenge: Challenge,
}

/// The status and headers of a trunk's digest challenge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Challenge {
    /// 401 with `WWW-Authenticate`; the answer in `Authorization`.
    #[default]
    Www,
    /// 407 with `Proxy-Authenticate`; the answer in `Proxy-Authorization`.
    Proxy,
}

/// Whether a call's media is SRTP keyed by SDES (RFC 4568 `a=crypto`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SrtpMode {
    /// Plain RTP only: an `RTP/SAVP` offer is refused (488); the `a=crypto`
    /// lines of an `RTP/AVP` one are ignored.
    Off,
    /// SRTP when the offer has a key tutti takes, else plain RTP (an
    /// `RTP/SAVP` offer without one: 488).
    #[default]
    Allow,
    /// SRTP only: an offer without a key tutti takes is refused (488).
    Require,
}

impl Default for TrunkConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            networks: Vec::new(),
            username: String::new(),
            password: String::new(),
            digest: DIGESTS.iter().map(|d| (*d).to_owned()).collect(),
            numbers: Vec::new(),
            room: String::new(),
            room_prefix: None,
            pin: None,
            srtp: None,
            challenge: Challenge::Www,
        }
    }
}

/// The digest algorithms a trunk may challenge with, the default order.
pub const DIGESTS: [&str; 2] = ["SHA-256", "MD5"];

impl TrunkConfig {
    /// Whether its calls must answer a digest challenge.
    pub fn authenticates(&self) -> bool {
        !self.username.is_empty()
    }

    fn check(&self, names: &mut Vec<String>) -> Result<(), String> {
        let name = self.name.trim();
        if name.is_empty() || name.len() > 64 || name.chars().any(char::is_control) {
            return Err("each trunk needs a `name` of 1 to 64 characters".into());
        }
        if names.iter().any(|n| n == name) {
            return Err(format!("two trunks are named '{name}'"));
        }
        names.push(name.to_owned());
        if self.networks.is_empty() {
            return Err(format!(
                "trunk '{name}': `networks` must list the CIDRs it calls from, like [\"192.0.2.0/24\"]"
            ));
        }
        crate::cidr::parse_all(&self.networks).map_err(|m| format!("trunk '{name}': {m}"))?;
        if self.username.is_empty() != self.password.is_empty() {
            return Err(format!("trunk '{name}': set both `username` and `password`, or neither"));
        }
        if self.username.contains(['"', '\\']) || self.username.chars().any(char::is_control) {
            return Err(format!("trunk '{name}': `username` may not hold quotes, backslashes or control characters"));
        }
        let known = |d: &String| DIGESTS.iter().any(|k| k.eq_ignore_ascii_case(d));
        if self.digest.is_empty() || !self.digest.iter().all(known) {
            return Err(format!("trunk '{name}': `digest` must list SHA-256 and/or MD5, like [\"SHA-256\", \"MD5\"]"));
        }
        if let Some(n) = self.numbers.iter().find(|n| n.trim().is_empty() || n.contains(char::is_whitespace)) {
            return Err(format!("trunk '{name}': number '{n}' is empty or holds spaces"));
        }
        if !self.room.is_empty() && !crate::room::valid_room_id(&self.room) {
            return Err(format!("trunk '{name}': room '{}' is not a valid room id", self.room));
        }
        if !self.room.is_empty() && self.pin == Some(true) {
            return Err(format!("trunk '{name}': set a fixed `room` or `pin = true`, not both"));
        }
        Ok(())
    }
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

/// Longest PIN.
pub const MAX_PIN: usize = 16;

impl Default for SipConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            listen: SocketAddr::from(([0, 0, 0, 0], 5060)),
            tcp: true,
            tls_listen: String::new(),
            tls_cert: String::new(),
            tls_key: String::new(),
            max_connections: 256,
            connection_idle_seconds: 120,
            public_address: String::new(),
            room_prefix: String::new(),
            trusted: Vec::new(),
            realm: "tutti".to_owned(),
            srtp: SrtpMode::Allow,
            trunks: Vec::new(),
            outbound: Vec::new(),
            max_calls_per_room: 20,
            keypad: vec!["*6=mute".to_owned(), "*7=hand".to_owned()],
            pin: false,
            pins: Vec::new(),
            pin_attempts: 3,
            pin_digit_timeout_seconds: 10,
            prompts: String::new(),
            session_expires_seconds: 1800,
            min_session_expires_seconds: 90,
            hold_timeout_seconds: 7200,
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

    /// The TLS address, if SIP over TLS is on.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls_listen.trim().parse().ok()
    }

    /// Checks the TCP and TLS settings (the files are read at start).
    fn check_streams(&self) -> Result<(), (&'static str, String)> {
        if !self.tls_listen.trim().is_empty() && self.tls_addr().is_none() {
            return Err(("sip.tls_listen", "must be an address and port, like \"0.0.0.0:5061\"".into()));
        }
        if self.tls_addr().is_some() && (self.tls_cert.trim().is_empty() || self.tls_key.trim().is_empty()) {
            return Err((
                "sip.tls_cert",
                "SIP over TLS (tls_listen) needs `tls_cert` and `tls_key` (PEM files)".into(),
            ));
        }
        if !(1..=65_536).contains(&self.max_connections) {
            return Err(("sip.max_connections", "must be 1 to 65536".into()));
        }
        if !(5..=3_600).contains(&self.connection_idle_seconds) {
            return Err(("sip.connection_idle_seconds", "must be 5 to 3600".into()));
        }
        Ok(())
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

    /// The PIN map: each PIN and its room (see `pins`).
    pub fn pin_map(&self) -> Result<Vec<(String, String)>, String> {
        let mut map: Vec<(String, String)> = Vec::new();
        for entry in &self.pins {
            let (pin, room) =
                entry.split_once('=').ok_or_else(|| "each entry must be <PIN>=<room>, like 4711=standup".to_owned())?;
            let pin = pin.trim();
            // The PIN itself is a secret: not repeated in the message.
            if pin.is_empty() || pin.len() > MAX_PIN || !pin.chars().all(|c| c.is_ascii_digit()) {
                return Err(format!("the PIN for room '{}' must be 1 to {MAX_PIN} digits 0-9", room.trim()));
            }
            let room = room.trim();
            if !crate::room::valid_room_id(room) {
                return Err(format!("'{room}' (after a PIN) is not a valid room id"));
            }
            if map.iter().any(|(p, _)| p == pin) {
                return Err(format!("two entries have the same PIN (one is for room '{room}')"));
            }
            map.push((pin.to_owned(), room.to_owned()));
        }
        Ok(map)
    }

    /// Checks `trusted`, `trunks`, `outbound`, `realm`, `public_address`, `keypad` and the PIN settings.
    pub(crate) fn check(&self) -> Result<(), (&'static str, String)> {
        crate::cidr::parse_all(&self.trusted).map_err(|m| ("sip.trusted", m))?;
        let mut names = Vec::new();
        for trunk in &self.trunks {
            trunk.check(&mut names).map_err(|m| ("sip.trunks", m))?;
        }
        let mut names = Vec::new();
        for trunk in &self.outbound {
            trunk.check(&mut names).map_err(|m| ("sip.outbound", m))?;
        }
        if self.max_calls_per_room == 0 {
            return Err(("sip.max_calls_per_room", "must be at least 1".into()));
        }
        if self.realm.trim().is_empty() || self.realm.contains(['"', '\\']) || self.realm.chars().any(char::is_control)
        {
            return Err(("sip.realm", "must be a name without quotes or backslashes, like \"tutti\"".into()));
        }
        self.keypad_map().map_err(|m| ("sip.keypad", m))?;
        self.pin_map().map_err(|m| ("sip.pins", m))?;
        let asks_pin = self.pin || self.trunks.iter().any(|t| t.pin == Some(true));
        if asks_pin && self.pins.is_empty() {
            return Err((
                "sip.pins",
                "calls enter a PIN (`pin = true`) but no PIN is set: add \"<PIN>=<room>\"".into(),
            ));
        }
        if !(1..=10).contains(&self.pin_attempts) {
            return Err(("sip.pin_attempts", "must be 1 to 10".into()));
        }
        if !(1..=60).contains(&self.pin_digit_timeout_seconds) {
            return Err(("sip.pin_digit_timeout_seconds", "must be 1 to 60".into()));
        }
        if !(1..=86_400).contains(&self.min_session_expires_seconds) {
            return Err(("sip.min_session_expires_seconds", "must be 1 to 86400 (RFC 4028 says 90)".into()));
        }
        if !(self.min_session_expires_seconds..=86_400).contains(&self.session_expires_seconds) {
            return Err(("sip.session_expires_seconds", "must be min_session_expires_seconds to 86400".into()));
        }
        if !(1..=86_400).contains(&self.hold_timeout_seconds) {
            return Err(("sip.hold_timeout_seconds", "must be 1 to 86400".into()));
        }
        self.check_streams()?;
        let host = self.public_address.trim();
        if host.contains(char::is_whitespace) || host.contains(['<', '>', ';', '@']) {
            return Err(("sip.public_address", "must be a host or host:port, like 203.0.113.7:5060".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Challenge, SipConfig};

    /// What `[sip]` from `text` says: `Ok`, or the key and the message.
    fn checked(text: &str) -> Result<SipConfig, String> {
        let cfg: SipConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        cfg.check().map(|()| cfg).map_err(|(key, m)| format!("{key}: {m}"))
    }

    #[test]
    fn tcp_is_on_tls_needs_its_files_and_a_trunk_may_challenge_as_a_proxy() {
        let defaults = checked("").expect("the defaults");
        assert!(defaults.tcp && defaults.tls_addr().is_none());
        let tls = checked("tls_listen = \"0.0.0.0:5061\"\ntls_cert = \"c.pem\"\ntls_key = \"k.pem\"\n").expect("TLS");
        assert_eq!(tls.tls_addr().map(|a| a.port()), Some(5061));
        let bad = [
            ("tls_listen = \"0.0.0.0:5061\"\n", "sip.tls_cert"),
            ("tls_listen = \"tls-port\"\n", "sip.tls_listen"),
            ("max_connections = 0\n", "sip.max_connections"),
            ("connection_idle_seconds = 1\n", "sip.connection_idle_seconds"),
        ];
        for (text, key) in bad {
            let message = checked(text).expect_err(text);
            assert!(message.starts_with(key), "{text}: {message}");
        }
        let trunk = "[[trunks]]\nname = \"pbx\"\nnetworks = [\"10.0.0.0/8\"]\nchallenge = \"proxy\"\n";
        assert_eq!(checked(trunk).expect("a proxy trunk").trunks[0].challenge, Challenge::Proxy);
        assert!(checked(&trunk.replace("proxy", "basic")).is_err());
    }
}
