//! `GET /v1/rooms/{room}/enter?ticket=…`: where the page lands after a
//! WebSocket's `moved`, on the node holding the room (see `crate::cluster`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tutti_cluster::{RoomSpread, TicketError};

use super::access::Target;
use super::state::ApiState;
use crate::auth::unix_now;
use crate::cluster::locate::locate_for_join;
use crate::cluster::tickets::{PAGE_PARAMS, grant_of, percent_encode, ticket_error};
use crate::refusal::{Refusal, Refused};

/// `GET /v1/rooms/{room}/enter?ticket=…[&name=…&processing=…]`: where the
/// page lands after a `moved`, on the node holding the room. Burns the
/// ticket (single use, bound to this path) and answers `303 See Other` to
/// the page at this origin (`/?room=…#token=…`), with an access token for
/// this room only, the ticket's grant, expiring with the token the socket
/// was opened with. A bad or used ticket: 401 `bad_ticket`.
#[utoipa::path(
    get,
    path = "/v1/rooms/{room}/enter",
    tag = "cluster",
    operation_id = "enter",
    security(()),
    params(
        ("room" = String, Path, description = "The room's id"),
        ("ticket" = String, Query, description = "The single-use ticket of a `moved` message"),
        ("name" = Option<String>, Query, description = "Passed on to the page"),
        ("processing" = Option<String>, Query, description = "Passed on to the page"),
        ("autojoin" = Option<String>, Query, description = "Passed on to the page"),
        ("muted" = Option<String>, Query, description = "Passed on to the page"),
        ("hand" = Option<String>, Query, description = "Passed on to the page"),
    ),
    responses(
        (status = 303, description = "To the page on this node, `/?…&room=<room>#token=<token>`", headers(("Location" = String))),
        (status = 401, description = "`bad_ticket` (malformed, used, expired, or for another path)", body = super::schema::ErrorBody),
        (status = 404, description = "`not_found`: not a cluster node with auth", body = super::schema::ErrorBody),
        (status = 503, description = "`cluster_unavailable`", body = super::schema::ErrorBody),
    ),
)]
pub(crate) async fn enter(
    State(api): State<Arc<ApiState>>,
    Path(room): Path<String>,
    target: Target,
    query: Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>,
) -> Refused<Response> {
    let query = query.map(|Query(q)| q).unwrap_or_default();
    let (Some(cluster), Some(auth)) = (&api.node.dir, &api.auth) else {
        return Err(Refusal::new(StatusCode::NOT_FOUND, "not_found", "only cluster nodes with auth hand out tickets"));
    };
    let ticket = query.get("ticket").ok_or_else(|| ticket_error(TicketError::Malformed))?;
    let claims = cluster.verify_ticket(ticket, &room, target.request()).await.map_err(ticket_error)?;
    let now = unix_now();
    let exp = claims.grants["exp"].as_u64().filter(|&exp| exp > now).ok_or_else(|| {
        Refusal::new(StatusCode::UNAUTHORIZED, "bad_ticket", "the token this ticket was minted for has expired")
    })?;
    let token = auth.mint(&grant_of(&claims), Duration::from_secs(exp - now), now).map_err(|e| {
        Refusal::new(StatusCode::UNAUTHORIZED, "bad_ticket", format!("no token for this ticket's grant: {e}"))
    })?;
    // A spread room the placement sent this page to: hosted here now (this
    // node joins its span), so that the page's socket stays here. Whatever
    // goes wrong, the socket says so.
    if cluster.config().room_spread != RoomSpread::Off
        && api.rooms.get(&room).is_err()
        && let Err(e) = locate_for_join(&api.node, &room, true).await
    {
        tracing::debug!(room, code = e.code, "a moved page's room is not hosted here yet");
    }
    let mut page: Vec<String> =
        PAGE_PARAMS.iter().filter_map(|&k| query.get(k).map(|v| format!("{k}={}", percent_encode(v)))).collect();
    if cluster.config().room_spread != RoomSpread::Off {
        // The page's socket names this node: it stays here (see `locate_for_socket`).
        page.push(format!("node={}", percent_encode(cluster.node_id())));
    }
    page.push(format!("room={}", percent_encode(&room)));
    // In the fragment: never sent to a server, nor in a Referer.
    let location = HeaderValue::from_str(&format!("/?{}#token={token}", page.join("&")))
        .map_err(|_| Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "bad page location"))?;
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    headers.insert(header::LOCATION, location);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    Ok(response)
}

/// The cluster's own routes.
pub(crate) fn routes() -> axum::Router<Arc<ApiState>> {
    axum::Router::new().route("/v1/rooms/{room}/enter", axum::routing::get(enter))
}
