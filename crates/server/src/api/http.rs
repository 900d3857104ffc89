//! The HTTP server under the API: an accept loop over hyper's HTTP/1
//! connections, with the limits `axum::serve` does not offer.
//!
//! - At most `limits.max_connections` connections (WebSockets included: a
//!   socket keeps its connection's [`ConnectionSlot`]); beyond, a short
//!   503 `too_many_connections` and the connection is closed.
//! - A client gets `limits.http_header_timeout_seconds` to send a request's
//!   headers (slow-header clients are cut off), and the API answers 408
//!   for a request slower than `limits.http_request_timeout_seconds`.
//! - Each request carries the client's address (`ConnectInfo`), for the
//!   join rate limit.
//! - On shutdown: no new connections; open ones finish their request and close.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tower::ServiceExt as _;

/// One of the `limits.max_connections` slots, held by a connection and, once
/// upgraded, by its WebSocket.
#[derive(Clone)]
pub(crate) struct ConnectionSlot(#[allow(dead_code)] Arc<OwnedSemaphorePermit>);

/// What the accept loop needs.
pub(crate) struct HttpLimits {
    pub(crate) max_connections: usize,
    pub(crate) header_timeout: Duration,
}

const TOO_MANY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n\
retry-after: 1\r\ncontent-length: 81\r\n\r\n{\"code\":\"too_many_connections\",\"message\":\"the server has no connection to spare\"}";

/// Serves `app` on `listener` until `stop` turns true; then waits for the
/// open connections to finish their requests.
pub(crate) async fn serve(listener: TcpListener, app: Router, limits: HttpLimits, mut stop: watch::Receiver<bool>) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
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
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            connections.spawn(async move {
                let mut stream = stream;
                let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(TOO_MANY)).await;
                let _ = stream.shutdown().await;
            });
            continue;
        };
        let _ = stream.set_nodelay(true);
        let slot = ConnectionSlot(Arc::new(permit));
        let service = app.clone().map_request(move |mut request: hyper::Request<Incoming>| {
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
