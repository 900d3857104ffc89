//! What both ends of a call share: the Opus codec and header extensions we
//! negotiate, sending RTP, and draining a peer connection's output.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use rtc::media_stream::MediaStreamTrack;
use rtc::peer_connection::certificate::RTCCertificate;
use rtc::peer_connection::configuration::RTCConfigurationBuilder;
use rtc::peer_connection::configuration::interceptor_registry::{Registry, configure_rtcp_reports};
use rtc::peer_connection::configuration::media_engine::{MIME_TYPE_OPUS, MediaEngine};
use rtc::peer_connection::configuration::setting_engine::SettingEngine;
use rtc::peer_connection::event::RTCPeerConnectionEvent;
use rtc::peer_connection::message::RTCMessage;
use rtc::peer_connection::state::{RTCIceConnectionState, RTCPeerConnectionState};
use rtc::peer_connection::transport::RTCIceCandidateInit;
use rtc::peer_connection::{RTCPeerConnection, RTCPeerConnectionBuilder};
use rtc::rtp_transceiver::RTCRtpSenderId;
use rtc::rtp_transceiver::rtp_sender::{
    RTCRtpCodec, RTCRtpCodecParameters, RTCRtpCodingParameters, RTCRtpEncodingParameters,
    RTCRtpHeaderExtensionCapability, RtpCodecKind,
};
use rtc::sansio::Protocol;

/// RFC 6464: the level of the audio in the packet, set by its sender.
pub const SSRC_AUDIO_LEVEL_URI: &str = "urn:ietf:params:rtp-hdrext:ssrc-audio-level";
/// RFC 6465: the levels of the sources a mixer mixed, one byte per CSRC.
pub const CSRC_AUDIO_LEVEL_URI: &str = "urn:ietf:params:rtp-hdrext:csrc-audio-level";

/// Whether a datagram is an RTP (not RTCP) packet (RFC 7983 demultiplexing,
/// RFC 5761 payload types): its arrival moves no timer.
pub fn is_rtp(data: &[u8]) -> bool {
    data.len() >= 12 && (128..=191).contains(&data[0]) && !(200..=206).contains(&(data[1] & 0x7F | 0x80))
}

/// Every RFC 6464 level byte, so a packet's level extension borrows one
/// instead of allocating it.
static LEVELS: [u8; 128] = {
    let mut l = [0u8; 128];
    let mut i = 0;
    while i < 128 {
        l[i] = i as u8;
        i += 1;
    }
    l
};

/// RTP timestamp units per 20 ms frame at 48 kHz.
const SAMPLES_PER_FRAME: u32 = 960;

/// One received Opus packet, decrypted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AudioPacket {
    /// RTP SSRC of the stream.
    pub ssrc: u32,
    /// RTP sequence number.
    pub seq: u16,
    /// RTP timestamp.
    pub timestamp: u32,
    /// The Opus payload.
    pub payload: Bytes,
    /// RFC 6464 level (0 loudest, 127 silence), when the sender set it.
    pub level: Option<u8>,
    /// The sources a mixer mixed into this packet (its CSRCs), with their
    /// RFC 6465 levels when the sender set them (127 otherwise).
    pub contributors: Vec<Contributor>,
}

/// A source mixed into a packet: its SSRC (an RTP CSRC) and its level
/// (RFC 6465: 0 loudest, 127 silence).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contributor {
    /// The source's SSRC, as the mixer received it.
    pub ssrc: u32,
    /// Its level in this packet.
    pub level: u8,
}

/// At most this many CSRCs in an RTP header (its CC field has 4 bits).
pub const MAX_CONTRIBUTORS: usize = 15;

/// An RTP packet shaped by a fuzz target: every field a sender controls
/// but the SSRC and payload type (webrtc-rs refuses others on its side).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
#[derive(Debug, Clone, Default)]
pub struct RawRtp {
    /// Sequence number.
    pub seq: u16,
    /// Timestamp.
    pub timestamp: u32,
    /// Marker bit.
    pub marker: bool,
    /// Padding bit (the payload's last byte then claims a padding length).
    pub padding: bool,
    /// CSRCs (at most 15 are kept).
    pub csrc: Vec<u32>,
    /// Header extensions: (even = ssrc-audio-level, odd = csrc-audio-level, value).
    pub extensions: Vec<(u8, Bytes)>,
    /// Payload.
    pub payload: Bytes,
}

/// A datagram to send.
#[derive(Debug)]
pub struct Transmit {
    /// Where to.
    pub to: SocketAddr,
    /// What.
    pub data: BytesMut,
}

/// Why an offer or answer could not be negotiated, or a call could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RtcError {
    /// The SDP is not something this side can negotiate with.
    #[error("the SDP could not be negotiated: {0}")]
    BadSdp(String),
    /// The SDP has no audio section, or none with Opus.
    #[error("the SDP has no Opus audio to exchange")]
    NoAudio,
    /// No peer with this id.
    #[error("no peer {0}")]
    UnknownPeer(crate::PeerId),
    /// The peer is not connected yet (or any more).
    #[error("the peer is not connected")]
    NotConnected,
    /// An RTP packet that must not be sent (a header extension value
    /// outside 1 to 16 bytes).
    #[error("not a packet to send: {0}")]
    BadPacket(&'static str),
    /// webrtc-rs failed in a way no input explains.
    #[error("webrtc: {0}")]
    Internal(String),
}

/// Sets a one-byte header extension (RFC 8285 §4.2: 1 to 16 bytes). Checked
/// here because webrtc-rs (rtc-rtp 0.21.1) accepts an empty value and then
/// panics marshalling it (`len - 1` underflows: found by the
/// `media_datagram` fuzz target), and would corrupt the header's id for one
/// longer than 16 bytes.
fn put_extension(header: &mut rtc::rtp::Header, id: u8, value: Bytes) -> Result<(), RtcError> {
    if value.is_empty() || value.len() > 16 {
        return Err(RtcError::BadPacket("a one-byte header extension carries 1 to 16 bytes"));
    }
    header.set_extension(id, value).map_err(internal)
}

pub(crate) fn internal(e: impl std::fmt::Display) -> RtcError {
    RtcError::Internal(e.to_string())
}

pub(crate) fn bad_sdp(e: impl std::fmt::Display) -> RtcError {
    RtcError::BadSdp(e.to_string())
}

/// Opus parameters registered on both ends: 48 kHz, in-band FEC.
pub(crate) const CLIENT_OPUS_FMTP: &str = "minptime=10;useinbandfec=1";

/// Added to the server's answer: DTX. A client's encoder then sends a
/// packet only every 400 ms while its user is silent, which in a large
/// room is most participants most of the time.
pub(crate) const SERVER_OPUS_DTX: &str = "usedtx=1";

/// Opus with the given SDP parameters.
fn opus_codec(fmtp: &str) -> RTCRtpCodec {
    RTCRtpCodec {
        mime_type: MIME_TYPE_OPUS.to_owned(),
        clock_rate: 48_000,
        channels: 2,
        sdp_fmtp_line: fmtp.to_owned(),
        rtcp_feedback: vec![],
    }
}

/// Opus (payload type 111 when we offer) and both audio-level extensions.
fn media_engine(fmtp: &str) -> Result<MediaEngine, RtcError> {
    let mut m = MediaEngine::default();
    m.register_codec(RTCRtpCodecParameters { rtp_codec: opus_codec(fmtp), payload_type: 111 }, RtpCodecKind::Audio)
        .map_err(internal)?;
    for uri in [SSRC_AUDIO_LEVEL_URI, CSRC_AUDIO_LEVEL_URI] {
        m.register_header_extension(RTCRtpHeaderExtensionCapability { uri: uri.to_owned() }, RtpCodecKind::Audio, None)
            .map_err(internal)?;
    }
    Ok(m)
}

/// A random value, e.g. an SSRC.
pub(crate) fn random_u32() -> Result<u32, RtcError> {
    let mut b = [0u8; 4];
    getrandom::fill(&mut b).map_err(internal)?;
    Ok(u32::from_be_bytes(b))
}

/// A peer connection as both ends of a tutti call use it: Opus with the
/// audio-level extensions, and RTCP reports as the only interceptor (no NACK
/// or TWCC for audio).
pub(crate) fn build_connection(
    settings: SettingEngine,
    certificates: Vec<RTCCertificate>,
    fmtp: &str,
    now: Instant,
) -> Result<RTCPeerConnection, RtcError> {
    let mut config = RTCConfigurationBuilder::new();
    if !certificates.is_empty() {
        config = config.with_certificates(certificates);
    }
    RTCPeerConnectionBuilder::new()
        .with_configuration(config.build())
        .with_setting_engine(settings)
        .with_media_engine(media_engine(fmtp)?)
        .with_interceptor_registry(configure_rtcp_reports(Registry::new()))
        .build(now)
        .map_err(internal)
}

/// Adds our one outgoing Opus track (on the offered audio transceiver when
/// answering) and returns its sender and SSRC.
pub(crate) fn add_audio_track(pc: &mut RTCPeerConnection, fmtp: &str) -> Result<(RTCRtpSenderId, u32), RtcError> {
    let ssrc = random_u32()?;
    let track = MediaStreamTrack::new(
        "tutti".to_owned(),
        "audio".to_owned(),
        "audio".to_owned(),
        RtpCodecKind::Audio,
        vec![RTCRtpEncodingParameters {
            rtp_coding_parameters: RTCRtpCodingParameters { ssrc: Some(ssrc), ..Default::default() },
            codec: opus_codec(fmtp),
            ..Default::default()
        }],
    );
    Ok((pc.add_track(track).map_err(bad_sdp)?, ssrc))
}

/// Adds our one host candidate and ends gathering (non-trickle).
pub(crate) fn add_host_candidate(pc: &mut RTCPeerConnection, addr: SocketAddr) -> Result<(), RtcError> {
    let candidate = format!("candidate:1 1 udp 2130706431 {} {} typ host", addr.ip(), addr.port());
    pc.add_local_candidate(RTCIceCandidateInit { candidate, ..Default::default() }).map_err(internal)?;
    pc.add_local_candidate(RTCIceCandidateInit::default()).map_err(internal)
}

/// The SDP of the local description just set.
pub(crate) fn local_sdp(pc: &RTCPeerConnection) -> Result<String, RtcError> {
    pc.local_description().map(|d| d.sdp).ok_or_else(|| internal("no local description"))
}

/// Where a peer's connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PeerState {
    /// Answered; ICE and DTLS under way.
    Connecting,
    /// ICE and DTLS are up.
    Connected,
    /// Failed or closed.
    Closed,
}

/// Why a peer's connection failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PeerFailure {
    /// ICE never connected.
    Ice,
    /// ICE connected, the DTLS handshake did not complete.
    Dtls,
    /// It was connected, then connectivity was lost (the client vanished).
    Lost,
}

/// An RTP packet as tutti reads it: the RFC 6464 level from the extension
/// `level_ext`, the contributors from the CSRCs with RFC 6465 levels from
/// `csrc_level_ext`.
fn audio_of(packet: rtc::rtp::Packet, level_ext: Option<u8>, csrc_level_ext: Option<u8>) -> AudioPacket {
    let header = &packet.header;
    let level = level_ext.and_then(|ext| header.get_extension(ext)).and_then(|b| b.first().map(|v| v & 0x7F));
    let contributors = if header.csrc.is_empty() {
        Vec::new()
    } else {
        let levels = csrc_level_ext.and_then(|ext| header.get_extension(ext));
        let level_of = |i: usize| levels.as_ref().and_then(|l| l.get(i)).map_or(127, |v| v & 0x7F);
        header.csrc.iter().enumerate().map(|(i, &ssrc)| Contributor { ssrc, level: level_of(i) }).collect()
    };
    AudioPacket {
        ssrc: header.ssrc,
        seq: header.sequence_number,
        timestamp: header.timestamp,
        payload: packet.payload,
        level,
        contributors,
    }
}

/// For fuzz targets: decrypted bytes as webrtc-rs parses them into an RTP
/// packet (`rtc::rtp::Packet::unmarshal`, as its SRTP layer does), then as
/// tutti reads it (audio-level extension ids 1 and 2).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub fn parse_rtp(bytes: &[u8]) -> Option<AudioPacket> {
    use rtc::shared::marshal::Unmarshal;
    let mut buf = bytes;
    let packet = rtc::rtp::Packet::unmarshal(&mut buf).ok()?;
    Some(audio_of(packet, Some(1), Some(2)))
}

/// For fuzz targets: decrypted bytes as webrtc-rs parses them into RTCP
/// packets (`rtc::rtcp::packet::unmarshal`, as its SRTP layer does).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub fn parse_rtcp(bytes: &[u8]) -> usize {
    let mut buf = bytes;
    rtc::rtcp::packet::unmarshal(&mut buf).map_or(0, |p| p.len())
}

/// What a peer connection reports, stripped to what audio needs.
pub(crate) enum PeerEvent {
    Connected,
    /// ICE or DTLS failed.
    Failed(PeerFailure),
    /// Closed by the remote side.
    Closed,
    Audio(AudioPacket),
}

/// One negotiated audio peer connection: the connection and our sending state.
pub(crate) struct Media {
    pub(crate) pc: RTCPeerConnection,
    sender: RTCRtpSenderId,
    ssrc: u32,
    payload_type: u8,
    /// Negotiated id of ssrc-audio-level (extmap ids hold for both directions).
    level_ext: Option<u8>,
    /// Negotiated id of csrc-audio-level.
    csrc_level_ext: Option<u8>,
    seq: u16,
    timestamp: u32,
    connected: bool,
    closed: bool,
    /// ICE reached connected (or completed) at some point.
    ice_up: bool,
}

impl Media {
    /// Wraps a connection whose offer/answer is done, reading the payload
    /// type and extension ids it negotiated.
    pub(crate) fn new(mut pc: RTCPeerConnection, sender: RTCRtpSenderId, ssrc: u32) -> Result<Self, RtcError> {
        let (payload_type, level_ext, csrc_level_ext) = {
            let mut s = pc.rtp_sender(sender).ok_or_else(|| internal("sender vanished"))?;
            let params = &s.get_parameters().rtp_parameters;
            let opus = params.codecs.iter().find(|c| c.rtp_codec.mime_type.eq_ignore_ascii_case(MIME_TYPE_OPUS));
            let ext = |uri: &str| {
                params.header_extensions.iter().find(|h| h.uri == uri).and_then(|h| u8::try_from(h.id).ok())
            };
            (
                opus.map(|c| c.payload_type).ok_or(RtcError::NoAudio)?,
                ext(SSRC_AUDIO_LEVEL_URI),
                ext(CSRC_AUDIO_LEVEL_URI),
            )
        };
        Ok(Self {
            pc,
            sender,
            ssrc,
            payload_type,
            level_ext,
            csrc_level_ext,
            seq: 0,
            timestamp: 0,
            connected: false,
            closed: false,
            ice_up: false,
        })
    }

    /// Where the connection stands.
    pub(crate) fn state(&self) -> PeerState {
        match (self.closed, self.connected) {
            (true, _) => PeerState::Closed,
            (false, true) => PeerState::Connected,
            (false, false) => PeerState::Connecting,
        }
    }

    /// Why a connection that failed now failed: where it had got to.
    pub(crate) fn failure_kind(&self) -> PeerFailure {
        match (self.connected, self.ice_up) {
            (true, _) => PeerFailure::Lost,
            (false, true) => PeerFailure::Dtls,
            (false, false) => PeerFailure::Ice,
        }
    }

    /// The SSRC we send with.
    pub(crate) fn ssrc(&self) -> u32 {
        self.ssrc
    }

    /// Whether RFC 6465 levels were negotiated.
    pub(crate) fn has_csrc_levels(&self) -> bool {
        self.csrc_level_ext.is_some()
    }

    /// Marks the connection closed without a goodbye (the peer vanished).
    /// Returns whether it was open.
    pub(crate) fn mark_closed(&mut self) -> bool {
        !std::mem::replace(&mut self.closed, true)
    }

    /// Whether ICE and DTLS are up.
    pub(crate) fn is_connected(&self) -> bool {
        self.connected && !self.closed
    }

    /// Writes one 20 ms Opus frame (own SSRC, sequence and timestamp; the
    /// RFC 6464 level when negotiated; the contributors as CSRCs, with their
    /// RFC 6465 levels when negotiated; at most [`MAX_CONTRIBUTORS`]).
    pub(crate) fn send_audio(
        &mut self,
        payload: Bytes,
        level: Option<u8>,
        contributors: &[Contributor],
        now: Instant,
    ) -> Result<(), RtcError> {
        if !self.is_connected() {
            return Err(RtcError::NotConnected);
        }
        let mut header = rtc::rtp::Header {
            version: 2,
            payload_type: self.payload_type,
            sequence_number: self.seq,
            timestamp: self.timestamp,
            ssrc: self.ssrc,
            ..Default::default()
        };
        if let (Some(ext), Some(level)) = (self.level_ext, level) {
            let l = usize::from(level.min(127));
            put_extension(&mut header, ext, Bytes::from_static(&LEVELS[l..=l]))?;
        }
        let contributors = &contributors[..contributors.len().min(MAX_CONTRIBUTORS)];
        if !contributors.is_empty() {
            header.csrc = contributors.iter().map(|c| c.ssrc).collect();
            if let Some(ext) = self.csrc_level_ext {
                let levels: Vec<u8> = contributors.iter().map(|c| c.level.min(127)).collect();
                put_extension(&mut header, ext, Bytes::from(levels))?;
            }
        }
        self.seq = self.seq.wrapping_add(1);
        self.timestamp = self.timestamp.wrapping_add(SAMPLES_PER_FRAME);
        let mut sender = self.pc.rtp_sender(self.sender).ok_or_else(|| internal("sender vanished"))?;
        sender.write_rtp(now, rtc::rtp::Packet { header, payload }).map_err(internal)
    }

    /// Moves what the connection has to send into `transmits`, and nothing
    /// else: all an RTP write produces. (A full [`Media::drain`] also walks
    /// every handler's timers, which an RTP write does not move: a tenth of
    /// the send path's cost.)
    pub(crate) fn flush(&mut self, transmits: &mut VecDeque<Transmit>) {
        while let Some(msg) = self.pc.poll_write() {
            transmits.push_back(Transmit { to: msg.transport.peer_addr, data: msg.message });
        }
    }

    /// Whether the packet just written was the first: its write may have
    /// started timers (RTCP sender reports), so drain fully.
    pub(crate) fn first_packet(&self) -> bool {
        self.seq == 1
    }

    #[cfg(feature = "fuzzing")]
    /// Writes an RTP packet as `raw` shapes it, on our SSRC and payload
    /// type (see [`RawRtp`]).
    pub(crate) fn send_raw_rtp(&mut self, raw: RawRtp, now: Instant) -> Result<(), RtcError> {
        if !self.is_connected() {
            return Err(RtcError::NotConnected);
        }
        let mut header = rtc::rtp::Header {
            version: 2,
            padding: raw.padding,
            marker: raw.marker,
            payload_type: self.payload_type,
            sequence_number: raw.seq,
            timestamp: raw.timestamp,
            ssrc: self.ssrc,
            csrc: raw.csrc.into_iter().take(MAX_CONTRIBUTORS).collect(),
            ..Default::default()
        };
        for (which, value) in raw.extensions {
            let id = if which % 2 == 0 { self.level_ext } else { self.csrc_level_ext };
            if let Some(id) = id {
                put_extension(&mut header, id, value)?;
            }
        }
        let mut sender = self.pc.rtp_sender(self.sender).ok_or_else(|| internal("sender vanished"))?;
        sender.write_rtp(now, rtc::rtp::Packet { header, payload: raw.payload }).map_err(internal)
    }

    #[cfg(feature = "fuzzing")]
    /// Writes `bytes` as one RTCP compound packet, as they are (SRTCP-protected).
    pub(crate) fn send_raw_rtcp(&mut self, bytes: Bytes, now: Instant) -> Result<(), RtcError> {
        if !self.is_connected() {
            return Err(RtcError::NotConnected);
        }
        let mut sender = self.pc.rtp_sender(self.sender).ok_or_else(|| internal("sender vanished"))?;
        sender.write_rtcp(now, vec![Box::new(rtc::rtcp::raw_packet::RawPacket(bytes))]).map_err(internal)
    }

    /// Moves what the connection has to send into `transmits`, reports its
    /// events, and returns its next deadline.
    pub(crate) fn drain(&mut self, transmits: &mut VecDeque<Transmit>, on: impl FnMut(PeerEvent)) -> Option<Instant> {
        self.drain_io(transmits, on);
        self.pc.poll_timeout()
    }

    /// [`Media::drain`] without the deadline: after an RTP packet, which
    /// moves no timer, asking every handler for its next timeout is wasted
    /// work on the hottest path.
    pub(crate) fn drain_io(&mut self, transmits: &mut VecDeque<Transmit>, mut on: impl FnMut(PeerEvent)) {
        self.flush(transmits);
        while let Some(event) = self.pc.poll_event() {
            if let RTCPeerConnectionEvent::OnIceConnectionStateChangeEvent(
                RTCIceConnectionState::Connected | RTCIceConnectionState::Completed,
            ) = event
            {
                self.ice_up = true;
            }
            if let RTCPeerConnectionEvent::OnConnectionStateChangeEvent(state) = event {
                match state {
                    RTCPeerConnectionState::Connected if !self.connected => {
                        self.connected = true;
                        on(PeerEvent::Connected);
                    }
                    RTCPeerConnectionState::Failed if !self.closed => {
                        let why = self.failure_kind();
                        self.closed = true;
                        on(PeerEvent::Failed(why));
                    }
                    RTCPeerConnectionState::Closed if !self.closed => {
                        self.closed = true;
                        on(PeerEvent::Closed);
                    }
                    _ => {}
                }
            }
        }
        while let Some(msg) = self.pc.poll_read() {
            if let RTCMessage::RtpPacket(_, packet) = msg.message {
                on(PeerEvent::Audio(audio_of(packet, self.level_ext, self.csrc_level_ext)));
            }
        }
    }

    /// Lets `frames` 20 ms frames pass unsent (DTX): the next packet's
    /// timestamp shows the time that went by.
    pub(crate) fn skip_frames(&mut self, frames: u32) {
        self.timestamp = self.timestamp.wrapping_add(SAMPLES_PER_FRAME.wrapping_mul(frames));
    }

    /// Closes the connection; its goodbye (DTLS close_notify) goes to `transmits`.
    pub(crate) fn close(&mut self, transmits: &mut VecDeque<Transmit>) {
        let _ = self.pc.close();
        self.closed = true;
        self.flush(transmits);
    }
}
