//! IP networks written as CIDR (`10.0.0.0/8`, `fd00::/8`, or a bare
//! address for one host), and whether an address is in one of them. Used
//! for the trusted networks plain RTP may come from (`[rtp_in] trusted`).

use std::net::IpAddr;

/// One network: an address and how many leading bits of it count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `addr/prefix` or a bare address (a /32 or /128).
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| format!("'{text}' is not an IP network like 10.0.0.0/8"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("'{text}': the prefix length must be 0 to {max}"))?,
        };
        Ok(Self { addr, prefix })
    }

    /// Whether `ip` is in this network (an IPv4-mapped IPv6 address counts as its IPv4 one).
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let bits = u32::from(self.prefix);
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// Parses every network of a list (the first bad one is the error).
pub(crate) fn parse_all(list: &[String]) -> Result<Vec<Cidr>, String> {
    list.iter().map(|s| Cidr::parse(s)).collect()
}

/// Whether `ip` is in any of `nets`.
pub(crate) fn any_contains(nets: &[Cidr], ip: IpAddr) -> bool {
    nets.iter().any(|n| n.contains(ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an address")
    }

    #[test]
    fn networks_contain_what_they_should() {
        let nets = parse_all(&["127.0.0.0/8".into(), "10.1.0.0/16".into(), "fd00::/8".into(), "192.0.2.7".into()])
            .expect("valid");
        for yes in ["127.0.0.1", "127.255.0.9", "10.1.200.3", "fd12::1", "192.0.2.7", "::ffff:10.1.0.1"] {
            assert!(any_contains(&nets, ip(yes)), "{yes}");
        }
        for no in ["128.0.0.1", "10.2.0.1", "fe80::1", "192.0.2.8", "::1"] {
            assert!(!any_contains(&nets, ip(no)), "{no}");
        }
        assert!(Cidr::parse("0.0.0.0/0").expect("valid").contains(ip("203.0.113.9")));
        assert!(!Cidr::parse("0.0.0.0/0").expect("valid").contains(ip("2001:db8::1")));
    }

    #[test]
    fn the_trusted_list_comes_from_the_file_the_environment_or_a_flag() {
        let env = |v: &str| [("TUTTI_RTP_IN_TRUSTED".to_owned(), v.to_owned())];
        let cfg = crate::Config::load(None, env("10.0.0.0/8, 127.0.0.0/8"), &[]).expect("loads");
        assert_eq!(cfg.rtp_in.trusted, ["10.0.0.0/8", "127.0.0.0/8"]);
        let set = [("rtp_in.trusted".to_owned(), "192.0.2.0/24".to_owned())];
        assert_eq!(crate::Config::load(None, env("10.0.0.0/8"), &set).expect("loads").rtp_in.trusted, ["192.0.2.0/24"]);
        let err = crate::Config::load(None, env("10.0.0.0/33"), &[]).expect_err("refused").to_string();
        assert!(err.contains("rtp_in.trusted") && err.contains("10.0.0.0/33"), "{err}");
        assert!(crate::Config::default().rtp_in.trusted.is_empty(), "off by default");
    }

    #[test]
    fn bad_networks_are_refused() {
        for bad in ["", "10.0.0.0/33", "fd00::/129", "ten/8", "10.0.0.0/x", "10.0.0/8"] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }
}
