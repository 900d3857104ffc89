//! Playing Ogg/Opus files into a room (see `room::playback`):
//!
//! - `POST /v1/rooms/{room}/playbacks`: `{"file": "welcome.opus", "loop": false}`
//!   plays a file of `playback.dir`; an `audio/ogg` body (`?loop=true`) plays the
//!   upload itself (kept in memory while it plays, never written to disk).
//! - `GET /v1/rooms/{room}/playbacks`: what plays, and the room's sounds.
//! - `DELETE /v1/rooms/{room}/playbacks/{id}`: stops one.
//! - `GET`/`PUT /v1/rooms/{room}/sounds`: the room's enter and leave sounds
//!   and hold music (files of `playback.dir`; `null` or `""` for none).
//!
//! Every route needs an admin token for the room. A file is read and
//! checked on a blocking thread (never a media thread, never an async
//! worker): only plain names of the directory (no path can leave it), at
//! most `playback.max_file_bytes` (413 `file_too_large`, checked before an
//! upload is read past the limit), Ogg/Opus with 20 ms frames (422
//! `bad_audio_file`, naming what is wrong).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::recording::{RoomRequest, may_manage};
use super::schema::ErrorBody;
use super::state::{ApiState, ClipCache};
use crate::config::PlaybackSettings;
use crate::refusal::{Refusal, Refused};
use crate::room::playback::{self, Clip, PlaybackError, PlaybackInfo, Sounds, SoundsChange, check_file_name};
use crate::sync::lock;

/// The routes.
pub(super) fn routes() -> Router<Arc<ApiState>> {
    Router::new()
        .route("/v1/rooms/{room}/playbacks", get(list).post(start))
        .route("/v1/rooms/{room}/playbacks/{id}", delete(stop))
        .route("/v1/rooms/{room}/sounds", get(show_sounds).put(set_sounds))
}

/// Why a file could not be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LoadError {
    /// Not a plain name of the directory.
    #[error("{0}")]
    BadName(String),
    /// No directory is configured.
    #[error("no playback directory is configured (playback.dir): only uploads are played")]
    NoDirectory,
    /// No such file in the directory.
    #[error("there is no file '{0}' in the playback directory")]
    NotFound(String),
    /// Larger than `playback.max_file_bytes`.
    #[error("the file is larger than {max} bytes (playback.max_file_bytes)")]
    TooLarge {
        /// The limit.
        max: u64,
    },
    /// Within `playback.max_file_bytes`, but its frames so small and many
    /// that holding them would take more than 1.5 times that.
    #[error(
        "the file's {frames} frames would hold {held} bytes in memory, more than 1.5 × {max} (playback.max_file_bytes): its frames are unusually small; encode it at a higher bitrate, or shorter"
    )]
    HeldTooLarge {
        /// Its 20 ms frames.
        frames: usize,
        /// What it would hold.
        held: usize,
        /// The limit.
        max: u64,
    },
    /// Reading failed.
    #[error("cannot read '{name}': {kind}")]
    Io {
        /// The file.
        name: String,
        /// What the OS said, without the server's paths.
        kind: std::io::ErrorKind,
    },
    /// Not a playable Ogg/Opus file.
    #[error("{0}")]
    Bad(#[from] playback::ClipError),
}

impl From<LoadError> for Refusal {
    fn from(e: LoadError) -> Self {
        let (status, code) = match &e {
            LoadError::BadName(_) => (StatusCode::BAD_REQUEST, "bad_file_name"),
            LoadError::NoDirectory | LoadError::NotFound(_) => (StatusCode::NOT_FOUND, "file_not_found"),
            LoadError::TooLarge { .. } | LoadError::HeldTooLarge { .. } => {
                (StatusCode::PAYLOAD_TOO_LARGE, "file_too_large")
            }
            LoadError::Io { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            LoadError::Bad(_) => (StatusCode::UNPROCESSABLE_ENTITY, "bad_audio_file"),
        };
        Refusal::new(status, code, e.to_string())
    }
}

impl From<PlaybackError> for Refusal {
    fn from(e: PlaybackError) -> Self {
        let (status, code) = match &e {
            PlaybackError::TooMany { .. } => (StatusCode::TOO_MANY_REQUESTS, "too_many_playbacks"),
            PlaybackError::NotFound(_) => (StatusCode::NOT_FOUND, "playback_not_found"),
            PlaybackError::Closed(_) => (StatusCode::NOT_FOUND, "room_not_found"),
        };
        Refusal::new(status, code, e.to_string())
    }
}

/// Reads file `name` of `dir` (blocking): a plain name, inside the
/// directory even through links, at most `max` bytes, a playable clip;
/// from `cache` when it holds it.
pub(crate) fn load_file(dir: &str, name: &str, max: u64, cache: Option<&ClipCache>) -> Result<Arc<Clip>, LoadError> {
    check_file_name(name).map_err(LoadError::BadName)?;
    if dir.is_empty() {
        return Err(LoadError::NoDirectory);
    }
    let io = |kind| LoadError::Io { name: name.to_owned(), kind };
    let not_found = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::NotFound => LoadError::NotFound(name.to_owned()),
        kind => io(kind),
    };
    let root = Path::new(dir).canonicalize().map_err(|_| LoadError::NotFound(name.to_owned()))?;
    let path: PathBuf = root.join(name).canonicalize().map_err(not_found)?;
    // A link that leads out of the directory is as good as absent.
    if !path.starts_with(&root) || !path.is_file() {
        return Err(LoadError::NotFound(name.to_owned()));
    }
    let file = std::fs::File::open(&path).map_err(not_found)?;
    let meta = file.metadata().map_err(|e| io(e.kind()))?;
    let (len, modified) = (meta.len(), meta.modified().ok());
    if len > max {
        return Err(LoadError::TooLarge { max });
    }
    if let Some(cache) = cache
        && let Some((m, l, clip)) = lock(&cache.0).get(&path)
        && (*m, *l) == (modified, len)
        && let Some(clip) = clip.upgrade()
        && clip.name == name
    {
        return Ok(clip);
    }
    let mut bytes = Vec::with_capacity(len as usize);
    // Bounded even if the file grows meanwhile.
    std::io::Read::read_to_end(&mut std::io::Read::take(file, max.saturating_add(1)), &mut bytes)
        .map_err(|e| io(e.kind()))?;
    if bytes.len() as u64 > max {
        return Err(LoadError::TooLarge { max });
    }
    let clip = Arc::new(held_within(Clip::parse(name, &bytes)?, max)?);
    if let Some(cache) = cache {
        let mut map = lock(&cache.0);
        map.retain(|_, (_, _, c)| c.strong_count() > 0);
        map.insert(path, (modified, len, Arc::downgrade(&clip)));
    }
    Ok(clip)
}

/// `clip`, unless what it holds in memory is more than 1.5 × `max` bytes:
/// its packets (part of the file, so at most `max`) and 5 bytes per frame,
/// which only a file of unusually small frames brings near that (1-byte
/// frames: ~3 times the file's size).
fn held_within(clip: Clip, max: u64) -> Result<Clip, LoadError> {
    let held = clip.memory_bytes();
    if held as u64 > max.saturating_add(max / 2) {
        return Err(LoadError::HeldTooLarge { frames: clip.len(), held, max });
    }
    Ok(clip)
}

/// The sounds `[playback]` names, read at start (a missing or bad file stops the start, naming it).
pub(crate) fn default_sounds(cfg: &PlaybackSettings) -> Result<playback::Defaults, String> {
    let read = |key: &str, name: &str| -> Result<Option<Arc<Clip>>, String> {
        if name.is_empty() {
            return Ok(None);
        }
        load_file(&cfg.dir, name, cfg.max_file_bytes, None).map(Some).map_err(|e| format!("{key}: {e}"))
    };
    let sounds = Sounds {
        enter: read("playback.enter_sound", &cfg.enter_sound)?,
        leave: read("playback.leave_sound", &cfg.leave_sound)?,
        hold: read("playback.hold_music", &cfg.hold_music)?,
    };
    Ok(playback::Defaults { max_per_room: cfg.max_per_room, sounds })
}

/// Reads a file of the directory off the async workers.
async fn load(api: &Arc<ApiState>, name: String) -> Refused<Arc<Clip>> {
    let (dir, max) = (api.cfg.playback.dir.clone(), api.cfg.playback.max_file_bytes);
    let api = api.clone();
    tokio::task::spawn_blocking(move || load_file(&dir, &name, max, Some(&api.clips)))
        .await
        .map_err(|e| Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
        .map_err(Refusal::from)
}

/// `POST …/playbacks` with JSON.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct StartPlayback {
    /// A file of `playback.dir`, by name.
    file: String,
    /// Play it again from the start at its end, until stopped (default false).
    #[serde(default, rename = "loop")]
    looping: bool,
}

/// `POST …/playbacks` with an `audio/ogg` body.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct UploadQuery {
    /// Loop the upload until stopped (default false).
    #[serde(default, rename = "loop")]
    looping: Option<bool>,
}

/// A playback.
#[derive(Serialize, ToSchema)]
pub(super) struct Playback {
    id: u64,
    /// The file's name (`upload` for an uploaded body).
    file: String,
    /// `announcement`, `enter`, `leave` or `hold`.
    purpose: String,
    #[serde(rename = "loop")]
    looping: bool,
    duration_seconds: f64,
    position_seconds: f64,
    /// Times it started again from the start.
    loops: u64,
}

/// A room's sounds (file names; `null`: none).
#[derive(Serialize, Deserialize, ToSchema)]
pub(super) struct RoomSounds {
    /// Played when someone joins a room with others in it.
    enter: Option<String>,
    /// Played when someone leaves a room that still has others.
    leave: Option<String>,
    /// Played, looped, while one participant is alone.
    hold: Option<String>,
}

/// What plays in a room.
#[derive(Serialize, ToSchema)]
pub(super) struct Playbacks {
    playbacks: Vec<Playback>,
    sounds: RoomSounds,
}

/// `PUT …/sounds`: a field left out is kept; `null` or `""` removes it.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SetSounds {
    #[serde(default, deserialize_with = "crate::room::double_option")]
    #[schema(value_type = Option<String>)]
    enter: Option<Option<String>>,
    #[serde(default, deserialize_with = "crate::room::double_option")]
    #[schema(value_type = Option<String>)]
    leave: Option<Option<String>>,
    #[serde(default, deserialize_with = "crate::room::double_option")]
    #[schema(value_type = Option<String>)]
    hold: Option<Option<String>>,
}

fn json(info: &PlaybackInfo) -> serde_json::Value {
    serde_json::to_value(info).unwrap_or_default()
}

fn content_type(headers: &axum::http::HeaderMap) -> String {
    let value = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    value.split(';').next().unwrap_or("").trim().to_ascii_lowercase()
}

/// Reads a body of at most `max` bytes: 413 `file_too_large` past it (by
/// its `Content-Length` before reading anything, else as soon as it passes).
///
/// The connection closes after a 413, and bytes of the body left unread
/// make the kernel reset it: a client still sending (one that did not ask
/// for `100 Continue`) would see a broken pipe instead of the answer. So
/// before answering, up to [`DRAIN_BYTES`] more of the body are read and
/// dropped, within [`DRAIN_TIME`]: a near miss gets its clear 413, and a
/// body declared far larger, or one that asked to wait for `100 Continue`,
/// is answered at once.
async fn read_body(headers: &axum::http::HeaderMap, body: Body, max: u64) -> Refused<axum::body::Bytes> {
    let too_large = || Refusal::from(LoadError::TooLarge { max });
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let waits = headers.get(header::EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let mut body = std::pin::pin!(body);
    if let Some(n) = declared.filter(|&n| n > max) {
        if !waits && n - max <= DRAIN_BYTES {
            drain(body.as_mut(), n).await;
        }
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(declared.unwrap_or(0)).unwrap_or(0));
    while let Some(frame) = next_frame(body.as_mut()).await {
        let data = frame.map_err(|e| Refusal::bad_request("bad_body", format!("the body could not be read: {e}")))?;
        if (bytes.len() + data.len()) as u64 > max {
            drain(body.as_mut(), DRAIN_BYTES).await;
            return Err(too_large());
        }
        bytes.extend_from_slice(&data);
    }
    Ok(bytes.into())
}

/// How much of a refused body is read and dropped before the 413 ([`read_body`]).
const DRAIN_BYTES: u64 = 16 << 20;
/// How long a refused body is read for before the 413 ([`read_body`]).
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// The next chunk of data of `body`, frames that carry none (trailers) skipped.
async fn next_frame(mut body: std::pin::Pin<&mut Body>) -> Option<Result<axum::body::Bytes, axum::Error>> {
    use hyper::body::Body as _;
    loop {
        match std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await? {
            Ok(frame) => match frame.into_data() {
                Ok(data) => return Some(Ok(data)),
                Err(_) => continue,
            },
            Err(e) => return Some(Err(e)),
        }
    }
}

/// Reads and drops up to `budget` bytes of `body`, for at most [`DRAIN_TIME`].
async fn drain(mut body: std::pin::Pin<&mut Body>, budget: u64) {
    let mut read = 0u64;
    let _ = tokio::time::timeout(DRAIN_TIME, async {
        while read <= budget {
            match next_frame(body.as_mut()).await {
                Some(Ok(data)) => read += data.len() as u64,
                _ => break,
            }
        }
    })
    .await;
}

/// Plays a file into the room (admin of the room).
#[utoipa::path(
    post,
    path = "/v1/rooms/{room}/playbacks",
    tag = "outputs",
    operation_id = "start_playback",
    params(("room" = String, Path, description = "The room's id"), UploadQuery, super::access::Access),
    request_body(
        description = "A file of the playback directory (JSON), or an Ogg/Opus file itself (`audio/ogg`, at most `playback.max_file_bytes`)",
        content((StartPlayback = "application/json"), ("audio/ogg")),
    ),
    responses(
        (status = 201, description = "Playing from the next tick", body = Playback),
        (status = 400, description = "`bad_json`, `bad_file_name`, `bad_body`", body = ErrorBody),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden`", body = ErrorBody),
        (status = 404, description = "`room_not_found`, `file_not_found`", body = ErrorBody),
        (status = 307, description = "Cluster mode: the room is on another node; follow `Location`"),
        (status = 413, description = "`file_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 422, description = "`bad_audio_file`: not Ogg/Opus with 20 ms frames (the message says what)", body = ErrorBody),
        (status = 429, description = "`too_many_playbacks` (`playback.max_per_room`)", body = ErrorBody),
    ),
)]
pub(super) async fn start(
    State(api): State<Arc<ApiState>>,
    req: RoomRequest,
    query: Result<Query<UploadQuery>, axum::extract::rejection::QueryRejection>,
    body: Body,
) -> Refused<Response> {
    let room = match req.room(&api, |g, room| may_manage(g, room, "playing a file into a room")).await? {
        Ok(room) => room,
        Err(elsewhere) => return Ok(elsewhere),
    };
    let max = api.cfg.playback.max_file_bytes;
    let kind = content_type(&req.headers);
    let (clip, looping) = match kind.as_str() {
        "audio/ogg" | "audio/opus" | "application/ogg" => {
            let Query(q) = query.map_err(|e| Refusal::bad_request("bad_value", e.body_text()))?;
            let bytes = read_body(&req.headers, body, max).await?;
            let clip = tokio::task::spawn_blocking(move || Clip::parse("upload", &bytes))
                .await
                .map_err(|e| Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
                .map_err(|e| Refusal::from(LoadError::Bad(e)))?;
            let clip = held_within(clip, max)?;
            (Arc::new(clip), q.looping.unwrap_or(false))
        }
        "application/json" => {
            // A name and a flag: the API's usual body limit is plenty.
            let bytes = read_body(&req.headers, body, api.cfg.max_body_bytes as u64).await.map_err(|e| {
                if e.status == StatusCode::PAYLOAD_TOO_LARGE {
                    Refusal::new(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", "the request body is too large")
                } else {
                    e
                }
            })?;
            let req: StartPlayback = super::body::json(&req.headers, &bytes, None)?;
            (load(&api, req.file).await?, req.looping)
        }
        _ => {
            return Err(Refusal::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send {\"file\": …} as application/json, or the file itself as audio/ogg",
            ));
        }
    };
    let info = room.play(clip, looping)?;
    Ok((StatusCode::CREATED, axum::Json(json(&info))).into_response())
}

/// What plays in the room, and its sounds (admin of the room).
#[utoipa::path(
    get,
    path = "/v1/rooms/{room}/playbacks",
    tag = "outputs",
    operation_id = "list_playbacks",
    params(("room" = String, Path, description = "The room's id"), super::access::Access),
    responses(
        (status = 200, description = "The playbacks under way and the room's sounds", body = Playbacks),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden`", body = ErrorBody),
        (status = 404, description = "`room_not_found`", body = ErrorBody),
        (status = 307, description = "Cluster mode: the room is on another node; follow `Location`"),
    ),
)]
pub(super) async fn list(State(api): State<Arc<ApiState>>, req: RoomRequest) -> Refused<Response> {
    let room = match req.room(&api, |g, room| may_manage(g, room, "looking at a room's playbacks")).await? {
        Ok(room) => room,
        Err(elsewhere) => return Ok(elsewhere),
    };
    let playbacks: Vec<serde_json::Value> = room.playbacks().iter().map(json).collect();
    let body = serde_json::json!({ "playbacks": playbacks, "sounds": room.sounds() });
    Ok(axum::Json(body).into_response())
}

/// Stops a playback (admin of the room).
#[utoipa::path(
    delete,
    path = "/v1/rooms/{room}/playbacks/{id}",
    tag = "outputs",
    operation_id = "stop_playback",
    params(
        ("room" = String, Path, description = "The room's id"),
        ("id" = u64, Path, description = "The playback's id"),
        super::access::Access,
    ),
    responses(
        (status = 200, description = "Stopped: where it was", body = Playback),
        (status = 400, description = "`bad_value` (not a playback id)", body = ErrorBody),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden`", body = ErrorBody),
        (status = 404, description = "`room_not_found`, `playback_not_found`", body = ErrorBody),
        (status = 307, description = "Cluster mode: the room is on another node; follow `Location`"),
    ),
)]
pub(super) async fn stop(State(api): State<Arc<ApiState>>, req: RoomRequest) -> Refused<Response> {
    let room = match req.room(&api, |g, room| may_manage(g, room, "stopping a playback")).await? {
        Ok(room) => room,
        Err(elsewhere) => return Ok(elsewhere),
    };
    let id = req.id("a playback id")?;
    let info = room.stop_playback(id)?;
    Ok(axum::Json(json(&info)).into_response())
}

/// The room's sounds (admin of the room).
#[utoipa::path(
    get,
    path = "/v1/rooms/{room}/sounds",
    tag = "outputs",
    operation_id = "show_sounds",
    params(("room" = String, Path, description = "The room's id"), super::access::Access),
    responses(
        (status = 200, description = "The room's enter and leave sounds and hold music", body = RoomSounds),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden`", body = ErrorBody),
        (status = 404, description = "`room_not_found`", body = ErrorBody),
        (status = 307, description = "Cluster mode: the room is on another node; follow `Location`"),
    ),
)]
pub(super) async fn show_sounds(State(api): State<Arc<ApiState>>, req: RoomRequest) -> Refused<Response> {
    let room = match req.room(&api, |g, room| may_manage(g, room, "looking at a room's sounds")).await? {
        Ok(room) => room,
        Err(elsewhere) => return Ok(elsewhere),
    };
    Ok(axum::Json(room.sounds()).into_response())
}

/// Changes the room's sounds (admin of the room): every file is read and
/// checked first; nothing changes unless all are good. A hold music
/// playing is replaced at once.
#[utoipa::path(
    put,
    path = "/v1/rooms/{room}/sounds",
    tag = "outputs",
    operation_id = "set_sounds",
    params(("room" = String, Path, description = "The room's id"), super::access::Access),
    request_body(content = SetSounds, content_type = "application/json", description = "File names of `playback.dir`; a field left out is kept, `null` or `\"\"` removes it"),
    responses(
        (status = 200, description = "The room's sounds now", body = RoomSounds),
        (status = 400, description = "`bad_json`, `bad_file_name`", body = ErrorBody),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`, `bad_ticket`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden`", body = ErrorBody),
        (status = 404, description = "`room_not_found`, `file_not_found`", body = ErrorBody),
        (status = 307, description = "Cluster mode: the room is on another node; follow `Location`"),
        (status = 413, description = "`file_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 422, description = "`bad_audio_file`", body = ErrorBody),
    ),
)]
pub(super) async fn set_sounds(State(api): State<Arc<ApiState>>, req: RoomRequest, body: Body) -> Refused<Response> {
    let room = match req.room(&api, |g, room| may_manage(g, room, "changing a room's sounds")).await? {
        Ok(room) => room,
        Err(elsewhere) => return Ok(elsewhere),
    };
    let bytes = read_body(&req.headers, body, api.cfg.max_body_bytes as u64).await?;
    let set: SetSounds = super::body::json(&req.headers, &bytes, None)?;
    let mut change = SoundsChange::default();
    for (field, name) in [(&mut change.enter, set.enter), (&mut change.leave, set.leave), (&mut change.hold, set.hold)]
    {
        *field = match name {
            None => None,
            Some(None) => Some(None),
            Some(Some(n)) if n.is_empty() => Some(None),
            Some(Some(n)) => Some(Some(load(&api, n).await?)),
        };
    }
    Ok(axum::Json(room.set_sounds(change)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_read_once_while_it_plays_and_again_when_it_changed() {
        let dir = std::env::temp_dir().join(format!("tutti-clip-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("a.opus"), playback::tone_file(440.0, 10)).expect("write");
        let d = dir.display().to_string();
        let cache = ClipCache::default();
        let first = load_file(&d, "a.opus", 1 << 20, Some(&cache)).expect("read");
        let again = load_file(&d, "a.opus", 1 << 20, Some(&cache)).expect("cached");
        assert!(Arc::ptr_eq(&first, &again), "one clip for both");
        assert!(!Arc::ptr_eq(&first, &load_file(&d, "a.opus", 1 << 20, None).expect("read")), "no cache: read");
        // Changed on disk: read again.
        std::fs::write(dir.join("a.opus"), playback::tone_file(440.0, 20)).expect("write");
        let changed = load_file(&d, "a.opus", 1 << 20, Some(&cache)).expect("read");
        assert_eq!(changed.len(), 20);
        // Nobody plays it: the cache does not keep it alive.
        let weak = Arc::downgrade(&changed);
        drop((first, again, changed));
        assert!(weak.upgrade().is_none());
        assert_eq!(load_file(&d, "a.opus", 1 << 20, Some(&cache)).expect("read").len(), 20);
        assert!(matches!(load_file(&d, "a.opus", 100, Some(&cache)), Err(LoadError::TooLarge { max: 100 })));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
