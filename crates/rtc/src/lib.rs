//! # tutti-rtc: many WebRTC peers behind one UDP port
//!
//! A tutti server talks to thousands of participants. One async peer
//! connection per participant, each with its own sockets and tasks, does not
//! scale; so this crate drives webrtc-rs's sans-IO `rtc` peers itself:
//!
//! ```text
//! UDP datagram ─► Mux::handle_datagram ─► route: remote address → peer,
//!                                          or a verified ICE check (USERNAME's server
//!                                          ufrag, MESSAGE-INTEGRITY) → peer, learning
//!                                          its address (at most MAX_ROUTES per peer)
//!             ─► peer (ICE-lite, DTLS, SRTP) ─► MuxEvent::Audio { Opus, RFC 6464 level }
//! Mux::send_audio_at(peer, tick, Opus) ─► RTP (own SSRC/seq, ts = tick × 960 + offset, level ext)
//!     ─► lean path: header + payload built in the datagram buffer, SRTP in place (srtp::SrtpContext)
//!     ─► or webrtc-rs's write pipeline (interceptors, its SRTP)          ─► poll_transmit
//! ```
//!
//! The lean path (default; [`Acceptor::set_lean_send`], [`ClientPeer::set_lean_send`]
//! switch it off) is taken by a connected peer from its first packet on and
//! never left, so one SSRC's sequence number and rollover counter live in
//! one place. Its keys come from the DTLS exporter (webrtc-rs exposes none:
//! see the `keys` module for how they are captured through the crypto
//! provider); its RTCP sender reports are ours, sent through webrtc-rs,
//! which keeps ICE, DTLS, SRTCP and the whole receive side.
//!
//! Received audio takes a lean path too, on the client side only (the load
//! generator's [`ClientPeer`]; [`ClientPeer::set_lean_receive`] switches it
//! off): once DTLS is up, an SRTP datagram is opened by tutti's own
//! [`srtp::SrtpReceiver`] (rollover counter, replay window) and parsed
//! straight into an [`AudioPacket`]; STUN, DTLS and RTCP stay webrtc-rs's.
//!
//! A server peer then **retires** webrtc-rs's connection ([`Acceptor::set_retire`],
//! on by default): half a second after it connected, once the client has shown it holds
//! the keys, the connection (~80 KiB: handler queues, descriptions, DTLS
//! handshake state, interceptors, statistics) is dropped and tutti-rtc
//! carries the call alone: lean RTP both ways, its own SRTCP
//! ([`srtp::SrtcpContext`], [`srtp::SrtcpReceiver`]) for the RTCP reports,
//! every consent check answered, the DTLS close_notify read and written with
//! the handshake's record keys (AES-128-GCM suites; others keep webrtc-rs's
//! connection), and an ICE restart answered with the answer the client
//! already has (our credentials are fixed per peer).
//!
//! Like the mixing core it holds no socket and reads no clock: the caller's
//! I/O loop passes datagrams and `Instant`s in and sends what comes out.
//! Every peer answers with ICE-lite and our one host candidate, mDNS off, one
//! shared DTLS certificate, and RTCP reports as the only interceptor (no NACK
//! or TWCC for audio). Each peer's timers sit in one heap: no scan of all peers.
//!
//! The `fuzzing` feature adds raw-packet helpers for the fuzz targets
//! (`RawRtp`, `parse_rtp`, `parse_rtcp`, `ClientPeer::send_raw_rtp`); they
//! are not API, and builds without the feature do not carry them.

mod alert;
mod client;
mod keys;
mod media;
mod mux;
mod peer;
pub mod plain;
pub mod plain_rtcp;
mod reception;
pub mod sdes;
pub mod srtp;
pub mod stun;
pub mod tcp;
pub mod turn;

pub use client::{CONSENT_INTERVAL, ClientEvent, ClientPeer, TcpLink};
pub use media::{
    AudioPacket, CSRC_AUDIO_LEVEL_URI, Contributor, MAX_CONTRIBUTORS, ReceivePath, ReceiveStats, ReceptionBlock,
    RtcError, SSRC_AUDIO_LEVEL_URI, SendPath, SenderReportInfo, Transmit, is_rtp,
};
/// Raw-packet helpers for the fuzz targets (the `fuzzing` feature; not API).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub use media::{RawRtp, parse_rtcp, parse_rtp};
pub use mux::{
    Acceptor, CONNECT_TIMEOUT, CloseReason, MAX_ROUTES, Mux, MuxEvent, MuxStats, Route, ServerPeer, asks_for_stereo,
};
pub use peer::PeerId;
pub use srtp::SrtpProfile;
pub use tcp::{
    ConnId, DetachedConn, FrameReader, FrameWriter, FramingError, Received, TcpClose, TcpConnections, TcpLimits,
    TcpStats,
};
pub use turn::{IceServer, IceServerConfig, TurnCredentials, TurnError};
