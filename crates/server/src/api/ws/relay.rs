//! A room WebSocket on a cluster node that does not hold the room: the
//! room's events reach it anyway, relayed from the owner through Redis
//! pub/sub (`tutti_cluster::Cluster::watch`).
//!
//! ```text
//! WS /v1/rooms/r/ws on node B, r held by A
//!   B ─► "moved" {room, node, api_url, ticket}  (a client that wants to join goes there; the page
//!                                               does, with the single-use ticket: see crate::cluster)
//!   A: room r's event batch ─► PUBLISH events:r ─► B: watch(r) ─► this socket, as A's sockets get it
//!   client sends anything but close ─► error room_elsewhere (joining needs the owner's socket)
//!   r closed (room_closed / shutdown) ─► close 1000; r now hosted on B ─► "moved" to B, close 4307
//!   Redis unavailable ─► close 4307 after "moved" (the socket cannot be served here)
//! ```
//!
//! The limits of a local room socket hold here too (`[limits]`): a message
//! over `ws_max_message_bytes` closes with 1009 (the upgrade sets the
//! size limit for both kinds), more than `ws_messages_per_second` (after
//! `ws_message_burst`) gets `rate_limited` and close 1008, silence for
//! `ws_idle_timeout_seconds` closes with 4408.
//!
//! What is relayed is checked first, as a spread room checks another
//! node's events (anyone who can write to Redis can publish on a room's
//! channel): a batch over `MAX_RELAYED_BATCH_BYTES` or that is not an
//! `events` batch is dropped, and of its events only the kinds a room
//! tells its sockets (`joined` … `whisper_closed`, never `moved`) go on,
//! re-serialized. A `moved` reaches the client from this node only, built
//! from the owner's signed node record.
//!
//! The relay is best effort like the cluster's event channel: no `room`
//! snapshot (ask the owner, `GET /v1/rooms/{room}` on any node, or open
//! the socket there), no `subscribe` filtering; a watcher that falls
//! behind loses the oldest batches (counted as `lagged` in the log).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ws::{Message, WebSocket};
use tokio::sync::broadcast::error::RecvError;
use tutti_cluster::Owner;

use super::frames::{CLOSE_IDLE, CLOSE_POLICY, CLOSE_TOO_BIG, Caller, close, close_gracefully, moved_message, too_big};
use crate::api::state::ApiState;
use crate::cluster::tickets::CLOSE_MOVED;
use crate::limit::Bucket;

/// Client messages answered with an error before the relay closes the socket.
const MAX_CLIENT_MESSAGES: u32 = 32;

fn text(value: &serde_json::Value) -> Message {
    Message::Text(value.to_string().into())
}

/// The event kinds a room's batches carry (`RoomEvent`'s): the only ones relayed.
const RELAYED_KINDS: [&str; 22] = [
    "joined",
    "left",
    "talking",
    "muted",
    "permissions",
    "hand",
    "deaf",
    "room_updated",
    "muted_all",
    "room_closed",
    "shutdown",
    "draining",
    "recording_started",
    "recording_stopped",
    "recording_finished",
    "playback_started",
    "playback_stopped",
    "playback_finished",
    "whisper_opened",
    "whisper_changed",
    "whisper_closed",
    "keypad",
];

/// What of a batch published on the room's channel goes to the socket:
/// the `events` batch re-serialized with only the [`RELAYED_KINDS`]
/// events, and whether it ends the room (`room_closed`, `shutdown`);
/// `None` for anything else (too long, unreadable, nothing left).
fn relayable(json: &str) -> Option<(String, bool)> {
    #[derive(serde::Deserialize)]
    struct Batch {
        #[serde(rename = "type")]
        kind: String,
        events: Vec<serde_json::Map<String, serde_json::Value>>,
    }
    if json.len() > crate::room::MAX_RELAYED_BATCH_BYTES {
        return None;
    }
    let batch = serde_json::from_str::<Batch>(json).ok().filter(|b| b.kind == "events")?;
    let kind =
        |e: &serde_json::Map<String, serde_json::Value>| e.get("type").and_then(|t| t.as_str()).map(str::to_owned);
    let events: Vec<_> =
        batch.events.into_iter().filter(|e| kind(e).is_some_and(|k| RELAYED_KINDS.contains(&k.as_str()))).collect();
    if events.is_empty() {
        return None;
    }
    let last = events.iter().any(|e| kind(e).is_some_and(|k| k == "room_closed" || k == "shutdown"));
    Some((serde_json::json!({ "type": "events", "events": events }).to_string(), last))
}

/// Serves a socket for `room`, held by `owner`, until the client leaves,
/// the room closes or moves here, or the socket idles out. `token_exp`: the
/// expiry of the caller's token, which the `moved` ticket carries.
pub(crate) async fn relay(
    api: Arc<ApiState>,
    room: String,
    owner: Owner,
    caller: Caller,
    token_exp: Option<u64>,
    mut socket: WebSocket,
) {
    let moved = |node: &str, url: &str| text(&moved_message(&api, &room, node, url, &caller.grant, token_exp));
    // Subscribed before `moved` goes out: every batch published after it reaches the client.
    let watched = match &api.node.dir {
        Some(c) => c.watch(&room).await,
        None => return,
    };
    if socket.send(moved(&owner.node_id, &owner.api_url)).await.is_err() {
        return;
    }
    let mut events = match watched {
        Ok(rx) => rx,
        Err(e) => {
            tracing::debug!(room, error = %e, "room events cannot be relayed here; the socket closes");
            close_gracefully(&mut socket, CLOSE_MOVED, "room is on another node").await;
            return;
        }
    };
    let limits = &api.cfg.limits;
    let (rate, burst) = (limits.ws_messages_per_second, limits.ws_message_burst);
    let mut bucket = Bucket::full(burst, Instant::now());
    let idle = Duration::from_secs_f64(limits.ws_idle_timeout_seconds.max(1.0));
    let mut heard_at = Instant::now();
    let mut pings = tokio::time::interval_at(tokio::time::Instant::now() + idle / 3, idle / 3);
    let mut client_messages = 0u32;
    loop {
        tokio::select! {
            event = events.recv() => match event {
                Ok(e) => {
                    let Some((batch, last)) = relayable(&e.event) else {
                        tracing::debug!(room, node = e.origin, "a relayed batch that is not a room's events was dropped");
                        continue;
                    };
                    if socket.send(Message::Text(batch.into())).await.is_err() {
                        break;
                    }
                    if last {
                        close_gracefully(&mut socket, 1000, "room closed").await;
                        break;
                    }
                }
                Err(RecvError::Lagged(n)) => {
                    crate::metrics::ws_lagged(n);
                    tracing::info!(room, lagged = n, "relayed WebSocket fell behind");
                }
                Err(RecvError::Closed) => break,
            },
            msg = socket.recv() => {
                heard_at = Instant::now();
                if matches!(msg, Some(Ok(_))) && bucket.take(rate, burst, heard_at).is_err() {
                    let error = serde_json::json!({
                        "type": "error",
                        "code": "rate_limited",
                        "message": format!("more than {rate} messages per second; closing"),
                    });
                    let _ = socket.send(text(&error)).await;
                    close_gracefully(&mut socket, CLOSE_POLICY, "message rate exceeded").await;
                    tracing::info!(room, client = %caller.client, "relayed WebSocket closed: message rate exceeded");
                    break;
                }
                match msg {
                    Some(Err(e)) => {
                        if too_big(&e) {
                            let _ = socket.send(close(CLOSE_TOO_BIG, "message too big")).await;
                        }
                        tracing::debug!(room, client = %caller.client, error = %e, "relayed WebSocket read failed");
                        break;
                    }
                    Some(Ok(Message::Close(_))) | None => break,
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                    Some(Ok(_)) => {
                        client_messages += 1;
                        let error = serde_json::json!({
                            "type": "error",
                            "code": "room_elsewhere",
                            "message": format!("room '{room}' is on node {}: open the socket at {}", owner.node_id, owner.api_url),
                        });
                        if client_messages > MAX_CLIENT_MESSAGES || socket.send(text(&error)).await.is_err() {
                            close_gracefully(&mut socket, CLOSE_MOVED, "room is on another node").await;
                            break;
                        }
                    }
                }
            }
            _ = pings.tick() => {
                if heard_at.elapsed() >= idle {
                    close_gracefully(&mut socket, CLOSE_IDLE, "idle timeout").await;
                    break;
                }
                // Placed here meanwhile (its owner died): this node's own events
                // are not relayed; send the client to this node's socket.
                if api.rooms.get(&room).is_ok() {
                    let (node, url) = api.node.dir.as_ref().map_or((String::new(), String::new()), |c| {
                        (c.node_id().to_owned(), c.config().api_url.clone())
                    });
                    if socket.send(moved(&node, &url)).await.is_ok() {
                        close_gracefully(&mut socket, CLOSE_MOVED, "room moved here").await;
                    }
                    break;
                }
                if socket.send(Message::Ping(Default::default())).await.is_err() {
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::relayable;

    #[test]
    fn only_room_events_are_relayed() {
        let ok = r#"{"type":"events","events":[{"type":"joined","id":4294967297,"name":"ann"}]}"#;
        assert_eq!(relayable(ok).map(|(_, last)| last), Some(false));
        let closed = r#"{"type":"events","events":[{"type":"room_closed"}]}"#;
        assert_eq!(relayable(closed).map(|(_, last)| last), Some(true));
        let moved = r#"{"type":"moved","room":"r","node":"x","api_url":"https://evil.example"}"#;
        assert!(relayable(moved).is_none(), "a forged moved");
        let inner = r#"{"type":"events","events":[{"type":"moved","api_url":"https://evil.example"},{"type":"hand","id":1,"raised":true}]}"#;
        let (batch, _) = relayable(inner).expect("the hand event stays");
        assert!(!batch.contains("moved") && batch.contains("hand"), "{batch}");
        let huge =
            format!(r#"{{"type":"events","events":[{{"type":"shutdown","message":"{}"}}]}}"#, "x".repeat(2 << 20));
        assert!(relayable(&huge).is_none(), "a batch over the bound");
        for junk in ["", "null", "{}", r#"{"type":"events","events":[1]}"#, r#"{"type":"events","events":[]}"#] {
            assert!(relayable(junk).is_none(), "{junk}");
        }
    }
}
