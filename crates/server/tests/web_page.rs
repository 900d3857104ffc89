//! The browser client is served by tutti itself: the page, its script, the
//! client SDK the script imports (`/tutti.js`, the committed build of
//! `sdk/js`) and its style sheet, each with its content type and a
//! same-origin-only Content-Security-Policy; the API's JSON 404 still
//! answers everything else.

mod common;

use common::{http, start};

#[test]
fn the_page_its_script_and_style_are_served_with_a_strict_policy() {
    let (rt, server) = start();
    let api = server.http_addr();
    for (path, content_type, contains) in [
        ("/", "text/html; charset=utf-8", r#"<script type="module" src="app.js"></script>"#),
        ("/app.js", "text/javascript; charset=utf-8", "window.tuttiState"),
        ("/tutti.js", "text/javascript; charset=utf-8", "export class Room extends Emitter"),
        ("/style.css", "text/css; charset=utf-8", ".participant.talking"),
    ] {
        let r = http(api, "GET", path, None, b"");
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.header("content-type"), Some(content_type), "{path}");
        assert!(r.body.contains(contains), "{path} holds {contains:?}");
        let csp = r.header("content-security-policy").unwrap_or_default();
        assert!(csp.contains("default-src 'none'"), "{path}: {csp}");
        for directive in ["script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"] {
            assert!(csp.contains(directive), "{path}: {csp} lacks {directive}");
        }
        assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval") && !csp.contains('*'), "{csp}");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"), "{path}");
    }
    // HEAD works as GET without a body; other paths are still the API's JSON 404.
    assert_eq!(http(api, "HEAD", "/", None, b"").status, 200);
    assert_eq!(http(api, "GET", "/index.html", None, b"").code(), "not_found");
    let wrong = http(api, "POST", "/", None, b"");
    assert_eq!((wrong.status, wrong.code().as_str()), (405, "method_not_allowed"), "a JSON 405: {}", wrong.body);
    // The moderator's Invite control and the link's token in the fragment are in the page.
    let page = http(api, "GET", "/", None, b"").body;
    assert!(page.contains(r#"id="invite""#) && page.contains(r#"id="invite-link""#), "the Invite control");
    let script = http(api, "GET", "/app.js", None, b"").body;
    assert!(script.contains("location.hash") && script.contains("call.room.invite(permissions, ttl)"));
    // One client: the page's script imports the SDK and speaks no protocol of its own.
    assert!(
        script.contains("import { Api, DEFAULT_TIMINGS, Room, TuttiError, enterUrl, validRoomId } from './tutti.js';")
    );
    for own in ["new WebSocket(", "new RTCPeerConnection(", "fetch("] {
        assert!(!script.contains(own), "the page's script calls {own} itself: that is the SDK's");
    }
    let sdk = http(api, "GET", "/tutti.js", None, b"").body;
    assert!(sdk.contains("room, '/invites')") && sdk.contains("'/participants'"), "the SDK makes invites and joins");
    assert_eq!(sdk, include_str!("../../../sdk/js/dist/tutti.js"), "/tutti.js is the committed build");
    rt.block_on(server.shutdown());
}
