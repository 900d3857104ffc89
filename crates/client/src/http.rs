//! HTTP for tutti's tools and tests: `http://` and `https://`, blocking, on
//! [`ureq`] with rustls (the `ring` provider, as the rest of the workspace;
//! no aws-lc, no OpenSSL).
//!
//! Why ureq and not `reqwest::blocking`: these requests come from plain
//! threads (the load tester's joiners, the admin CLI) and from inside tokio
//! tests alike. `reqwest::blocking` runs a tokio runtime of its own and
//! panics when its client is built or dropped inside an async context;
//! ureq has no runtime at all (a socket and the calling thread), so it is
//! safe in both. Its connector chain also lets a request come from a given
//! local address (a test's `127.0.0.2`, another client to the join rate
//! limit), which [`Requester::from`] needs.
//!
//! ```text
//! Origin   http(s)://host:port, parsed from a URL, resolved once to an address
//! Client   the trusted roots (the system's + --ca-file, as webhooks.ca_file),
//!          one ureq agent per local address, and which addresses speak TLS
//!          under which name (the tools address nodes by SocketAddr)
//!   send / request_as / request_following ─► one request on its own connection
//!   connect ─► a TCP or TLS stream for a WebSocket (ws:// or wss://)
//! request / request_as / request_following (free): a plain-http Client, for tests
//! ```
//!
//! Each request has its own connection (no pool: a test counting a server's
//! connections sees each one end), a 10 s bound ([`Client::with_timeout`]), and no redirect followed
//! but the `307`s of [`Client::request_following`]. A certificate that the
//! roots do not vouch for is [`HttpError::Certificate`], "certificate not
//! trusted: …".

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use ureq::unversioned::resolver::DefaultResolver;
use ureq::unversioned::transport::{Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout};
use ureq::unversioned::transport::{RustlsConnector, Transport};

/// Connect, TLS handshake, request and response: each request's bound.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest response body read (the API's are small; a report is not).
const MAX_BODY_BYTES: u64 = 64 << 20;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// A URL this client does not take: another scheme, no host, a bad port,
    /// a host name that does not resolve.
    #[error("{0}")]
    Url(String),
    /// The CA file (`--ca-file`) cannot be read or holds no certificate.
    #[error("{0}")]
    CaFile(String),
    /// The server's certificate is not vouched for by the trusted roots
    /// (the system's and the CA file's), or does not name the host.
    #[error("certificate not trusted: {origin}: {reason}")]
    Certificate {
        /// `https://host:port`.
        origin: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The connection or the exchange failed: refused, timed out, a TLS
    /// failure other than the certificate, an answer that is not HTTP.
    #[error("{origin}: {reason}")]
    Transport {
        /// `http(s)://host:port`.
        origin: String,
        /// The kind of the I/O error underneath, if any.
        kind: std::io::ErrorKind,
        /// What happened.
        reason: String,
    },
}

impl From<HttpError> for std::io::Error {
    fn from(e: HttpError) -> Self {
        let kind = match &e {
            HttpError::Url(_) | HttpError::CaFile(_) => std::io::ErrorKind::InvalidInput,
            HttpError::Certificate { .. } => std::io::ErrorKind::InvalidData,
            HttpError::Transport { kind, .. } => *kind,
        };
        std::io::Error::new(kind, e)
    }
}

/// An HTTP response.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Headers (a repeated one once per value).
    pub headers: Vec<(String, String)>,
    /// Body, as text.
    pub body: String,
}

impl Response {
    /// A header's value (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The `code` of a JSON error body (empty when there is none).
    pub fn code(&self) -> String {
        serde_json::from_str::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|v| v["code"].as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

/// Who sends a request: its access token, and the local address it comes from.
#[derive(Debug, Clone, Copy, Default)]
pub struct Requester<'a> {
    /// Sent as `Authorization: Bearer <token>`.
    pub token: Option<&'a str>,
    /// The local address to connect from (e.g. another loopback address,
    /// `127.0.0.2`, to be another client for the join rate limit).
    pub from: Option<IpAddr>,
}

impl<'a> Requester<'a> {
    /// A requester with a token.
    pub fn token(token: &'a str) -> Self {
        Self { token: Some(token), from: None }
    }
}

/// Where requests go: `http://` or `https://`, the host (the name the
/// certificate must carry, and the `Host` header), the port, and the address
/// the host resolved to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    tls: bool,
    host: String,
    port: u16,
    addr: SocketAddr,
}

impl Origin {
    /// Plain http to `addr`.
    pub fn http(addr: SocketAddr) -> Self {
        Self { tls: false, host: addr.ip().to_string(), port: addr.port(), addr }
    }

    /// `http(s)://host[:port][/path]` as the origin (the host resolved; port
    /// 80 or 443 when none is given) and the path (`/` when none).
    pub fn parse(url: &str) -> Result<(Self, String), HttpError> {
        let bad = |why: &str| HttpError::Url(format!("'{url}': {why}"));
        let (tls, rest) = if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some((scheme, _)) = url.split_once("://") {
            return Err(bad(&format!("unknown scheme '{scheme}://': give http:// or https://")));
        } else {
            return Err(bad("give the URL as http://HOST:PORT or https://HOST:PORT"));
        };
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        let path = match path {
            "" => "/".to_owned(),
            p if p.starts_with('?') => format!("/{p}"),
            p => p.to_owned(),
        };
        if authority.contains('@') {
            return Err(bad("no user or password in the URL"));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6.split_once(']').ok_or_else(|| bad("an unclosed '[' in the host"))?;
            (host, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let port = match port {
            None => {
                if tls {
                    443
                } else {
                    80
                }
            }
            Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| bad(&format!("bad port '{p}'")))?,
        };
        let addr = (host, port)
            .to_socket_addrs()
            .map_err(|e| bad(&format!("cannot resolve {host}: {e}")))?
            .next()
            .ok_or_else(|| bad(&format!("{host} resolves to no address")))?;
        Ok((Self { tls, host: host.to_owned(), port, addr }, path))
    }

    /// Whether it is `https://`.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// The host, as the URL gave it (a name or an IP address).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The address the host resolved to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// `http(s)://host:port` followed by `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{self}{path}")
    }

    /// The WebSocket URL of `path` here: `ws://` or `wss://`.
    pub fn ws_url(&self, path: &str) -> String {
        format!("{}://{}{path}", if self.tls { "wss" } else { "ws" }, self.authority())
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", if self.tls { "https" } else { "http" }, self.authority())
    }
}

/// The certificates an `https://` server may chain to: the system's
/// (`/etc/ssl/certs`, Debian's `ca-certificates`) and those of `ca_file`
/// (PEM), as the webhook sender trusts them.
pub fn trusted_roots(ca_file: Option<&Path>) -> Result<Vec<CertificateDer<'static>>, HttpError> {
    let mut roots = rustls_native_certs::load_native_certs().certs;
    if let Some(file) = ca_file {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(file)
            .and_then(|certs| certs.collect())
            .map_err(|e| HttpError::CaFile(format!("--ca-file {}: {e}", file.display())))?;
        if certs.is_empty() {
            return Err(HttpError::CaFile(format!("--ca-file {}: no certificate in it", file.display())));
        }
        roots.extend(certs);
    }
    Ok(roots)
}

/// Sends requests to `http://` and `https://` origins (see the module's
/// doc). Cheap to clone: clones share their agents and origins.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    /// Each request's bound (connect, TLS, request and response).
    timeout: Duration,
    /// The trusted roots, as ureq takes them.
    roots: Arc<Vec<ureq::tls::Certificate<'static>>>,
    /// The same roots for [`Client::connect`]'s TLS streams.
    tls: Arc<rustls::ClientConfig>,
    /// One agent per local address asked for (`None`: the system's choice).
    agents: Mutex<HashMap<Option<IpAddr>, ureq::Agent>>,
    /// Addresses that are not plain `http://ip:port`: their origin.
    origins: Mutex<HashMap<SocketAddr, Origin>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let origins = self.inner.origins.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Client").field("roots", &self.inner.roots.len()).field("origins", &origins.len()).finish()
    }
}

impl Default for Client {
    /// [`Client::plain`].
    fn default() -> Self {
        Self::plain()
    }
}

impl Client {
    /// A client that trusts no certificate: plain http (an `https://`
    /// server is refused as not trusted). What tests use.
    pub fn plain() -> Self {
        Self::with_roots(Vec::new())
    }

    /// A client that trusts the system's roots and `ca_file`'s.
    pub fn new(ca_file: Option<&Path>) -> Result<Self, HttpError> {
        Ok(Self::with_roots(trusted_roots(ca_file)?))
    }

    /// A client that trusts exactly `roots`.
    pub fn with_roots(roots: Vec<CertificateDer<'static>>) -> Self {
        let mut store = rustls::RootCertStore::empty();
        store.add_parsable_certificates(roots.iter().cloned());
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            // The ring provider supports the default versions: this cannot fail.
            .unwrap_or_else(|_| rustls::ClientConfig::builder())
            .with_root_certificates(store)
            .with_no_client_auth();
        let roots = roots.iter().map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned()).collect();
        Self {
            inner: Arc::new(Inner {
                timeout: TIMEOUT,
                roots: Arc::new(roots),
                tls: Arc::new(tls),
                agents: Mutex::default(),
                origins: Mutex::default(),
            }),
        }
    }

    /// The same client with another bound on each request (10 s by default).
    pub fn with_timeout(&self, timeout: Duration) -> Self {
        let origins = self.inner.origins.lock().unwrap_or_else(PoisonError::into_inner).clone();
        Self {
            inner: Arc::new(Inner {
                timeout,
                roots: self.inner.roots.clone(),
                tls: self.inner.tls.clone(),
                agents: Mutex::default(),
                origins: Mutex::new(origins),
            }),
        }
    }

    /// Remembers that `origin.addr()` is reached as `origin` (https, its
    /// name), for the calls that take an address.
    pub fn add_origin(&self, origin: &Origin) {
        if *origin != Origin::http(origin.addr) {
            self.inner.origins.lock().unwrap_or_else(PoisonError::into_inner).insert(origin.addr, origin.clone());
        }
    }

    /// How `addr` is reached: the origin added for it, or plain `http://addr`.
    pub fn origin_of(&self, addr: SocketAddr) -> Origin {
        let origins = self.inner.origins.lock().unwrap_or_else(PoisonError::into_inner);
        origins.get(&addr).cloned().unwrap_or_else(|| Origin::http(addr))
    }

    /// An `http://` or `https://` URL (a redirect's `Location`, a node's
    /// `api_url`) as its address and path; the origin is remembered
    /// ([`Client::add_origin`]). `None` for anything else.
    pub fn locate(&self, url: &str) -> Option<(SocketAddr, String)> {
        let (origin, path) = Origin::parse(url).ok()?;
        self.add_origin(&origin);
        Some((origin.addr, path))
    }

    /// The WebSocket URL of `path` at `addr` (`ws://` or `wss://`).
    pub fn ws_url(&self, addr: SocketAddr, path: &str) -> String {
        self.origin_of(addr).ws_url(path)
    }

    fn agent(&self, from: Option<IpAddr>) -> ureq::Agent {
        let mut agents = self.inner.agents.lock().unwrap_or_else(PoisonError::into_inner);
        agents
            .entry(from)
            .or_insert_with(|| {
                let tls = ureq::tls::TlsConfig::builder()
                    .root_certs(ureq::tls::RootCerts::Specific(self.inner.roots.clone()))
                    .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
                    .build();
                let config = ureq::config::Config::builder()
                    .http_status_as_error(false)
                    // Straight to the server, as the WebSockets go: no HTTP_PROXY / ALL_PROXY
                    // from the environment (loopback tests must not leave the box either).
                    .proxy(None)
                    .max_redirects(0)
                    .max_redirects_will_error(false)
                    .timeout_global(Some(self.inner.timeout))
                    .max_idle_connections(0)
                    .max_idle_connections_per_host(0)
                    .allow_non_standard_methods(true)
                    .user_agent(concat!("tutti/", env!("CARGO_PKG_VERSION")))
                    .tls_config(tls)
                    .build();
                let connector =
                    ().chain(BoundTcp { from, timeout: self.inner.timeout }).chain(RustlsConnector::default());
                ureq::Agent::with_parts(config, connector, DefaultResolver::default())
            })
            .clone()
    }

    /// Sends one request to `origin` and reads the whole response.
    pub fn send(
        &self,
        origin: &Origin,
        requester: &Requester<'_>,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> Result<Response, HttpError> {
        let mut request = ureq::http::Request::builder().method(method).uri(origin.url(path));
        if let Some(ct) = content_type {
            request = request.header("content-type", ct);
        }
        if let Some(token) = requester.token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let request = request.body(body).map_err(|e| HttpError::Url(format!("{method} {}: {e}", origin.url(path))))?;
        let mut response = self.agent(requester.from).run(request).map_err(|e| failure(origin, e))?;
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        let body =
            response.body_mut().with_config().limit(MAX_BODY_BYTES).read_to_vec().map_err(|e| failure(origin, e))?;
        Ok(Response { status: response.status().as_u16(), headers, body: String::from_utf8_lossy(&body).into_owned() })
    }

    /// [`Client::send`] to the origin of `addr` ([`Client::origin_of`]).
    pub fn request_as(
        &self,
        addr: SocketAddr,
        requester: &Requester<'_>,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> std::io::Result<Response> {
        Ok(self.send(&self.origin_of(addr), requester, method, path, content_type, body)?)
    }

    /// [`Client::request_as`], following up to `max_redirects` `307`s (a
    /// cluster node redirecting to the node holding the room): the request
    /// goes again, body and all, to the `Location` (`http://` or
    /// `https://`), without the token (the redirect's ticket stands in for
    /// it). Returns the last answer, the address that gave it and the
    /// redirects followed. A `307` whose `Location` is not such a URL, or one
    /// past `max_redirects`, is returned as it is.
    #[allow(clippy::too_many_arguments)]
    pub fn request_following(
        &self,
        addr: SocketAddr,
        requester: &Requester<'_>,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &[u8],
        max_redirects: usize,
    ) -> std::io::Result<(Response, SocketAddr, usize)> {
        let (mut addr, mut path) = (addr, path.to_owned());
        let mut who = *requester;
        let mut redirects = 0;
        loop {
            let r = self.request_as(addr, &who, method, &path, content_type, body)?;
            let next = (r.status == 307 && redirects < max_redirects)
                .then(|| r.header("location").and_then(|l| self.locate(l)))
                .flatten();
            match next {
                Some((a, p)) => {
                    (addr, path) = (a, p);
                    who.token = None;
                    redirects += 1;
                }
                None => return Ok((r, addr, redirects)),
            }
        }
    }

    /// A connection to `addr` for a WebSocket: TCP, and TLS over it when
    /// `addr`'s origin is `https://` (the handshake done here, so that an
    /// untrusted certificate is [`HttpError::Certificate`]). Reads and
    /// writes block up to `timeout`.
    pub fn connect(&self, addr: SocketAddr, timeout: Duration) -> Result<Stream, HttpError> {
        let origin = self.origin_of(addr);
        let fail = |e: std::io::Error| io_failure(&origin, e);
        let tcp = TcpStream::connect_timeout(&addr, timeout).map_err(fail)?;
        tcp.set_read_timeout(Some(timeout)).map_err(fail)?;
        tcp.set_write_timeout(Some(timeout)).map_err(fail)?;
        let _ = tcp.set_nodelay(true);
        if !origin.tls {
            return Ok(Stream::Plain(tcp));
        }
        let name = ServerName::try_from(origin.host.clone())
            .map_err(|e| HttpError::Url(format!("{origin}: not a name for TLS: {e}")))?;
        let conn = rustls::ClientConnection::new(self.inner.tls.clone(), name).map_err(|e| HttpError::Transport {
            origin: origin.to_string(),
            kind: std::io::ErrorKind::Other,
            reason: e.to_string(),
        })?;
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        while tls.conn.is_handshaking() {
            tls.conn.complete_io(&mut tls.sock).map_err(fail)?;
        }
        Ok(Stream::Tls(Box::new(tls)))
    }
}

/// A WebSocket's connection: plain TCP or TLS over it.
#[derive(Debug)]
pub enum Stream {
    /// `ws://`.
    Plain(TcpStream),
    /// `wss://`.
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Stream {
    /// The TCP connection underneath (timeouts, non-blocking mode, its fd).
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Self::Plain(s) => s,
            Self::Tls(s) => &s.sock,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Self::Plain(s) => s.read(buf),
            Self::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::Plain(s) => s.write(buf),
            Self::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Plain(s) => s.flush(),
            Self::Tls(s) => s.flush(),
        }
    }
}

/// The TCP step of the agents' connector chain: connects to the resolved
/// address, from a given local address when one is asked for (ureq's own
/// TCP connector has no such setting).
#[derive(Debug)]
struct BoundTcp {
    from: Option<IpAddr>,
    timeout: Duration,
}

impl<In: Transport> Connector<In> for BoundTcp {
    type Out = Either<In, TcpTransport>;

    fn connect(&self, details: &ConnectionDetails, chained: Option<In>) -> Result<Option<Self::Out>, ureq::Error> {
        if let Some(transport) = chained {
            return Ok(Some(Either::A(transport)));
        }
        let mut last = None;
        for addr in details.addrs.iter() {
            match connect_from(*addr, self.from, self.timeout) {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    let cfg = details.config;
                    let buffers = LazyBuffers::new(cfg.input_buffer_size(), cfg.output_buffer_size());
                    return Ok(Some(Either::B(TcpTransport { stream, buffers })));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.map_or(ureq::Error::HostNotFound, ureq::Error::Io))
    }
}

/// A connection [`BoundTcp`] made, as ureq's connector chain takes it
/// (ureq's own TCP transport is not public).
#[derive(Debug)]
struct TcpTransport {
    stream: TcpStream,
    buffers: LazyBuffers,
}

/// A read or write that hit its timeout, as ureq reports it.
fn io_error(e: std::io::Error, timeout: &NextTimeout) -> ureq::Error {
    match e.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => ureq::Error::Timeout(timeout.reason),
        _ => ureq::Error::Io(e),
    }
}

impl Transport for TcpTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        let timeout = timeout.for_write();
        let Some(left) = timeout.not_zero() else { return Err(ureq::Error::Timeout(timeout.reason)) };
        self.stream.set_write_timeout(Some(*left))?;
        let output = &self.buffers.output()[..amount];
        self.stream.write_all(output).map_err(|e| io_error(e, &timeout))
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        let timeout = timeout.for_read();
        let Some(left) = timeout.not_zero() else { return Err(ureq::Error::Timeout(timeout.reason)) };
        self.stream.set_read_timeout(Some(*left))?;
        let input = self.buffers.input_append_buf();
        // Bounded: a signal interrupts a read only so often within the timeout.
        let amount = loop {
            match self.stream.read(input) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(e, &timeout)),
            }
        };
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        // Open: nothing to read yet, and no end of stream.
        let mut byte = [0u8; 1];
        if self.stream.set_nonblocking(true).is_err() {
            return false;
        }
        let open = matches!(self.stream.peek(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
        open && self.stream.set_nonblocking(false).is_ok()
    }
}

fn connect_from(addr: SocketAddr, from: Option<IpAddr>, timeout: Duration) -> std::io::Result<TcpStream> {
    let Some(ip) = from else { return TcpStream::connect_timeout(&addr, timeout) };
    let socket = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    socket.bind(&SocketAddr::new(ip, 0).into())?;
    socket.connect_timeout(&addr.into(), timeout)?;
    Ok(socket.into())
}

/// A certificate problem in words, if `e` is one.
fn untrusted(e: &rustls::Error) -> Option<String> {
    use rustls::CertificateError as C;
    let rustls::Error::InvalidCertificate(c) = e else { return None };
    Some(match c {
        C::UnknownIssuer => "its issuer is not among the trusted roots (the system's, and --ca-file's)".to_owned(),
        C::NotValidForName | C::NotValidForNameContext { .. } => "it does not name this host".to_owned(),
        C::Expired | C::ExpiredContext { .. } => "it has expired".to_owned(),
        C::NotValidYet | C::NotValidYetContext { .. } => "it is not valid yet".to_owned(),
        other => format!("{other:?}"),
    })
}

fn io_failure(origin: &Origin, e: std::io::Error) -> HttpError {
    if let Some(reason) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()).and_then(untrusted) {
        return HttpError::Certificate { origin: origin.to_string(), reason };
    }
    HttpError::Transport { origin: origin.to_string(), kind: e.kind(), reason: e.to_string() }
}

fn failure(origin: &Origin, e: ureq::Error) -> HttpError {
    use std::io::ErrorKind as K;
    let kind = match e {
        ureq::Error::Io(e) => return io_failure(origin, e),
        ureq::Error::Rustls(ref r) => match untrusted(r) {
            Some(reason) => return HttpError::Certificate { origin: origin.to_string(), reason },
            None => K::InvalidData,
        },
        ureq::Error::Timeout(_) => K::TimedOut,
        ureq::Error::HostNotFound => K::NotFound,
        ureq::Error::ConnectionFailed => K::ConnectionRefused,
        _ => K::Other,
    };
    HttpError::Transport { origin: origin.to_string(), kind, reason: e.to_string() }
}

/// The plain-http client of the free functions.
fn plain() -> &'static Client {
    static PLAIN: OnceLock<Client> = OnceLock::new();
    PLAIN.get_or_init(Client::plain)
}

/// Sends one plain-http request to `addr` and reads the whole response (10 s bound).
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> std::io::Result<Response> {
    request_as(addr, &Requester::default(), method, path, content_type, body)
}

/// [`request`] as `requester`.
pub fn request_as(
    addr: SocketAddr,
    requester: &Requester<'_>,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> std::io::Result<Response> {
    plain().request_as(addr, requester, method, path, content_type, body)
}

/// [`Client::request_following`] over plain http.
pub fn request_following(
    addr: SocketAddr,
    requester: &Requester<'_>,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
    max_redirects: usize,
) -> std::io::Result<(Response, SocketAddr, usize)> {
    plain().request_following(addr, requester, method, path, content_type, body, max_redirects)
}

/// `http://ip:port/path?query` as (address, path and query); `None` for
/// anything else (another scheme, a host name, no port).
pub fn split_location(location: &str) -> Option<(SocketAddr, String)> {
    let rest = location.strip_prefix("http://")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    Some((authority.parse().ok()?, path.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::{Origin, split_location};

    #[test]
    fn locations_split_into_address_and_path() {
        let (addr, path) = split_location("http://127.0.0.3:8080/v1/rooms/r/participants?ticket=a.b").expect("splits");
        assert_eq!(addr.to_string(), "127.0.0.3:8080");
        assert_eq!(path, "/v1/rooms/r/participants?ticket=a.b");
        assert!(split_location("https://x:1/").is_none());
        assert!(split_location("http://name.example:80/").is_none());
    }

    #[test]
    fn origins_parse_from_urls() {
        let (o, path) = Origin::parse("https://127.0.0.1:8443/v1/rooms?x=1").expect("parses");
        assert!(o.is_tls());
        assert_eq!((o.to_string().as_str(), path.as_str()), ("https://127.0.0.1:8443", "/v1/rooms?x=1"));
        assert_eq!(o.ws_url("/v1/rooms/r/ws"), "wss://127.0.0.1:8443/v1/rooms/r/ws");
        let (o, path) = Origin::parse("http://localhost").expect("parses");
        assert_eq!((o.host(), o.addr().port(), path.as_str()), ("localhost", 80, "/"));
        assert_eq!(Origin::parse("https://[::1]").expect("v6").0.to_string(), "https://[::1]:443");
        assert_eq!(Origin::parse("http://127.0.0.1:9?a").expect("query").1, "/?a");
        assert_eq!(Origin::http("127.0.0.2:7".parse().expect("addr")).ws_url("/w"), "ws://127.0.0.2:7/w");
        for (bad, says) in [
            ("ftp://127.0.0.1:1", "unknown scheme 'ftp://'"),
            ("127.0.0.1:8080", "http://HOST:PORT"),
            ("http://127.0.0.1:0", "bad port"),
            ("http://127.0.0.1:x", "bad port"),
            ("https://:8443", "no host"),
            ("http://u:p@127.0.0.1:1", "no user"),
        ] {
            let e = Origin::parse(bad).expect_err(bad).to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
