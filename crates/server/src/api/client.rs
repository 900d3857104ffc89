//! Who is calling, and from where, before any handler runs:
//!
//! - The client's address: the TCP peer's, or, when the peer is a trusted
//!   reverse proxy (`limits.trusted_proxies`), the one its
//!   `X-Forwarded-For` names (else `Forwarded`'s `for=`): the last address
//!   in it that is not a trusted proxy itself, so a client cannot pass
//!   itself off as another by sending the header (the proxy appends the
//!   address it saw). The handlers find it in `ConnectInfo` (the join rate
//!   limit keys on it). Headers from any other peer are ignored.
//! - The share of the connection slots the request's connection counts
//!   against (see `api::http`): its token's identity's (or the token's,
//!   when it names none) once a request carries a valid token, else its
//!   client address's. Tokens that administer every room (the operator's
//!   own tools) stay counted by address. A share that is full refuses the
//!   request, and the connection closes: 429 `too_many_connections` for an
//!   identity, 503 `too_many_connections` "from your address" for an
//!   address (a trusted proxy's connection, counted by no address until a
//!   request says for whom).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::access::{authenticate_until, bearer};
use super::http::{ConnectionSlot, Limit, Share};
use super::state::ApiState;
use crate::cidr::{Cidr, any_contains};
use crate::refusal::Refusal;

/// Forwarded hops looked at, at most (from the right: the nearest first).
const MAX_HOPS: usize = 32;

/// What the middleware needs: the API (its token verifier) and the trusted proxies.
pub(crate) struct Clients {
    pub(crate) api: Arc<ApiState>,
    pub(crate) trusted: Vec<Cidr>,
}

impl Clients {
    pub(crate) fn new(api: Arc<ApiState>) -> Arc<Self> {
        // Validated at load.
        let trusted = crate::cidr::parse_all(&api.cfg.limits.trusted_proxies).unwrap_or_default();
        Arc::new(Self { api, trusted })
    }
}

#[derive(Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

/// The middleware (see the module docs).
pub(crate) async fn admit(State(clients): State<Arc<Clients>>, mut request: Request, next: Next) -> Response {
    let Some(ConnectInfo(peer)) = request.extensions().get::<ConnectInfo<SocketAddr>>().copied() else {
        return next.run(request).await;
    };
    let client = client_address(peer, request.headers(), &clients.trusted);
    if client != peer {
        request.extensions_mut().insert(ConnectInfo(client));
    }
    if let Some(slot) = request.extensions().get::<ConnectionSlot>() {
        let query = Query::<TokenQuery>::try_from_uri(request.uri()).ok().and_then(|Query(q)| q.token);
        let share = share(&clients.api, request.headers(), query.as_deref(), client.ip());
        if let Err(limit) = slot.claim(share) {
            slot.refused(limit, client.ip());
            return refusal(limit);
        }
    }
    next.run(request).await
}

/// The share a request's connection counts against (see the module docs).
fn share(api: &ApiState, headers: &HeaderMap, query_token: Option<&str>, client: IpAddr) -> Share {
    let address = Share::Address(crate::limit::key(client));
    let Some(token) = bearer(headers).or(query_token).filter(|_| api.auth.is_some()) else {
        return address;
    };
    match authenticate_until(api, headers, query_token) {
        Ok((grant, _)) if grant.may_list() => address,
        Ok((grant, _)) if grant.identity.is_empty() => Share::Token(token.to_owned()),
        Ok((grant, _)) => Share::Identity(grant.identity),
        Err(_) => address,
    }
}

/// The answer to a request refused at `limit`; the connection closes after it.
fn refusal(limit: Limit) -> Response {
    let status = if limit == Limit::Identity { StatusCode::TOO_MANY_REQUESTS } else { StatusCode::SERVICE_UNAVAILABLE };
    let mut response = Refusal::new(status, "too_many_connections", limit.message()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// The client's address: `peer`, or for a trusted proxy the address its
/// forwarding headers name (see the module docs). A hop that does not
/// parse (`unknown`, an obfuscated name) ends the walk at the peer.
pub(crate) fn client_address(peer: SocketAddr, headers: &HeaderMap, trusted: &[Cidr]) -> SocketAddr {
    if !any_contains(trusted, peer.ip()) {
        return peer;
    }
    let hops = forwarded_hops(headers);
    let mut client = peer.ip();
    for hop in hops.iter().rev().take(MAX_HOPS) {
        let Some(ip) = parse_hop(hop) else { return peer };
        client = ip;
        if !any_contains(trusted, ip) {
            break;
        }
    }
    if client == peer.ip() { peer } else { SocketAddr::new(client, 0) }
}

/// The hops of `X-Forwarded-For` (every such header, in order), or when
/// there is none, the `for=` of each `Forwarded` element.
fn forwarded_hops(headers: &HeaderMap) -> Vec<&str> {
    let values = |name: &str| headers.get_all(name).into_iter().filter_map(|v| v.to_str().ok()).collect::<Vec<_>>();
    let xff: Vec<&str> = values("x-forwarded-for").into_iter().flat_map(|v| v.split(',')).collect();
    if !xff.is_empty() {
        return xff;
    }
    values("forwarded")
        .into_iter()
        .flat_map(|v| v.split(','))
        .filter_map(|element| {
            element.split(';').find_map(|pair| {
                let (key, value) = pair.split_once('=')?;
                key.trim().eq_ignore_ascii_case("for").then_some(value)
            })
        })
        .collect()
}

/// One hop: `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`, `[2001:db8::1]:4711`, quoted or not.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim().trim_matches('"');
    if let Some(rest) = hop.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    hop.parse()
        .ok()
        .or_else(|| hop.rsplit_once(':').and_then(|(host, _)| host.parse::<std::net::Ipv4Addr>().ok()).map(IpAddr::V4))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, HeaderValue::from_str(value).expect("a header value"));
        }
        h
    }

    fn client(peer: &str, pairs: &[(&'static str, &str)]) -> String {
        let trusted = crate::cidr::parse_all(&["10.0.0.0/8".into(), "127.0.0.1".into()]).expect("valid");
        let peer: SocketAddr = peer.parse().expect("a socket address");
        client_address(peer, &headers(pairs), &trusted).ip().to_string()
    }

    #[test]
    fn the_client_is_the_nearest_untrusted_hop_of_a_trusted_proxy() {
        assert_eq!(client("127.0.0.1:5000", &[("x-forwarded-for", "203.0.113.7")]), "203.0.113.7");
        // A client's own claim on the left is passed over: the proxies' hops are on the right.
        assert_eq!(client("127.0.0.1:5000", &[("x-forwarded-for", "1.1.1.1, 203.0.113.7, 10.0.0.2")]), "203.0.113.7");
        assert_eq!(
            client("127.0.0.1:5000", &[("x-forwarded-for", "1.1.1.1"), ("x-forwarded-for", "203.0.113.8")]),
            "203.0.113.8",
            "several headers are one list"
        );
        assert_eq!(client("127.0.0.1:5000", &[("x-forwarded-for", "10.0.0.3, 10.0.0.2")]), "10.0.0.3", "all trusted");
        assert_eq!(
            client("127.0.0.1:5000", &[("forwarded", r#"for=192.0.2.60;proto=https, for="[2001:db8::7]:4711""#)]),
            "2001:db8::7"
        );
        assert_eq!(client("127.0.0.1:5000", &[("forwarded", "For=192.0.2.60:80")]), "192.0.2.60");
        // Untrusted peers' headers, garbage and no header: the peer.
        assert_eq!(client("192.0.2.9:5000", &[("x-forwarded-for", "203.0.113.7")]), "192.0.2.9");
        assert_eq!(client("127.0.0.1:5000", &[("x-forwarded-for", "203.0.113.7, unknown")]), "127.0.0.1");
        assert_eq!(client("127.0.0.1:5000", &[("forwarded", "for=_hidden")]), "127.0.0.1");
        assert_eq!(client("127.0.0.1:5000", &[]), "127.0.0.1");
    }
}
