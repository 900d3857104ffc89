//! Rooms that wait for their moderator, over real WebRTC peers with tones,
//! real tokens and a real hold-music file: two guests who join a room with
//! `wait_for_moderator` are held muted (they cannot unmute themselves) and
//! hear the hold music, not each other; an admin's join opens the room (they
//! are unmuted and hear each other, the music stops); with
//! `on_moderator_leave = "end"` the room closes when the admin leaves. A
//! participant made moderator by its token's `tutti.moderator` attribute
//! opens a room too, and `join_muted` makes everyone else join muted.

mod common;

use std::time::{Duration, Instant};

use common::{Ws, auth_config, call, hold_music_dir, minter, refused, start_with};
use serde_json::json;
use tutti_client::{JoinAs, Requester, ToneClient, run_for, run_until};
use tutti_server::auth::Grant;

const SECRET: &str = "the moderated rooms test's secret: thirty-two bytes";
const WAIT: Duration = Duration::from_secs(10);
const HOLD_HZ: f32 = 330.0;
/// Well above a mixed tone's residue, well below a present one (≈0.2 amplitude).
const HEARD: f32 = 0.05;

/// A server with tokens and the hold music (a tone of [`HOLD_HZ`]), and the music's directory.
fn with_hold_music(tag: &str) -> (tokio::runtime::Runtime, tutti_server::Server, std::path::PathBuf) {
    let dir = hold_music_dir(tag, HOLD_HZ);
    let mut cfg = auth_config(SECRET);
    cfg.playback.dir = dir.display().to_string();
    cfg.playback.hold_music = "hold.opus".to_owned();
    let (rt, server) = start_with(cfg);
    (rt, server, dir)
}

fn muted_in_listing(api: std::net::SocketAddr, token: &str, room: &str, id: u64) -> bool {
    let r = call(api, token, "GET", &format!("/v1/rooms/{room}"), "");
    let body: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    body["participants"].as_array().into_iter().flatten().any(|p| p["id"] == id && p["muted"] == true)
}

#[test]
fn guests_wait_muted_with_hold_music_until_the_moderator_comes_and_the_room_ends_when_they_go() {
    let (_rt, server, dir) = with_hold_music("moderated-wait");
    let api = server.http_addr();
    let mint = minter(SECRET);
    let admin = mint(Grant::admin("ops"));
    let body = json!({"id": "townhall", "wait_for_moderator": true, "on_moderator_leave": "end"}).to_string();
    let r = call(api, &admin, "POST", "/v1/rooms", &body);
    assert_eq!(r.status, 201, "{}", r.body);
    let created: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    assert_eq!(created["waiting"], true, "{created}");
    assert_eq!(created["moderation"]["on_moderator_leave"], "end", "{created}");

    let (ann_t, bo_t) = (mint(Grant::participant("townhall", "ann")), mint(Grant::participant("townhall", "bo")));
    let mut watcher = Ws::connect_to(api, &format!("/v1/rooms/townhall/ws?token={admin}"));
    assert_eq!(watcher.wait_for(WAIT, |m| m["type"] == "room")["waiting"], true);
    let mut ann = ToneClient::join_as(api, &Requester::token(&ann_t), "townhall", 440.0, JoinAs::Whip).expect("ann");
    let mut bo = ToneClient::join_as(api, &Requester::token(&bo_t), "townhall", 660.0, JoinAs::Json).expect("bo");
    let up = run_until(&mut [&mut ann, &mut bo], Instant::now() + Duration::from_secs(20), |cs| {
        cs.iter().all(|c| c.heard.len() > 25)
    });
    assert!(up, "both connected");
    assert!(muted_in_listing(api, &admin, "townhall", ann.id) && muted_in_listing(api, &admin, "townhall", bo.id));
    // Held: neither may unmute, and they hear the hold music, not each other.
    let ann_url = format!("/v1/rooms/townhall/participants/{}", ann.id);
    refused(&call(api, &ann_t, "PATCH", &ann_url, r#"{"muted":false}"#), 409, "waiting_for_moderator", "held");
    let held = Instant::now();
    run_for(&mut [&mut ann, &mut bo], Duration::from_millis(1500));
    for (who, c, other) in [("ann", &ann, 660.0), ("bo", &bo, 440.0)] {
        assert!(c.hears(HOLD_HZ, held) > HEARD, "{who} hears the hold music: {}", c.hears(HOLD_HZ, held));
        assert!(c.hears(other, held) < 0.01, "{who} hears no guest while held: {}", c.hears(other, held));
    }

    // The moderator (an admin token for the room) joins: the room opens.
    let host_t = mint(Grant { admin: true, ..Grant::participant("townhall", "host") });
    let mut host = ToneClient::join_as(api, &Requester::token(&host_t), "townhall", 990.0, JoinAs::Whip).expect("host");
    watcher
        .wait_pumping(WAIT, &mut [&mut ann, &mut bo, &mut host], |m| m["type"] == "waiting" && m["waiting"] == false);
    let opened = Instant::now();
    run_for(&mut [&mut ann, &mut bo, &mut host], Duration::from_millis(2000));
    let after = opened + Duration::from_millis(600);
    assert!(ann.hears(660.0, after) > HEARD, "ann hears bo once the room opens: {}", ann.hears(660.0, after));
    assert!(bo.hears(440.0, after) > HEARD, "bo hears ann: {}", bo.hears(440.0, after));
    assert!(ann.hears(HOLD_HZ, after) < 0.01, "the hold music stopped: {}", ann.hears(HOLD_HZ, after));
    assert!(!muted_in_listing(api, &admin, "townhall", ann.id), "unmuted");

    // The moderator leaves: the room ends (`on_moderator_leave = "end"`).
    let host_url = host.location.clone();
    host.close();
    // Its call closed (DTLS close_notify) and its REST leave, as the page does: whichever comes first.
    let left = call(api, &host_t, "DELETE", &host_url, "");
    assert!(matches!(left.status, 204 | 404), "the host's leave: {} {}", left.status, left.body);
    watcher.wait_pumping(WAIT, &mut [&mut ann, &mut bo], |m| m["type"] == "room_closed");
    let r = call(api, &admin, "GET", "/v1/rooms/townhall", "");
    assert_eq!(r.status, 404, "the room is gone: {}", r.body);

    // A moderator by attribute opens a room too; `join_muted` mutes the others on arrival (they may unmute).
    let body = json!({"id": "panel", "wait_for_moderator": true, "join_muted": true}).to_string();
    assert_eq!(call(api, &admin, "POST", "/v1/rooms", &body).status, 201);
    let chair_t = mint(Grant {
        attributes: [("tutti.moderator".to_owned(), "true".to_owned())].into(),
        ..Grant::participant("panel", "chair")
    });
    let guest_t = mint(Grant::participant("panel", "guest"));
    let guest = ToneClient::join_as(api, &Requester::token(&guest_t), "panel", 440.0, JoinAs::Whip).expect("guest");
    let chair = ToneClient::join_as(api, &Requester::token(&chair_t), "panel", 660.0, JoinAs::Whip).expect("chair");
    let r = call(api, &admin, "GET", "/v1/rooms/panel", "");
    let room: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    assert_eq!(room["room"]["waiting"], false, "the chair opened it: {room}");
    assert!(muted_in_listing(api, &admin, "panel", guest.id), "join_muted: the guest stays muted: {room}");
    assert!(!muted_in_listing(api, &admin, "panel", chair.id), "not the chair: {room}");
    let guest_url = format!("/v1/rooms/panel/participants/{}", guest.id);
    let r = call(api, &guest_t, "PATCH", &guest_url, r#"{"muted":false}"#);
    assert_eq!(r.status, 200, "open, the guest may unmute: {}", r.body);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A moderator moved to a breakout room (`POST …/move`) leaves its room
/// and arrives in the other, as a leave and a join would: the room it left
/// holds its guests again (the hold music, not each other), and the room it
/// arrives in, waiting, opens. Before, a move was no leave or join for
/// moderation: the old room stayed open without a moderator, the new one
/// kept waiting with one.
#[test]
fn a_moderator_moved_to_another_room_leaves_one_waiting_and_opens_the_other() {
    let (_rt, server, dir) = with_hold_music("moderated-move");
    let api = server.http_addr();
    let mint = minter(SECRET);
    let admin = mint(Grant::admin("*"));
    for id in ["plenary", "breakout"] {
        let body = json!({"id": id, "wait_for_moderator": true}).to_string();
        assert_eq!(call(api, &admin, "POST", "/v1/rooms", &body).status, 201);
    }
    let guest = |room: &str, who: &str, freq: f32| {
        let t = mint(Grant::participant(room, who));
        ToneClient::join_as(api, &Requester::token(&t), room, freq, JoinAs::Whip).expect("guest")
    };
    // The host (an admin of every room) opens the plenary for ann and cy; bo waits in the breakout.
    let host_t = mint(Grant { admin: true, ..Grant::participant("*", "host") });
    let mut host = ToneClient::join_as(api, &Requester::token(&host_t), "plenary", 990.0, JoinAs::Whip).expect("host");
    let (mut ann, mut cy, mut bo) =
        (guest("plenary", "ann", 440.0), guest("plenary", "cy", 550.0), guest("breakout", "bo", 660.0));
    let open =
        run_until(&mut [&mut host, &mut ann, &mut cy, &mut bo], Instant::now() + Duration::from_secs(20), |cs| {
            let since = Instant::now() - Duration::from_millis(500);
            cs[1].hears(550.0, since) > HEARD && cs[3].hears(HOLD_HZ, since) > HEARD
        });
    assert!(open, "ann hears cy in the open plenary, bo the hold music in the breakout");

    // The host moves to the breakout.
    let r =
        call(api, &admin, "POST", &format!("/v1/rooms/plenary/participants/{}/move", host.id), r#"{"to":"breakout"}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    let moved = Instant::now();
    run_for(&mut [&mut host, &mut ann, &mut cy, &mut bo], Duration::from_millis(2500));
    let after = moved + Duration::from_millis(1000);
    let (ann_cy, ann_hold) = (ann.hears(550.0, after), ann.hears(HOLD_HZ, after));
    let (bo_host, bo_hold) = (bo.hears(990.0, after), bo.hears(HOLD_HZ, after));
    eprintln!(
        "after the move: ann hears cy {ann_cy:.3}, hold {ann_hold:.3}; bo hears the host {bo_host:.3}, hold {bo_hold:.3}"
    );
    assert!(ann_cy < 0.01 && ann_hold > HEARD, "the plenary waits again: ann hears cy {ann_cy:.3}, hold {ann_hold:.3}");
    // Opened: the music stopped and bo is unmuted (it heard the host while held too).
    assert!(bo_hold < 0.01, "the breakout opened: bo hears the hold music {bo_hold:.3}");
    assert!(!muted_in_listing(api, &admin, "breakout", bo.id), "bo is unmuted in the opened breakout");
    let waiting = |room: &str| {
        let r = call(api, &admin, "GET", &format!("/v1/rooms/{room}"), "");
        serde_json::from_str::<serde_json::Value>(&r.body).expect("JSON")["room"]["waiting"].clone()
    };
    assert_eq!((waiting("plenary"), waiting("breakout")), (json!(true), json!(false)));
    let _ = std::fs::remove_dir_all(&dir);
}
