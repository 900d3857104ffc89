//! Noise suppression and loudness switched at run time through the API
//! (`PATCH /v1/rooms/{room}` and `PATCH …/participants/{id}`, admin only),
//! with real WebRTC participants: a browser-like participant is not
//! suppressed under `auto`; an admin turns it on for one participant, the
//! mixer runs RNNoise on that speaker's frames (counted in
//! `tutti_mix_voice_frames_total`), and the others still hear them. Bad
//! values and non-admin callers get a JSON error and change nothing.

mod common;

use std::time::{Duration, Instant};

use common::{auth_config, call, minter, scrape, series, start_with};
use tutti_client::{JoinAs, Requester, Response, ToneClient, run_for, run_until};
use tutti_server::auth::Grant;

const SECRET: &str = "the voice test's secret: thirty-two bytes at least";

fn json(r: &Response) -> serde_json::Value {
    serde_json::from_str(&r.body).expect("a JSON body")
}

#[test]
fn admins_switch_suppression_and_loudness_per_room_and_participant() {
    let (_rt, server) = start_with(auth_config(SECRET));
    let api = server.http_addr();
    let mint = minter(SECRET);
    let admin = mint(Grant::admin("ops"));
    let alice = mint(Grant::participant("v", "alice"));
    let bob = mint(Grant::participant("v", "bob"));
    assert_eq!(call(api, &admin, "POST", "/v1/rooms", r#"{"id":"v"}"#).status, 201);
    let mut a = ToneClient::join_as(api, &Requester::token(&alice), "v", 440.0, JoinAs::Whip).expect("alice joins");
    let mut b = ToneClient::join_as(api, &Requester::token(&bob), "v", 660.0, JoinAs::Whip).expect("bob joins");
    let a_url = format!("/v1/rooms/v/participants/{}", a.id);
    let mut both = [&mut a, &mut b];
    assert!(
        run_until(&mut both, Instant::now() + Duration::from_secs(20), |cs| cs.iter().all(|c| c.heard.len() > 25)),
        "both connected"
    );
    let frames = |stage: &str| {
        let m = server.metrics_addr().expect("metrics on");
        scrape(m).get(&series("tutti_mix_voice_frames_total", &[("stage", stage)])).copied().unwrap_or(0.0)
    };

    // WebRTC participants under `auto`: not suppressed (a browser does it itself).
    let r = call(api, &admin, "PATCH", &a_url, "{}");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(json(&r)["voice"]["noise_suppression"], false);
    assert_eq!(json(&r)["voice"]["loudness"], false);
    let before = frames("noise_suppression");
    run_for(&mut both, Duration::from_millis(500));
    assert_eq!(frames("noise_suppression"), before, "nobody suppressed yet");

    // Not an admin: refused, nothing changed.
    let r = call(api, &alice, "PATCH", &a_url, r#"{"noise_suppression":true}"#);
    assert_eq!((r.status, r.code().as_str()), (403, "forbidden"), "{}", r.body);
    let r = call(api, &alice, "PATCH", "/v1/rooms/v", r#"{"loudness":true}"#);
    assert_eq!((r.status, r.code().as_str()), (403, "forbidden"), "{}", r.body);
    // Bad values: a JSON error.
    let r = call(api, &admin, "PATCH", &a_url, r#"{"noise_suppression":"yes"}"#);
    assert_eq!((r.status, r.code().as_str()), (400, "bad_json"), "{}", r.body);
    let r = call(api, &admin, "PATCH", "/v1/rooms/v", r#"{"noise_suppression":"loud","loudness":true}"#);
    assert_eq!((r.status, r.code().as_str()), (400, "bad_value"), "{}", r.body);
    assert!(r.body.contains("auto"), "{}", r.body);

    // An admin turns it on for Alice: her frames are suppressed from the next tick, and Bob still hears her.
    let r = call(api, &admin, "PATCH", &a_url, r#"{"noise_suppression":true}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(json(&r)["voice"]["noise_suppression"], true);
    let since = Instant::now();
    run_for(&mut both, Duration::from_millis(1500));
    let suppressed = frames("noise_suppression") - before;
    assert!(suppressed >= 40.0, "Alice's frames suppressed: {suppressed}");
    let heard = both[1].hears(440.0, since);
    assert!(heard > 0.02, "Bob hears Alice's tone through RNNoise at {heard}");

    // Room level: loudness on (the bad PATCH above changed nothing: it was off until now).
    assert_eq!(frames("loudness"), 0.0, "the refused room PATCH turned nothing on");
    let r = call(api, &admin, "PATCH", "/v1/rooms/v", r#"{"loudness":true,"noise_suppression":"off"}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(json(&r)["voice"], serde_json::json!({"noise_suppression": "off", "loudness": true}));
    // Alice's own setting stands over the room's "off"; null follows the room again.
    let r = call(api, &admin, "PATCH", &a_url, "{}");
    assert_eq!(
        (json(&r)["voice"]["noise_suppression"].clone(), json(&r)["voice"]["loudness"].clone()),
        (true.into(), true.into())
    );
    let r = call(api, &admin, "PATCH", &a_url, r#"{"noise_suppression":null,"loudness":false}"#);
    assert_eq!(json(&r)["voice"]["noise_suppression"], false);
    assert_eq!(json(&r)["voice"]["loudness"], false);
    run_for(&mut both, Duration::from_millis(500));
    assert!(frames("loudness") > 0.0, "Bob's frames are normalised (room on, his own unset)");
}
