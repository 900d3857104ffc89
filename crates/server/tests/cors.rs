//! CORS (`cors.allowed_origins`): a web app on a listed origin gets its
//! preflight answered and the allow headers on every answer, errors
//! included; any other origin gets no CORS header at all; with the default
//! (empty list) the API is same-origin only. A method a route does not
//! take is a JSON 405 (a preflight without CORS used to get an empty 405).

mod common;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::{start_with, test_config};

const APP: &str = "https://app.example.com";

/// A raw request with extra headers: (status, lower-case headers, body).
fn raw(api: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, Vec<(String, String)>, String) {
    let mut s = TcpStream::connect_timeout(&api, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {api}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("Content-Length: 0\r\n\r\n");
    s.write_all(req.as_bytes()).expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|c| c.parse().ok()).unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn cors_headers(headers: &[(String, String)]) -> Vec<&str> {
    headers.iter().filter(|(k, _)| k.starts_with("access-control-")).map(|(k, _)| k.as_str()).collect()
}

fn preflight(api: SocketAddr, origin: &str) -> (u16, Vec<(String, String)>, String) {
    raw(
        api,
        "OPTIONS",
        "/v1/rooms/demo/participants",
        &[
            ("Origin", origin),
            ("Access-Control-Request-Method", "POST"),
            ("Access-Control-Request-Headers", "authorization, content-type"),
        ],
    )
}

#[test]
fn listed_origins_get_preflights_answered_and_others_get_nothing() {
    let mut cfg = test_config();
    cfg.auth.disabled = false;
    cfg.cors.allowed_origins = vec![APP.to_owned(), "http://localhost:3000".to_owned()];
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();

    let (status, h, _) = preflight(api, APP);
    assert!((200..300).contains(&status), "preflight from {APP}: {status} {h:?}");
    assert_eq!(header(&h, "access-control-allow-origin"), Some(APP), "{h:?}");
    let methods = header(&h, "access-control-allow-methods").unwrap_or_default().to_ascii_uppercase();
    assert!(["GET", "POST", "PATCH", "DELETE"].iter().all(|m| methods.contains(m)), "{methods}");
    let allowed = header(&h, "access-control-allow-headers").unwrap_or_default().to_ascii_lowercase();
    assert!(allowed.contains("authorization") && allowed.contains("content-type"), "{allowed}");
    assert_eq!(header(&h, "access-control-allow-credentials"), None, "never credentials");
    assert!(header(&h, "access-control-max-age").is_some(), "{h:?}");

    // The real request's answer (a 401 here: no token) carries the origin, so the app reads the JSON error.
    let (status, h, body) = raw(api, "GET", "/v1/rooms/demo", &[("Origin", APP)]);
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("\"code\":\"token_missing\""), "{body}");
    assert_eq!(header(&h, "access-control-allow-origin"), Some(APP), "{h:?}");
    let exposed = header(&h, "access-control-expose-headers").unwrap_or_default().to_ascii_lowercase();
    assert!(exposed.contains("location") && exposed.contains("www-authenticate"), "{exposed}");

    // Another origin: no CORS header at all, on the preflight or the request.
    for origin in ["https://evil.example", "https://app.example.com.evil.example", "null"] {
        let (status, h, body) = preflight(api, origin);
        assert!(cors_headers(&h).is_empty(), "{origin} gets no CORS headers: {h:?}");
        assert_eq!(status, 403, "{origin}: {body}");
        assert!(body.contains("\"code\":\"origin_not_allowed\""), "{origin}: {body}");
        let (_, h, _) = raw(api, "GET", "/v1/rooms/demo", &[("Origin", origin)]);
        assert!(cors_headers(&h).is_empty(), "{origin} gets no CORS headers: {h:?}");
    }
    rt.block_on(server.shutdown());
}

#[test]
fn without_origins_a_preflight_is_a_json_405_and_so_is_any_wrong_method() {
    let mut cfg = test_config();
    cfg.auth.disabled = false;
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let (status, h, body) = preflight(api, APP);
    assert_eq!(status, 405, "same origin only: {h:?} {body}");
    assert!(cors_headers(&h).is_empty(), "{h:?}");
    for (method, path) in [("OPTIONS", "/v1/rooms"), ("PUT", "/v1/rooms/demo"), ("GET", "/v1/rooms/demo/participants")]
    {
        let (status, h, body) = raw(api, method, path, &[]);
        assert_eq!(status, 405, "{method} {path}: {body}");
        assert_eq!(header(&h, "content-type"), Some("application/json"), "{method} {path}: {h:?}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body:?}"));
        assert_eq!(v["code"], "method_not_allowed", "{v}");
        assert!(header(&h, "allow").is_some_and(|a| !a.is_empty()), "{method} {path}: 405 says what is allowed: {h:?}");
    }
    rt.block_on(server.shutdown());
}

#[test]
fn any_origin_is_for_development_and_stands_alone() {
    let mut cfg = test_config();
    cfg.cors.allowed_origins = vec!["*".to_owned()];
    let (rt, server) = start_with(cfg.clone());
    let (status, h, _) = preflight(server.http_addr(), "http://localhost:5173");
    assert!((200..300).contains(&status), "{status} {h:?}");
    assert_eq!(header(&h, "access-control-allow-origin"), Some("*"), "{h:?}");
    assert_eq!(header(&h, "access-control-allow-credentials"), None, "never credentials with '*'");
    rt.block_on(server.shutdown());

    for bad in [vec!["*", APP], vec!["https://app.example.com/"], vec!["app.example.com"], vec!["https://a b"]] {
        cfg.cors.allowed_origins = bad.iter().map(|s| (*s).to_owned()).collect();
        let err = cfg.validate().expect_err("refused");
        assert!(err.to_string().contains("cors.allowed_origins"), "{bad:?}: {err}");
    }
}
