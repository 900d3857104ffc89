//! The HTTP server under the API: an accept loop over hyper's HTTP/1
//! connections, with the limits `axum::serve` does not offer.
//!
//! - At most `limits.max_connections` connections (WebSockets included: a
//!   socket keeps its connection's [`ConnectionSlot`]), and at most
//!   `limits.max_connections_per_address` from one IPv4 address or IPv6 /64.
//!   A new connection past either limit takes the slot of the oldest
//!   connection (of its own address, for the address's share) that has not
//!   sent a request yet: that one is closed. With none to take, a short 503
//!   `too_many_connections` and the connection is closed. So connections
//!   that send nothing cannot keep `/healthz` (or anyone) out, and one
//!   address cannot hold every slot.
//! - A client gets `limits.http_header_timeout_seconds` to send a request's
//!   headers, the first one counted from the accept (slow-header and silent
//!   clients are cut off), and the API answers 408
//!   for a request slower than `limits.http_request_timeout_seconds`.
//! - Each request carries the client's address (`ConnectInfo`), for the
//!   join rate limit.
//! - On shutdown: no new connections; open ones finish their request and close.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tower::ServiceExt as _;

use crate::sync::lock;

/// One of the `limits.max_connections` slots, held by a connection and, once
/// upgraded, by its WebSocket.
#[derive(Clone)]
pub(crate) struct ConnectionSlot(#[allow(dead_code)] Arc<Slot>);

/// What the accept loop needs.
pub(crate) struct HttpLimits {
    pub(crate) max_connections: usize,
    pub(crate) max_per_address: usize,
    pub(crate) header_timeout: Duration,
}

/// The open connections: how many, from which address, and which of them
/// have not sent a request yet (oldest first: the ones a newcomer may take).
#[derive(Default)]
struct Table {
    total: usize,
    per_address: HashMap<IpAddr, usize>,
    /// Connection number → (address key, its eviction signal), for those without a request yet.
    waiting: BTreeMap<u64, (IpAddr, Arc<Notify>)>,
    next: u64,
    /// Connections taken over whose [`Slot`] is not dropped yet (their counts are gone already).
    evicted: Vec<u64>,
}

/// The connection slots (see the module docs).
pub(crate) struct Slots {
    max: usize,
    max_per_address: usize,
    table: Mutex<Table>,
}

/// A connection's place in [`Slots`]; given back when the last holder drops it.
pub(crate) struct Slot {
    slots: Arc<Slots>,
    number: u64,
    address: IpAddr,
    /// Told when the slot is taken over: the connection then ends.
    evicted: Arc<Notify>,
}

impl Slots {
    fn new(max: usize, max_per_address: usize) -> Arc<Self> {
        Arc::new(Self { max, max_per_address: max_per_address.max(1), table: Mutex::new(Table::default()) })
    }

    /// A slot for a connection from `ip`, taking over the oldest connection
    /// that has sent no request yet if a limit is reached; `None` when none can be taken.
    fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<Slot> {
        let address = crate::limit::key(ip);
        let mut t = lock(&self.table);
        let mine = t.per_address.get(&address).copied().unwrap_or(0);
        if mine >= self.max_per_address {
            // The address's share is full: one of its own waiting connections goes.
            let victim = t.waiting.iter().find(|(_, (a, _))| *a == address).map(|(n, _)| *n)?;
            Self::evict(&mut t, victim);
        }
        if t.total >= self.max {
            let victim = t.waiting.keys().next().copied()?;
            Self::evict(&mut t, victim);
        }
        t.total += 1;
        *t.per_address.entry(address).or_insert(0) += 1;
        let number = t.next;
        t.next += 1;
        let evicted = Arc::new(Notify::new());
        t.waiting.insert(number, (address, evicted.clone()));
        Some(Slot { slots: self.clone(), number, address, evicted })
    }

    /// Takes connection `number`'s slot back now (its task is told to end).
    fn evict(t: &mut Table, number: u64) {
        if let Some((address, notify)) = t.waiting.remove(&number) {
            t.total = t.total.saturating_sub(1);
            Self::forget_one(t, address);
            notify.notify_one();
            t.evicted.push(number);
        }
    }

    fn forget_one(t: &mut Table, address: IpAddr) {
        if let Some(n) = t.per_address.get_mut(&address) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                t.per_address.remove(&address);
            }
        }
    }
}

impl Slot {
    /// The connection sent a request: it is no longer the first to go.
    fn busy(&self) {
        lock(&self.slots.table).waiting.remove(&self.number);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut t = lock(&self.slots.table);
        // Taken over: its counts went with the eviction.
        if let Some(i) = t.evicted.iter().position(|n| *n == self.number) {
            t.evicted.swap_remove(i);
            return;
        }
        t.waiting.remove(&self.number);
        t.total = t.total.saturating_sub(1);
        Slots::forget_one(&mut t, self.address);
    }
}

const TOO_MANY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n\
retry-after: 1\r\ncontent-length: 81\r\n\r\n{\"code\":\"too_many_connections\",\"message\":\"the server has no connection to spare\"}";

/// Serves `app` on `listener` until `stop` turns true; then waits for the
/// open connections to finish their requests.
pub(crate) async fn serve(listener: TcpListener, app: Router, limits: HttpLimits, mut stop: watch::Receiver<bool>) {
    let slots = Slots::new(limits.max_connections, limits.max_per_address);
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
        let Some(slot) = slots.admit(client.ip()) else {
            connections.spawn(async move {
                let mut stream = stream;
                let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(TOO_MANY)).await;
                let _ = stream.shutdown().await;
            });
            continue;
        };
        let _ = stream.set_nodelay(true);
        let evicted = slot.evicted.clone();
        let slot = ConnectionSlot(Arc::new(slot));
        let service = app.clone().map_request(move |mut request: hyper::Request<Incoming>| {
            slot.0.busy();
            request.extensions_mut().insert(ConnectInfo(client));
            request.extensions_mut().insert(slot.clone());
            request.map(axum::body::Body::new)
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
                    tracing::debug!(%client, "HTTP connection closed: it sent no request and its slot was needed");
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

    fn counts(slots: &Slots) -> (usize, usize, usize, usize) {
        let t = lock(&slots.table);
        (t.total, t.per_address.len(), t.waiting.len(), t.evicted.len())
    }

    #[test]
    fn a_newcomer_takes_the_slot_of_the_oldest_connection_that_sent_nothing() {
        let slots = Slots::new(2, 1);
        let first = slots.admit(ip("10.0.0.1")).expect("room");
        first.busy();
        assert!(slots.admit(ip("10.0.0.1")).is_none(), "the address's share is held by a busy connection");
        let second = slots.admit(ip("10.0.0.2")).expect("another address has its own share");
        assert_eq!(counts(&slots), (2, 2, 1, 0));
        // Full: the newcomer takes the slot of the one that sent nothing (second), never the busy one.
        let third = slots.admit(ip("10.0.0.3")).expect("a slot taken over");
        assert_eq!(counts(&slots), (2, 2, 1, 1), "second's counts went with it");
        drop(second);
        assert_eq!(counts(&slots), (2, 2, 1, 0), "dropping an evicted slot counts nothing twice");
        // Its own address's share: a newcomer from 10.0.0.3 takes third's slot.
        let fourth = slots.admit(ip("10.0.0.3")).expect("the address's own waiting one goes");
        drop((third, fourth, first));
        assert_eq!(counts(&slots), (0, 0, 0, 0), "everything given back");
        // IPv6 counts by /64.
        let slots = Slots::new(4, 1);
        let v6 = slots.admit(ip("2001:db8::1")).expect("room");
        v6.busy();
        assert!(slots.admit(ip("2001:db8::2")).is_none(), "the same /64");
    }
}
