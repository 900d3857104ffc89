//! Control of one room across three nodes: three `tutti serve` processes on
//! 127.0.0.2, .3 and .4 and a real `redis-server`, `cluster.room_spread =
//! "always"`, one room with a talker on each node (real WebRTC, tones).
//!
//! - Participant ids are unique across nodes, and each names its node
//!   (`number << 32`, the number in the node's signed record).
//! - A node joining the running room hears it from its first frames.
//! - Mute-all sent to one node silences every node's non-admin talkers;
//!   an admin talker is spared.
//! - A speak grant for a listener on node C, sent to node A, is redirected
//!   to C: its tone is heard on A and B afterwards, never before.
//! - A kick with a ban of a participant on B, sent to C: redirected, 204,
//!   gone from B's listing and from every ear; its identity is refused
//!   on every node.
//! - A lock sent to B refuses a join on C.
//! - A control message forged straight into Redis is refused (counted)
//!   and changes nothing; an id naming no node of the span is a 404.
//! - A file played into the room on A is heard on every node.
//! - `DELETE` of the room sent to B closes every node's copy.
//!
//! Joins are placed on a chosen node with a redirect ticket minted here
//! (as the node that redirects would mint it), except the late joiner,
//! which the directory places on the empty node by itself.

#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::cluster::{Node, Redis, SECRET, join_placed_as, json, metric, send, spread_nodes, ticket_for};
use tutti_client::{Requester, ToneClient, request_as, request_following, run_for, run_until, split_location};
use tutti_mix::{Decoder, FRAME_SAMPLES, goertzel};
use tutti_server::auth::{Auth, Grant, unix_now};

const ROOM: &str = "ctl";
/// Talkers on A, B and C; the admin talker (on A); the listener (on C).
const FREQS: [f32; 3] = [440.0, 660.0, 990.0];
const ADMIN_FREQ: f32 = 1320.0;
const LISTENER_FREQ: f32 = 1760.0;
/// A file played into the room.
const PLAYBACK_FREQ: f32 = 1175.0;
const PARTICIPANTS: &str = "/v1/rooms/ctl/participants";

/// A redirect ticket for `identity` and one request about the room.
fn ticket(identity: &str, speak: bool, admin: bool, request: (&str, &str)) -> String {
    ticket_for(ROOM, identity, speak, admin, request)
}

/// A join placed on the node at `api`.
fn join_on(api: SocketAddr, identity: &str, speak: bool, admin: bool, freq: f32) -> Result<ToneClient, (u16, String)> {
    join_placed_as(api, ROOM, identity, speak, admin, freq)
}

fn accept(client: &mut ToneClient, r: &tutti_client::Response) -> Result<(), (u16, String)> {
    client.location = r.header("location").unwrap_or_default().to_owned();
    let id = client.location.rsplit('/').next().and_then(|s| s.parse().ok()).unwrap_or(0);
    client.accept_answer(&r.body, id).map_err(|e| (0, e.to_string()))
}

/// Pumps `clients` until `done` holds over the last second (checked every
/// 250 ms, from `settle` on), or `within`; whether it held, and when.
fn until(
    clients: &mut [ToneClient],
    within: Duration,
    settle: Duration,
    mut done: impl FnMut(&[&mut ToneClient], Instant) -> bool,
) -> Option<Duration> {
    let started = Instant::now();
    let mut refs: Vec<&mut ToneClient> = clients.iter_mut().collect();
    let mut last = Instant::now();
    let ok = run_until(&mut refs, started + within, |cs| {
        if last.elapsed() < Duration::from_millis(250) || started.elapsed() < settle {
            return false;
        }
        last = Instant::now();
        done(cs, Instant::now() - Duration::from_secs(1))
    });
    ok.then(|| started.elapsed())
}

/// How loud each of `freqs` is to each client over the last second.
fn levels(clients: &[ToneClient], freqs: &[f32]) -> Vec<Vec<f32>> {
    let since = Instant::now() - Duration::from_secs(1);
    clients.iter().map(|c| freqs.iter().map(|&f| (c.hears(f, since) * 1000.0).round() / 1000.0).collect()).collect()
}

/// For each of the first `n` audio frames `c` received: whether every one of `freqs` is in it.
fn first_frames_carry(c: &ToneClient, freqs: &[f32], n: usize) -> Vec<bool> {
    let mut dec = Decoder::new().expect("decoder");
    let mut pcm = [0.0f32; FRAME_SAMPLES];
    c.heard
        .iter()
        .take(n)
        .map(|(_, p)| dec.decode(&p.payload, &mut pcm).is_ok() && freqs.iter().all(|&f| goertzel(&pcm, f) > 0.03))
        .collect()
}

/// The node numbers in the nodes' records, as Redis holds them.
fn number_of(redis: &Redis, node: &Node) -> u64 {
    redis.cli(&["HGET", &format!("tutti:node:{}", node.id), "number"]).parse().expect("a node number in the record")
}

#[test]
fn room_control_reaches_every_node_of_a_spread_room() {
    let t0 = Instant::now();
    let redis = Redis::start();
    let nodes = spread_nodes(&redis);
    let (a, b, c) = (nodes[0].api, nodes[1].api, nodes[2].api);
    let node_of = |addr: SocketAddr| nodes.iter().position(|n| n.api == addr).expect("a node's address");
    let auth = Auth::new(SECRET).expect("secret");
    let admin = auth.mint(&Grant::admin("ops"), Duration::from_secs(600), unix_now()).expect("token");
    // The room created on A (a create redirected there), so that C is not in it yet.
    let create = format!("/v1/rooms?room={ROOM}&ticket={}", ticket("ops", false, true, ("POST", "/v1/rooms")));
    let r = request_as(a, &Requester::default(), "POST", &create, Some("application/json"), br#"{"max_speakers":5}"#)
        .expect("create answers");
    assert_eq!(r.status, 201, "{}", r.body);

    // Talkers on A and B; they hear each other.
    let mut all = vec![
        join_on(a, "talker-a", true, false, FREQS[0]).expect("talker on A"),
        join_on(b, "talker-b", true, false, FREQS[1]).expect("talker on B"),
    ];
    let heard = until(&mut all, Duration::from_secs(20), Duration::from_secs(1), |cs, since| {
        cs[0].hears(FREQS[1], since) > 0.05 && cs[1].hears(FREQS[0], since) > 0.05
    });
    assert!(heard.is_some(), "A and B hear each other: {:?}", levels(&all, &FREQS));

    // A third node's first participant hears the room from its first frames:
    // placed by the directory (C is empty), through C's API.
    let (mut late, offer) = ToneClient::offer(FREQS[2]).expect("offer");
    let talker = auth.mint(&Grant::participant(ROOM, "talker-c"), Duration::from_secs(600), unix_now()).expect("t");
    let asked = Instant::now();
    let (r, at, _) = request_following(
        c,
        &Requester::token(&talker),
        "POST",
        PARTICIPANTS,
        Some("application/sdp"),
        offer.as_bytes(),
        2,
    )
    .expect("join answers");
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(node_of(at), 2, "the empty node C takes the join");
    accept(&mut late, &r).expect("answer");
    all.push(late);
    let answered = asked.elapsed();
    let mut connected = None;
    {
        let mut refs: Vec<&mut ToneClient> = all.iter_mut().collect();
        run_until(&mut refs, Instant::now() + Duration::from_secs(10), |cs| {
            if cs[2].connected && connected.is_none() {
                connected = Some(Instant::now());
            }
            cs[2].heard.len() >= 12
        });
    }
    let late = &all[2];
    assert!(late.heard.len() >= 10, "the late joiner receives audio: {} frames", late.heard.len());
    let carry = first_frames_carry(late, &FREQS[..2], 10);
    let connected = connected.expect("connected before its first frames");
    let first_at = late.heard[0].0;
    let first_tone = late.heard.iter().zip(&carry).find(|(_, c)| **c).map(|((at, _), _)| at.duration_since(connected));
    eprintln!(
        "late joiner on C: answered in {answered:?}, connected {:?} after the request, first frame {:?} after \
         connecting, first frame with A's and B's tones {first_tone:?} after connecting; its first 10 frames carry \
         them: {carry:?}",
        connected.duration_since(asked),
        first_at.saturating_duration_since(connected),
    );
    // The first frames after connecting carry the room (a tick or two: the
    // mesh was set up while the client connected), not silence, nor nothing.
    assert!(
        carry.iter().filter(|c| **c).count() >= 8,
        "at least 8 of the late joiner's first 10 frames carry the other nodes' tones: {carry:?}"
    );
    let waited = first_at.saturating_duration_since(connected);
    assert!(waited < Duration::from_millis(200), "the first frame {waited:?} after connecting");

    // An admin talker on A and a listener (listen-only token) on C.
    all.push(join_on(a, "moderator", true, true, ADMIN_FREQ).expect("admin talker on A"));
    all.push(join_on(c, "listener-c", false, false, LISTENER_FREQ).expect("listener on C"));
    let (admin_i, listener_i) = (3, 4);
    all[listener_i].talking = true; // it sends a tone; the room must not take it

    // Ids are distinct and each names its node.
    let ids: Vec<u64> = all.iter().map(|c| c.id).collect();
    let on = [0usize, 1, 2, 0, 2];
    let numbers: Vec<u64> = nodes.iter().map(|n| number_of(&redis, n)).collect();
    eprintln!("node numbers {numbers:?}; participant ids {ids:?}");
    let mut distinct = ids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), ids.len(), "ids unique across nodes: {ids:?}");
    for (id, &n) in ids.iter().zip(&on) {
        assert_eq!(id >> 32, numbers[n], "id {id} names its node {} (number {})", nodes[n].id, numbers[n]);
        assert!(*id < 1 << 51, "id {id} below the mixer's remote ids");
    }

    // Everyone hears the three talkers and the admin, nobody the listener.
    let talkers = [FREQS[0], FREQS[1], FREQS[2], ADMIN_FREQ];
    let heard = until(&mut all, Duration::from_secs(20), Duration::from_millis(1500), |cs, since| {
        cs.iter().enumerate().all(|(i, c)| {
            talkers.iter().enumerate().all(|(j, &f)| j == i || (j == 3 && i == admin_i) || c.hears(f, since) > 0.05)
                && (i == listener_i || c.hears(LISTENER_FREQ, since) < 0.02)
        })
    });
    let all_freqs = [FREQS[0], FREQS[1], FREQS[2], ADMIN_FREQ, LISTENER_FREQ];
    assert!(heard.is_some(), "all hear the talkers, none the listener: {:?}", levels(&all, &all_freqs));

    // Mute-all sent to A: the talkers on A, B and C fall silent for everyone; the admin is spared.
    let (r, at) = send(a, &admin, "PATCH", "/v1/rooms/ctl", r#"{"mute_all":true}"#);
    assert_eq!((r.status, node_of(at)), (200, 0), "{}", r.body);
    let muted_here = json(&r)["muted"].as_u64().unwrap();
    let heard = until(&mut all, Duration::from_secs(10), Duration::from_millis(300), |cs, since| {
        cs.iter().enumerate().all(|(i, c)| {
            FREQS.iter().all(|&f| c.hears(f, since) < 0.02) && (i == admin_i || c.hears(ADMIN_FREQ, since) > 0.05)
        })
    });
    assert!(heard.is_some(), "mute-all reaches every node, the admin spared: {:?}", levels(&all, &all_freqs));
    eprintln!("mute-all sent to A (muted {muted_here} there): every node silent within {heard:?}");

    // A speak grant for the listener on C, sent to A: a 307 to C with a
    // single-use ticket for that request (a replay is refused).
    let path = format!("{PARTICIPANTS}/{}", ids[listener_i]);
    let grant = br#"{"speak":true}"#;
    let r = request_as(a, &Requester::token(&admin), "PATCH", &path, Some("application/json"), grant).expect("A");
    assert_eq!(r.status, 307, "{}", r.body);
    assert!(json(&r)["message"].as_str().unwrap().contains("participant"), "{}", r.body);
    let (to, redirected) = split_location(r.header("location").expect("Location")).expect("an http Location");
    assert!(redirected.starts_with(&format!("{path}?ticket=")), "{redirected}");
    let followed = |who: &Requester<'_>| {
        request_as(to, who, "PATCH", &redirected, Some("application/json"), grant).expect("the participant's node")
    };
    let r = followed(&Requester::default());
    assert_eq!((r.status, node_of(to)), (200, 2), "the grant reaches C: {}", r.body);
    assert_eq!(json(&r)["speak"], true);
    let replay = followed(&Requester::default());
    assert_eq!((replay.status, replay.code()), (401, "bad_ticket".to_owned()), "a replayed ticket: {}", replay.body);
    let heard = until(&mut all, Duration::from_secs(10), Duration::from_millis(300), |cs, since| {
        cs[0].hears(LISTENER_FREQ, since) > 0.05 && cs[1].hears(LISTENER_FREQ, since) > 0.05
    });
    assert!(heard.is_some(), "the granted listener is heard on A and B: {:?}", levels(&all, &all_freqs));

    // Talker B unmuted through C (redirected to B), then kicked with a ban through C.
    let path = format!("{PARTICIPANTS}/{}", ids[1]);
    let (r, at) = send(c, &admin, "PATCH", &path, r#"{"muted":false}"#);
    assert_eq!((r.status, node_of(at)), (200, 1), "the unmute reaches B: {}", r.body);
    let heard = until(&mut all, Duration::from_secs(10), Duration::from_millis(300), |cs, since| {
        cs[0].hears(FREQS[1], since) > 0.05 && cs[2].hears(FREQS[1], since) > 0.05
    });
    assert!(heard.is_some(), "talker B heard again on A and C: {:?}", levels(&all, &all_freqs));
    let (r, at) = send(c, &admin, "DELETE", &format!("{path}?ban_seconds=60"), "");
    assert_eq!((r.status, node_of(at)), (204, 1), "the kick reaches B: {}", r.body);
    let gone = until(&mut all, Duration::from_secs(10), Duration::from_millis(300), |cs, since| {
        cs[0].hears(FREQS[1], since) < 0.02 && cs[2].hears(FREQS[1], since) < 0.02
    });
    assert!(gone.is_some(), "the kicked talker is heard no more: {:?}", levels(&all, &all_freqs));
    let listing = request_as(b, &Requester::token(&admin), "GET", "/v1/rooms/ctl", None, b"").expect("room on B");
    let listed: Vec<u64> =
        json(&listing)["participants"].as_array().unwrap().iter().filter_map(|p| p["id"].as_u64()).collect();
    assert!(!listed.contains(&ids[1]), "B no longer lists {}: {listed:?}", ids[1]);
    // Its identity is refused on every node (the ban reaches them within a poll).
    for (i, api) in [a, b, c].into_iter().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(5);
        let refused = loop {
            match join_on(api, "talker-b", true, false, FREQS[1]) {
                Err((403, body)) if body.contains("banned") => break true,
                Ok(mut joined) => joined.close(),
                Err(_) => {}
            }
            if Instant::now() > deadline {
                break false;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(refused, "the banned identity is refused on {}", nodes[i].id);
    }

    // A lock sent to B refuses a join on C.
    let lock_sent = Instant::now();
    let (r, at) = send(b, &admin, "PATCH", "/v1/rooms/ctl", r#"{"locked":true}"#);
    assert_eq!((r.status, node_of(at)), (200, 1), "{}", r.body);
    let deadline = Instant::now() + Duration::from_secs(5);
    let locked = loop {
        match join_on(c, "newcomer", true, false, 550.0) {
            Err((423, body)) if body.contains("room_locked") => break Some(Instant::now()),
            Ok(mut joined) => joined.close(),
            Err(_) => {}
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let locked = locked.expect("a join on C is refused once B locked the room");
    eprintln!("lock sent to B: a join on C refused {:?} after the request", locked.duration_since(lock_sent));

    // A control message forged into Redis (unlock, unmute: with a bad tag) is
    // refused by every node, counted, and changes nothing.
    let refused_before: Vec<f64> =
        nodes.iter().map(|n| metric(n, "tutti_cluster_control_refused_total{reason=\"bad_tag\"}")).collect();
    let epoch = redis.cli(&["HGET", "tutti:room:ctl", "epoch"]);
    let forged_json = serde_json::json!({
        "room": ROOM, "epoch": epoch.parse::<u64>().unwrap_or(1), "origin": "node-9",
        "ts_ms": unix_now() * 1000, "nonce": "00112233445566778899aabbccddeeff",
        "body": {"kind": "update", "locked": false, "max_participants": null, "max_speakers": null,
                 "mute_all": false, "noise_suppression": null, "loudness": null},
    });
    let forged = format!("{}.{}", URL_SAFE_NO_PAD.encode(forged_json.to_string()), URL_SAFE_NO_PAD.encode([7u8; 32]));
    let receivers = redis.cli(&["PUBLISH", "tutti:control", &forged]);
    assert_eq!(receivers, "3", "every node listens on the control channel");
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline
        && nodes
            .iter()
            .zip(&refused_before)
            .any(|(n, b)| metric(n, "tutti_cluster_control_refused_total{reason=\"bad_tag\"}") < b + 1.0)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    for (n, before) in nodes.iter().zip(&refused_before) {
        let now = metric(n, "tutti_cluster_control_refused_total{reason=\"bad_tag\"}");
        assert_eq!(now, before + 1.0, "{} counts the forged message refused", n.id);
        let r = request_as(n.api, &Requester::token(&admin), "GET", "/v1/rooms/ctl", None, b"").expect("room");
        assert_eq!(json(&r)["room"]["locked"], true, "{} still locked", n.id);
        let applied = metric(n, "tutti_cluster_control_applied_total");
        eprintln!("{}: control applied {applied}, refused (bad tag) {now}", n.id);
    }
    // Still locked, and talker A still muted, a second on.
    run_for(&mut all.iter_mut().collect::<Vec<_>>(), Duration::from_secs(1));
    assert!(matches!(join_on(a, "newcomer-2", true, false, 550.0), Err((423, _))), "still locked on A");
    let since = Instant::now() - Duration::from_secs(1);
    let (on_c, listener) = (all[2].hears(FREQS[0], since), all[listener_i].hears(FREQS[0], since));
    assert!(on_c < 0.02 && listener < 0.02, "talker A still muted: {on_c}, {listener}");

    // An id naming a node outside the span: 404, as an unknown id.
    let stranger = (u64::from(tutti_cluster::MAX_NODE_NUMBER) << 32) + 1;
    let (r, _) = send(a, &admin, "PATCH", &format!("{PARTICIPANTS}/{stranger}"), r#"{"muted":true}"#);
    assert_eq!((r.status, r.code()), (404, "participant_not_found".to_owned()), "{}", r.body);

    // A file played into the room on A (an upload) is heard on every node.
    let (tone, _) = tutti_server::outputs::ogg::tone_file(PLAYBACK_FREQ, 150).expect("tone file");
    let r =
        request_as(a, &Requester::token(&admin), "POST", "/v1/rooms/ctl/playbacks?loop=true", Some("audio/ogg"), &tone)
            .expect("playback");
    assert_eq!(r.status, 201, "{}", r.body);
    let heard = until(&mut all, Duration::from_secs(10), Duration::from_secs(1), |cs, since| {
        cs.iter().all(|c| c.closed || c.hears(PLAYBACK_FREQ, since) > 0.05)
    });
    let heard =
        heard.unwrap_or_else(|| panic!("the playback on A heard on every node: {:?}", levels(&all, &[PLAYBACK_FREQ])));
    eprintln!("a playback on A heard by everyone on every node within {heard:?}");

    // DELETE sent to B: every node closes its copy.
    let hosted = |n: &Node| {
        let r = request_as(n.api, &Requester::token(&admin), "GET", "/v1/node", None, b"").expect("node");
        json(&r)["rooms"].as_u64().unwrap_or(u64::MAX)
    };
    let (r, _) = send(b, &admin, "DELETE", "/v1/rooms/ctl", "");
    assert_eq!(r.status, 204, "{}", r.body);
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && nodes.iter().any(|n| hosted(n) != 0) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<u64> = nodes.iter().map(hosted).collect();
    assert_eq!(left, [0, 0, 0], "every node closed its copy of the deleted room");

    for c in &mut all {
        c.close();
    }
    eprintln!("the whole scenario took {:?}", t0.elapsed());
}
