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

use super::recording::{RoomRequest, may_manage};
use super::state::ApiState;
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
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let room = match req.room(&api, |g, r| may_manage(g, r, "the speaker feed")).await {
        Ok(Ok(room)) => room,
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
    // Nothing to read from the consumer but its close: small buffers.
    let ws = ws.max_message_size(1024).max_frame_size(1024).write_buffer_size(0).max_write_buffer_size(1 << 20);
    ws.on_upgrade(move |socket| session(api, room, feed, socket))
}

async fn session(api: Arc<ApiState>, room: Arc<Room>, mut feed: SpeakerFeed, mut socket: WebSocket) {
    tracing::info!(room = %room.id, "speaker feed opened");
    let mut told: HashSet<u64> = HashSet::new();
    let mut check = tokio::time::interval(ROOM_CHECK);
    'feed: loop {
        tokio::select! {
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
            msg = socket.recv() => match msg {
                // The consumer only closes; anything else is ignored.
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
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

/// The `speaker` message naming participant `id` (empty names once it left).
fn speaker(room: &Room, id: u64) -> String {
    let members = lock(&room.members);
    let (identity, name) = members.get(&id).map_or(("", ""), |m| (m.identity.as_str(), m.name.as_str()));
    serde_json::json!({"type": "speaker", "id": id, "identity": identity, "name": name}).to_string()
}
