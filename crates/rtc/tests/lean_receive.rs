//! The client's lean receive path (tutti's own SRTP receive, issue 16)
//! against a real `Mux` server: over UDP loopback, a client on the lean
//! path and one on webrtc-rs's path get the same audio; in memory, the
//! very same datagrams read both ways give equal packets across a
//! sequence-number wrap, replays and tampered packets are dropped and
//! counted (and reach neither path), and a lean receiver that authenticates
//! nothing hands over to webrtc-rs.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tutti_rtc::{
    AudioPacket, ClientEvent, ClientPeer, Contributor, Mux, MuxEvent, PeerId, ReceivePath, ReceiveStats, SrtpProfile,
    is_rtp,
};

fn socket() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind loopback");
    s.set_nonblocking(true).expect("nonblocking");
    s
}

/// Frame `i` as the server sends it: payload, level, contributors (0 to 3).
fn frame(i: usize) -> (Bytes, Option<u8>, Vec<Contributor>) {
    let payload = Bytes::from((0..40 + i % 50).map(|j| (i * 7 + j) as u8).collect::<Vec<u8>>());
    let level = if i % 5 == 4 { None } else { Some((i % 128) as u8) };
    let contributors = (0..i % 4).map(|k| Contributor { ssrc: 0xC0_0000 + k as u32, level: ((i + k) % 128) as u8 });
    (payload, level, contributors.collect())
}

/// The packets with their numbering relative to the stream's first and no
/// SSRC (each peer's stream has its own SSRC, random first sequence number
/// and timestamp): what they carry.
fn relative(packets: &[AudioPacket]) -> Vec<AudioPacket> {
    let (s0, t0) = (packets[0].seq, packets[0].timestamp);
    packets
        .iter()
        .map(|p| AudioPacket {
            ssrc: 0,
            seq: p.seq.wrapping_sub(s0),
            timestamp: p.timestamp.wrapping_sub(t0),
            ..p.clone()
        })
        .collect()
}

#[test]
fn lean_and_rtc_receivers_get_the_same_audio_over_loopback() {
    const FRAMES: usize = 60;
    let server_sock = socket();
    let server_addr = server_sock.local_addr().expect("addr");
    let start = Instant::now();
    let mut mux = Mux::new(server_addr).expect("mux");
    // Client 0 reads on the lean path (the default), client 1 on webrtc-rs's.
    let mut clients = Vec::new();
    for lean in [true, false] {
        let sock = socket();
        let (mut client, offer) = ClientPeer::new(sock.local_addr().expect("addr"), start).expect("client");
        if !lean {
            client.set_lean_receive(false);
        }
        assert_eq!(client.receive_path(), ReceivePath::Undecided { lean });
        let (peer, answer) = mux.accept_offer(&offer, start).expect("answer");
        client.accept_answer(&answer, start).expect("answer accepted");
        clients.push((client, sock, peer, false, false, Vec::<AudioPacket>::new()));
    }
    let mut buf = vec![0u8; 2048];
    let mut sent = 0;
    let limit = start + Duration::from_secs(15);
    loop {
        let now = Instant::now();
        assert!(now < limit, "timed out: {sent} frames sent");
        common::pump_server(&mut mux, &server_sock, &mut buf, now);
        while let Some(event) = mux.poll_event() {
            match event {
                MuxEvent::Connected(id) => {
                    clients.iter_mut().filter(|c| c.2 == id).for_each(|c| c.4 = true);
                }
                MuxEvent::Closed(id, why) => panic!("peer {id} closed: {why:?}"),
                MuxEvent::Audio(..) => {}
            }
        }
        for (client, sock, _, up, _, got) in &mut clients {
            client.pump_udp(sock, &mut buf, now).expect("client socket");
            while let Some(event) = client.poll_event() {
                match event {
                    ClientEvent::Connected => *up = true,
                    ClientEvent::Audio(p) => got.push(p),
                    ClientEvent::Closed => panic!("client closed"),
                }
            }
        }
        let all_up = clients.iter().all(|c| c.3 && c.4);
        if all_up && sent < FRAMES {
            // The same frame to both, a few milliseconds apart (loopback, no loss).
            let (payload, level, contributors) = frame(sent);
            for c in &clients {
                mux.send_audio(c.2, payload.clone(), level, &contributors, now).expect("server sends");
            }
            sent += 1;
        }
        let done = sent == FRAMES
            && clients
                .iter()
                .all(|c| c.5.len() == FRAMES && c.0.last_sender_report().is_some_and(|sr| sr.packet_count > 0));
        if done {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let (lean, rtc) = (&clients[0], &clients[1]);
    assert_eq!(relative(&lean.5), relative(&rtc.5), "the same packets both ways");
    for (i, p) in lean.5.iter().enumerate() {
        let (payload, level, contributors) = frame(i);
        assert_eq!((&p.payload, p.level, &p.contributors), (&payload, level, &contributors), "frame {i}");
    }
    assert!(matches!(lean.0.receive_path(), ReceivePath::Lean(_)), "{:?}", lean.0.receive_path());
    assert_eq!(lean.0.receive_stats(), ReceiveStats { lean: FRAMES as u64, dropped: 0 }, "all on the lean path");
    assert_eq!(rtc.0.receive_path(), ReceivePath::Rtc);
    assert_eq!(rtc.0.receive_stats(), ReceiveStats::default());
    // RTCP stays webrtc-rs's: the server's sender reports reach both.
    for c in &clients {
        let sr = c.0.last_sender_report().expect("a sender report");
        assert_eq!(sr.ssrc, c.5[0].ssrc);
    }
}

/// A call in memory on a virtual clock, every server datagram to the client
/// through `deliver`.
struct Call {
    mux: Mux,
    client: ClientPeer,
    peer: PeerId,
    server: SocketAddr,
    me: SocketAddr,
    now: Instant,
    up: (bool, bool),
    /// The server's SDP answer (its ICE credentials).
    answer: String,
    /// The client sends a frame every 20 ms of virtual time.
    talking: bool,
}

impl Call {
    fn new(profile: SrtpProfile) -> Self {
        let server: SocketAddr = "127.0.0.1:4000".parse().expect("addr");
        let me: SocketAddr = "127.0.0.1:50000".parse().expect("addr");
        let now = Instant::now();
        let mut acceptor = tutti_rtc::Acceptor::new(server, Duration::from_secs(10)).expect("acceptor");
        acceptor.set_srtp_profiles(&[profile]);
        // The lean paths beside webrtc-rs's connection, as they are until a
        // peer is retired (`retire.rs` covers the retired peer).
        acceptor.set_retire(false);
        let mut mux = Mux::with_acceptor(acceptor);
        let (mut client, offer) = ClientPeer::new(me, now).expect("client");
        let (peer, answer) = mux.accept_offer(&offer, now).expect("answer");
        client.accept_answer(&answer, now).expect("answer accepted");
        Self { mux, client, peer, server, me, now, up: (false, false), answer, talking: false }
    }

    /// The server's datagrams to the client, taken; the client's delivered.
    fn take_server_datagrams(&mut self) -> Vec<Bytes> {
        while let Some(t) = self.client.poll_transmit() {
            let _ = self.mux.handle_datagram(self.me, &t.data, self.now);
        }
        while let Some(event) = self.mux.poll_event() {
            match event {
                MuxEvent::Connected(_) => self.up.0 = true,
                MuxEvent::Closed(id, why) => panic!("peer {id} closed: {why:?}"),
                MuxEvent::Audio(..) => {}
            }
        }
        let mut out = Vec::new();
        while let Some(t) = self.mux.poll_transmit() {
            out.push(t.data.freeze());
        }
        out
    }

    /// Hands one datagram to the client; returns the audio it gave.
    fn deliver(&mut self, data: &[u8]) -> Vec<AudioPacket> {
        self.client.handle_datagram(self.server, data, self.now);
        let mut audio = Vec::new();
        while let Some(event) = self.client.poll_event() {
            match event {
                ClientEvent::Connected => self.up.1 = true,
                ClientEvent::Audio(p) => audio.push(p),
                ClientEvent::Closed => panic!("client closed"),
            }
        }
        audio
    }

    /// Runs `ms` of virtual time, everything delivered as it is.
    fn run(&mut self, ms: u64) -> Vec<AudioPacket> {
        self.run_seeing(ms, |_| {})
    }

    /// [`Call::run`], showing `see` every server datagram first.
    fn run_seeing(&mut self, ms: u64, mut see: impl FnMut(&[u8])) -> Vec<AudioPacket> {
        let mut audio = Vec::new();
        for step in 0..ms / 10 {
            self.now += Duration::from_millis(10);
            if self.talking && step % 2 == 0 {
                self.client
                    .send_audio(Bytes::from_static(&[0xF8, 0xFF, 0xFE]), Some(40), self.now)
                    .expect("client sends");
            }
            self.mux.handle_timeout(self.now);
            self.client.handle_timeout(self.now);
            for _ in 0..10 {
                let datagrams = self.take_server_datagrams();
                if datagrams.is_empty() && self.client.poll_timeout().is_none_or(|t| t > self.now) {
                    break;
                }
                for d in datagrams {
                    see(&d);
                    audio.extend(self.deliver(&d));
                }
            }
        }
        audio
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

    /// Frame `i` from the server, as protected datagrams (RTP only).
    fn server_frame(&mut self, i: usize) -> Vec<Bytes> {
        let (payload, level, contributors) = frame(i);
        self.mux.send_audio(self.peer, payload, level, &contributors, self.now).expect("server sends");
        let datagrams = self.take_server_datagrams();
        assert!(datagrams.iter().all(|d| is_rtp(d)), "one RTP packet");
        datagrams
    }
}

#[test]
fn the_same_datagrams_read_both_ways_give_equal_packets_across_a_wrap() {
    for profile in [SrtpProfile::AeadAes128Gcm, SrtpProfile::AeadAes256Gcm, SrtpProfile::Aes128CmHmacSha1_80] {
        let mut call = Call::new(profile);
        call.connect();
        assert_eq!(call.client.receive_path(), ReceivePath::Undecided { lean: true }, "{profile:?}");
        assert!(call.mux.set_next_sequence(call.peer, 65_528));
        let mut lean_got = Vec::new();
        for i in 0..24 {
            let datagrams = call.server_frame(i);
            assert_eq!(datagrams.len(), 1);
            let lean = call.deliver(&datagrams[0]);
            // webrtc-rs never saw it: switched to its path, the same bytes open there too.
            call.client.set_lean_receive(false);
            let rtc = call.deliver(&datagrams[0]);
            call.client.set_lean_receive(true);
            assert_eq!(lean.len(), 1, "{profile:?} frame {i}: read on the lean path");
            assert_eq!(lean, rtc, "{profile:?} frame {i}: equal to webrtc-rs's reading");
            // A replay, and a tampered copy, are dropped on the lean path (and
            // not handed to webrtc-rs, which would take the replay).
            assert!(call.deliver(&datagrams[0]).is_empty(), "{profile:?}: a replay");
            let mut bad = datagrams[0].to_vec();
            let at = bad.len() - 20;
            bad[at] ^= 0x01;
            assert!(call.deliver(&bad).is_empty(), "{profile:?}: tampered");
            lean_got.extend(lean);
        }
        assert_eq!(call.client.receive_path(), ReceivePath::Lean(profile));
        assert_eq!(call.client.receive_stats(), ReceiveStats { lean: 24, dropped: 48 }, "{profile:?}");
        // RTP-looking garbage (any CSRC count, extension bit, length): dropped
        // and counted, never a panic, and the stream goes on.
        let mut sprayed = 0;
        for i in 0..300usize {
            let mut junk: Vec<u8> = (0..(i % 180)).map(|j| (i.wrapping_mul(131) ^ (j * 29)) as u8).collect();
            if let Some(b) = junk.first_mut() {
                *b = 0x80 | (i as u8 & 0x1F);
            }
            if let Some(b) = junk.get_mut(1) {
                *b = 111;
            }
            sprayed += usize::from(is_rtp(&junk));
            assert!(call.deliver(&junk).is_empty());
        }
        assert_eq!(call.client.receive_stats().dropped, 48 + sprayed as u64, "{profile:?}");
        let next = call.server_frame(24);
        assert_eq!(call.deliver(&next[0]).len(), 1, "{profile:?}: the stream goes on");
        assert_eq!(lean_got[0].seq, 65_528);
        assert_eq!(lean_got[8].seq, 0, "wrapped: ROC 1");
        // The server's sender reports still arrive, through webrtc-rs.
        call.run(1_500);
        let sr = call.client.last_sender_report().expect("a sender report");
        assert_eq!(sr.packet_count, 25, "{profile:?}");
    }
}

#[test]
fn a_lean_receiver_that_authenticates_nothing_hands_over_to_webrtc_rs() {
    let mut call = Call::new(SrtpProfile::AeadAes128Gcm);
    call.connect();
    // The first sixteen packets arrive corrupted: dropped, counted.
    for i in 0..16 {
        let mut bad = call.server_frame(i)[0].to_vec();
        let last = bad.len() - 1;
        bad[last] ^= 0x80;
        assert!(call.deliver(&bad).is_empty());
    }
    assert_eq!(call.client.receive_stats(), ReceiveStats { lean: 0, dropped: 16 });
    assert_eq!(call.client.receive_path(), ReceivePath::Rtc, "given up for this DTLS session");
    // What comes next is read by webrtc-rs.
    for i in 16..20 {
        let d = call.server_frame(i);
        let got = call.deliver(&d[0]);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].payload, frame(i).0);
    }
    assert_eq!(call.client.receive_stats(), ReceiveStats { lean: 0, dropped: 16 });
}

#[test]
fn consent_checks_are_answered_on_the_lean_path_and_webrtc_rs_still_sees_one_every_idle_timeout() {
    use rtc::stun::fingerprint::FINGERPRINT;
    use rtc::stun::integrity::MessageIntegrity;
    use rtc::stun::message::{BINDING_SUCCESS, Message};

    let mut call = Call::new(SrtpProfile::AeadAes128Gcm);
    call.connect();
    let pwd = call.answer.lines().find_map(|l| l.trim_end().strip_prefix("a=ice-pwd:")).expect("ice-pwd").to_owned();
    let crypto = rtc::crypto::default_provider().expect("crypto");
    let before = call.mux.stats();
    // 65 s with nothing but consent checks and RTCP: longer than webrtc-rs's
    // agent waits for a check (3 idle timeouts, then 1 more to fail), so a
    // broken feed would close the peer (a panic in `take_server_datagrams`).
    let (mut answers, mut requests) = (0u64, 0u64);
    call.run_seeing(65_000, |d| {
        if !tutti_rtc::stun::is_stun(d) {
            return;
        }
        let mut m = Message { raw: d.to_vec(), ..Message::default() };
        m.decode().expect("a STUN message");
        if m.typ != BINDING_SUCCESS {
            requests += 1;
            return;
        }
        MessageIntegrity::check(&mut m, pwd.as_bytes(), crypto.crypto()).expect("integrity with our password");
        FINGERPRINT.check(&m).expect("fingerprint");
        answers += 1;
    });
    // webrtc-rs's agent follows each check it answers with a check of its
    // own (a triggered check, even as ICE-lite), which the client answers:
    // the lean path spares both.
    eprintln!("server STUN: {answers} answers, {requests} requests");
    let stats = call.mux.stats();
    let lean = stats.lean_checks - before.lean_checks;
    let checks = 65_000 / tutti_rtc::CONSENT_INTERVAL.as_millis() as u64;
    assert!(answers + 2 >= checks, "every check answered: {answers} answers to ~{checks} checks");
    // One every idle timeout (10 s) went to webrtc-rs: 6 or 7 of 26.
    let fed = answers - lean;
    assert!((5..=8).contains(&fed), "{fed} checks answered by webrtc-rs, {lean} on the lean path");
    assert_eq!((stats.connected, stats.lost), (1, 0), "still connected");

    // An ICE restart from a new address: new credentials on both sides.
    // Checks with them are answered here again once ICE is steady.
    let moved: SocketAddr = "127.0.0.1:50001".parse().expect("addr");
    let offer = call.client.restart_ice(moved, call.now).expect("restart offer");
    let answer = call.mux.restart(call.peer, &offer, call.now).expect("restart answer");
    call.client.accept_restart(&answer, call.now).expect("restart answer accepted");
    call.me = moved;
    // Its audio from there moves the server's lean path to the new address.
    call.talking = true;
    let new_pwd = answer.lines().find_map(|l| l.trim_end().strip_prefix("a=ice-pwd:")).expect("ice-pwd").to_owned();
    let before = call.mux.stats();
    let mut answers = 0u64;
    call.run_seeing(40_000, |d| {
        if !tutti_rtc::stun::is_stun(d) {
            return;
        }
        let mut m = Message { raw: d.to_vec(), ..Message::default() };
        m.decode().expect("a STUN message");
        if m.typ == BINDING_SUCCESS {
            MessageIntegrity::check(&mut m, new_pwd.as_bytes(), crypto.crypto()).expect("the new password");
            answers += 1;
        }
    });
    let lean = call.mux.stats().lean_checks - before.lean_checks;
    // All to webrtc-rs for an idle timeout (10 s, 4 checks), then as
    // before: of the next 30 s's 12, one every 10 s to webrtc-rs, 9 here.
    assert!(answers >= 15 && (7..=10).contains(&lean), "after the restart: {answers} answers, {lean} on the lean path");

    // And the call still carries audio both ways.
    let frames = call.server_frame(0);
    let mut got = Vec::new();
    for d in frames {
        got.extend(call.deliver(&d));
    }
    assert_eq!(got.len(), 1, "the client hears the server");
}
