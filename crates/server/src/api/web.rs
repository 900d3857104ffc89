//! The browser client: `GET /` (the page), `/app.js` and `/style.css`,
//! compiled into the binary from `crates/server/web/`, and `/tutti.js`, the
//! client SDK the page is built on (`sdk/js`, whose built ES module is
//! committed in `sdk/js/dist/`, so building the server needs no Node.js;
//! `tests/sdk.rs` fails when it differs from the sources). Plain HTML, CSS
//! and JavaScript modules: nothing loaded from another host, which the
//! Content-Security-Policy enforces (scripts, styles and connections to
//! this origin only).

use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

const INDEX_HTML: &str = include_str!("../../web/index.html");
const APP_JS: &str = include_str!("../../web/app.js");
const STYLE_CSS: &str = include_str!("../../web/style.css");
/// The client SDK (`sdk/js/src`, built by `npm run build`): web apps import it too.
const TUTTI_JS: &str = include_str!("../../../../sdk/js/dist/tutti.js");

/// Same origin only: `connect-src 'self'` covers the REST calls and the
/// WebSocket (`ws:`/`wss:` to this host); `data:` only for the empty favicon.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; media-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::HeaderName::from_static("permissions-policy"), "microphone=(self), camera=(), geolocation=()"),
        ],
        body,
    )
        .into_response()
}

/// The page's routes; merged into the API's router.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/app.js", get(app_js))
        .route("/tutti.js", get(tutti_js))
        .route("/style.css", get(style_css))
}

/// The page: `/?room=<room>#token=<token>` joins a room.
#[utoipa::path(get, path = "/", tag = "web", operation_id = "page", security(()),
    responses((status = 200, description = "The page", body = String, content_type = "text/html")))]
pub(super) async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

/// The page's script.
#[utoipa::path(get, path = "/app.js", tag = "web", operation_id = "page_script", security(()),
    responses((status = 200, description = "The script", body = String, content_type = "text/javascript")))]
pub(super) async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

/// The client SDK, an ES module (`sdk/js`): the page's script imports it.
#[utoipa::path(get, path = "/tutti.js", tag = "web", operation_id = "client_sdk", security(()),
    responses((status = 200, description = "The client SDK (ES module)", body = String, content_type = "text/javascript")))]
pub(super) async fn tutti_js() -> Response {
    asset("text/javascript; charset=utf-8", TUTTI_JS)
}

/// The page's style sheet.
#[utoipa::path(get, path = "/style.css", tag = "web", operation_id = "page_style", security(()),
    responses((status = 200, description = "The style sheet", body = String, content_type = "text/css")))]
pub(super) async fn style_css() -> Response {
    asset("text/css; charset=utf-8", STYLE_CSS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_nothing_from_other_hosts() {
        for (name, text) in
            [("index.html", INDEX_HTML), ("app.js", APP_JS), ("tutti.js", TUTTI_JS), ("style.css", STYLE_CSS)]
        {
            // No absolute URL (a scheme or `//` followed by a host); prose may say "https://".
            for (at, _) in text.match_indices("//") {
                let host = text[at + 2..].chars().next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '[');
                let before = text[..at].chars().next_back();
                let url = before == Some(':') || matches!(before, Some('"' | '\'' | '(' | '`'));
                let context = text.get(at.saturating_sub(12)..(at + 20).min(text.len())).unwrap_or_default();
                assert!(!(host && url), "{name} names another host: {context}");
            }
            assert!(!text.contains("@import"), "{name} imports");
        }
        assert!(INDEX_HTML.contains(r#"src="app.js""#) && INDEX_HTML.contains(r#"href="style.css""#));
        // The page's script is a module on the SDK, by a relative path (right behind a proxy's prefix too).
        assert!(INDEX_HTML.contains(r#"<script type="module" src="app.js">"#));
        assert!(APP_JS.contains("from './tutti.js';"));
        assert!(
            !INDEX_HTML.contains("<script>") && !INDEX_HTML.contains("style="),
            "nothing inline (the CSP forbids it)"
        );
    }
}
