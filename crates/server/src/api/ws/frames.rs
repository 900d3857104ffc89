//! What a room socket is told besides events: its close codes and the way
//! it closes, the `moved` message of a room held by (or handed over to)
//! another node, and who is on the other end.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket};

use crate::api::state::ApiState;
use crate::auth::Grant;
use crate::cluster::tickets::moved_ticket;
use crate::refusal::Refusal;
use crate::room::{MovedTo, Room};
use crate::sync::lock;

/// Close code: a message over the size limit (RFC 6455 §7.4.1).
pub(crate) const CLOSE_TOO_BIG: u16 = 1009;

/// Close code: the message rate was exceeded (policy violation).
pub(crate) const CLOSE_POLICY: u16 = 1008;

/// Close code: nothing arrived for the idle timeout (4000–4999: the application's).
pub(crate) const CLOSE_IDLE: u16 = 4408;

/// Close code: the socket's token expired and no fresh one came.
pub(crate) const CLOSE_TOKEN_EXPIRED: u16 = 4001;

/// Close code: a join with the same identity replaced the socket's participant.
pub(crate) const CLOSE_REPLACED: u16 = 4409;

/// Who is on the other end of a socket, and what they may do.
pub(crate) struct Caller {
    pub(crate) grant: Grant,
    pub(crate) client: SocketAddr,
}

/// The error for a plain HTTP request to a WebSocket route.
pub(crate) fn websocket_required(rejection: &WebSocketUpgradeRejection) -> Refusal {
    let message = format!("this endpoint speaks WebSocket only: {}", rejection.body_text());
    Refusal::new(rejection.status(), "websocket_required", message)
}

pub(crate) fn close(code: u16, reason: &'static str) -> Message {
    Message::Close(Some(CloseFrame { code, reason: reason.into() }))
}

/// Whether a read failed on a message over the size limit.
pub(crate) fn too_big(e: &axum::Error) -> bool {
    let text = e.to_string();
    text.contains("too long") || text.contains("too big")
}

/// How long a closing socket waits for the client's close in reply.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Sends a close frame, then reads (and drops) what the client still sends
/// until its own close, for at most [`CLOSE_WAIT`]: dropping the connection
/// with unread data would reset it, and the client might never see why.
pub(crate) async fn close_gracefully(socket: &mut WebSocket, code: u16, reason: &'static str) {
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

/// The `moved` message of a WebSocket whose room `room` is held by node
/// `node` at `api_url`: `{"type":"moved","room","node","api_url","ticket"}`.
/// The ticket (absent when auth is off) is the cluster's
/// ([`crate::cluster::tickets::moved_ticket`]): single-use, short-lived,
/// for `GET /v1/rooms/{room}/enter` only, expiring with the socket's token
/// (`token_exp`).
pub(crate) fn moved_message(
    api: &ApiState,
    room: &str,
    node: &str,
    api_url: &str,
    grant: &Grant,
    token_exp: Option<u64>,
) -> serde_json::Value {
    let mut msg = serde_json::json!({
        "type": "moved",
        "protocol": crate::api::schema::WS_PROTOCOL,
        "room": room,
        "node": node,
        "api_url": api_url,
    });
    if let (Some(cluster), Some(_), Some(exp)) = (&api.node.dir, &api.auth, token_exp)
        && let Some(ticket) = moved_ticket(cluster, room, grant, exp)
    {
        msg["ticket"] = ticket.into();
    }
    msg
}

/// The `moved` message a socket of a handed-over room gets: where to
/// rejoin, with a single-use ticket for the page's way in there
/// ([`moved_message`]), carrying no more than what the
/// socket may do now (its participant's speak right as it stands, which an
/// admin may have granted on stage), and `reason: "drain"`.
pub(crate) fn move_message(
    api: &ApiState,
    room: &Room,
    grant: &Grant,
    me: Option<u64>,
    to: &MovedTo,
    token_exp: Option<u64>,
) -> Message {
    let speak = match me {
        Some(id) => lock(&room.members).get(&id).is_some_and(|m| !m.listen_only),
        None => grant.speak,
    };
    let grant = Grant { speak, ..grant.clone() };
    let mut message = moved_message(api, &room.id, &to.node, &to.api_url, &grant, token_exp);
    message["reason"] = "drain".into();
    Message::Text(message.to_string().into())
}

/// Longest a socket's timer waits at once (a token valid for centuries is
/// looked at again after this, rather than overflow a clock).
pub(crate) const LONGEST_WAIT: Duration = Duration::from_secs(86_400 * 365);

/// When a token expiring at `exp` (Unix seconds) expires, on tokio's clock
/// (at most [`LONGEST_WAIT`] ahead: the timer then checks again).
pub(crate) fn deadline_of(exp: u64) -> tokio::time::Instant {
    let left = std::time::UNIX_EPOCH
        .checked_add(Duration::from_secs(exp))
        .map_or(LONGEST_WAIT, |at| at.duration_since(std::time::SystemTime::now()).unwrap_or(Duration::ZERO));
    tokio::time::Instant::now() + left.min(LONGEST_WAIT)
}

/// A fresh token sent over an open socket (a room socket's or a speaker
/// feed's `token` message): its grant and expiry, if it is valid, for the
/// same `identity`, and `still_allowed` by what the socket does (a room it
/// may see, a feed it may read; the `Err` says why not). `what` names the
/// socket in the messages ("socket", "feed").
pub(crate) fn fresh_grant(
    api: &ApiState,
    identity: &str,
    token: &str,
    what: &str,
    still_allowed: impl FnOnce(&Grant) -> Result<(), String>,
) -> Result<(Grant, u64), Refusal> {
    let refused = |message: String| Refusal::new(axum::http::StatusCode::BAD_REQUEST, "token_refused", message);
    let Some(auth) = &api.auth else {
        return Err(refused(format!("auth is disabled: this {what}'s access does not expire")));
    };
    let (grant, exp) = auth
        .verify_until(token, crate::auth::unix_now())
        .map_err(|e| refused(format!("the new token was refused: {e}")))?;
    if grant.identity != identity {
        return Err(refused(format!(
            "the new token is for identity '{}', this {what}'s is '{identity}': open a new {what} for another identity",
            grant.identity
        )));
    }
    still_allowed(&grant).map_err(refused)?;
    Ok((grant, exp))
}
