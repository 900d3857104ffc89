//! A room that waits for its moderator, spread over two nodes (a real
//! redis-server, two nodes in this process on 127.0.0.4 and .5,
//! `cluster.room_spread = "always"`, real WebRTC peers with tones, a real
//! hold-music file): two guests on the room's owner are held muted with the
//! hold music (330 Hz), not hearing each other; a moderator who joins on the
//! other node opens the room there for them (they hear each other, the music
//! stops); when that moderator leaves, the owner applies
//! `on_moderator_leave = "end"`: the room closes on both nodes. Before, a
//! node saw only its own moderators: the guests stayed held.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{call, cluster_node_config, cluster_room_made, hold_music_dir, join_placed, start_with};
use tutti_client::redis::RedisServer;
use tutti_client::{run_for, run_until};
use tutti_server::auth::Grant;

const ROOM: &str = "townhall";
const HOLD_HZ: f32 = 330.0;
/// Well above a mixed tone's residue, well below a present one (≈0.2 amplitude).
const HEARD: f32 = 0.05;

/// Whether `room` is hosted on the node at `api` (its GET answers there, not a 404).
fn hosted(api: SocketAddr, admin: &str) -> bool {
    call(api, admin, "GET", &format!("/v1/rooms/{ROOM}"), "").status != 404
}

#[test]
fn a_moderator_on_another_node_opens_a_waiting_room_and_its_leaving_ends_it_everywhere() {
    let redis = RedisServer::start();
    let dir = hold_music_dir("cluster-moderated", HOLD_HZ);
    let nodes: Vec<_> = [([127, 0, 0, 4], "mod-a"), ([127, 0, 0, 5], "mod-b")]
        .iter()
        .map(|(ip, id)| {
            let mut cfg = cluster_node_config(*ip, id, &redis);
            cfg.cluster.room_spread = tutti_cluster::RoomSpread::Always;
            cfg.playback.dir = dir.display().to_string();
            cfg.playback.hold_music = "hold.opus".to_owned();
            start_with(cfg)
        })
        .collect();
    let apis: Vec<SocketAddr> = nodes.iter().map(|(_, s)| s.http_addr()).collect();
    let admin = nodes[0].1.mint_token(&Grant::admin("ops"), Duration::from_secs(600)).expect("token");
    let body = format!(r#"{{"id":"{ROOM}","wait_for_moderator":true,"on_moderator_leave":"end"}}"#);
    let owner = cluster_room_made(&apis, &admin, &body);
    let other = 1 - owner;

    // Two guests on the owner: held, hearing the hold music and not each other.
    let guest = serde_json::json!({"room": ROOM, "speak": true, "listen": true});
    let mut ann = join_placed(apis[owner], ROOM, "ann", &guest, 440.0);
    let mut bo = join_placed(apis[owner], ROOM, "bo", &guest, 660.0);
    let up = run_until(&mut [&mut ann, &mut bo], Instant::now() + Duration::from_secs(20), |cs| {
        cs.iter().all(|c| c.heard.len() > 25)
    });
    assert!(up, "both connected");
    let held = Instant::now();
    run_for(&mut [&mut ann, &mut bo], Duration::from_millis(1500));
    for (who, c, other) in [("ann", &ann, 660.0), ("bo", &bo, 440.0)] {
        assert!(c.hears(HOLD_HZ, held) > HEARD, "{who} hears the hold music: {}", c.hears(HOLD_HZ, held));
        assert!(c.hears(other, held) < 0.01, "{who} hears no guest while held: {}", c.hears(other, held));
    }

    // The moderator (an admin of the room) joins on the other node: the room opens for the guests on the owner.
    let moderator = serde_json::json!({"room": ROOM, "speak": true, "listen": true, "admin": true});
    let mut host = join_placed(apis[other], ROOM, "host", &moderator, 990.0);
    let mut opened = None;
    let open = run_until(&mut [&mut ann, &mut bo, &mut host], Instant::now() + Duration::from_secs(15), |cs| {
        let since = Instant::now() - Duration::from_millis(600);
        let hear = cs[0].hears(660.0, since) > HEARD && cs[1].hears(440.0, since) > HEARD;
        let quiet = cs[0].hears(HOLD_HZ, since) < 0.01 && cs[1].hears(HOLD_HZ, since) < 0.01;
        if hear && quiet && opened.is_none() {
            opened = Some(Instant::now());
        }
        opened.is_some_and(|at| at.elapsed() > Duration::from_millis(600))
    });
    let since = Instant::now() - Duration::from_millis(600);
    assert!(
        open,
        "the moderator on the other node opens the room: ann hears bo {:.3}, bo hears ann {:.3}, hold music {:.3}",
        ann.hears(660.0, since),
        bo.hears(440.0, since),
        ann.hears(HOLD_HZ, since)
    );
    let r = call(apis[owner], &admin, "GET", &format!("/v1/rooms/{ROOM}"), "");
    let listing: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    assert_eq!(listing["room"]["waiting"], false, "the owner's copy is open: {listing}");

    // The moderator leaves: the owner ends the room, and every node's copy closes.
    let host_url = host.location.clone();
    host.close();
    let left = call(apis[other], &admin, "DELETE", &host_url, "");
    assert!(matches!(left.status, 204 | 404), "the host's leave: {} {}", left.status, left.body);
    let deadline = Instant::now() + Duration::from_secs(10);
    while apis.iter().any(|api| hosted(*api, &admin)) {
        assert!(
            Instant::now() < deadline,
            "the room still open on {:?}",
            apis.iter().map(|a| hosted(*a, &admin)).collect::<Vec<_>>()
        );
        run_for(&mut [&mut ann, &mut bo], Duration::from_millis(200));
    }
    for (rt, server) in nodes {
        rt.block_on(server.shutdown());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
