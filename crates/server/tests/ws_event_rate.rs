//! A busy room's events cost what they tell: real WebRTC talkers flap on
//! and off faster than a person would, and the room's sockets still get at
//! most one `events` message per interval (13 ticks, 260 ms); a socket that
//! subscribed to nothing gets none; a change still arrives promptly; a big
//! room's snapshot comes in bounded messages (16 participants each) that
//! add up to everyone.

mod common;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{create_room, start};
use tutti_client::{JoinAs, ToneClient, run_for};

/// The server's interval between two batches of a room's events.
const INTERVAL: Duration = Duration::from_millis(260);
const WAIT: Duration = Duration::from_secs(10);

/// A room socket read raw: every message as it came (batches unopened).
struct Raw(tungstenite::WebSocket<TcpStream>);

impl Raw {
    fn connect(api: SocketAddr, path: &str) -> Self {
        let stream = TcpStream::connect(api).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        let (ws, _) = tungstenite::client(format!("ws://{api}{path}"), stream).expect("WebSocket handshake");
        // Reads poll from here on (the caller pumps media in between).
        ws.get_ref().set_nonblocking(true).expect("nonblocking");
        Self(ws)
    }

    /// Every text message that arrived by now, parsed.
    fn drain(&mut self) -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        // Bounded: a socket never has more than this waiting between two pumps.
        for _ in 0..10_000 {
            match self.0.read() {
                Ok(tungstenite::Message::Text(t)) => out.push(serde_json::from_str(t.as_str()).expect("JSON")),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e)) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("socket failed: {e}"),
            }
        }
        out
    }
}

/// The talking changes of `events` messages.
fn talking(messages: &[(Instant, serde_json::Value)]) -> Vec<(Instant, u64, bool)> {
    messages
        .iter()
        .filter(|(_, m)| m["type"] == "events")
        .flat_map(|(at, m)| {
            m["events"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["type"] == "talking")
                .map(move |e| (*at, e["id"].as_u64().expect("id"), e["talking"].as_bool().expect("talking")))
        })
        .collect()
}

/// Pumps the talkers for `duration`, reading every socket as it goes.
fn pump(
    talkers: &mut [ToneClient],
    sockets: &mut [&mut Raw],
    seen: &mut [Vec<(Instant, serde_json::Value)>],
    duration: Duration,
    flap: Option<Instant>,
) {
    let end = Instant::now() + duration;
    while Instant::now() < end {
        if let Some(start) = flap {
            // Each talker: 300 ms of tone, then 700 ms of silence (the server
            // holds "talking" 500 ms into a pause), phases staggered.
            let ms = start.elapsed().as_millis() as usize;
            let n = talkers.len();
            for (i, t) in talkers.iter_mut().enumerate() {
                t.talking = (ms + i * 1000 / n) % 1000 < 300;
            }
        }
        let mut refs: Vec<&mut ToneClient> = talkers.iter_mut().collect();
        run_for(&mut refs, Duration::from_millis(5));
        for (socket, seen) in sockets.iter_mut().zip(seen.iter_mut()) {
            let now = Instant::now();
            seen.extend(socket.drain().into_iter().map(|m| (now, m)));
        }
    }
}

#[test]
fn flapping_talkers_reach_sockets_at_a_bounded_rate_and_not_at_all_unasked() {
    let (_rt, server) = start();
    let api = server.http_addr();
    create_room(api, "busy");
    let mut all = Raw::connect(api, "/v1/rooms/busy/ws");
    let mut nothing = Raw::connect(api, "/v1/rooms/busy/ws?events=");
    let mut mutes = Raw::connect(api, "/v1/rooms/busy/ws?events=muted");
    let mut talkers: Vec<ToneClient> = (0..8)
        .map(|i| {
            let mut c = ToneClient::join(api, "busy", 300.0 + 50.0 * i as f32, JoinAs::Whip).expect("join");
            c.talking = false;
            c
        })
        .collect();
    let mut seen = vec![Vec::new(), Vec::new(), Vec::new()];
    // Connected and quiet (the joins' batch went out).
    pump(&mut talkers, &mut [&mut all, &mut nothing, &mut mutes], &mut seen, Duration::from_secs(2), None);
    assert!(talkers.iter().all(|t| t.connected), "every talker connected");
    for s in &mut seen {
        s.clear();
    }

    let window = Duration::from_secs(4);
    let start = Instant::now();
    pump(&mut talkers, &mut [&mut all, &mut nothing, &mut mutes], &mut seen, window, Some(start));
    let elapsed = start.elapsed();
    let batches = seen[0].iter().filter(|(_, m)| m["type"] == "events").count();
    let changes = talking(&seen[0]);
    // Sixteen changes a second are asked for; what reaches the socket is bounded by the interval.
    let bound = (elapsed.as_secs_f64() / INTERVAL.as_secs_f64()).ceil() as usize + 2;
    assert!(
        batches <= bound,
        "{batches} event messages in {elapsed:?}: more than one per {INTERVAL:?} (bound {bound})"
    );
    assert!(changes.len() >= 8, "the flapping is told ({} talking changes in {batches} messages)", changes.len());
    // Per batch, one change per participant at most (coalesced).
    for (_, m) in seen[0].iter().filter(|(_, m)| m["type"] == "events") {
        let ids: Vec<u64> = m["events"].as_array().into_iter().flatten().filter_map(|e| e["id"].as_u64()).collect();
        let mut unique = ids.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(ids.len(), unique.len(), "a participant named twice in one batch: {m}");
    }
    assert!(
        seen[1].iter().all(|(_, m)| m["type"] != "events"),
        "a socket subscribed to nothing gets no events: {:?}",
        seen[1].iter().map(|(_, m)| m["type"].clone()).collect::<Vec<_>>()
    );
    assert!(talking(&seen[2]).is_empty(), "a socket that asked for mutes gets no talking");

    // Quiet again; then one talker starts: told within a generous bound
    // (the voice detector, an interval, a busy test machine).
    for t in &mut talkers {
        t.talking = false;
    }
    pump(&mut talkers, &mut [&mut all], &mut seen[..1], Duration::from_millis(1500), None);
    seen[0].clear();
    talkers[3].talking = true;
    let id = talkers[3].id;
    let asked = Instant::now();
    let deadline = asked + WAIT;
    while Instant::now() < deadline && !talking(&seen[0]).iter().any(|c| c.1 == id && c.2) {
        pump(&mut talkers, &mut [&mut all], &mut seen[..1], Duration::from_millis(20), None);
    }
    let told = talking(&seen[0]).into_iter().find(|c| c.1 == id && c.2).expect("the start is told");
    let latency = told.0 - asked;
    assert!(latency < Duration::from_secs(2), "told {latency:?} after the tone started");
    eprintln!(
        "{batches} event messages, {} talking changes in {elapsed:?}; a start told in {latency:?}",
        changes.len()
    );
}

#[test]
fn a_big_rooms_snapshot_comes_in_bounded_messages_that_add_up() {
    let (_rt, server) = start();
    let api = server.http_addr();
    create_room(api, "big");
    // Joined over HTTP and never connected: members all the same until their ICE timeout.
    let clients: Vec<ToneClient> =
        (0..70).map(|i| ToneClient::join(api, "big", 200.0 + i as f32, JoinAs::Whip).expect("join")).collect();
    let mut socket = Raw::connect(api, "/v1/rooms/big/ws");
    let deadline = Instant::now() + WAIT;
    let mut messages = Vec::new();
    while Instant::now() < deadline && messages.last().is_none_or(|m: &serde_json::Value| m["more"] != 0) {
        messages.extend(socket.drain());
        std::thread::sleep(Duration::from_millis(10));
    }
    // The snapshot ends with the message whose `more` is 0; the room's event
    // batches follow it (one may come in the same read).
    if let Some(end) = messages.iter().position(|m| m["more"] == 0) {
        messages.truncate(end + 1);
    }
    // 16 participants a message: `room` and four `participants`, `more` counting down.
    assert_eq!(messages[0]["type"], "room", "{}", messages[0]);
    assert_eq!(messages.len(), 5, "{messages:?}");
    for (i, m) in messages.iter().enumerate() {
        assert_eq!(m["type"], if i == 0 { "room" } else { "participants" });
        let n = m["participants"].as_array().map_or(0, Vec::len);
        assert_eq!(n, if i < 4 { 16 } else { 6 }, "message {i}");
        assert_eq!(m["more"], 70 - 16 * i.min(4) - n, "message {i}");
    }
    let mut ids: Vec<u64> = messages
        .iter()
        .flat_map(|m| m["participants"].as_array().into_iter().flatten())
        .filter_map(|p| p["id"].as_u64())
        .collect();
    ids.sort_unstable();
    let mut want: Vec<u64> = clients.iter().map(|c| c.id).collect();
    want.sort_unstable();
    assert_eq!(ids, want, "everyone, once");
}
