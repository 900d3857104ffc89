//! Who is asking, and where the room they name is: the access token
//! (`Authorization: Bearer`, or `?token=` on a socket), or a redirect
//! ticket another node's `307` carries in its place; and the `307` itself
//! for a room or participant on another node (`crate::cluster` decides
//! where; the ticket is minted there).
//!
//! The checks run in a fixed order, so that a caller learns nothing about
//! a room it may not see: 401 (no valid token), 403 (not for this room, or
//! lacking the permission), 429 (join rate), and only then 404, 409, 400.

use std::sync::Arc;

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tutti_cluster::Owner;

use super::state::ApiState;
use crate::auth::{Grant, unix_now};
use crate::cluster::locate::{self, Found};
use crate::cluster::tickets::{grant_of, redirect_location, ticket_error};
use crate::refusal::{Refusal, Refused};
use crate::room::Room;

/// The token of `Authorization: Bearer <token>`; `Some("!")` for another
/// scheme (refused as malformed, not as missing).
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().unwrap_or("");
    match value.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => Some(token.trim()),
        _ => Some("!"),
    }
}

/// The caller's grant: from its token (the `Authorization` header, else
/// `query_token`), or every permission when auth is disabled.
pub(crate) fn authenticate(api: &ApiState, headers: &HeaderMap, query_token: Option<&str>) -> Refused<Grant> {
    authenticate_until(api, headers, query_token).map(|(grant, _)| grant)
}

/// As [`authenticate`], with the token's expiry (Unix seconds; `None` when auth is disabled).
pub(crate) fn authenticate_until(
    api: &ApiState,
    headers: &HeaderMap,
    query_token: Option<&str>,
) -> Refused<(Grant, Option<u64>)> {
    let Some(auth) = &api.auth else { return Ok((Grant::admin(""), None)) };
    let token = bearer(headers).or(query_token).unwrap_or("");
    auth.verify_until(token, unix_now()).map(|(g, exp)| (g, Some(exp))).map_err(|e| Refusal::unauthorized(&e))
}

/// The query parameters a request may carry besides its body.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct Access {
    /// A redirect ticket (set by another node's `307`), standing in for the token.
    pub(crate) ticket: Option<String>,
    /// The room a redirected `POST /v1/rooms` creates (its id was chosen
    /// by the node that redirected, so that the ticket names it).
    pub(crate) room: Option<String>,
}

/// The query of a request, or none when it does not parse.
pub(crate) fn access(query: Result<Query<Access>, axum::extract::rejection::QueryRejection>) -> Access {
    query.map(|Query(a)| a).unwrap_or_default()
}

/// The request a redirect ticket is minted for or checked against: its
/// method and its path (the query aside).
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) method: Method,
    pub(crate) uri: Uri,
}

impl Target {
    pub(crate) fn request(&self) -> (&str, &str) {
        (self.method.as_str(), self.uri.path())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Target {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self { method: parts.method.clone(), uri: parts.uri.clone() })
    }
}

/// The caller's grant: from the redirect ticket when the request carries
/// one (checked against this request's method and path, and burnt in
/// Redis: once in the whole cluster), else from its token as on a single node.
pub(crate) async fn caller(
    api: &ApiState,
    headers: &HeaderMap,
    target: &Target,
    ticket: Option<&str>,
    room: &str,
) -> Refused<Grant> {
    caller_until(api, headers, target, ticket, room).await.map(|(grant, _)| grant)
}

/// As [`caller`], with the grant's expiry (Unix seconds: the token's, or
/// for a ticket the token's it carries, else the ticket's own; `None` when
/// auth is disabled).
pub(crate) async fn caller_until(
    api: &ApiState,
    headers: &HeaderMap,
    target: &Target,
    ticket: Option<&str>,
    room: &str,
) -> Refused<(Grant, Option<u64>)> {
    let (Some(ticket), Some(cluster)) = (ticket, &api.node.dir) else {
        return authenticate_until(api, headers, None);
    };
    let claims = cluster.verify_ticket(ticket, room, target.request()).await.map_err(ticket_error)?;
    // The token's expiry the redirecting node carried; else the ticket's own.
    let exp = claims.grants["exp"].as_u64().unwrap_or(claims.exp);
    Ok((grant_of(&claims), Some(exp)))
}

/// A `307 Temporary Redirect` to `owner`, the node holding `room`, saying
/// `message`, carrying a ticket of the least of `grant` the request needs,
/// bound to the request's method and path. `extra_query` is added to the
/// path (e.g. the room id of a redirected create).
pub(crate) fn redirect(
    api: &ApiState,
    owner: &Owner,
    room: &str,
    target: &Target,
    extra_query: Option<&str>,
    grant: (&Grant, Option<u64>),
    message: String,
) -> Refused<Response> {
    let cluster =
        api.node.dir.as_ref().ok_or_else(|| Refusal::from(crate::room::RoomError::NoRoom(room.to_owned())))?;
    let location = redirect_location(cluster, owner, room, (&target.method, &target.uri), extra_query, grant)?;
    let body = serde_json::json!({
        "code": "room_elsewhere",
        "message": message,
        "node": owner.node_id,
        "api_url": owner.api_url,
    });
    let mut response = (StatusCode::TEMPORARY_REDIRECT, axum::Json(body)).into_response();
    let value = HeaderValue::from_str(&location)
        .map_err(|_| Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "bad redirect location"))?;
    response.headers_mut().insert(header::LOCATION, value);
    Ok(response)
}

/// [`redirect`] saying "room '{room}' is on node {node}".
pub(crate) fn redirect_room(
    api: &ApiState,
    owner: &Owner,
    room: &str,
    target: &Target,
    extra_query: Option<&str>,
    grant: (&Grant, Option<u64>),
) -> Refused<Response> {
    redirect(api, owner, room, target, extra_query, grant, locate::room_is_on(room, owner))
}

/// The room a request names if this node holds it (`Ok(Ok(room))`); in
/// cluster mode, else, the `307` to the node that does (`Ok(Err(redirect))`,
/// with a ticket of `grant`); else the error (`no_room`, 503). Check what
/// `grant` may do before: the ticket carries it.
pub(crate) async fn here(
    api: &ApiState,
    room: &str,
    target: &Target,
    grant: &Grant,
) -> Refused<Result<Arc<Room>, Response>> {
    found(api, locate::here(&api.node, room).await?, room, target, grant)
}

/// The room of a participant's route (`PATCH`, `DELETE` and `…/move` of
/// `/v1/rooms/{room}/participants/{id}`), or the `307` to the node of the
/// participant or of the room: see [`locate::participant_here`].
pub(crate) async fn participant_here(
    api: &ApiState,
    room: &str,
    id: u64,
    target: &Target,
    grant: &Grant,
    ticketed: bool,
) -> Refused<Result<Arc<Room>, Response>> {
    found(api, locate::participant_here(&api.node, room, id, ticketed).await?, room, target, grant)
}

fn found(
    api: &ApiState,
    found: Found,
    room: &str,
    target: &Target,
    grant: &Grant,
) -> Refused<Result<Arc<Room>, Response>> {
    match found {
        Found::Here(state) => Ok(Ok(state)),
        Found::Elsewhere(owner, message) => redirect(api, &owner, room, target, None, (grant, None), message).map(Err),
    }
}
