//! The HTTP server under the API: an accept loop over hyper's HTTP/1
//! connections, with the limits `axum::serve` does not offer.
//!
//! - At most `limits.max_connections` connections (WebSockets included: a
//!   socket keeps its connection's [`ConnectionSlot`]). Each connection also
//!   counts against one share: at accept, its address's
//!   (`limits.max_connections_per_address`, an IPv4 address or IPv6 /64);
//!   once a request on it carries a valid token, its identity's instead
//!   (`limits.max_connections_per_identity`; see `api::client`, which moves
//!   it with [`ConnectionSlot::claim`]). So a crowd behind one NAT or proxy
//!   is bounded per person, and only what has not authenticated shares the
//!   address's count. A connection from a trusted proxy
//!   (`limits.trusted_proxies`) counts against no address at accept (the
//!   client's address is in its headers, not read yet): its requests claim
//!   the share of the address they are forwarded for.
//! - A new connection past the cap or its address's share takes the slot
//!   of the oldest connection (of its own address, for the share) with no
//!   request in progress (one that has not sent a request yet, or a
//!   kept-alive one waiting for its next: never an upgraded one): that one
//!   is closed. With none to take, a short
//!   503 `too_many_connections` and the connection is closed. So
//!   connections that send nothing cannot keep `/healthz` (or anyone) out,
//!   and one address cannot hold every slot. Every refusal is counted
//!   (`tutti_api_connections_refused_total`, by limit) and logged, at most
//!   one line per [`REFUSAL_LOG_PERIOD`].
//! - A client gets `limits.http_header_timeout_seconds` to send a request's
//!   headers, the first one counted from the accept (slow-header and silent
//!   clients are cut off), and the API answers 408
//!   for a request slower than `limits.http_request_timeout_seconds`.
//! - Each request carries the TCP peer's address (`ConnectInfo`; `api::client`
//!   puts the forwarded client's there for a trusted proxy), for the join
//!   rate limit.
//! - On shutdown: no new connections; open ones finish their request and close.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tower::ServiceExt as _;

use crate::cidr::{Cidr, any_contains};
use crate::sync::lock;

/// Refusals are logged at most once per this (with how many there were).
const REFUSAL_LOG_PERIOD: Duration = Duration::from_secs(10);

/// One of the `limits.max_connections` slots, held by a connection and, once
/// upgraded, by its WebSocket.
#[derive(Clone)]
pub(crate) struct ConnectionSlot(Arc<Slot>);

/// What the accept loop needs.
pub(crate) struct HttpLimits {
    pub(crate) max_connections: usize,
    pub(crate) max_per_address: usize,
    pub(crate) max_per_identity: usize,
    /// Peers whose connections count against no address at accept.
    pub(crate) trusted_proxies: Vec<Cidr>,
    pub(crate) header_timeout: Duration,
}

/// What a connection counts against besides the cap.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Share {
    /// Its address's (an IPv4 address, an IPv6 /64): nothing authenticated on it yet.
    Address(IpAddr),
    /// A token identity's, every token of it together.
    Identity(String),
    /// A token's that names no identity.
    Token(String),
    /// None: a trusted proxy's connection before a request said for whom.
    Proxy,
}

/// The limit a connection or request was refused at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    /// `limits.max_connections`.
    Server,
    /// `limits.max_connections_per_address`.
    Address,
    /// `limits.max_connections_per_identity`.
    Identity,
}

impl Limit {
    /// Its label in `tutti_api_connections_refused_total`.
    fn label(self) -> &'static str {
        match self {
            Self::Server => "server",
            Self::Address => "address",
            Self::Identity => "identity",
        }
    }

    /// The refusal's message, naming the setting.
    pub(crate) fn message(self) -> &'static str {
        match self {
            Self::Server => "the server has no connection to spare (limits.max_connections)",
            Self::Address => "too many connections from your address (limits.max_connections_per_address)",
            Self::Identity => "too many connections for this token's identity (limits.max_connections_per_identity)",
        }
    }
}

/// The open connections: how many, against which share, and which of them
/// have not sent a request yet (oldest first: the ones a newcomer may take).
#[derive(Default)]
struct Table {
    total: usize,
    /// Connections per share ([`Share::Proxy`] is not counted).
    shares: HashMap<Share, usize>,
    /// Connection number → its share, for every connection not taken over.
    held: HashMap<u64, Share>,
    /// Connection number → its eviction signal, for those without a request yet.
    waiting: BTreeMap<u64, Arc<Notify>>,
    next: u64,
}

/// Refusals since the last log line, and when that was.
#[derive(Default)]
struct Refusals {
    count: u64,
    logged: Option<Instant>,
}

/// The connection slots (see the module docs).
pub(crate) struct Slots {
    max: usize,
    max_per_address: usize,
    max_per_identity: usize,
    table: Mutex<Table>,
    refusals: Mutex<Refusals>,
}

/// A connection's place in [`Slots`]; given back when the last holder drops it.
pub(crate) struct Slot {
    slots: Arc<Slots>,
    number: u64,
    /// Told when the slot is taken over: the connection then ends.
    evicted: Arc<Notify>,
}

impl Slots {
    fn new(max: usize, max_per_address: usize, max_per_identity: usize) -> Arc<Self> {
        Arc::new(Self {
            max,
            max_per_address: max_per_address.max(1),
            max_per_identity: max_per_identity.max(1),
            table: Mutex::new(Table::default()),
            refusals: Mutex::new(Refusals::default()),
        })
    }

    /// The limit `share` is at, if it is.
    fn full(&self, t: &Table, share: &Share) -> Option<Limit> {
        let (max, limit) = match share {
            Share::Proxy => return None,
            Share::Address(_) => (self.max_per_address, Limit::Address),
            Share::Identity(_) | Share::Token(_) => (self.max_per_identity, Limit::Identity),
        };
        (t.shares.get(share).copied().unwrap_or(0) >= max).then_some(limit)
    }

    /// A slot for a connection from `ip` (from a trusted proxy: `proxied`),
    /// taking over the oldest connection that has sent no request yet if a
    /// limit is reached; the limit when none can be taken.
    fn admit(self: &Arc<Self>, ip: IpAddr, proxied: bool) -> Result<Slot, Limit> {
        let share = if proxied { Share::Proxy } else { Share::Address(crate::limit::key(ip)) };
        let mut t = lock(&self.table);
        if let Some(limit) = self.full(&t, &share) {
            // The address's share is full: one of its own waiting connections goes.
            let victim = t.waiting.keys().copied().find(|n| t.held.get(n) == Some(&share)).ok_or(limit)?;
            Self::evict(&mut t, victim);
        }
        if t.total >= self.max {
            let victim = t.waiting.keys().next().copied().ok_or(Limit::Server)?;
            Self::evict(&mut t, victim);
        }
        t.total += 1;
        Self::count(&mut t, &share);
        let number = t.next;
        t.next += 1;
        let evicted = Arc::new(Notify::new());
        t.waiting.insert(number, evicted.clone());
        t.held.insert(number, share);
        Ok(Slot { slots: self.clone(), number, evicted })
    }

    /// Takes connection `number`'s slot back now (its task is told to end).
    fn evict(t: &mut Table, number: u64) {
        if let Some(notify) = t.waiting.remove(&number) {
            notify.notify_one();
            Self::release(t, number);
        }
    }

    /// Forgets connection `number` and what it counted.
    fn release(t: &mut Table, number: u64) {
        if let Some(share) = t.held.remove(&number) {
            t.total = t.total.saturating_sub(1);
            Self::forget_one(t, &share);
        }
    }

    fn count(t: &mut Table, share: &Share) {
        if *share != Share::Proxy {
            *t.shares.entry(share.clone()).or_insert(0) += 1;
        }
    }

    fn forget_one(t: &mut Table, share: &Share) {
        if let Some(n) = t.shares.get_mut(share) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                t.shares.remove(share);
            }
        }
    }

    /// Counts a refusal at `limit` of `client` and logs it, at most one
    /// line per [`REFUSAL_LOG_PERIOD`] (a flood is not a line per refusal).
    fn refused(&self, limit: Limit, client: IpAddr) {
        crate::metrics::connection_refused(limit.label());
        let Some(count) = self.to_log(Instant::now()) else { return };
        tracing::warn!(
            refused = count,
            latest = limit.label(),
            %client,
            "HTTP connections refused: {} (this line at most every {} s; see tutti_api_connections_refused_total)",
            limit.message(),
            REFUSAL_LOG_PERIOD.as_secs()
        );
    }

    /// Notes one refusal at `now`; the refusals to log now (this one and
    /// those since the last line), or `None` within [`REFUSAL_LOG_PERIOD`] of it.
    fn to_log(&self, now: Instant) -> Option<u64> {
        let mut r = lock(&self.refusals);
        r.count += 1;
        if r.logged.is_some_and(|at| now.saturating_duration_since(at) < REFUSAL_LOG_PERIOD) {
            return None;
        }
        r.logged = Some(now);
        Some(std::mem::take(&mut r.count))
    }
}

impl Slot {
    /// The connection sent a request: it is no longer the first to go.
    fn busy(&self) {
        lock(&self.slots.table).waiting.remove(&self.number);
    }

    /// The connection answered its request and waits for the next one (a
    /// kept-alive connection, not an upgraded one): it may be taken over
    /// again, oldest connection first, as one that never sent a request.
    fn idle(&self) {
        let mut t = lock(&self.slots.table);
        if t.held.contains_key(&self.number) {
            t.waiting.insert(self.number, self.evicted.clone());
        }
    }
}

impl ConnectionSlot {
    /// Counts the connection against `share` from now on (leaving the one
    /// it counted against), if `share` has room; else the limit it is at,
    /// and nothing changes. A connection counted against an identity or a
    /// token stays there when a later request on it claims an address (one
    /// without a token, on a kept-alive connection).
    pub(crate) fn claim(&self, share: Share) -> Result<(), Limit> {
        let slots = &self.0.slots;
        let mut t = lock(&slots.table);
        // Taken over: the connection is ending.
        let Some(now) = t.held.get(&self.0.number) else { return Ok(()) };
        let keep = *now == share
            || (matches!(share, Share::Address(_)) && matches!(now, Share::Identity(_) | Share::Token(_)));
        if keep {
            return Ok(());
        }
        if let Some(limit) = slots.full(&t, &share) {
            return Err(limit);
        }
        Slots::count(&mut t, &share);
        if let Some(old) = t.held.insert(self.0.number, share) {
            Slots::forget_one(&mut t, &old);
        }
        Ok(())
    }

    /// Counts and logs a refusal (see [`Slots::refused`]).
    pub(crate) fn refused(&self, limit: Limit, client: IpAddr) {
        self.0.slots.refused(limit, client);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut t = lock(&self.slots.table);
        t.waiting.remove(&self.number);
        // Taken over: its counts went with the eviction and it is not held any more.
        Slots::release(&mut t, self.number);
    }
}

/// The 503 written on a connection refused at accept.
fn too_many(limit: Limit) -> Vec<u8> {
    let body = serde_json::json!({ "code": "too_many_connections", "message": limit.message() }).to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n\
         retry-after: 1\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Serves `app` on `listener` until `stop` turns true; then waits for the
/// open connections to finish their requests.
pub(crate) async fn serve(listener: TcpListener, app: Router, limits: HttpLimits, mut stop: watch::Receiver<bool>) {
    let slots = Slots::new(limits.max_connections, limits.max_per_address, limits.max_per_identity);
    let (closing_tx, closing) = watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (stream, client) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off, do not spin.
                    tracing::warn!(error = %e, "accepting an HTTP connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stopped(&mut stop) => break,
        };
        // Reap finished connections so the set does not grow.
        while connections.try_join_next().is_some() {}
        let proxied = any_contains(&limits.trusted_proxies, client.ip());
        let slot = match slots.admit(client.ip(), proxied) {
            Ok(slot) => slot,
            Err(limit) => {
                slots.refused(limit, client.ip());
                connections.spawn(async move {
                    let mut stream = stream;
                    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&too_many(limit))).await;
                    let _ = stream.shutdown().await;
                });
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let evicted = slot.evicted.clone();
        let slot = ConnectionSlot(Arc::new(slot));
        let answered = slot.clone();
        let service = app
            .clone()
            .map_request(move |mut request: hyper::Request<Incoming>| {
                slot.0.busy();
                request.extensions_mut().insert(ConnectInfo(client));
                request.extensions_mut().insert(slot.clone());
                request.map(axum::body::Body::new)
            })
            .map_response(move |response: axum::response::Response| {
                // An upgraded connection (a WebSocket) stays busy for as long as it is open.
                if response.status() != hyper::StatusCode::SWITCHING_PROTOCOLS {
                    answered.0.idle();
                }
                response
            });
        let mut closing = closing.clone();
        let header_timeout = limits.header_timeout;
        connections.spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(header_timeout);
            let conn =
                builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service)).with_upgrades();
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                result = conn.as_mut() => log_end(client, result),
                () = evicted.notified() => {
                    tracing::debug!(%client, "HTTP connection closed: it had no request in progress and its slot was needed");
                }
                () = stopped(&mut closing) => {
                    conn.as_mut().graceful_shutdown();
                    log_end(client, conn.await);
                }
            }
        });
    }
    drop(listener);
    let _ = closing_tx.send(true);
    while connections.join_next().await.is_some() {}
}

/// Resolves once the flag turns true (or its sender is gone).
async fn stopped(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|s| *s).await;
}

fn log_end(client: SocketAddr, result: Result<(), hyper::Error>) {
    if let Err(e) = result {
        tracing::debug!(%client, error = %e, "HTTP connection ended");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("an address")
    }

    /// (open connections, shares counted, waiting, held).
    fn counts(slots: &Slots) -> (usize, usize, usize, usize) {
        let t = lock(&slots.table);
        (t.total, t.shares.len(), t.waiting.len(), t.held.len())
    }

    #[test]
    fn a_newcomer_takes_the_slot_of_the_oldest_connection_that_sent_nothing() {
        let slots = Slots::new(2, 1, 4);
        let first = slots.admit(ip("10.0.0.1"), false).expect("room");
        first.busy();
        assert_eq!(slots.admit(ip("10.0.0.1"), false).err(), Some(Limit::Address), "held by a busy connection");
        let second = slots.admit(ip("10.0.0.2"), false).expect("another address has its own share");
        assert_eq!(counts(&slots), (2, 2, 1, 2));
        // Full: the newcomer takes the slot of the one that sent nothing (second), never the busy one.
        let third = slots.admit(ip("10.0.0.3"), false).expect("a slot taken over");
        assert_eq!(counts(&slots), (2, 2, 1, 2), "second's counts went with it");
        drop(second);
        assert_eq!(counts(&slots), (2, 2, 1, 2), "dropping an evicted slot counts nothing twice");
        // Its own address's share: a newcomer from 10.0.0.3 takes third's slot.
        let fourth = slots.admit(ip("10.0.0.3"), false).expect("the address's own waiting one goes");
        fourth.busy();
        assert_eq!(slots.admit(ip("10.0.0.4"), false).err(), Some(Limit::Server), "nothing to take over");
        drop((third, fourth, first));
        assert_eq!(counts(&slots), (0, 0, 0, 0), "everything given back");
        // IPv6 counts by /64.
        let slots = Slots::new(4, 1, 4);
        let v6 = slots.admit(ip("2001:db8::1"), false).expect("room");
        v6.busy();
        assert!(slots.admit(ip("2001:db8::2"), false).is_err(), "the same /64");
    }

    #[test]
    fn a_connection_between_requests_may_be_taken_over_again() {
        let slots = Slots::new(1, 4, 4);
        let first = slots.admit(ip("10.0.0.1"), false).expect("room");
        first.busy();
        assert_eq!(slots.admit(ip("10.0.0.2"), false).err(), Some(Limit::Server), "a request in progress: kept");
        first.idle();
        let second = slots.admit(ip("10.0.0.2"), false).expect("answered and idle: taken over");
        assert_eq!(counts(&slots), (1, 1, 1, 1), "the newcomer's alone");
        drop((first, second));
        assert_eq!(counts(&slots), (0, 0, 0, 0));
    }

    #[test]
    fn an_authenticated_connection_leaves_its_address_for_its_identity() {
        let slots = Slots::new(10, 1, 2);
        let hold = |n: usize| -> Vec<ConnectionSlot> {
            (0..n)
                .map(|_| {
                    let slot = slots.admit(ip("10.0.0.1"), false).expect("the address's share is free again");
                    slot.busy();
                    let slot = ConnectionSlot(Arc::new(slot));
                    slot.claim(Share::Identity("ana".into())).expect("ana has room");
                    slot
                })
                .collect()
        };
        let ana = hold(2);
        assert_eq!(counts(&slots), (2, 1, 0, 2), "both on ana's share, none on the address");
        // A third of ana's is refused at her share and stays on the address's.
        let third = ConnectionSlot(Arc::new(slots.admit(ip("10.0.0.1"), false).expect("room")));
        third.0.busy();
        assert_eq!(third.claim(Share::Identity("ana".into())), Err(Limit::Identity));
        assert_eq!(third.claim(Share::Token("t".into())), Ok(()), "a token without identity has its own share");
        // Once authenticated, a request without a token leaves it where it is.
        assert_eq!(third.claim(Share::Address(ip("10.0.0.1"))), Ok(()));
        assert_eq!(lock(&slots.table).held.get(&third.0.number), Some(&Share::Token("t".into())));
        drop((ana, third));
        assert_eq!(counts(&slots), (0, 0, 0, 0), "everything given back");
    }

    #[test]
    fn a_trusted_proxys_connections_claim_the_forwarded_address() {
        let slots = Slots::new(10, 1, 2);
        let proxied: Vec<ConnectionSlot> = (0..3)
            .map(|_| ConnectionSlot(Arc::new(slots.admit(ip("10.0.0.9"), true).expect("no share at accept"))))
            .collect();
        assert_eq!(counts(&slots), (3, 0, 3, 3), "counted by the cap only");
        assert_eq!(proxied[0].claim(Share::Address(ip("192.0.2.1"))), Ok(()));
        assert_eq!(proxied[1].claim(Share::Address(ip("192.0.2.1"))), Err(Limit::Address), "one per address");
        assert_eq!(proxied[1].claim(Share::Address(ip("192.0.2.2"))), Ok(()), "another client");
        drop(proxied);
        assert_eq!(counts(&slots), (0, 0, 0, 0));
    }

    #[test]
    fn refusals_are_logged_once_per_period_with_their_count() {
        let slots = Slots::new(1, 1, 1);
        let t0 = Instant::now();
        assert_eq!(slots.to_log(t0), Some(1), "the first is logged");
        let logged: Vec<u64> = (1..=1000).filter_map(|ms| slots.to_log(t0 + Duration::from_millis(ms))).collect();
        assert!(logged.is_empty(), "a flood within the period is not: {logged:?}");
        assert_eq!(slots.to_log(t0 + REFUSAL_LOG_PERIOD), Some(1001), "then one line says how many");
    }
}
