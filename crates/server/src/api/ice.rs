//! `GET /v1/rooms/{room}/ice-servers`: the STUN/TURN servers a client of
//! `room` should put in `RTCPeerConnection({iceServers})` before it makes
//! its offer, with TURN credentials minted for it (see [`crate::ice`]).
//! The same token as a join (`listen` on the room), as `Authorization:
//! Bearer` or `?token=`. The join's response carries the same servers as
//! WHIP `Link` headers ([`link_headers`]). TURN REST credentials expire
//! no later than the token that asked for them.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::access::authenticate_until;
use super::schema::{ErrorBody, shapes};
use super::state::ApiState;
use crate::auth::{Grant, unix_now};
use crate::refusal::{Refusal, Refused};
use crate::session::grants::may_see;

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct TokenQuery {
    /// The access token, for a client that cannot set `Authorization`.
    token: Option<String>,
}

/// Who the TURN REST username names: the token's identity, else the room.
fn user(grant: &Grant, room: &str) -> String {
    if grant.identity.is_empty() { room.to_owned() } else { grant.identity.clone() }
}

/// The servers for `grant` in `room`, now, with credentials that expire
/// no later than `expires_at` (the token's expiry, Unix seconds).
fn servers(api: &ApiState, grant: &Grant, room: &str, expires_at: Option<u64>) -> Vec<tutti_rtc::IceServer> {
    crate::ice::for_client_until(&api.cfg.ice_servers, &user(grant, room), unix_now(), expires_at)
}

/// The STUN/TURN servers for `RTCPeerConnection({iceServers})`, TURN
/// credentials minted for the caller (token with `listen`).
#[utoipa::path(
    get,
    path = "/v1/rooms/{room}/ice-servers",
    tag = "participants",
    operation_id = "ice_servers",
    security(("bearer" = []), ("token_query" = [])),
    params(("room" = String, Path, description = "The room's id"), TokenQuery),
    responses(
        (status = 200, description = "The servers (never cached)", body = shapes::IceServers),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`", body = ErrorBody),
        (status = 403, description = "`wrong_room`, `forbidden` (no `listen`)", body = ErrorBody),
    ),
)]
pub(crate) async fn ice_servers(
    State(api): State<Arc<ApiState>>,
    Path(room): Path<String>,
    headers: HeaderMap,
    query: Result<Query<TokenQuery>, axum::extract::rejection::QueryRejection>,
) -> Refused<Response> {
    let query = query.map(|Query(q)| q).unwrap_or_default();
    let (grant, expires_at) = authenticate_until(&api, &headers, query.token.as_deref())?;
    may_see(&grant, &room)?;
    if !grant.listen {
        return Err(Refusal::forbidden("ICE servers are for joining: the token needs the 'listen' permission"));
    }
    let body = serde_json::json!({ "ice_servers": servers(&api, &grant, &room, expires_at) });
    // Credentials: never cached.
    Ok(([(header::CACHE_CONTROL, "no-store")], axum::Json(body)).into_response())
}

/// Adds the WHIP `Link: <url>; rel="ice-server"` headers for `grant` to a
/// join's response, expiring no later than `expires_at` (the token's expiry).
pub(crate) fn link_headers(
    api: &ApiState,
    grant: &Grant,
    room: &str,
    expires_at: Option<u64>,
    response: &mut Response,
) {
    if api.cfg.ice_servers.is_empty() {
        return;
    }
    let headers = response.headers_mut();
    for link in crate::ice::link_headers(&servers(api, grant, room, expires_at)) {
        if let Ok(v) = HeaderValue::from_str(&link) {
            headers.append(header::LINK, v);
        }
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}
