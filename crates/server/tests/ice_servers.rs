//! ICE servers for clients: `[[ice_servers]]` in the config reaches each
//! client as JSON (`GET /v1/rooms/{room}/ice-servers`, in the shape of
//! `RTCConfiguration.iceServers`) and as WHIP `Link` headers on the join's
//! response, TURN REST credentials minted per client and checkable with the
//! shared secret (as coturn checks them). The route takes a join's token.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{start_with, test_config};
use serde_json::Value;
use tutti_client::{Requester, Response, ToneClient, request_as};
use tutti_server::auth::{Auth, Grant, unix_now};
use tutti_server::ice::IceServerEntry;

const SECRET: &str = "the ice test's secret: thirty-two bytes at least";
const TURN_SECRET: &str = "tutti and coturn share this";

fn entries() -> Vec<IceServerEntry> {
    vec![
        IceServerEntry {
            urls: vec!["turn:127.0.0.1:3478?transport=udp".into(), "turn:127.0.0.1:3478?transport=tcp".into()],
            secret: TURN_SECRET.into(),
            ttl_seconds: 600,
            ..IceServerEntry::default()
        },
        IceServerEntry {
            urls: vec!["turns:turn.test:443?transport=tcp".into()],
            username: "static-user".into(),
            credential: "static-pass".into(),
            ..IceServerEntry::default()
        },
        IceServerEntry { urls: vec!["stun:127.0.0.1:3478".into()], ..IceServerEntry::default() },
    ]
}

fn call(api: SocketAddr, token: Option<&str>, method: &str, path: &str, ct: Option<&str>, body: &str) -> Response {
    request_as(api, &Requester { token, from: None }, method, path, ct, body.as_bytes()).expect("the API answers")
}

/// Checks a REST credential as coturn does: `<expiry>:<user>`, HMAC-SHA1 with the shared secret, not expired.
fn check_rest(username: &str, credential: &str, user: &str) {
    let (expiry, who) = username.split_once(':').expect("<expiry>:<user>");
    assert_eq!(who, user);
    let expiry: u64 = expiry.parse().expect("expiry in unix seconds");
    let now = unix_now();
    assert!(expiry > now && expiry <= now + 600 + 5, "expires after the TTL: {expiry} vs now {now}");
    let (_, expected) = tutti_rtc::turn::rest_credentials(TURN_SECRET, user, expiry);
    assert_eq!(credential, expected, "base64(HMAC-SHA1(secret, username))");
}

#[test]
fn clients_get_the_configured_ice_servers_with_fresh_turn_credentials() {
    let mut cfg = test_config();
    cfg.auth.disabled = false;
    cfg.auth.secret = SECRET.to_owned();
    cfg.ice_servers = entries();
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let auth = Auth::new(SECRET).expect("secret");
    let mint = |g: Grant| auth.mint(&g, Duration::from_secs(3600), unix_now()).expect("mint");
    let admin = mint(Grant::admin("ops"));
    let alice = mint(Grant::participant("a", "alice"));
    let other_room = mint(Grant::participant("b", "carol"));
    assert_eq!(call(api, Some(&admin), "POST", "/v1/rooms", Some("application/json"), r#"{"id":"a"}"#).status, 201);

    // JSON, as the page asks before it makes its offer.
    let r = call(api, Some(&alice), "GET", "/v1/rooms/a/ice-servers", None, "");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("cache-control"), Some("no-store"), "credentials are not cached");
    let body: Value = serde_json::from_str(&r.body).expect("JSON");
    let servers = body["ice_servers"].as_array().expect("ice_servers: [...]");
    assert_eq!(servers.len(), 3, "{body}");
    assert_eq!(servers[0]["urls"][1], "turn:127.0.0.1:3478?transport=tcp");
    check_rest(
        servers[0]["username"].as_str().expect("username"),
        servers[0]["credential"].as_str().expect("credential"),
        "alice",
    );
    assert_eq!(servers[1]["username"], "static-user");
    assert_eq!(servers[1]["credential"], "static-pass");
    assert_eq!(servers[2], serde_json::json!({ "urls": ["stun:127.0.0.1:3478"] }));
    // The token may come in the query too (as for the WebSocket).
    let r = call(api, None, "GET", &format!("/v1/rooms/a/ice-servers?token={alice}"), None, "");
    assert_eq!(r.status, 200, "{}", r.body);

    // Refusals: JSON, stable codes; nothing said about the room to outsiders.
    let r = call(api, None, "GET", "/v1/rooms/a/ice-servers", None, "");
    assert_eq!((r.status, r.code().as_str()), (401, "token_missing"), "{}", r.body);
    let r = call(api, Some(&other_room), "GET", "/v1/rooms/a/ice-servers", None, "");
    assert_eq!((r.status, r.code().as_str()), (403, "wrong_room"), "{}", r.body);

    // The WHIP join's response: one Link per URL (RFC 9725 §4.6).
    let (_client, offer) = ToneClient::offer(300.0).expect("offer");
    let r = call(api, Some(&alice), "POST", "/v1/rooms/a/participants", Some("application/sdp"), &offer);
    assert_eq!(r.status, 201, "{}", r.body);
    let links: Vec<&str> =
        r.headers.iter().filter(|(k, _)| k.eq_ignore_ascii_case("link")).map(|(_, v)| v.as_str()).collect();
    assert_eq!(links.len(), 4, "{links:?}");
    assert!(links[0].starts_with("<turn:127.0.0.1:3478?transport=udp>; rel=\"ice-server\"; username=\""), "{links:?}");
    let field = |link: &str, name: &str| {
        let start = link.find(&format!("; {name}=\"")).expect("the field") + name.len() + 4;
        link[start..].split('"').next().unwrap_or_default().to_owned()
    };
    check_rest(&field(links[1], "username"), &field(links[1], "credential"), "alice");
    assert!(links[1].ends_with("credential-type=\"password\""), "{}", links[1]);
    assert_eq!(
        links[2],
        "<turns:turn.test:443?transport=tcp>; rel=\"ice-server\"; username=\"static-user\"; \
         credential=\"static-pass\"; credential-type=\"password\""
    );
    assert_eq!(links[3], "<stun:127.0.0.1:3478>; rel=\"ice-server\"");

    // The JSON join carries them too.
    let (_client2, offer) = ToneClient::offer(400.0).expect("offer");
    let body = serde_json::json!({ "sdp": offer, "name": "alice" }).to_string();
    let r = call(api, Some(&alice), "POST", "/v1/rooms/a/participants", Some("application/json"), &body);
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.headers.iter().filter(|(k, _)| k.eq_ignore_ascii_case("link")).count(), 4);
    rt.block_on(server.shutdown());
}

#[test]
fn without_ice_servers_the_list_is_empty_and_no_link_is_sent() {
    let (rt, server) = start_with(test_config());
    let api = server.http_addr();
    common::create_room(api, "plain");
    let r = call(api, None, "GET", "/v1/rooms/plain/ice-servers", None, "");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(serde_json::from_str::<Value>(&r.body).expect("JSON"), serde_json::json!({ "ice_servers": [] }));
    let (_client, offer) = ToneClient::offer(300.0).expect("offer");
    let r = call(api, None, "POST", "/v1/rooms/plain/participants", Some("application/sdp"), &offer);
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(r.header("link").is_none(), "no Link without ice servers");
    rt.block_on(server.shutdown());
}

#[test]
fn a_bad_ice_server_entry_stops_the_start_with_a_clear_error() {
    let mut cfg = test_config();
    cfg.ice_servers = vec![IceServerEntry { urls: vec!["turn:127.0.0.1:3478".into()], ..IceServerEntry::default() }];
    let err = cfg.validate().expect_err("an open TURN server is refused").to_string();
    assert!(err.contains("ice_servers") && err.contains("entry 0") && err.contains("credentials"), "{err}");
}
