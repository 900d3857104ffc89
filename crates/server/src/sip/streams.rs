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
//! tutti runs its own accept loops (`connections`) rather than the stack's
//! listeners: they bound the handshakes and the connections, and refuse
//! strangers before a byte is read. Responses go back on the connection a
//! request came on; tutti's Contact names the transport of the call
//! (`Edge::contact_for`). This file binds the listeners and holds what the
//! loops share; it knows nothing of the edge.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use rsipstack::sip::Transport;
use rsipstack::transport::SipAddr;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use crate::config::SipConfig;

/// How long a TLS peer has to finish its handshake.
pub(super) const HANDSHAKE: Duration = Duration::from_secs(10);

/// The TCP and TLS listeners, bound at start and served by `Edge::serve`.
pub(super) struct Streams {
    pub(super) tcp: std::sync::Mutex<Option<TcpListener>>,
    pub(super) tls: std::sync::Mutex<Option<(TcpListener, TlsAcceptor)>>,
    /// The bound TCP address (the UDP one's port).
    pub(super) tcp_addr: Option<SocketAddr>,
    /// The bound TLS address.
    pub(super) tls_addr: Option<SocketAddr>,
    pub(super) slots: Arc<Semaphore>,
    /// When a refusal for want of a slot was last logged (unix seconds).
    pub(super) logged: AtomicU64,
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
