//! Development mode is not a hole: with `auth.disabled`, anyone who reaches
//! the API may do anything, and "anyone" would include every web page the
//! user visits (a cross-site `fetch` or WebSocket to `127.0.0.1`), and any
//! site that rebinds its own name to `127.0.0.1` (DNS rebinding: the
//! browser then thinks the API is that site's).
//!
//! So, with auth disabled only:
//! - every request's `Host` must name this server as a local client would:
//!   a loopback address, `localhost` (or `*.localhost`), or the configured
//!   `http` address, any port: else 403 `bad_host` (a rebound name is none
//!   of these);
//! - a state-changing request (any method but GET, HEAD and OPTIONS) and a
//!   WebSocket upgrade with an `Origin` must come from such an origin too:
//!   else 403 `forbidden_origin`. Requests without `Origin` (curl, tools, a
//!   same-origin GET) pass: browsers send it on every cross-origin request
//!   that could change state.
//!
//! With auth on, tokens are never ambient (no cookies), so neither check is needed.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::refusal::Refusal;

/// Strips `:port` from `host[:port]` or `[v6][:port]`.
fn without_port(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split_once(']').map_or("", |(host, _)| host);
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    }
}

/// Whether `authority` (`host[:port]`) names this server as a local client would.
pub(crate) fn local_authority(authority: &str, http: SocketAddr) -> bool {
    let host = without_port(authority.trim()).trim_end_matches('.').to_ascii_lowercase();
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    match host.parse::<IpAddr>() {
        Ok(ip) => ip.is_loopback() || ip == http.ip(),
        Err(_) => false,
    }
}

/// Whether an `Origin` value is a local one (`null`, an opaque origin, is not).
fn local_origin(origin: &str, http: SocketAddr) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else { return false };
    if !matches!(scheme, "http" | "https") {
        return false;
    }
    local_authority(rest.split('/').next().unwrap_or(""), http)
}

fn changes_state(method: &Method, headers: &HeaderMap) -> bool {
    let upgrade =
        headers.get(header::UPGRADE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    upgrade || !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Why a request is refused in development mode, if it is.
pub(crate) fn check(method: &Method, headers: &HeaderMap, http: SocketAddr) -> Result<(), Refusal> {
    if let Some(host) = headers.get(header::HOST) {
        let host = host.to_str().unwrap_or("");
        if !local_authority(host, http) {
            return Err(Refusal::new(
                axum::http::StatusCode::FORBIDDEN,
                "bad_host",
                format!(
                    "auth is disabled, so only local clients are served: Host '{host}' is not localhost, a loopback \
                     address or {http}"
                ),
            ));
        }
    }
    if changes_state(method, headers)
        && let Some(origin) = headers.get(header::ORIGIN)
    {
        let origin = origin.to_str().unwrap_or("");
        if !local_origin(origin, http) {
            return Err(Refusal::new(
                axum::http::StatusCode::FORBIDDEN,
                "forbidden_origin",
                format!(
                    "auth is disabled, so only pages served from localhost may change anything: Origin '{origin}' \
                     is another site"
                ),
            ));
        }
    }
    Ok(())
}

/// The middleware (installed only with auth disabled); the state is the configured `http` address.
pub(crate) async fn guard(State(http): State<SocketAddr>, request: Request, next: Next) -> Response {
    match check(request.method(), request.headers(), http) {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_hosts_and_origins_pass_others_do_not() {
        let http = SocketAddr::from(([127, 0, 0, 1], 8080));
        for ok in
            ["127.0.0.1:8080", "127.0.0.2", "localhost", "LOCALHOST:3000", "app.localhost:1", "[::1]:8080", "[::1]"]
        {
            assert!(local_authority(ok, http), "{ok}");
        }
        for bad in ["evil.example", "evil.example:8080", "127.0.0.1.nip.io:8080", "10.0.0.1:8080", "", "[::1"] {
            assert!(!local_authority(bad, http), "{bad}");
        }
        assert!(local_origin("http://localhost:3000", http));
        assert!(local_origin("http://127.0.0.1:8080", http));
        for bad in ["null", "https://evil.example", "http://evil.example:8080", "file://", "chrome-extension://abc"] {
            assert!(!local_origin(bad, http), "{bad}");
        }
    }

    #[test]
    fn reads_without_origin_pass_and_cross_site_writes_do_not() {
        let http = SocketAddr::from(([127, 0, 0, 1], 8080));
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:8080".parse().expect("value"));
        assert!(check(&Method::POST, &h, http).is_ok(), "no Origin: a tool");
        h.insert(header::ORIGIN, "https://evil.example".parse().expect("value"));
        assert!(check(&Method::GET, &h, http).is_ok(), "a cross-site read of a local host: the browser's CORS rules");
        assert_eq!(check(&Method::POST, &h, http).map_err(|e| e.code), Err("forbidden_origin"));
        h.insert(header::UPGRADE, "websocket".parse().expect("value"));
        assert_eq!(check(&Method::GET, &h, http).map_err(|e| e.code), Err("forbidden_origin"));
        h.insert(header::HOST, "rebound.example:8080".parse().expect("value"));
        assert_eq!(check(&Method::GET, &h, http).map_err(|e| e.code), Err("bad_host"));
    }
}
