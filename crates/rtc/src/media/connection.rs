//! webrtc-rs's peer connection as both ends of a call build it: the Opus
//! codec and the audio-level header extensions we negotiate, RTCP reports as
//! the only interceptors, our one audio track, our host candidates, and the
//! local SDP.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Instant;

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
use rtc::peer_connection::transport::RTCIceCandidateInit;
use rtc::peer_connection::{RTCPeerConnection, RTCPeerConnectionBuilder};
use rtc::rtp_transceiver::RTCRtpSenderId;
use rtc::rtp_transceiver::rtp_sender::{
    RTCRtpCodec, RTCRtpCodecParameters, RTCRtpCodingParameters, RTCRtpEncodingParameters,
    RTCRtpHeaderExtensionCapability, RtpCodecKind,
};
use rtc::sansio::Protocol;

use super::error::{RtcError, bad_sdp, internal};
use super::rtcp::REPORT_INTERVAL;
#[cfg(doc)]
use super::rtcp::SenderReportInfo;

/// RFC 6464: the level of the audio in the packet, set by its sender.
pub const SSRC_AUDIO_LEVEL_URI: &str = "urn:ietf:params:rtp-hdrext:ssrc-audio-level";
/// RFC 6465: the levels of the sources a mixer mixed, one byte per CSRC.
pub const CSRC_AUDIO_LEVEL_URI: &str = "urn:ietf:params:rtp-hdrext:csrc-audio-level";

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
