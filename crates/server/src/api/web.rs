//! The browser client: `GET /` (the page), `/app.js` and `/style.css`,
//! compiled into the binary from `crates/server/web/`, and `/tutti.js`, the
//! client SDK the page is built on (`sdk/js`, whose built ES module is
//! committed in `sdk/js/dist/`, so building the server needs no Node.js;
//! `tests/sdk.rs` fails when it differs from the sources). Plain HTML, CSS
//! and JavaScript modules: nothing loaded from another host, which the
//! Content-Security-Policy enforces (scripts, styles and connections to
//! this origin only).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::state::ApiState;

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

/// Origins the page may connect to besides its own, in a cluster whose
/// rooms spread: the other nodes' (the page's SDK looks for its room there
/// when its node is lost; the snapshot names at most 8 of them).
const MAX_CONNECT_NODES: usize = 32;

/// [`CONTENT_SECURITY_POLICY`] with `connect-src` opened to the API URLs
/// given (each as `http(s)://host:port` and `ws(s)://host:port`); an URL
/// that does not parse as one is left out.
fn policy_with(api_urls: &[String]) -> String {
    let mut sources = String::new();
    for url in api_urls {
        let Ok(uri) = url.parse::<Uri>() else { continue };
        let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else { continue };
        // A host and port only: nothing that could end the directive or add a source.
        let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']');
        if !authority.as_str().chars().all(plain) {
            continue;
        }
        let ws = match scheme {
            "http" => "ws",
            "https" => "wss",
            _ => continue,
        };
        sources.push_str(&format!(" {scheme}://{authority} {ws}://{authority}"));
    }
    CONTENT_SECURITY_POLICY.replace("connect-src 'self';", &format!("connect-src 'self'{sources};"))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    asset_with(content_type, body, HeaderValue::from_static(CONTENT_SECURITY_POLICY))
}

fn asset_with(content_type: &'static str, body: &'static str, policy: HeaderValue) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (header::CONTENT_SECURITY_POLICY, policy),
            (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
            (header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (
                header::HeaderName::from_static("permissions-policy"),
                HeaderValue::from_static("microphone=(self), camera=(), geolocation=()"),
            ),
        ],
        body,
    )
        .into_response()
}

/// The page's routes; merged into the API's router.
pub(crate) fn routes() -> Router<Arc<ApiState>> {
    Router::new()
        .route("/", get(index))
        .route("/app.js", get(app_js))
        .route("/tutti.js", get(tutti_js))
        .route("/style.css", get(style_css))
}

/// The page: `/?room=<room>#token=<token>` joins a room.
#[utoipa::path(get, path = "/", tag = "web", operation_id = "page", security(()),
    responses((status = 200, description = "The page", body = String, content_type = "text/html")))]
pub(super) async fn index(State(api): State<Arc<ApiState>>) -> Response {
    let others: Vec<String> = api.node.other_nodes(MAX_CONNECT_NODES).await.into_iter().map(|(_, url)| url).collect();
    let policy = HeaderValue::from_str(&policy_with(&others))
        .unwrap_or_else(|_| HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    asset_with("text/html; charset=utf-8", INDEX_HTML, policy)
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
    fn the_page_may_connect_to_the_other_nodes_only() {
        let urls = ["https://tutti-2.example.org".to_owned(), "http://10.0.0.3:8080".to_owned(), "ftp://x".to_owned()];
        let policy = policy_with(&urls);
        assert!(
            policy.contains(
                "connect-src 'self' https://tutti-2.example.org wss://tutti-2.example.org \
                 http://10.0.0.3:8080 ws://10.0.0.3:8080;"
            ),
            "{policy}"
        );
        assert!(!policy.contains("ftp"), "{policy}");
        assert_eq!(policy_with(&[]), CONTENT_SECURITY_POLICY);
        // A record's URL cannot add a directive (a `;` does not parse as a URI).
        for bad in ["http://a;script-src *", "http://a;script-src", "http://user@a"] {
            assert_eq!(policy_with(&[bad.to_owned()]), CONTENT_SECURITY_POLICY, "{bad}");
        }
    }

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
