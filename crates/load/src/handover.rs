//! Following a cluster's hand-over: when a client's call is closed by its
//! node (DTLS close_notify, its ICE-TCP connection or WebSocket gone) or its
//! room WebSocket says `moved` (a draining node handed the room over), the
//! client rejoins the room through the cluster with the same identity, and
//! its `load-N` thread swaps the new peer in place of the old one.
//!
//! ```text
//! load-N: moved / call closed ─► Request ─► rejoin-K (a few threads; joins block)
//!   moved with a ticket, first attempt: GET <api_url>/v1/rooms/{room}/enter?ticket=…
//!       ─► 303 …#token=<a token for the room> ─► join at api_url with it (as the page does)
//!   else: join through a node of the cluster (the one `moved` named, else each
//!       known node in turn) with the run's token, following 307 / `moved` to the room
//! rejoin-K ─► Reply ─► load-N: swap peer, sockets and WebSocket (the old
//!   socket closed only now: a WebSocket client joins there before it leaves
//!   here); a failure ─► retry after a backoff, at most `rejoin_attempts`
//!   tries, then the call counts as lost
//! ```
//!
//! The joins run off the `load-N` threads: a thread's other clients keep
//! their 20 ms schedule while some of them rejoin.

use std::net::SocketAddr;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tutti_client::Client;

use crate::events::Moved;

/// First wait before a failed rejoin is tried again; doubled each time.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The longest wait between two tries.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Most nodes remembered as entries for a rejoin.
const MAX_KNOWN: usize = 64;
/// How often an idle rejoin thread looks whether the run is over.
const IDLE_LOOK: Duration = Duration::from_millis(200);

/// How long to wait before try `attempt` (from 1) of a rejoin: 250 ms, 500 ms, 1 s, 2 s, 2 s, …
pub(crate) fn backoff(attempt: u32) -> Duration {
    FIRST_BACKOFF.saturating_mul(1u32 << attempt.saturating_sub(1).min(8)).min(MAX_BACKOFF)
}

/// One client's rejoin, asked by its thread.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    /// The `load-N` thread that owns the client.
    pub(crate) thread: usize,
    /// Its place in that thread.
    pub(crate) slot: usize,
    /// Its index in the run (spreads entries over the nodes).
    pub(crate) index: usize,
    /// The room's name.
    pub(crate) room: String,
    /// Which try this is, from 0.
    pub(crate) attempt: u32,
    /// Where a `moved` sent it (with its ticket, on the first try only).
    pub(crate) moved: Option<Moved>,
    /// The node its call was on (tried last: it is draining or gone).
    pub(crate) current: Option<SocketAddr>,
}

/// Where one try joins: a node's API, and the token to join with (`None`: the run's own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// The node asked.
    pub(crate) api: SocketAddr,
    /// A token for the room, redeemed from a `moved` ticket.
    pub(crate) token: Option<String>,
}

/// The answer to a [`Request`].
pub(crate) struct Reply<T> {
    /// The thread and place of the client.
    pub(crate) thread: usize,
    /// Its place in that thread.
    pub(crate) slot: usize,
    /// The joined call, or why not.
    pub(crate) result: Result<T, String>,
    /// It joined with a token redeemed from the `moved` ticket (the page's way).
    pub(crate) ticket: bool,
}

/// The cluster's API addresses seen so far (the run's `--url`, where rooms
/// were created and joins answered, where `moved` pointed): entries for a
/// rejoin that has no `moved` to follow.
#[derive(Debug, Default)]
pub(crate) struct Known(Mutex<Vec<SocketAddr>>);

impl Known {
    /// Remembers `addr` (at most [`MAX_KNOWN`]).
    pub(crate) fn add(&self, addr: SocketAddr) {
        let mut v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !v.contains(&addr) && v.len() < MAX_KNOWN {
            v.push(addr);
        }
    }

    /// The entry for try `attempt` of client `index`: the known nodes in
    /// turn from a place of the client's own (so a fleet's rejoins spread),
    /// `avoid` (the node the call was on) only when it is the only one.
    pub(crate) fn pick(&self, index: usize, attempt: u32, avoid: Option<SocketAddr>) -> Option<SocketAddr> {
        let v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let others: Vec<SocketAddr> = v.iter().copied().filter(|a| Some(*a) != avoid).collect();
        let pool = if others.is_empty() { &*v } else { &others };
        (!pool.is_empty()).then(|| pool[(index + attempt as usize) % pool.len()])
    }
}

/// Where try `req` goes, redeeming its ticket when it has one (`known` when it has no `moved`).
/// A `moved` whose `api_url` does not resolve is treated as none.
pub(crate) fn target(http: &Client, req: &Request, known: &Known) -> Result<Target, String> {
    let moved = req.moved.as_ref().and_then(|m| Some((m, http.locate(&m.url)?.0)));
    match moved {
        Some((m, api)) => {
            known.add(api);
            let token = m.ticket.as_deref().and_then(|t| enter(http, api, &req.room, t).ok());
            Ok(Target { api, token })
        }
        None => known
            .pick(req.index, req.attempt, req.current)
            .map(|api| Target { api, token: None })
            .ok_or_else(|| "no node known to rejoin through".to_owned()),
    }
}

/// Redeems a `moved` ticket as the page does: `GET /v1/rooms/{room}/enter?ticket=…`
/// answers `303` to the page with a token for the room in the fragment.
pub(crate) fn enter(http: &Client, api: SocketAddr, room: &str, ticket: &str) -> Result<String, String> {
    let path = format!("/v1/rooms/{room}/enter?ticket={ticket}");
    let r = http.request_as(api, &Default::default(), "GET", &path, None, b"").map_err(|e| format!("enter: {e}"))?;
    if r.status != 303 {
        return Err(format!("enter: {} {}", r.status, r.body.trim()));
    }
    r.header("location").and_then(token_of).ok_or_else(|| "enter: no token in the Location".to_owned())
}

/// The `token` of a page location's fragment (`/?room=r#token=…`).
fn token_of(location: &str) -> Option<String> {
    let (_, fragment) = location.split_once('#')?;
    fragment.split('&').find_map(|p| p.strip_prefix("token=")).filter(|t| !t.is_empty()).map(str::to_owned)
}

/// The rejoin threads (`rejoin-K`): they take requests from every `load-N`
/// thread and answer each on its own thread's channel.
pub(crate) struct Pool {
    requests: Sender<Request>,
}

impl Pool {
    /// Starts `threads` rejoin threads: each try runs `join(request, target)`
    /// and `deliver` hands the answer to the client's thread. They end when
    /// every sender of requests is gone (the run's end) or `stopped` says so.
    pub(crate) fn start<T: Send + 'static>(
        threads: usize,
        http: Client,
        known: Arc<Known>,
        join: impl Fn(&Request, &Target) -> Result<T, String> + Send + Sync + 'static,
        deliver: impl Fn(Reply<T>) + Send + Sync + 'static,
        stopped: impl Fn() -> bool + Send + Sync + 'static,
    ) -> Result<Self, String> {
        let (tx, rx) = std::sync::mpsc::channel::<Request>();
        let rx = Arc::new(Mutex::new(rx));
        let work = Arc::new((join, deliver, stopped));
        for k in 0..threads.max(1) {
            let (rx, work, known, http) = (rx.clone(), work.clone(), known.clone(), http.clone());
            std::thread::Builder::new()
                .name(format!("rejoin-{k}"))
                .spawn(move || {
                    let (join, deliver, stopped) = &*work;
                    while let Some(req) = next(&rx, stopped) {
                        let (result, ticket) = match target(&http, &req, &known) {
                            Ok(t) => (join(&req, &t), t.token.is_some()),
                            Err(e) => (Err(e), false),
                        };
                        deliver(Reply { thread: req.thread, slot: req.slot, result, ticket });
                    }
                })
                .map_err(|e| format!("starting rejoin-{k}: {e}"))?;
        }
        Ok(Self { requests: tx })
    }

    /// A sender of requests, for a `load-N` thread.
    pub(crate) fn sender(&self) -> Sender<Request> {
        self.requests.clone()
    }
}

/// The next request, or `None` when the run is over.
fn next(rx: &Mutex<Receiver<Request>>, stopped: &impl Fn() -> bool) -> Option<Request> {
    // Bounded: each turn waits at most IDLE_LOOK, and the run's end stops it.
    loop {
        if stopped() {
            return None;
        }
        let rx = rx.lock().unwrap_or_else(|p| p.into_inner());
        match rx.recv_timeout(IDLE_LOOK) {
            Ok(r) => return Some(r),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_ceiling() {
        let ms: Vec<u128> = (1..=6).map(|a| backoff(a).as_millis()).collect();
        assert_eq!(ms, [250, 500, 1000, 2000, 2000, 2000]);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF, "no overflow");
    }

    #[test]
    fn entries_spread_and_avoid_the_draining_node() {
        let known = Known::default();
        assert_eq!(known.pick(0, 0, None), None);
        let a: SocketAddr = "127.0.0.2:8080".parse().expect("addr");
        let b: SocketAddr = "127.0.0.3:8080".parse().expect("addr");
        let c: SocketAddr = "127.0.0.4:8080".parse().expect("addr");
        known.add(a);
        assert_eq!(known.pick(5, 3, Some(a)), Some(a), "the only node known");
        for n in [b, c, b] {
            known.add(n);
        }
        // Never the node the call was on while others are known; turns over tries.
        let tries: Vec<SocketAddr> = (0..4).filter_map(|t| known.pick(0, t, Some(a))).collect();
        assert_eq!(tries, [b, c, b, c]);
        assert_ne!(known.pick(0, 0, None), known.pick(1, 0, None), "clients start at different nodes");
    }

    #[test]
    fn the_token_comes_from_the_fragment() {
        assert_eq!(token_of("/?autojoin=1&room=r#token=abc.def").as_deref(), Some("abc.def"));
        assert_eq!(token_of("/?room=r#x=1&token=t"), Some("t".into()));
        assert_eq!(token_of("/?room=r"), None);
        assert_eq!(token_of("/?room=r#token="), None);
    }

    #[test]
    fn a_moved_message_names_the_target() {
        let http = Client::plain();
        let m = Moved::parse(
            r#"{"type":"moved","room":"r","node":"n3","api_url":"http://127.0.0.3:8080","reason":"drain","ticket":"T"}"#,
        )
        .expect("parsed");
        assert_eq!((m.url.as_str(), m.ticket.as_deref()), ("http://127.0.0.3:8080", Some("T")));
        let m = Moved::parse(r#"{"type":"moved","api_url":"http://127.0.0.3:8080/"}"#).expect("no ticket");
        assert_eq!(m.ticket, None);
        assert!(Moved::parse(r#"{"type":"moved","api_url":"ftp://127.0.0.3:21"}"#).is_none());
        let req = Request {
            thread: 0,
            slot: 0,
            index: 0,
            room: "r".into(),
            attempt: 0,
            moved: Some(m.clone()),
            current: None,
        };
        let api = "127.0.0.3:8080".parse().expect("addr");
        assert_eq!(target(&http, &req, &Known::default()), Ok(Target { api, token: None }));
        // An https node: reached over TLS from then on, its WebSocket over wss://.
        let tls = Moved::parse(r#"{"type":"moved","api_url":"https://127.0.0.4:8443"}"#).expect("https");
        let req = Request { moved: Some(tls), ..req };
        let api = target(&http, &req, &Known::default()).expect("a target").api;
        assert!(http.origin_of(api).is_tls());
        assert_eq!(http.ws_url(api, "/w"), "wss://127.0.0.4:8443/w");
    }
}
