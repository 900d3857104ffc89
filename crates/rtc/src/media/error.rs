//! The error a peer's media returns ([`RtcError`]), and the shorthands that
//! make one of webrtc-rs's errors.

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

pub(crate) fn internal(e: impl std::fmt::Display) -> RtcError {
    RtcError::Internal(e.to_string())
}

pub(crate) fn bad_sdp(e: impl std::fmt::Display) -> RtcError {
    RtcError::BadSdp(e.to_string())
}
