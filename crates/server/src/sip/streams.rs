//! SIP over TCP and TLS: the listeners beside the UDP socket, and the
//! bounds on what a peer can hold open.
//!
//! ```text
//! accept ─► source in a trunk's networks? else closed (reason "source")
//!        ─► a slot of `[sip] max_connections`? else closed (reason "connections", logged)
//!        ─► TLS: the handshake within 10 s, else closed
//!        ─► the stack's connection (rsipstack): read, parsed, the requests into
//!           the same loop as UDP's; closed after `connection_idle_seconds` idle
//!        ─► closed: its slot is free again
//! ```
//!
//! tutti runs its own accept loops rather than the stack's listeners: they
//! bound the handshakes and the connections, and refuse strangers before a
//! byte is read. Responses go back on the connection a request came on;
//! tutti's Contact names the transport of the call (`contact_for`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rsipstack::platform::CancellationToken;
use rsipstack::sip::{Param, Transport, Uri};
use rsipstack::transport::tcp::TcpConnection;
use rsipstack::transport::tls::TlsConnection;
use rsipstack::transport::{SipAddr, SipConnection};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;

use super::endpoint::Edge;
use crate::config::SipConfig;

/// How long a TLS peer has to finish its handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// The TCP and TLS listeners, bound at start and served by `Edge::serve`.
pub(super) struct Streams {
    tcp: std::sync::Mutex<Option<TcpListener>>,
    tls: std::sync::Mutex<Option<(TcpListener, TlsAcceptor)>>,
    /// The bound TCP address (the UDP one's port).
    pub(super) tcp_addr: Option<SocketAddr>,
    /// The bound TLS address.
    pub(super) tls_addr: Option<SocketAddr>,
    slots: Arc<Semaphore>,
    /// When a refusal for want of a slot was last logged (unix seconds).
    logged: AtomicU64,
}

impl Streams {
    /// Binds TCP on `udp`'s address (when `[sip] tcp`) and `[sip] tls_listen`
    /// with its certificate: an error names the setting or the file.
    pub(super) async fn bind(cfg: &SipConfig, udp: SocketAddr) -> Result<Self, String> {
        let tcp = match cfg.tcp {
            true => Some(TcpListener::bind(udp).await.map_err(|e| format!("sip.tcp (TCP on {udp}): {e}"))?),
            false => None,
        };
        let tls = match cfg.tls_addr() {
            Some(addr) => {
                let acceptor = acceptor(&cfg.tls_cert, &cfg.tls_key)?;
                let listener = TcpListener::bind(addr).await.map_err(|e| format!("sip.tls_listen {addr}: {e}"))?;
                Some((listener, acceptor))
            }
            None => None,
        };
        let local = |l: &TcpListener| l.local_addr().ok();
        Ok(Self {
            tcp_addr: tcp.as_ref().and_then(local),
            tls_addr: tls.as_ref().and_then(|(l, _)| local(l)),
            tcp: std::sync::Mutex::new(tcp),
            tls: std::sync::Mutex::new(tls),
            slots: Arc::new(Semaphore::new(cfg.max_connections)),
            logged: AtomicU64::new(0),
        })
    }
}

/// The TLS acceptor of a PEM certificate chain and key.
fn acceptor(cert: &str, key: &str) -> Result<TlsAcceptor, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|i| i.collect::<Result<_, _>>())
        .map_err(|e| format!("sip.tls_cert '{cert}': not a readable PEM certificate ({e})"))?;
    if certs.is_empty() {
        return Err(format!("sip.tls_cert '{cert}': no certificate in it"));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("sip.tls_key '{key}': not a readable PEM private key ({e})"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("sip.tls_cert: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("sip.tls_cert '{cert}' with sip.tls_key: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

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

/// An outbound trunk's `transport` (validated at load: `udp`, `tcp`, `tls`).
pub(super) fn transport(name: &str) -> Transport {
    match name.to_ascii_lowercase().as_str() {
        "tcp" => Transport::Tcp,
        "tls" => Transport::Tls,
        _ => Transport::Udp,
    }
}

/// Where a dial-out's INVITE goes: `address` over the trunk's transport.
pub(super) fn destination(address: SocketAddr, transport_name: &str) -> SipAddr {
    SipAddr { r#type: Some(transport(transport_name)), addr: address.into() }
}

/// The roots a dial-out over TLS checks its trunk's certificate against
/// (the system's), when an outbound trunk uses TLS; the stack trusts none
/// by itself.
pub(super) fn client_tls(cfg: &SipConfig) -> Option<rsipstack::transport::tls::TlsConfig> {
    use base64::Engine as _;
    if !cfg.outbound.iter().any(|t| transport(&t.transport) == Transport::Tls) {
        return None;
    }
    let system = rustls_native_certs::load_native_certs();
    if system.certs.is_empty() {
        tracing::warn!("SIP: no system root certificates: dial-out over TLS will fail");
    }
    let mut pem = String::new();
    for cert in &system.certs {
        let b64 = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in b64.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    Some(rsipstack::transport::tls::TlsConfig { ca_certs: Some(pem.into_bytes()), ..Default::default() })
}
