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
//!
//! One concern a file: `connection` builds webrtc-rs's connection (codec,
//! extensions, interceptors, candidates); `datagram`, `audio`, `error`,
//! `rtcp`, `numbering` and `dtls` hold what the paths share; `send` and
//! `receive` are the two RTP paths; `timers` runs the timers and our RTCP
//! reports; `drain` takes webrtc-rs's output and events; `consent` answers
//! consent checks without it; `retire` drops it; `restart` answers and makes
//! ICE restarts. This file keeps [`Media`] and the state it holds.

mod audio;
mod connection;
mod consent;
mod datagram;
mod drain;
mod dtls;
mod error;
mod numbering;
mod receive;
mod restart;
mod retire;
pub(crate) mod rtcp;
mod send;
mod timers;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::BytesMut;
use rtc::peer_connection::RTCPeerConnection;
use rtc::peer_connection::configuration::media_engine::MIME_TYPE_OPUS;
use rtc::rtp_transceiver::RTCRtpSenderId;
use rtc::sansio::Protocol;

pub use audio::{AudioPacket, Contributor, MAX_CONTRIBUTORS};
#[cfg(feature = "fuzzing")]
pub use audio::{RawRtp, parse_rtcp, parse_rtp};
pub(crate) use connection::{
    CLIENT_OPUS_FMTP, SERVER_OPUS_DTX, add_audio_track, add_candidates, add_host_candidate, build_connection,
    local_sdp, udp_candidate,
};
pub use connection::{CSRC_AUDIO_LEVEL_URI, SSRC_AUDIO_LEVEL_URI};
pub(crate) use datagram::{Spare, is_dtls};
pub use datagram::{Transmit, is_rtp};
pub use error::RtcError;
pub(crate) use error::{bad_sdp, internal};
use numbering::Numbering;
#[cfg(doc)]
use rtcp::REPORT_INTERVAL;
pub use rtcp::{ReceptionBlock, SenderReportInfo};

use crate::alert::DtlsAlerts;
use crate::keys::ExporterSlot;
use crate::reception::Reception;
use crate::srtp::{SrtcpContext, SrtcpReceiver, SrtpContext, SrtpProfile, SrtpReceiver};
use crate::stun::CheckAnswerer;

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

/// How often, at most, a connected peer's timers run. Connected, they are
/// ICE liveness (webrtc-rs asks every 200 ms, whatever its keepalive and
/// timeouts: a walk of every handler, 5 times a second per peer) and RTCP
/// reports (every second): nothing there needs a finer grain than a second.
/// The handshake's retransmissions (not connected yet) and ICE checks
/// (connecting, or restarting) keep their own times.
pub(crate) const CONNECTED_TIMER_GRAIN: Duration = Duration::from_secs(1);

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
