//! The first minutes, as the README tells them, with the real binary:
//! `tutti serve` with no settings prints under `Open in a browser:` a link
//! to room `demo` whose token (in the fragment) creates and joins that
//! room, makes invites for it, and manages nothing else; the page without
//! a token is told "no token" (the page's first request, and the sentence
//! the page maps that code to). Also the small operator tools: `tutti
//! --version` names the commit, `tutti healthcheck` exits 0 or 1, and
//! `--advertise` takes a list.

mod common;

use std::io::BufRead as _;
use std::net::SocketAddr;
use std::process::Command;

use tutti_client::{Requester, Response, ToneClient, request_as};

fn call(api: SocketAddr, token: Option<&str>, method: &str, path: &str, body: &str) -> Response {
    let requester = Requester { token, from: None };
    let ct = (!body.is_empty()).then_some(if body.starts_with("v=0") { "application/sdp" } else { "application/json" });
    request_as(api, &requester, method, path, ct, body.as_bytes()).expect("the API answers")
}

/// `tutti serve` on ephemeral loopback ports, with nothing about auth set.
fn serve(extra: &[&str]) -> common::Served {
    let mut args = vec!["--http", "127.0.0.1:0", "--media", "127.0.0.1:0", "--metrics", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    common::serve(&args)
}

/// The banner's lines after the first, up to the curl lines (the last is `join it:`).
fn banner(served: &mut common::Served) -> Vec<String> {
    let mut lines = Vec::new();
    for _ in 0..20 {
        let mut line = String::new();
        if served.stdout.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        let done = line.starts_with("join it:");
        lines.push(line.trim_end().to_owned());
        if done {
            break;
        }
    }
    lines
}

/// The link under `Open in a browser:`.
fn browser_link(lines: &[String]) -> String {
    let at = lines.iter().position(|l| l == "Open in a browser:").unwrap_or_else(|| panic!("no link: {lines:#?}"));
    lines.get(at + 1).map(|l| l.trim().to_owned()).unwrap_or_default()
}

fn stop(mut served: common::Served) {
    let _ = nix::sys::signal::kill(served.pid(), nix::sys::signal::Signal::SIGTERM);
    let _ = served.child.wait();
}

#[test]
fn the_banner_link_joins_demo_and_a_page_without_a_token_is_told_so() {
    let mut served = serve(&[]);
    let api = served.api;
    let lines = banner(&mut served);
    let link = browser_link(&lines);
    println!("banner:\n{}", lines.join("\n"));
    assert_eq!(lines[0], "Open in a browser:", "the link comes first, right under the address line: {lines:#?}");

    // http://API/?room=demo#token=…: the token in the fragment, never in the query.
    let prefix = format!("http://{api}/?room=demo#token=");
    let token = link.strip_prefix(&prefix).unwrap_or_else(|| panic!("{link:?} is not {prefix}…")).to_owned();
    assert!(!token.is_empty() && !token.contains(['&', '#', '?']), "{token}");

    // The page is there; the link's token creates `demo`, joins it, and invites to it.
    let page = call(api, None, "GET", "/?room=demo", "");
    assert_eq!(page.status, 200);
    assert_eq!(call(api, Some(&token), "GET", "/v1/rooms/demo", "").code(), "room_not_found");
    let r = call(api, Some(&token), "POST", "/v1/rooms", r#"{"id":"demo"}"#);
    assert_eq!(r.status, 201, "{}", r.body);
    let sdp = ToneClient::offer(440.0).expect("offer").1;
    let r = call(api, Some(&token), "POST", "/v1/rooms/demo/participants", &sdp);
    assert_eq!(r.status, 201, "the banner's token joins demo: {}", r.body);
    let r = call(api, Some(&token), "POST", "/v1/rooms/demo/invites", "");
    assert_eq!(r.status, 201, "{}", r.body);
    let invite: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    let guest = invite["token"].as_str().expect("a guest token").to_owned();
    let sdp = ToneClient::offer(660.0).expect("offer").1;
    assert_eq!(call(api, Some(&guest), "POST", "/v1/rooms/demo/participants", &sdp).status, 201, "the guest joins");

    // ... and nothing else: it is a room admin's, for demo only.
    assert_eq!(call(api, Some(&token), "POST", "/v1/rooms", r#"{"id":"other"}"#).status, 403);
    assert_eq!(call(api, Some(&token), "GET", "/v1/rooms", "").status, 403, "it cannot list every room");
    assert_eq!(call(api, Some(&token), "GET", "/v1/rooms/other", "").code(), "wrong_room");

    // A page opened without the token: its first request (the room, no
    // token) gets `token_missing`, which the page tells as "needs an access
    // token" (not "refused").
    let r = call(api, None, "GET", "/v1/rooms/demo", "");
    assert_eq!((r.status, r.code().as_str()), (401, "token_missing"), "{}", r.body);
    let script = call(api, None, "GET", "/app.js", "").body;
    let case = script.find("case 'token_missing':").expect("the page knows token_missing");
    let told = script[case + "case 'token_missing':".len()..].trim_start();
    assert!(told.starts_with("return 'This page needs an access token"), "{}", &script[case..case + 120]);
    for code in ["token_invalid", "token_expired", "wrong_room"] {
        assert!(script.contains(&format!("case '{code}':")), "the page tells {code} apart");
    }
    assert!(script.contains("location.hash"), "the page reads its token from the fragment");
    let cut = call(api, Some(&token[..token.len() - 2]), "GET", "/v1/rooms/demo", "");
    assert_eq!(cut.code(), "token_invalid", "a cut-off link: {}", cut.body);
    stop(served);
}

#[test]
fn version_healthcheck_and_a_list_of_advertised_addresses() {
    let bin = env!("CARGO_BIN_EXE_tutti");
    // `tutti --version`: the version and the commit.
    let out = Command::new(bin).arg("--version").output().expect("runs");
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(version.starts_with(&format!("tutti {} (commit ", env!("CARGO_PKG_VERSION"))), "{version}");
    let head = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output();
    if let Some(head) = head.ok().filter(|h| h.status.success()) {
        let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
        assert_eq!(version, format!("tutti {} (commit {head})", env!("CARGO_PKG_VERSION")));
    }

    // --advertise, comma-separated and repeated: every address a candidate, the first preferred.
    let mut served = serve(&["--advertise", "127.0.0.1,127.0.0.2", "--advertise", "127.0.0.3"]);
    let api = served.api;
    let link = browser_link(&banner(&mut served));
    let token = link.split_once("#token=").map(|(_, t)| t.to_owned()).expect("a token");
    assert_eq!(call(api, Some(&token), "POST", "/v1/rooms", r#"{"id":"demo"}"#).status, 201);
    let sdp = ToneClient::offer(440.0).expect("offer").1;
    let r = call(api, Some(&token), "POST", "/v1/rooms/demo/participants", &sdp);
    assert_eq!(r.status, 201, "{}", r.body);
    let candidates: Vec<&str> =
        r.body.lines().filter(|l| l.starts_with("a=candidate") && l.contains(" udp ")).collect();
    for ip in ["127.0.0.1", "127.0.0.2", "127.0.0.3"] {
        assert!(candidates.iter().any(|c| c.contains(&format!(" {ip} "))), "{ip} advertised: {candidates:#?}");
    }

    // `tutti healthcheck`: 0 when /healthz answers 200, 1 otherwise.
    let check = |url: &str| Command::new(bin).args(["healthcheck", "--url", url]).output().expect("runs");
    let ok = check(&format!("http://{api}/healthz"));
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let missing = check(&format!("http://{api}/nope"));
    assert_eq!(missing.status.code(), Some(1), "404 is unhealthy");
    assert!(String::from_utf8_lossy(&missing.stderr).contains("404"), "{missing:?}");
    // Its default: the configured `http` address (TUTTI_HTTP, as the container sets it).
    let default = Command::new(bin).arg("healthcheck").env("TUTTI_HTTP", api.to_string()).output().expect("runs");
    assert!(default.status.success(), "{}", String::from_utf8_lossy(&default.stderr));
    stop(served);
    // Nobody listening: 1, quickly.
    let down = Command::new(bin)
        .args(["healthcheck", "--url", &format!("http://{api}/healthz"), "--timeout", "2s"])
        .output()
        .expect("runs");
    assert_eq!(down.status.code(), Some(1), "{down:?}");
}

/// A preflight from `origin`: its status and the allowed origin it got back.
fn preflight(api: SocketAddr, origin: &str) -> (u16, Option<String>) {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(api).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(5))).expect("timeout");
    let req = format!(
        "OPTIONS /v1/rooms HTTP/1.1\r\nHost: {api}\r\nOrigin: {origin}\r\nAccess-Control-Request-Method: POST\r\n\
         Access-Control-Request-Headers: authorization,content-type\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).expect("send");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let allowed = out
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("access-control-allow-origin:"))
        .map(|l| l.split_once(':').map(|(_, v)| v.trim().to_owned()).unwrap_or_default());
    (status, allowed)
}

/// `tutti serve --dev`: it says so; its tokens (the banner's, and `tutti
/// token --dev`'s) survive a restart; an SDK app on any loopback port may
/// call it, another origin may not; Ctrl-C (SIGTERM) stops it at once with
/// a participant in; a non-loopback address is refused.
#[test]
fn the_dev_mode_keeps_its_tokens_across_restarts_allows_loopback_apps_and_stops_at_once() {
    let mut served = serve(&["--dev"]);
    let lines = banner(&mut served);
    assert!(lines.iter().any(|l| l.starts_with("DEVELOPMENT MODE (--dev)")), "{lines:#?}");
    let link = browser_link(&lines);
    let link_token = link.split("#token=").nth(1).unwrap_or_else(|| panic!("a token in the link: {link}")).to_owned();
    let out = Command::new(env!("CARGO_BIN_EXE_tutti"))
        .args(["token", "--dev", "--room", "*", "--identity", "ops", "--admin"])
        .env_remove("TUTTI_AUTH_SECRET")
        .output()
        .expect("tutti token runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let minted = String::from_utf8(out.stdout).expect("UTF-8").trim().to_owned();
    assert_eq!(call(served.api, Some(&minted), "GET", "/v1/rooms", "").status, 200, "tutti token --dev works");
    // An SDK app's dev server on a loopback port; not another site.
    assert_eq!(preflight(served.api, "http://localhost:5173"), (200, Some("http://localhost:5173".to_owned())));
    assert_eq!(preflight(served.api, "http://127.0.0.1:8000").1.as_deref(), Some("http://127.0.0.1:8000"));
    assert_eq!(preflight(served.api, "https://evil.example").0, 403, "another origin is refused");

    // A participant in, then SIGTERM: no drain wait.
    assert_eq!(call(served.api, Some(&link_token), "POST", "/v1/rooms", r#"{"id":"demo"}"#).status, 201);
    let (_client, offer) = ToneClient::offer(440.0).expect("offer");
    assert_eq!(call(served.api, Some(&link_token), "POST", "/v1/rooms/demo/participants", &offer).status, 201);
    let stopping = std::time::Instant::now();
    stop(served);
    assert!(stopping.elapsed() < std::time::Duration::from_secs(5), "stopped in {:?}", stopping.elapsed());

    // Restarted: the same tokens still work.
    let again = serve(&["--dev"]);
    assert_eq!(call(again.api, Some(&minted), "GET", "/v1/rooms", "").status, 200, "after a restart");
    assert_eq!(call(again.api, Some(&link_token), "GET", "/v1/rooms/demo", "").status, 404, "valid, the room gone");
    stop(again);

    // Not on an address others reach.
    let out = Command::new(env!("CARGO_BIN_EXE_tutti"))
        .args(["serve", "--dev", "--http", "0.0.0.0:0", "--media", "127.0.0.1:0", "--metrics", "off"])
        .output()
        .expect("tutti runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--dev is for development on this machine only"), "{err}");
}
