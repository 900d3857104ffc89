//! The WebSocket `GET /v1/rooms/{room}/ws`: room events pushed as they
//! happen, and joining with an offer message.
//!
//! Server → client (JSON text, field `type`): `room` (a snapshot, first,
//! and again after the socket fell behind), `answer` `{id, sdp}`, `error`
//! `{code, message}`, and `events` `{events: […]}`: the room's events of one
//! 20 ms tick, in order, each one of `joined` `{id, name}`, `left` `{id,
//! reason}`, `talking` `{id, talking}`, `muted` `{id, muted}`,
//! `room_closed`, `shutdown` `{message}`, and the stage's `permissions`
//! `{id, speak}`, `hand` `{id, raised}`, `room_updated` `{locked,
//! max_participants, max_speakers}` and `muted_all` `{count}` (with the
//! `muted` kind). The snapshot says whether the socket's token is an
//! admin's for the room (`admin`) and whether the room is `locked`. At most one `events` message per
//! tick reaches a socket, however many people join at once, and it is
//! serialized once for every socket that takes every kind. In cluster mode
//! a socket opened on a node that does not hold the room gets `moved`
//! `{room, node, api_url, ticket}` (the page goes to
//! `<api_url>/v1/rooms/{room}/enter?ticket=…` to join there, see
//! `api::cluster`), then the room's `events` relayed from its owner
//! (`relay`), under the same limits as any room socket.
//!
//! Client → server: `join` `{sdp, name?}` (once per socket; the participant
//! leaves when the socket closes), `mute` `{muted}` (the socket's own
//! participant), `hand` `{raised, id?}` (the socket's own participant's
//! hand, or `id`'s: one of the caller's identity, or anyone's for an
//! admin), `leave`, `subscribe` `{events: ["joined", "left",
//! "talking", "muted", "permissions", "hand", "room_updated"]}` (the kinds
//! it wants from now on; also
//! `?events=joined,left` at the upgrade; default: all; `room_closed` and
//! `shutdown` always come).
//!
//! The access token comes as `?token=` (browsers cannot set headers on a
//! WebSocket) or as `Authorization: Bearer`; it is checked once, at the
//! upgrade, and its grant holds for the socket's life. Limits
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
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;

mod relay;
mod resume;

pub(crate) use resume::Resumes;

use super::cluster::Located;
use super::error::ApiError;
use super::http::ConnectionSlot;
use super::limit::Bucket;
use super::{ApiState, authenticate, join_room, may_join, may_see};
use crate::auth::Grant;
use crate::room::{EventKinds, LeaveReason, Room, RoomEvent};
use crate::sync::lock;

/// Close code: a message over the size limit (RFC 6455 §7.4.1).
pub(super) const CLOSE_TOO_BIG: u16 = 1009;
/// Close code: the message rate was exceeded (policy violation).
pub(super) const CLOSE_POLICY: u16 = 1008;
/// Close code: nothing arrived for the idle timeout (4000–4999: the application's).
pub(super) const CLOSE_IDLE: u16 = 4408;

#[derive(Debug, Default, Deserialize)]
pub(crate) struct WsParams {
    token: Option<String>,
    /// The event kinds wanted, comma-separated (default: all).
    events: Option<String>,
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
    /// Raise or lower a hand: the socket's own participant's, or `id`'s
    /// (the caller's own identity's, or anyone's for an admin).
    Hand {
        raised: bool,
        #[serde(default)]
        id: Option<u64>,
    },
}

/// Who is on the other end of a socket, and what they may do.
pub(crate) struct Caller {
    pub(crate) grant: Grant,
    pub(crate) client: SocketAddr,
}

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
    let kinds = match params.events.as_deref().map(EventKinds::parse).transpose() {
        Ok(kinds) => kinds.unwrap_or(EventKinds::ALL),
        Err(message) => return ApiError::bad_request("bad_events", message).into_response(),
    };
    let grant = match authenticate(&api, &headers, params.token.as_deref()).and_then(|g| {
        may_see(&g, &room)?;
        Ok(g)
    }) {
        Ok(grant) => grant,
        Err(e) => return e.into_response(),
    };
    let located = match super::cluster::locate_for_join(&api, &room, false).await {
        Ok(located) => located,
        Err(e) => return e.into_response(),
    };
    let ws = match ws {
        Ok(ws) => ws,
        Err(rejection) => {
            let message = format!("this endpoint speaks WebSocket only: {}", rejection.body_text());
            return ApiError::new(rejection.status(), "websocket_required", message).into_response();
        }
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
            let token_exp = super::cluster::token_expiry(&headers, params.token.as_deref());
            let caller = Caller { grant, client };
            return ws.on_upgrade(move |socket| async move {
                relay::relay(api, room, owner, caller, token_exp, socket).await;
                drop(slot);
            });
        }
    };
    ws.on_upgrade(move |socket| async move {
        session(api, state, socket, Caller { grant, client }, kinds).await;
        drop(slot);
    })
}

fn text(value: &impl serde::Serialize) -> Message {
    Message::Text(serde_json::to_string(value).unwrap_or_default().into())
}

fn error(e: &ApiError) -> Message {
    text(&serde_json::json!({ "type": "error", "code": e.code, "message": e.message }))
}

fn snapshot(room: &Room, admin: bool) -> Message {
    text(&serde_json::json!({
        "type": "room",
        "room": room.id,
        "admin": admin,
        "locked": room.is_locked(),
        "participants": room.member_list(),
        "speakers": room.speaker_ids(),
    }))
}

pub(super) fn close(code: u16, reason: &'static str) -> Message {
    Message::Close(Some(CloseFrame { code, reason: reason.into() }))
}

/// Whether a read failed on a message over the size limit.
pub(super) fn too_big(e: &axum::Error) -> bool {
    let text = e.to_string();
    text.contains("too long") || text.contains("too big")
}

/// How long a closing socket waits for the client's close in reply.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Sends a close frame, then reads (and drops) what the client still sends
/// until its own close, for at most [`CLOSE_WAIT`]: dropping the connection
/// with unread data would reset it, and the client might never see why.
pub(super) async fn close_gracefully(socket: &mut WebSocket, code: u16, reason: &'static str) {
    if socket.send(close(code, reason)).await.is_err() {
        return;
    }
    let _ = tokio::time::timeout(CLOSE_WAIT, async {
        while let Some(Ok(m)) = socket.recv().await {
            if matches!(m, Message::Close(_)) {
                break;
            }
        }
    })
    .await;
}

async fn session(api: Arc<ApiState>, room: Arc<Room>, mut socket: WebSocket, caller: Caller, kinds: EventKinds) {
    api.ws_sessions.fetch_add(1, Ordering::Relaxed);
    let limits = &api.cfg.limits;
    let (rate, burst) = (limits.ws_messages_per_second, limits.ws_message_burst);
    let idle = Duration::from_secs_f64(limits.ws_idle_timeout_seconds);
    let mut bucket = Bucket::full(burst, Instant::now());
    let mut heard_at = Instant::now();
    let mut pings = tokio::time::interval_at(tokio::time::Instant::now() + idle / 3, idle / 3);
    let mut events = room.subscribe();
    let mut me: Option<u64> = None;
    // The client closed with a close frame (it meant to go), or the socket was lost.
    let mut clean = false;
    let mut kinds = kinds;
    let admin = caller.grant.may_manage(&room.id);
    let mut ok = socket.send(snapshot(&room, admin)).await.is_ok();
    while ok {
        tokio::select! {
            msg = socket.recv() => {
                heard_at = Instant::now();
                if matches!(msg, Some(Ok(_))) && bucket.take(rate, burst, heard_at).is_err() {
                    let e = ApiError::new(
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
                    Some(Ok(Message::Text(t))) => handle(&api, &room, &caller, &mut me, &mut kinds, t.as_str()),
                    Some(Ok(Message::Binary(_))) => {
                        Some(error(&ApiError::new(axum::http::StatusCode::BAD_REQUEST, "bad_message", "send JSON text messages")))
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
            batch = events.recv() => match batch {
                Ok(batch) => {
                    let last = batch.events.iter().find_map(|e| match e {
                        RoomEvent::Shutdown { .. } => Some("server shutting down"),
                        RoomEvent::RoomClosed => Some("room closed"),
                        _ => None,
                    });
                    if let Some(id) = me
                        && batch.events.iter().any(|e| matches!(e, RoomEvent::Left { id: left, .. } if *left == id))
                    {
                        api.ws_resumes.forget(id);
                        me = None;
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
                }
                // Missed events: start again from a fresh snapshot.
                Err(RecvError::Lagged(_)) => ok = socket.send(snapshot(&room, admin)).await.is_ok(),
                Err(RecvError::Closed) => break,
            }
        }
    }
    if let Some(id) = me {
        resume::socket_gone(&api, &room, id, clean);
    }
    api.ws_sessions.fetch_sub(1, Ordering::Relaxed);
}

/// One client message; the reply to send, if any.
pub(crate) fn handle(
    api: &ApiState,
    room: &Arc<Room>,
    caller: &Caller,
    me: &mut Option<u64>,
    kinds: &mut EventKinds,
    text_msg: &str,
) -> Option<Message> {
    let bad = |code, message: String| Some(error(&ApiError::new(axum::http::StatusCode::BAD_REQUEST, code, message)));
    let msg: ClientMessage = match serde_json::from_str(text_msg) {
        Ok(m) => m,
        Err(e) => return bad("bad_message", format!("not a message tutti knows: {e}")),
    };
    match msg {
        ClientMessage::Join { sdp, name } => {
            if me.is_some() {
                return bad("already_joined", "this socket has joined already; open another to join again".into());
            }
            let joined = may_join(api, &caller.grant, &room.id, caller.client.ip())
                .and_then(|()| join_room(api, room, &sdp, &name, &caller.grant));
            match joined {
                Ok((id, answer)) => {
                    *me = Some(id);
                    let key = api.ws_resumes.issue(&room.id, id);
                    Some(text(&serde_json::json!({ "type": "answer", "id": id, "sdp": answer, "resume": key })))
                }
                Err(e) => Some(error(&e)),
            }
        }
        ClientMessage::Mute { muted } => match *me {
            Some(id) => api.rooms.set_muted(room, id, muted).err().map(|e| error(&e.into())),
            None => bad("not_joined", "join first".into()),
        },
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
            let identity = &caller.grant.identity;
            let own = Some(target) == *me
                || lock(&room.members).get(&target).is_some_and(|m| !identity.is_empty() && m.identity == *identity);
            if !own && !caller.grant.may_manage(&room.id) {
                return Some(error(&ApiError::forbidden(
                    "raising or lowering another participant's hand needs an admin token",
                )));
            }
            match api.rooms.set_hand(room, target, raised) {
                Ok(changed) => {
                    if changed {
                        crate::metrics::stage_action(if raised { "hand_raised" } else { "hand_lowered" });
                    }
                    None
                }
                Err(e) => Some(error(&e.into())),
            }
        }
        ClientMessage::Resume { id, key } => {
            if me.is_some() {
                return bad("already_joined", "this socket holds a participant already".into());
            }
            match api.ws_resumes.resume(&room.id, id, &key) {
                Ok(()) => {
                    *me = Some(id);
                    tracing::info!(room = %room.id, participant = id, "WebSocket resumed");
                    Some(text(&serde_json::json!({ "type": "resumed", "id": id })))
                }
                Err(_) => Some(error(&ApiError::new(
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
                api.ws_resumes.forget(id);
                if let Ok(effect) = api.rooms.leave(room, id, LeaveReason::Left) {
                    api.apply(effect);
                }
                None
            }
            None => bad("not_joined", "join first".into()),
        },
    }
}
