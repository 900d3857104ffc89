//! A small fleet against a real tutti server on loopback: 4 rooms of 5, every
//! client joined through its room's WebSocket and holding it, a quarter of
//! them sending no RFC 6464 level. Every room gets audio, every socket
//! receives the room snapshot and the event traffic is counted, mouth-to-ear
//! is measured in the probe rooms only, and the per-room figures are
//! reported (text and JSON).

mod common;

use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tutti_load::{CpuSource, LoadConfig, LoadReport, Role, RoomLayout, run};

/// One server and its clients at a time: the tests measure timing.
static SERIAL: Mutex<()> = Mutex::new(());

fn check(report: &LoadReport) -> Result<(), String> {
    let s = &report.summary;
    let fail = |what: &str| Err(format!("{what}\n{}\n{}", s.to_text(), report.rooms_text(10)));
    if s.connected != 20 || s.join_failed != 0 {
        return fail("not all connected");
    }
    if s.rooms.len() != 4 {
        return fail("not 4 rooms");
    }
    for r in &s.rooms {
        if r.name != format!("fleet-{}", r.room) || r.size != 5 || r.connected != 5 {
            return fail(&format!("room {} not full", r.name));
        }
        // Every room gets its stream in real time: frames received, or
        // skipped by the server's DTX while nobody in it talks (a DTX frame
        // every 400 ms is 2.5 packets a second at least).
        if r.packets_per_second_min < 2.0 || r.perfect_share < 0.99 {
            return fail(&format!("room {}: a client's stream fell short", r.name));
        }
        // Quality is the server's business (and this machine may be busy);
        // here: loopback loses nothing and each room is scored.
        if r.loss_percent > 1.0 || !(1.0..=4.5).contains(&r.mos_p5) {
            return fail(&format!("room {}: loss or MOS", r.name));
        }
    }
    if s.worst_room.is_none() {
        return fail("no worst room");
    }
    let Some(ws) = &s.ws else { return fail("no WebSocket figures") };
    if ws.sockets != 20 || ws.open != 20 || ws.snapshots != 20 {
        return fail("every client holds an open WebSocket that received the room snapshot");
    }
    // Nobody joins or leaves in the window, but talkers start and stop: `talking` events.
    if ws.messages == 0 || ws.bytes == 0 || ws.messages_per_second.max <= 0.0 {
        return fail("no event traffic counted");
    }
    if s.without_level != 5 {
        return fail("a quarter of the clients send no level");
    }
    if s.latency.pairs < 5 || s.latency.missed != 0 || s.self_echo != 0 {
        return fail("markers in the probe rooms");
    }
    Ok(())
}

#[test]
fn four_rooms_of_five_with_websockets() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (rt, server, token) = common::loopback_server();
    // The token travels as ?token= on each WebSocket, as the browser page sends it.

    let mut outcome = Err(String::new());
    for attempt in 1..=3 {
        let mut load = LoadConfig::new(server.http_addr(), 20);
        load.room = if attempt == 1 { "fleet".into() } else { format!("fleet{attempt}") };
        load.rooms = RoomLayout::Count(4);
        load.probe_rooms = 2;
        load.websocket = true;
        load.no_level_share = 0.25;
        load.token = Some(token.clone());
        load.join_interval = Duration::from_millis(10);
        load.warmup = Duration::from_secs(1);
        load.window = Some(Duration::from_secs(5));
        load.life = Some(Duration::from_secs(30));
        load.marker_period = Duration::from_millis(1500);
        load.probe_talkers = 2;
        load.probe_listeners = 2;
        load.talkers = 0.2;
        load.server_cpu = CpuSource::Process(std::process::id());
        let report = run(&load, &AtomicBool::new(false), &mut |_| {}).expect("the run completes");
        let s = &report.summary;
        println!("attempt {attempt}:\n{}\n{}", s.to_text(), report.rooms_text(10));
        // Probes only in the 2 probe rooms (the largest; all equal: the first two).
        let mut probes = [0usize; 4];
        for c in &report.clients {
            if matches!(c.figures.role, Role::ProbeTalker | Role::ProbeListener) {
                probes[c.figures.room] += 1;
            }
        }
        assert_eq!(probes, [4, 4, 0, 0], "2 probe talkers and 2 listeners in each of the first two rooms");
        let json = serde_json::to_string(&report).expect("JSON");
        assert!(
            json.contains("\"rooms\"") && json.contains("\"worst_room\"") && json.contains("\"messages_per_second\"")
        );
        outcome = if attempt == 1 { check(&report) } else { check_renamed(&report, &load.room) };
        let contended = !s.valid || s.machine_busy.is_some_and(|m| m > 0.95);
        if outcome.is_ok() || !contended {
            break;
        }
    }
    rt.block_on(server.shutdown());
    if let Err(e) = outcome {
        panic!("{e}");
    }
}

/// A retry runs in rooms of another name; the checks are the same.
fn check_renamed(report: &LoadReport, base: &str) -> Result<(), String> {
    let mut r = report.clone();
    for room in &mut r.summary.rooms {
        room.name = room.name.replacen(base, "fleet", 1);
    }
    check(&r)
}

/// A room-size mix joined over REST (`--no-ws`): rooms of 3 and 7 drawn in
/// turn, each gets audio, no WebSocket figures, probes in the largest room.
#[test]
fn a_room_size_mix_over_rest() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (rt, server, token) = common::loopback_server();
    let mut load = LoadConfig::new(server.http_addr(), 20);
    load.room = "mix".into();
    load.rooms = RoomLayout::Mix(tutti_load::parse_room_sizes("3:50,7:50").expect("valid mix"));
    load.websocket = false;
    load.token = Some(token);
    load.join_interval = Duration::from_millis(10);
    load.warmup = Duration::from_secs(1);
    load.window = Some(Duration::from_secs(3));
    load.life = Some(Duration::from_secs(30));
    load.probe_talkers = 2;
    load.probe_listeners = 2;
    load.server_cpu = CpuSource::Process(std::process::id());
    let report = run(&load, &AtomicBool::new(false), &mut |_| {}).expect("the run completes");
    rt.block_on(server.shutdown());
    let s = &report.summary;
    let text = format!("{}\n{}", s.to_text(), report.rooms_text(10));
    let sizes: Vec<usize> = s.rooms.iter().map(|r| r.size).collect();
    assert_eq!(sizes, vec![3, 7, 3, 7], "{text}");
    assert!(s.ws.is_none(), "no WebSocket with --no-ws\n{text}");
    assert_eq!(s.connected, 20, "{text}");
    for r in &s.rooms {
        assert_eq!(r.connected, r.size, "{text}");
        // The stream arrives in real time (DTX while nobody in the room talks).
        assert!(r.packets_per_second_min >= 2.0, "room {} gets its stream\n{text}", r.name);
        assert!(r.perfect_share >= 0.99, "room {} is delivered in real time\n{text}", r.name);
    }
    for c in &report.clients {
        if matches!(c.figures.role, Role::ProbeTalker | Role::ProbeListener) {
            assert_eq!(c.figures.room, 1, "probes in the first largest room\n{text}");
        }
    }
    assert!(s.latency.pairs > 0 && s.latency.missed == 0, "{text}");
}
