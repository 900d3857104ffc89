//! The other end of a call: an offering WebRTC peer on its own UDP socket,
//! as tutti's tests and load tester use it. Sans-IO, like [`crate::Mux`].

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rtc::ice::mdns::MulticastDnsMode;
use rtc::peer_connection::configuration::setting_engine::SettingEngineBuilder;
use rtc::peer_connection::sdp::RTCSessionDescription;
use rtc::sansio::Protocol;
use rtc::shared::{TaggedBytesMut, TransportContext, TransportProtocol};

use crate::keys::{ExporterSlot, KeyTap};
use crate::media::{
    AudioPacket, CLIENT_OPUS_FMTP, LeanRead, Media, PeerEvent, ReceivePath, ReceiveStats, RtcError, SendPath,
    SenderReportInfo, Spare, Transmit, add_audio_track, add_candidates, add_host_candidate, bad_sdp, build_connection,
    internal, local_sdp,
};
use crate::tcp::{FrameReader, FrameWriter};

/// How often a connected client checks consent (RFC 7675): Chrome's
/// interval on a stable candidate pair.
pub const CONSENT_INTERVAL: Duration = Duration::from_millis(2500);

/// What a [`ClientPeer`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientEvent {
    /// ICE and DTLS are up.
    Connected,
    /// The server sent an audio packet.
    Audio(AudioPacket),
    /// The connection failed or was closed.
    Closed,
}

/// A connection being negotiated: the connection, its sender and SSRC, and
/// its crypto provider's exporter capture.
type Pending = (rtc::peer_connection::RTCPeerConnection, rtc::rtp_transceiver::RTCRtpSenderId, u32, Arc<ExporterSlot>);

/// An offering peer (full ICE, controlling) bound to `local`. Its audio
/// takes the lean send path by default ([`ClientPeer::set_lean_send`]), and
/// the audio it receives the lean receive path ([`ClientPeer::set_lean_receive`]).
pub struct ClientPeer {
    local: SocketAddr,
    /// Offers only an active TCP candidate (ICE-TCP): everything goes over TCP.
    tcp: bool,
    /// Set once the answer is in.
    media: Option<Media>,
    /// Until then, the connection being negotiated.
    pending: Option<Pending>,
    lean_send: bool,
    lean_receive: bool,
    transmits: VecDeque<Transmit>,
    /// Sent datagrams' buffers, for the next lean packets.
    spare: Spare,
    /// Where the lean receive path opens a datagram.
    scratch: Vec<u8>,
    events: VecDeque<ClientEvent>,
}

impl std::fmt::Debug for ClientPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientPeer").field("local", &self.local).finish()
    }
}

/// A DTLS record of content type alert (21), DTLS 1.0 or 1.2 (RFC 6347 §4.1).
fn is_dtls_alert(data: &[u8]) -> bool {
    data.len() >= 13 && data[0] == 21 && data[1] == 0xFE && matches!(data[2], 0xFD | 0xFF)
}

impl ClientPeer {
    /// A peer that will send one Opus track from `local`; returns it and its SDP offer.
    pub fn new(local: SocketAddr, now: Instant) -> Result<(Self, String), RtcError> {
        Self::build(local, false, now)
    }

    /// A peer whose offer carries only an active TCP host candidate on
    /// `local_ip` (RFC 6544; port 9, as browsers write it): as a browser
    /// behind a network that drops UDP, it reaches the server's passive TCP
    /// candidate and nothing else. Drive it with [`ClientPeer::pump_tcp`].
    pub fn new_tcp(local_ip: IpAddr, now: Instant) -> Result<(Self, String), RtcError> {
        Self::build(SocketAddr::new(local_ip, 9), true, now)
    }

    fn build(local: SocketAddr, tcp: bool, now: Instant) -> Result<(Self, String), RtcError> {
        let provider = rtc::crypto::default_provider().map_err(internal)?;
        let slot = Arc::new(ExporterSlot::default());
        let settings = SettingEngineBuilder::new()
            .with_multicast_dns_mode(MulticastDnsMode::Disabled)
            // An ICE restart here moves to a new socket: the old candidate
            // names an address nothing listens on any more.
            .with_discard_local_candidates_during_ice_restart(true)
            // Consent checks as often as Chrome sends them on a stable pair
            // (2.5 s), not webrtc-rs's 2 s: browser-like load.
            .with_ice_timeouts(None, None, Some(CONSENT_INTERVAL))
            .with_crypto_provider(Arc::new(KeyTap::new(provider, slot.clone())))
            .build();
        // Its reception reports are its own, whichever path reads its audio:
        // one compound RTCP packet a second (sender report and reception
        // block), as a browser sends, not webrtc-rs's extra receiver report.
        let mut pc = build_connection(settings, Vec::new(), CLIENT_OPUS_FMTP, false, now)?;
        let (sender, ssrc) = add_audio_track(&mut pc, CLIENT_OPUS_FMTP)?;
        if tcp {
            let line = format!("candidate:1 1 tcp 1518280447 {} 9 typ host tcptype active", local.ip());
            add_candidates(&mut pc, [line])?;
        } else {
            add_host_candidate(&mut pc, local)?;
        }
        let offer = pc.create_offer(None).map_err(bad_sdp)?;
        pc.set_local_description(now, offer).map_err(bad_sdp)?;
        let sdp = local_sdp(&pc)?;
        let peer = Self {
            local,
            tcp,
            media: None,
            pending: Some((pc, sender, ssrc, slot)),
            lean_send: true,
            lean_receive: true,
            transmits: VecDeque::new(),
            spare: Spare::default(),
            scratch: Vec::new(),
            events: VecDeque::new(),
        };
        Ok((peer, sdp))
    }

    /// Takes the server's SDP answer; connecting starts.
    pub fn accept_answer(&mut self, answer: &str, now: Instant) -> Result<(), RtcError> {
        let (mut pc, sender, ssrc, slot) =
            self.pending.take().ok_or_else(|| bad_sdp("an answer was already applied"))?;
        let answer = RTCSessionDescription::answer(answer.to_owned()).map_err(bad_sdp)?;
        pc.set_remote_description(now, answer).map_err(bad_sdp)?;
        let mut media = Media::new(pc, sender, ssrc, slot, self.lean_send, now)?;
        media.set_lean_receive(self.lean_receive);
        media.set_own_reports();
        self.media = Some(media);
        self.drain();
        Ok(())
    }

    /// Starts an ICE restart from a new local address (the caller moved to a
    /// new socket or network): returns the offer to send to the server (for
    /// tutti, a `PATCH` of the participant with `application/sdp`); apply
    /// the answer with [`ClientPeer::accept_restart`]. The DTLS session,
    /// keys and streams carry on.
    pub fn restart_ice(&mut self, local: SocketAddr, now: Instant) -> Result<String, RtcError> {
        let media = self.media.as_mut().ok_or(RtcError::NotConnected)?;
        let offer = media.offer_restart(local, now)?;
        self.local = local;
        self.drain();
        Ok(offer)
    }

    /// Applies the server's answer to [`ClientPeer::restart_ice`]'s offer.
    pub fn accept_restart(&mut self, answer: &str, now: Instant) -> Result<(), RtcError> {
        let media = self.media.as_mut().ok_or(RtcError::NotConnected)?;
        media.accept_restart(answer, now)?;
        self.drain();
        Ok(())
    }

    /// Whether ICE and DTLS are up.
    pub fn is_connected(&self) -> bool {
        self.media.as_ref().is_some_and(Media::is_connected)
    }

    /// Takes one datagram received on `local`. Received SRTP audio takes
    /// the lean receive path when it can ([`ClientPeer::set_lean_receive`]);
    /// everything else (ICE, DTLS, RTCP: the server's sender reports) goes
    /// through webrtc-rs.
    pub fn handle_datagram(&mut self, from: SocketAddr, data: &[u8], now: Instant) {
        if let Some(media) = &mut self.media {
            match media.read_lean(data, now, &mut self.scratch) {
                LeanRead::Audio(packet) => {
                    self.events.push_back(ClientEvent::Audio(packet));
                    return;
                }
                LeanRead::Dropped => return,
                LeanRead::Rtc => {}
            }
            let transport = TransportContext {
                local_addr: self.local,
                peer_addr: from,
                transport_protocol: if self.tcp { TransportProtocol::TCP } else { TransportProtocol::UDP },
                ecn: None,
            };
            if let Some(pc) = media.pc.as_deref_mut() {
                let _ = pc.handle_read(TaggedBytesMut { now, transport, message: BytesMut::from(data) });
            }
            // webrtc-rs does not surface a close_notify as a state change (an
            // ICE-connected transport whose DTLS closed still reads "connected"),
            // so the record header tells: any DTLS alert from the server
            // (close_notify or fatal) ends the call, also one that comes
            // while the handshake is still under way (a server that drops a
            // call it has just taken, as a node handing its room over does:
            // otherwise the call would wait for consent to fail, 30 s).
            let hung_up = is_dtls_alert(data);
            self.drain();
            if hung_up
                && let Some(media) = &mut self.media
                && media.mark_closed()
            {
                self.events.push_back(ClientEvent::Closed);
            }
        }
    }

    /// Sends one 20 ms Opus frame with its RFC 6464 level, as the frame
    /// after the last one sent or skipped.
    pub fn send_audio(&mut self, payload: Bytes, level: Option<u8>, now: Instant) -> Result<(), RtcError> {
        let media = self.media.as_mut().ok_or(RtcError::NotConnected)?;
        media.send_audio(None, &payload, level, &[], now, &mut self.transmits, &mut self.spare)?;
        Ok(())
    }

    /// Whether this peer's audio takes the lean send path (tutti's own RTP
    /// and SRTP once DTLS is up; the default) or webrtc-rs's write pipeline.
    /// Takes effect only before the first packet is sent (a stream never
    /// changes path); returns whether it did.
    pub fn set_lean_send(&mut self, lean: bool) -> bool {
        match &mut self.media {
            Some(media) => media.set_lean(lean),
            None => {
                self.lean_send = lean;
                true
            }
        }
    }

    /// Whether received SRTP audio is read on the lean path (tutti's own
    /// SRTP receive once DTLS is up, webrtc-rs for ICE, DTLS and RTCP; the
    /// default) or entirely by webrtc-rs's read pipeline. Takes effect at
    /// the next datagram.
    pub fn set_lean_receive(&mut self, lean: bool) {
        self.lean_receive = lean;
        if let Some(media) = &mut self.media {
            media.set_lean_receive(lean);
        }
    }

    /// The path received RTP takes now.
    pub fn receive_path(&self) -> ReceivePath {
        self.media.as_ref().map_or(ReceivePath::Undecided { lean: self.lean_receive }, Media::receive_path)
    }

    /// What the lean receive path did: packets passed on, and dropped
    /// (failed authentication, replays, too old).
    pub fn receive_stats(&self) -> ReceiveStats {
        self.media.as_ref().map(Media::receive_stats).unwrap_or_default()
    }

    /// The path this peer's outgoing RTP takes (decided at its first packet).
    pub fn send_path(&self) -> SendPath {
        self.media.as_ref().map_or(SendPath::Undecided { lean: self.lean_send }, Media::send_path)
    }

    /// The last RTCP sender report the server sent.
    pub fn last_sender_report(&self) -> Option<SenderReportInfo> {
        self.media.as_ref().and_then(Media::last_sender_report)
    }

    /// For tests: whether webrtc-rs's DTLS transport is closed, which it is
    /// only once a close_notify from the server decrypted and authenticated.
    #[doc(hidden)]
    pub fn dtls_transport_closed(&mut self) -> bool {
        self.media.as_mut().is_some_and(Media::dtls_closed)
    }

    /// For tests: the sequence number of the next packet, before the first
    /// (e.g. just short of a wrap). Returns whether it was set.
    #[doc(hidden)]
    pub fn set_next_sequence(&mut self, seq: u16) -> bool {
        self.media.as_mut().is_some_and(|m| m.set_next_sequence(seq))
    }

    /// Lets `frames` 20 ms frames pass unsent, as an Opus encoder in DTX
    /// does during silence: the next packet's timestamp shows the gap.
    pub fn skip_frames(&mut self, frames: u32) {
        if let Some(media) = &mut self.media {
            media.skip_frames(frames);
        }
    }

    #[cfg(feature = "fuzzing")]
    /// For fuzz targets: sends an RTP packet shaped by `raw`.
    #[doc(hidden)]
    pub fn send_raw_rtp(&mut self, raw: crate::RawRtp, now: Instant) -> Result<(), RtcError> {
        let media = self.media.as_mut().ok_or(RtcError::NotConnected)?;
        media.send_raw_rtp(raw, now, &mut self.transmits)?;
        self.drain();
        Ok(())
    }

    #[cfg(feature = "fuzzing")]
    /// For fuzz targets: sends `bytes` as an RTCP packet (SRTCP-protected).
    #[doc(hidden)]
    pub fn send_raw_rtcp(&mut self, bytes: Bytes, now: Instant) -> Result<(), RtcError> {
        let media = self.media.as_mut().ok_or(RtcError::NotConnected)?;
        media.send_raw_rtcp(bytes, now)?;
        self.drain();
        Ok(())
    }

    /// Runs due timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(media) = &mut self.media {
            media.handle_timeout(now, &mut self.transmits);
            self.drain();
        }
    }

    /// When [`ClientPeer::handle_timeout`] has work next.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        self.media.as_mut().and_then(Media::poll_timeout)
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// Hands back the buffer of a datagram from
    /// [`ClientPeer::poll_transmit`] once it is sent, for the next lean
    /// packet (as `Mux::recycle`). Optional.
    pub fn recycle(&mut self, data: BytesMut) {
        self.spare.give(data);
    }

    /// For tests: how many sent buffers are kept for the next packets.
    #[doc(hidden)]
    pub fn spare_buffers(&self) -> usize {
        self.spare.len()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    /// One turn of a plain UDP driver: sends what is queued on `socket`,
    /// takes every datagram waiting on it (the socket must be non-blocking),
    /// and runs due timers. For tools and tests that give each client its
    /// own socket.
    pub fn pump_udp(&mut self, socket: &UdpSocket, buf: &mut [u8], now: Instant) -> std::io::Result<()> {
        while let Some(t) = self.poll_transmit() {
            // A send that fails is a lost datagram; ICE and SRTP cope with loss.
            let _ = socket.send_to(&t.data, t.to);
            self.recycle(t.data);
        }
        loop {
            match socket.recv_from(buf) {
                Ok((n, from)) => self.handle_datagram(from, &buf[..n], now),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        if self.poll_timeout().is_some_and(|t| t <= now) {
            self.handle_timeout(now);
        }
        Ok(())
    }

    /// Whether this peer offered only TCP (see [`ClientPeer::new_tcp`]).
    pub fn is_tcp(&self) -> bool {
        self.tcp
    }

    /// One turn of a plain ICE-TCP driver (for a peer made by
    /// [`ClientPeer::new_tcp`]): connects `link` to the server's passive
    /// candidate when the first check goes out, frames what is queued onto
    /// it (RFC 4571), takes every frame waiting, and runs due timers.
    /// Returns an error when the connection cannot be made or broke (the
    /// server closed it).
    pub fn pump_tcp(&mut self, link: &mut TcpLink, buf: &mut [u8], now: Instant) -> std::io::Result<()> {
        if self.poll_timeout().is_some_and(|t| t <= now) {
            self.handle_timeout(now);
        }
        while let Some(t) = self.poll_transmit() {
            if link.stream.is_none() {
                let s = TcpStream::connect_timeout(&t.to, Duration::from_secs(2))?;
                s.set_nonblocking(true)?;
                s.set_nodelay(true)?;
                link.server = Some(t.to);
                link.stream = Some(s);
            }
            // A full buffer drops the packet, as a lost datagram; ICE and SRTP cope.
            let _ = link.writer.push(&t.data);
        }
        let Some(stream) = &mut link.stream else { return Ok(()) };
        let server = link.server.unwrap_or(self.local);
        // Bounded: the writer holds at most its limit; each write takes some or stops.
        while !link.writer.is_empty() {
            let (a, _) = link.writer.pending();
            match stream.write(a) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => link.writer.consume(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        let mut frames = Vec::new();
        for _ in 0..64 {
            match stream.read(buf) {
                Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    link.reader
                        .read(&buf[..n], |f| frames.push(f.to_vec()))
                        .map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e))?;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        for f in frames {
            self.handle_datagram(server, &f, now);
        }
        Ok(())
    }

    /// Hangs up.
    pub fn close(&mut self) {
        if let Some(media) = &mut self.media {
            media.close(&mut self.transmits);
        }
    }

    fn drain(&mut self) {
        let Some(media) = &mut self.media else { return };
        let events = &mut self.events;
        // The caller asks for the deadline when it wants it (poll_timeout).
        media.drain_io(&mut self.transmits, |event| {
            events.push_back(match event {
                PeerEvent::Connected => ClientEvent::Connected,
                PeerEvent::Closed | PeerEvent::Failed(_) => ClientEvent::Closed,
                PeerEvent::Audio(packet) => ClientEvent::Audio(packet),
            })
        });
    }
}

/// A client's ICE-TCP connection for [`ClientPeer::pump_tcp`]: made when
/// the first packet goes out, framed per RFC 4571 both ways, with a bounded
/// send buffer.
#[derive(Debug)]
pub struct TcpLink {
    server: Option<SocketAddr>,
    stream: Option<TcpStream>,
    reader: FrameReader,
    writer: FrameWriter,
}

impl Default for TcpLink {
    fn default() -> Self {
        Self::new()
    }
}

impl TcpLink {
    /// Not connected yet; 256 KiB of send buffer.
    pub fn new() -> Self {
        Self {
            server: None,
            stream: None,
            reader: FrameReader::new(crate::tcp::MAX_RFC4571_FRAME),
            writer: FrameWriter::new(256 * 1024),
        }
    }

    /// The connection, once made.
    pub fn stream(&self) -> Option<&TcpStream> {
        self.stream.as_ref()
    }

    /// Drops the connection (the next packet makes a new one).
    pub fn reset(&mut self) {
        *self = Self::new();
    }
}
