//! Access control: nobody joins or looks into a room without a valid token
//! for it, room management needs an admin token, and a listen-only
//! participant is never heard. Each refusal has its status and code, and an
//! unauthorised caller learns nothing about which rooms exist.

mod common;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{auth_config, minter, start_with, test_config};
use serde_json::json;
use tutti_client::{JoinAs, Requester, Response, ToneClient, request_as, run_for, run_until};
use tutti_server::auth::{Auth, Grant, unix_now};

const SECRET: &str = "the auth test's secret: thirty-two bytes at least";
const HOUR: Duration = Duration::from_secs(3600);

fn call(api: SocketAddr, token: Option<&str>, method: &str, path: &str, body: &str) -> Response {
    let requester = Requester { token, from: None };
    let ct = (!body.is_empty()).then_some(if body.starts_with("v=0") { "application/sdp" } else { "application/json" });
    request_as(api, &requester, method, path, ct, body.as_bytes()).expect("the API answers")
}

fn offer() -> String {
    ToneClient::offer(100.0).expect("offer").1
}

/// A WebSocket upgrade's outcome: Ok, or the HTTP status it was refused with.
fn ws(api: SocketAddr, room: &str, token: Option<&str>) -> Result<(), u16> {
    let stream = TcpStream::connect(api).expect("connect");
    let url = match token {
        Some(t) => format!("ws://{api}/v1/rooms/{room}/ws?token={t}"),
        None => format!("ws://{api}/v1/rooms/{room}/ws"),
    };
    match tungstenite::client(url, stream) {
        Ok(_) => Ok(()),
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(r))) => Err(r.status().as_u16()),
        Err(e) => panic!("handshake: {e}"),
    }
}

#[test]
fn tokens_decide_who_joins_sees_and_manages() {
    let (rt, server) = start_with(auth_config(SECRET));
    let api = server.http_addr();
    let auth = Auth::new(SECRET).expect("secret");
    let mint = minter(SECRET);
    let admin = mint(Grant::admin("ops"));
    let alice = mint(Grant::participant("a", "alice"));
    let bob = mint(Grant::participant("a", "bob"));
    let lena = mint(Grant::listener("a", "lena"));
    let other_room = mint(Grant::participant("b", "carol"));
    let expired =
        auth.mint(&Grant::participant("a", "alice"), Duration::from_secs(60), unix_now() - 3600).expect("mint");
    let other_secret = Auth::new("some other server's secret, 32 bytes+").expect("secret");
    let forged_admin = other_secret.mint(&Grant::admin("mallory"), HOUR, unix_now()).expect("mint");
    let tampered = {
        // Alice's token with the payload of an admin token: the signature no longer matches.
        let a: Vec<&str> = alice.split('.').collect();
        let f: Vec<&str> = forged_admin.split('.').collect();
        format!("{}.{}.{}", a[0], f[1], a[2])
    };
    assert_eq!(server.mint_token(&Grant::admin("x"), HOUR).map(|t| auth.verify(&t, unix_now()).is_ok()), Some(true));

    // The admin makes room "a"; nobody else can.
    assert_eq!(call(api, Some(&admin), "POST", "/v1/rooms", r#"{"id":"a"}"#).status, 201);
    let (sdp_a, sdp_b) = (offer(), offer());
    let mut refusals = 0;
    let mut refused = |r: Response, status: u16, code: &str, what: &str| {
        assert_eq!((r.status, r.code().as_str()), (status, code), "{what}: {}", r.body);
        if status == 401 {
            let challenge = r.header("www-authenticate").unwrap_or_default();
            assert!(challenge.starts_with("Bearer"), "{what}: 401 carries a Bearer challenge: {challenge:?}");
        }
        refusals += 1;
        r
    };
    let join_a = "/v1/rooms/a/participants";
    refused(call(api, None, "POST", join_a, &sdp_a), 401, "token_missing", "no token");
    let r = refused(call(api, Some(&expired), "POST", join_a, &sdp_a), 401, "token_expired", "expired token");
    assert!(r.body.contains("expired"), "{}", r.body);
    refused(call(api, Some(&tampered), "POST", join_a, &sdp_a), 401, "token_invalid", "tampered signature");
    refused(call(api, Some(&forged_admin), "POST", join_a, &sdp_a), 401, "token_invalid", "another server's secret");
    refused(call(api, Some("not.a.jwt"), "POST", join_a, &sdp_a), 401, "token_invalid", "garbage token");
    let none_alg = format!("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{}.", alice.split('.').nth(1).unwrap_or_default());
    refused(call(api, Some(&none_alg), "POST", join_a, &sdp_a), 401, "token_invalid", "alg none");
    refused(call(api, Some(&other_room), "POST", join_a, &sdp_a), 403, "wrong_room", "token for another room");
    refused(call(api, None, "GET", "/v1/rooms/a", ""), 401, "token_missing", "no token on GET");

    // Managing rooms takes an admin token.
    refused(call(api, Some(&alice), "POST", "/v1/rooms", r#"{"id":"mine"}"#), 403, "forbidden", "create");
    refused(call(api, Some(&alice), "GET", "/v1/rooms", ""), 403, "forbidden", "list");
    refused(call(api, Some(&alice), "DELETE", "/v1/rooms/a", ""), 403, "forbidden", "delete");
    refused(call(api, None, "GET", "/v1/rooms", ""), 401, "token_missing", "list without a token");
    // A room admin manages its own room only.
    let host_b = mint(Grant { admin: true, ..Grant::participant("b", "host") });
    refused(call(api, Some(&host_b), "POST", "/v1/rooms", r#"{"id":"c"}"#), 403, "forbidden", "room admin, other room");
    refused(call(api, Some(&host_b), "GET", "/v1/rooms", ""), 403, "forbidden", "room admin lists");
    let made = call(api, Some(&host_b), "POST", "/v1/rooms", "");
    assert_eq!((made.status, made.header("location")), (201, Some("/v1/rooms/b")), "the token names the room");

    // Nothing leaks: an existing and a missing room look the same to an unauthorised caller.
    for token in [None, Some(other_room.as_str()), Some(expired.as_str())] {
        let exists = call(api, token, "GET", "/v1/rooms/a", "");
        let ghost = call(api, token, "GET", "/v1/rooms/ghost", "");
        assert!(exists.status == 401 || exists.status == 403, "{}", exists.body);
        assert_eq!((exists.status, exists.code()), (ghost.status, ghost.code()), "room a vs ghost: same answer");
        let exists = call(api, token, "POST", "/v1/rooms/a/participants", &sdp_b);
        let ghost = call(api, token, "POST", "/v1/rooms/ghost/participants", &sdp_b);
        assert_eq!((exists.status, exists.code()), (ghost.status, ghost.code()), "joins: same answer");
        assert!(!exists.body.contains("alice") && !exists.body.contains("participants\""), "{}", exists.body);
    }
    assert_eq!(ws(api, "a", None), Err(401), "WebSocket without a token");
    assert_eq!(ws(api, "ghost", None), Err(401), "WebSocket without a token, missing room");
    assert_eq!(ws(api, "a", Some(&other_room)), Err(403), "WebSocket with another room's token");
    assert_eq!(ws(api, "a", Some(&expired)), Err(401), "WebSocket with an expired token");
    assert_eq!(ws(api, "a", Some(&lena)), Ok(()), "WebSocket with a token for the room");
    assert_eq!(ws(api, "ghost", Some(&admin)), Err(404), "the admin may learn that a room is missing");

    // Alice speaks, Lena only listens (and tries to speak: a 660 Hz tone).
    let mut speaker =
        ToneClient::join_as(api, &Requester::token(&alice), "a", 440.0, JoinAs::Whip).expect("alice joins");
    let mut listener =
        ToneClient::join_as(api, &Requester::token(&lena), "a", 660.0, JoinAs::Json).expect("lena joins");
    let (s_id, l_id) = (speaker.id, listener.id);
    let room: serde_json::Value =
        serde_json::from_str(&call(api, Some(&lena), "GET", "/v1/rooms/a", "").body).expect("JSON");
    let members = room["participants"].as_array().cloned().unwrap_or_default();
    let lena_m = members.iter().find(|m| m["id"] == l_id).expect("lena listed");
    assert_eq!((lena_m["listen_only"].clone(), lena_m["muted"].clone()), (json!(true), json!(true)));
    assert_eq!(lena_m["identity"], "lena");
    let alice_m = members.iter().find(|m| m["id"] == s_id).expect("alice listed");
    assert_eq!(alice_m["name"], "alice", "the identity names a participant who gives no name");

    let mut both = [&mut speaker, &mut listener];
    assert!(
        run_until(&mut both, Instant::now() + Duration::from_secs(20), |cs| cs.iter().all(|c| c.heard.len() > 25)),
        "both connected"
    );
    let since = Instant::now();
    run_for(&mut both, Duration::from_millis(1500));
    assert!(both[1].hears(440.0, since) > 0.05, "the listener hears alice");
    assert!(both[0].hears(660.0, since) < 0.01, "nobody hears the listener: {}", both[0].hears(660.0, since));
    let dropped = server.media_stats().listen_only_dropped;
    assert!(dropped > 50, "the listener's packets are dropped on arrival: {dropped}");

    // Lena cannot unmute herself, nor can an admin unmute her; Bob cannot touch Alice.
    let lena_url = format!("/v1/rooms/a/participants/{l_id}");
    let alice_url = format!("/v1/rooms/a/participants/{s_id}");
    refused(call(api, Some(&lena), "PATCH", &lena_url, r#"{"muted":false}"#), 403, "forbidden", "listener unmutes");
    refused(call(api, Some(&admin), "PATCH", &lena_url, r#"{"muted":false}"#), 403, "forbidden", "admin unmutes");
    refused(call(api, Some(&bob), "PATCH", &alice_url, r#"{"muted":true}"#), 403, "forbidden", "mute another");
    refused(call(api, Some(&bob), "DELETE", &alice_url, ""), 403, "forbidden", "remove another");
    refused(call(api, Some(&alice), "PATCH", &alice_url, r#"{"gain":2}"#), 403, "forbidden", "own gain");
    assert_eq!(call(api, Some(&alice), "PATCH", &alice_url, r#"{"muted":true}"#).status, 200, "mute oneself");
    assert_eq!(call(api, Some(&alice), "PATCH", &alice_url, r#"{"muted":false}"#).status, 200, "unmute oneself");
    assert_eq!(call(api, Some(&admin), "PATCH", &alice_url, r#"{"gain":2}"#).status, 200, "the admin sets a gain");

    // Over the WebSocket too: a listener's socket cannot unmute its participant.
    let stream = TcpStream::connect(api).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let (mut sock, _) =
        tungstenite::client(format!("ws://{api}/v1/rooms/a/ws?token={lena}"), stream).expect("WebSocket");
    sock.get_ref().set_read_timeout(Some(Duration::from_millis(20))).expect("timeout");
    let (_, ws_offer) = ToneClient::offer(770.0).expect("offer");
    sock.send(tungstenite::Message::text(json!({"type":"join","sdp":ws_offer}).to_string())).expect("send");
    sock.send(tungstenite::Message::text(json!({"type":"mute","muted":false}).to_string())).expect("send");
    let mut codes = Vec::new();
    let mut ws_id = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while codes.len() < 2 && Instant::now() < deadline {
        if let Ok(tungstenite::Message::Text(t)) = sock.read() {
            let v: serde_json::Value = serde_json::from_str(t.as_str()).expect("JSON");
            if v["type"] == "answer" {
                ws_id = v["id"].as_u64().unwrap_or_default();
            }
            if v["type"] == "answer" || v["type"] == "error" {
                codes.push(v["type"].as_str().unwrap_or_default().to_owned() + ":" + v["code"].as_str().unwrap_or(""));
            }
        }
    }
    assert_eq!(codes, ["answer:", "error:forbidden"], "the listener joins over the socket, and cannot unmute");

    // Leaving: one's own participant, yes; the admin removes anyone.
    assert_eq!(call(api, Some(&alice), "DELETE", &alice_url, "").status, 204);
    // One identity, one participant: lena's socket join replaced her REST one.
    assert_eq!(call(api, Some(&admin), "DELETE", &lena_url, "").status, 404, "replaced");
    assert_eq!(call(api, Some(&admin), "DELETE", &format!("/v1/rooms/a/participants/{ws_id}"), "").status, 204);
    assert_eq!(refusals, 19, "every refusal above was checked");
    rt.block_on(server.shutdown());
}

#[test]
fn auth_disabled_is_refused_off_loopback() {
    let mut cfg = test_config();
    cfg.http = "0.0.0.0:0".parse().expect("addr");
    assert!(cfg.validate().is_err(), "auth.disabled with a public address");
    cfg.http = "[::1]:0".parse().expect("addr");
    assert!(cfg.validate().is_ok(), "loopback is fine");
    cfg.auth.disabled = false;
    cfg.auth.secret = "too short".to_owned();
    let err = cfg.validate().expect_err("short secret").to_string();
    assert!(err.contains("auth.secret"), "{err}");
}
