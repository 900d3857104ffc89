//! The TCP and TLS connections of the SIP edge: accepting them on the
//! listeners of `streams` (strangers closed, `[sip] max_connections`, the
//! TLS handshake's deadline), handing them to the stack, and tutti's
//! Contact for the transport a call is on.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rsipstack::platform::CancellationToken;
use rsipstack::sip::{Param, Transport, Uri};
use rsipstack::transport::tcp::TcpConnection;
use rsipstack::transport::tls::TlsConnection;
use rsipstack::transport::{SipAddr, SipConnection};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OwnedSemaphorePermit;
use tokio_rustls::TlsAcceptor;

use super::endpoint::Edge;
use super::streams::HANDSHAKE;

impl Edge {
    /// Accepts on the TCP and TLS listeners until `cancel`.
    pub(super) async fn accept_streams(self: Arc<Self>, cancel: CancellationToken) {
        let tcp = crate::sync::lock(&self.streams.tcp).take();
        let tls = crate::sync::lock(&self.streams.tls).take();
        let tcp = async {
            if let Some(listener) = tcp {
                self.clone().accept_on(listener, None, cancel.clone()).await;
            }
        };
        let tls = async {
            if let Some((listener, acceptor)) = tls {
                self.clone().accept_on(listener, Some(acceptor), cancel.clone()).await;
            }
        };
        tokio::join!(tcp, tls);
        std::future::pending::<()>().await;
    }

    async fn accept_on(self: Arc<Self>, listener: TcpListener, tls: Option<TlsAcceptor>, cancel: CancellationToken) {
        let Ok(bound) = listener.local_addr() else { return };
        let kind = if tls.is_some() { Transport::Tls } else { Transport::Tcp };
        let local = SipAddr { r#type: Some(kind), addr: bound.into() };
        loop {
            let accepted = tokio::select! {
                _ = cancel.cancelled() => return,
                a = listener.accept() => a,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of fds, most likely: give the others a moment to close.
                    tracing::warn!(error = %e, "SIP: accepting a {kind} connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            if !self.trunks.knows(peer.ip()) {
                crate::metrics::sip_refused("source");
                tracing::info!(%peer, "SIP {kind} connection refused: not from a trunk's networks");
                continue;
            }
            let Ok(slot) = self.streams.slots.clone().try_acquire_owned() else {
                crate::metrics::sip_refused("connections");
                self.log_full(peer);
                continue;
            };
            let token = cancel.child_token();
            let edge = self.clone();
            let (local, tls) = (local.clone(), tls.clone());
            tokio::spawn(async move { edge.carry(stream, tls, local, token, slot).await });
        }
    }

    /// One accepted connection: its TLS handshake, then the stack reads it
    /// until it closes (idle, the peer, the end); its slot is held meanwhile.
    async fn carry(
        &self,
        stream: TcpStream,
        tls: Option<TlsAcceptor>,
        local: SipAddr,
        token: CancellationToken,
        _slot: OwnedSemaphorePermit,
    ) {
        let peer = stream.peer_addr().ok();
        let connection = match tls {
            None => TcpConnection::from_stream(stream, local, Some(token.clone())).map(SipConnection::Tcp),
            Some(acceptor) => {
                let stream = match tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::info!(?peer, error = %e, "SIP TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::info!(?peer, "SIP TLS handshake not done within 10 s: closed");
                        return;
                    }
                };
                let Some(remote) = peer else { return };
                let remote = SipAddr { r#type: Some(Transport::Tls), addr: remote.into() };
                TlsConnection::from_server_stream(stream, local, remote, Some(token.clone()))
                    .await
                    .map(SipConnection::Tls)
            }
        };
        match connection {
            Ok(c) => self.endpoint.inner.transport_layer.add_connection(c),
            Err(e) => {
                tracing::info!(?peer, error = %e, "SIP connection not taken");
                return;
            }
        }
        tracing::debug!(?peer, "SIP stream connection open");
        // The stack cancels the connection's token when it closes it.
        token.cancelled().await;
        tracing::debug!(?peer, "SIP stream connection closed");
    }

    /// Logs a refusal for want of a slot, at most once every 10 s.
    fn log_full(&self, peer: SocketAddr) {
        let now = crate::auth::unix_now();
        let last = self.streams.logged.load(Ordering::Relaxed);
        if now >= last + 10
            && self.streams.logged.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            let max = self.session.cfg.sip.max_connections;
            tracing::warn!(%peer, max, "SIP: [sip] max_connections TCP/TLS connections are open; new ones are closed");
        }
    }

    /// tutti's Contact for a call on `transport`: the UDP one, or with the
    /// TCP port and `;transport=tcp`, or the TLS port and `;transport=tls`.
    pub(super) fn contact_for(&self, transport: Transport) -> Uri {
        let mut uri = self.contact.clone();
        match (transport, self.streams.tls_addr) {
            (Transport::Tcp, _) => uri.params.push(Param::Transport(Transport::Tcp)),
            (Transport::Tls, Some(tls)) => {
                uri.host_with_port.port = Some(tls.port().into());
                uri.params.push(Param::Transport(Transport::Tls));
            }
            (Transport::Tls, None) => uri.params.push(Param::Transport(Transport::Tls)),
            _ => {}
        }
        uri
    }

    /// tutti's Contact for a request that came on `connection`.
    pub(super) fn contact_on(&self, connection: Option<&SipConnection>) -> Uri {
        self.contact_for(connection.map(|c| c.get_addr().r#type.unwrap_or(Transport::Udp)).unwrap_or(Transport::Udp))
    }
}
