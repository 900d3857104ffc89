//! What an ICE check from an address the mux does not know can do, in
//! memory with a virtual clock: forged ones (the server ufrag is in every
//! answer, but not the password) route nothing and keep no peer alive;
//! authentic ones add a route each, at most `MAX_ROUTES` per peer, the
//! selected pair's address never dropped.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rtc::ice::attributes::control::AttrControlling;
use rtc::ice::attributes::priority::PriorityAttr;
use rtc::stun::fingerprint::FINGERPRINT;
use rtc::stun::integrity::MessageIntegrity;
use rtc::stun::message::{BINDING_REQUEST, Message, Setter, TransactionId};
use rtc::stun::textattrs::Username;
use tutti_rtc::{Acceptor, ClientPeer, CloseReason, MAX_ROUTES, Mux, MuxEvent, PeerId, Route};

const SERVER: &str = "10.0.0.1:4000";
const CLIENT: &str = "10.0.0.2:5000";

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("an address")
}

fn attribute<'a>(sdp: &'a str, name: &str) -> &'a str {
    sdp.lines().find_map(|l| l.trim_end().strip_prefix(name)).expect("the attribute")
}

/// A client and a mux connected in memory; the mux's idle timeout is `idle`.
struct Pair {
    mux: Mux,
    client: ClientPeer,
    peer: PeerId,
    now: Instant,
    /// "server ufrag:client ufrag", as the client's checks carry it.
    username: String,
    /// The server's ICE password (from its answer).
    pwd: String,
    closed: Option<CloseReason>,
    audio: usize,
}

impl Pair {
    fn connected(idle: Duration) -> Self {
        let now = Instant::now();
        let mut mux = Mux::with_acceptor(Acceptor::new(addr(SERVER), idle).expect("acceptor"));
        let (client, offer) = ClientPeer::new(addr(CLIENT), now).expect("offer");
        let (peer, answer) = mux.accept_offer(&offer, now).expect("answer");
        let username = format!("{}:{}", attribute(&answer, "a=ice-ufrag:"), attribute(&offer, "a=ice-ufrag:"));
        let pwd = attribute(&answer, "a=ice-pwd:").to_owned();
        let mut pair = Self { mux, client, peer, now, username, pwd, closed: None, audio: 0 };
        pair.client.accept_answer(&answer, now).expect("answer applies");
        for _ in 0..400 {
            pair.step(Duration::from_millis(5), true);
            if pair.client.is_connected() && pair.mux.send_path(peer).is_some() && pair.audio == 0 {
                // Up both ways once the client's first audio reaches the mux.
                pair.client.send_audio(Bytes::from_static(&[0xF8, 0xFF, 0xFE]), Some(30), pair.now).expect("sends");
                pair.step(Duration::from_millis(5), true);
                if pair.audio > 0 {
                    return pair;
                }
            }
        }
        panic!("the in-memory pair did not connect");
    }

    /// Runs `d` of virtual time: timers, and (if `client_alive`) the
    /// client's datagrams to the mux and the mux's to the client.
    fn step(&mut self, d: Duration, client_alive: bool) {
        self.now += d;
        self.mux.handle_timeout(self.now);
        if client_alive {
            self.client.handle_timeout(self.now);
            while let Some(t) = self.client.poll_transmit() {
                self.mux.handle_datagram(addr(CLIENT), &t.data, self.now);
            }
        }
        while let Some(t) = self.mux.poll_transmit() {
            if client_alive {
                self.client.handle_datagram(addr(SERVER), &t.data, self.now);
            }
        }
        while let Some(e) = self.mux.poll_event() {
            match e {
                MuxEvent::Closed(_, why) => self.closed = Some(why),
                MuxEvent::Audio(..) => self.audio += 1,
                MuxEvent::Connected(_) => {}
            }
        }
        while self.client.poll_event().is_some() {}
    }

    /// A check as this pair's client sends it, signed with `pwd`.
    fn check(&self, pwd: &str) -> Vec<u8> {
        check(&self.username, pwd)
    }
}

/// A check as a browser sends it, USERNAME `username`, signed with `pwd`.
fn check(username: &str, pwd: &str) -> Vec<u8> {
    let crypto = rtc::crypto::default_provider().expect("crypto provider");
    let setters: Vec<Box<dyn Setter>> = vec![
        Box::new(BINDING_REQUEST),
        Box::new(TransactionId::new()),
        Box::new(Username::new(rtc::stun::attributes::ATTR_USERNAME, username.to_owned())),
        Box::new(AttrControlling(7)),
        Box::new(PriorityAttr(1_853_817_087)),
        Box::new(MessageIntegrity::new_short_term_integrity_with_provider(pwd.to_owned(), crypto.crypto())),
        Box::new(FINGERPRINT),
    ];
    let mut m = Message::new();
    m.build(&setters).expect("a check");
    m.raw
}

#[test]
fn forged_checks_route_nothing_and_authentic_ones_are_capped() {
    let mut p = Pair::connected(Duration::from_secs(10));
    let base = p.mux.stats();
    assert_eq!(p.mux.routes_of(p.peer), Some(&[(false, addr(CLIENT))][..]));
    // 300 forged checks (the right USERNAME, a wrong password) from 300 addresses.
    let forged = p.check("a-wrong-password-of-good-length");
    for i in 0..300u16 {
        let from = SocketAddr::from(([10, 0, 1, (i % 200) as u8], 6000 + i));
        assert_eq!(p.mux.handle_datagram(from, &forged, p.now), Route::Unrouted, "forged check {i}");
    }
    let stats = p.mux.stats();
    assert_eq!(stats.forged_checks - base.forged_checks, 300);
    assert_eq!((stats.routes, p.mux.routes_of(p.peer).map(<[_]>::len)), (1, Some(1)), "no route learnt");
    // Authentic checks from 6 new addresses: each routes, the table stays at MAX_ROUTES.
    let good = p.check(&p.pwd.clone());
    for i in 0..6u8 {
        let from = SocketAddr::from(([10, 0, 2, i], 7000));
        assert_eq!(p.mux.handle_datagram(from, &good, p.now), Route::Peer(p.peer), "authentic check {i}");
        let routes = p.mux.routes_of(p.peer).expect("routes");
        assert!(routes.len() <= MAX_ROUTES, "{routes:?}");
        assert!(routes.contains(&(false, addr(CLIENT))), "the selected pair's address stays: {routes:?}");
        assert!(routes.contains(&(false, from)), "the newest is routed");
    }
    let stats = p.mux.stats();
    assert_eq!(stats.routes, MAX_ROUTES as u64);
    assert_eq!(stats.routes_evicted, 6 + 1 - MAX_ROUTES as u64);
    // The oldest authentic ones are gone again: a datagram from there is nobody's.
    assert_eq!(p.mux.handle_datagram(SocketAddr::from(([10, 0, 2, 0], 7000)), &[0x80; 40], p.now), Route::Unrouted);
    // And the call goes on.
    let before = p.audio;
    for _ in 0..10 {
        p.client.send_audio(Bytes::from_static(&[0xF8, 0xFF, 0xFE]), Some(30), p.now).expect("sends");
        p.step(Duration::from_millis(20), true);
    }
    assert_eq!(p.audio - before, 10, "every frame after the flood arrives");
    assert!(p.closed.is_none());
}

#[test]
fn only_authenticated_input_keeps_a_peer_alive() {
    let idle = Duration::from_secs(2);
    // The client vanishes; authentic checks from a new address keep it (a
    // client that moved keeps its call while its checks verify).
    let mut p = Pair::connected(idle);
    let good = p.check(&p.pwd.clone());
    for _ in 0..30 {
        p.step(Duration::from_millis(200), false);
        p.mux.handle_datagram(addr("10.0.3.1:9000"), &good, p.now);
    }
    assert_eq!(p.closed, None, "6 s of authentic checks, no timeout");

    // The client vanishes; forged checks from new addresses and from its own,
    // and garbage SRTP from its own, keep nothing alive: it times out.
    let mut p = Pair::connected(idle);
    let forged = p.check("a-wrong-password-of-good-length");
    let vanished = p.now;
    for i in 0..30u16 {
        p.step(Duration::from_millis(200), false);
        p.mux.handle_datagram(SocketAddr::from(([10, 0, 4, 1], 9000 + i)), &forged, p.now);
        p.mux.handle_datagram(addr(CLIENT), &forged, p.now);
        let mut srtp = vec![0x80, 111, 0, i as u8, 0, 0, 0, 1, 0, 0, 0, 7];
        srtp.extend_from_slice(&[0x5A; 40]);
        p.mux.handle_datagram(addr(CLIENT), &srtp, p.now);
        if p.closed.is_some() {
            break;
        }
    }
    assert_eq!(p.closed, Some(CloseReason::TimedOut), "a peer kept alive by forgeries");
    let after = p.now.duration_since(vanished);
    assert!(after <= idle + Duration::from_millis(600), "timed out {after:?} after it vanished");
}

#[test]
fn only_a_verified_check_for_a_peer_held_elsewhere_leaves_the_mux() {
    // Two muxes share one acceptor, as I/O threads do; the peer is accepted
    // and held by neither yet (the server's registry holds it).
    let now = Instant::now();
    let acceptor = Acceptor::new(addr(SERVER), Duration::from_secs(10)).expect("acceptor");
    let mut here = Mux::with_acceptor(acceptor.clone());
    let (_client, offer) = ClientPeer::new(addr(CLIENT), now).expect("offer");
    let (peer, answer) = acceptor.accept(&offer, now).expect("answer");
    let username = format!("{}:{}", peer.ufrag(), attribute(&offer, "a=ice-ufrag:"));
    let pwd = attribute(&answer, "a=ice-pwd:");
    let from = addr("10.0.5.1:5000");
    assert_eq!(here.handle_datagram(from, &check(&username, pwd), now), Route::UnknownUfrag(peer.ufrag().to_owned()));
    let base = here.stats();
    // Forged: the right ufrag, a wrong password; a ufrag of our form nobody has; one of no form of ours.
    let forged = [
        check(&username, "a-wrong-password-of-good-length"),
        check("t7fffffffabcdef:x", pwd),
        check("nobody-here:x", pwd),
        vec![0x80; 40],
    ];
    for (i, m) in forged.iter().enumerate() {
        assert_eq!(here.handle_datagram(from, m, now), Route::Unrouted, "datagram {i}");
    }
    let stats = here.stats();
    assert_eq!(stats.forged_checks - base.forged_checks, 2, "the two checks in our ufrags' form");
    assert_eq!(stats.unrouted - base.unrouted, 4, "all four dropped here");
    assert_eq!(stats.routes, 0);
}
