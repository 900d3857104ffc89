//! The stage route: `PATCH /v1/rooms/{room}` (lock, size, speaker limit,
//! mute-all). The checks a join passes first (lock, bans) are the session
//! layer's (`session::join`). Speak
//! rights and hands ride on `PATCH …/participants/{id}` and kicks on
//! `DELETE …/participants/{id}?ban_seconds=` (in `rooms`); hands also on
//! the WebSocket (`ws`). The rules themselves are the room domain's
//! (`room::stage`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::ToSchema;

use super::access::{self as cluster, Access};
use super::body::{body, json};
use super::rooms;
use super::schema::ErrorBody;
use super::state::ApiState;
use crate::refusal::{Refusal, Refused};
use crate::session::rooms::RoomChange;

/// `PATCH /v1/rooms/{room}`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateRoom {
    /// No new joins while locked.
    locked: Option<bool>,
    max_participants: Option<usize>,
    max_speakers: Option<usize>,
    /// Mute everyone but the room's admins.
    #[serde(default)]
    mute_all: bool,
    // sound: the room's voice processing ("auto" | "on" | "off"; true | false).
    /// `auto`, `on` or `off`.
    noise_suppression: Option<String>,
    /// Loudness normalisation.
    loudness: Option<bool>,
    /// Hold participants muted, with the hold music, until a moderator joins.
    wait_for_moderator: Option<bool>,
    /// When the last moderator leaves: `stay`, `mute` everyone else, or `end` the room.
    on_moderator_leave: Option<crate::room::OnModeratorLeave>,
    /// Everyone but a moderator joins muted.
    join_muted: Option<bool>,
    /// Speakers on seats, heard in stereo by clients that ask for it (docs/features/spatial.md).
    /// `true` or `"panned"`, `"binaural"` (for headphones), `false` or `"off"`.
    spatial: Option<crate::room::SpatialMode>,
}

/// Changes a room (admin of the room): lock, size, speaker limit, mute-all, voice processing.
///
/// The answer says what this node did; in a room spread over nodes the
/// other nodes of it apply the change to their own participants within the
/// pub/sub latency (mute-all mutes their non-admins, a lock refuses their joins).
#[utoipa::path(
    patch,
    path = "/v1/rooms/{room}",
    tag = "rooms",
    operation_id = "update_room",
    params(("room" = String, Path, description = "The room's id"), cluster::Access),
    request_body(content = UpdateRoom, content_type = "application/json"),
    responses(
        (status = 200, description = "The room now", body = rooms::RoomChanged),
        (status = 307, description = "Cluster mode: the room is on another node; follow `Location`"),
        (status = 400, description = "`bad_json`, `bad_value`, `bad_room_config`", body = ErrorBody),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`forbidden`: not an admin of the room", body = ErrorBody),
        (status = 404, description = "`room_not_found`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
    ),
)]
pub(crate) async fn update_room(
    State(api): State<Arc<ApiState>>,
    Path(room): Path<String>,
    headers: HeaderMap,
    target: cluster::Target,
    query: Result<Query<Access>, axum::extract::rejection::QueryRejection>,
    raw: Result<Bytes, BytesRejection>,
) -> Refused<Response> {
    let access = cluster::access(query);
    let grant = cluster::caller(&api, &headers, &target, access.ticket.as_deref(), &room).await?;
    if !grant.may_manage(&room) {
        return Err(Refusal::forbidden(format!("changing room '{room}' needs an admin token for it")));
    }
    let req: UpdateRoom = json(&headers, &body(raw)?, None)?;
    let state = match cluster::here(&api, &room, &target, &grant).await? {
        Ok(state) => state,
        Err(elsewhere) => return Ok(elsewhere),
    };
    // sound: checked before anything changes.
    let noise_suppression = req.noise_suppression.as_deref().map(crate::room::parse_noise_suppression).transpose()?;
    let change = RoomChange {
        locked: req.locked,
        max_participants: req.max_participants,
        max_speakers: req.max_speakers,
        mute_all: req.mute_all,
        noise_suppression: req.noise_suppression.clone(),
        loudness: req.loudness,
        options: crate::cluster::options::RoomOptions {
            spatial: req.spatial,
            moderation: (req.wait_for_moderator.is_some()
                || req.on_moderator_leave.is_some()
                || req.join_muted.is_some())
            .then(|| {
                rooms::moderation_of(state.moderation(), req.wait_for_moderator, req.on_moderator_leave, req.join_muted)
            }),
        },
    };
    let muted = api.session.update_room(&state, &change)?;
    let mut body = serde_json::to_value(rooms::summary(&api, &state)).unwrap_or_default();
    body["muted"] = muted.into();
    body["voice"] = serde_json::to_value(state.room_voice(noise_suppression, req.loudness)).unwrap_or_default(); // sound
    Ok(axum::Json(body).into_response())
}
