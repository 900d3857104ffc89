//! Invites: `POST /v1/rooms/{room}/invites` mints a guest's token for one
//! room, for a room admin who wants to bring people in (the page's *Invite*
//! control, or an app's backend without a secret of its own).
//!
//! Request (JSON, every field optional; an empty body takes the defaults):
//! `{"permissions": "speak" | "listen", "ttl_seconds": N}`: `speak` (the
//! default) may talk and listen, `listen` may only listen; the token lives
//! `ttl_seconds` (default 3600, from 60 to 604800 = 7 days), and never
//! beyond the expiry of the inviting token. A room takes at most
//! [`INVITES_PER_ROOM_PER_HOUR`] invites per hour on a node (429
//! `too_many_invites` with `Retry-After` beyond).
//! Answer: 201 `{"token", "url", "expires_at", "permissions", "identity"}`:
//! `url` is the page's link for the room with the token in its fragment
//! (`…/?room=R#token=…`, so it reaches neither server logs nor `Referer`),
//! on `cluster.api_url` when set, else on the `Host` the request came to;
//! `expires_at` in Unix seconds. Each invite has an identity of its own,
//! `guest-` and 8 random hex digits: an invite is for one guest. A ban, the
//! per-identity limits and "one participant per identity" act on it, so a
//! second person on the same link takes the first one's place: make one
//! link per guest. (A link for a group would need each person's own
//! identity: an exchange of the link's token for a personal one.)
//!
//! Order of checks, as everywhere: 401 (no valid token), 403 (`wrong_room`,
//! or `forbidden` for a token that does not manage the room), then 400
//! (`bad_room_id`, `bad_json`, `bad_value`). The room need not exist yet
//! (any node of a cluster mints, with the shared secret); a guest cannot
//! create it, so invite to a room that is there. With auth disabled there
//! are no tokens: the answer has `token` and `expires_at` null and a plain
//! link.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::access::authenticate_until;
use super::body::{body, json};
use super::schema::ErrorBody;
use super::state::{ApiState, INVITES_PER_ROOM_PER_HOUR};
use crate::auth::{Grant, is_room_id, unix_now};
use crate::refusal::{Refusal, Refused};

/// An invite's lifetime when the request names none.
pub const DEFAULT_TTL_SECONDS: u64 = 3600;
/// The shortest lifetime an invite may ask for.
pub const MIN_TTL_SECONDS: u64 = 60;
/// The longest: a week.
pub const MAX_TTL_SECONDS: u64 = 7 * 24 * 3600;

/// What a guest may do.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Permissions {
    /// Talk and listen.
    #[default]
    Speak,
    /// Listen only: muted for good.
    Listen,
}

/// The request body.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct InviteRequest {
    /// Default `speak`.
    permissions: Option<Permissions>,
    /// How long the token lives: 60 to 604800 (7 days); default 3600.
    ttl_seconds: Option<u64>,
}

/// The answer.
#[derive(Debug, Serialize, ToSchema)]
struct Invite {
    /// The guest's access token (null with auth disabled).
    token: Option<String>,
    /// The page's link for the room, the token in its fragment.
    url: String,
    /// Unix seconds (null with auth disabled).
    expires_at: Option<u64>,
    permissions: Permissions,
    /// `guest-` and 8 hex digits: one invite, one guest.
    identity: String,
}

/// The invite route; merged into the API's router.
pub(crate) fn routes() -> Router<Arc<ApiState>> {
    Router::new().route("/v1/rooms/{room}/invites", post(create_invite))
}

/// Mints a guest's token for the room (admin of the room); the room need not exist yet.
#[utoipa::path(
    post,
    path = "/v1/rooms/{room}/invites",
    tag = "invites",
    operation_id = "create_invite",
    params(("room" = String, Path, description = "The room's id")),
    request_body(content = Option<InviteRequest>, content_type = "application/json", description = "Every field optional; an empty body takes the defaults"),
    responses(
        (status = 201, description = "The invite", body = Invite),
        (status = 400, description = "`bad_room_id`, `bad_json`, `bad_value`", body = ErrorBody),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden`: not an admin of the room", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 429, description = "`too_many_invites`: the room's invites this hour (`Retry-After`)", body = ErrorBody),
    ),
)]
async fn create_invite(
    State(api): State<Arc<ApiState>>,
    Path(room): Path<String>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Refused<Response> {
    let (grant, inviter_expires) = authenticate_until(&api, &headers, None)?;
    if !grant.covers(&room) {
        return Err(Refusal::wrong_room(&room));
    }
    if !grant.may_manage(&room) {
        return Err(Refusal::forbidden(format!("inviting to room '{room}' needs an admin token for it")));
    }
    if !is_room_id(&room) {
        return Err(Refusal::bad_request("bad_room_id", "a room name is 1 to 64 letters, digits, '-' or '_'"));
    }
    let req: InviteRequest = json(&headers, &body(raw)?, Some(InviteRequest::default()))?;
    let ttl = req.ttl_seconds.unwrap_or(DEFAULT_TTL_SECONDS);
    if !(MIN_TTL_SECONDS..=MAX_TTL_SECONDS).contains(&ttl) {
        return Err(Refusal::bad_request(
            "bad_value",
            format!("ttl_seconds must be within {MIN_TTL_SECONDS} to {MAX_TTL_SECONDS} (7 days)"),
        ));
    }
    let permissions = req.permissions.unwrap_or_default();
    let hash = std::hash::BuildHasher::hash_one(&api.room_hasher, room.as_str());
    api.invites.check(hash, std::time::Instant::now()).map_err(|retry| {
        let mut e = Refusal::rate_limited(retry);
        e.code = "too_many_invites";
        e.message = format!(
            "room '{room}' had {INVITES_PER_ROOM_PER_HOUR} invites within the hour; retry in {} s",
            retry.as_secs_f64().ceil().max(1.0)
        );
        e
    })?;
    // Each guest its own identity (one identity holds one participant): no
    // randomness, no invite, rather than one identity shared by every guest.
    let nonce = getrandom::u32().map_err(|e| {
        Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("no randomness for a guest identity: {e}"))
    })?;
    let identity = format!("guest-{nonce:08x}");
    let link = page_link(&api, &headers, &room);
    let invite = match &api.auth {
        None => Invite { token: None, url: link, expires_at: None, permissions, identity },
        Some(auth) => {
            let guest = match permissions {
                Permissions::Speak => Grant::participant(room.as_str(), identity.as_str()),
                Permissions::Listen => Grant::listener(room.as_str(), identity.as_str()),
            };
            let now = unix_now();
            // No longer than the inviter's own token: a guest link never outlives its host's access.
            let ttl = inviter_expires.map_or(ttl, |exp| ttl.min(exp.saturating_sub(now).max(1)));
            // The room and identity were checked above: minting cannot fail on them.
            let token = auth
                .mint(&guest, Duration::from_secs(ttl), now)
                .map_err(|e| Refusal::bad_request("bad_room_id", e.to_string()))?;
            let url = format!("{link}#token={token}");
            Invite { token: Some(token), url, expires_at: Some(now + ttl), permissions, identity }
        }
    };
    Ok((StatusCode::CREATED, axum::Json(invite)).into_response())
}

/// The page's link for `room`: on `cluster.api_url` when set, else on the
/// `Host` the request came to (plain http; behind a TLS proxy, set
/// `cluster.api_url` or build the link from `token`), else the API address.
fn page_link(api: &ApiState, headers: &HeaderMap, room: &str) -> String {
    let configured = api.cfg.cluster.api_url.trim_end_matches('/');
    let base = if configured.is_empty() {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).filter(|h| is_authority(h));
        format!("http://{}", host.map_or_else(|| api.cfg.http.to_string(), str::to_owned))
    } else {
        configured.to_owned()
    };
    format!("{base}/?room={room}")
}

/// Whether `host` is a bare `host[:port]` (nothing that could end a URL's authority early).
fn is_authority(host: &str) -> bool {
    !host.is_empty() && host.len() <= 255 && host.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:[]_".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_authorities_make_a_link() {
        for ok in ["127.0.0.1:8080", "tutti.example.org", "[::1]:8080"] {
            assert!(is_authority(ok), "{ok}");
        }
        for bad in ["", "evil.example/x?", "a@b", "a b", "host#frag"] {
            assert!(!is_authority(bad), "{bad}");
        }
    }
}
