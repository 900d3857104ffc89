//! A recording per speaker in a room spread over two nodes (a real
//! redis-server, two nodes in this process on 127.0.0.2 and .3,
//! `cluster.room_spread = "always"`, each with its own recordings
//! directory): a talker on each node, the recording started and stopped
//! on the room's owner. Each node records its own talker into its own
//! directory, on the same timeline: the same file names, the same zero
//! tick; `ffprobe` reads every file, and each talker's first voiced frame,
//! placed by its node's sidecar, falls where the owner's mix has it
//! (±40 ms). Before, only the owner recorded (its own talker): the other
//! node's directory stayed empty.

mod common;
mod ops_tools;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{cluster_node_config, cluster_room_made, join_placed, start_with};
use ops_tools::{decode_ogg, ffprobe_reads_opus, onset_of, temp_dir};
use tutti_client::redis::RedisServer;
use tutti_client::{Requester, request_as, run_for, run_until};
use tutti_server::auth::Grant;

const ROOM: &str = "pod";

/// The sidecar in `dir` (written when the recording stops), within 10 s.
fn sidecar_in(dir: &Path) -> (String, serde_json::Value) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = std::fs::read_dir(dir).into_iter().flatten().flatten().find_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.ends_with(".json").then_some(name)
        });
        if let Some(name) = found {
            let sidecar = serde_json::from_slice(&std::fs::read(dir.join(&name)).expect("read")).expect("JSON");
            return (name, sidecar);
        }
        assert!(Instant::now() < deadline, "no sidecar in {}", dir.display());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_per_speaker_recording_in_a_spread_room_records_each_nodes_speakers_on_one_timeline() {
    both_nodes_record(false);
}

/// The other node starts hosting the room (its first participant joins)
/// only after the recording started: the owner tells it then, and it
/// records its speaker on the same timeline. Before, it recorded nothing.
#[test]
fn a_node_that_joins_a_spread_room_after_its_recording_started_records_its_speakers_too() {
    both_nodes_record(true);
}

/// Alice on the room's owner, Bob on the other node (joined before the
/// recording starts, or with `late` after it), each node recording its own.
fn both_nodes_record(late: bool) {
    let redis = RedisServer::start();
    let dirs = [temp_dir("spread-rec-a"), temp_dir("spread-rec-b")];
    let nodes: Vec<_> = [([127, 0, 0, 2], "rec-a"), ([127, 0, 0, 3], "rec-b")]
        .iter()
        .zip(&dirs)
        .map(|((ip, id), dir)| {
            let mut cfg = cluster_node_config(*ip, id, &redis);
            cfg.cluster.room_spread = tutti_cluster::RoomSpread::Always;
            cfg.recording.dir = dir.display().to_string();
            start_with(cfg)
        })
        .collect();
    let apis: Vec<SocketAddr> = nodes.iter().map(|(_, s)| s.http_addr()).collect();
    let admin = nodes[0].1.mint_token(&Grant::admin("ops"), Duration::from_secs(600)).expect("token");
    let owner = cluster_room_made(&apis, &admin, &format!("{{\"id\":\"{ROOM}\"}}"));
    let other = 1 - owner;

    // Alice on the owner talks from the start; Bob on the other node a second into the recording.
    let talker = serde_json::json!({"room": ROOM, "speak": true, "listen": true});
    let mut alice = join_placed(apis[owner], ROOM, "alice", &talker, 440.0);
    let as_admin = Requester::token(&admin);
    let recording = format!("/v1/rooms/{ROOM}/recording");
    let start = || {
        let body = br#"{"per_speaker": true}"#;
        let r = request_as(apis[owner], &as_admin, "POST", &recording, Some("application/json"), body).expect("API");
        assert_eq!(r.status, 201, "{}", r.body);
    };
    if late {
        run_until(&mut [&mut alice], Instant::now() + Duration::from_secs(10), |cs| cs[0].connected);
        start();
    }
    let mut bob = join_placed(apis[other], ROOM, "bob", &talker, 660.0);
    bob.talking = false;
    let up = run_until(&mut [&mut alice, &mut bob], Instant::now() + Duration::from_secs(20), |cs| {
        cs[1].hears(440.0, Instant::now() - Duration::from_millis(500)) > 0.05
    });
    assert!(up, "bob, on the other node, hears alice");
    if !late {
        start();
    }
    run_for(&mut [&mut alice, &mut bob], Duration::from_millis(1000));
    bob.talking = true;
    run_for(&mut [&mut alice, &mut bob], Duration::from_millis(1500));
    // The other node shows the file it records.
    let r = request_as(apis[other], &as_admin, "GET", &recording, None, b"").expect("API");
    eprintln!("GET on the other node: {} {}", r.status, r.body);
    let r = request_as(apis[owner], &as_admin, "DELETE", &recording, None, b"").expect("API");
    assert_eq!(r.status, 200, "{}", r.body);

    // Each node's directory: its own talker's file, and a sidecar of the same name.
    let (name_a, side_a) = sidecar_in(&dirs[owner]);
    let (name_b, side_b) = sidecar_in(&dirs[other]);
    eprintln!("owner's sidecar {side_a}\nother node's sidecar {side_b}");
    assert_eq!(name_a, name_b, "one recording name on both nodes");
    assert_eq!(side_a["zero_tick"], side_b["zero_tick"], "one timeline");
    let tracks = |s: &serde_json::Value| s["tracks"].as_array().cloned().unwrap_or_default();
    let (tracks_a, tracks_b) = (tracks(&side_a), tracks(&side_b));
    assert_eq!(tracks_a.len(), 1, "the owner records alice only: {side_a}");
    assert_eq!(tracks_b.len(), 1, "the other node records bob: {side_b}");
    assert_eq!(tracks_a[0]["identity"], "alice");
    assert_eq!(tracks_b[0]["identity"], "bob");
    let ids = ["rec-a", "rec-b"];
    assert_eq!((&side_a["node"], &tracks_a[0]["node"]), (&ids[owner].into(), &ids[owner].into()), "named by its node");
    assert_eq!((&side_b["node"], &tracks_b[0]["node"]), (&ids[other].into(), &ids[other].into()), "named by its node");

    let mix_file = dirs[owner].join(side_a["mix"]["file"].as_str().expect("the owner records the mix"));
    let track_a = dirs[owner].join(tracks_a[0]["file"].as_str().expect("file"));
    let track_b = dirs[other].join(tracks_b[0]["file"].as_str().expect("file"));
    ffprobe_reads_opus(&[mix_file.clone(), track_a.clone(), track_b.clone()]);

    // Each talker's first voiced frame, placed by its node's sidecar, against the owner's mix.
    let mix = decode_ogg(&mix_file);
    let mix_offset = side_a["mix"]["offset_seconds"].as_f64().expect("the mix's offset");
    let placed: [(&str, f32, &PathBuf, &serde_json::Value); 2] =
        [("alice", 440.0, &track_a, &tracks_a[0]), ("bob", 660.0, &track_b, &tracks_b[0])];
    for (who, freq, file, track) in placed {
        let in_track = onset_of(&decode_ogg(file), freq, 0.05).unwrap_or_else(|| panic!("{who} in their file"))
            + track["offset_seconds"].as_f64().expect("offset");
        let in_mix = onset_of(&mix, freq, 0.05).unwrap_or_else(|| panic!("{who} in the mix")) + mix_offset;
        eprintln!("{who}: first voiced at {in_track:.3} s by its track, {in_mix:.3} s in the mix");
        assert!((in_track - in_mix).abs() <= 0.04, "{who}: track {in_track:.3} s against mix {in_mix:.3} s");
    }
    for (rt, server) in nodes {
        rt.block_on(server.shutdown());
    }
    for d in dirs {
        let _ = std::fs::remove_dir_all(d);
    }
}
