//! The lean send path (tutti's own RTP and SRTP) against webrtc-rs's receive
//! side: calls between a real `ClientPeer` and a real `Mux`, in memory on a
//! virtual clock, for each SRTP profile; across a sequence-number wrap (the
//! rollover counter turns); sender reports that count what arrived; mixer
//! ticks as timestamps with the marker after a gap; and the fallback path.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tutti_rtc::{
    AudioPacket, ClientEvent, ClientPeer, Contributor, Mux, MuxEvent, PeerId, RtcError, SendPath, SrtpProfile,
};

struct Call {
    mux: Mux,
    client: ClientPeer,
    peer: PeerId,
    server: SocketAddr,
    me: SocketAddr,
    now: Instant,
    at_server: Vec<AudioPacket>,
    at_client: Vec<AudioPacket>,
    up: (bool, bool),
}

impl Call {
    /// A call whose server offers only `profiles`, each side on the lean
    /// path or not.
    fn new(profiles: &[SrtpProfile], server_lean: bool, client_lean: bool) -> Self {
        Self::with_receive(profiles, server_lean, client_lean, true)
    }

    /// As [`Call::new`], with the server's lean receive path on or off.
    fn with_receive(profiles: &[SrtpProfile], server_lean: bool, client_lean: bool, server_lean_receive: bool) -> Self {
        let server: SocketAddr = "127.0.0.1:4000".parse().expect("addr");
        let me: SocketAddr = "127.0.0.1:50000".parse().expect("addr");
        let now = Instant::now();
        let mut acceptor = tutti_rtc::Acceptor::new(server, Duration::from_secs(10)).expect("acceptor");
        acceptor.set_srtp_profiles(profiles);
        acceptor.set_lean_send(server_lean);
        acceptor.set_lean_receive(server_lean_receive);
        let mut mux = Mux::with_acceptor(acceptor);
        let (mut client, offer) = ClientPeer::new(me, now).expect("client");
        assert!(client.set_lean_send(client_lean));
        let (peer, answer) = mux.accept_offer(&offer, now).expect("answer");
        client.accept_answer(&answer, now).expect("answer accepted");
        Self { mux, client, peer, server, me, now, at_server: Vec::new(), at_client: Vec::new(), up: (false, false) }
    }

    /// Delivers everything queued both ways (loss-free, in order), and
    /// hands each sent buffer back, as the server's I/O thread and the load
    /// generator do.
    fn exchange(&mut self) {
        for _ in 0..10 {
            let mut moved = false;
            while let Some(t) = self.client.poll_transmit() {
                assert_eq!(t.to, self.server);
                self.mux.handle_datagram(self.me, &t.data, self.now);
                self.client.recycle(t.data);
                moved = true;
            }
            while let Some(t) = self.mux.poll_transmit() {
                assert_eq!(t.to, self.me);
                self.client.handle_datagram(self.server, &t.data, self.now);
                self.mux.recycle(t.data);
                moved = true;
            }
            while let Some(event) = self.mux.poll_event() {
                match event {
                    MuxEvent::Connected(_) => self.up.0 = true,
                    MuxEvent::Audio(_, p) => self.at_server.push(p),
                    MuxEvent::Closed(id, why) => panic!("peer {id} closed: {why:?}"),
                }
            }
            while let Some(event) = self.client.poll_event() {
                match event {
                    ClientEvent::Connected => self.up.1 = true,
                    ClientEvent::Audio(p) => self.at_client.push(p),
                    ClientEvent::Closed => panic!("client closed"),
                }
            }
            if !moved {
                break;
            }
        }
    }

    /// Runs `ms` of virtual time in 10 ms steps (timers, delivery).
    fn run(&mut self, ms: u64) {
        for _ in 0..ms / 10 {
            self.now += Duration::from_millis(10);
            self.mux.handle_timeout(self.now);
            self.client.handle_timeout(self.now);
            self.exchange();
        }
    }

    fn connect(&mut self) {
        for _ in 0..300 {
            if self.up == (true, true) {
                return;
            }
            self.run(10);
        }
        panic!("not connected: {:?}", self.up);
    }

    /// One frame each way; payload `n` bytes long, recognisable by `i`.
    fn frame(&mut self, i: usize, len: usize) {
        let payload = Bytes::from((0..len).map(|j| (i + j) as u8).collect::<Vec<u8>>());
        self.client.send_audio(payload.clone(), Some((i % 100) as u8), self.now).expect("client sends");
        let mixed = [Contributor { ssrc: 0xA11CE, level: 30 }, Contributor { ssrc: 0xB0B, level: (i % 128) as u8 }];
        self.mux.send_audio(self.peer, payload, Some(20), &mixed, self.now).expect("server sends");
        self.exchange();
    }
}

fn payload_of(p: &AudioPacket) -> &[u8] {
    &p.payload
}

#[test]
fn lean_audio_is_decrypted_by_webrtc_rs_for_every_profile() {
    for profile in [SrtpProfile::AeadAes128Gcm, SrtpProfile::AeadAes256Gcm, SrtpProfile::Aes128CmHmacSha1_80] {
        let mut call = Call::new(&[profile], true, true);
        // Not connected: nothing is sent, and no path is taken.
        assert!(matches!(
            call.mux.send_audio(call.peer, Bytes::from_static(&[1]), None, &[], call.now),
            Err(RtcError::NotConnected)
        ));
        assert!(matches!(
            call.client.send_audio(Bytes::from_static(&[1]), None, call.now),
            Err(RtcError::NotConnected)
        ));
        assert_eq!(call.mux.send_path(call.peer), Some(SendPath::Undecided { lean: true }));
        assert_eq!(call.client.send_path(), SendPath::Undecided { lean: true });
        call.connect();
        for i in 0..50 {
            call.frame(i, 60 + i);
        }
        assert_eq!(call.mux.send_path(call.peer), Some(SendPath::Lean(profile)), "{profile:?}");
        assert_eq!(call.client.send_path(), SendPath::Lean(profile));
        assert!(!call.client.set_lean_send(false), "a stream never changes path");
        assert_eq!((call.at_server.len(), call.at_client.len()), (50, 50), "{profile:?}: all decrypted");
        assert_eq!(call.mux.stats().lean_out, 50);
        for (i, (s, c)) in call.at_server.iter().zip(&call.at_client).enumerate() {
            let expected: Vec<u8> = (0..60 + i).map(|j| (i + j) as u8).collect();
            assert_eq!(payload_of(s), &expected[..]);
            assert_eq!(payload_of(c), &expected[..]);
            assert_eq!(s.level, Some((i % 100) as u8), "RFC 6464 level from the client");
            assert_eq!(c.level, Some(20), "RFC 6464 level from the server");
            assert_eq!(
                c.contributors,
                [Contributor { ssrc: 0xA11CE, level: 30 }, Contributor { ssrc: 0xB0B, level: (i % 128) as u8 }],
                "CSRCs and RFC 6465 levels"
            );
            assert!(s.contributors.is_empty());
            assert_eq!(s.marker, i == 0, "marker on the first packet only");
            assert_eq!(c.marker, i == 0);
        }
        for w in call.at_client.windows(2) {
            assert_eq!(w[1].seq, w[0].seq.wrapping_add(1));
            assert_eq!(w[1].timestamp, w[0].timestamp.wrapping_add(960));
        }
    }
}

#[test]
fn lean_packets_are_built_in_the_buffers_handed_back() {
    let mut call = Call::new(&[SrtpProfile::AeadAes128Gcm], true, true);
    call.connect();
    call.frame(0, 60);
    let mut last = None;
    for i in 1..20 {
        let payload = Bytes::from(vec![i as u8; 40 + 7 * i]);
        call.mux.send_audio(call.peer, payload.clone(), Some(20), &[], call.now).expect("server sends");
        call.client.send_audio(payload, Some(20), call.now).expect("client sends");
        let (s, c) = (call.mux.poll_transmit().expect("server's"), call.client.poll_transmit().expect("client's"));
        assert!(call.mux.poll_transmit().is_none() && call.client.poll_transmit().is_none());
        let at = (s.data.as_ptr(), c.data.as_ptr());
        if let Some(before) = last {
            // The buffer handed back was alive in the sender's spares until
            // this packet: at its address, the packet was built in it.
            assert_eq!(at, before, "packet {i}");
        }
        call.mux.handle_datagram(call.me, &c.data, call.now);
        call.client.handle_datagram(call.server, &s.data, call.now);
        let spares = (call.mux.spare_buffers(), call.client.spare_buffers());
        call.mux.recycle(s.data);
        call.client.recycle(c.data);
        assert_eq!((call.mux.spare_buffers(), call.client.spare_buffers()), (spares.0 + 1, spares.1 + 1), "kept");
        last = Some(at);
    }
    call.exchange();
    assert_eq!((call.at_server.len(), call.at_client.len()), (20, 20), "every packet decrypted");
    for (i, (s, c)) in call.at_server.iter().zip(&call.at_client).enumerate().skip(1) {
        assert_eq!((payload_of(s), payload_of(c)), (&vec![i as u8; 40 + 7 * i][..], &vec![i as u8; 40 + 7 * i][..]));
    }
}

#[test]
fn the_receiver_keeps_decrypting_across_a_sequence_number_wrap() {
    for profile in [SrtpProfile::AeadAes128Gcm, SrtpProfile::Aes128CmHmacSha1_80] {
        let mut call = Call::new(&[profile], true, true);
        call.connect();
        assert!(call.mux.set_next_sequence(call.peer, 65_530));
        assert!(call.client.set_next_sequence(65_533));
        for i in 0..40 {
            call.frame(i, 80);
        }
        assert!(!call.client.set_next_sequence(1), "not once sending");
        assert_eq!((call.at_server.len(), call.at_client.len()), (40, 40), "{profile:?}: decrypted past the wrap");
        assert_eq!(call.at_client[0].seq, 65_530);
        assert_eq!(call.at_client[6].seq, 0, "wrapped: ROC 1");
        assert_eq!(call.at_server[3].seq, 0);
        for (i, p) in call.at_client.iter().enumerate() {
            assert_eq!(payload_of(p)[0], i as u8, "packet {i} is intact");
        }
    }
}

#[test]
fn sender_reports_count_what_the_receiver_got() {
    for (server_lean, client_lean) in [(false, false), (true, true)] {
        let mut call = Call::new(&[SrtpProfile::AeadAes128Gcm], server_lean, client_lean);
        call.connect();
        for i in 0..120 {
            call.frame(i, 20 + i % 90);
            call.run(20);
        }
        // Quiet for over a report interval: the last report has the totals.
        call.run(5_500);
        let at_client = call.client.last_sender_report().expect("the server reports");
        let at_server = call.mux.last_sender_report(call.peer).expect("the client reports");
        let octets = |v: &[AudioPacket]| v.iter().map(|p| p.payload.len() as u32).sum::<u32>();
        assert_eq!(call.at_client.len(), 120);
        assert_eq!(
            (at_client.packet_count, at_client.octet_count),
            (call.at_client.len() as u32, octets(&call.at_client)),
            "server SR (lean {server_lean})"
        );
        assert_eq!(
            (at_server.packet_count, at_server.octet_count),
            (call.at_server.len() as u32, octets(&call.at_server)),
            "client SR (lean {client_lean})"
        );
        assert_eq!(at_client.ssrc, call.at_client[0].ssrc);
        // The report's RTP time runs on from the last packet at 48 kHz.
        let last = call.at_client.last().map(|p| p.timestamp).unwrap_or_default();
        let ahead = at_client.rtp_time.wrapping_sub(last);
        assert!((48_000..48_000 * 4).contains(&ahead), "RTP time {ahead} ticks after the last packet");
        let path = call.mux.send_path(call.peer);
        assert_eq!(matches!(path, Some(SendPath::Lean(_))), server_lean, "{path:?}");
        assert_eq!(call.client.send_path() == SendPath::Rtc, !client_lean);
    }
}

#[test]
fn the_servers_reception_report_counts_what_it_read_on_the_lean_path() {
    const LOST: [usize; 3] = [10, 11, 70];
    for lean_receive in [true, false] {
        let mut call = Call::with_receive(&[SrtpProfile::AeadAes128Gcm], true, true, lean_receive);
        call.connect();
        for i in 0..100 {
            let payload = Bytes::from(vec![i as u8; 40]);
            call.client.send_audio(payload.clone(), Some(30), call.now).expect("client sends");
            if LOST.contains(&i) {
                // Lost on the way: the server never sees it.
                while call.client.poll_transmit().is_some() {}
            }
            call.mux.send_audio(call.peer, payload, Some(20), &[], call.now).expect("server sends");
            call.exchange();
            call.run(20);
        }
        call.run(5_500);
        assert_eq!(call.at_server.len(), 100 - LOST.len());
        assert_eq!(call.mux.stats().lean_in, if lean_receive { 97 } else { 0 });
        let report = call.client.last_sender_report().expect("the server reports");
        if lean_receive {
            // The server's own reception statistics ride on its sender report.
            let block = report.reception.expect("a reception report block");
            let last = call.at_server.last().expect("audio").seq;
            assert_eq!(block.ssrc, call.at_server[0].ssrc);
            assert_eq!(block.total_lost, LOST.len() as u32);
            assert_eq!(block.highest_sequence & 0xFFFF, u32::from(last));
            // Reports go out 1 s after the first packet, then every 5 s: the
            // last interval holds the second half of the call, one packet lost
            // of about 50 (1/50 in 1/256: 5).
            assert!((4..=6).contains(&block.fraction_lost), "{block:?}");
        } else {
            // webrtc-rs reports in receiver reports of its own, not in ours.
            assert_eq!(report.reception, None);
        }
        // The client reports what it got of the server's stream the same way.
        let at_server = call.mux.last_sender_report(call.peer).expect("the client reports");
        let block = at_server.reception.expect("the client's reception block");
        let last = call.at_client.last().expect("audio").seq;
        assert_eq!((block.total_lost, block.highest_sequence & 0xFFFF), (0, u32::from(last)));
        assert_eq!(call.at_client.len(), 100);
    }
}

#[test]
fn garbage_and_replays_from_a_peer_are_dropped_and_counted_by_the_server() {
    let mut call = Call::new(&[SrtpProfile::AeadAes128Gcm], true, true);
    call.connect();
    call.frame(0, 40);
    // A real packet, kept to be replayed.
    call.client.send_audio(Bytes::from_static(&[9; 40]), Some(30), call.now).expect("client sends");
    let real = call.client.poll_transmit().expect("a datagram").data;
    call.mux.handle_datagram(call.me, &real, call.now);
    let before = (call.mux.stats().lean_in, call.at_server.len());
    // From the peer's own address: RTP-looking garbage, a tampered copy, the replay.
    let mut tampered = real.clone();
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    call.mux.handle_datagram(call.me, &tampered, call.now);
    call.mux.handle_datagram(call.me, &real, call.now);
    for i in 0..50u8 {
        let junk: Vec<u8> = [0x80, 111].into_iter().chain((0..30).map(|j| i.wrapping_mul(31) ^ j)).collect();
        call.mux.handle_datagram(call.me, &junk, call.now);
    }
    call.exchange();
    assert_eq!(call.mux.stats().lean_dropped, 52, "tampered, replayed and 50 garbage packets");
    assert_eq!(call.at_server.len(), before.1 + 1, "only the real packet became audio");
    // The stream goes on, on the lean path.
    call.frame(2, 40);
    assert_eq!(call.mux.stats().lean_in, before.0 + 1);
    assert_eq!(call.at_server.len(), before.1 + 2);
}

#[test]
fn server_timestamps_follow_the_mixer_tick_with_a_marker_after_gaps() {
    for lean in [true, false] {
        let mut call = Call::new(&[SrtpProfile::AeadAes128Gcm], lean, true);
        call.connect();
        let p = Bytes::from_static(&[0xF8, 1, 2]);
        for tick in [1_000u64, 1_001, 1_002, 1_007, 1_008, 1_020] {
            call.mux.send_audio_at(call.peer, tick, &p, Some(5), &[], call.now).expect("sends");
            call.exchange();
        }
        // send_audio goes on from the last tick.
        call.mux.send_audio(call.peer, p.clone(), Some(5), &[], call.now).expect("sends");
        call.exchange();
        let got = &call.at_client;
        assert_eq!(got.len(), 7);
        let t0 = got[0].timestamp;
        let ticks: Vec<u32> = got.iter().map(|p| p.timestamp.wrapping_sub(t0) / 960).collect();
        assert_eq!(ticks, [0, 1, 2, 7, 8, 20, 21], "lean {lean}");
        let markers: Vec<bool> = got.iter().map(|p| p.marker).collect();
        assert_eq!(markers, [true, false, false, true, false, true, false]);
        for w in got.windows(2) {
            assert_eq!(w[1].seq, w[0].seq.wrapping_add(1), "one sequence number per packet sent");
        }
    }
}

#[test]
fn lean_and_pipeline_peers_talk_to_each_other() {
    for (server_lean, client_lean) in [(true, false), (false, true)] {
        let mut call = Call::new(&[SrtpProfile::Aes128CmHmacSha1_80], server_lean, client_lean);
        call.connect();
        for i in 0..30 {
            call.frame(i, 70);
        }
        assert_eq!((call.at_server.len(), call.at_client.len()), (30, 30));
        assert_eq!(call.mux.stats().lean_out, if server_lean { 30 } else { 0 });
        assert_eq!(
            call.client.send_path(),
            if client_lean { SendPath::Lean(SrtpProfile::Aes128CmHmacSha1_80) } else { SendPath::Rtc }
        );
    }
}

#[test]
fn a_closed_peer_sends_nothing() {
    let mut call = Call::new(&[SrtpProfile::AeadAes128Gcm], true, true);
    call.connect();
    call.frame(0, 50);
    call.client.close();
    while call.client.poll_transmit().is_some() {}
    assert!(matches!(call.client.send_audio(Bytes::from_static(&[1]), None, call.now), Err(RtcError::NotConnected)));
    assert!(call.client.poll_transmit().is_none(), "nothing queued after close");
    call.mux.remove(call.peer).expect("known");
    assert!(matches!(
        call.mux.send_audio(call.peer, Bytes::from_static(&[1]), None, &[], call.now),
        Err(RtcError::UnknownPeer(_))
    ));
}
