//! Address ranges (`10.0.0.0/8`, `fd00::/8`, a bare address = one host), as
//! allow-lists such as `[rtp_out] allowed` name them.

use std::net::IpAddr;
use std::str::FromStr;

/// One network: an address and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    addr: IpAddr,
    prefix: u8,
}

impl FromStr for Network {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("'{s}' is not a network like 127.0.0.0/8, 10.1.2.3 or fd00::/8");
        let (a, p) = match s.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s.trim(), None),
        };
        let addr: IpAddr = a.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(bad)?,
            None => max,
        };
        Ok(Self { addr, prefix })
    }
}

impl Network {
    /// Whether `ip` is in it (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let (a, b, bits) = match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(i)) => (u128::from(u32::from(n)), u128::from(u32::from(i)), 32u32),
            (IpAddr::V6(n), IpAddr::V6(i)) => (u128::from(n), u128::from(i), 128u32),
            _ => return false,
        };
        let prefix = u32::from(self.prefix);
        if prefix == 0 {
            return true;
        }
        let shift = bits - prefix;
        (a >> shift) == (b >> shift)
    }
}

impl std::fmt::Display for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_parse_and_contain() {
        let n: Network = "127.0.0.0/8".parse().expect("valid");
        assert!(n.contains("127.1.2.3".parse().expect("ip")));
        assert!(n.contains("::ffff:127.0.0.1".parse().expect("ip")));
        assert!(!n.contains("128.0.0.1".parse().expect("ip")));
        assert!(!n.contains("::1".parse().expect("ip")));
        let host: Network = "10.1.2.3".parse().expect("valid");
        assert!(host.contains("10.1.2.3".parse().expect("ip")) && !host.contains("10.1.2.4".parse().expect("ip")));
        let all: Network = "0.0.0.0/0".parse().expect("valid");
        assert!(all.contains("192.0.2.1".parse().expect("ip")));
        let v6: Network = "fd00::/8".parse().expect("valid");
        assert!(v6.contains("fd12::1".parse().expect("ip")) && !v6.contains("fe80::1".parse().expect("ip")));
        for bad in ["", "10.0.0.0/33", "fd00::/129", "example.org", "10.0.0.0/x"] {
            assert!(bad.parse::<Network>().is_err(), "{bad} refused");
        }
    }
}
