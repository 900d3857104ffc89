//! Redirect tickets: what a `307` to another node carries in place of the
//! caller's token (the least grant its request needs, bound to the
//! request's method and path, single use), and the `moved` message of a
//! room WebSocket with the ticket of the page's way in there (`enter`).

use axum::http::{Method, StatusCode, Uri};
use tutti_cluster::{Cluster, Owner, TicketClaims, TicketError};

use crate::auth::Grant;
use crate::refusal::{Refusal, Refused};

/// Close code of a WebSocket whose room is on another node.
pub(crate) const CLOSE_MOVED: u16 = 4307;

pub(crate) fn ticket_error(e: TicketError) -> Refusal {
    match e {
        TicketError::Unavailable(m) => {
            Refusal::cluster_unavailable(format!("the redirect ticket cannot be checked now: {m}"), 2)
        }
        e => Refusal::new(StatusCode::UNAUTHORIZED, "bad_ticket", format!("the redirect ticket was refused: {e}")),
    }
}

/// What a ticket carries of a grant (the identity goes as the ticket's own field).
fn grants_json(grant: &Grant) -> serde_json::Value {
    let mut grants =
        serde_json::json!({ "room": grant.room, "speak": grant.speak, "listen": grant.listen, "admin": grant.admin });
    if !grant.attributes.is_empty() {
        grants["attributes"] = serde_json::json!(grant.attributes);
    }
    grants
}

/// The least of `grant` that the request `method path` about `room` needs
/// on the node it is redirected to: the room itself (never `*`); `admin`
/// only for a change that may need it, or an admin's join (not a read: a
/// room's admin joins as its moderator, spared by mute-all and free of the
/// one-participant-per-identity rule);
/// `speak`/`listen` only for a participant's routes (a join, its
/// `PATCH`/`DELETE`) and reads. The ticket is also bound to the request,
/// so what it carries serves that one request.
pub(crate) fn least_grant(grant: &Grant, room: &str, method: &Method, path: &str) -> Grant {
    let tail = path.strip_prefix("/v1/rooms/").and_then(|p| p.strip_prefix(room));
    let participant = tail.is_some_and(|t| t == "/participants" || t.starts_with("/participants/"));
    // The speaker feed is a read (a WebSocket's GET) that only a room's admin may open.
    let admin_read = tail == Some("/speakers");
    let read = *method == Method::GET && !admin_read;
    Grant {
        room: room.to_owned(),
        identity: grant.identity.clone(),
        speak: grant.speak && participant,
        listen: (grant.listen && (participant || read)) || (read && grant.admin),
        admin: grant.admin && !read,
        // A join there starts with the token's attributes.
        attributes: if participant { grant.attributes.clone() } else { Default::default() },
    }
}

pub(crate) fn grant_of(claims: &TicketClaims) -> Grant {
    let g = &claims.grants;
    let flag = |k: &str| g[k].as_bool().unwrap_or(false);
    Grant {
        room: g["room"].as_str().unwrap_or(&claims.room).to_owned(),
        identity: claims.identity.clone(),
        speak: flag("speak"),
        listen: flag("listen"),
        admin: flag("admin"),
        // Signed by a node of the cluster; held to the bounds all the same.
        attributes: serde_json::from_value(g["attributes"].clone())
            .ok()
            .filter(|a| crate::attributes::check(a).is_ok())
            .unwrap_or_default(),
    }
}

/// The path and query of a request, without the parameters a redirect
/// replaces (`ticket`, `token`: the new ticket stands in for both).
pub(crate) fn forwardable(uri: &Uri) -> String {
    let path = uri.path();
    let kept: Vec<&str> = uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty() && !p.starts_with("ticket=") && !p.starts_with("token="))
        .collect();
    if kept.is_empty() { path.to_owned() } else { format!("{path}?{}", kept.join("&")) }
}

/// Where a `307` to `owner` (the node holding `room`) sends the request
/// `method uri`: the same path and query on that node, with a ticket of
/// the least of `grant` the request needs ([`least_grant`]) bound to the
/// request's method and path. `extra_query` is added to the path (e.g. the
/// room id of a redirected create). `token_exp`: the expiry of the caller's
/// token (Unix seconds), carried in the ticket (`exp`) so that what the
/// request gets there (a join's TURN credentials) does not outlive it.
pub(crate) fn redirect_location(
    cluster: &Cluster,
    owner: &Owner,
    room: &str,
    (method, uri): (&Method, &Uri),
    extra_query: Option<&str>,
    (grant, token_exp): (&Grant, Option<u64>),
) -> Refused<String> {
    let least = least_grant(grant, room, method, uri.path());
    let mut grants = grants_json(&least);
    if let Some(exp) = token_exp {
        grants["exp"] = exp.into();
    }
    let ticket = cluster.mint_ticket(room, &grant.identity, grants, (method.as_str(), uri.path())).map_err(|e| {
        Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("cannot mint a redirect ticket: {e}"))
    })?;
    let mut path = forwardable(uri);
    if let Some(extra) = extra_query {
        path.push(if path.contains('?') { '&' } else { '?' });
        path.push_str(extra);
    }
    cluster.record_redirect();
    Ok(tutti_cluster::redirect_location(&owner.api_url, &path, &ticket))
}

/// The path the page goes to after `moved` (`GET /v1/rooms/{room}/enter`).
pub(crate) fn enter_path(room: &str) -> String {
    format!("/v1/rooms/{room}/enter")
}

/// The ticket of a `moved` message (a WebSocket whose room `room` is held
/// by another node): single-use, short-lived (`cluster.ticket_ttl_seconds`),
/// for `GET /v1/rooms/{room}/enter` only, carrying the socket's grant
/// narrowed to the room and the expiry of the socket's token (`token_exp`),
/// which the token `enter` gives back does not outlive.
pub(crate) fn moved_ticket(cluster: &Cluster, room: &str, grant: &Grant, token_exp: u64) -> Option<String> {
    let mut grants = grants_json(&Grant { room: room.to_owned(), ..grant.clone() });
    grants["exp"] = token_exp.into();
    let path = enter_path(room);
    match cluster.mint_ticket(room, &grant.identity, grants, ("GET", &path)) {
        Ok(ticket) => Some(ticket),
        Err(e) => {
            tracing::warn!(room, error = %e, "no ticket for a moved socket");
            None
        }
    }
}

/// The page's query parameters `enter` passes on to the page (after a
/// drain's `moved`, the page asks to join at once, as it was: `autojoin`,
/// `muted`, `hand`).
pub(crate) const PAGE_PARAMS: [&str; 5] = ["name", "processing", "autojoin", "muted", "hand"];

/// `value` with every byte but the unreserved ones (RFC 3986) as `%XX`.
pub(crate) fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
