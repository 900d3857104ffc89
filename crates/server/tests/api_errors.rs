//! Every documented API error, with its status and stable code.

mod common;

use std::time::Instant;

use common::{http, start};
use tutti_rtc::ClientPeer;

fn offer() -> String {
    let (_, sdp) = ClientPeer::new("127.0.0.1:9".parse().expect("addr"), Instant::now()).expect("client");
    sdp
}

#[test]
fn bad_requests_get_clear_json_errors() {
    let (rt, server) = start();
    let api = server.http_addr();
    let create = |body: &str| http(api, "POST", "/v1/rooms", Some("application/json"), body.as_bytes());
    assert_eq!(create(r#"{"id":"r1","max_participants":1}"#).status, 201);
    let cases = [
        (create(r#"{"id":"r1"}"#), 409, "room_exists"),
        (create(r#"{"id":"no spaces"}"#), 400, "bad_room_id"),
        (create(r#"{"id":"x","colour":"red"}"#), 400, "bad_json"),
        (create("{not json"), 400, "bad_json"),
        (http(api, "POST", "/v1/rooms", Some("text/plain"), b"id=x"), 415, "unsupported_media_type"),
        (http(api, "GET", "/v1/rooms/ghost", None, b""), 404, "room_not_found"),
        (
            http(api, "POST", "/v1/rooms/ghost/participants", Some("application/sdp"), offer().as_bytes()),
            404,
            "room_not_found",
        ),
        (http(api, "POST", "/v1/rooms/r1/participants", Some("application/sdp"), b"not sdp at all"), 400, "bad_sdp"),
        (
            http(api, "POST", "/v1/rooms/r1/participants", Some("application/sdp"), b"v=0\r\nm=video 9 RTP/AVP 96\r\n"),
            400,
            "bad_sdp",
        ),
        (http(api, "POST", "/v1/rooms/r1/participants", Some("text/plain"), b"x"), 415, "unsupported_media_type"),
        (
            http(api, "POST", "/v1/rooms/r1/participants", Some("application/sdp"), &vec![b'a'; 100_000]),
            413,
            "body_too_large",
        ),
        (http(api, "DELETE", "/v1/rooms/r1/participants/12345", None, b""), 404, "participant_not_found"),
        (http(api, "GET", "/v2/whatever", None, b""), 404, "not_found"),
    ];
    for (i, (r, status, code)) in cases.iter().enumerate() {
        assert_eq!((r.status, r.code().as_str()), (*status, *code), "case {i}: {}", r.body);
    }
    // The room holds one: the second join is refused, the first still stands.
    let first = http(api, "POST", "/v1/rooms/r1/participants", Some("application/sdp"), offer().as_bytes());
    assert_eq!(first.status, 201, "{}", first.body);
    let second = http(api, "POST", "/v1/rooms/r1/participants", Some("application/sdp"), offer().as_bytes());
    assert_eq!((second.status, second.code().as_str()), (409, "room_full"));
    let location = first.header("location").expect("location").to_owned();
    let bad_gain = http(api, "PATCH", &location, Some("application/json"), br#"{"gain": 99}"#);
    assert_eq!((bad_gain.status, bad_gain.code().as_str()), (400, "bad_value"));
    assert_eq!(http(api, "PATCH", &location, Some("application/json"), br#"{"muted": true}"#).status, 200);
    assert_eq!(http(api, "DELETE", &location, None, b"").status, 204);
    assert_eq!(http(api, "DELETE", &location, None, b"").status, 404, "leaving twice");
    assert_eq!(http(api, "DELETE", "/v1/rooms/r1", None, b"").status, 204);
    assert_eq!(http(api, "GET", "/healthz", None, b"").status, 200);
    assert_eq!(http(api, "GET", "/readyz", None, b"").status, 200);
    rt.block_on(server.shutdown());
}
