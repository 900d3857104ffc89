//! The WebSocket `GET /v1/rooms/{room}/ws`: room events pushed as they
//! happen, and joining with an offer message.
//!
//! Server → client (JSON text, field `type`): `room` (a snapshot, first,
//! and again after the socket fell behind: its first 16 `participants` and
//! `more`, how many follow in `participants` `{participants, more}`
//! messages right after it, `more` counting down to 0), `answer` `{id,
//! sdp}`, `error` `{code, message}`, and `events` `{events: […]}`: the
//! room's events since the last batch, in order, each one of `joined` `{id,
//! name}`, `left` `{id, reason}`, `talking` `{id, talking}`, `muted` `{id,
//! muted}`, `room_closed`, `shutdown` `{message}`, and the stage's
//! `permissions` `{id, speak}`, `hand` `{id, raised}`,
//! `attributes_changed` `{id, attributes}` (the whole set now), `room_updated`
//! `{locked, max_participants, max_speakers}` and `muted_all` `{count}`
//! (with the `muted` kind). The snapshot says whether the socket's token is
//! an admin's for the room (`admin`) and whether the room is `locked`. At
//! most one `events` message per 260 ms reaches a socket (13 ticks, see
//! `room::event`; the first after a quiet spell comes at the next tick),
//! however many people join or talk at once: `talking` changes within it
//! are coalesced (a participant is named once, with its state now, and not
//! at all if it is back to what was last told; `talking` follows the
//! batch's other events). A batch is serialized once for every socket that
//! takes every kind, and once for each other set of kinds asked for (the
//! bytes shared, never copied per socket). In cluster mode
//! a socket opened on a node that does not hold the room gets `moved`
//! `{room, node, api_url, ticket}` (the page goes to
//! `<api_url>/v1/rooms/{room}/enter?ticket=…` to join there, see
//! `api::enter` and `crate::cluster`), then the room's `events` relayed from its owner
//! (`relay`), under the same limits as any room socket. On a node hosting
//! a room spread over nodes, the snapshot lists every node's participants
//! (the others' from their rosters) and the batches carry the other
//! nodes' participants' events (see `crate::cluster::roster`).
//!
//! Client → server: `join` `{sdp, name?}` (once per socket; the participant
//! leaves when the socket closes), `mute` `{muted}` (the socket's own
//! participant), `hand` `{raised, id?}` (the socket's own participant's
//! hand, or `id`'s: one of the caller's identity, or anyone's for an
//! admin), `set_attributes` `{attributes, id?}` (keys to set, `null` to
//! remove: the socket's own participant's, or `id`'s as for `hand`;
//! reserved keys are an admin's), `leave`, `subscribe` `{events: ["joined", "left",
//! "talking", "muted", "permissions", "hand", "room_updated",
//! "attributes_changed"]}` (the kinds
//! it wants from now on; also
//! `?events=joined,left` at the upgrade; default: all; `room_closed` and
//! `shutdown` always come).
//!
//! The access token comes as `?token=` (browsers cannot set headers on a
//! WebSocket) or as `Authorization: Bearer`; it is checked at the upgrade,
//! and its grant holds until the token expires: some time before (a
//! minute, or half the token's remaining life if shorter) the server sends
//! `token_expiring` `{expires_at}`, and the client sends `token` `{token}`,
//! a fresh token for the same identity that still covers the room (answered
//! `token_accepted` `{expires_at}`; a refused one gets `error`
//! `token_refused` and changes nothing). A socket whose token expires is
//! closed with 4001 `token_expired` (its participant leaves with reason
//! `token_expired`). One identity holds one participant per room: a join
//! with the identity of a participant already there replaces it, and the
//! replaced participant's socket is closed with 4409 `replaced`. An
//! identity holds at most `limits.ws_max_per_identity` sockets, and never
//! more than half of `limits.max_connections` (beyond: 429
//! `too_many_sockets` at the upgrade); its connections, sockets included,
//! count against its `limits.max_connections_per_identity`, not against
//! the address they come from (beyond: 429 `too_many_connections`, see
//! `api::client`). Limits
//! (`[limits]`): a message over `ws_max_message_bytes` closes the socket
//! with 1009; more than `ws_messages_per_second` (after a burst of
//! `ws_message_burst`) gets an `error` `rate_limited`, then close 1008;
//! nothing at all (not even a pong to our pings) for
//! `ws_idle_timeout_seconds` closes it with 4408.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;

pub(crate) mod frames;
mod relay;

pub(crate) use frames::{CLOSE_REPLACED, CLOSE_TOKEN_EXPIRED, close, websocket_required};

use super::access::authenticate_until;
use super::http::ConnectionSlot;
use super::state::ApiState;
use crate::auth::{Grant, unix_now};
use crate::cluster::locate::{Located, locate_for_socket};
use crate::cluster::nodes::rejoin_nodes;
use crate::cluster::roster;
use crate::limit::Bucket;
use crate::refusal::Refusal;
use crate::room::{EventKinds, LeaveReason, Room, RoomEvent};
use crate::session::grants::may_see;
use crate::session::join::{Joined, Offer, Place};
use frames::{
    CLOSE_IDLE, CLOSE_POLICY, CLOSE_TOO_BIG, Caller, LONGEST_WAIT, close_gracefully, deadline_of, move_message, too_big,
};

/// How long before its token's expiry a socket is warned, at most.
const EXPIRY_WARNING: Duration = Duration::from_secs(60);

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct WsParams {
    /// The access token (browsers cannot set headers on a WebSocket).
    token: Option<String>,
    /// The event kinds wanted, comma-separated (default: all).
    events: Option<String>,
    /// The protocol version the client speaks (default: the server's, 1);
    /// another is refused with 400 `unsupported_protocol` before the upgrade.
    protocol: Option<String>,
    /// Cluster mode, rooms that spread: the node the client was sent to
    /// (a `moved`'s `node`) or is on (the snapshot's `node`); a socket
    /// naming this node stays here rather than being placed again.
    node: Option<String>,
}

/// The read buffer of a socket: clients send small JSON messages (an SDP
/// offer is the largest), so a small buffer that grows when needed keeps a
/// room of thousands of sockets small.
const READ_BUFFER_BYTES: usize = 4096;
/// Most bytes queued for a client that does not read before its socket fails.
const MAX_WRITE_BUFFER_BYTES: usize = 1 << 20;

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ClientMessage {
    Join {
        sdp: String,
        #[serde(default)]
        name: String,
    },
    Mute {
        muted: bool,
    },
    Leave,
    /// Take over a participant whose socket was lost (see [`resume`]).
    Resume {
        id: u64,
        key: String,
    },
    Subscribe {
        events: Vec<String>,
    },
    /// A fresh access token for the socket (before the current one expires).
    Token {
        token: String,
    },
    /// Raise or lower a hand: the socket's own participant's, or `id`'s
    /// (the caller's own identity's, or anyone's for an admin).
    Hand {
        raised: bool,
        #[serde(default)]
        id: Option<u64>,
    },
    /// Set (a value) or remove (`null`) attributes: the socket's own
    /// participant's, or `id`'s (as for `hand`; reserved keys: admins only).
    SetAttributes {
        attributes: crate::attributes::AttributesPatch,
        #[serde(default)]
        id: Option<u64>,
    },
}

/// The room's WebSocket: events, joining with an offer (docs/api/websocket.md).
#[utoipa::path(
    get,
    path = "/v1/rooms/{room}/ws",
    tag = "websocket",
    operation_id = "room_socket",
    security(("bearer" = []), ("token_query" = [])),
    params(("room" = String, Path, description = "The room's id"), WsParams),
    responses(
        (status = 101, description = "Switching Protocols: the first message is `room` (or `moved`), with `protocol`"),
        (status = 400, description = "`unsupported_protocol`, `bad_events`, `websocket_required`", body = super::schema::ErrorBody),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`", body = super::schema::ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden`", body = super::schema::ErrorBody),
        (status = 429, description = "`too_many_sockets`, `too_many_connections` (the token's identity holds `limits.max_connections_per_identity`)", body = super::schema::ErrorBody),
        (status = 503, description = "`cluster_unavailable`", body = super::schema::ErrorBody),
    ),
)]
pub(crate) async fn upgrade(
    State(api): State<Arc<ApiState>>,
    Path(room): Path<String>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    slot: Option<axum::Extension<ConnectionSlot>>,
    headers: HeaderMap,
    params: Result<Query<WsParams>, axum::extract::rejection::QueryRejection>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let params = params.map(|Query(p)| p).unwrap_or_default();
    if let Some(e) = params.protocol.as_deref().and_then(unsupported_protocol) {
        return e.into_response();
    }
    let kinds = match params.events.as_deref().map(EventKinds::parse).transpose() {
        Ok(kinds) => kinds.unwrap_or(EventKinds::ALL),
        Err(message) => return Refusal::bad_request("bad_events", message).into_response(),
    };
    let (grant, expires_at) = match authenticate_until(&api, &headers, params.token.as_deref()).and_then(|g| {
        may_see(&g.0, &room)?;
        Ok(g)
    }) {
        Ok(grant) => grant,
        Err(e) => return e.into_response(),
    };
    // A bounded number of sockets per identity (anonymous callers, auth off,
    // are bounded by address only; the room's admins are trusted with more).
    let held = if api.auth.is_some() && !grant.identity.is_empty() && !grant.may_manage(&room) {
        // Never more than half the server's connections, whatever the setting.
        let limits = &api.cfg.limits;
        let half = (limits.max_connections / 2).max(1);
        let max = if limits.ws_max_per_identity == 0 { half } else { limits.ws_max_per_identity.min(half) };
        match api.ws_identities.acquire(&grant.identity, max) {
            Some(held) => Some(held),
            None => {
                let message = format!(
                    "identity '{}' has {max} WebSockets open already (limits.ws_max_per_identity, at most half of \
                     limits.max_connections)",
                    grant.identity
                );
                return Refusal::new(axum::http::StatusCode::TOO_MANY_REQUESTS, "too_many_sockets", message)
                    .into_response();
            }
        }
    } else {
        None
    };
    let located = match locate_for_socket(&api.node, &room, params.node.as_deref()).await {
        Ok(located) => located,
        Err(e) => return e.into_response(),
    };
    let ws = match ws {
        Ok(ws) => ws,
        Err(rejection) => return websocket_required(&rejection).into_response(),
    };
    let max = api.cfg.limits.ws_max_message_bytes;
    // The socket keeps its connection slot for as long as it is open.
    let slot = slot.map(|axum::Extension(s)| s);
    // The same limits for every room socket, relayed or not.
    let ws = ws
        .max_message_size(max)
        .max_frame_size(max)
        .read_buffer_size(READ_BUFFER_BYTES)
        .write_buffer_size(0)
        .max_write_buffer_size(MAX_WRITE_BUFFER_BYTES);
    let state = match located {
        Located::Here(state) => state,
        // Handshakes do not follow redirects: say where the room is, then
        // relay the room's events from its owner (see `relay`).
        Located::Elsewhere(owner) => {
            let caller = Caller { grant, client };
            return ws.on_upgrade(move |socket| async move {
                relay::relay(api, room, owner, caller, expires_at, socket).await;
                drop((slot, held));
            });
        }
    };
    ws.on_upgrade(move |socket| async move {
        session(api, state, socket, Caller { grant, client }, kinds, expires_at).await;
        drop((slot, held));
    })
}

/// The 400 for a `?protocol=` this server does not speak; `None` for its own.
fn unsupported_protocol(asked: &str) -> Option<Refusal> {
    let ours = super::schema::WS_PROTOCOL;
    (asked.trim().parse::<u32>().ok() != Some(ours)).then(|| {
        let asked: String = asked.chars().take(16).collect();
        Refusal::bad_request(
            "unsupported_protocol",
            format!("this server speaks WebSocket protocol {ours}, not '{asked}' (see docs/api/websocket.md)"),
        )
    })
}

fn text(value: &impl serde::Serialize) -> Message {
    Message::Text(serde_json::to_string(value).unwrap_or_default().into())
}

fn error(e: &Refusal) -> Message {
    text(&serde_json::json!({ "type": "error", "code": e.code, "message": e.message }))
}

/// Participants per snapshot message. A socket keeps a write buffer as
/// large as the largest message it ever sent (tungstenite never shrinks
/// it), so a room of 1,000 sent whole (~150 KB of JSON) would pin that
/// much memory on every socket for its life; in messages of 16 (a few KB,
/// no more than the join's answer) it pins little. Measured in a room of
/// 400: ~180 KiB of server RSS per participant with its socket sent whole
/// in 64s, ~160 in 16s, ~210 whole; ~145 without a socket.
pub(crate) const SNAPSHOT_CHUNK: usize = 16;

/// Sends the room's snapshot: `room` with the first [`SNAPSHOT_CHUNK`]
/// participants and `more` (how many are still to come), then as many
/// `participants` `{participants, more}` messages as needed, each counting
/// down `more` to 0. Nothing else is sent in between. Whether all were sent.
async fn send_snapshot(api: &ApiState, socket: &mut WebSocket, room: &Room, admin: bool) -> bool {
    // In a room spread over nodes, every node's participants (the others' from their rosters).
    let members = roster::participants(api.node.dir.as_ref(), &api.node.roster, room).await;
    let nodes = rejoin_nodes(&api.node.other_nodes, api.node.dir.as_ref()).await;
    let mut chunks = members.chunks(SNAPSHOT_CHUNK);
    let first = chunks.next().unwrap_or(&[]);
    let mut more = members.len() - first.len();
    let mut head = serde_json::json!({
        "type": "room",
        "protocol": super::schema::WS_PROTOCOL,
        "room": room.id,
        "admin": admin,
        "locked": room.is_locked(),
        "waiting": room.is_waiting(),
        "participants": first,
        "more": more,
        "speakers": room.speaker_ids(),
        "playbacks": room.playbacks(),
        "whispers": room.whispers(),
    });
    if !nodes.is_empty()
        && let Some(cluster) = &api.node.dir
    {
        // Only in clusters whose rooms spread (see `rejoin_nodes`): this
        // node (a resume names it) and where to go if it is lost.
        head["node"] = cluster.node_id().into();
        head["nodes"] = nodes.into();
    }
    if socket.send(text(&head)).await.is_err() {
        return false;
    }
    for chunk in chunks {
        more -= chunk.len();
        let next = text(&serde_json::json!({ "type": "participants", "participants": chunk, "more": more }));
        if socket.send(next).await.is_err() {
            return false;
        }
    }
    true
}

/// When to warn a socket whose token expires at `deadline`.
fn warning_of(deadline: tokio::time::Instant) -> tokio::time::Instant {
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    deadline - EXPIRY_WARNING.min(left / 2)
}

/// A `token` message: the socket's grant from now on, and its expiry, if
/// the token is valid, for the same identity, and still lets it see the room.
fn refresh(api: &ApiState, room: &Room, caller: &Caller, token: &str) -> Result<(Grant, u64), Refusal> {
    frames::fresh_grant(api, &caller.grant.identity, token, "socket", |grant| {
        // After a move (a breakout) the socket is in a room its token may not
        // cover: a token for what the old one covered is as good.
        if !grant.may_see(&room.id) && grant.room != caller.grant.room {
            return Err(format!("the new token is not for room '{}'", room.id));
        }
        Ok(())
    })
}

async fn session(
    api: Arc<ApiState>,
    mut room: Arc<Room>,
    mut socket: WebSocket,
    mut caller: Caller,
    kinds: EventKinds,
    expires_at: Option<u64>,
) {
    api.ws_sessions.fetch_add(1, Ordering::Relaxed);
    // The token's expiry (none with auth off), and the warning before it.
    let mut expires_at = expires_at;
    let mut deadline = expires_at.map_or(tokio::time::Instant::now() + LONGEST_WAIT, deadline_of);
    let mut warn_at = Some(warning_of(deadline)).filter(|_| expires_at.is_some());
    // Two timers for the socket's life, reset when the token changes (not
    // made again on every turn of the loop, i.e. every message).
    let expiry = tokio::time::sleep_until(deadline);
    tokio::pin!(expiry);
    let warning = tokio::time::sleep_until(warn_at.unwrap_or(deadline));
    tokio::pin!(warning);
    let limits = &api.cfg.limits;
    let (rate, burst) = (limits.ws_messages_per_second, limits.ws_message_burst);
    let idle = Duration::from_secs_f64(limits.ws_idle_timeout_seconds);
    let mut bucket = Bucket::full(burst, Instant::now());
    let mut heard_at = Instant::now();
    let mut pings = tokio::time::interval_at(tokio::time::Instant::now() + idle / 3, idle / 3);
    let mut events = room.subscribe();
    let mut data = room.subscribe_data();
    // When this socket was last told that its data messages are dropped (at most once a second).
    let mut data_refused_at: Option<Instant> = None;
    // A room handed over before this socket came is told at once.
    let mut moved = room.moved_to();
    moved.mark_changed();
    let mut me: Option<u64> = None;
    // The client closed with a close frame (it meant to go), or the socket was lost.
    let mut clean = false;
    let mut kinds = kinds;
    let mut admin = caller.grant.may_manage(&room.id);
    let mut ok = send_snapshot(&api, &mut socket, &room, admin).await;
    while ok {
        tokio::select! {
            () = &mut expiry => {
                if expires_at.is_none_or(|exp| unix_now() < exp) {
                    // Not expired (no expiry, or further off than one wait): wait again.
                    deadline = expires_at.map_or(tokio::time::Instant::now() + LONGEST_WAIT, deadline_of);
                    expiry.as_mut().reset(deadline);
                    continue;
                }
                if let Some(id) = me.take() {
                    api.session.resumes.forget(id);
                    api.session.leave(&room, id, LeaveReason::TokenExpired);
                }
                close_gracefully(&mut socket, CLOSE_TOKEN_EXPIRED, "token_expired").await;
                tracing::info!(room = %room.id, client = %caller.client, "WebSocket closed: its token expired");
                break;
            }
            () = &mut warning, if warn_at.is_some() => {
                warn_at = None;
                let warning = serde_json::json!({ "type": "token_expiring", "expires_at": expires_at });
                ok = socket.send(text(&warning)).await.is_ok();
            }
            msg = socket.recv() => {
                heard_at = Instant::now();
                // Data messages have their own limit, per sender (`limits.data_messages_per_second`).
                if let Some(Ok(Message::Text(t))) = &msg
                    && let Some(d) = data_message(t.as_str())
                {
                    let sent = match me {
                        Some(id) => api.session.send_data(&room, Some(id), &d.topic, d.payload, d.to).map(|_| ()),
                        None => Err(Refusal::bad_request("not_joined", "join first: a data message is a participant's")),
                    };
                    if let Err(e) = sent {
                        let quiet = e.code == "rate_limited"
                            && data_refused_at.is_some_and(|at| at.elapsed() < Duration::from_secs(1));
                        if !quiet {
                            if e.code == "rate_limited" {
                                data_refused_at = Some(heard_at);
                            }
                            ok = socket.send(error(&e)).await.is_ok();
                        }
                    }
                    continue;
                }
                if matches!(msg, Some(Ok(_))) && bucket.take(rate, burst, heard_at).is_err() {
                    let e = Refusal::new(
                        axum::http::StatusCode::TOO_MANY_REQUESTS,
                        "rate_limited",
                        format!("more than {rate} messages per second; closing"),
                    );
                    let _ = socket.send(error(&e)).await;
                    close_gracefully(&mut socket, CLOSE_POLICY, "message rate exceeded").await;
                    tracing::info!(room = %room.id, client = %caller.client, "WebSocket closed: message rate exceeded");
                    break;
                }
                let reply = match msg {
                    Some(Ok(Message::Text(t))) if is_token_message(t.as_str()) => {
                        let token = serde_json::from_str::<ClientMessage>(t.as_str()).ok().and_then(|m| match m {
                            ClientMessage::Token { token } => Some(token),
                            _ => None,
                        });
                        match refresh(&api, &room, &caller, token.as_deref().unwrap_or("")) {
                            Ok((grant, exp)) => {
                                caller.grant = grant;
                                admin = caller.grant.may_manage(&room.id);
                                expires_at = Some(exp);
                                deadline = deadline_of(exp);
                                warn_at = Some(warning_of(deadline));
                                expiry.as_mut().reset(deadline);
                                warning.as_mut().reset(warning_of(deadline));
                                tracing::debug!(room = %room.id, client = %caller.client, exp, "WebSocket token refreshed");
                                Some(text(&serde_json::json!({ "type": "token_accepted", "expires_at": exp })))
                            }
                            Err(e) => Some(error(&e)),
                        }
                    }
                    Some(Ok(Message::Text(t))) => handle(&api, &room, &caller, &mut me, &mut kinds, t.as_str()).await,
                    Some(Ok(Message::Binary(_))) => {
                        Some(error(&Refusal::new(axum::http::StatusCode::BAD_REQUEST, "bad_message", "send JSON text messages")))
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => None,
                    Some(Ok(Message::Close(_))) => {
                        clean = true;
                        break;
                    }
                    None => break,
                    Some(Err(e)) => {
                        // The one read error a client can cause on purpose: a
                        // message over the limit. Say so, if the socket still takes it.
                        if too_big(&e) {
                            let _ = socket.send(close(CLOSE_TOO_BIG, "message too big")).await;
                        }
                        tracing::debug!(room = %room.id, client = %caller.client, error = %e, "WebSocket read failed");
                        break;
                    }
                };
                if let Some(reply) = reply {
                    ok = socket.send(reply).await.is_ok();
                }
            }
            _ = pings.tick() => {
                if heard_at.elapsed() >= idle {
                    close_gracefully(&mut socket, CLOSE_IDLE, "idle timeout").await;
                    tracing::info!(room = %room.id, client = %caller.client, "WebSocket closed: idle");
                    break;
                }
                ok = socket.send(Message::Ping(Default::default())).await.is_ok();
            }
            message = data.recv() => match message {
                Ok(message) => {
                    if message.is_for(me)
                        && let Ok(json) = Utf8Bytes::try_from(message.json.clone())
                    {
                        ok = socket.send(Message::Text(json)).await.is_ok();
                    }
                }
                // Best effort: a socket that fell behind loses the oldest, counted.
                Err(RecvError::Lagged(n)) => crate::metrics::data_messages("lagged", n),
                // The room holds the sender while this socket holds the room: not before the room goes.
                Err(RecvError::Closed) => break,
            },
            batch = events.recv() => match batch {
                Ok(batch) => {
                    let last = batch.events.iter().find_map(|e| match e {
                        RoomEvent::Shutdown { .. } => Some("server shutting down"),
                        RoomEvent::RoomClosed => Some("room closed"),
                        _ => None,
                    });
                    let mut replaced = false;
                    let mut moved_into = None;
                    if let Some(id) = me
                        && let Some(reason) = batch.events.iter().find_map(|e| match e {
                            RoomEvent::Left { id: left, reason } if *left == id => Some(*reason),
                            _ => None,
                        })
                    {
                        // Moved to another room of this node (a breakout): the socket follows.
                        let to = (reason == LeaveReason::MovedRoom.as_str())
                            .then(|| api.rooms.room_of(id))
                            .flatten()
                            .filter(|to| to.key != room.key);
                        if to.is_some() {
                            moved_into = to;
                        } else {
                            api.session.resumes.forget(id);
                            me = None;
                            replaced = reason == LeaveReason::Replaced.as_str();
                        }
                    }
                    if let Some(json) = batch.for_kinds(kinds)
                        && let Ok(json) = Utf8Bytes::try_from(json)
                    {
                        ok = socket.send(Message::Text(json)).await.is_ok();
                    }
                    if let Some(reason) = last {
                        close_gracefully(&mut socket, 1001, reason).await;
                        break;
                    }
                    if let Some(to) = moved_into
                        && let Some(id) = me
                    {
                        let from = std::mem::replace(&mut room, to);
                        (events, moved, data) = (room.subscribe(), room.moved_to(), room.subscribe_data());
                        admin = caller.grant.may_manage(&room.id);
                        ok = ok && follow(&api, &mut socket, &from, &room, id, admin).await;
                        continue;
                    }
                    if replaced {
                        // Another socket (a tab, a device) joined with this identity: it has the seat now.
                        close_gracefully(&mut socket, CLOSE_REPLACED, "replaced").await;
                        tracing::info!(room = %room.id, client = %caller.client, "WebSocket closed: its participant was replaced");
                        break;
                    }
                }
                // Missed events: counted, and start again from a fresh snapshot.
                Err(RecvError::Lagged(n)) => {
                    crate::metrics::ws_lagged(n);
                    // A move among the missed events: follow it rather than show the old room.
                    if let Some(id) = me
                        && let Some(to) = api.rooms.room_of(id).filter(|to| to.key != room.key)
                    {
                        let from = std::mem::replace(&mut room, to);
                        (events, moved, data) = (room.subscribe(), room.moved_to(), room.subscribe_data());
                        admin = caller.grant.may_manage(&room.id);
                        ok = follow(&api, &mut socket, &from, &room, id, admin).await;
                    } else {
                        ok = send_snapshot(&api, &mut socket, &room, admin).await;
                    }
                }
                Err(RecvError::Closed) => break,
            },
            // The room was handed over to another node (a drain): say where to
            // rejoin. The participant stays here until its client closes the
            // socket (having joined there: no gap), or the drain ends.
            Ok(()) = moved.changed() => {
                let to = moved.borrow_and_update().clone();
                if let Some(to) = to {
                    ok = socket.send(move_message(&api, &room, &caller.grant, me, &to, expires_at)).await.is_ok();
                }
            }
        }
    }
    if let Some(id) = me {
        api.session.socket_gone(&room, id, clean);
    }
    api.ws_sessions.fetch_sub(1, Ordering::Relaxed);
}

/// Tells a socket that its participant `id` was moved from `from` to `to`
/// (a breakout; the caller subscribed it to `to` already): `room_changed`,
/// then a snapshot of `to`. Its resume key now resumes it there. Whether
/// all was sent.
async fn follow(api: &ApiState, socket: &mut WebSocket, from: &Room, to: &Room, id: u64, admin: bool) -> bool {
    api.session.resumes.rehome(id, &to.id);
    tracing::info!(from = %from.id, to = %to.id, participant = id, "WebSocket follows its participant to another room");
    let changed = serde_json::json!({ "type": "room_changed", "room": to.id, "from": from.id, "id": id });
    socket.send(text(&changed)).await.is_ok() && send_snapshot(api, socket, to, admin).await
}

/// A `data` message, as a client sends it (read apart from [`ClientMessage`]:
/// its payload is kept as the JSON text it came as).
#[derive(Deserialize)]
struct DataIn<'a> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    topic: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    payload: &'a serde_json::value::RawValue,
    #[serde(default)]
    to: Option<Vec<u64>>,
}

/// A `data` message, if `text` is one.
fn data_message(text: &str) -> Option<DataIn<'_>> {
    serde_json::from_str::<DataIn<'_>>(text).ok().filter(|d| d.kind == "data")
}

/// Whether a text message is a `token` message (handled by the session, which owns the socket's grant).
fn is_token_message(text: &str) -> bool {
    #[derive(Deserialize)]
    struct Kind<'a> {
        #[serde(rename = "type", borrow)]
        kind: std::borrow::Cow<'a, str>,
    }
    serde_json::from_str::<Kind<'_>>(text).is_ok_and(|k| k.kind == "token")
}

/// One client message; the reply to send, if any.
pub(crate) async fn handle(
    api: &ApiState,
    room: &Arc<Room>,
    caller: &Caller,
    me: &mut Option<u64>,
    kinds: &mut EventKinds,
    text_msg: &str,
) -> Option<Message> {
    let bad = |code, message: String| Some(error(&Refusal::new(axum::http::StatusCode::BAD_REQUEST, code, message)));
    let msg: ClientMessage = match serde_json::from_str(text_msg) {
        Ok(m) => m,
        Err(e) => return bad("bad_message", format!("not a message tutti knows: {e}")),
    };
    match msg {
        ClientMessage::Join { sdp, name } => {
            if me.is_some() {
                return bad("already_joined", "this socket has joined already; open another to join again".into());
            }
            let request = crate::session::join::JoinRequest {
                room: &room.id,
                grant: &caller.grant,
                client: caller.client.ip(),
                place: Place::Given(room),
                plain: false,
            };
            match api.session.join(request, || Ok(Offer { sdp, name })).await {
                // A given room is never elsewhere.
                Ok(Joined::Elsewhere(_)) => {
                    Some(error(&Refusal::from(crate::room::RoomError::NoRoom(room.id.clone()))))
                }
                Ok(Joined::Here { id, answer }) => {
                    *me = Some(id);
                    let key = api.session.resumes.issue(&room.id, id);
                    Some(text(&serde_json::json!({ "type": "answer", "id": id, "sdp": answer, "resume": key })))
                }
                Err(e) => Some(error(&e)),
            }
        }
        ClientMessage::Mute { muted } => match *me {
            Some(id) => api.session.set_muted(room, id, muted).err().map(|e| error(&e)),
            None => bad("not_joined", "join first".into()),
        },
        // The session takes these itself (it owns the socket's grant and timers).
        ClientMessage::Token { .. } => Some(error(&Refusal::new(
            axum::http::StatusCode::BAD_REQUEST,
            "token_refused",
            "a token is only taken by an open room socket",
        ))),
        ClientMessage::Subscribe { events } => match EventKinds::from_names(&events) {
            Ok(k) => {
                *kinds = k;
                None
            }
            Err(message) => bad("bad_events", message),
        },
        ClientMessage::Hand { raised, id } => {
            let Some(target) = id.or(*me) else {
                return bad("not_joined", "join first, or name the participant: {\"type\":\"hand\",\"id\":…}".into());
            };
            api.session.set_hand(room, &caller.grant, *me, target, raised).err().map(|e| error(&e))
        }
        ClientMessage::SetAttributes { attributes, id } => {
            let Some(target) = id.or(*me) else {
                return bad(
                    "not_joined",
                    "join first, or name the participant: {\"type\":\"set_attributes\",\"id\":…}".into(),
                );
            };
            api.session.set_attributes(room, &caller.grant, *me, target, &attributes).err().map(|e| error(&e))
        }
        ClientMessage::Resume { id, key } => {
            if me.is_some() {
                return bad("already_joined", "this socket holds a participant already".into());
            }
            match api.session.resumes.resume(&room.id, id, &key) {
                Ok(()) => {
                    *me = Some(id);
                    tracing::info!(room = %room.id, participant = id, "WebSocket resumed");
                    Some(text(&serde_json::json!({ "type": "resumed", "id": id })))
                }
                Err(_) => Some(error(&Refusal::new(
                    axum::http::StatusCode::NOT_FOUND,
                    "resume_failed",
                    format!(
                        "participant {id} is not waiting for a socket here (it left, the grace period ended, or the key is wrong): join again"
                    ),
                ))),
            }
        }
        ClientMessage::Leave => match me.take() {
            Some(id) => {
                api.session.resumes.forget(id);
                api.session.socket_leave(room, id);
                None
            }
            None => bad("not_joined", "join first".into()),
        },
    }
}
