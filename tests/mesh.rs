//! One room across three nodes: three `tutti serve` processes on
//! 127.0.0.2, .3 and .4 and a real `redis-server`, `cluster.room_spread =
//! "always"`, one room spread over all three (a talker and a silent
//! listener on each, real WebRTC, tones at three frequencies). Every
//! listener hears every node's talker, every talker hears the other two
//! and never its own tone; the nodes' selections agree (the mismatch
//! metric stays near 0); a lone talker's Opus frames reach listeners on
//! the other nodes byte for byte (forwarded, never re-encoded); after
//! `kill -9` of one node the other two keep hearing each other, and its
//! talker, rejoining through another node, is heard again within seconds.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::cluster::{Redis, SECRET, join_placed, metric, send, spread_nodes};
use tutti_client::{Requester, ToneClient, request_following, run_for, run_until};
use tutti_mix::{Encoder, EncoderConfig, FRAME_SAMPLES, tone};
use tutti_server::auth::{Auth, Grant, unix_now};

const FREQS: [f32; 3] = [440.0, 660.0, 990.0];

/// Joins `room` through `api` with a WHIP offer, following a redirect;
/// the client and the node (API address) that took it.
fn try_join_at(api: SocketAddr, token: &str, room: &str, freq: f32) -> Result<(ToneClient, SocketAddr), String> {
    let (mut client, offer) = ToneClient::offer(freq).map_err(|e| e.to_string())?;
    let path = format!("/v1/rooms/{room}/participants");
    let (r, at, _) =
        request_following(api, &Requester::token(token), "POST", &path, Some("application/sdp"), offer.as_bytes(), 2)
            .map_err(|e| e.to_string())?;
    if r.status != 201 {
        return Err(format!("{}: {}", r.status, r.body));
    }
    client.location = r.header("location").unwrap_or_default().to_owned();
    let id = client.location.rsplit('/').next().and_then(|s| s.parse().ok()).unwrap_or(0);
    client.accept_answer(&r.body, id).map_err(|e| e.to_string())?;
    Ok((client, at))
}

/// Whether, over the last `window`, each listener hears every tone it
/// should (> 0.05) and none it should not (< 0.02).
fn hearing(clients: &[&mut ToneClient], expect: &[(usize, Vec<f32>, Vec<f32>)], window: Duration) -> bool {
    let since = Instant::now() - window;
    expect.iter().all(|(i, yes, no)| {
        let c = &clients[*i];
        yes.iter().all(|&f| c.hears(f, since) > 0.05) && no.iter().all(|&f| c.hears(f, since) < 0.02)
    })
}

#[test]
fn one_room_spread_over_three_nodes_sounds_as_one() {
    let redis = Redis::start();
    let mut nodes = spread_nodes(&redis);
    let auth = Auth::new(SECRET).expect("secret");
    let admin = auth.mint(&Grant::admin("test"), Duration::from_secs(600), unix_now()).expect("token");
    let apis: Vec<SocketAddr> = nodes.iter().map(|n| n.api).collect();
    let node_of = |addr: SocketAddr| apis.iter().position(|&a| a == addr).expect("a node's address");
    let (r, _) = send(apis[0], &admin, "POST", "/v1/rooms", r#"{"id":"wide","max_speakers":5}"#);
    assert_eq!(r.status, 201, "{}", r.body);

    // A talker placed on each node (a redirect ticket, as a node's 307
    // carries: placement itself is tests/mesh_control.rs's and cluster.rs's).
    let mut talkers = Vec::new();
    for (i, &f) in FREQS.iter().enumerate() {
        let c = join_placed(apis[i], "wide", &format!("talker-{i}"), f)
            .unwrap_or_else(|e| panic!("talker {i} via node {i}: {e:?}"));
        talkers.push((c, i));
    }
    let mut all: Vec<ToneClient> = Vec::new();
    let mut on: Vec<usize> = Vec::new();
    for (c, n) in talkers {
        all.push(c);
        on.push(n);
    }
    {
        let mut refs: Vec<&mut ToneClient> = all.iter_mut().collect();
        run_for(&mut refs, Duration::from_millis(2500));
    }
    for (i, &f) in FREQS.iter().enumerate() {
        let mut c = join_placed(apis[i], "wide", &format!("listener-{i}"), f * 3.0 + 7.0)
            .unwrap_or_else(|e| panic!("listener {i} via node {i}: {e:?}"));
        c.talking = false;
        all.push(c);
        on.push(i);
        let mut refs: Vec<&mut ToneClient> = all.iter_mut().collect();
        run_for(&mut refs, Duration::from_millis(300));
    }
    let talker_nodes: HashSet<usize> = on[..3].iter().copied().collect();
    let listener_nodes: HashSet<usize> = on[3..].iter().copied().collect();
    assert_eq!((talker_nodes.len(), listener_nodes.len()), (3, 3), "one talker and one listener per node: {on:?}");

    // Everyone hears every other node's talker, nobody their own tone.
    let expect: Vec<(usize, Vec<f32>, Vec<f32>)> = (0..6)
        .map(|i| {
            if i < 3 {
                let others = FREQS.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, &f)| f).collect();
                (i, others, vec![FREQS[i]])
            } else {
                (i, FREQS.to_vec(), Vec::new())
            }
        })
        .collect();
    let started = Instant::now();
    let heard = {
        let mut refs: Vec<&mut ToneClient> = all.iter_mut().collect();
        let mut last_check = Instant::now();
        run_until(&mut refs, started + Duration::from_secs(20), |cs| {
            if last_check.elapsed() < Duration::from_millis(500) || started.elapsed() < Duration::from_secs(2) {
                return false;
            }
            last_check = Instant::now();
            hearing(cs, &expect, Duration::from_millis(1500))
        })
    };
    let levels: Vec<Vec<f32>> = {
        let since = Instant::now() - Duration::from_millis(1500);
        all.iter().map(|c| FREQS.iter().map(|&f| c.hears(f, since)).collect()).collect()
    };
    assert!(
        heard,
        "within 20 s: each listener hears the other nodes' talkers, never its own: {levels:?} (nodes {on:?})"
    );
    eprintln!("all hear each other after {:?}: {levels:?}", started.elapsed());

    // What the mesh costs each node, three talkers talking: datagrams and
    // bytes sent per tick (to two peers), over 2 s.
    let before: Vec<(f64, f64, f64, f64)> = nodes
        .iter()
        .map(|n| {
            let ticks = metric(n, "tutti_mix_ticks_total");
            let mismatches = metric(n, "tutti_mesh_selection_mismatches_total");
            (ticks, metric(n, "tutti_mesh_datagrams_sent_total"), metric(n, "tutti_mesh_sent_bytes_total"), mismatches)
        })
        .collect();
    {
        let mut refs: Vec<&mut ToneClient> = all.iter_mut().collect();
        run_for(&mut refs, Duration::from_secs(2));
    }
    for (n, (t0, d0, b0, m0)) in nodes.iter().zip(&before) {
        let ticks = metric(n, "tutti_mix_ticks_total") - t0;
        let datagrams = metric(n, "tutti_mesh_datagrams_sent_total") - d0;
        let bytes = metric(n, "tutti_mesh_sent_bytes_total") - b0;
        let mismatches = metric(n, "tutti_mesh_selection_mismatches_total") - m0;
        eprintln!(
            "{}: mesh sends {:.2} datagrams and {:.0} bytes per tick (2 peers, K = 5, 3 talkers); \
             {mismatches} selection mismatches in {ticks} ticks",
            n.id,
            datagrams / ticks.max(1.0),
            bytes / ticks.max(1.0)
        );
    }

    // The nodes' selections agree, tick by tick (datagrams flow both ways).
    for n in &nodes {
        let (ticks, mismatches) =
            (metric(n, "tutti_mix_ticks_total"), metric(n, "tutti_mesh_selection_mismatches_total"));
        let (sent, received) =
            (metric(n, "tutti_mesh_datagrams_sent_total"), metric(n, "tutti_mesh_datagrams_received_total"));
        let late = metric(n, "tutti_mesh_datagrams_dropped_total{reason=\"late\"}");
        eprintln!(
            "{}: ticks {ticks}, mesh sent {sent} received {received} (late {late}), mismatches {mismatches}",
            n.id
        );
        assert!(sent > 100.0 && received > 100.0, "{}: mesh datagrams sent {sent}, received {received}", n.id);
        // A few while the nodes learn of each other (each at its own
        // refresh), and when a datagram arrives after the tick it was for
        // (a debug build on a busy machine); 0 on a quiet one.
        assert!(mismatches <= ticks * 0.1, "{}: {mismatches} selection mismatches in {ticks} ticks", n.id);
        assert_eq!(metric(n, "tutti_mesh_rooms"), 1.0, "{}", n.id);
    }

    // A lone talker: talkers 1 and 2 fall silent; talker 0's frames reach
    // the other nodes' listeners unchanged (its encoder, replayed here,
    // made exactly these bytes: a mix re-encoded would not match).
    all[1].talking = false;
    all[2].talking = false;
    {
        let mut refs: Vec<&mut ToneClient> = all.iter_mut().collect();
        run_for(&mut refs, Duration::from_millis(1500));
    }
    // The mixers switch from mixing to forwarding in a pause (so that the
    // listeners' decoders change streams in silence): talker 0 pauses 300 ms
    // (within its hold: it stays the one speaker).
    all[0].talking = false;
    let paused_from = all[0].sent;
    {
        let mut refs: Vec<&mut ToneClient> = all.iter_mut().collect();
        run_for(&mut refs, Duration::from_millis(300));
    }
    all[0].talking = true;
    let resumed = Instant::now();
    let paused = paused_from..all[0].sent;
    {
        let mut refs: Vec<&mut ToneClient> = all.iter_mut().collect();
        run_for(&mut refs, Duration::from_millis(500));
    }
    let since = Instant::now();
    {
        let mut refs: Vec<&mut ToneClient> = all.iter_mut().collect();
        run_for(&mut refs, Duration::from_millis(1500));
    }
    let mut encoder = Encoder::new(&EncoderConfig::default()).expect("encoder");
    // As the tone client does: its silence frame first, then its tone frames.
    let _ = encoder.encode(&[0.0; FRAME_SAMPLES]);
    let made: HashSet<Vec<u8>> = (0..all[0].sent)
        .filter(|n| !paused.contains(n))
        .map(|n| encoder.encode(&tone(FREQS[0], 0.2, n * FRAME_SAMPLES as u64)).to_vec())
        .collect();
    let talker0_node = on[0];
    let counts: Vec<(usize, usize, usize)> = all
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, c)| {
            let frames: Vec<&[u8]> =
                c.heard.iter().filter(|(at, _)| *at >= since).map(|(_, p)| p.payload.as_ref()).collect();
            let same = frames.iter().filter(|f| made.contains(**f)).count();
            eprintln!("client {i} on node {}: {same} of {} frames are talker 0's own", on[i], frames.len());
            if same < frames.len() {
                let lens: Vec<usize> = frames.iter().take(12).map(|f| f.len()).collect();
                let heads: Vec<u8> = frames.iter().take(12).map(|f| f.first().copied().unwrap_or(0)).collect();
                eprintln!("  lengths {lens:?}, TOC bytes {heads:?}");
            }
            (i, same, frames.len())
        })
        .collect();
    // How much later a listener on another node hears talker 0 resume than
    // one on its node (first of its tone frames after the pause).
    let first_after = |c: &ToneClient| {
        c.heard.iter().find(|(at, p)| *at >= resumed && made.contains(p.payload.as_ref())).map(|(at, _)| *at - resumed)
    };
    let (mut local, mut remote) = (Vec::new(), Vec::new());
    for (i, c) in all.iter().enumerate().skip(1) {
        if let Some(d) = first_after(c) {
            if on[i] == talker0_node { local.push(d) } else { remote.push(d) }
        }
    }
    eprintln!("talker 0 heard again after its pause: on its node {local:?}, on the other nodes {remote:?}");
    for (i, same, n) in counts {
        let remote = if on[i] == talker0_node { "on talker 0's node" } else { "on another node" };
        assert!(n >= 40, "client {i} ({remote}): {n} frames in 1.5 s");
        assert!(same * 100 >= n * 95, "client {i} ({remote}): {same} of {n} frames forwarded unchanged");
    }

    // kill -9 of the node of talker 2: the other two nodes keep hearing each other.
    all[1].talking = true;
    let dead = on[2];
    nodes[dead].kill9();
    let survivors: Vec<usize> = (0..6).filter(|&i| on[i] != dead).collect();
    let expect: Vec<(usize, Vec<f32>, Vec<f32>)> = survivors
        .iter()
        .map(|&i| match i {
            0 => (i, vec![FREQS[1]], vec![FREQS[0]]),
            1 => (i, vec![FREQS[0]], vec![FREQS[1]]),
            _ => (i, vec![FREQS[0], FREQS[1]], Vec::new()),
        })
        .collect();
    let killed = Instant::now();
    let heard = {
        let mut refs: Vec<&mut ToneClient> = all.iter_mut().collect();
        let mut last_check = Instant::now();
        run_until(&mut refs, killed + Duration::from_secs(15), |cs| {
            if last_check.elapsed() < Duration::from_millis(500) || killed.elapsed() < Duration::from_secs(1) {
                return false;
            }
            last_check = Instant::now();
            hearing(cs, &expect, Duration::from_millis(1000))
        })
    };
    assert!(heard, "the two nodes left keep hearing each other after kill -9 of node {dead}");
    eprintln!("after kill -9: heard again within {:?}", killed.elapsed());

    // The lost talker rejoins through a node left (the room may get a new
    // owner and epoch meanwhile): within seconds it hears the others and
    // they hear it, on both nodes.
    let through = apis[(dead + 1) % 3];
    let (mut back, at) = loop {
        match try_join_at(through, &admin, "wide", FREQS[2]) {
            Ok(joined) => break joined,
            Err(e) if killed.elapsed() < Duration::from_secs(20) => {
                eprintln!("rejoin via {through}: {e}; retrying");
                std::thread::sleep(Duration::from_millis(250));
            }
            Err(e) => panic!("the lost talker could not rejoin: {e}"),
        }
    };
    back.talking = true;
    all[2] = back;
    on[2] = node_of(at);
    assert_ne!(on[2], dead);
    let alive: Vec<usize> = (0..6).filter(|&i| i == 2 || on[i] != dead).collect();
    let expect: Vec<(usize, Vec<f32>, Vec<f32>)> = alive
        .iter()
        .map(|&i| match i {
            0..3 => (i, FREQS.iter().copied().filter(|&f| f != FREQS[i]).collect(), vec![FREQS[i]]),
            _ => (i, FREQS.to_vec(), Vec::new()),
        })
        .collect();
    let rejoined = Instant::now();
    let heard = {
        let mut refs: Vec<&mut ToneClient> = all.iter_mut().collect();
        let mut last_check = Instant::now();
        run_until(&mut refs, rejoined + Duration::from_secs(15), |cs| {
            if last_check.elapsed() < Duration::from_millis(500) || rejoined.elapsed() < Duration::from_secs(1) {
                return false;
            }
            last_check = Instant::now();
            hearing(cs, &expect, Duration::from_millis(1000))
        })
    };
    assert!(heard, "the talker back through node {} hears and is heard on both nodes left", on[2]);
    eprintln!(
        "rejoined through node {} {:?} after kill -9; heard within {:?}",
        on[2],
        rejoined.duration_since(killed),
        rejoined.elapsed()
    );
    for c in &mut all {
        c.close();
    }
}
