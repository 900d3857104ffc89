//! Signed webhooks: room and participant events POSTed as JSON to the
//! application's backend, the way LiveKit does it.
//!
//! ```text
//! caller (API, room, recorder thread) ── WebhookSender::send(event) ── body built once
//!     └─ try_send to each URL's bounded queue (full: dropped, counted, logged)
//! one tokio task per URL ── in order: sign ─► POST (reqwest, rustls) ─► 2xx? done : retry after 1 s, 2 s, …
//! ```
//!
//! **Body.** `{"event":"participant_left","id":"EV_…","created_at":1767225600,"room":"demo",
//! "participant":{"id":"7","identity":"alice"},"reason":"kicked"}` (see
//! [`WebhookEvent`]); `Content-Type: application/webhook+json`.
//!
//! **Signature.** `Authorization: <JWT>`, HS256 under the shared secret, whose
//! claims are `{"iss":…,"sha256":<base64 of the body's SHA-256>,"iat":…,"exp":…}`
//! (`exp` = `iat` + 5 min). A receiver checks it with [`verify`]: the
//! token's signature, its expiry, then that the body it received hashes to
//! `sha256` — so neither the body nor the token can be swapped or replayed
//! after five minutes (the event `id` lets a receiver drop duplicates,
//! which retries can produce: delivery is at least once, at most
//! `attempts` times).
//!
//! **Delivery.** Each URL has its own queue and task, so a receiver that
//! hangs or fails delays only its own events, at most `attempts ×
//! timeout + backoff × (2^(attempts−1) − 1)` each (3 × 5 s + 1 s + 2 s = 18 s by
//! default), and only until its queue is full, after which its new events
//! are dropped and counted. Within one URL events arrive in the order they
//! were sent. A response with a 2xx status is success; anything else, a
//! refused or timed-out connection, is retried.
//!
//! **`http://` and `https://`.** One reqwest client per sender, over
//! rustls with ring (the provider the cluster's `rediss://` uses):
//! certificates are checked against the system's roots
//! (`/etc/ssl/certs`, Debian's `ca-certificates`) plus `webhooks.ca_file`
//! (a private CA's PEM file). Redirects are not followed (a 3xx is a
//! failed attempt: a webhook goes where it was configured to, nowhere
//! else), no proxy is read from the environment, and each attempt is on a
//! connection of its own or one kept from the last attempt to that URL.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use bytes::Bytes;
use ring::{digest, hmac};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// Most URLs accepted.
pub const MAX_URLS: usize = 16;
/// Longest URL accepted, in bytes.
pub const MAX_URL_BYTES: usize = 2048;
/// Shortest secret accepted, in bytes (RFC 7518 §3.2: at least the hash size).
pub const MIN_SECRET_BYTES: usize = 32;
/// How long a signature stays valid.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(300);
/// The `Content-Type` of a webhook body.
pub const CONTENT_TYPE: &str = "application/webhook+json";

/// Webhook settings (suggested under `[webhooks]`).
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    /// Receivers, `http[s]://host[:port][/path]`.
    pub urls: Vec<String>,
    /// A PEM file of CA certificates trusted besides the system's (empty: none).
    pub ca_file: String,
    /// The HMAC secret receivers verify with (the server's auth secret, or one of its own).
    pub secret: Vec<u8>,
    /// The token's `iss` claim.
    pub issuer: String,
    /// Events queued per URL before new ones are dropped.
    pub queue: usize,
    /// Time to establish a connection.
    pub connect_timeout: Duration,
    /// Time for a whole attempt: connect, send, status line.
    pub timeout: Duration,
    /// Attempts per event (1 = no retry).
    pub attempts: u32,
    /// Wait before the first retry; doubled before each next one.
    pub backoff: Duration,
}

impl std::fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("urls", &self.urls)
            .field("ca_file", &self.ca_file)
            .field("secret", &"<redacted>")
            .field("issuer", &self.issuer)
            .field("queue", &self.queue)
            .field("connect_timeout", &self.connect_timeout)
            .field("timeout", &self.timeout)
            .field("attempts", &self.attempts)
            .field("backoff", &self.backoff)
            .finish()
    }
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            urls: Vec::new(),
            ca_file: String::new(),
            secret: Vec::new(),
            issuer: "tutti".into(),
            queue: 1024,
            connect_timeout: Duration::from_secs(5),
            timeout: Duration::from_secs(5),
            attempts: 3,
            backoff: Duration::from_secs(1),
        }
    }
}

/// Why a webhook configuration is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// `webhooks.ca_file` unreadable, or no certificate to check an `https://` receiver with.
    #[error("webhooks: {0}")]
    Tls(String),
    /// A URL that is not `http[s]://host[:port][/path]`.
    #[error("webhook URL {url}: {why}")]
    Url {
        /// The URL.
        url: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// More than [`MAX_URLS`] URLs.
    #[error("at most {MAX_URLS} webhook URLs")]
    TooManyUrls,
    /// The secret is shorter than [`MIN_SECRET_BYTES`].
    #[error("the webhook secret must be at least {MIN_SECRET_BYTES} bytes")]
    Secret,
    /// Another value out of range.
    #[error("invalid webhook config: {0}")]
    Config(&'static str),
}

/// A participant, as events name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParticipantInfo {
    /// The server's id for this participant (unique in the room).
    pub id: String,
    /// The identity from its token.
    pub identity: String,
    /// Its attributes (at its join; on `participant_left`, its last ones;
    /// on `participant_attributes_changed`, the whole set now). Left out when empty.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub attributes: crate::attributes::Attributes,
}

/// A finished recording, as the `recording_finished` event describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordingInfo {
    /// The file's name (not its full path: that is the server's business).
    pub file: String,
    /// Bytes in the file.
    pub bytes: u64,
    /// Playable seconds.
    pub duration_seconds: f64,
    /// `stopped`, `limit` or `error`.
    pub reason: String,
    /// What went wrong, when `reason` is `error`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// In a cluster, the node whose recordings directory holds the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// A file played into a room, as the `playback_*` events describe it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlaybackInfo {
    /// The playback's id in the room.
    pub id: u64,
    /// The file's name (`upload` for an uploaded one).
    pub file: String,
    /// `announcement` or `hold` (`playback_started` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// Whether it loops (`playback_started` only).
    #[serde(rename = "loop", skip_serializing_if = "Option::is_none")]
    pub looping: Option<bool>,
}

/// A dial-out call, as the `call_*` events describe it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallInfo {
    /// The call's SIP Call-ID (the answer of `POST /v1/rooms/{room}/calls`).
    pub call_id: String,
    /// Whom it calls (`call_ringing`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// The callee's participant id (`call_answered`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// The final SIP status, 0 when none came (`call_failed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sip_status: Option<u16>,
    /// `callee_busy`, `callee_declined`, `no_answer` or `call_failed` (`call_failed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

impl CallInfo {
    /// Call `call_id`, nothing else told.
    pub fn new(call_id: &str) -> Self {
        Self { call_id: call_id.to_owned(), to: None, id: None, sip_status: None, code: None }
    }
}

/// What happened.
#[derive(Debug, Clone, PartialEq)]
pub enum WebhookEvent {
    /// A room was created (or got its first participant).
    RoomStarted {
        /// The room.
        room: String,
    },
    /// A room was closed.
    RoomFinished {
        /// The room.
        room: String,
    },
    /// Someone joined.
    ParticipantJoined {
        /// The room.
        room: String,
        /// Who.
        participant: ParticipantInfo,
    },
    /// Someone left.
    ParticipantLeft {
        /// The room.
        room: String,
        /// Who.
        participant: ParticipantInfo,
        /// Why, as the WebSocket `left` event says it (`left`, `kicked`, `timeout`, …).
        reason: String,
    },
    /// Someone's attributes changed (they, or an admin).
    ParticipantAttributesChanged {
        /// The room.
        room: String,
        /// Who, with the whole set of attributes now.
        participant: ParticipantInfo,
    },
    /// A recording ended.
    RecordingFinished {
        /// The room.
        room: String,
        /// The file and why it ended.
        recording: RecordingInfo,
    },
    /// A file started playing into a room (an announcement or hold music).
    PlaybackStarted {
        /// The room.
        room: String,
        /// Which.
        playback: PlaybackInfo,
    },
    /// A playback was stopped before its end.
    PlaybackStopped {
        /// The room.
        room: String,
        /// Which.
        playback: PlaybackInfo,
        /// `stopped` (an admin); hold music: `joined`, `empty`, `replaced`.
        reason: String,
    },
    /// A playback played to its end.
    PlaybackFinished {
        /// The room.
        room: String,
        /// Which.
        playback: PlaybackInfo,
    },
    /// A dial-out call rings.
    CallRinging {
        /// The room.
        room: String,
        /// Which call, to whom.
        call: CallInfo,
    },
    /// A dial-out call was answered: the callee joined.
    CallAnswered {
        /// The room.
        room: String,
        /// Which call, and the callee's participant id.
        call: CallInfo,
    },
    /// A dial-out call was not answered.
    CallFailed {
        /// The room.
        room: String,
        /// Which call, its SIP status and code.
        call: CallInfo,
        /// Why, for a person.
        reason: String,
    },
}

impl WebhookEvent {
    /// The `event` field: `room_started`, `room_finished`, `participant_joined`, `participant_left`,
    /// `participant_attributes_changed`, `recording_finished`, `playback_started`, `playback_stopped`, `playback_finished`, `call_ringing`, `call_answered`, `call_failed`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::RoomStarted { .. } => "room_started",
            Self::RoomFinished { .. } => "room_finished",
            Self::ParticipantJoined { .. } => "participant_joined",
            Self::ParticipantLeft { .. } => "participant_left",
            Self::ParticipantAttributesChanged { .. } => "participant_attributes_changed",
            Self::RecordingFinished { .. } => "recording_finished",
            Self::PlaybackStarted { .. } => "playback_started",
            Self::PlaybackStopped { .. } => "playback_stopped",
            Self::PlaybackFinished { .. } => "playback_finished",
            Self::CallRinging { .. } => "call_ringing",
            Self::CallAnswered { .. } => "call_answered",
            Self::CallFailed { .. } => "call_failed",
        }
    }

    /// The JSON body, with event `id` and `created_at` (seconds since the Unix epoch).
    pub fn body(&self, id: &str, created_at: u64) -> Vec<u8> {
        #[derive(Serialize)]
        struct Body<'a> {
            event: &'static str,
            id: &'a str,
            created_at: u64,
            room: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            participant: Option<&'a ParticipantInfo>,
            #[serde(skip_serializing_if = "Option::is_none")]
            reason: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            recording: Option<&'a RecordingInfo>,
            #[serde(skip_serializing_if = "Option::is_none")]
            playback: Option<&'a PlaybackInfo>,
            #[serde(skip_serializing_if = "Option::is_none")]
            call: Option<&'a CallInfo>,
        }
        let mut b = Body {
            event: self.name(),
            id,
            created_at,
            room: "",
            participant: None,
            reason: None,
            recording: None,
            playback: None,
            call: None,
        };
        match self {
            Self::RoomStarted { room } | Self::RoomFinished { room } => b.room = room,
            Self::ParticipantJoined { room, participant }
            | Self::ParticipantAttributesChanged { room, participant } => {
                b.room = room;
                b.participant = Some(participant);
            }
            Self::ParticipantLeft { room, participant, reason } => {
                b.room = room;
                b.participant = Some(participant);
                b.reason = Some(reason);
            }
            Self::RecordingFinished { room, recording } => {
                b.room = room;
                b.recording = Some(recording);
            }
            Self::PlaybackStarted { room, playback } | Self::PlaybackFinished { room, playback } => {
                b.room = room;
                b.playback = Some(playback);
            }
            Self::PlaybackStopped { room, playback, reason } => {
                b.room = room;
                b.playback = Some(playback);
                b.reason = Some(reason);
            }
            Self::CallRinging { room, call } | Self::CallAnswered { room, call } => {
                b.room = room;
                b.call = Some(call);
            }
            Self::CallFailed { room, call, reason } => {
                b.room = room;
                b.call = Some(call);
                b.reason = Some(reason);
            }
        }
        // Serializing plain strings and numbers cannot fail; an empty body would be refused by the receiver's hash check anyway.
        serde_json::to_vec(&b).unwrap_or_default()
    }
}

/// A receiver's URL, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The URL as configured.
    pub url: String,
    /// As parsed.
    pub parsed: reqwest::Url,
}

impl Endpoint {
    /// Whether it is an `https://` URL.
    pub fn tls(&self) -> bool {
        self.parsed.scheme() == "https"
    }
}

/// Parses an `http[s]://host[:port][/path][?query]` URL.
pub fn parse_url(url: &str) -> Result<Endpoint, WebhookError> {
    let bad = |why| WebhookError::Url { url: url.to_owned(), why };
    if url.len() > MAX_URL_BYTES {
        return Err(bad("longer than 2048 bytes"));
    }
    if url.bytes().any(|b| b.is_ascii_control() || b == b' ' || b >= 0x80) {
        return Err(bad("control characters, spaces or non-ASCII (percent-encode them)"));
    }
    let parsed = reqwest::Url::parse(url).map_err(|_| bad("not a URL"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad("not an http:// or https:// URL"));
    }
    if parsed.fragment().is_some() {
        return Err(bad("a fragment is not sent"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(bad("credentials in the URL are not supported (the body is signed instead)"));
    }
    if parsed.host_str().is_none_or(str::is_empty) || parsed.port() == Some(0) {
        return Err(bad("no host or port 0"));
    }
    Ok(Endpoint { url: url.to_owned(), parsed })
}

/// The TLS settings of the sender's client: the system's roots and
/// `ca_file`'s; an `https://` URL with neither is refused.
fn tls_config(ca_file: &str, https: bool) -> Result<rustls::ClientConfig, WebhookError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    let system = rustls_native_certs::load_native_certs();
    let (added, _) = roots.add_parsable_certificates(system.certs);
    if !ca_file.is_empty() {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(ca_file)
            .and_then(|certs| certs.collect())
            .map_err(|e| WebhookError::Tls(format!("webhooks.ca_file {ca_file}: {e}")))?;
        let (ok, _) = roots.add_parsable_certificates(certs);
        if ok == 0 {
            return Err(WebhookError::Tls(format!("webhooks.ca_file {ca_file}: no CA certificate in it")));
        }
    }
    if https && roots.is_empty() {
        return Err(WebhookError::Tls(
            "an https:// URL, but no CA certificate to check it with: install the system's (Debian: \
             ca-certificates) or set webhooks.ca_file"
                .into(),
        ));
    }
    tracing::debug!(system = added, ca_file, "webhook TLS roots");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
        .map_err(|e| WebhookError::Tls(e.to_string()))
}

/// The client every URL's worker shares.
fn client(cfg: &WebhookConfig, endpoints: &[Endpoint]) -> Result<reqwest::Client, WebhookError> {
    let tls = tls_config(&cfg.ca_file, endpoints.iter().any(Endpoint::tls))?;
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .connect_timeout(cfg.connect_timeout)
        .timeout(cfg.timeout)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .user_agent("tutti")
        .pool_max_idle_per_host(1)
        .build()
        .map_err(|e| WebhookError::Tls(format!("the HTTP client: {e}")))
}

impl WebhookConfig {
    /// Checks every value, parses the URLs and, when there are any, the
    /// TLS roots they would be checked with (`ca_file`, the system's).
    pub fn validate(&self) -> Result<Vec<Endpoint>, WebhookError> {
        let endpoints = self.endpoints()?;
        if !endpoints.is_empty() {
            tls_config(&self.ca_file, endpoints.iter().any(Endpoint::tls))?;
        }
        Ok(endpoints)
    }

    /// Every check but the TLS roots', and the URLs parsed.
    fn endpoints(&self) -> Result<Vec<Endpoint>, WebhookError> {
        if self.urls.len() > MAX_URLS {
            return Err(WebhookError::TooManyUrls);
        }
        if self.secret.len() < MIN_SECRET_BYTES {
            return Err(WebhookError::Secret);
        }
        if !(1..=1_000_000).contains(&self.queue) {
            return Err(WebhookError::Config("webhooks.queue is outside 1..=1000000"));
        }
        if !(1..=10).contains(&self.attempts) {
            return Err(WebhookError::Config("webhooks.attempts is outside 1..=10"));
        }
        if self.timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(WebhookError::Config("webhooks timeouts must be positive"));
        }
        if self.backoff > Duration::from_secs(60) {
            return Err(WebhookError::Config("webhooks.backoff is above 60 s"));
        }
        self.urls.iter().map(|u| parse_url(u)).collect()
    }
}

/// Delivery counters, summed over URLs (for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WebhookStats {
    /// Events queued (one per URL).
    pub queued: u64,
    /// Events delivered (a 2xx answer).
    pub sent: u64,
    /// Events given up after the last attempt.
    pub failed: u64,
    /// Retries (attempts after the first).
    pub retried: u64,
    /// Attempts that timed out (connect or response).
    pub timeouts: u64,
    /// Events dropped because a URL's queue was full.
    pub dropped: u64,
}

#[derive(Debug, Default)]
struct Counters {
    queued: AtomicU64,
    sent: AtomicU64,
    failed: AtomicU64,
    retried: AtomicU64,
    timeouts: AtomicU64,
    dropped: AtomicU64,
}

/// One event on its way: the body and its metadata.
#[derive(Debug)]
struct Delivery {
    body: Bytes,
    event: &'static str,
    id: String,
}

/// Sends events to the configured URLs. Cheap to call from any thread
/// (std or tokio): [`WebhookSender::send`] never blocks or awaits.
#[derive(Debug)]
pub struct WebhookSender {
    queues: Vec<(String, mpsc::Sender<Arc<Delivery>>)>,
    counters: Arc<Counters>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl WebhookSender {
    /// Validates `cfg` and starts one delivery task per URL on `runtime`
    /// (the server's API runtime).
    pub fn start(cfg: &WebhookConfig, runtime: &tokio::runtime::Handle) -> Result<Self, WebhookError> {
        // The TLS roots are read once, by the client (`validate` would read them again).
        let endpoints = cfg.endpoints()?;
        let client = if endpoints.is_empty() { None } else { Some(client(cfg, &endpoints)?) };
        let counters = Arc::new(Counters::default());
        let key = hmac::Key::new(hmac::HMAC_SHA256, &cfg.secret);
        let mut queues = Vec::with_capacity(endpoints.len());
        let mut tasks = Vec::with_capacity(endpoints.len());
        for ep in endpoints {
            let (tx, rx) = mpsc::channel(cfg.queue);
            queues.push((ep.url.clone(), tx));
            let http = client.clone().unwrap_or_default();
            let worker = Worker { ep, http, cfg: cfg.clone(), key: key.clone(), counters: Arc::clone(&counters) };
            tasks.push(runtime.spawn(worker.run(rx)));
        }
        Ok(Self { queues, counters, tasks })
    }

    /// Queues `event` for every URL; returns to how many it was queued
    /// (the others' queues were full: counted in `dropped` and logged).
    pub fn send(&self, event: &WebhookEvent) -> usize {
        if self.queues.is_empty() {
            return 0;
        }
        let id = event_id();
        let created_at = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let delivery = Arc::new(Delivery { body: Bytes::from(event.body(&id, created_at)), event: event.name(), id });
        let mut queued = 0;
        for (url, tx) in &self.queues {
            match tx.try_send(Arc::clone(&delivery)) {
                Ok(()) => {
                    queued += 1;
                    self.counters.queued.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => {
                    let dropped = self.counters.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                    tracing::warn!(url = %url, event = delivery.event, id = %delivery.id, dropped, "webhook queue full: event dropped");
                }
            }
        }
        queued
    }

    /// Events queued and neither delivered nor given up yet.
    pub fn pending(&self) -> u64 {
        let c = &self.counters;
        let done = c.sent.load(Ordering::Acquire) + c.failed.load(Ordering::Acquire);
        c.queued.load(Ordering::Acquire).saturating_sub(done)
    }

    /// The counters so far.
    pub fn stats(&self) -> WebhookStats {
        let c = &self.counters;
        WebhookStats {
            queued: c.queued.load(Ordering::Relaxed),
            sent: c.sent.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            retried: c.retried.load(Ordering::Relaxed),
            timeouts: c.timeouts.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
        }
    }

    /// Stops taking events and gives the tasks up to `grace` to deliver
    /// what is queued; then aborts them. Returns the final counters.
    pub async fn close(mut self, grace: Duration) -> WebhookStats {
        self.queues.clear(); // the tasks end when their queue is empty
        let deadline = tokio::time::Instant::now() + grace;
        for task in &mut self.tasks {
            if tokio::time::timeout_at(deadline, &mut *task).await.is_err() {
                task.abort();
            }
        }
        self.stats()
    }
}

impl Drop for WebhookSender {
    fn drop(&mut self) {
        // Without close(), the tasks still deliver what is queued, then end.
        self.queues.clear();
    }
}

/// One URL's delivery loop.
struct Worker {
    ep: Endpoint,
    http: reqwest::Client,
    cfg: WebhookConfig,
    key: hmac::Key,
    counters: Arc<Counters>,
}

/// Why an attempt failed.
enum AttemptError {
    Timeout,
    Status(u16),
    Http(reqwest::Error),
}

impl std::fmt::Display for AttemptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Timeout => f.write_str("timed out"),
            Self::Status(s) => write!(f, "status {s}"),
            // With its causes: "error sending request" alone says little.
            Self::Http(e) => {
                write!(f, "{e}")?;
                let mut cause = std::error::Error::source(e);
                while let Some(c) = cause {
                    write!(f, ": {c}")?;
                    cause = c.source();
                }
                Ok(())
            }
        }
    }
}

impl Worker {
    async fn run(self, mut rx: mpsc::Receiver<Arc<Delivery>>) {
        while let Some(d) = rx.recv().await {
            self.deliver(&d).await;
        }
    }

    async fn deliver(&self, d: &Delivery) {
        let mut wait = self.cfg.backoff;
        for attempt in 1..=self.cfg.attempts {
            let token = sign(&self.key, &self.cfg.issuer, &d.body, unix_now());
            match self.attempt(&d.body, &token).await {
                Ok(()) => {
                    self.counters.sent.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(url = %self.ep.url, event = d.event, id = %d.id, attempt, "webhook delivered");
                    return;
                }
                Err(e) => {
                    if matches!(e, AttemptError::Timeout) {
                        self.counters.timeouts.fetch_add(1, Ordering::Relaxed);
                    }
                    if attempt == self.cfg.attempts {
                        self.counters.failed.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(url = %self.ep.url, event = d.event, id = %d.id, attempt, error = %e, "webhook failed");
                        return;
                    }
                    tracing::debug!(url = %self.ep.url, event = d.event, id = %d.id, attempt, error = %e, "webhook retry");
                    self.counters.retried.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(wait).await;
                    wait = wait.saturating_mul(2);
                }
            }
        }
    }

    async fn attempt(&self, body: &Bytes, token: &str) -> Result<(), AttemptError> {
        let request = self
            .http
            .post(self.ep.parsed.clone())
            .header(reqwest::header::CONTENT_TYPE, CONTENT_TYPE)
            .header(reqwest::header::AUTHORIZATION, token)
            .body(body.clone());
        let response = request
            .send()
            .await
            .map_err(|e| if e.is_timeout() { AttemptError::Timeout } else { AttemptError::Http(e) })?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) { Ok(()) } else { Err(AttemptError::Status(status)) }
    }
}

/// The claims of a webhook token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookClaims {
    /// Who sent it (`webhooks.issuer`).
    pub iss: String,
    /// Base64 (standard, padded) of the SHA-256 of the body.
    pub sha256: String,
    /// Issued at, seconds since the Unix epoch.
    pub iat: u64,
    /// Expires at, seconds since the Unix epoch.
    pub exp: u64,
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Base64 (standard alphabet, padded) of the SHA-256 of `body`: the `sha256` claim.
pub fn body_hash(body: &[u8]) -> String {
    STANDARD.encode(digest::digest(&digest::SHA256, body))
}

/// The `Authorization` value for `body`: an HS256 JWT under `key` issued at `now` (Unix seconds).
pub fn sign(key: &hmac::Key, issuer: &str, body: &[u8], now: u64) -> String {
    let claims = WebhookClaims {
        iss: issuer.to_owned(),
        sha256: body_hash(body),
        iat: now,
        exp: now + TOKEN_LIFETIME.as_secs(),
    };
    // Serializing two strings and two integers cannot fail.
    let claims = serde_json::to_vec(&claims).unwrap_or_default();
    let mut token = String::with_capacity(64 + claims.len() * 4 / 3 + 44);
    token.push_str(&URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#));
    token.push('.');
    token.push_str(&URL_SAFE_NO_PAD.encode(claims));
    let tag = hmac::sign(key, token.as_bytes());
    token.push('.');
    token.push_str(&URL_SAFE_NO_PAD.encode(tag.as_ref()));
    token
}

/// Why [`verify`] refused a webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// Not three base64url parts, or longer than 4 KiB.
    #[error("malformed token")]
    Malformed,
    /// The header's `alg` is not `HS256`.
    #[error("token algorithm is not HS256")]
    Algorithm,
    /// The signature does not match the secret.
    #[error("bad signature")]
    Signature,
    /// The claims are not the expected JSON.
    #[error("malformed claims")]
    Claims,
    /// The token has expired (or was issued in the future, beyond the leeway).
    #[error("token expired or not yet valid")]
    Expired,
    /// The body's SHA-256 is not the token's `sha256`.
    #[error("body does not match the signed hash")]
    BodyHash,
}

/// Checks a webhook as its receiver: `authorization` is the
/// `Authorization` header (a `Bearer ` prefix is tolerated), `body` the
/// raw request body, `secret` the shared secret, `now` the receiver's Unix
/// time; 60 s of clock skew is allowed. Returns the claims.
///
/// ```
/// use tutti_server::outputs::webhook::{sign, verify};
/// let secret = [7u8; 32];
/// let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret);
/// let body = br#"{"event":"room_started","room":"demo"}"#;
/// let token = sign(&key, "tutti", body, 1_767_225_600);
/// assert!(verify(&secret, &token, body, 1_767_225_610).is_ok());
/// assert!(verify(&secret, &token, b"{}", 1_767_225_610).is_err());
/// ```
pub fn verify(secret: &[u8], authorization: &str, body: &[u8], now: u64) -> Result<WebhookClaims, VerifyError> {
    const LEEWAY: u64 = 60;
    let token = authorization.trim();
    let token = token.strip_prefix("Bearer ").unwrap_or(token);
    if token.len() > 4096 {
        return Err(VerifyError::Malformed);
    }
    let mut parts = token.split('.');
    let (Some(h), Some(c), Some(s), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(VerifyError::Malformed);
    };
    #[derive(Deserialize)]
    struct Header {
        alg: String,
    }
    let header = URL_SAFE_NO_PAD.decode(h).map_err(|_| VerifyError::Malformed)?;
    let header: Header = serde_json::from_slice(&header).map_err(|_| VerifyError::Malformed)?;
    if header.alg != "HS256" {
        return Err(VerifyError::Algorithm);
    }
    let sig = URL_SAFE_NO_PAD.decode(s).map_err(|_| VerifyError::Malformed)?;
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    hmac::verify(&key, &token.as_bytes()[..h.len() + 1 + c.len()], &sig).map_err(|_| VerifyError::Signature)?;
    let claims = URL_SAFE_NO_PAD.decode(c).map_err(|_| VerifyError::Claims)?;
    let claims: WebhookClaims = serde_json::from_slice(&claims).map_err(|_| VerifyError::Claims)?;
    if now > claims.exp.saturating_add(LEEWAY) || claims.iat > now.saturating_add(LEEWAY) {
        return Err(VerifyError::Expired);
    }
    let expected = body_hash(body);
    // Both are public hashes of public data; a plain comparison leaks nothing about the secret.
    if expected != claims.sha256 {
        return Err(VerifyError::BodyHash);
    }
    Ok(claims)
}

fn event_id() -> String {
    let mut b = [0u8; 8];
    // Without the OS's randomness ids may repeat; delivery still works.
    let _ = getrandom::fill(&mut b);
    format!("EV_{:016x}", u64::from_le_bytes(b))
}

impl From<&super::recording::RecordingFinished> for RecordingInfo {
    /// The `recording_finished` webhook's view of a finished recording (file name only, not the server's path).
    fn from(f: &super::recording::RecordingFinished) -> Self {
        Self {
            file: f.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            bytes: f.bytes,
            duration_seconds: f.duration.as_secs_f64(),
            reason: f.reason.code().to_owned(),
            error: match &f.reason {
                super::recording::StopReason::Error(e) => Some(e.clone()),
                _ => None,
            },
            node: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_are_refused_clearly() {
        let ep = parse_url("http://127.0.0.1:8080/hooks?x=1").expect("valid");
        let p = &ep.parsed;
        assert_eq!(
            (p.host_str(), p.port(), p.path(), p.query()),
            (Some("127.0.0.1"), Some(8080), "/hooks", Some("x=1"))
        );
        let ep = parse_url("http://[::1]/").expect("valid");
        assert_eq!((ep.parsed.host_str(), ep.parsed.port_or_known_default()), (Some("[::1]"), Some(80)));
        let ep = parse_url("http://example.test?q").expect("valid");
        assert_eq!((ep.parsed.path(), ep.parsed.query()), ("/", Some("q")));
        let ep = parse_url("HTTPS://Example.test/x").expect("valid");
        assert!(ep.tls());
        assert_eq!(ep.parsed.port_or_known_default(), Some(443));
        assert!(matches!(parse_url("http://x/#frag"), Err(WebhookError::Url { .. })));
        assert!(matches!(parse_url("ftp://x/"), Err(WebhookError::Url { .. })));
        assert!(matches!(parse_url("http://u:p@x/"), Err(WebhookError::Url { .. })));
        assert!(matches!(parse_url("http://x:99999/"), Err(WebhookError::Url { .. })));
        assert!(matches!(parse_url("http://x/a\r\nInjected: 1"), Err(WebhookError::Url { .. })));
        assert!(matches!(parse_url("http:///"), Err(WebhookError::Url { .. })));
    }

    #[test]
    fn tokens_verify_and_tampering_is_caught() {
        let secret = [3u8; 32];
        let key = hmac::Key::new(hmac::HMAC_SHA256, &secret);
        let body = br#"{"event":"room_started"}"#;
        let token = sign(&key, "tutti", body, 1000);
        let claims = verify(&secret, &token, body, 1010).expect("fresh, matching");
        assert_eq!(claims.sha256, body_hash(body));
        assert_eq!(verify(&secret, &format!("Bearer {token}"), body, 1010), Ok(claims));
        assert_eq!(verify(&secret, &token, br#"{"event":"room_finished"}"#, 1010), Err(VerifyError::BodyHash));
        assert_eq!(verify(&[4u8; 32], &token, body, 1010), Err(VerifyError::Signature));
        assert_eq!(verify(&secret, &token, body, 1000 + 300 + 61), Err(VerifyError::Expired));
        assert_eq!(verify(&secret, "a.b", body, 1010), Err(VerifyError::Malformed));
        let none =
            format!("{}.{}", URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#), token.split('.').nth(1).expect("3 parts"));
        assert_eq!(verify(&secret, &format!("{none}."), body, 1010), Err(VerifyError::Algorithm));
    }

    #[test]
    fn bodies_carry_the_fields() {
        let e = WebhookEvent::ParticipantLeft {
            room: "demo".into(),
            participant: ParticipantInfo { id: "7".into(), identity: "alice".into(), attributes: Default::default() },
            reason: "kicked".into(),
        };
        let v: serde_json::Value = serde_json::from_slice(&e.body("EV_1", 42)).expect("JSON");
        assert_eq!(
            v,
            serde_json::json!({"event":"participant_left","id":"EV_1","created_at":42,"room":"demo",
                "participant":{"id":"7","identity":"alice"},"reason":"kicked"})
        );
    }

    #[test]
    fn config_is_validated() {
        let ok = WebhookConfig { urls: vec!["http://127.0.0.1:1/".into()], secret: vec![1; 32], ..Default::default() };
        assert!(ok.validate().is_ok());
        assert_eq!(WebhookConfig { secret: vec![1; 8], ..ok.clone() }.validate(), Err(WebhookError::Secret));
        assert!(WebhookConfig { attempts: 0, ..ok.clone() }.validate().is_err());
        assert!(WebhookConfig { urls: vec!["http://x/".into(); 17], ..ok }.validate().is_err());
    }
}
