//! Three mesh sockets on 127.0.0.1, .2 and .3 exchange real Opus frames for
//! 300 ticks: every frame arrives intact at both other nodes; an on-path
//! relay between C and B then tampers, replays and forges (another epoch,
//! another key) and every such datagram is dropped and counted; all three
//! choose the same speakers from the same candidates; finally A
//! goes silent and B marks it absent within ~200 ms while C stays present.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use opus::{Application, Channels, Decoder, Encoder};
use tutti_mesh::{
    ABSENT_AFTER, Candidate, Entry, Liveness, MeshSocket, NodeId, Peer, Received, RoomId, RoomKey, Sealer, Summary,
    select,
};

const SECRET: &[u8] = b"the auth.secret all nodes share!!";
const EPOCH: u64 = 4;
const TICKS: u64 = 300;

struct Talker {
    id: u64,
    enc: Encoder,
    freq: f32,
    phase: f32,
    seq: u16,
}

impl Talker {
    fn new(id: u64, freq: f32) -> Self {
        let mut enc = Encoder::new(48_000, Channels::Mono, Application::Voip).expect("encoder");
        enc.set_complexity(0).expect("complexity");
        Self { id, enc, freq, phase: 0.0, seq: 100 }
    }

    fn frame(&mut self, tick: u64, selected: bool) -> Candidate {
        let pcm: Vec<i16> = (0..960)
            .map(|_| {
                self.phase += self.freq / 48_000.0;
                ((self.phase * std::f32::consts::TAU).sin() * 8000.0) as i16
            })
            .collect();
        self.seq = self.seq.wrapping_add(1);
        Candidate {
            participant: self.id,
            level: 20 + (self.id % 10) as u8,
            rank: (100 - (self.id % 10) as u16) * 256,
            selected,
            seq: self.seq,
            rtp_time: (tick as u32).wrapping_mul(960),
            frame: self.enc.encode_vec(&pcm, 1275).expect("encode"),
        }
    }
}

fn addr(ip: &str) -> SocketAddr {
    format!("{ip}:0").parse().expect("address")
}

fn drain_all(s: &MeshSocket, into: &mut Vec<Received>) {
    s.drain(10_000, into);
}

#[test]
fn three_nodes_exchange_opus_frames_refuse_forgeries_and_detect_silence() {
    let room = RoomId::from_name("all-hands");
    let ids = [NodeId::from_name("a"), NodeId::from_name("b"), NodeId::from_name("c")];
    let [a, b, c] = ids;
    let mut sa = MeshSocket::bind(addr("127.0.0.1"), a, 1_000, SECRET, 4096).expect("bind a");
    let mut sb = MeshSocket::bind(addr("127.0.0.2"), b, 1_000, SECRET, 4096).expect("bind b");
    let mut sc = MeshSocket::bind(addr("127.0.0.3"), c, 1_000, SECRET, 4096).expect("bind c");
    let (aa, ab, ac) = (sa.local_addr().unwrap(), sb.local_addr().unwrap(), sc.local_addr().unwrap());
    // C's datagrams to B pass through a relay the test controls.
    let relay_in = UdpSocket::bind(addr("127.0.0.3")).expect("relay in");
    let relay_out = UdpSocket::bind(addr("127.0.0.3")).expect("relay out");
    relay_in.set_nonblocking(true).unwrap();
    relay_out.set_nonblocking(true).unwrap();
    let (ri, ro) = (relay_in.local_addr().unwrap(), relay_out.local_addr().unwrap());
    sa.set_room(room, EPOCH, &[Peer { node: b, addr: ab }, Peer { node: c, addr: ac }, Peer { node: a, addr: aa }]);
    sb.set_room(room, EPOCH, &[Peer { node: a, addr: aa }, Peer { node: c, addr: ro }]);
    sc.set_room(room, EPOCH, &[Peer { node: a, addr: aa }, Peer { node: b, addr: ri }]);

    // Three talkers per node, participant ids unique in the room.
    let mut talkers: Vec<Vec<Talker>> = (0..3u64)
        .map(|n| (0..3u64).map(|i| Talker::new(n * 10 + i + 1, 300.0 + 100.0 * (n * 3 + i) as f32)).collect())
        .collect();
    let mut sent: HashMap<(NodeId, u64, u64), Vec<u8>> = HashMap::new();
    let mut got: [Vec<Received>; 3] = Default::default();
    let mut captured: Vec<Vec<u8>> = Vec::new();
    let mut buf = [0u8; 2048];
    let mut relay = |captured: &mut Vec<Vec<u8>>| {
        while let Ok((n, _)) = relay_in.recv_from(&mut buf) {
            relay_out.send_to(&buf[..n], ab).expect("relay");
            captured.push(buf[..n].to_vec());
        }
        // And B's datagrams back to C.
        while let Ok((n, _)) = relay_out.recv_from(&mut buf) {
            relay_in.send_to(&buf[..n], ac).expect("relay back");
        }
    };
    let mut sockets = [&mut sa, &mut sb, &mut sc];
    for tick in 1..=TICKS {
        for (n, s) in sockets.iter_mut().enumerate() {
            let cands: Vec<Candidate> = talkers[n].iter_mut().map(|t| t.frame(tick, false)).collect();
            for cd in &cands {
                sent.insert((ids[n], tick, cd.participant), cd.frame.clone());
            }
            let summary = Summary { participants: 40, talking: 3, candidates: 0 };
            assert_eq!(s.send_tick(room, tick, summary, &cands), Ok(1));
        }
        std::thread::sleep(Duration::from_millis(2));
        relay(&mut captured);
        for (n, s) in sockets.iter().enumerate() {
            drain_all(s, &mut got[n]);
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    relay(&mut captured);
    for (n, s) in sockets.iter().enumerate() {
        drain_all(s, &mut got[n]);
    }

    // Every frame arrived intact, once, at both other nodes.
    let mut decoder = Decoder::new(48_000, Channels::Mono).expect("decoder");
    let mut pcm = [0i16; 960];
    for (n, received) in got.iter().enumerate() {
        assert_eq!(received.len() as u64, 2 * TICKS, "node {n}: one datagram per tick from each peer");
        let mut frames = 0;
        for r in received {
            let h = r.message.header;
            assert_ne!(h.sender, ids[n]);
            assert_eq!((h.room, h.epoch, h.parts), (room, EPOCH, 1));
            assert_eq!(r.message.summary, Summary { participants: 40, talking: 3, candidates: 3 });
            for cd in &r.message.candidates {
                assert_eq!(&cd.frame, &sent[&(h.sender, h.tick, cd.participant)], "frame intact");
                frames += 1;
            }
        }
        assert_eq!(frames, 2 * 3 * TICKS);
        // And a received frame is Opus a decoder takes.
        let last = &received.last().unwrap().message.candidates[0].frame;
        assert_eq!(decoder.decode(last, &mut pcm, false).expect("decodes"), 960);
    }
    let clean = sb.stats();
    assert_eq!((clean.received, clean.auth_failed, clean.replayed), (2 * TICKS, 0, 0));

    // The same candidates reach every node: all choose the same speakers.
    let entries = |rs: &[Received], local: NodeId, own: &[Candidate]| -> Vec<Entry> {
        let mut v: Vec<Entry> = own
            .iter()
            .map(|c| Entry { node: local, participant: c.participant, rank: c.rank, incumbent: c.selected })
            .collect();
        for r in rs.iter().filter(|r| r.message.header.tick == TICKS) {
            v.extend(r.message.candidates.iter().map(|c| Entry {
                node: r.message.header.sender,
                participant: c.participant,
                rank: c.rank,
                incumbent: c.selected,
            }));
        }
        v
    };
    let last_own: Vec<Vec<Candidate>> = (0..3).map(|n| own_at_last_tick(&sent, ids[n], &talkers[n])).collect();
    let choices: Vec<_> = (0..3).map(|n| select(4, 6 * 256, &entries(&got[n], ids[n], &last_own[n]))).collect();
    assert_eq!(choices[0].len(), 4);
    assert!(choices.iter().all(|c| *c == choices[0]), "{choices:?}");

    // The on-path relay attacks B.
    let one = captured.last().expect("captured").clone();
    // A header changed to a fresh tick fails the tag; a body changed in a
    // tick already received is refused as a replay before any crypto.
    let mut tampered = one.clone();
    tampered[36..44].copy_from_slice(&(TICKS + 5).to_be_bytes());
    relay_out.send_to(&tampered, ab).unwrap();
    let mut tampered = one.clone();
    let body = tampered.len() - 30;
    tampered[body] ^= 0x40;
    relay_out.send_to(&tampered, ab).unwrap();
    relay_out.send_to(&one, ab).unwrap(); // replay
    relay_out.send_to(&captured[0], ab).unwrap(); // an old tick, far out of the window
    let mut next_epoch = Sealer::new(&RoomKey::derive(SECRET, room, EPOCH + 1), c, 1_000);
    let mut other_key = Sealer::new(&RoomKey::derive(b"not the cluster secret, 32 bytes", room, EPOCH), c, 1_000);
    let mut out = Vec::new();
    next_epoch.seal_tick(TICKS + 1, Summary::default(), &[], &mut out).unwrap();
    relay_out.send_to(&out[0], ab).unwrap();
    other_key.seal_tick(TICKS + 1, Summary::default(), &[], &mut out).unwrap();
    relay_out.send_to(&out[0], ab).unwrap();
    relay_out.send_to(b"\x01\x00garbage", ab).unwrap();
    // A stranger from an address that is no peer's.
    UdpSocket::bind(addr("127.0.0.4")).unwrap().send_to(&one, ab).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let mut late = Vec::new();
    drain_all(&sb, &mut late);
    assert!(late.is_empty(), "nothing forged reached the caller: {late:?}");
    let s = sb.stats();
    assert_eq!(s.received, clean.received);
    assert_eq!(s.auth_failed, 2, "tampered header + wrong key");
    assert_eq!(s.replayed, 3, "tampered body of a seen tick + replayed + too old");
    assert_eq!(s.wrong_epoch, 1);
    assert_eq!(s.malformed, 1);
    assert_eq!(s.unknown, 1);

    // A goes silent; B and C keep ticking in real time; B's liveness sees A absent.
    let mut live = Liveness::new(ABSENT_AFTER, [a, c]);
    for r in &got[1] {
        live.heard(r.message.header.sender, r.at);
    }
    let mut silent_from = Instant::now();
    let mut absent_at = None;
    for tick in TICKS + 1..TICKS + 30 {
        // A ticks in real time too, then stops after 5 ticks.
        if tick <= TICKS + 5 {
            sa.send_tick(room, tick, Summary::default(), &[]).unwrap();
            silent_from = Instant::now();
        }
        sc.send_tick(room, tick, Summary::default(), &[]).unwrap();
        sb.send_tick(room, tick, Summary::default(), &[]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        relay(&mut captured);
        let mut rs = Vec::new();
        drain_all(&sb, &mut rs);
        for r in &rs {
            live.heard(r.message.header.sender, r.at);
        }
        let now = Instant::now();
        // (C's first datagram of this phase is still in the relay at the first turn.)
        assert!(tick == TICKS + 1 || live.present(c, now), "C keeps sending");
        if tick <= TICKS + 5 {
            assert!(live.present(a, now), "A is present while it sends");
        } else if absent_at.is_none() && !live.present(a, now) {
            absent_at = Some(now - silent_from);
        }
    }
    let absent_at = absent_at.expect("A detected absent");
    // 200 ms, seen at the first 20 ms tick after (a busy box oversleeps: allow some).
    assert!(absent_at >= ABSENT_AFTER && absent_at <= Duration::from_millis(400), "{absent_at:?}");
    assert_eq!(live.absent(Instant::now()), vec![a]);
}

/// What node `n` itself sent at the last tick (its local candidates).
fn own_at_last_tick(sent: &HashMap<(NodeId, u64, u64), Vec<u8>>, node: NodeId, talkers: &[Talker]) -> Vec<Candidate> {
    talkers
        .iter()
        .map(|t| Candidate {
            participant: t.id,
            level: 20 + (t.id % 10) as u8,
            rank: (100 - (t.id % 10) as u16) * 256,
            selected: false,
            seq: t.seq,
            rtp_time: (TICKS as u32).wrapping_mul(960),
            frame: sent[&(node, TICKS, t.id)].clone(),
        })
        .collect()
}
