//! Token buckets: joins per client address, messages per WebSocket,
//! updates per participant; and counts of what a key holds open (WebSockets
//! per identity).
//!
//! Deterministic like the rest of the core: every call takes `now`.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::sync::lock;

/// Client addresses tracked at most; beyond, addresses whose bucket is full
/// again are forgotten, and if none is, new addresses are refused until one
/// refills (an attack from that many addresses at once is refused rather
/// than allowed to grow the table without bound).
const MAX_TRACKED: usize = 65_536;

/// A token bucket: `burst` tokens, refilled at `rate` per second.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    pub(crate) fn full(burst: u32, now: Instant) -> Self {
        Self { tokens: f64::from(burst), at: now }
    }

    fn refill(&mut self, rate: f64, burst: u32, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(f64::from(burst));
        self.at = now;
    }

    /// Takes one token, or says how long until one is there.
    pub(crate) fn take(&mut self, rate: f64, burst: u32, now: Instant) -> Result<(), Duration> {
        self.refill(rate, burst, now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / rate))
        }
    }

    fn is_full(&self, rate: f64, burst: u32, now: Instant) -> bool {
        let mut b = *self;
        b.refill(rate, burst, now);
        b.tokens >= f64::from(burst)
    }
}

/// The address a limit is kept for: IPv4 addresses one by one, IPv6 by /64
/// (one subscriber's whole prefix counts as one client).
pub(crate) fn key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
        v4 => v4,
    }
}

/// One bucket per key (a participant, an address).
#[derive(Debug)]
pub(crate) struct KeyedLimiter<K> {
    rate: f64,
    burst: u32,
    buckets: Mutex<HashMap<K, Bucket>>,
}

impl<K: Hash + Eq + Copy + std::fmt::Debug> KeyedLimiter<K> {
    /// `rate` per second (0 = no limit) with `burst`.
    pub(crate) fn new(rate: f64, burst: u32) -> Self {
        Self { rate, burst, buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes one token for `k`, or says when to retry.
    pub(crate) fn check(&self, k: K, now: Instant) -> Result<(), Duration> {
        if self.rate <= 0.0 {
            return Ok(());
        }
        let (rate, burst) = (self.rate, self.burst);
        let mut buckets = lock(&self.buckets);
        if !buckets.contains_key(&k) && buckets.len() >= MAX_TRACKED {
            buckets.retain(|_, b| !b.is_full(rate, burst, now));
            if buckets.len() >= MAX_TRACKED {
                tracing::warn!(tracked = buckets.len(), "rate limiter full: refusing new keys");
                return Err(Duration::from_secs_f64(1.0 / rate));
            }
        }
        buckets.entry(k).or_insert_with(|| Bucket::full(burst, now)).take(rate, burst, now)
    }

    /// Keys tracked now.
    pub(crate) fn tracked(&self) -> usize {
        lock(&self.buckets).len()
    }

    /// Forgets keys whose bucket is full again (they are as good as new).
    pub(crate) fn prune(&self, now: Instant) {
        let (rate, burst) = (self.rate, self.burst);
        lock(&self.buckets).retain(|_, b| !b.is_full(rate, burst, now));
    }
}

/// One bucket per client address (see [`key`]).
#[derive(Debug)]
pub(crate) struct AddressLimiter(KeyedLimiter<IpAddr>);

impl AddressLimiter {
    /// `rate` per second (0 = no limit) with `burst`.
    pub(crate) fn new(rate: f64, burst: u32) -> Self {
        Self(KeyedLimiter::new(rate, burst))
    }

    /// Takes one token for `ip`, or says when to retry.
    pub(crate) fn check(&self, ip: IpAddr, now: Instant) -> Result<(), Duration> {
        self.0.check(key(ip), now)
    }

    /// Addresses tracked now.
    pub(crate) fn tracked(&self) -> usize {
        self.0.tracked()
    }

    /// Forgets addresses whose bucket is full again (they are as good as new).
    pub(crate) fn prune(&self, now: Instant) {
        self.0.prune(now);
    }
}

/// How many of something each key holds open (WebSockets per identity).
#[derive(Debug, Default, Clone)]
pub(crate) struct Counts(Arc<Mutex<HashMap<String, usize>>>);

/// One held; dropping it gives it back.
#[derive(Debug)]
pub(crate) struct Held {
    counts: Counts,
    key: String,
}

impl Counts {
    /// One more for `key` if it holds fewer than `max` (0 = no limit).
    pub(crate) fn acquire(&self, key: &str, max: usize) -> Option<Held> {
        let mut counts = lock(&self.0);
        let n = counts.entry(key.to_owned()).or_insert(0);
        if max > 0 && *n >= max {
            return None;
        }
        *n += 1;
        Some(Held { counts: self.clone(), key: key.to_owned() })
    }

    /// Keys holding anything (for leak checks).
    #[cfg(test)]
    fn keys(&self) -> usize {
        lock(&self.0).len()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut counts = lock(&self.counts.0);
        if let Some(n) = counts.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_its_burst_then_its_rate() {
        let t0 = Instant::now();
        let mut b = Bucket::full(3, t0);
        for _ in 0..3 {
            assert_eq!(b.take(2.0, 3, t0), Ok(()));
        }
        let wait = b.take(2.0, 3, t0).expect_err("empty");
        assert!((wait.as_secs_f64() - 0.5).abs() < 1e-9, "{wait:?}");
        assert_eq!(b.take(2.0, 3, t0 + Duration::from_millis(500)), Ok(()));
        assert!(b.take(2.0, 3, t0 + Duration::from_millis(500)).is_err());
        // A long pause refills to the burst, never beyond.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(b.take(2.0, 3, later), Ok(()));
        }
        assert!(b.take(2.0, 3, later).is_err());
    }

    #[test]
    fn addresses_have_their_own_buckets_and_ipv6_counts_by_prefix() {
        let t0 = Instant::now();
        let l = AddressLimiter::new(1.0, 2);
        let a: IpAddr = "10.0.0.1".parse().expect("ip");
        let b: IpAddr = "10.0.0.2".parse().expect("ip");
        assert!(l.check(a, t0).is_ok() && l.check(a, t0).is_ok() && l.check(a, t0).is_err());
        assert!(l.check(b, t0).is_ok(), "another address is not affected");
        let v6a: IpAddr = "2001:db8:1:2::1".parse().expect("ip");
        let v6b: IpAddr = "2001:db8:1:2:ffff::9".parse().expect("ip");
        assert!(l.check(v6a, t0).is_ok() && l.check(v6b, t0).is_ok());
        assert!(l.check(v6a, t0).is_err(), "the same /64 shares one bucket");
        assert_eq!(l.tracked(), 3);
        l.prune(t0 + Duration::from_secs(10));
        assert_eq!(l.tracked(), 0, "refilled buckets are forgotten");
        assert!(AddressLimiter::new(0.0, 1).check(a, t0).is_ok(), "rate 0 is no limit");
    }

    #[test]
    fn counts_hold_up_to_their_limit_and_give_back_on_drop() {
        let c = Counts::default();
        let a = c.acquire("alice", 2).expect("one");
        let b = c.acquire("alice", 2).expect("two");
        assert!(c.acquire("alice", 2).is_none(), "a third is refused");
        assert!(c.acquire("bob", 2).is_some(), "another key is not affected");
        drop(a);
        let again = c.acquire("alice", 2).expect("freed");
        drop((b, again));
        assert_eq!(c.keys(), 0, "nothing held: nothing kept");
        assert!(c.acquire("x", 0).is_some(), "0 = no limit");
    }
}
