//! `POST /v1/rooms/{room}/invites`: a room's admin gets a guest token for
//! that room (speak or listen, a bounded lifetime) and a link with it in the
//! fragment; the guest joins with it; everyone else is refused, and bad
//! input is a JSON 400, in the API's fixed order (401, 403, then 400).

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{start_with, test_config};
use serde_json::Value;
use tutti_client::{Requester, Response, ToneClient, request_as};
use tutti_server::auth::{Auth, Grant, unix_now};

const SECRET: &str = "the invite test's secret, at least 32 bytes";

fn call(api: SocketAddr, token: Option<&str>, method: &str, path: &str, body: &str) -> Response {
    let requester = Requester { token, from: None };
    let ct = (!body.is_empty()).then_some(if body.starts_with("v=0") { "application/sdp" } else { "application/json" });
    request_as(api, &requester, method, path, ct, body.as_bytes()).expect("the API answers")
}

fn json(r: &Response) -> Value {
    serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("{e}: {}", r.body))
}

#[test]
fn a_room_admin_mints_guest_links_and_nobody_else_does() {
    let mut cfg = test_config();
    cfg.auth.disabled = false;
    cfg.auth.secret = SECRET.to_owned();
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let auth = Auth::new(SECRET).expect("secret");
    let hour = Duration::from_secs(3600);
    let mint = |g: Grant| auth.mint(&g, hour, unix_now()).expect("mint");
    let host = mint(Grant { admin: true, ..Grant::participant("demo", "host") });
    let alice = mint(Grant::participant("demo", "alice"));
    let other_host = mint(Grant { admin: true, ..Grant::participant("other", "host") });
    let ops = mint(Grant::admin("ops"));
    assert_eq!(call(api, Some(&host), "POST", "/v1/rooms", r#"{"id":"demo"}"#).status, 201);
    let invites = "/v1/rooms/demo/invites";

    // Defaults: speak, one hour; a link to the page with the token in its fragment.
    let before = unix_now();
    let r = call(api, Some(&host), "POST", invites, "");
    assert_eq!(r.status, 201, "{}", r.body);
    let v = json(&r);
    let token = v["token"].as_str().expect("token");
    let grant = auth.verify(token, unix_now()).expect("the guest token verifies");
    assert_eq!((grant.room.as_str(), grant.speak, grant.listen, grant.admin), ("demo", true, true, false), "{grant:?}");
    assert!(grant.identity.starts_with("guest-") && v["identity"] == grant.identity.as_str(), "{v}");
    assert_eq!(v["permissions"], "speak");
    let expires = v["expires_at"].as_u64().expect("expires_at");
    assert!((before + 3600..=unix_now() + 3600).contains(&expires), "{v}");
    assert!(auth.verify(token, expires).is_err(), "it expires at expires_at");
    assert_eq!(
        v["url"],
        format!("http://{api}/?room=demo#token={token}"),
        "the link names the room and carries the token"
    );

    // Listen only, for ten minutes: another identity each time.
    let r = call(api, Some(&ops), "POST", invites, r#"{"permissions":"listen","ttl_seconds":600}"#);
    assert_eq!(r.status, 201, "{}", r.body);
    let v2 = json(&r);
    let listener = auth.verify(v2["token"].as_str().expect("token"), unix_now()).expect("verifies");
    assert_eq!((listener.speak, listener.listen, listener.admin), (false, true, false), "{listener:?}");
    assert_ne!(listener.identity, grant.identity, "each invite has its own identity");
    assert!(v2["expires_at"].as_u64().is_some_and(|e| e <= unix_now() + 600), "{v2}");

    // The guest joins the room with it, and may do no more than a guest.
    let sdp = ToneClient::offer(300.0).expect("offer").1;
    let r = call(api, Some(token), "POST", "/v1/rooms/demo/participants", &sdp);
    assert_eq!(r.status, 201, "the invited guest joins: {}", r.body);
    assert_eq!(call(api, Some(token), "POST", invites, "").code(), "forbidden", "a guest does not invite");
    assert_eq!(call(api, Some(token), "POST", "/v1/rooms/other/participants", &sdp).code(), "wrong_room");

    // Refusals, in order: 401, 403, then 400; JSON each.
    for (token, body, status, code, what) in [
        (None, "", 401, "token_missing", "no token"),
        (Some("not.a.token"), "", 401, "token_invalid", "garbage"),
        (Some(alice.as_str()), "", 403, "forbidden", "a participant"),
        (Some(other_host.as_str()), "", 403, "wrong_room", "another room's admin"),
        (None, r#"{"ttl_seconds":0}"#, 401, "token_missing", "bad input without a token"),
        (Some(host.as_str()), r#"{"ttl_seconds":0}"#, 400, "bad_value", "ttl 0"),
        (Some(host.as_str()), r#"{"ttl_seconds":604801}"#, 400, "bad_value", "ttl over 7 days"),
        (Some(host.as_str()), r#"{"permissions":"admin"}"#, 400, "bad_json", "admin is not for guests"),
        (Some(host.as_str()), r#"{"ttl":60}"#, 400, "bad_json", "unknown field"),
        (Some(host.as_str()), r#"{"ttl_seconds":"1h"}"#, 400, "bad_json", "ttl as text"),
        (Some(host.as_str()), "[", 400, "bad_json", "not JSON"),
    ] {
        let r = call(api, token, "POST", invites, body);
        assert_eq!((r.status, r.code().as_str()), (status, code), "{what}: {}", r.body);
    }
    let r = call(api, Some(&ops), "POST", "/v1/rooms/no%20spaces/invites", "");
    assert_eq!((r.status, r.code().as_str()), (400, "bad_room_id"), "{}", r.body);
    let r = call(api, Some(&host), "GET", invites, "");
    assert_eq!((r.status, r.code().as_str()), (405, "method_not_allowed"), "{}", r.body);
    // A week is the longest.
    assert_eq!(call(api, Some(&host), "POST", invites, r#"{"ttl_seconds":604800}"#).status, 201);
    rt.block_on(server.shutdown());
}

#[test]
fn without_auth_an_invite_is_a_plain_link() {
    let (rt, server) = start_with(test_config());
    let api = server.http_addr();
    let r = call(api, None, "POST", "/v1/rooms/open/invites", r#"{"permissions":"listen"}"#);
    assert_eq!(r.status, 201, "{}", r.body);
    let v = json(&r);
    assert_eq!((v["token"].clone(), v["expires_at"].clone()), (Value::Null, Value::Null), "{v}");
    assert_eq!(v["url"], format!("http://{api}/?room=open"));
    rt.block_on(server.shutdown());
}

/// An invite never outlives the token of the admin who made it, and a room
/// takes a bounded number of invites per hour (1,000): a stolen admin token
/// cannot mint guest links that outlive it, or without end.
#[test]
fn invites_end_with_their_inviter_and_a_room_takes_a_bounded_number() {
    let mut cfg = test_config();
    cfg.auth.disabled = false;
    cfg.auth.secret = SECRET.to_owned();
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let auth = Auth::new(SECRET).expect("secret");
    let now = unix_now();
    let short = auth.mint(&Grant::admin("host"), Duration::from_secs(300), now).expect("mint");
    let r = call(api, Some(&short), "POST", "/v1/rooms/demo/invites", r#"{"ttl_seconds":86400}"#);
    assert_eq!(r.status, 201, "{}", r.body);
    let expires = json(&r)["expires_at"].as_u64().expect("expires_at");
    assert!(expires <= now + 301, "the invite ends with its inviter's token: {expires} > {}", now + 300);
    let guest = json(&r)["token"].as_str().expect("token").to_owned();
    let (_, exp) = auth.verify_until(&guest, unix_now()).expect("a valid token");
    assert_eq!(exp, expires, "the token says what the answer says");

    let long = auth.mint(&Grant::admin("host"), Duration::from_secs(3600), now).expect("mint");
    // 1,000 at once (the one above included), then about one every 3.6 s:
    // the run's own seconds refill a few.
    let mut minted = 1;
    let refused = loop {
        let r = call(api, Some(&long), "POST", "/v1/rooms/demo/invites", "");
        if r.status != 201 || minted > 1100 {
            break r;
        }
        minted += 1;
    };
    assert!((1000..1020).contains(&minted), "{minted} invites before the first refusal");
    let r = refused;
    assert_eq!((r.status, json(&r)["code"].as_str()), (429, Some("too_many_invites")), "{}", r.body);
    assert!(r.header("retry-after").is_some(), "says when to retry");
    let r = call(api, Some(&long), "POST", "/v1/rooms/other/invites", "");
    assert_eq!(r.status, 201, "another room is not affected: {}", r.body);
    rt.block_on(server.shutdown());
}
