//! What both ends of a call share: the Opus codec and header extensions we
//! negotiate, sending RTP, and draining a peer connection's output.
//!
//! Outgoing RTP takes one of two paths, chosen per peer at its first packet
//! and kept for the life of its SSRC (so its sequence number and SRTP
//! rollover counter live in one place):
//!
//! - **rtc**: an `rtp::Packet` through webrtc-rs's write pipeline
//!   (interceptors, SRTP context, ICE handler), as before;
//! - **lean** ([`SendPath::Lean`]): the packet is built straight into its
//!   datagram buffer and protected in place by tutti's own
//!   [`crate::srtp::SrtpContext`], keyed from the DTLS exporter
//!   ([`crate::keys`]); tutti then sends the RTCP sender reports for that
//!   SSRC itself, through webrtc-rs (which keeps SRTCP).
//!
//! Incoming RTP on an established peer takes a lean path as well, on the
//! server (`Acceptor::set_lean_receive`) and on a client
//! ([`Media::read_lean`]): opened by tutti's own
//! [`crate::srtp::SrtpReceiver`] and parsed straight into an
//! [`AudioPacket`], webrtc-rs keeping ICE, DTLS and RTCP. What was received
//! is then reported by us ([`Media::set_own_reports`]: a reception report
//! block on our RTCP every [`REPORT_INTERVAL`]), webrtc-rs's
//! receiver-report interceptor being left out of such a connection.
//!
//! Once the call is up, a server connection may drop webrtc-rs's peer
//! altogether ([`Media::retire`]): see the crate docs.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use rtc::interceptor::{
    Attribute, Interceptor, Packet as InterceptorPacket, ReceiverReportBuilder, SenderReportBuilder, Slot, StreamInfo,
    TaggedPacket,
};
use rtc::media_stream::MediaStreamTrack;
use rtc::peer_connection::certificate::RTCCertificate;
use rtc::peer_connection::configuration::RTCConfigurationBuilder;
use rtc::peer_connection::configuration::interceptor_registry::Registry;
use rtc::peer_connection::configuration::media_engine::{MIME_TYPE_OPUS, MediaEngine};
use rtc::peer_connection::configuration::setting_engine::SettingEngine;
use rtc::peer_connection::event::RTCPeerConnectionEvent;
use rtc::peer_connection::message::RTCMessage;
use rtc::peer_connection::sdp::RTCSessionDescription;
use rtc::peer_connection::state::{RTCIceConnectionState, RTCPeerConnectionState};
use rtc::peer_connection::transport::RTCDtlsRole;
use rtc::peer_connection::transport::RTCDtlsTransportState;
use rtc::peer_connection::transport::RTCIceCandidateInit;
use rtc::peer_connection::{RTCPeerConnection, RTCPeerConnectionBuilder};
use rtc::rtcp::receiver_report::ReceiverReport;
use rtc::rtcp::sender_report::SenderReport;
use rtc::rtp_transceiver::RTCRtpSenderId;
use rtc::rtp_transceiver::rtp_sender::{
    RTCRtpCodec, RTCRtpCodecParameters, RTCRtpCodingParameters, RTCRtpEncodingParameters,
    RTCRtpHeaderExtensionCapability, RtpCodecKind,
};
use rtc::sansio::Protocol;
use rtc::shared::TransportProtocol;
#[cfg(feature = "fuzzing")]
use rtc::shared::marshal::{Marshal, MarshalSize};
use rtc::statistics::StatsSelector;

use crate::alert::{self, DtlsAlerts};
use crate::keys::ExporterSlot;
use crate::reception::Reception;
use crate::srtp::{SrtcpContext, SrtcpReceiver, SrtpContext, SrtpError, SrtpKeys, SrtpProfile, SrtpReceiver};
use crate::stun::{ANSWER_MAX, CheckAnswerer};

/// RFC 6464: the level of the audio in the packet, set by its sender.
pub const SSRC_AUDIO_LEVEL_URI: &str = "urn:ietf:params:rtp-hdrext:ssrc-audio-level";
/// RFC 6465: the levels of the sources a mixer mixed, one byte per CSRC.
pub const CSRC_AUDIO_LEVEL_URI: &str = "urn:ietf:params:rtp-hdrext:csrc-audio-level";

/// Whether a datagram is an RTP (not RTCP) packet (RFC 7983 demultiplexing,
/// RFC 5761 payload types): its arrival moves no timer.
pub fn is_rtp(data: &[u8]) -> bool {
    data.len() >= 12 && (128..=191).contains(&data[0]) && !is_rtcp_type(data[1])
}

/// Whether a datagram is RTCP, by the same rule as [`is_rtp`].
pub(crate) fn is_rtcp(data: &[u8]) -> bool {
    data.len() >= 8 && (128..=191).contains(&data[0]) && is_rtcp_type(data[1])
}

/// RFC 5761 §4: an RTP/RTCP packet's second byte is RTCP's packet type
/// 200–206, or RTP's marker bit and the payload types 72–78 it rules out.
fn is_rtcp_type(second: u8) -> bool {
    (200..=206).contains(&(second | 0x80))
}

/// Whether a datagram is a DTLS record (RFC 7983: first byte 20 to 63).
pub(crate) fn is_dtls(data: &[u8]) -> bool {
    data.first().is_some_and(|b| (20..=63).contains(b))
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
    /// RTP marker bit: the first packet of a talkspurt (after DTX or a gap).
    pub marker: bool,
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
    /// Over TCP (ICE-TCP, RFC 6544: framed per RFC 4571 on the connection
    /// from `to`); else a UDP datagram.
    pub tcp: bool,
}

/// Datagram buffers that were sent, kept for the next lean packets, so that
/// the lean send path allocates nothing per packet: the owner of the queue
/// hands each sent [`Transmit`]'s buffer back (`Mux::recycle`,
/// `ClientPeer::recycle`). Bounded: a buffer past [`Spare::MAX`], or one
/// bigger than a datagram ever is, is dropped.
#[derive(Debug, Default)]
pub(crate) struct Spare(Vec<BytesMut>);

impl Spare {
    /// Buffers kept at most: a few ticks' worth of one I/O thread's packets.
    const MAX: usize = 4096;
    /// A new buffer's capacity: any lean audio packet fits.
    const CAPACITY: usize = 256;
    /// A buffer of more capacity is not kept (a TCP frame, a DTLS flight).
    const KEEP_MAX: usize = 2048;

    /// An empty buffer of at least `len` bytes of capacity.
    pub(crate) fn take(&mut self, len: usize) -> BytesMut {
        match self.0.pop() {
            Some(mut buf) => {
                buf.reserve(len);
                buf
            }
            None => BytesMut::with_capacity(len.max(Self::CAPACITY)),
        }
    }

    /// A sent datagram's buffer, kept when there is room.
    pub(crate) fn give(&mut self, mut buf: BytesMut) {
        if self.0.len() >= Self::MAX || buf.capacity() > Self::KEEP_MAX {
            return;
        }
        buf.clear();
        // Shared with a `Bytes` still alive, or small: not worth keeping.
        if buf.try_reclaim(Self::CAPACITY) {
            self.0.push(buf);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
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
///
/// With `receiver_reports` false webrtc-rs's receiver-report interceptor is
/// left out: the connection's [`Media`] then reports what it received itself
/// ([`Media::set_own_reports`]); the lean receive path reads audio that
/// interceptor would never see.
pub(crate) fn build_connection(
    settings: SettingEngine,
    certificates: Vec<RTCCertificate>,
    fmtp: &str,
    receiver_reports: bool,
    now: Instant,
) -> Result<RTCPeerConnection, RtcError> {
    let mut config = RTCConfigurationBuilder::new();
    if !certificates.is_empty() {
        config = config.with_certificates(certificates);
    }
    let registry =
        Registry::new().with(Slot::SenderReport, SenderReportBuilder::new().with_interval(REPORT_INTERVAL).build());
    let registry = if receiver_reports {
        registry.with(Slot::ReceiverReport, ReceiverReportBuilder::new().with_interval(REPORT_INTERVAL).build())
    } else {
        registry
    };
    let registry = registry.with(Slot::Custom(20_000), DeliverSenderReports::default());
    RTCPeerConnectionBuilder::new()
        .with_configuration(config.build())
        .with_setting_engine(settings)
        .with_media_engine(media_engine(fmtp)?)
        .with_interceptor_registry(registry)
        .build(now)
        .map_err(internal)
}

/// An interceptor that lets received RTCP through to us (webrtc-rs's chain
/// ends inbound RTCP unless one asks): the peer's last sender report,
/// [`SenderReportInfo`], is what tells how much its sender sent; and any
/// authenticated RTCP shows that a peer that sends no audio has the keys
/// (see [`Media::retire`]). One compound packet every few seconds a peer.
#[derive(Default)]
struct DeliverSenderReports {
    reads: VecDeque<TaggedPacket>,
    writes: VecDeque<TaggedPacket>,
}

impl Protocol<TaggedPacket, TaggedPacket, ()> for DeliverSenderReports {
    type Rout = TaggedPacket;
    type Wout = TaggedPacket;
    type Eout = ();
    type Error = rtc::shared::error::Error;
    type Time = Instant;

    fn handle_read(&mut self, mut msg: TaggedPacket) -> Result<(), Self::Error> {
        if let InterceptorPacket::Rtcp(_) = &msg.message.packet {
            msg.message.add(Attribute::DeliverToApplication);
        }
        self.reads.push_back(msg);
        Ok(())
    }

    fn poll_read(&mut self) -> Option<TaggedPacket> {
        self.reads.pop_front()
    }

    fn handle_write(&mut self, msg: TaggedPacket) -> Result<(), Self::Error> {
        self.writes.push_back(msg);
        Ok(())
    }

    fn poll_write(&mut self) -> Option<TaggedPacket> {
        self.writes.pop_front()
    }

    fn handle_event(&mut self, _: ()) -> Result<(), Self::Error> {
        Ok(())
    }

    fn poll_event(&mut self) -> Option<()> {
        None
    }

    fn handle_timeout(&mut self, _: Instant) -> Result<(), Self::Error> {
        Ok(())
    }

    fn poll_timeout(&mut self) -> Option<Instant> {
        None
    }

    fn close(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

impl Interceptor for DeliverSenderReports {
    fn bind_local_stream(&mut self, _: &StreamInfo) {}
    fn unbind_local_stream(&mut self, _: &StreamInfo) {}
    fn bind_remote_stream(&mut self, _: &StreamInfo) {}
    fn unbind_remote_stream(&mut self, _: &StreamInfo) {}
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
    add_candidates(pc, [udp_candidate(1, addr, 0)])
}

/// The SDP candidate line (without `a=`) of a UDP host candidate; `rank` 0
/// is the preferred address (priority 2130706431, RFC 8445 §5.1.2.1 with
/// local preference 65535 − rank).
pub(crate) fn udp_candidate(foundation: u32, addr: SocketAddr, rank: u16) -> String {
    let priority = (126u32 << 24) + ((65535 - u32::from(rank)) << 8) + 255;
    format!("candidate:{foundation} 1 udp {priority} {} {} typ host", addr.ip(), addr.port())
}

/// Adds these candidate lines and ends gathering (non-trickle).
pub(crate) fn add_candidates(
    pc: &mut RTCPeerConnection,
    lines: impl IntoIterator<Item = String>,
) -> Result<(), RtcError> {
    for candidate in lines {
        pc.add_local_candidate(RTCIceCandidateInit { candidate, ..Default::default() }).map_err(internal)?;
    }
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
    let rtc::rtp::Packet { header, payload } = packet;
    let fields = RtpFields {
        ssrc: header.ssrc,
        seq: header.sequence_number,
        timestamp: header.timestamp,
        marker: header.marker,
    };
    audio_from(fields, payload, header.csrc.iter().copied(), |id| header.get_extension(id), level_ext, csrc_level_ext)
}

/// The fixed RTP header fields an [`AudioPacket`] keeps.
struct RtpFields {
    ssrc: u32,
    seq: u16,
    timestamp: u32,
    marker: bool,
}

/// An [`AudioPacket`] from a parsed RTP packet, whichever parser read it
/// (webrtc-rs's for [`audio_of`], tutti's for [`Media::read_lean`]): the
/// RFC 6464 level from extension `level_ext`, the contributors from the
/// CSRCs with RFC 6465 levels from `csrc_level_ext` (127 when missing).
fn audio_from<E: AsRef<[u8]>>(
    fields: RtpFields,
    payload: Bytes,
    csrc: impl ExactSizeIterator<Item = u32>,
    extension: impl Fn(u8) -> Option<E>,
    level_ext: Option<u8>,
    csrc_level_ext: Option<u8>,
) -> AudioPacket {
    let level = level_ext.and_then(&extension).and_then(|b| b.as_ref().first().map(|v| v & 0x7F));
    let contributors = if csrc.len() == 0 {
        Vec::new()
    } else {
        let levels = csrc_level_ext.and_then(&extension);
        let level_of = |i: usize| levels.as_ref().and_then(|l| l.as_ref().get(i)).map_or(127, |v| v & 0x7F);
        csrc.enumerate().map(|(i, ssrc)| Contributor { ssrc, level: level_of(i) }).collect()
    };
    AudioPacket {
        ssrc: fields.ssrc,
        seq: fields.seq,
        timestamp: fields.timestamp,
        marker: fields.marker,
        payload,
        level,
        contributors,
    }
}

/// The value of header extension `id` in the RTP header `header` (RFC 8285
/// one-byte or two-byte form), as webrtc-rs's `Header::get_extension` finds it.
fn rtp_extension(header: &[u8], id: u8) -> Option<&[u8]> {
    let cc = usize::from(header.first()? & 0x0F);
    if header[0] & 0x10 == 0 {
        return None;
    }
    let at = 12 + 4 * cc;
    let profile = u16::from_be_bytes([*header.get(at)?, *header.get(at + 1)?]);
    let words = usize::from(u16::from_be_bytes([*header.get(at + 2)?, *header.get(at + 3)?]));
    let block = header.get(at + 4..at + 4 + 4 * words)?;
    let mut i = 0;
    // Each turn consumes at least one byte of a bounded block.
    while i < block.len() {
        let b = block[i];
        if b == 0 {
            i += 1;
            continue;
        }
        let (ext, len, start) = match profile {
            0xBEDE if b >> 4 == 15 => return None,
            0xBEDE => (b >> 4, usize::from(b & 0x0F) + 1, i + 1),
            0x1000 => (b, usize::from(*block.get(i + 1)?), i + 2),
            _ => return None,
        };
        let value = block.get(start..start + len)?;
        if ext == id {
            return Some(value);
        }
        i = start + len;
    }
    None
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

/// How a peer's outgoing RTP leaves (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendPath {
    /// Nothing sent yet: the path is chosen at the first packet, which can
    /// only go out once ICE and DTLS are up.
    Undecided {
        /// Whether the lean path will be tried.
        lean: bool,
    },
    /// webrtc-rs's write pipeline (the lean path was off, or the SRTP keys
    /// could not be had).
    Rtc,
    /// tutti's own RTP and SRTP, with this profile.
    Lean(SrtpProfile),
}

/// How a client's received RTP is read (see [`crate::ClientPeer::set_lean_receive`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceivePath {
    /// Nothing read on the lean path yet: it is tried at the first SRTP
    /// packet once ICE and DTLS are up.
    Undecided {
        /// Whether the lean path will be tried.
        lean: bool,
    },
    /// webrtc-rs's read pipeline (the lean path is off, its keys could not
    /// be had, or nothing authenticated on it).
    Rtc,
    /// tutti's own SRTP receive, with this profile.
    Lean(SrtpProfile),
}

/// What the lean receive path did (see [`crate::ClientPeer::receive_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiveStats {
    /// RTP packets read on the lean path and passed on.
    pub lean: u64,
    /// Packets the lean path dropped: failed authentication, replayed,
    /// older than the replay window, or malformed once decrypted.
    pub dropped: u64,
}

/// What [`Media::read_lean`] made of a datagram.
pub(crate) enum LeanRead {
    /// An authentic new audio packet.
    Audio(AudioPacket),
    /// SRTP that must not be passed on (counted in [`ReceiveStats::dropped`]);
    /// not for webrtc-rs either, whose own replay state never saw it.
    Dropped,
    /// Not the lean path's: for webrtc-rs.
    Rtc,
}

/// Packets that fail on a fresh lean receiver, none authenticating, before
/// it gives up for this DTLS session and leaves reading to webrtc-rs (keys
/// that do not fit, or a first packet whose rollover counter it guessed
/// wrong: the sender's sequence number wrapped before we were connected).
const LEAN_RECEIVE_GIVE_UP: u32 = 16;

/// The lean receive path's state for one DTLS session.
struct LeanReceiver {
    srtp: SrtpReceiver,
    /// The [`ExporterSlot`] generation the keys came from.
    generation: u64,
    /// Some packet authenticated with these keys.
    opened: bool,
    /// Packets refused before any authenticated.
    failures: u32,
}

/// The last RTCP sender report (RFC 3550 §6.4.1) received from the remote side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderReportInfo {
    /// The sender's SSRC.
    pub ssrc: u32,
    /// Its NTP timestamp (seconds since 1900 in the high 32 bits).
    pub ntp_time: u64,
    /// The RTP timestamp of the same instant.
    pub rtp_time: u32,
    /// RTP packets it sent so far.
    pub packet_count: u32,
    /// Payload octets it sent so far.
    pub octet_count: u32,
    /// Its first reception report block: what it got of our stream.
    pub reception: Option<ReceptionBlock>,
}

/// A reception report block (RFC 3550 §6.4.1): what the remote side got of
/// one of our streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceptionBlock {
    /// The stream reported on (our SSRC).
    pub ssrc: u32,
    /// Lost since the previous report, in 1/256.
    pub fraction_lost: u8,
    /// Lost in all (24 bits).
    pub total_lost: u32,
    /// The extended highest sequence number received (wraps in the high 16 bits).
    pub highest_sequence: u32,
    /// Interarrival jitter, in timestamp units.
    pub jitter: u32,
}

/// How often a connection sends its RTCP report (sender report with a
/// reception block, or a receiver report): every 5 s, as browsers do for
/// audio (Chrome's default audio report interval; RFC 3550 §6.2's minimum),
/// on both paths (webrtc-rs's report interceptors are set to it too).
pub(crate) const REPORT_INTERVAL: Duration = Duration::from_secs(5);

/// The first report goes out this soon after the first packet (RFC 3550
/// §6.2 halves the first interval; a receiver learns the RTP–NTP mapping
/// early).
const FIRST_REPORT: Duration = Duration::from_secs(1);

/// Seconds from the NTP epoch (1900) to the Unix epoch (1970).
const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

/// The outgoing stream's numbering, whichever path carries it: sequence
/// numbers (+1 per packet sent) and the rollover counter, timestamps from
/// the sender's clock tick (20 ms), the marker after a gap.
#[derive(Debug, Clone, Copy)]
struct Numbering {
    /// The next packet's sequence number.
    seq: u16,
    /// Times `seq` wrapped (RFC 3711 ROC); for the lean path's SRTP index.
    roc: u32,
    /// Random per stream (RFC 3550 §5.1).
    ts_offset: u32,
    /// The tick a packet sent without one is given.
    next_tick: u64,
    /// The tick of the last packet sent.
    last_tick: Option<u64>,
}

/// One packet's header fields.
struct PacketFields {
    seq: u16,
    roc: u32,
    timestamp: u32,
    marker: bool,
}

impl Numbering {
    fn new() -> Result<Self, RtcError> {
        let r = random_u32()?;
        Ok(Self { seq: (r >> 16) as u16, roc: 0, ts_offset: random_u32()?, next_tick: 0, last_tick: None })
    }

    /// The fields of the packet for `tick`: timestamp = tick × 960 + offset;
    /// marker on the first packet and after any gap.
    fn slot(&self, tick: u64) -> PacketFields {
        PacketFields {
            seq: self.seq,
            roc: self.roc,
            timestamp: (tick.wrapping_mul(u64::from(SAMPLES_PER_FRAME)) as u32).wrapping_add(self.ts_offset),
            marker: self.last_tick.is_none_or(|t| tick != t.wrapping_add(1)),
        }
    }

    /// The packet for `tick` went out.
    fn sent(&mut self, tick: u64) {
        self.seq = self.seq.wrapping_add(1);
        if self.seq == 0 {
            self.roc = self.roc.wrapping_add(1);
        }
        self.last_tick = Some(tick);
        self.next_tick = tick.wrapping_add(1);
    }
}

/// The lean path's state for one peer's SSRC: its SRTP context, and what
/// its sender reports say.
struct LeanSender {
    srtp: SrtpContext,
    /// The [`ExporterSlot`] generation the keys came from.
    generation: u64,
    packets: u32,
    octets: u32,
    /// RTP timestamp and instant of the last packet (the SR's RTP↔NTP mapping).
    last: Option<(u32, Instant)>,
    next_report: Option<Instant>,
}

/// Where the lean sender's keys come from: the tap's exporter capture, the
/// profile and DTLS role from webrtc-rs's transport statistics.
fn lean_keys(pc: &mut RTCPeerConnection, slot: &ExporterSlot, now: Instant) -> Option<(u64, SrtpKeys)> {
    lean_key_pair(pc, slot, now).map(|(generation, local, _)| (generation, local))
}

/// Both directions' keys: (generation, local, remote).
fn lean_key_pair(pc: &mut RTCPeerConnection, slot: &ExporterSlot, now: Instant) -> Option<(u64, SrtpKeys, SrtpKeys)> {
    dtls_session(pc, now).and_then(|session| session.keys(slot))
}

/// What webrtc-rs's transport statistics tell of the DTLS session.
struct DtlsSession {
    profile: SrtpProfile,
    /// Our DTLS role.
    is_client: bool,
    /// Its records are ones the `alert` module reads and writes.
    alerts_readable: bool,
}

/// The DTLS session's profile and roles, once DTLS is up (one statistics read).
fn dtls_session(pc: &mut RTCPeerConnection, now: Instant) -> Option<DtlsSession> {
    let report = pc.get_stats(now, StatsSelector::None);
    let transport = report.transport()?;
    let is_client = match transport.dtls_role {
        RTCDtlsRole::Client => true,
        RTCDtlsRole::Server => false,
        _ => return None,
    };
    Some(DtlsSession {
        profile: SrtpProfile::from_stats_name(&transport.srtp_cipher)?,
        is_client,
        alerts_readable: alert::suite_supported(&transport.dtls_cipher),
    })
}

impl DtlsSession {
    /// Both directions' SRTP keys from the exporter capture: (generation, local, remote).
    fn keys(&self, slot: &ExporterSlot) -> Option<(u64, SrtpKeys, SrtpKeys)> {
        let (generation, material) = slot.keying_material(self.profile.keying_material_len())?;
        let (local, remote) = SrtpKeys::from_keying_material(self.profile, &material, self.is_client).ok()?;
        Some((generation, local, remote))
    }
}

/// The one-byte header extension block (RFC 8285 §4.2) for these elements,
/// written after the fixed header and CSRCs: (id, value) with 1 to 16 bytes.
fn put_one_byte_extensions(buf: &mut BytesMut, elements: &[(u8, &[u8])]) {
    let body: usize = elements.iter().map(|(_, v)| 1 + v.len()).sum();
    let words = body.div_ceil(4);
    buf.extend_from_slice(&[0xBE, 0xDE]);
    // At most 2 elements of at most 16 bytes: a handful of words.
    buf.extend_from_slice(&(words as u16).to_be_bytes());
    for (id, value) in elements {
        buf.extend_from_slice(&[(id << 4) | (value.len() as u8 - 1)]);
        buf.extend_from_slice(value);
    }
    buf.extend_from_slice(&[0u8; 3][..words * 4 - body]);
}

/// How often, at most, a connected peer's timers run. Connected, they are
/// ICE liveness (webrtc-rs asks every 200 ms, whatever its keepalive and
/// timeouts: a walk of every handler, 5 times a second per peer) and RTCP
/// reports (every second): nothing there needs a finer grain than a second.
/// The handshake's retransmissions (not connected yet) and ICE checks
/// (connecting, or restarting) keep their own times.
pub(crate) const CONNECTED_TIMER_GRAIN: Duration = Duration::from_secs(1);

/// A connected server peer is retired ([`Media::retire`]) this long after
/// it connected at the earliest (and at its next timer run, within a
/// second): webrtc-rs's handshake is over (the client's authenticated media
/// or RTCP says it has our last flight). Short, because the handshakes in
/// flight during a wave of joins are what the allocator keeps afterwards:
/// 0.5 s against 2 s left ~6 KiB less RSS per participant (400 pion clients).
pub(crate) const RETIRE_AFTER: Duration = Duration::from_millis(500);

/// SRTCP indexes left unused between webrtc-rs's last report and our first
/// after a retirement (we count what it sent; the margin covers nothing
/// but is cheap: the receiver's replay window only moves forward).
const SRTCP_INDEX_MARGIN: u32 = 16;

/// What a retired connection keeps once webrtc-rs's peer is dropped: the
/// call's SRTCP both ways, its DTLS alerts, and the answer for ICE restarts.
/// RTP both ways is the lean paths', consent checks the [`CheckAnswerer`]'s.
struct Retired {
    srtcp: SrtcpContext,
    srtcp_rx: SrtcpReceiver,
    alerts: DtlsAlerts,
    /// The SDP answer the client has: an ICE restart gets it again (our
    /// ufrag, password, certificate and candidate are fixed per peer), its
    /// `o=` version one higher. Boxed: no spare capacity, kept for the call.
    answer: Box<str>,
}

/// What [`Media::read_retired`] made of a datagram.
pub(crate) enum RetiredRead {
    /// Authentic RTCP: the peer is alive.
    Rtcp,
    /// An authentic close_notify or fatal alert: the call is over.
    Closed,
    /// Nothing authentic (counted by the caller as nobody's).
    Nothing,
}

/// One negotiated audio peer connection: the connection and our sending state.
pub(crate) struct Media {
    /// webrtc-rs's connection; `None` once retired ([`Media::retire`]).
    pub(crate) pc: Option<Box<RTCPeerConnection>>,
    retired: Option<Box<Retired>>,
    /// Whether to retire webrtc-rs's connection once the call is up (servers).
    retire_wanted: bool,
    /// The first timer run after the connection came up.
    connected_at: Option<Instant>,
    /// SRTCP datagrams webrtc-rs sent: where our SRTCP index starts after it.
    rtcp_sent: u32,
    /// webrtc-rs authenticated RTCP from the peer (it has the keys: its
    /// handshake is done, even if it sends no audio).
    remote_rtcp: bool,
    sender: RTCRtpSenderId,
    ssrc: u32,
    payload_type: u8,
    /// Negotiated id of ssrc-audio-level (extmap ids hold for both directions).
    level_ext: Option<u8>,
    /// Negotiated id of csrc-audio-level.
    csrc_level_ext: Option<u8>,
    numbering: Numbering,
    /// Whether the lean path is wanted, until the first packet decides.
    lean_wanted: bool,
    /// Set at the first packet: `None` is webrtc-rs's path.
    decided: bool,
    lean: Option<Box<LeanSender>>,
    /// DTLS exported new keys since the lean sender took its own: it takes
    /// them before its next packet. Set by [`Media::drain_io`] (keys change
    /// only while webrtc-rs reads a handshake), so that a send reads a flag
    /// of its own and not the shared capture (a cache miss per packet).
    rekey_pending: bool,
    /// The DTLS exporter capture for this connection.
    keys: Arc<ExporterSlot>,
    /// Where webrtc-rs last sent a non-STUN datagram: the selected
    /// candidate pair's remote address, which the lean path sends to. Known
    /// once DTLS is done; should the pair change, the next RTCP report
    /// (at most a second later) moves it (webrtc-rs announces a new
    /// selected pair in no public event).
    remote: Option<SocketAddr>,
    /// The source of the SRTP/SRTCP datagram being read (set by the mux
    /// before handing it over): once webrtc-rs authenticates and decrypts
    /// it, the lean path follows the peer there (a client that moved and
    /// restarted ICE sends from its new address at once, while webrtc-rs's
    /// own next datagram may be a second away).
    arrived_from: Option<(SocketAddr, bool)>,
    /// Whether `remote` is reached over TCP (the selected pair's protocol).
    remote_tcp: bool,
    /// What the lean receive path got of the remote stream: the reception
    /// report block of our RTCP (webrtc-rs's receiver-report interceptor
    /// never sees those packets, and is left out of such a connection).
    reception: Option<Reception>,
    /// When the next reception report is due.
    next_receiver_report: Option<Instant>,
    /// When the connection's timers last ran (see [`CONNECTED_TIMER_GRAIN`]).
    timers_ran: Instant,
    /// An instant and the wall-clock time then: NTP times of sender reports.
    wall: (Instant, SystemTime),
    last_sender_report: Option<SenderReportInfo>,
    connected: bool,
    closed: bool,
    /// A DTLS record was read since the last drain (after the handshake,
    /// perhaps the peer's close_notify: see [`Media::drain_io`]).
    dtls_read: bool,
    /// ICE reached connected (or completed) at some point.
    ice_up: bool,
    /// ICE is connected (or completed) now: not checking, as during a restart.
    ice_steady: bool,
    /// Whether received SRTP is to be read on the lean path.
    lean_receive: bool,
    /// The connection has no receiver-report interceptor: the audio it
    /// receives, on either path, is reported by us ([`Media::note_received`]).
    own_reports: bool,
    lean_rx: Option<Box<LeanReceiver>>,
    /// The key generation the lean receive path gave up for.
    lean_rx_off: Option<u64>,
    rx_stats: ReceiveStats,
    /// Consent checks answered without webrtc-rs ([`Media::answer_check`]).
    checks: Option<Box<LeanChecks>>,
}

/// A connection's consent checks, answered on the lean receive path: all
/// but one every `feed_every`, which webrtc-rs's agent answers, so that it
/// sees the peer alive (its disconnect timeout is longer; see `Acceptor::accept`).
#[derive(Debug)]
struct LeanChecks {
    answerer: CheckAnswerer,
    feed_every: Duration,
    /// Until then every check is webrtc-rs's: after a restart, its agent
    /// takes the new credentials' checks (and a nomination) itself, while
    /// its state still says connected.
    all_to_agent_until: Option<Instant>,
    /// The last authenticated check webrtc-rs got: when, from where, over TCP.
    fed: Option<(Instant, SocketAddr, bool)>,
}

impl Media {
    /// Wraps a connection whose offer/answer is done, reading the payload
    /// type and extension ids it negotiated. `keys` is the exporter capture
    /// of its crypto provider; `lean` whether to try the lean send path.
    pub(crate) fn new(
        mut pc: RTCPeerConnection,
        sender: RTCRtpSenderId,
        ssrc: u32,
        keys: Arc<ExporterSlot>,
        lean: bool,
        now: Instant,
    ) -> Result<Self, RtcError> {
        let (payload_type, level_ext, csrc_level_ext) = {
            let mut s = pc.rtp_sender(sender).ok_or_else(|| internal("sender vanished"))?;
            let params = &s.get_parameters().rtp_parameters;
            let opus = params.codecs.iter().find(|c| c.rtp_codec.mime_type.eq_ignore_ascii_case(MIME_TYPE_OPUS));
            let ext = |uri: &str| {
                params.header_extensions.iter().find(|h| h.uri == uri).and_then(|h| u8::try_from(h.id).ok())
            };
            (
                opus.map(|c| c.payload_type).ok_or(RtcError::NoAudio)?,
                // One-byte extension ids are 1 to 14 (RFC 8285 §4.2).
                ext(SSRC_AUDIO_LEVEL_URI).filter(|id| (1..=14).contains(id)),
                ext(CSRC_AUDIO_LEVEL_URI).filter(|id| (1..=14).contains(id)),
            )
        };
        Ok(Self {
            pc: Some(Box::new(pc)),
            retired: None,
            retire_wanted: false,
            connected_at: None,
            rtcp_sent: 0,
            remote_rtcp: false,
            sender,
            ssrc,
            payload_type,
            level_ext,
            csrc_level_ext,
            numbering: Numbering::new()?,
            lean_wanted: lean,
            decided: false,
            lean: None,
            rekey_pending: false,
            keys,
            remote: None,
            arrived_from: None,
            dtls_read: false,
            remote_tcp: false,
            reception: None,
            next_receiver_report: None,
            timers_ran: now,
            wall: (now, SystemTime::now()),
            last_sender_report: None,
            connected: false,
            closed: false,
            ice_up: false,
            ice_steady: false,
            lean_receive: false,
            own_reports: false,
            lean_rx: None,
            lean_rx_off: None,
            rx_stats: ReceiveStats::default(),
            checks: None,
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

    /// Reads what a lean send reads first in each place it reads (the
    /// connection's flags and address, the stream's numbering, the lean
    /// sender and its SRTP context), to have it in cache (see
    /// [`crate::Mux::warm`]). Changes nothing.
    pub(crate) fn touch_send_state(&self) -> (bool, u64, Option<SocketAddr>, Option<(u32, u8)>) {
        let n = &self.numbering;
        let numbering = u64::from(n.seq) ^ u64::from(n.roc) ^ u64::from(n.ts_offset) ^ n.next_tick;
        (
            self.is_connected() && !self.rekey_pending,
            numbering,
            self.remote,
            self.lean.as_ref().map(|l| (l.packets, l.srtp.touch())),
        )
    }

    /// The path outgoing RTP takes.
    pub(crate) fn send_path(&self) -> SendPath {
        match (&self.lean, self.decided) {
            (Some(l), _) => SendPath::Lean(l.srtp.profile()),
            (None, true) => SendPath::Rtc,
            (None, false) => SendPath::Undecided { lean: self.lean_wanted },
        }
    }

    /// Asks for the lean path (or not). Only until the first packet is
    /// sent: a stream never changes path. Returns whether it took effect.
    pub(crate) fn set_lean(&mut self, lean: bool) -> bool {
        if self.decided {
            return false;
        }
        self.lean_wanted = lean;
        true
    }

    /// The last sender report the remote side sent.
    pub(crate) fn last_sender_report(&self) -> Option<SenderReportInfo> {
        self.last_sender_report
    }

    /// For tests: the sequence number of the next packet (e.g. just before a
    /// wrap). Only before the first packet: the stream's numbering is fixed then.
    pub(crate) fn set_next_sequence(&mut self, seq: u16) -> bool {
        if self.decided {
            return false;
        }
        self.numbering.seq = seq;
        true
    }

    /// Picks the path at the first packet (connected: DTLS has exported the
    /// keys): lean if wanted and the keys can be had, else webrtc-rs's.
    fn decide(&mut self, now: Instant) {
        if self.decided {
            return;
        }
        self.decided = true;
        if !self.lean_wanted || self.remote.is_none() {
            return;
        }
        let keyed = self.pc.as_deref_mut().and_then(|pc| lean_keys(pc, &self.keys, now));
        if let Some((generation, keys)) = keyed
            && let Ok(srtp) = SrtpContext::new(&keys)
        {
            self.lean =
                Some(Box::new(LeanSender { srtp, generation, packets: 0, octets: 0, last: None, next_report: None }));
        }
    }

    /// A new DTLS session (new keys): a new SRTP context, whose rollover
    /// counter starts again at 0 (as the receiver's new context does).
    /// Until it can, nothing is sent (the old keys would not decrypt).
    fn rekey_if_needed(&mut self, now: Instant) -> Result<(), RtcError> {
        let Some(lean) = &mut self.lean else { return Ok(()) };
        if self.keys.generation() != lean.generation {
            let pc = self.pc.as_deref_mut().ok_or(RtcError::NotConnected)?;
            let (generation, keys) = lean_keys(pc, &self.keys, now).ok_or(RtcError::NotConnected)?;
            lean.srtp = SrtpContext::new(&keys).map_err(internal)?;
            lean.generation = generation;
            self.numbering.roc = 0;
        }
        self.rekey_pending = false;
        Ok(())
    }

    /// Sends one 20 ms Opus frame for mixer tick `tick` (the next tick when
    /// `None`): own SSRC, sequence number, timestamp = tick × 960 + a random
    /// offset, marker after a gap; the RFC 6464 level when negotiated; the
    /// contributors as CSRCs, with their RFC 6465 levels when negotiated (at
    /// most [`MAX_CONTRIBUTORS`]). The datagram goes to `transmits`. Returns
    /// whether timers moved (the first packet arms the sender reports):
    /// then the caller should ask for the next deadline.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_audio(
        &mut self,
        tick: Option<u64>,
        payload: &Bytes,
        level: Option<u8>,
        contributors: &[Contributor],
        now: Instant,
        transmits: &mut VecDeque<Transmit>,
        spare: &mut Spare,
    ) -> Result<bool, RtcError> {
        if !self.is_connected() {
            return Err(RtcError::NotConnected);
        }
        let first = !self.decided;
        self.decide(now);
        let tick = tick.unwrap_or(self.numbering.next_tick);
        let slot = self.numbering.slot(tick);
        let contributors = &contributors[..contributors.len().min(MAX_CONTRIBUTORS)];
        if self.lean.is_some() {
            if self.rekey_pending {
                self.rekey_if_needed(now)?;
            }
            let armed = self.send_lean(&slot, payload, level, contributors, now, transmits, spare)?;
            self.numbering.sent(tick);
            return Ok(armed);
        }
        let mut header = rtc::rtp::Header {
            version: 2,
            marker: slot.marker,
            payload_type: self.payload_type,
            sequence_number: slot.seq,
            timestamp: slot.timestamp,
            ssrc: self.ssrc,
            ..Default::default()
        };
        if let (Some(ext), Some(level)) = (self.level_ext, level) {
            let l = usize::from(level.min(127));
            put_extension(&mut header, ext, Bytes::from_static(&LEVELS[l..=l]))?;
        }
        if !contributors.is_empty() {
            header.csrc = contributors.iter().map(|c| c.ssrc).collect();
            if let Some(ext) = self.csrc_level_ext {
                let levels: Vec<u8> = contributors.iter().map(|c| c.level.min(127)).collect();
                put_extension(&mut header, ext, Bytes::from(levels))?;
            }
        }
        let pc = self.pc.as_deref_mut().ok_or(RtcError::NotConnected)?;
        let mut sender = pc.rtp_sender(self.sender).ok_or_else(|| internal("sender vanished"))?;
        sender.write_rtp(now, rtc::rtp::Packet { header, payload: payload.clone() }).map_err(internal)?;
        self.numbering.sent(tick);
        self.flush(transmits);
        // The first write may start webrtc-rs's sender-report timer.
        Ok(first)
    }

    /// The lean path: the packet built into a datagram buffer (a sent one,
    /// from `spare`), protected in place, queued. No allocation once the
    /// sent buffers come back.
    #[allow(clippy::too_many_arguments)]
    fn send_lean(
        &mut self,
        slot: &PacketFields,
        payload: &[u8],
        level: Option<u8>,
        contributors: &[Contributor],
        now: Instant,
        transmits: &mut VecDeque<Transmit>,
        spare: &mut Spare,
    ) -> Result<bool, RtcError> {
        let to = self.remote.ok_or(RtcError::NotConnected)?;
        let Some(lean) = self.lean.as_deref_mut() else { return Err(RtcError::NotConnected) };
        let mut levels = [0u8; MAX_CONTRIBUTORS];
        for (l, c) in levels.iter_mut().zip(contributors) {
            *l = c.level.min(127);
        }
        let level_byte = level.map(|l| [l.min(127)]);
        let mut elements: [(u8, &[u8]); 2] = [(0, &[]); 2];
        let mut n = 0;
        if let (Some(id), Some(b)) = (self.level_ext, level_byte.as_ref()) {
            elements[n] = (id, b);
            n += 1;
        }
        if let Some(id) = self.csrc_level_ext
            && !contributors.is_empty()
        {
            elements[n] = (id, &levels[..contributors.len()]);
            n += 1;
        }
        let elements = &elements[..n];
        let ext_len = if elements.is_empty() {
            0
        } else {
            4 + elements.iter().map(|(_, v)| 1 + v.len()).sum::<usize>().div_ceil(4) * 4
        };
        let header_len = 12 + 4 * contributors.len() + ext_len;
        let mut buf = spare.take(header_len + payload.len() + lean.srtp.tag_len());
        let x = if ext_len > 0 { 0x10 } else { 0 };
        buf.extend_from_slice(&[0x80 | x | contributors.len() as u8, (u8::from(slot.marker) << 7) | self.payload_type]);
        buf.extend_from_slice(&slot.seq.to_be_bytes());
        buf.extend_from_slice(&slot.timestamp.to_be_bytes());
        buf.extend_from_slice(&self.ssrc.to_be_bytes());
        for c in contributors {
            buf.extend_from_slice(&c.ssrc.to_be_bytes());
        }
        if ext_len > 0 {
            put_one_byte_extensions(&mut buf, elements);
        }
        buf.extend_from_slice(payload);
        lean.srtp.protect_rtp(&mut buf, header_len, self.ssrc, slot.seq, slot.roc).map_err(internal)?;
        transmits.push_back(Transmit { to, data: buf, tcp: self.remote_tcp });
        lean.packets = lean.packets.wrapping_add(1);
        lean.octets = lean.octets.wrapping_add(payload.len() as u32);
        lean.last = Some((slot.timestamp, now));
        Ok(if lean.next_report.is_none() {
            lean.next_report = Some(now + FIRST_REPORT);
            true
        } else {
            false
        })
    }

    /// Answers consent checks with `answerer` (the current ICE credentials:
    /// set again after a restart, with `all_to_agent_until`), but hands
    /// webrtc-rs's agent one authenticated check every `feed_every`, and
    /// every check until `all_to_agent_until`.
    pub(crate) fn set_check_answerer(
        &mut self,
        answerer: CheckAnswerer,
        feed_every: Duration,
        all_to_agent_until: Option<Instant>,
    ) {
        self.checks = Some(Box::new(LeanChecks { answerer, feed_every, all_to_agent_until, fed: None }));
    }

    /// The lean receive path for STUN: answers a consent check (see
    /// [`CheckAnswerer`]) from the selected pair's remote address of a
    /// connected peer whose ICE is steady, into `transmits`. Returns false
    /// when the datagram is webrtc-rs's: anything else, every check for a
    /// while after a restart, and the check due to feed its agent (the
    /// first from an address, then one every `feed_every`).
    pub(crate) fn answer_check(
        &mut self,
        data: &[u8],
        from: SocketAddr,
        tcp: bool,
        now: Instant,
        transmits: &mut VecDeque<Transmit>,
        spare: &mut Spare,
    ) -> bool {
        if self.retired.is_some() {
            return self.answer_retired_check(data, from, tcp, transmits, spare);
        }
        let steady = self.lean_receive && self.is_connected() && self.ice_steady;
        let Some(checks) = self.checks.as_mut().filter(|_| steady) else { return false };
        if self.remote != Some(from) || self.remote_tcp != tcp || checks.all_to_agent_until.is_some_and(|t| now < t) {
            return false;
        }
        let due = checks.fed.is_none_or(|(at, addr, on_tcp)| {
            addr != from || on_tcp != tcp || now.saturating_duration_since(at) >= checks.feed_every
        });
        if due {
            // Only an authenticated check counts as fed: a forged one (the
            // peer's address spoofed) cannot starve the agent of real ones.
            if checks.answerer.verify(data) {
                checks.fed = Some((now, from, tcp));
            }
            return false;
        }
        let mut buf = spare.take(ANSWER_MAX);
        if !checks.answerer.answer(data, from, &mut buf) {
            spare.give(buf);
            return false;
        }
        transmits.push_back(Transmit { to: from, data: buf, tcp });
        true
    }

    /// A retired connection answers every check that verifies, from any
    /// address: there is no agent to hand one to. A nomination
    /// (USE-CANDIDATE) moves where we send, as webrtc-rs's agent would
    /// select the pair; so does authenticated media ([`Media::authenticated_from`]).
    fn answer_retired_check(
        &mut self,
        data: &[u8],
        from: SocketAddr,
        tcp: bool,
        transmits: &mut VecDeque<Transmit>,
        spare: &mut Spare,
    ) -> bool {
        let Some(checks) = self.checks.as_ref() else { return false };
        let mut buf = spare.take(ANSWER_MAX);
        if !checks.answerer.answer(data, from, &mut buf) {
            spare.give(buf);
            return false;
        }
        if crate::stun::nominates(data) {
            self.remote = Some(from);
            self.remote_tcp = tcp;
        }
        transmits.push_back(Transmit { to: from, data: buf, tcp });
        true
    }

    /// That this connection retires webrtc-rs's peer once the call is up
    /// ([`Media::retire`]); servers only.
    pub(crate) fn set_retire(&mut self, retire: bool) {
        self.retire_wanted = retire;
    }

    /// Whether webrtc-rs's peer is gone ([`Media::retire`]).
    pub(crate) fn is_retired(&self) -> bool {
        self.retired.is_some()
    }

    /// Whether everything a retired connection needs is in place: connected
    /// for [`RETIRE_AFTER`], ICE steady and no restart's grace running, both
    /// RTP directions on the lean paths with this DTLS session's keys, our
    /// own reception reports and consent answers, and the peer has shown
    /// that it has the keys (authenticated media or RTCP from it).
    fn retirable(&self, now: Instant) -> bool {
        let settled = self.connected_at.is_some_and(|at| now >= at + RETIRE_AFTER);
        let generation = self.keys.generation();
        // Lean, or to be (nothing sent yet: a silent room; decided at the retirement).
        let sending = self.lean.as_ref().map_or(!self.decided && self.lean_wanted, |l| l.generation == generation)
            && !self.rekey_pending;
        let receiving = self.lean_receive
            && self.own_reports
            && self.lean_rx_off != Some(generation)
            && self.lean_rx.as_ref().is_none_or(|rx| rx.generation == generation);
        let heard = self.remote_rtcp || self.lean_rx.as_ref().is_some_and(|rx| rx.opened);
        let checks = self.checks.as_ref().is_some_and(|c| c.all_to_agent_until.is_none_or(|t| now >= t));
        settled && self.ice_steady && sending && receiving && heard && checks && self.remote.is_some()
    }

    /// Drops webrtc-rs's connection, keeping what the call needs
    /// ([`Retired`]): ~80 KiB of peer state (handler queues, descriptions,
    /// DTLS handshake state, interceptors, statistics) freed per
    /// participant. Not done (and not asked again) when the DTLS suite's
    /// records are not ones we can read ([`alert::suite_supported`]).
    fn retire(&mut self, now: Instant) {
        self.decide(now);
        if self.lean.is_none() {
            self.retire_wanted = false;
            return;
        }
        let Some(pc) = self.pc.as_deref_mut() else { return };
        let Some(session) = dtls_session(pc, now) else { return };
        if !session.alerts_readable {
            self.retire_wanted = false;
            return;
        }
        let Some((generation, local, remote)) = session.keys(&self.keys) else { return };
        let Ok(answer) = local_sdp(pc) else { return };
        let answer = answer.into_boxed_str();
        let (Some(block), true) = (self.keys.record_key_block(), generation == self.keys.generation()) else { return };
        let first_index = self.rtcp_sent.saturating_add(SRTCP_INDEX_MARGIN);
        let (Some(alerts), Ok(srtcp), Ok(srtcp_rx)) = (
            DtlsAlerts::new(&block, session.is_client),
            SrtcpContext::new(&local, first_index),
            SrtcpReceiver::new(&remote),
        ) else {
            self.retire_wanted = false;
            return;
        };
        if self.lean_rx.is_none() {
            // Nothing received yet on the lean path (a client that has sent
            // only RTCP so far): its receiver now, webrtc-rs's path being gone.
            let Ok(srtp) = SrtpReceiver::new(&remote) else { return };
            self.lean_rx = Some(Box::new(LeanReceiver { srtp, generation, opened: false, failures: 0 }));
        }
        self.retired = Some(Box::new(Retired { srtcp, srtcp_rx, alerts, answer }));
        self.pc = None;
        self.keys.forget();
    }

    /// A datagram for a retired connection that is neither RTP nor STUN:
    /// SRTCP (opened with our own receiver, its sender reports taken) or a
    /// DTLS record (an authenticated close_notify or fatal alert ends the
    /// call). `scratch` is the caller's buffer to open it in.
    pub(crate) fn read_retired(
        &mut self,
        data: &[u8],
        from: SocketAddr,
        tcp: bool,
        now: Instant,
        scratch: &mut Vec<u8>,
    ) -> RetiredRead {
        let Some(retired) = self.retired.as_deref_mut() else { return RetiredRead::Nothing };
        if is_dtls(data) {
            if !self.closed && retired.alerts.ends_session(data) {
                self.closed = true;
                return RetiredRead::Closed;
            }
            return RetiredRead::Nothing;
        }
        if !is_rtcp(data) {
            return RetiredRead::Nothing;
        }
        scratch.clear();
        scratch.extend_from_slice(data);
        let Ok(len) = retired.srtcp_rx.unprotect_rtcp(scratch) else { return RetiredRead::Nothing };
        let mut plain = &scratch[..len];
        let Ok(packets) = rtc::rtcp::packet::unmarshal(&mut plain) else { return RetiredRead::Nothing };
        self.authenticated_from(from, tcp);
        self.on_rtcp(&packets, now);
        RetiredRead::Rtcp
    }

    /// That this connection was built without webrtc-rs's receiver reports
    /// ([`build_connection`]): the reception statistics of what it receives
    /// go out in our own RTCP instead (see [`Media::handle_timeout`]).
    pub(crate) fn set_own_reports(&mut self) {
        self.own_reports = true;
    }

    /// An authenticated packet came from `from`: the lean sender follows the
    /// peer there (a client that moved and restarted ICE sends from its new
    /// address at once; see `arrived_from`).
    pub(crate) fn authenticated_from(&mut self, from: SocketAddr, tcp: bool) {
        if self.remote.is_some() {
            self.remote = Some(from);
            self.remote_tcp = tcp;
        }
    }

    /// The selected pair's remote address (and whether over TCP), once known:
    /// where the lean path sends.
    pub(crate) fn selected_remote(&self) -> Option<(SocketAddr, bool)> {
        self.remote.map(|r| (r, self.remote_tcp))
    }

    /// Whether received SRTP is read on the lean path ([`Media::read_lean`]).
    /// Switching off keeps the receive state (rollover counter, replay
    /// window): switched on again, it goes on from there.
    pub(crate) fn set_lean_receive(&mut self, lean: bool) {
        self.lean_receive = lean;
    }

    /// The path received RTP takes now.
    pub(crate) fn receive_path(&self) -> ReceivePath {
        match (&self.lean_rx, self.lean_receive) {
            (_, false) => ReceivePath::Rtc,
            (Some(rx), true) => ReceivePath::Lean(rx.srtp.profile()),
            (None, true) if self.lean_rx_off.is_some_and(|g| g == self.keys.generation()) => ReceivePath::Rtc,
            (None, true) => ReceivePath::Undecided { lean: true },
        }
    }

    /// What the lean receive path did.
    pub(crate) fn receive_stats(&self) -> ReceiveStats {
        self.rx_stats
    }

    /// The lean receive path: an SRTP-protected RTP datagram (not STUN,
    /// DTLS or RTCP, which stay webrtc-rs's) on a connected peer is opened
    /// by tutti's own [`SrtpReceiver`] with the remote keys from the DTLS
    /// exporter (new keys, new receiver, with a new DTLS session), and
    /// parsed as webrtc-rs's path would ([`audio_from`]). webrtc-rs never
    /// sees it: a connection that reads this way reports its reception
    /// itself ([`Media::set_own_reports`], [`Media::note_received`]). Nor
    /// does its ICE agent, which needs not: consent checks come every
    /// keepalive interval whatever the media does (RFC 7675), and their
    /// answers keep the pair alive.
    pub(crate) fn read_lean(&mut self, data: &[u8], now: Instant, scratch: &mut Vec<u8>) -> LeanRead {
        if !self.lean_receive || !self.is_connected() || !is_rtp(data) {
            return LeanRead::Rtc;
        }
        let generation = self.keys.generation();
        if self.lean_rx_off == Some(generation) {
            return LeanRead::Rtc;
        }
        if self.lean_rx.as_ref().is_none_or(|rx| rx.generation != generation) {
            let keyed = self
                .pc
                .as_deref_mut()
                .and_then(|pc| lean_key_pair(pc, &self.keys, now))
                .and_then(|(generation, _, remote)| Some((generation, SrtpReceiver::new(&remote).ok()?)));
            let Some((generation, srtp)) = keyed else {
                self.lean_rx = None;
                self.lean_rx_off = Some(generation);
                return LeanRead::Rtc;
            };
            self.lean_rx = Some(Box::new(LeanReceiver { srtp, generation, opened: false, failures: 0 }));
        }
        let Some(rx) = self.lean_rx.as_deref_mut() else { return LeanRead::Rtc };
        // Opened in the caller's scratch buffer (hot in cache, never
        // allocated again): only the payload is copied out, in one allocation.
        scratch.clear();
        scratch.extend_from_slice(data);
        let (header_len, payload) = match rx.srtp.unprotect(scratch) {
            Ok(opened) => opened,
            // Another SSRC than the few a receiver follows: webrtc-rs's.
            Err(SrtpError::Streams) => return LeanRead::Rtc,
            Err(_) => {
                self.rx_stats.dropped += 1;
                // A retired connection has no other path to give up to.
                if !rx.opened && self.retired.is_none() {
                    rx.failures += 1;
                    if rx.failures >= LEAN_RECEIVE_GIVE_UP {
                        self.lean_rx_off = Some(rx.generation);
                        self.lean_rx = None;
                    }
                }
                return LeanRead::Dropped;
            }
        };
        rx.opened = true;
        let packet = &scratch[..];
        let mut end = payload.end;
        if packet[0] & 0x20 != 0 {
            // RFC 3550 §5.1: the last payload byte counts the padding (webrtc-rs's reading).
            match payload.end.checked_sub(1).filter(|&last| last >= payload.start).map(|last| packet[last]) {
                Some(pad) if usize::from(pad) <= payload.len() => end -= usize::from(pad),
                _ => {
                    self.rx_stats.dropped += 1;
                    return LeanRead::Dropped;
                }
            }
        }
        let header = &packet[..header_len];
        let fields = RtpFields {
            ssrc: u32::from_be_bytes([header[8], header[9], header[10], header[11]]),
            seq: u16::from_be_bytes([header[2], header[3]]),
            timestamp: u32::from_be_bytes([header[4], header[5], header[6], header[7]]),
            marker: header[1] & 0x80 != 0,
        };
        let cc = usize::from(header[0] & 0x0F);
        let csrc = header[12..12 + 4 * cc].chunks_exact(4).map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        let audio = audio_from(
            fields,
            Bytes::copy_from_slice(&packet[payload.start..end]),
            csrc,
            |id| rtp_extension(header, id),
            self.level_ext,
            self.csrc_level_ext,
        );
        self.rx_stats.lean += 1;
        if self.own_reports {
            self.note_received(audio.ssrc, audio.seq, audio.timestamp, now);
        }
        LeanRead::Audio(audio)
    }

    /// Moves what the connection has to send into `transmits`, and nothing
    /// else: all an RTP write produces. (A full [`Media::drain`] also walks
    /// every handler's timers, which an RTP write does not move: a tenth of
    /// the send path's cost.)
    pub(crate) fn flush(&mut self, transmits: &mut VecDeque<Transmit>) {
        let Some(pc) = self.pc.as_deref_mut() else { return };
        while let Some(msg) = pc.poll_write() {
            let to = msg.transport.peer_addr;
            // DTLS, SRTP and SRTCP go to the selected candidate pair; STUN
            // answers go to whoever asked.
            let tcp = msg.transport.transport_protocol == TransportProtocol::TCP;
            if !crate::stun::is_stun(&msg.message) {
                self.remote = Some(to);
                self.remote_tcp = tcp;
                if is_rtcp(&msg.message) {
                    self.rtcp_sent = self.rtcp_sent.saturating_add(1);
                }
            }
            transmits.push_back(Transmit { to, data: msg.message, tcp });
        }
    }

    #[cfg(feature = "fuzzing")]
    /// Writes an RTP packet as `raw` shapes it, on our SSRC and payload
    /// type (see [`RawRtp`]), on the path this stream uses.
    pub(crate) fn send_raw_rtp(
        &mut self,
        raw: RawRtp,
        now: Instant,
        transmits: &mut VecDeque<Transmit>,
    ) -> Result<(), RtcError> {
        if !self.is_connected() {
            return Err(RtcError::NotConnected);
        }
        self.decide(now);
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
        let packet = rtc::rtp::Packet { header, payload: raw.payload };
        if let Some(lean) = self.lean.as_deref() {
            let to = self.remote.ok_or(RtcError::NotConnected)?;
            let header_len = packet.header.marshal_size();
            let marshalled = packet.marshal().map_err(|_| RtcError::BadPacket("the RTP packet does not marshal"))?;
            let mut buf = BytesMut::from(&marshalled[..]);
            lean.srtp.protect_rtp(&mut buf, header_len, self.ssrc, raw.seq, self.numbering.roc).map_err(internal)?;
            transmits.push_back(Transmit { to, data: buf, tcp: self.remote_tcp });
            return Ok(());
        }
        let pc = self.pc.as_deref_mut().ok_or(RtcError::NotConnected)?;
        let mut sender = pc.rtp_sender(self.sender).ok_or_else(|| internal("sender vanished"))?;
        sender.write_rtp(now, packet).map_err(internal)?;
        self.flush(transmits);
        Ok(())
    }

    #[cfg(feature = "fuzzing")]
    /// Writes `bytes` as one RTCP compound packet, as they are (SRTCP-protected).
    pub(crate) fn send_raw_rtcp(&mut self, bytes: Bytes, now: Instant) -> Result<(), RtcError> {
        if !self.is_connected() {
            return Err(RtcError::NotConnected);
        }
        let pc = self.pc.as_deref_mut().ok_or(RtcError::NotConnected)?;
        let mut sender = pc.rtp_sender(self.sender).ok_or_else(|| internal("sender vanished"))?;
        sender.write_rtcp(now, vec![Box::new(rtc::rtcp::raw_packet::RawPacket(bytes))]).map_err(internal)
    }

    /// Runs the connection's due timers, and sends the lean path's sender
    /// report when due (a retired connection's into `transmits`); then
    /// retires the connection if it is time ([`Media::retire`]).
    pub(crate) fn handle_timeout(&mut self, now: Instant, transmits: &mut VecDeque<Transmit>) {
        self.timers_ran = now;
        if let Some(pc) = self.pc.as_deref_mut() {
            let _ = pc.handle_timeout(now);
        }
        if !self.is_connected() {
            return;
        }
        // The first timer run after the connection came up (within a second).
        self.connected_at.get_or_insert(now);
        self.report(now, transmits);
        if self.retire_wanted && self.retired.is_none() && self.retirable(now) {
            self.retire(now);
        }
    }

    /// Sends our RTCP report when due: a sender report (with the reception
    /// block) while the lean path sends, else a receiver report.
    fn report(&mut self, now: Instant, transmits: &mut VecDeque<Transmit>) {
        let receiver_report_due = self.next_receiver_report.is_some_and(|due| now >= due);
        let mut report: Option<Box<dyn rtc::rtcp::Packet>> = None;
        if let Some(lean) = self.lean.as_deref_mut()
            && let (Some(due), Some((ts, at))) = (lean.next_report, lean.last)
            && now >= due
        {
            lean.next_report = Some(now + REPORT_INTERVAL);
            let elapsed = now.saturating_duration_since(at);
            // The reception report block rides on the sender report.
            let block = self.reception.as_mut().and_then(|r| r.report(now));
            if block.is_some() {
                self.next_receiver_report = Some(now + REPORT_INTERVAL);
            }
            report = Some(Box::new(SenderReport {
                ssrc: self.ssrc,
                ntp_time: ntp_time(self.wall, now),
                rtp_time: ts.wrapping_add((elapsed.as_secs_f64() * 48_000.0) as u32),
                packet_count: lean.packets,
                octet_count: lean.octets,
                reports: block.into_iter().collect(),
                ..Default::default()
            }));
        } else if receiver_report_due {
            // Nothing sent on the lean path to carry it: a receiver report of its own.
            self.next_receiver_report = Some(now + REPORT_INTERVAL);
            if let Some(block) = self.reception.as_mut().and_then(|r| r.report(now)) {
                report = Some(Box::new(ReceiverReport { ssrc: self.ssrc, reports: vec![block], ..Default::default() }));
            }
        }
        let Some(report) = report else { return };
        // A report that cannot be written is a lost report; the next one
        // carries the totals.
        if let Some(retired) = self.retired.as_deref_mut() {
            let Some(to) = self.remote else { return };
            let Ok(plain) = report.marshal() else { return };
            let mut buf = BytesMut::from(&plain[..]);
            if retired.srtcp.protect_rtcp(&mut buf).is_ok() {
                transmits.push_back(Transmit { to, data: buf, tcp: self.remote_tcp });
            }
        } else if let Some(mut sender) = self.pc.as_deref_mut().and_then(|pc| pc.rtp_sender(self.sender)) {
            let _ = sender.write_rtcp(now, vec![report]);
        }
    }

    /// Counts an audio packet the lean receive path authenticated (for the
    /// reception report), arriving at `now`; a new SSRC starts new statistics.
    pub(crate) fn note_received(&mut self, ssrc: u32, seq: u16, timestamp: u32, now: Instant) {
        if self.reception.as_ref().is_none_or(|r| r.ssrc() != ssrc) {
            self.reception = Some(Reception::new(ssrc, 48_000));
            self.next_receiver_report.get_or_insert(now + FIRST_REPORT);
        }
        if let Some(r) = &mut self.reception {
            r.on_packet(seq, timestamp, now);
        }
    }

    /// When [`Media::handle_timeout`] has work next.
    /// Connected, at most every [`CONNECTED_TIMER_GRAIN`].
    pub(crate) fn poll_timeout(&mut self) -> Option<Instant> {
        let report = self.lean.as_ref().and_then(|l| l.next_report).filter(|_| self.is_connected());
        let next = [
            self.pc.as_deref_mut().and_then(|pc| pc.poll_timeout()),
            report,
            self.next_receiver_report.filter(|_| self.is_connected()),
        ]
        .into_iter()
        .flatten()
        .min();
        if self.is_connected() && self.ice_steady {
            next.map(|at| at.max(self.timers_ran + CONNECTED_TIMER_GRAIN))
        } else {
            next
        }
    }

    /// Moves what the connection has to send into `transmits`, reports its
    /// events, and returns its next deadline.
    pub(crate) fn drain(&mut self, transmits: &mut VecDeque<Transmit>, on: impl FnMut(PeerEvent)) -> Option<Instant> {
        self.drain_io(transmits, on);
        self.poll_timeout()
    }

    /// [`Media::drain`] without the deadline: after an RTP packet, which
    /// moves no timer, asking every handler for its next timeout is wasted
    /// work on the hottest path.
    pub(crate) fn drain_io(&mut self, transmits: &mut VecDeque<Transmit>, mut on: impl FnMut(PeerEvent)) {
        self.flush(transmits);
        if let Some(lean) = &self.lean
            && self.keys.generation() != lean.generation
        {
            self.rekey_pending = true;
        }
        while let Some(event) = self.pc.as_deref_mut().and_then(|pc| pc.poll_event()) {
            if let RTCPeerConnectionEvent::OnIceConnectionStateChangeEvent(state) = event {
                self.ice_steady = matches!(state, RTCIceConnectionState::Connected | RTCIceConnectionState::Completed);
                self.ice_up |= self.ice_steady;
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
        // webrtc-rs reports the peer's close_notify only as its DTLS
        // transport's state (the connection's still reads "connected" while
        // ICE is): looked at after a DTLS record only, never per packet.
        // The state changes once the alert is decrypted and authenticated,
        // so a forged datagram cannot end a call.
        if std::mem::take(&mut self.dtls_read) && self.connected && !self.closed && self.dtls_closed() {
            self.closed = true;
            on(PeerEvent::Closed);
        }
        let arrived_from = self.arrived_from.take();
        while let Some(msg) = self.pc.as_deref_mut().and_then(|pc| pc.poll_read()) {
            let at = msg.now;
            if let Some((from, tcp)) = arrived_from {
                // Authenticated by SRTP: the peer is there now.
                self.authenticated_from(from, tcp);
            }
            match msg.message {
                RTCMessage::RtpPacket(_, packet) => {
                    if self.own_reports {
                        let h = &packet.header;
                        self.note_received(h.ssrc, h.sequence_number, h.timestamp, at);
                    }
                    on(PeerEvent::Audio(audio_of(packet, self.level_ext, self.csrc_level_ext)));
                }
                RTCMessage::RtcpPacket(_, packets) => {
                    self.remote_rtcp = true;
                    self.on_rtcp(&packets, at);
                }
                _ => {}
            }
        }
    }

    /// Takes what we use of received RTCP: the remote side's sender reports.
    fn on_rtcp(&mut self, packets: &[Box<dyn rtc::rtcp::Packet>], at: Instant) {
        for p in packets {
            let Some(sr) = p.as_any().downcast_ref::<SenderReport>() else { continue };
            if let Some(r) = &mut self.reception {
                r.on_sender_report(sr.ntp_time, at);
            }
            self.last_sender_report = Some(SenderReportInfo {
                ssrc: sr.ssrc,
                ntp_time: sr.ntp_time,
                rtp_time: sr.rtp_time,
                packet_count: sr.packet_count,
                octet_count: sr.octet_count,
                reception: sr.reports.first().map(|b| ReceptionBlock {
                    ssrc: b.ssrc,
                    fraction_lost: b.fraction_lost,
                    total_lost: b.total_lost,
                    highest_sequence: b.last_sequence_number,
                    jitter: b.jitter,
                }),
            });
        }
    }

    /// Notes that a DTLS record is about to be read (see `dtls_read`).
    pub(crate) fn dtls_arriving(&mut self) {
        self.dtls_read = true;
    }

    /// Whether the DTLS transport is closed (the peer's close_notify).
    pub(crate) fn dtls_closed(&mut self) -> bool {
        self.pc
            .as_deref_mut()
            .and_then(|pc| pc.rtp_sender(self.sender))
            .and_then(|s| s.transport().map(|t| t.state() == RTCDtlsTransportState::Closed))
            .unwrap_or(false)
    }

    /// Notes where the SRTP/SRTCP datagram about to be read came from (see `arrived_from`).
    pub(crate) fn arriving_from(&mut self, from: SocketAddr, tcp: bool) {
        self.arrived_from = Some((from, tcp));
    }

    /// Answers an ICE-restart offer (new remote ufrag and password, perhaps a
    /// new address) on the established connection: the DTLS session, SRTP
    /// keys, SSRC and sequence numbers carry on. Returns the SDP answer.
    pub(crate) fn answer_restart(&mut self, offer: &str, now: Instant) -> Result<String, RtcError> {
        if self.closed {
            return Err(RtcError::NotConnected);
        }
        if let Some(retired) = self.retired.as_deref_mut() {
            return retired.answer_restart(offer);
        }
        let pc = self.pc.as_deref_mut().ok_or(RtcError::NotConnected)?;
        let offer = RTCSessionDescription::offer(offer.to_owned()).map_err(bad_sdp)?;
        pc.set_remote_description(now, offer).map_err(bad_sdp)?;
        // A restart puts gathering back to "gathering"; our candidates stay
        // (the server's address did not move): end it again.
        let _ = pc.add_local_candidate(RTCIceCandidateInit::default());
        let answer = pc.create_answer(None).map_err(bad_sdp)?;
        pc.set_local_description(now, answer).map_err(bad_sdp)?;
        local_sdp(pc)
    }

    /// Starts an ICE restart from `local` (a new socket): an offer with new
    /// ICE credentials and `local` as the one host candidate.
    pub(crate) fn offer_restart(&mut self, local: SocketAddr, now: Instant) -> Result<String, RtcError> {
        if self.closed {
            return Err(RtcError::NotConnected);
        }
        let pc = self.pc.as_deref_mut().ok_or(RtcError::NotConnected)?;
        pc.restart_ice();
        let offer = pc.create_offer(None).map_err(bad_sdp)?;
        pc.set_local_description(now, offer).map_err(bad_sdp)?;
        add_host_candidate(pc, local)?;
        local_sdp(pc)
    }

    /// Applies the answer to [`Media::offer_restart`].
    pub(crate) fn accept_restart(&mut self, answer: &str, now: Instant) -> Result<(), RtcError> {
        let answer = RTCSessionDescription::answer(answer.to_owned()).map_err(bad_sdp)?;
        let pc = self.pc.as_deref_mut().ok_or(RtcError::NotConnected)?;
        pc.set_remote_description(now, answer).map_err(bad_sdp)
    }

    /// Lets `frames` 20 ms frames pass unsent (DTX): the next packet's
    /// timestamp shows the time that went by, and its marker bit is set.
    pub(crate) fn skip_frames(&mut self, frames: u32) {
        self.numbering.next_tick = self.numbering.next_tick.wrapping_add(u64::from(frames));
    }

    /// Closes the connection; its goodbye (DTLS close_notify) goes to `transmits`.
    pub(crate) fn close(&mut self, transmits: &mut VecDeque<Transmit>) {
        if let Some(retired) = self.retired.as_deref_mut() {
            if !self.closed
                && let Some(to) = self.remote
            {
                let data = BytesMut::from(&retired.alerts.close_notify()[..]);
                transmits.push_back(Transmit { to, data, tcp: self.remote_tcp });
            }
            self.closed = true;
            return;
        }
        if let Some(pc) = self.pc.as_deref_mut() {
            let _ = pc.close();
        }
        self.closed = true;
        self.flush(transmits);
    }
}

impl Retired {
    /// The answer to an ICE-restart offer on a retired connection: the
    /// answer the client has, its session version one higher (RFC 3264
    /// §8). The offer must still be an audio offer with ICE credentials;
    /// the caller takes its new ufrag for the consent checks.
    fn answer_restart(&mut self, offer: &str) -> Result<String, RtcError> {
        let has = |prefix: &str| offer.lines().any(|l| l.trim_end().starts_with(prefix));
        if !has("m=audio ") {
            return Err(RtcError::NoAudio);
        }
        if !has("a=ice-ufrag:") || !has("a=ice-pwd:") {
            return Err(bad_sdp("the restart offer has no ICE credentials"));
        }
        self.answer = bump_session_version(&self.answer).into_boxed_str();
        Ok(self.answer.to_string())
    }
}

/// `sdp` with its `o=` line's session version one higher.
fn bump_session_version(sdp: &str) -> String {
    let mut out = String::with_capacity(sdp.len() + 2);
    for line in sdp.split_inclusive('\n') {
        let body = line.trim_end_matches(['\r', '\n']);
        let mut fields: Vec<&str> = body.split(' ').collect();
        let bumped = match (body.starts_with("o="), fields.get(2).and_then(|v| v.parse::<u64>().ok())) {
            (true, Some(v)) if fields.len() == 6 => Some((v.wrapping_add(1)).to_string()),
            _ => None,
        };
        match bumped {
            Some(v) => {
                fields[2] = &v;
                out.push_str(&fields.join(" "));
                out.push_str(&line[body.len()..]);
            }
            None => out.push_str(line),
        }
    }
    out
}

/// The NTP timestamp (RFC 3550 §4: seconds since 1900, 32.32 fixed point)
/// of `now`, from an (instant, wall-clock time) pair taken together.
fn ntp_time(wall: (Instant, SystemTime), now: Instant) -> u64 {
    let t = wall.1 + now.saturating_duration_since(wall.0);
    let since_unix = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = since_unix.as_secs().wrapping_add(NTP_UNIX_OFFSET);
    let frac = (u64::from(since_unix.subsec_nanos()) << 32) / 1_000_000_000;
    (secs << 32) | frac
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rtc::shared::marshal::Unmarshal;

    #[test]
    fn spare_buffers_are_reused_and_bounded() {
        let mut spare = Spare::default();
        let mut first = spare.take(100);
        assert!(first.capacity() >= Spare::CAPACITY);
        first.extend_from_slice(&[9; 100]);
        let at = first.as_ptr();
        spare.give(first);
        let again = spare.take(180);
        assert_eq!((again.as_ptr(), again.len()), (at, 0), "the same buffer, empty");
        assert!(again.capacity() >= 180);
        // Its storage shared with a live `Bytes`, and its own part too
        // small for a packet: not kept.
        let mut shared = spare.take(64);
        shared.extend_from_slice(&[1; 64]);
        let head = shared.split_to(32).freeze();
        spare.give(shared);
        assert_eq!(spare.len(), 0);
        assert_eq!(&head[..], &[1; 32]);
        // Too big to keep.
        spare.give(BytesMut::with_capacity(Spare::KEEP_MAX + 1));
        assert_eq!(spare.len(), 0);
        // Bounded.
        for _ in 0..Spare::MAX + 10 {
            spare.give(BytesMut::with_capacity(Spare::CAPACITY));
        }
        assert_eq!(spare.len(), Spare::MAX);
    }

    /// An RTP header with CSRC count `cc` and these extension elements, in
    /// the one-byte (RFC 8285 §4.2) or two-byte (§4.3) form, padded to words.
    fn header_with(cc: usize, two_byte: bool, elements: &[(u8, Vec<u8>)]) -> Vec<u8> {
        let mut h = vec![0x90 | cc as u8, 111, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3];
        h.extend(std::iter::repeat_n(7u8, 4 * cc));
        let mut block = Vec::new();
        for (id, value) in elements {
            if two_byte {
                block.extend([*id, value.len() as u8]);
            } else {
                block.push((id << 4) | (value.len() as u8 - 1));
            }
            block.extend(value);
        }
        block.resize(block.len().div_ceil(4) * 4, 0);
        h.extend(if two_byte { [0x10, 0x00] } else { [0xBE, 0xDE] });
        h.extend(((block.len() / 4) as u16).to_be_bytes());
        h.extend(block);
        h
    }

    proptest! {
        /// The lean receive path's extension reader (network input, after
        /// SRTP) never panics on any bytes.
        #[test]
        fn the_extension_reader_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
            for id in 0..=255u8 {
                let _ = rtp_extension(&bytes, id);
            }
        }

        /// On well-formed headers it finds what webrtc-rs's `get_extension`
        /// finds, for every id, in both forms. (On a malformed block it is
        /// stricter: an element that overruns the block is no value, where
        /// webrtc-rs may read on into the payload.)
        #[test]
        fn the_extension_reader_agrees_with_webrtc_rs(
            cc in 0usize..4,
            two_byte in any::<bool>(),
            ids in proptest::collection::btree_set(1u8..=14, 0..5),
            lens in proptest::collection::vec(1usize..=16, 5),
            payload in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let elements: Vec<(u8, Vec<u8>)> =
                ids.iter().zip(&lens).map(|(&id, &len)| (id, (0..len).map(|i| id ^ i as u8).collect())).collect();
            let mut bytes = header_with(cc, two_byte, &elements);
            bytes.extend(&payload);
            let parsed = rtc::rtp::Header::unmarshal(&mut &bytes[..]).expect("a well-formed header");
            for id in 1..=255u8 {
                let theirs = parsed.get_extension(id);
                prop_assert_eq!(rtp_extension(&bytes, id), theirs.as_deref(), "id {}", id);
            }
        }
    }

    #[test]
    fn timestamps_follow_the_tick_and_the_marker_flags_gaps() {
        let mut n = Numbering { seq: 65_534, roc: 0, ts_offset: 1000, next_tick: 0, last_tick: None };
        let s = n.slot(10);
        assert_eq!((s.seq, s.roc, s.timestamp, s.marker), (65_534, 0, 10 * 960 + 1000, true), "first packet");
        n.sent(10);
        let s = n.slot(11);
        assert_eq!((s.seq, s.roc, s.timestamp, s.marker), (65_535, 0, 11 * 960 + 1000, false));
        n.sent(11);
        // Ticks 12..=14 unsent (DTX): the sequence number does not move.
        let s = n.slot(15);
        assert_eq!((s.seq, s.roc, s.timestamp, s.marker), (0, 1, 15 * 960 + 1000, true), "wrap and talkspurt");
        n.sent(15);
        assert_eq!(n.next_tick, 16);
        // The timestamp wraps with the tick, never panics.
        let s = n.slot(u64::MAX);
        assert_eq!(s.timestamp, (u64::MAX.wrapping_mul(960) as u32).wrapping_add(1000));
    }

    #[test]
    fn extension_blocks_are_padded_to_words() {
        let mut b = BytesMut::new();
        put_one_byte_extensions(&mut b, &[(1, &[0x25])]);
        assert_eq!(&b[..], &[0xBE, 0xDE, 0, 1, 0x10, 0x25, 0, 0]);
        let mut b = BytesMut::new();
        put_one_byte_extensions(&mut b, &[(1, &[5]), (2, &[1, 2, 3])]);
        assert_eq!(&b[..], &[0xBE, 0xDE, 0, 2, 0x10, 5, 0x22, 1, 2, 3, 0, 0]);
    }

    #[test]
    fn a_restart_answer_bumps_only_the_session_version() {
        let sdp = "v=0\r\no=- 4611 2 IN IP4 0.0.0.0\r\ns=-\r\na=x:o=1 2 3\r\n";
        assert_eq!(bump_session_version(sdp), "v=0\r\no=- 4611 3 IN IP4 0.0.0.0\r\ns=-\r\na=x:o=1 2 3\r\n");
        assert_eq!(bump_session_version("o=- 1 x IN IP4 0.0.0.0\n"), "o=- 1 x IN IP4 0.0.0.0\n", "not a number: kept");
    }

    #[test]
    fn ntp_times_count_from_1900() {
        let now = Instant::now();
        let wall = (now, SystemTime::UNIX_EPOCH + Duration::from_millis(1500));
        assert_eq!(ntp_time(wall, now), ((NTP_UNIX_OFFSET + 1) << 32) | (1u64 << 31));
        assert_eq!(ntp_time(wall, now + Duration::from_millis(500)) >> 32, NTP_UNIX_OFFSET + 2);
    }
}
