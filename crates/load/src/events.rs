//! A simulated participant's room WebSocket (`GET /v1/rooms/{room}/ws`), as
//! the browser page holds it: opened and used to join (the `join` message,
//! answered by `answer`) on the joiner's thread with blocking reads bounded
//! by a timeout, then handed to a `load-N` thread, where it is non-blocking
//! and read on that thread's epoll (mio) like the UDP sockets: no thread per
//! socket. Every message is counted (payload bytes too); pings are answered
//! (tungstenite queues the pong while reading; [`EventSocket::pump`] flushes
//! it, keeping what a full socket buffer refuses for the next round).

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use serde::Deserialize;
use tungstenite::protocol::WebSocket;
use tungstenite::{Error as WsError, Message};
use tutti_client::{Client, Stream};

/// Blocking connect, handshake and join answer: each step's bound.
const BLOCKING_TIMEOUT: Duration = Duration::from_secs(10);
/// Messages read before the join's answer (the snapshot, events of others
/// joining meanwhile) before the join is given up.
const MAX_MESSAGES_BEFORE_ANSWER: usize = 1_000;
/// Messages read in one [`EventSocket::pump`] before the thread looks at
/// its send schedule again (the next readiness event or round reads on).
const MAX_MESSAGES_PER_PUMP: usize = 256;

#[derive(Deserialize)]
struct Typed<'a> {
    #[serde(borrow, rename = "type")]
    kind: &'a str,
}

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    id: serde_json::Value,
    #[serde(default)]
    sdp: String,
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
}

/// One client's room WebSocket and what it received.
pub(crate) struct EventSocket {
    ws: WebSocket<Stream>,
    /// Open: no close frame, no error.
    pub(crate) open: bool,
    /// The `room` snapshot arrived.
    pub(crate) snapshot: bool,
    /// Messages received since `since`.
    pub(crate) messages: u64,
    /// Payload bytes received since `since`.
    pub(crate) bytes: u64,
    /// Counting from here.
    pub(crate) since: Instant,
    /// Why it closed.
    pub(crate) closed: Option<String>,
    /// The room was handed to another node (a drain's `moved`), not yet acted on.
    pub(crate) moved: Option<Moved>,
}

/// Where a `moved` message sends the client: the room's new node, and the
/// single-use ticket for its `/v1/rooms/{room}/enter` (absent when the
/// cluster hands out none, e.g. with auth off).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Moved {
    /// The new node's API URL, `http://` or `https://`: resolved by the
    /// rejoin thread (a name lookup blocks; the `load-N` threads may not).
    pub(crate) url: String,
    /// The ticket, if any.
    pub(crate) ticket: Option<String>,
}

impl Moved {
    /// The target of a `moved` message's text; `None` when it has no
    /// `http://` or `https://` `api_url`.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        let url = v["api_url"].as_str().filter(|u| u.starts_with("http://") || u.starts_with("https://"))?;
        let ticket = v["ticket"].as_str().filter(|t| !t.is_empty()).map(str::to_owned);
        Some(Self { url: url.to_owned(), ticket })
    }
}

/// A refused handshake: its status and the JSON error's `code` when the
/// answer has one (`WebSocket refused: 503 too_many_connections`).
fn refused(status: tungstenite::http::StatusCode, body: Option<&[u8]>) -> String {
    let code = body
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
        .and_then(|v| v["code"].as_str().map(str::to_owned));
    match code {
        Some(code) => format!("WebSocket refused: {} {code}", status.as_u16()),
        None => format!("WebSocket refused: {status}"),
    }
}

fn kind(text: &str) -> Option<&str> {
    serde_json::from_str::<Typed<'_>>(text).ok().map(|t| t.kind)
}

impl EventSocket {
    /// Opens the WebSocket of `room` (blocking, bounded by a timeout):
    /// `ws://`, or `wss://` when `http` reaches `api` over TLS.
    /// `node`: the node a `moved` sent it to, named so that the node keeps
    /// the socket (a room spread over nodes would place it again).
    pub(crate) fn connect(
        http: &Client,
        api: SocketAddr,
        room: &str,
        token: Option<&str>,
        node: Option<&str>,
    ) -> Result<Self, String> {
        let stream = http.connect(api, BLOCKING_TIMEOUT).map_err(|e| format!("WebSocket connect: {e}"))?;
        let mut query: Vec<String> = Vec::new();
        if let Some(t) = token {
            query.push(format!("token={t}"));
        }
        // Node ids are letters, digits, `.`, `_` and `-`: nothing to escape.
        if let Some(n) = node.filter(|n| n.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))) {
            query.push(format!("node={n}"));
        }
        let path = if query.is_empty() {
            format!("/v1/rooms/{room}/ws")
        } else {
            format!("/v1/rooms/{room}/ws?{}", query.join("&"))
        };
        let url = http.ws_url(api, &path);
        let (ws, _) = tungstenite::client::client(url.as_str(), stream).map_err(|e| match e {
            tungstenite::HandshakeError::Failure(WsError::Http(r)) => refused(r.status(), r.body().as_deref()),
            e => format!("WebSocket handshake: {e}"),
        })?;
        Ok(Self {
            ws,
            open: true,
            snapshot: false,
            messages: 0,
            bytes: 0,
            since: Instant::now(),
            closed: None,
            moved: None,
        })
    }

    /// [`EventSocket::connect`] on a cluster: a node that does not hold the
    /// room says `moved` (with the owner's `api_url`) as its first message;
    /// the socket is then opened again there, at most `max_moves` times.
    /// Returns the socket, the API address it is open on and the moves followed.
    pub(crate) fn connect_following(
        http: &Client,
        api: SocketAddr,
        room: &str,
        token: Option<&str>,
        max_moves: usize,
    ) -> Result<(Self, SocketAddr, usize), String> {
        let (mut at, mut node) = (api, None::<String>);
        for moves in 0..=max_moves {
            let mut s = Self::connect(http, at, room, token, node.as_deref())?;
            let msg = s.ws.read().map_err(|e| format!("WebSocket (first message): {e}"))?;
            let Some(text) = s.count(&msg) else { return Ok((s, at, moves)) };
            if kind(&text) != Some("moved") {
                return Ok((s, at, moves));
            }
            let moved = serde_json::from_str::<serde_json::Value>(&text).unwrap_or_default();
            let url = moved["api_url"].as_str().unwrap_or_default().to_owned();
            node = moved["node"].as_str().map(str::to_owned);
            let (next, _) =
                http.locate(&url).ok_or_else(|| format!("WebSocket moved to an unusable api_url '{url}'"))?;
            s.close();
            at = next;
        }
        Err(format!("WebSocket moved more than {max_moves} times"))
    }

    fn count(&mut self, msg: &Message) -> Option<String> {
        let text = match msg {
            Message::Text(t) => Some(t.as_str().to_owned()),
            _ => None,
        };
        match msg {
            Message::Text(_) | Message::Binary(_) => {
                self.messages += 1;
                self.bytes += msg.len() as u64;
            }
            Message::Close(frame) => {
                self.open = false;
                self.closed =
                    Some(frame.as_ref().map_or("closed".into(), |f| format!("closed {} {}", f.code, f.reason)));
            }
            _ => {}
        }
        let text = text?;
        match kind(&text) {
            Some("room") => self.snapshot = true,
            // A drain handed the room over: the generator rejoins there.
            Some("moved") => self.moved = Moved::parse(&text),
            _ => {}
        }
        Some(text)
    }

    /// Joins through the socket (blocking): sends `join {sdp, name}`, reads
    /// until `answer` (returns its participant id and SDP) or `error`.
    pub(crate) fn join(&mut self, offer: &str, name: &str) -> Result<(String, String), String> {
        let msg = serde_json::json!({ "type": "join", "sdp": offer, "name": name }).to_string();
        self.ws.send(Message::text(msg)).map_err(|e| format!("WebSocket join: {e}"))?;
        for _ in 0..MAX_MESSAGES_BEFORE_ANSWER {
            let msg = self.ws.read().map_err(|e| format!("WebSocket join (waiting for the answer): {e}"))?;
            let Some(text) = self.count(&msg) else {
                if !self.open {
                    return Err(format!("WebSocket {} before the answer", self.closed.clone().unwrap_or_default()));
                }
                continue;
            };
            match kind(&text) {
                Some("answer") => {
                    let a: Answer = serde_json::from_str(&text).map_err(|e| format!("bad answer message: {e}"))?;
                    let id = match a.id {
                        serde_json::Value::String(s) => s,
                        v => v.to_string(),
                    };
                    return Ok((id, a.sdp));
                }
                Some("error") => {
                    let a: Answer = serde_json::from_str(&text).unwrap_or(Answer {
                        id: serde_json::Value::Null,
                        sdp: String::new(),
                        code: "?".into(),
                        message: text.clone(),
                    });
                    return Err(format!("join refused: {} {}", a.code, a.message));
                }
                _ => {}
            }
        }
        Err(format!("no answer within {MAX_MESSAGES_BEFORE_ANSWER} messages"))
    }

    /// Switches to non-blocking reads (for a `load-N` thread's poll).
    pub(crate) fn set_nonblocking(&mut self) -> Result<(), String> {
        let s = self.ws.get_ref().tcp();
        s.set_read_timeout(None).map_err(|e| e.to_string())?;
        s.set_nonblocking(true).map_err(|e| e.to_string())
    }

    /// Registers the socket for readability with `registry`.
    pub(crate) fn register(&self, registry: &mio::Registry, token: mio::Token) -> std::io::Result<()> {
        let fd = self.ws.get_ref().tcp().as_raw_fd();
        registry.register(&mut mio::unix::SourceFd(&fd), token, mio::Interest::READABLE)
    }

    /// Takes the socket off `registry` (before it is closed and dropped).
    pub(crate) fn deregister(&self, registry: &mio::Registry) {
        let fd = self.ws.get_ref().tcp().as_raw_fd();
        let _ = registry.deregister(&mut mio::unix::SourceFd(&fd));
    }

    /// Reads what has arrived (non-blocking), counting it, and flushes any
    /// pong queued. Returns whether more may be waiting (the per-call bound
    /// was reached): call again before the next poll.
    pub(crate) fn pump(&mut self) -> bool {
        if !self.open {
            return false;
        }
        for _ in 0..MAX_MESSAGES_PER_PUMP {
            match self.ws.read() {
                Ok(msg) => {
                    self.count(&msg);
                }
                Err(WsError::Io(e)) if e.kind() == ErrorKind::WouldBlock => {
                    self.flush();
                    return false;
                }
                Err(WsError::Io(e)) if e.kind() == ErrorKind::Interrupted => {}
                Err(WsError::ConnectionClosed | WsError::AlreadyClosed) => {
                    self.open = false;
                    self.closed.get_or_insert_with(|| "closed".into());
                    return false;
                }
                Err(e) => {
                    self.open = false;
                    self.closed = Some(e.to_string());
                    return false;
                }
            }
            if !self.open {
                return false;
            }
        }
        self.flush();
        true
    }

    fn flush(&mut self) {
        match self.ws.flush() {
            Ok(()) => {}
            Err(WsError::Io(e)) if e.kind() == ErrorKind::WouldBlock => {}
            Err(WsError::ConnectionClosed | WsError::AlreadyClosed) => self.open = false,
            Err(e) => {
                self.open = false;
                self.closed = Some(e.to_string());
            }
        }
    }

    /// Starts counting afresh (the measurement window).
    pub(crate) fn reset(&mut self, now: Instant) {
        self.messages = 0;
        self.bytes = 0;
        self.since = now;
    }

    /// Sends a close frame (best effort: the server removes the participant
    /// when the connection ends anyway).
    pub(crate) fn close(&mut self) {
        if self.open {
            let _ = self.ws.close(None);
            self.flush();
        }
    }
}
