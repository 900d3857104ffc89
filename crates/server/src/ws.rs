//! The WebSocket `GET /v1/rooms/{room}/ws`: room events pushed as they
//! happen, and joining with an offer message.
//!
//! Server → client (JSON text, field `type`): `room` (a snapshot, first),
//! `answer` `{id, sdp}`, `error` `{code, message}`, `joined` `{id, name}`,
//! `left` `{id, reason}`, `talking` `{id, talking}`, `muted` `{id, muted}`,
//! `room_closed`, `shutdown` `{message}`.
//!
//! Client → server: `join` `{sdp, name?}` (once per socket; the participant
//! leaves when the socket closes), `mute` `{muted}` (the socket's own
//! participant), `leave`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;

use crate::api::{ApiError, join_room, set_muted};
use crate::state::{LeaveReason, RoomEvent, RoomState, Shared, lock};

/// Largest message a client may send (an SDP offer is a few KiB).
pub(crate) const MAX_MESSAGE_BYTES: usize = 64 * 1024;

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ClientMessage {
    Join {
        sdp: String,
        #[serde(default)]
        name: String,
    },
    Mute {
        muted: bool,
    },
    Leave,
}

pub(crate) async fn upgrade(
    State(shared): State<Arc<Shared>>,
    Path(room): Path<String>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let Some(state) = shared.room(&room) else { return ApiError::no_room(&room).into_response() };
    let ws = match ws {
        Ok(ws) => ws,
        Err(rejection) => {
            let message = format!("this endpoint speaks WebSocket only: {}", rejection.body_text());
            return ApiError::new(rejection.status(), "websocket_required", message).into_response();
        }
    };
    ws.max_message_size(MAX_MESSAGE_BYTES)
        .max_frame_size(MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| session(shared, state, socket))
}

fn text(value: &impl serde::Serialize) -> Message {
    Message::Text(serde_json::to_string(value).unwrap_or_default().into())
}

fn error(e: &ApiError) -> Message {
    text(&serde_json::json!({ "type": "error", "code": e.code, "message": e.message }))
}

fn snapshot(room: &RoomState) -> Message {
    let speakers: Vec<u64> = lock(&room.speakers).iter().map(|s| s.id.0).collect();
    text(&serde_json::json!({
        "type": "room",
        "room": room.id,
        "participants": room.member_list(),
        "speakers": speakers,
    }))
}

async fn session(shared: Arc<Shared>, room: Arc<RoomState>, mut socket: WebSocket) {
    shared.ws_sessions.fetch_add(1, Ordering::Relaxed);
    let mut events = room.events.subscribe();
    let mut me: Option<u64> = None;
    let mut ok = socket.send(snapshot(&room)).await.is_ok();
    while ok {
        tokio::select! {
            msg = socket.recv() => {
                let reply = match msg {
                    Some(Ok(Message::Text(t))) => handle(&shared, &room, &mut me, t.as_str()),
                    Some(Ok(Message::Binary(_))) => {
                        Some(error(&ApiError::new(axum::http::StatusCode::BAD_REQUEST, "bad_message", "send JSON text messages")))
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => None,
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                };
                if let Some(reply) = reply {
                    ok = socket.send(reply).await.is_ok();
                }
            }
            event = events.recv() => match event {
                Ok(event) => {
                    let last = matches!(event, RoomEvent::Shutdown { .. } | RoomEvent::RoomClosed);
                    let gone = matches!(&event, RoomEvent::Left { id, .. } if Some(*id) == me);
                    ok = socket.send(text(&event)).await.is_ok();
                    if gone {
                        me = None;
                    }
                    if last {
                        let reason = if matches!(event, RoomEvent::Shutdown { .. }) { "server shutting down" } else { "room closed" };
                        let _ = socket.send(Message::Close(Some(CloseFrame { code: 1001, reason: reason.into() }))).await;
                        break;
                    }
                }
                // Missed events: start again from a fresh snapshot.
                Err(RecvError::Lagged(_)) => ok = socket.send(snapshot(&room)).await.is_ok(),
                Err(RecvError::Closed) => break,
            }
        }
    }
    if let Some(id) = me {
        shared.remove_participant(&room, id, LeaveReason::Left);
    }
    shared.ws_sessions.fetch_sub(1, Ordering::Relaxed);
}

/// One client message; the reply to send, if any.
fn handle(shared: &Shared, room: &Arc<RoomState>, me: &mut Option<u64>, text_msg: &str) -> Option<Message> {
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
            match join_room(shared, &room.id, &sdp, &name) {
                Ok((_, id, answer)) => {
                    *me = Some(id);
                    Some(text(&serde_json::json!({ "type": "answer", "id": id, "sdp": answer })))
                }
                Err(e) => Some(error(&e)),
            }
        }
        ClientMessage::Mute { muted } => match *me {
            Some(id) => set_muted(room, id, muted).err().map(|e| error(&e)),
            None => bad("not_joined", "join first".into()),
        },
        ClientMessage::Leave => match me.take() {
            Some(id) => {
                shared.remove_participant(room, id, LeaveReason::Left);
                None
            }
            None => bad("not_joined", "join first".into()),
        },
    }
}
