//! Cross-origin calls (CORS) from web apps on other origins
//! (`cors.allowed_origins`), with tower-http's `CorsLayer`.
//!
//! Empty list (the default): no layer at all, so the API is same-origin
//! only; a preflight (`OPTIONS`) then gets the router's JSON 405. Listed
//! origins: a preflight from one of them is answered 200 with the allowed
//! methods and headers; every response to them carries
//! `Access-Control-Allow-Origin`, errors included (a web app reads the JSON
//! error's code). `"*"` allows any origin, for development. Credentials
//! (cookies) are never allowed: tokens travel in `Authorization`, which a
//! preflight allows explicitly, so `"*"` never meets credentials (browsers
//! and tower-http refuse that pair). An origin that is not listed gets no
//! CORS header at all ([`only_allowed`]), and its preflight a JSON 403
//! `origin_not_allowed`.

use std::time::Duration;

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::config::CorsConfig;
use crate::refusal::Refusal;

/// How long a browser may cache a preflight's answer.
const PREFLIGHT_MAX_AGE: Duration = Duration::from_secs(600);

/// The layer for `cfg`, or `None` when no other origin is allowed.
pub(crate) fn layer(cfg: &CorsConfig) -> Option<CorsLayer> {
    if cfg.allowed_origins.is_empty() {
        return None;
    }
    let origin = if cfg.allowed_origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else if cfg.allowed_origins.iter().any(|o| o.ends_with(":*")) {
        // A loopback host of any port (an SDK app's dev server): matched per request.
        let allowed = cfg.allowed_origins.clone();
        AllowOrigin::predicate(move |origin: &HeaderValue, _| {
            origin.to_str().is_ok_and(|o| allowed.iter().any(|a| crate::config::origin_matches(a, o)))
        })
    } else {
        // Checked by `CorsConfig::check` at start: every entry is a header-safe origin.
        AllowOrigin::list(cfg.allowed_origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    Some(
        CorsLayer::new()
            .allow_origin(origin)
            .allow_methods([Method::GET, Method::POST, Method::PATCH, Method::DELETE])
            .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE])
            .expose_headers([
                header::LOCATION,
                header::LINK,
                header::RETRY_AFTER,
                header::WWW_AUTHENTICATE,
                header::ETAG,
                HeaderName::from_static("accept-patch"),
            ])
            .max_age(PREFLIGHT_MAX_AGE),
    )
}

/// Outside the [`layer`]: an answer that does not allow the caller's origin
/// carries no other CORS header either (tower-http adds the allowed methods
/// and headers whatever the origin), and a preflight from such an origin is
/// a JSON 403 `origin_not_allowed`, so the refusal is plain to whoever looks.
pub(crate) async fn only_allowed(request: Request, next: Next) -> Response {
    let headers = request.headers();
    let preflight = request.method() == Method::OPTIONS
        && headers.contains_key(header::ORIGIN)
        && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut response = next.run(request).await;
    if response.headers().contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN) {
        return response;
    }
    if preflight {
        return Refusal::new(
            StatusCode::FORBIDDEN,
            "origin_not_allowed",
            "this origin may not call the API from a web page (cors.allowed_origins)",
        )
        .into_response();
    }
    let names: Vec<HeaderName> =
        response.headers().keys().filter(|k| k.as_str().starts_with("access-control-")).cloned().collect();
    for name in names {
        response.headers_mut().remove(name);
    }
    response
}
