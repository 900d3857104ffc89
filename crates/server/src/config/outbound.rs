//! `[[sip.outbound]]`: the trunks tutti dials out through
//! (`POST /v1/rooms/{room}/calls`, docs/features/sip.md#dial-out).
//!
//! A table of its own rather than an outbound part of `[[sip.trunks]]`: an
//! inbound trunk is found by the source of a request and checks the
//! caller's credentials; an outbound one is a destination and carries the
//! credentials tutti answers a challenge with. A carrier that does both is
//! one entry in each (the names may be the same).

use serde::{Deserialize, Serialize};

/// One outbound trunk: where its INVITEs go, how tutti proves itself, who
/// the callee sees calling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutboundConfig {
    /// Its name: what a dial-out request names, and the call's `sip.trunk`.
    pub name: String,
    /// `host:port` the INVITEs are sent to (a proxy, an SBC, a phone).
    pub address: String,
    /// `udp`, `tcp` or `tls` (the trunk's certificate is checked against the
    /// system's roots and the host of `address`).
    pub transport: String,
    /// Digest credentials answered to a 401 or 407 (both or neither).
    pub username: String,
    /// The digest password (never logged).
    pub password: String,
    /// The From user part (the caller id); empty = `tutti`.
    pub from_user: String,
    /// The From display name; empty = none.
    pub from_name: String,
    /// Calls up at once (ringing or answered) through this trunk; more are 429.
    pub max_calls: usize,
}

impl Default for OutboundConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            address: String::new(),
            transport: "udp".to_owned(),
            username: String::new(),
            password: String::new(),
            from_user: String::new(),
            from_name: String::new(),
            max_calls: 10,
        }
    }
}

/// Most calls one trunk may have up at once.
const MAX_CALLS: usize = 10_000;

impl OutboundConfig {
    /// The From user part: `from_user`, else `tutti`.
    pub fn caller(&self) -> &str {
        if self.from_user.is_empty() { "tutti" } else { &self.from_user }
    }

    pub(super) fn check(&self, names: &mut Vec<String>) -> Result<(), String> {
        let name = self.name.trim();
        if name.is_empty() || name.len() > 64 || name.chars().any(char::is_control) {
            return Err("each outbound trunk needs a `name` of 1 to 64 characters".into());
        }
        if names.iter().any(|n| n == name) {
            return Err(format!("two outbound trunks are named '{name}'"));
        }
        names.push(name.to_owned());
        let port = self.address.rsplit_once(':').and_then(|(host, port)| {
            let host_ok = !host.is_empty() && !host.contains(char::is_whitespace) && !host.contains(['@', ';', '<']);
            port.parse::<u16>().ok().filter(|p| *p > 0 && host_ok)
        });
        if port.is_none() {
            return Err(format!("outbound trunk '{name}': `address` must be host:port, like \"192.0.2.10:5060\""));
        }
        if !["udp", "tcp", "tls"].iter().any(|t| self.transport.eq_ignore_ascii_case(t)) {
            return Err(format!(
                "outbound trunk '{name}': transport '{}' is not one of \"udp\", \"tcp\", \"tls\"",
                self.transport
            ));
        }
        if self.username.is_empty() != self.password.is_empty() {
            return Err(format!("outbound trunk '{name}': set both `username` and `password`, or neither"));
        }
        let bad = |s: &str| s.contains(['"', '\\', '<', '>', '@', ';', ':']) || s.chars().any(char::is_control);
        if bad(&self.username) || bad(&self.from_user) || self.from_user.contains(' ') {
            return Err(format!(
                "outbound trunk '{name}': `username` and `from_user` may not hold quotes, <, >, @, ;, : or control characters"
            ));
        }
        if self.from_name.contains(['"', '\\']) || self.from_name.chars().any(char::is_control) {
            return Err(format!("outbound trunk '{name}': `from_name` may not hold quotes or backslashes"));
        }
        if self.max_calls == 0 || self.max_calls > MAX_CALLS {
            return Err(format!("outbound trunk '{name}': `max_calls` must be 1 to {MAX_CALLS}"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::SipConfig;
    use super::OutboundConfig;

    fn trunk() -> OutboundConfig {
        OutboundConfig { name: "carrier".into(), address: "192.0.2.10:5060".into(), ..OutboundConfig::default() }
    }

    /// What `[sip]` with these outbound trunks says: `Ok`, or the key and the message.
    fn checked(outbound: Vec<OutboundConfig>) -> Result<(), String> {
        SipConfig { outbound, ..SipConfig::default() }.check().map_err(|(key, m)| format!("{key}: {m}"))
    }

    #[test]
    fn outbound_trunks_are_checked_at_load_and_bad_ones_named() {
        assert_eq!(checked(vec![trunk()]), Ok(()));
        let from_file: SipConfig = toml::from_str(
            "[[outbound]]\nname = \"c\"\naddress = \"sbc.example.com:5060\"\nusername = \"u\"\npassword = \"p\"\n",
        )
        .expect("parses");
        assert_eq!((from_file.outbound[0].transport.as_str(), from_file.outbound[0].max_calls), ("udp", 10));
        assert_eq!(from_file.outbound[0].caller(), "tutti");
        let bad = [
            (OutboundConfig { transport: "sctp".into(), ..trunk() }, "\"tls\""),
            (OutboundConfig { address: "192.0.2.10".into(), ..trunk() }, "host:port"),
            (OutboundConfig { address: ":5060".into(), ..trunk() }, "host:port"),
            (OutboundConfig { username: "u".into(), ..trunk() }, "both"),
            (OutboundConfig { from_user: "a@b".into(), ..trunk() }, "from_user"),
            (OutboundConfig { max_calls: 0, ..trunk() }, "max_calls"),
            (OutboundConfig { name: String::new(), ..trunk() }, "name"),
        ];
        for (t, named) in bad {
            let message = checked(vec![t.clone()]).expect_err("refused");
            assert!(message.starts_with("sip.outbound") && message.contains(named), "{t:?}: {message}");
        }
        assert!(checked(vec![trunk(), trunk()]).expect_err("refused").contains("two outbound trunks"));
        let none = SipConfig { max_calls_per_room: 0, ..SipConfig::default() }.check();
        assert_eq!(none.map_err(|(key, _)| key), Err("sip.max_calls_per_room"));
    }
}
