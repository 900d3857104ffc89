//! Peers by state, and why connections fail, counted by the `Mux`: calls run
//! in memory on a virtual clock (no sockets), with chosen datagrams dropped.
//! A DTLS handshake that stalls is given up after `CONNECT_TIMEOUT`; a
//! connected peer that goes silent is removed after the idle timeout.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tutti_rtc::{ClientPeer, Mux, MuxEvent, MuxStats, PeerId};

/// DTLS records start with a content type in 20..=63 (RFC 7983).
fn is_dtls(data: &[u8]) -> bool {
    data.first().is_some_and(|b| (20..=63).contains(b))
}

struct Call {
    mux: Mux,
    client: ClientPeer,
    peer: PeerId,
    server: SocketAddr,
    me: SocketAddr,
    now: Instant,
    closed: bool,
}

impl Call {
    fn new() -> Self {
        let server: SocketAddr = "127.0.0.1:4000".parse().expect("addr");
        let me: SocketAddr = "127.0.0.1:50000".parse().expect("addr");
        let now = Instant::now();
        let mut mux = Mux::new(server).expect("mux");
        let (mut client, offer) = ClientPeer::new(me, now).expect("client");
        let (peer, answer) = mux.accept_offer(&offer, now).expect("answer");
        client.accept_answer(&answer, now).expect("answer accepted");
        Self { mux, client, peer, server, me, now, closed: false }
    }

    /// Runs `seconds` of virtual time in 10 ms steps, delivering the
    /// datagrams that `deliver` lets through (`true` = client to server).
    fn run(&mut self, seconds: u64, deliver: impl Fn(bool, &[u8]) -> bool) {
        for _ in 0..seconds * 100 {
            self.now += Duration::from_millis(10);
            while let Some(t) = self.client.poll_transmit() {
                if deliver(true, &t.data) {
                    self.mux.handle_datagram(self.me, &t.data, self.now);
                }
            }
            while let Some(t) = self.mux.poll_transmit() {
                if deliver(false, &t.data) {
                    self.client.handle_datagram(self.server, &t.data, self.now);
                }
            }
            self.mux.handle_timeout(self.now);
            self.client.handle_timeout(self.now);
            while let Some(event) = self.mux.poll_event() {
                if matches!(event, MuxEvent::Closed(id, _) if id == self.peer) {
                    self.closed = true;
                }
            }
        }
    }

    fn stats(&self) -> MuxStats {
        self.mux.stats()
    }

    /// The peer ended and was counted once, as (ice, dtls, timed out); it
    /// is neither connecting nor connected any more.
    fn assert_ended(&self, ice: u64, dtls: u64, timed_out: u64) {
        let s = self.stats();
        assert!(self.closed, "the peer ended: {s:?}");
        assert_eq!(
            (s.ice_failures, s.dtls_failures, s.timed_out, s.connecting, s.connected),
            (ice, dtls, timed_out, 0, 0),
            "{s:?}"
        );
    }
}

#[test]
fn a_connected_peer_counts_as_connected_until_removed() {
    let mut call = Call::new();
    assert_eq!((call.stats().connecting, call.stats().connected), (1, 0));
    call.run(2, |_, _| true);
    assert!(call.client.is_connected());
    assert_eq!((call.stats().connecting, call.stats().connected), (0, 1));
    call.mux.remove(call.peer).expect("known peer");
    let s = call.stats();
    assert_eq!((s.connecting, s.connected, s.ice_failures, s.dtls_failures, s.timed_out), (0, 0, 0, 0, 0), "{s:?}");
}

#[test]
fn a_peer_that_never_completes_ice_is_an_ice_failure() {
    let mut call = Call::new();
    // The client's checks never arrive.
    call.run(60, |to_server, _| !to_server);
    call.assert_ended(1, 0, 0);
}

#[test]
fn a_peer_whose_dtls_never_completes_is_a_dtls_failure() {
    let mut call = Call::new();
    // ICE and everything else pass; no DTLS record does.
    call.run(60, |_, data| !is_dtls(data));
    call.assert_ended(0, 1, 0);
}

#[test]
fn a_connected_peer_that_vanishes_times_out() {
    let mut call = Call::new();
    call.run(2, |_, _| true);
    assert_eq!(call.stats().connected, 1);
    // The client goes away without a goodbye.
    call.run(60, |to_server, _| !to_server);
    call.assert_ended(0, 0, 1);
}
