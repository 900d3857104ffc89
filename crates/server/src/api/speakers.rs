//! `GET /v1/rooms/{room}/speakers`: the per-speaker feed, a WebSocket for
//! captioning and agents. Each tick's selected speakers' own Opus frames,
//! as they arrived (no decode, no encode), each with who spoke and how loud.
//!
//! ```text
//! mix-clock ── after a tick, only while a feed is open ──► broadcast (250 ticks; a feed behind loses the oldest, counted)
//!                                                            └─► one task per feed socket ─► text `speaker` once per participant
//!                                                                                         └─► binary frame per speaker per tick
//! ```
//!
//! A WebSocket rather than RTP: it comes through the API's port, TLS
//! proxy and token like every other admin route, carries who spoke in each
//! message (RTP would need one stream per speaker and a side channel to
//! name them), and a consumer in any language reads it with a WebSocket
//! library. Binary message: participant id (u64), tick (u64), RFC 6464
//! level (u8: 0 loudest, 127 silent), then the Opus frame (20 ms, 48 kHz),
//! integers big-endian. Before a participant's first frame, a text message
//! `{"type":"speaker","id","identity","name"}`; when frames were lost to a
//! slow reader, `{"type":"lagged","ticks":N}`; when the room closes, close
//! code 1000. An admin token for the room, in the `Authorization` header;
//! at most `limits.speaker_feeds_per_room` at once (429 `too_many_feeds`).
//!
//! The feed lives as long as its access, as the room socket does: at the
//! token's expiry it closes with 4001 `token_expired`, unless the consumer
//! sent a fresh token before (text `{"type":"token","token"}`, answered
//! `token_accepted` `{expires_at}` or an `error` `token_refused`). It is
//! pinged every third of `limits.ws_idle_timeout_seconds` and closed with
//! 4408 when nothing (not even a pong) came for that long, and it holds its
//! connection's slot of `limits.max_connections` while open.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade, rejection::WebSocketUpgradeRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::{BufMut, BytesMut};
use tokio::sync::broadcast::error::RecvError;

use super::http::ConnectionSlot;
use super::recording::{RoomRequest, may_manage};
use super::state::ApiState;
use super::ws::frames::{CLOSE_IDLE, CLOSE_POLICY, CLOSE_TOKEN_EXPIRED, LONGEST_WAIT, close_gracefully, deadline_of};
use crate::auth::{Grant, unix_now};
use crate::limit::Bucket;
use crate::metrics::outputs as m;
use crate::refusal::Refusal;
use crate::room::{Room, SpeakerFeed};
use crate::sync::lock;

/// Bytes before the Opus frame in a binary message: id, tick, level.
pub(crate) const HEADER_BYTES: usize = 17;

/// How often a feed looks whether its room still exists.
const ROOM_CHECK: Duration = Duration::from_secs(1);

/// The routes.
pub(super) fn routes() -> Router<Arc<ApiState>> {
    Router::new().route("/v1/rooms/{room}/speakers", get(upgrade))
}

/// The per-speaker feed of a room (see the module docs).
#[utoipa::path(
    get,
    path = "/v1/rooms/{room}/speakers",
    tag = "websocket",
    operation_id = "speaker_feed",
    security(("bearer" = [])),
    params(("room" = String, Path, description = "The room's id")),
    responses(
        (status = 101, description = "Switching Protocols: `speaker` text messages, binary frames (id u64, tick u64, level u8, Opus)"),
        (status = 400, description = "`websocket_required`", body = super::schema::ErrorBody),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`", body = super::schema::ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden` (not an admin of the room)", body = super::schema::ErrorBody),
        (status = 404, description = "`room_not_found`", body = super::schema::ErrorBody),
        (status = 429, description = "`too_many_feeds`", body = super::schema::ErrorBody),
    ),
)]
pub(super) async fn upgrade(
    State(api): State<Arc<ApiState>>,
    req: RoomRequest,
    slot: Option<axum::Extension<ConnectionSlot>>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let (room, grant, expires_at) = match req.room_until(&api, |g, r| may_manage(g, r, "the speaker feed")).await {
        Ok(Ok(found)) => found,
        Ok(Err(redirect)) => return redirect,
        Err(e) => return e.into_response(),
    };
    let ws = match ws {
        Ok(ws) => ws,
        Err(rejection) => return super::ws::websocket_required(&rejection).into_response(),
    };
    let max = api.cfg.limits.speaker_feeds_per_room;
    let Some(feed) = room.subscribe_speaker_frames(max) else {
        let message =
            format!("room '{}' has {max} speaker feeds open already (limits.speaker_feeds_per_room)", room.id);
        return Refusal::new(StatusCode::TOO_MANY_REQUESTS, "too_many_feeds", message).into_response();
    };
    // Nothing to read from the consumer but a fresh token and its close: small buffers.
    let ws = ws.max_message_size(4096).max_frame_size(4096).write_buffer_size(0).max_write_buffer_size(1 << 20);
    // The socket keeps its connection's slot for as long as it is open.
    let slot = slot.map(|axum::Extension(s)| s);
    ws.on_upgrade(move |socket| async move {
        session(api, room, feed, socket, Access { grant, expires_at }).await;
        drop(slot);
    })
}

/// Who opened a feed, and until when (Unix seconds; `None`: auth is off).
struct Access {
    grant: Grant,
    expires_at: Option<u64>,
}

async fn session(api: Arc<ApiState>, room: Arc<Room>, mut feed: SpeakerFeed, mut socket: WebSocket, access: Access) {
    tracing::info!(room = %room.id, "speaker feed opened");
    let mut told: HashSet<u64> = HashSet::new();
    let mut check = tokio::time::interval(ROOM_CHECK);
    let Access { mut grant, mut expires_at } = access;
    let expiry = tokio::time::sleep_until(expires_at.map_or(tokio::time::Instant::now() + LONGEST_WAIT, deadline_of));
    tokio::pin!(expiry);
    let limits = &api.cfg.limits;
    let (rate, burst) = (limits.ws_messages_per_second, limits.ws_message_burst);
    let mut bucket = Bucket::full(burst, std::time::Instant::now());
    let idle = Duration::from_secs_f64(limits.ws_idle_timeout_seconds);
    let mut heard_at = std::time::Instant::now();
    let mut pings = tokio::time::interval_at(tokio::time::Instant::now() + idle / 3, idle / 3);
    'feed: loop {
        tokio::select! {
            () = &mut expiry => {
                if expires_at.is_none_or(|exp| unix_now() < exp) {
                    // Not expired (no expiry, or further off than one wait): wait again.
                    expiry.as_mut().reset(expires_at.map_or(tokio::time::Instant::now() + LONGEST_WAIT, deadline_of));
                    continue;
                }
                close_gracefully(&mut socket, CLOSE_TOKEN_EXPIRED, "token_expired").await;
                tracing::info!(room = %room.id, "speaker feed closed: its token expired");
                break;
            }
            _ = pings.tick() => {
                if heard_at.elapsed() >= idle {
                    close_gracefully(&mut socket, CLOSE_IDLE, "idle timeout").await;
                    tracing::info!(room = %room.id, "speaker feed closed: idle");
                    break;
                }
                if socket.send(Message::Ping(Default::default())).await.is_err() {
                    break;
                }
            }
            got = feed.frames.recv() => match got {
                Ok(batch) => {
                    metrics::counter!(m::SPEAKER_FEED_FRAMES, "result" => "sent").increment(batch.frames.len() as u64);
                    for (id, level, frame) in &batch.frames {
                        if told.insert(*id) && socket.send(Message::Text(speaker(&room, *id).into())).await.is_err() {
                            break 'feed;
                        }
                        let mut b = BytesMut::with_capacity(HEADER_BYTES + frame.len());
                        b.put_u64(*id);
                        b.put_u64(batch.tick);
                        b.put_u8(*level);
                        b.extend_from_slice(frame);
                        if socket.send(Message::Binary(b.freeze())).await.is_err() {
                            break 'feed;
                        }
                    }
                }
                Err(RecvError::Lagged(ticks)) => {
                    metrics::counter!(m::SPEAKER_FEED_FRAMES, "result" => "dropped").increment(ticks);
                    tracing::debug!(room = %room.id, ticks, "speaker feed behind: oldest ticks dropped");
                    let lagged = serde_json::json!({"type": "lagged", "ticks": ticks}).to_string();
                    if socket.send(Message::Text(lagged.into())).await.is_err() {
                        break;
                    }
                }
                Err(RecvError::Closed) => break,
            },
            msg = socket.recv() => {
                heard_at = std::time::Instant::now();
                if matches!(msg, Some(Ok(_))) && bucket.take(rate, burst, heard_at).is_err() {
                    close_gracefully(&mut socket, CLOSE_POLICY, "message rate exceeded").await;
                    break;
                }
                match msg {
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                    // A fresh token; anything else is ignored.
                    Some(Ok(Message::Text(t))) => {
                        let reply = match fresh_token(&api, &room, &grant, t.as_str()) {
                            Some(Ok((g, exp))) => {
                                (grant, expires_at) = (g, Some(exp));
                                expiry.as_mut().reset(deadline_of(exp));
                                serde_json::json!({"type": "token_accepted", "expires_at": exp})
                            }
                            Some(Err(e)) => serde_json::json!({"type": "error", "code": e.code, "message": e.message}),
                            None => continue,
                        };
                        if socket.send(Message::Text(reply.to_string().into())).await.is_err() {
                            break;
                        }
                    }
                    Some(Ok(_)) => {}
                }
            },
            _ = check.tick() => {
                if api.rooms.get(&room.id).map_or(true, |r| r.key != room.key) {
                    let _ = socket.send(super::ws::close(1000, "room closed")).await;
                    break;
                }
            }
        }
    }
    tracing::info!(room = %room.id, "speaker feed closed");
}

/// A `{"type":"token","token"}` message's new grant and expiry: `None` for
/// another message; `token_refused` unless the token is valid, for the
/// same identity, and still an admin's of the room.
fn fresh_token(api: &ApiState, room: &Room, grant: &Grant, text: &str) -> Option<Result<(Grant, u64), Refusal>> {
    let msg: serde_json::Value = serde_json::from_str(text).ok()?;
    if msg["type"] != "token" {
        return None;
    }
    let token = msg["token"].as_str().unwrap_or("");
    Some(super::ws::frames::fresh_grant(api, &grant.identity, token, "feed", |g| {
        may_manage(g, &room.id, "the speaker feed").map(|_| ()).map_err(|e| e.message)
    }))
}

/// The `speaker` message naming participant `id` (empty names once it left).
fn speaker(room: &Room, id: u64) -> String {
    let members = lock(&room.members);
    let (identity, name) = members.get(&id).map_or(("", ""), |m| (m.identity.as_str(), m.name.as_str()));
    serde_json::json!({"type": "speaker", "id": id, "identity": identity, "name": name}).to_string()
}
