//! The mesh socket's bounds and runtime changes: a caller that does not
//! drain loses new messages (counted), never blocks the receive thread; the
//! peer set is replaced at runtime; a room left and joined again at the
//! same epoch seals under a new session, which peers accept.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tutti_mesh::{Candidate, MeshSocket, NodeId, Peer, Received, RoomId, Summary};

const SECRET: &[u8] = b"the auth.secret all nodes share!!";

fn bind(ip: &str, node: NodeId, queue: usize) -> MeshSocket {
    MeshSocket::bind(format!("{ip}:0").parse().unwrap(), node, MeshSocket::session_now(), SECRET, queue).unwrap()
}

fn settle(s: &MeshSocket) -> Vec<Received> {
    std::thread::sleep(Duration::from_millis(100));
    let mut v = Vec::new();
    s.drain(usize::MAX, &mut v);
    v
}

fn frame(p: u64) -> Candidate {
    Candidate {
        participant: p,
        level: 10,
        rank: 117 * 256,
        selected: false,
        seq: 1,
        rtp_time: 0,
        frame: vec![0xf8; 60],
    }
}

#[test]
fn an_undrained_queue_overflows_counted() {
    let (a, b) = (NodeId::from_name("a"), NodeId::from_name("b"));
    let mut sa = bind("127.0.0.1", a, 8);
    let mut sb = bind("127.0.0.2", b, 4);
    let room = RoomId::from_name("r");
    sa.set_room(room, 1, &[Peer { node: b, addr: sb.local_addr().unwrap() }]);
    sb.set_room(room, 1, &[Peer { node: a, addr: sa.local_addr().unwrap() }]);
    for tick in 0..20 {
        sa.send_tick(room, tick, Summary::default(), &[frame(1)]).unwrap();
    }
    let got = settle(&sb);
    assert_eq!(got.len(), 4, "the queue holds 4");
    let s = sb.stats();
    assert_eq!((s.received, s.queue_overflow), (4, 16));
    assert_eq!(sa.stats().sent, 20);
}

#[test]
fn peers_change_at_runtime_and_a_rejoin_seals_under_a_new_session() {
    let (a, b, c) = (NodeId::from_name("a"), NodeId::from_name("b"), NodeId::from_name("c"));
    let mut sa = bind("127.0.0.1", a, 64);
    let mut sb = bind("127.0.0.2", b, 64);
    let mut sc = bind("127.0.0.3", c, 64);
    let (aa, ab, ac) = (sa.local_addr().unwrap(), sb.local_addr().unwrap(), sc.local_addr().unwrap());
    let room = RoomId::from_name("r");
    sa.set_room(room, 1, &[Peer { node: b, addr: ab }]);
    sb.set_room(room, 1, &[Peer { node: a, addr: aa }]);
    sc.set_room(room, 1, &[Peer { node: b, addr: ab }]);
    sa.send_tick(room, 1, Summary::default(), &[frame(1)]).unwrap();
    sc.send_tick(room, 1, Summary::default(), &[frame(2)]).unwrap();
    let got = settle(&sb);
    assert_eq!(got.len(), 1, "C is not yet B's peer");
    assert_eq!(got[0].message.header.sender, a);
    assert_eq!(sb.stats().unknown, 1);

    // C joins the room on B; A leaves it.
    sb.set_room(room, 1, &[Peer { node: c, addr: ac }]);
    sa.send_tick(room, 2, Summary::default(), &[frame(1)]).unwrap();
    sc.send_tick(room, 2, Summary::default(), &[frame(2)]).unwrap();
    let got = settle(&sb);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].message.header.sender, c);
    assert_eq!(sb.stats().unknown, 2);

    // C leaves and joins again at the same epoch, its tick counter restarted:
    // a new session, a new key, accepted (the old session's ticks would be replays).
    let first = got[0].message.header.session;
    sc.remove_room(room);
    assert_eq!(sc.send_tick(room, 3, Summary::default(), &[]), Ok(0), "no room, nothing sent");
    sc.set_room(room, 1, &[Peer { node: b, addr: ab }]);
    sc.send_tick(room, 1, Summary::default(), &[frame(2)]).unwrap();
    let got = settle(&sb);
    assert_eq!(got.len(), 1);
    assert!(got[0].message.header.session > first);
    assert_eq!(got[0].message.header.tick, 1);

    // A new epoch on B: C's datagrams of the old epoch are refused until C moves too.
    sb.set_room(room, 2, &[Peer { node: c, addr: ac }]);
    sc.send_tick(room, 2, Summary::default(), &[]).unwrap();
    assert!(settle(&sb).is_empty());
    assert_eq!(sb.stats().wrong_epoch, 1);
    sc.set_room(room, 2, &[Peer { node: b, addr: ab }]);
    sc.send_tick(room, 1, Summary::default(), &[]).unwrap();
    assert_eq!(settle(&sb).len(), 1);
}
