//! A server peer retires its webrtc-rs connection once the call is up
//! (`Acceptor::set_retire`): the call must go on as before, carried by
//! tutti-rtc alone, against a client that is still all webrtc-rs for RTCP,
//! DTLS and ICE (`ClientPeer`): media both ways, sender reports both ways
//! (our SRTCP read by webrtc-rs's, webrtc-rs's read by ours), consent, an
//! ICE restart from a new address, and the client's close_notify.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tutti_rtc::{Acceptor, ClientEvent, ClientPeer, CloseReason, Mux, MuxEvent, PeerId};

const SERVER: &str = "10.0.0.1:4000";

/// A client and a mux in memory (no sockets, a virtual clock).
struct Call {
    client: ClientPeer,
    client_addr: SocketAddr,
    mux: Mux,
    id: PeerId,
    now: Instant,
    /// Audio each side received.
    at_client: usize,
    at_server: usize,
    server_closed: Option<CloseReason>,
    client_closed: bool,
    /// Datagrams the server sent elsewhere than where the client is.
    misdirected: usize,
}

impl Call {
    fn new(retire: bool) -> Self {
        let server: SocketAddr = SERVER.parse().expect("addr");
        let client_addr: SocketAddr = "10.0.0.2:5000".parse().expect("addr");
        let now = Instant::now();
        let mut acceptor = Acceptor::new(server, Duration::from_secs(10)).expect("acceptor");
        acceptor.set_retire(retire);
        let mut mux = Mux::with_acceptor(acceptor);
        let (mut client, offer) = ClientPeer::new(client_addr, now).expect("offer");
        let (id, answer) = mux.accept_offer(&offer, now).expect("answer");
        client.accept_answer(&answer, now).expect("answer applies");
        Self {
            client,
            client_addr,
            mux,
            id,
            now,
            at_client: 0,
            at_server: 0,
            server_closed: None,
            client_closed: false,
            misdirected: 0,
        }
    }

    /// One 20 ms step: each side sends a frame (once connected), datagrams
    /// cross, timers run, events are counted.
    fn step(&mut self, talk: bool) {
        self.step_with(talk, talk);
    }

    /// A step where each side talks or not.
    fn step_with(&mut self, client_talks: bool, server_talks: bool) {
        let server: SocketAddr = SERVER.parse().expect("addr");
        if client_talks && self.client.is_connected() {
            let _ = self.client.send_audio(Bytes::from_static(&[0xF8, 1, 2, 3]), Some(30), self.now);
        }
        if server_talks && self.client.is_connected() {
            let _ = self.mux.send_audio(self.id, Bytes::from_static(&[0xF8, 4, 5, 6]), Some(40), &[], self.now);
        }
        self.mux.handle_timeout(self.now);
        self.client.handle_timeout(self.now);
        for _ in 0..4 {
            while let Some(t) = self.client.poll_transmit() {
                self.mux.handle_datagram(self.client_addr, &t.data, self.now);
            }
            while let Some(t) = self.mux.poll_transmit() {
                if t.to != self.client_addr {
                    // Where the client was: lost on a real network.
                    self.misdirected += 1;
                    continue;
                }
                self.client.handle_datagram(server, &t.data, self.now);
            }
        }
        while let Some(e) = self.mux.poll_event() {
            match e {
                MuxEvent::Audio(..) => self.at_server += 1,
                MuxEvent::Closed(_, why) => self.server_closed = Some(why),
                _ => {}
            }
        }
        while let Some(e) = self.client.poll_event() {
            match e {
                ClientEvent::Audio(_) => self.at_client += 1,
                ClientEvent::Closed => self.client_closed = true,
                ClientEvent::Connected => {}
            }
        }
        self.now += Duration::from_millis(20);
    }

    fn run(&mut self, seconds: u64, talk: bool) {
        for _ in 0..seconds * 50 {
            self.step(talk);
        }
    }
}

#[test]
fn a_retired_peer_carries_the_call_media_reports_consent_and_hangup() {
    let mut call = Call::new(true);
    for _ in 0..100 {
        if call.client.is_connected() {
            break;
        }
        call.step(true);
    }
    assert!(call.client.is_connected(), "connected");
    call.step(true);
    assert_eq!(call.mux.stats().retired, 0, "not before RETIRE_AFTER");
    call.run(3, true);
    assert_eq!(call.mux.stats().retired, 1, "retired once the call was up");
    let (client_sr, server_sr) = (call.client.last_sender_report(), call.mux.last_sender_report(call.id));
    let (at_client, at_server) = (call.at_client, call.at_server);

    // 40 s more: well past the idle timeout (10 s) and webrtc-rs's consent
    // timeouts, so only our consent answers keep the client's ICE up.
    call.run(40, true);
    assert_eq!(call.server_closed, None, "the server kept the call");
    assert!(!call.client_closed, "the client kept the call");
    assert!(
        call.at_client >= at_client + 40 * 50 - 5,
        "audio reached the client: {} then {}",
        at_client,
        call.at_client
    );
    assert!(
        call.at_server >= at_server + 40 * 50 - 5,
        "audio reached the server: {} then {}",
        at_server,
        call.at_server
    );
    let client_sr_now = call.client.last_sender_report().expect("the client read our sender reports");
    assert_ne!(Some(client_sr_now), client_sr, "new sender reports reached webrtc-rs after the retirement");
    assert!(client_sr_now.packet_count >= 40 * 50, "{client_sr_now:?}");
    let server_sr_now = call.mux.last_sender_report(call.id).expect("we read the client's sender reports");
    assert_ne!(Some(server_sr_now), server_sr, "our SRTCP read the client's reports after the retirement");
    let block = server_sr_now.reception.expect("the client reports on our stream");
    assert_eq!(block.total_lost, 0, "{block:?}");

    // The client hangs up over DTLS only: its authenticated close_notify ends the call at once.
    call.client.close();
    call.step(false);
    assert_eq!(call.server_closed, Some(CloseReason::Closed));
    assert_eq!(call.misdirected, 0);
}

#[test]
fn a_retired_peer_answers_an_ice_restart_from_a_new_address() {
    let mut call = Call::new(true);
    call.run(4, true);
    assert_eq!(call.mux.stats().retired, 1);
    let moved: SocketAddr = "10.0.0.3:6000".parse().expect("addr");
    let offer = call.client.restart_ice(moved, call.now).expect("restart offer");
    let answer = call.mux.restart(call.id, &offer, call.now).expect("restart answer");
    call.client.accept_restart(&answer, call.now).expect("the answer applies");
    call.client_addr = moved;
    let at_client = call.at_client;
    let at_server = call.at_server;
    call.run(20, true);
    assert_eq!(call.server_closed, None);
    assert!(!call.client_closed);
    assert!(
        call.at_client >= at_client + 19 * 50,
        "audio reached the moved client: {at_client} then {}",
        call.at_client
    );
    assert!(call.at_server >= at_server + 19 * 50, "audio from the moved client: {at_server} then {}", call.at_server);
    // Until the client's first authenticated packet from its new address.
    assert!(call.misdirected <= 2, "{} datagrams went to the old address", call.misdirected);
}

#[test]
fn a_removed_retired_peer_says_goodbye_and_forged_alerts_end_nothing() {
    let mut call = Call::new(true);
    call.run(4, true);
    assert_eq!(call.mux.stats().retired, 1);
    // A forged alert from the client's address (epoch 1, junk ciphertext).
    let mut forged = vec![21, 0xFE, 0xFD, 0, 1, 0, 0, 0, 0, 0, 9, 0, 26];
    forged.extend_from_slice(&[7; 26]);
    call.mux.handle_datagram(call.client_addr, &forged, call.now);
    call.run(1, true);
    assert_eq!(call.server_closed, None, "an alert that does not authenticate ends nothing");
    assert!(!call.client.dtls_transport_closed());
    call.mux.remove(call.id).expect("remove");
    call.step(false);
    assert!(call.client_closed, "the client heard our close_notify");
    assert!(call.client.dtls_transport_closed(), "webrtc-rs's DTLS opened and authenticated our close_notify");
}

/// One side sends no audio for `seconds` while the other talks: the peer
/// retires anyway, and the silent side's first audio, after the retirement,
/// reaches the other.
fn first_audio_after_the_retirement(client_silent: bool, seconds: u64) {
    let mut call = Call::new(true);
    for _ in 0..seconds * 50 {
        call.step_with(!client_silent, client_silent);
    }
    let silent_heard = |c: &Call| if client_silent { c.at_server } else { c.at_client };
    assert_eq!(
        call.mux.stats().retired,
        1,
        "retired with the {} silent",
        if client_silent { "client" } else { "server" }
    );
    assert_eq!(silent_heard(&call), 0);
    call.run(2, true);
    assert!(
        silent_heard(&call) >= 2 * 50 - 2,
        "its first audio, after the retirement, is heard: {}",
        silent_heard(&call)
    );
}

#[test]
fn a_client_that_sends_audio_only_after_the_retirement_is_heard() {
    // A listener at first: only its RTCP (reports on our stream) shows it has the keys.
    first_audio_after_the_retirement(true, 8);
}

#[test]
fn a_peer_the_server_has_sent_nothing_yet_retires_and_then_hears_the_room() {
    // A silent room: the client talks (so it has shown its keys), the server sends nothing.
    first_audio_after_the_retirement(false, 4);
}

#[test]
fn with_retirement_off_the_peer_keeps_webrtc_rs() {
    let mut call = Call::new(false);
    call.run(5, true);
    assert_eq!(call.mux.stats().retired, 0);
    assert!(call.at_server > 3 * 50 && call.at_client > 3 * 50);
}
