//! Spike: webrtc-rs `rtc` 0.21 peers connect over ICE-TCP (RFC 6544) on
//! loopback, through `tutti_rtc::tcp`'s RFC 4571 framing and connection
//! table. The server side is what tutti's mux would run (ICE-lite, one
//! `tcptype passive` host candidate on the listening address, sockets owned
//! by the caller); the client offers only a `tcptype active` candidate, as a
//! browser behind a UDP-blocking firewall does. Then the client sends RTP,
//! restarts ICE on a new TCP connection (a new source address), and its RTP
//! reaches the server again: the DTLS session and SRTP keys survive.
//!
//! Test-only code: tutti's `ClientPeer` and `Mux` are not used (they are
//! UDP-only for now); this drives `rtc` directly.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rtc::ice::mdns::MulticastDnsMode;
use rtc::media_stream::MediaStreamTrack;
use rtc::peer_connection::configuration::RTCConfigurationBuilder;
use rtc::peer_connection::configuration::media_engine::{MIME_TYPE_OPUS, MediaEngine};
use rtc::peer_connection::configuration::setting_engine::SettingEngineBuilder;
use rtc::peer_connection::event::RTCPeerConnectionEvent;
use rtc::peer_connection::message::RTCMessage;
use rtc::peer_connection::sdp::RTCSessionDescription;
use rtc::peer_connection::state::RTCPeerConnectionState;
use rtc::peer_connection::transport::RTCIceCandidateInit;
use rtc::peer_connection::{RTCPeerConnection, RTCPeerConnectionBuilder};
use rtc::rtp_transceiver::RTCRtpSenderId;
use rtc::rtp_transceiver::rtp_sender::{
    RTCRtpCodec, RTCRtpCodecParameters, RTCRtpCodingParameters, RTCRtpEncodingParameters, RtpCodecKind,
};
use rtc::sansio::Protocol;
use rtc::shared::{TaggedBytesMut, TransportContext, TransportProtocol};
use tutti_rtc::tcp::{self, ConnId, FrameReader, FrameWriter, Received, TcpConnections, TcpLimits};

fn opus() -> RTCRtpCodec {
    RTCRtpCodec {
        mime_type: MIME_TYPE_OPUS.to_owned(),
        clock_rate: 48_000,
        channels: 2,
        sdp_fmtp_line: "minptime=10;useinbandfec=1".to_owned(),
        rtcp_feedback: vec![],
    }
}

/// A peer connection with Opus and one outgoing audio track.
fn peer(lite: bool, fixed_credentials: bool, now: Instant) -> (RTCPeerConnection, RTCRtpSenderId) {
    let mut m = MediaEngine::default();
    m.register_codec(RTCRtpCodecParameters { rtp_codec: opus(), payload_type: 111 }, RtpCodecKind::Audio)
        .expect("Opus registers");
    let mut settings = SettingEngineBuilder::new().with_lite(lite).with_multicast_dns_mode(MulticastDnsMode::Disabled);
    if fixed_credentials {
        // As tutti's Acceptor does: the server picks the ufrag it routes by.
        settings = settings.with_ice_credentials("tspike0abc".to_owned(), "0123456789abcdef01234567".to_owned());
    }
    let settings = settings.build();
    let mut pc = RTCPeerConnectionBuilder::new()
        .with_configuration(RTCConfigurationBuilder::new().build())
        .with_setting_engine(settings)
        .with_media_engine(m)
        .build(now)
        .expect("a peer connection");
    let track = MediaStreamTrack::new(
        "spike".to_owned(),
        "audio".to_owned(),
        "audio".to_owned(),
        RtpCodecKind::Audio,
        vec![RTCRtpEncodingParameters {
            rtp_coding_parameters: RTCRtpCodingParameters {
                ssrc: Some(if lite { 1111 } else { 2222 }),
                ..Default::default()
            },
            codec: opus(),
            ..Default::default()
        }],
    );
    let sender = pc.add_track(track).expect("a track");
    (pc, sender)
}

fn candidate(pc: &mut RTCPeerConnection, line: String) {
    pc.add_local_candidate(RTCIceCandidateInit { candidate: line, ..Default::default() }).expect("a candidate");
    pc.add_local_candidate(RTCIceCandidateInit::default()).expect("end of candidates");
}

fn tcp_ctx(local: SocketAddr, peer: SocketAddr) -> TransportContext {
    TransportContext { local_addr: local, peer_addr: peer, transport_protocol: TransportProtocol::TCP, ecn: None }
}

/// The server: a listener, the connection table and one ICE-lite peer, as
/// tutti's io thread and mux would hold them.
struct Server {
    listener: TcpListener,
    addr: SocketAddr,
    table: TcpConnections,
    socks: Vec<(ConnId, TcpStream)>,
    pc: RTCPeerConnection,
    connected: bool,
    rtp_in: Vec<u16>,
    non_tcp_out: usize,
}

/// The client: one TCP connection at a time (a new one after "moving").
struct Client {
    pc: RTCPeerConnection,
    sender: RTCRtpSenderId,
    server: SocketAddr,
    sock: Option<(TcpStream, SocketAddr)>,
    reader: FrameReader,
    writer: FrameWriter,
    connected: bool,
    seq: u16,
}

impl Server {
    fn turn(&mut self, now: Instant) {
        loop {
            match self.listener.accept() {
                Ok((s, from)) => {
                    s.set_nonblocking(true).expect("nonblocking");
                    s.set_nodelay(true).expect("nodelay");
                    let id = self.table.accept(from, now).expect("under the limits");
                    self.socks.push((id, s));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("accept: {e}"),
            }
        }
        let mut buf = [0u8; 4096];
        for (id, s) in &mut self.socks {
            let Some(peer) = self.table.peer_addr(*id) else { continue };
            for _ in 0..16 {
                match s.read(&mut buf) {
                    Ok(0) => {
                        self.table.close(*id, tcp::TcpClose::PeerClosed);
                        break;
                    }
                    Ok(n) => {
                        let pc = &mut self.pc;
                        let local = self.addr;
                        let r = self.table.receive(*id, &buf[..n], now, |frame| {
                            let _ = pc.handle_read(TaggedBytesMut {
                                now,
                                transport: tcp_ctx(local, peer),
                                message: BytesMut::from(frame),
                            });
                        });
                        assert!(matches!(r, Received::Frames(_)), "the client's stream is well framed: {r:?}");
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => {
                        self.table.close(*id, tcp::TcpClose::PeerClosed);
                        break;
                    }
                }
            }
        }
        if self.pc.poll_timeout().is_some_and(|t| t <= now) {
            let _ = self.pc.handle_timeout(now);
        }
        while let Some(msg) = self.pc.poll_write() {
            if msg.transport.transport_protocol != TransportProtocol::TCP {
                self.non_tcp_out += 1;
            }
            if let Some(id) = self.table.find(msg.transport.peer_addr) {
                let _ = self.table.send(id, &msg.message);
            }
        }
        for (id, s) in &mut self.socks {
            let (a, _) = self.table.pending(*id);
            if a.is_empty() {
                continue;
            }
            if let Ok(n) = s.write(a) {
                self.table.consume(*id, n);
            }
        }
        self.table.handle_timeout(now);
        while let Some(e) = self.pc.poll_event() {
            if let RTCPeerConnectionEvent::OnConnectionStateChangeEvent(RTCPeerConnectionState::Connected) = e {
                self.connected = true;
            }
        }
        while let Some(msg) = self.pc.poll_read() {
            if let RTCMessage::RtpPacket(_, p) = msg.message {
                self.rtp_in.push(p.header.sequence_number);
            }
        }
    }
}

impl Client {
    fn turn(&mut self, now: Instant) {
        if self.pc.poll_timeout().is_some_and(|t| t <= now) {
            let _ = self.pc.handle_timeout(now);
        }
        while let Some(msg) = self.pc.poll_write() {
            assert_eq!(msg.transport.transport_protocol, TransportProtocol::TCP, "only TCP candidates: only TCP out");
            assert_eq!(msg.transport.peer_addr, self.server);
            if self.sock.is_none() {
                // An active TCP candidate connects when it first has something to send.
                let s = TcpStream::connect(self.server).expect("loopback connect");
                s.set_nonblocking(true).expect("nonblocking");
                s.set_nodelay(true).expect("nodelay");
                let local = s.local_addr().expect("bound");
                self.sock = Some((s, local));
            }
            let _ = self.writer.push(&msg.message);
        }
        let Some((s, local)) = &mut self.sock else { return };
        let (a, _) = self.writer.pending();
        if !a.is_empty()
            && let Ok(n) = s.write(a)
        {
            self.writer.consume(n);
        }
        let mut buf = [0u8; 4096];
        for _ in 0..16 {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let pc = &mut self.pc;
                    let (local, server) = (*local, self.server);
                    self.reader
                        .read(&buf[..n], |frame| {
                            let _ = pc.handle_read(TaggedBytesMut {
                                now,
                                transport: tcp_ctx(local, server),
                                message: BytesMut::from(frame),
                            });
                        })
                        .expect("the server's stream is well framed");
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("client read: {e}"),
            }
        }
        while let Some(e) = self.pc.poll_event() {
            if let RTCPeerConnectionEvent::OnConnectionStateChangeEvent(RTCPeerConnectionState::Connected) = e {
                self.connected = true;
            }
        }
        while self.pc.poll_read().is_some() {}
    }

    fn send_rtp(&mut self, now: Instant) {
        self.seq = self.seq.wrapping_add(1);
        let header = rtc::rtp::Header {
            version: 2,
            payload_type: 111,
            sequence_number: self.seq,
            timestamp: u32::from(self.seq) * 960,
            ssrc: 2222,
            ..Default::default()
        };
        let mut sender = self.pc.rtp_sender(self.sender).expect("the client's sender");
        sender
            .write_rtp(now, rtc::rtp::Packet { header, payload: Bytes::from_static(&[0xF8, 0xFF, 0xFE]) })
            .expect("RTP out");
    }

    /// A new TCP connection (new source port): the old one is dropped.
    fn move_away(&mut self) {
        self.sock = None;
        self.reader = FrameReader::new(1500);
        self.writer = FrameWriter::new(64 * 1024);
    }
}

fn negotiate(server: &mut Server, client: &mut Client, now: Instant, first: bool) {
    let offer = client.pc.create_offer(None).expect("an offer");
    client.pc.set_local_description(now, offer).expect("local offer");
    let offer_sdp = client.pc.local_description().expect("set").sdp;
    assert!(offer_sdp.contains("tcptype active"), "the offer carries the active TCP candidate:\n{offer_sdp}");
    assert!(!offer_sdp.contains(" udp "), "and no UDP candidate");
    server
        .pc
        .set_remote_description(now, RTCSessionDescription::offer(offer_sdp).expect("offer"))
        .expect("remote offer");
    if first {
        candidate(&mut server.pc, tcp::tcp_candidate(1, server.addr, 8191));
    } else {
        // An ICE restart puts gathering back to "gathering": end it again.
        let _ = server.pc.add_local_candidate(RTCIceCandidateInit::default());
    }
    let answer = server.pc.create_answer(None).expect("an answer");
    server.pc.set_local_description(now, answer).expect("local answer");
    let answer_sdp = server.pc.local_description().expect("set").sdp;
    eprintln!("answer ufrag: {:?}", answer_sdp.lines().find(|l| l.starts_with("a=ice-ufrag")));
    assert!(answer_sdp.contains("a=ice-lite"), "{answer_sdp}");
    assert!(answer_sdp.contains("tcptype passive"), "the answer carries the passive candidate:\n{answer_sdp}");
    client
        .pc
        .set_remote_description(now, RTCSessionDescription::answer(answer_sdp).expect("answer"))
        .expect("remote answer");
}

fn pump_until(
    server: &mut Server,
    client: &mut Client,
    limit: Duration,
    mut done: impl FnMut(&Server, &Client) -> bool,
) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        let now = Instant::now();
        client.turn(now);
        server.turn(now);
        if done(server, client) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    false
}

#[test]
fn rtc_connects_over_ice_tcp_and_restarts_on_a_new_connection() {
    run(false);
}

fn run(fixed_credentials: bool) {
    let now = Instant::now();
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("bound");
    let (spc, _) = peer(true, fixed_credentials, now);
    let mut server = Server {
        listener,
        addr,
        table: TcpConnections::new(TcpLimits::default()),
        socks: Vec::new(),
        pc: spc,
        connected: false,
        rtp_in: Vec::new(),
        non_tcp_out: 0,
    };
    let (mut cpc, sender) = peer(false, false, now);
    // A browser's active TCP candidate: port 9, the discard port (RFC 6544 §4.5).
    candidate(&mut cpc, "candidate:1 1 tcp 1518280447 127.0.0.1 9 typ host tcptype active".to_owned());
    let mut client = Client {
        pc: cpc,
        sender,
        server: addr,
        sock: None,
        reader: FrameReader::new(1500),
        writer: FrameWriter::new(64 * 1024),
        connected: false,
        seq: 0,
    };
    negotiate(&mut server, &mut client, now, true);

    assert!(
        pump_until(&mut server, &mut client, Duration::from_secs(10), |s, c| s.connected && c.connected),
        "ICE and DTLS over TCP within 10 s (server {}, client {})",
        server.connected,
        client.connected
    );
    assert_eq!(server.non_tcp_out, 0, "every server packet was stamped TCP");
    let s = server.table.stats();
    assert_eq!((s.accepted, s.open, s.closed_not_stun, s.closed_bad_frame), (1, 1, 0, 0));

    // Audio over TCP.
    for _ in 0..5 {
        client.send_rtp(Instant::now());
    }
    assert!(
        pump_until(&mut server, &mut client, Duration::from_secs(5), |s, _| s.rtp_in.len() >= 5),
        "RTP over TCP reaches the server: {:?}",
        server.rtp_in
    );

    // The client "moves": a new TCP connection and an ICE restart.
    let first_conn = server.socks[0].0;
    client.move_away();
    client.pc.restart_ice();
    let now = Instant::now();
    negotiate(&mut server, &mut client, now, false);
    let before = server.rtp_in.len();
    // Audio keeps coming every 20 ms while ICE re-checks on the new connection.
    let t0 = Instant::now();
    let mut back = false;
    while t0.elapsed() < Duration::from_secs(5) {
        client.send_rtp(Instant::now());
        if pump_until(&mut server, &mut client, Duration::from_millis(20), |s, _| s.rtp_in.len() > before) {
            back = true;
            break;
        }
    }
    assert!(back, "RTP flows again after the ICE restart on a new connection");
    let took = t0.elapsed();
    eprintln!("audio back {took:?} after the restart answer");
    assert!(took < Duration::from_secs(2), "within 2 s, as issue 14 asks: {took:?}");
    let s = server.table.stats();
    assert_eq!(s.accepted, 2, "the client reconnected");
    assert!(
        pump_until(&mut server, &mut client, Duration::from_secs(1), |s, _| s.table.stats().closed_by_peer == 1),
        "the old connection's close was seen and counted"
    );
    assert!(server.table.peer_addr(first_conn).is_none());
    assert_eq!(server.non_tcp_out, 0);
}

/// tutti's Acceptor fixes each peer's ICE credentials in the SettingEngine;
/// rtc then restarts with the *same* ufrag/pwd.
#[test]
fn restart_with_fixed_server_credentials() {
    run(true);
}
