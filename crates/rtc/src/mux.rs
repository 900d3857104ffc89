//! Many WebRTC peers behind one UDP address, sans-IO.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rtc::ice::mdns::MulticastDnsMode;
use rtc::peer_connection::certificate::{CertificateParams, RTCCertificate};
use rtc::peer_connection::configuration::setting_engine::SettingEngineBuilder;
use rtc::peer_connection::sdp::RTCSessionDescription;
use rtc::sansio::Protocol;
use rtc::shared::{TaggedBytesMut, TransportContext, TransportProtocol};

use rtc::crypto::RTCCryptoProvider;

use crate::keys::{ExporterSlot, KeyTap};
use crate::media::{
    AudioPacket, CLIENT_OPUS_FMTP, Contributor, LeanRead, Media, PeerEvent, PeerFailure, PeerState, RetiredRead,
    RtcError, SERVER_OPUS_DTX, SendPath, SenderReportInfo, Spare, Transmit, add_audio_track, add_candidates, bad_sdp,
    build_connection, internal, is_dtls, is_rtp, local_sdp, udp_candidate,
};
use crate::peer::PeerId;
use crate::srtp::SrtpProfile;
use crate::stun::{self, CheckAnswerer, CheckKey};

/// Why a peer is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// ICE or DTLS failed (webrtc-rs reported the connection failed).
    Failed,
    /// The remote side closed the connection (DTLS close_notify).
    Closed,
    /// Nothing arrived from the peer for the idle timeout (it vanished).
    TimedOut,
}

/// What a [`Mux`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MuxEvent {
    /// ICE and DTLS are up: audio can flow both ways.
    Connected(PeerId),
    /// A peer sent an audio packet.
    Audio(PeerId, AudioPacket),
    /// The peer is gone; remove it with [`Mux::remove`].
    Closed(PeerId, CloseReason),
}

/// Where [`Mux::handle_datagram`] sent a datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// To this peer.
    Peer(PeerId),
    /// Nowhere: an ICE check, signed with the password its server ufrag was
    /// given, for a ufrag this mux does not hold (a peer accepted elsewhere
    /// and not yet adopted, or held by another mux; see [`Mux::adopt`]).
    UnknownUfrag(String),
    /// Nowhere: not from a known address and no ICE check (counted in
    /// [`MuxStats::unrouted`]).
    Unrouted,
}

/// Counters of a [`Mux`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MuxStats {
    /// Datagrams taken.
    pub datagrams_in: u64,
    /// Bytes of the datagrams taken.
    pub bytes_in: u64,
    /// Datagrams handed out to send.
    pub datagrams_out: u64,
    /// Bytes of the datagrams handed out.
    pub bytes_out: u64,
    /// Datagrams from addresses that belong to no peer and carry no known ICE
    /// username, or an ICE check that does not verify (`forged_checks`).
    pub unrouted: u64,
    /// ICE checks from an address no peer has that name a server ufrag
    /// (ours, or one of ours in form) but whose MESSAGE-INTEGRITY does not
    /// verify with that peer's password: dropped, no route learnt (also in `unrouted`).
    pub forged_checks: u64,
    /// Remote (transport, address) routes held now, at most [`MAX_ROUTES`] per peer.
    pub routes: u64,
    /// Routes dropped to make room for a newer one (a peer's least recently
    /// authenticated address beyond [`MAX_ROUTES`]).
    pub routes_evicted: u64,
    /// Audio packets handed out.
    pub audio_in: u64,
    /// Audio packets written.
    pub audio_out: u64,
    /// Of those, packets sent on the lean path (tutti's own RTP and SRTP).
    pub lean_out: u64,
    /// Of the audio packets received, those read on the lean path (tutti's own SRTP).
    pub lean_in: u64,
    /// SRTP packets the lean receive path dropped: failed authentication,
    /// replayed or too old (garbage or an attack from a peer's address).
    pub lean_dropped: u64,
    /// Consent checks (STUN) answered on the lean receive path, without
    /// webrtc-rs's ICE agent (which still answers one per peer every idle timeout).
    pub lean_checks: u64,
    /// Peers now answered but not connected yet (ICE and DTLS under way).
    pub connecting: u64,
    /// Peers now connected.
    pub connected: u64,
    /// Peers whose connection failed before ICE connected (or that sent no
    /// check before the connect timeout).
    pub ice_failures: u64,
    /// Peers whose ICE connected but whose DTLS handshake failed or stalled.
    pub dtls_failures: u64,
    /// Connected peers whose connection webrtc-rs declared failed later.
    pub lost: u64,
    /// Peers removed for silence (the idle timeout: the client vanished).
    pub timed_out: u64,
    /// Peers whose webrtc-rs connection was retired once their call was up
    /// (see [`Acceptor::set_retire`]), so far.
    pub retired: u64,
}

impl MuxStats {
    fn enter(&mut self, state: PeerState) {
        match state {
            PeerState::Connecting => self.connecting += 1,
            PeerState::Connected => self.connected += 1,
            PeerState::Closed => {}
        }
    }

    fn leave(&mut self, state: PeerState) {
        match state {
            PeerState::Connecting => self.connecting = self.connecting.saturating_sub(1),
            PeerState::Connected => self.connected = self.connected.saturating_sub(1),
            PeerState::Closed => {}
        }
    }

    fn failed(&mut self, why: PeerFailure) {
        match why {
            PeerFailure::Ice => self.ice_failures += 1,
            PeerFailure::Dtls => self.dtls_failures += 1,
            PeerFailure::Lost => self.lost += 1,
        }
    }
}

/// How long a peer may take to connect (ICE and DTLS) after it is adopted
/// before it is given up and closed: webrtc-rs fails a peer whose ICE checks
/// stop, but waits forever on a DTLS handshake that stalls.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Remote addresses (UDP, or TCP connections) routed to one peer at most. A
/// browser checks from each of its candidates (host IPv4 and IPv6, server
/// reflexive, relayed), and once one pair is selected only from that one;
/// each route is learnt from a check signed with the peer's password, and a
/// fifth takes the place of the least recently authenticated (never the one
/// media goes to).
pub const MAX_ROUTES: usize = 4;

/// How every peer is set up. Cheap to clone; share one among threads
/// (configure it before cloning: each clone keeps its own settings).
#[derive(Clone)]
pub struct Acceptor {
    local: SocketAddr,
    /// Every address put in answers, `local` first (see [`Acceptor::set_advertised`]).
    advertised: Vec<SocketAddr>,
    /// Answers also offer a passive TCP candidate per address (ICE-TCP).
    tcp: bool,
    cert: RTCCertificate,
    /// Derives each peer's ICE password from its ufrag ([`Acceptor::ice_pwd`]).
    pwd_key: ring::hmac::Key,
    idle_timeout: Duration,
    next_id: Arc<AtomicU64>,
    provider: Arc<dyn RTCCryptoProvider>,
    lean_send: bool,
    lean_receive: bool,
    retire: bool,
    srtp_profiles: Vec<SrtpProfile>,
}

impl std::fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acceptor")
            .field("local", &self.local)
            .field("advertised", &self.advertised)
            .field("tcp", &self.tcp)
            .field("idle_timeout", &self.idle_timeout)
            .field("lean_send", &self.lean_send)
            .field("lean_receive", &self.lean_receive)
            .field("srtp_profiles", &self.srtp_profiles)
            .finish()
    }
}

/// The profiles a server offers, in its order of preference: AES-GCM first
/// (authenticated encryption in one pass), then the mandatory
/// AES-CM/HMAC-SHA1 for clients without GCM.
const SERVER_SRTP_PROFILES: [SrtpProfile; 3] =
    [SrtpProfile::AeadAes128Gcm, SrtpProfile::AeadAes256Gcm, SrtpProfile::Aes128CmHmacSha1_80];

fn random_hex(bytes: usize) -> Result<String, RtcError> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(internal)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// A peer that has answered an offer and waits for its [`Mux`].
pub struct ServerPeer {
    id: PeerId,
    ufrag: String,
    /// Boxed: a peer connection is kilobytes, and peers move between maps and threads.
    media: Box<Media>,
    /// Its checks' MESSAGE-INTEGRITY key (our ICE password); boxed, as the
    /// peer moves between maps and threads (a key is two hash states).
    key: Box<CheckKey>,
}

impl std::fmt::Debug for ServerPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerPeer").field("id", &self.id).field("ufrag", &self.ufrag).finish()
    }
}

impl ServerPeer {
    /// Its id.
    pub fn id(&self) -> PeerId {
        self.id
    }

    /// The server ufrag its ICE checks carry (USERNAME "ufrag:remote").
    pub fn ufrag(&self) -> &str {
        &self.ufrag
    }

    /// The SSRC of the stream it sends.
    pub fn ssrc(&self) -> u32 {
        self.media.ssrc()
    }

    /// Whether the remote side negotiated RFC 6465 mixer-to-client levels.
    pub fn has_csrc_levels(&self) -> bool {
        self.media.has_csrc_levels()
    }
}

impl Acceptor {
    /// Peers reached at `local` (the address advertised in every answer's
    /// ICE candidate, and the one datagrams arrive on), removed after
    /// `idle_timeout` without a datagram from them.
    pub fn new(local: SocketAddr, idle_timeout: Duration) -> Result<Self, RtcError> {
        // One DTLS certificate for every peer: a key pair per peer would cost a
        // signature-key generation per join.
        let provider = rtc::crypto::default_provider().map_err(internal)?;
        let params = CertificateParams::new(vec!["tutti".to_owned()]).map_err(internal)?;
        let cert = RTCCertificate::generate(provider.crypto(), rtc::crypto::SignatureScheme::EcdsaP256Sha256, params)
            .map_err(internal)?;
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(internal)?;
        Ok(Self {
            local,
            advertised: vec![local],
            tcp: false,
            cert,
            pwd_key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret),
            idle_timeout,
            next_id: Arc::new(AtomicU64::new(1)),
            provider,
            lean_send: true,
            lean_receive: true,
            retire: true,
            srtp_profiles: SERVER_SRTP_PROFILES.to_vec(),
        })
    }

    /// Whether peers accepted from now on send their RTP on the lean path
    /// (tutti's own RTP and SRTP once DTLS is up; the default) or through
    /// webrtc-rs's write pipeline (the fallback, for A/B comparisons).
    pub fn set_lean_send(&mut self, lean: bool) {
        self.lean_send = lean;
    }

    /// Whether accepted peers take the lean send path.
    pub fn lean_send(&self) -> bool {
        self.lean_send
    }

    /// Whether peers accepted from now on have their audio read on the lean
    /// receive path once connected (tutti-rtc's SRTP and receiver reports;
    /// the default) or by webrtc-rs's read pipeline.
    pub fn set_lean_receive(&mut self, lean: bool) {
        self.lean_receive = lean;
    }

    /// Whether accepted peers take the lean receive path.
    pub fn lean_receive(&self) -> bool {
        self.lean_receive
    }

    /// Whether peers accepted from now on have their webrtc-rs connection
    /// dropped once their call is up (the default): from then on tutti-rtc
    /// alone carries the call (lean RTP both ways, its own SRTCP, consent
    /// answers and DTLS alerts; an ICE restart gets the same answer again),
    /// which frees ~80 KiB per participant. Takes effect only with both lean
    /// paths on, and for a peer whose DTLS suite is AES-128-GCM (what
    /// browsers negotiate with our certificate); others keep webrtc-rs's.
    pub fn set_retire(&mut self, retire: bool) {
        self.retire = retire;
    }

    /// Whether accepted peers are retired once up.
    pub fn retire(&self) -> bool {
        self.retire
    }

    /// The SRTP profiles peers accepted from now on may negotiate, in order
    /// of preference (default: AES-128-GCM, AES-256-GCM, AES-CM-HMAC-SHA1-80).
    /// An empty list keeps the current one.
    pub fn set_srtp_profiles(&mut self, profiles: &[SrtpProfile]) {
        if !profiles.is_empty() {
            self.srtp_profiles = profiles.to_vec();
        }
    }

    /// The advertised address (the first, when there are several).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// A fresh peer id from the same sequence as accepted peers' (for a
    /// participant that is not a WebRTC peer, e.g. plain RTP).
    pub fn reserve_id(&self) -> PeerId {
        PeerId(self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Starts the id sequence at `first` (shared with every clone of this
    /// acceptor): a cluster node starts its ids at its node number's range,
    /// so that ids are unique across nodes. Only ever moves the sequence
    /// forward (an id already handed out is never handed out again).
    pub fn start_ids_at(&self, first: u64) {
        self.next_id.fetch_max(first, Ordering::Relaxed);
    }

    /// The addresses answers advertise, each as a UDP host candidate (and a
    /// passive TCP one with [`Acceptor::set_tcp`]), in order of preference:
    /// IPv4 and IPv6, public and private. An empty list keeps the current one.
    pub fn set_advertised(&mut self, addrs: &[SocketAddr]) {
        if let Some(&first) = addrs.first() {
            self.local = first;
            self.advertised = addrs.to_vec();
        }
    }

    /// Every advertised address, the preferred first.
    pub fn advertised(&self) -> &[SocketAddr] {
        &self.advertised
    }

    /// Whether answers from now on also offer ICE-TCP (RFC 6544): a
    /// `tcptype passive` host candidate on each advertised address, with a
    /// lower priority than every UDP one. The caller listens on those ports.
    pub fn set_tcp(&mut self, tcp: bool) {
        self.tcp = tcp;
    }

    /// Whether answers offer ICE-TCP.
    pub fn tcp(&self) -> bool {
        self.tcp
    }

    /// The candidate lines of an answer: one UDP host candidate per
    /// advertised address, then the passive TCP ones.
    pub fn candidate_lines(&self) -> Vec<String> {
        let mut lines = Vec::with_capacity(self.advertised.len() * 2);
        for (rank, &addr) in self.advertised.iter().enumerate() {
            let rank = u16::try_from(rank).unwrap_or(u16::MAX).min(8191);
            lines.push(udp_candidate(1 + 2 * u32::from(rank), addr, rank));
        }
        if self.tcp {
            for (rank, &addr) in self.advertised.iter().enumerate() {
                let rank = u16::try_from(rank).unwrap_or(u16::MAX).min(8191);
                lines.push(crate::tcp::tcp_candidate(2 + 2 * u32::from(rank), addr, 8191 - rank));
            }
        }
        lines
    }

    /// The advertised address a packet from `from` is stamped as arriving
    /// on, for the ICE agent (it picks the local candidate by address and
    /// protocol): the first of the sender's address family (an IPv4-mapped
    /// sender counts as IPv4), else the preferred one. With several
    /// addresses of one family the agent pairs the first; the socket's
    /// replies leave from whatever address the kernel routes them from.
    fn local_for(&self, from: SocketAddr) -> SocketAddr {
        if self.advertised.len() == 1 {
            return self.local;
        }
        let v4 = match from.ip() {
            std::net::IpAddr::V4(_) => true,
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some(),
        };
        self.advertised.iter().copied().find(|a| a.is_ipv4() == v4).unwrap_or(self.local)
    }

    /// Answers an SDP offer (non-trickle: the answer carries our one host
    /// candidate). Hand the peer to a [`Mux`] before the answer goes out, so
    /// ICE checks that race the answer find it.
    pub fn accept(&self, offer: &str, now: Instant) -> Result<(ServerPeer, String), RtcError> {
        if !offer.lines().any(|l| l.starts_with("m=audio")) {
            return Err(RtcError::NoAudio);
        }
        let id = PeerId(self.next_id.fetch_add(1, Ordering::Relaxed));
        let ufrag = format!("t{:x}{}", id.0, random_hex(3)?);
        let pwd = self.ice_pwd(&ufrag);
        // ICE-lite answers checks; consent is the client's job (RFC 7675), and
        // a client that stops checking and sending is caught by our idle timeout.
        // On the lean receive path webrtc-rs's agent sees neither the media
        // nor most checks (`Media::answer_check`: one every idle timeout), so
        // its own verdict waits longer: 3 idle timeouts without a check
        // (RFC 7675's 30 s of consent, by default) while datagrams still
        // come; a peer that vanishes is our idle timeout's, as before.
        // Each peer's crypto goes through its own tap, where the lean path
        // finds its SRTP keys (see `keys`).
        let slot = Arc::new(ExporterSlot::default());
        let disconnected = if self.lean_receive { self.idle_timeout * 3 } else { self.idle_timeout };
        let settings = SettingEngineBuilder::new()
            .with_lite(true)
            .with_multicast_dns_mode(MulticastDnsMode::Disabled)
            .with_ice_credentials(ufrag.clone(), pwd.clone())
            .with_ice_timeouts(Some(disconnected), Some(self.idle_timeout), None)
            .with_srtp_protection_profiles(self.srtp_profiles.iter().map(|p| p.to_dtls()).collect())
            .with_crypto_provider(Arc::new(KeyTap::new(self.provider.clone(), slot.clone())))
            .build();
        // On the lean receive path we report what we receive ourselves.
        let mut pc = build_connection(settings, vec![self.cert.clone()], CLIENT_OPUS_FMTP, !self.lean_receive, now)?;
        let remote_ufrag = sdp_attribute(offer, "ice-ufrag");
        let stereo = asks_for_stereo(offer);
        let offer = RTCSessionDescription::offer(offer.to_owned()).map_err(bad_sdp)?;
        pc.set_remote_description(now, offer).map_err(bad_sdp)?;
        let (sender, ssrc) = add_audio_track(&mut pc, CLIENT_OPUS_FMTP)?;
        add_candidates(&mut pc, self.candidate_lines())?;
        let answer = pc.create_answer(None).map_err(bad_sdp)?;
        pc.set_local_description(now, answer).map_err(bad_sdp)?;
        // webrtc-rs answers with the offer's Opus parameters and refuses an
        // edited local description; DTX only concerns the client's encoder,
        // so the answer the client gets asks for it.
        let mut sdp = with_opus_fmtp(&local_sdp(&pc)?, SERVER_OPUS_DTX);
        // A client that asks for stereo (a spatial room's render) is told it gets it.
        if stereo {
            sdp = with_opus_fmtp(&sdp, "stereo=1");
            sdp = with_opus_fmtp(&sdp, "sprop-stereo=1");
        }
        // webrtc-rs may drop an offered audio section it cannot read (a
        // garbled fmtp line, found by fuzzing) and still answer: without an
        // active audio section carrying our ufrag, there is no call to make.
        if !answers_audio(&sdp, &ufrag) {
            return Err(RtcError::NoAudio);
        }
        let mut media = Box::new(Media::new(pc, sender, ssrc, slot, self.lean_send, now)?);
        media.set_retire(self.retire && self.lean_receive && self.lean_send);
        if self.lean_receive {
            media.set_lean_receive(true);
            media.set_own_reports();
            if let Some(remote) = remote_ufrag {
                media.set_check_answerer(CheckAnswerer::new(&ufrag, &pwd, remote), self.idle_timeout, None);
            }
        }
        let key = Box::new(CheckKey::new(&pwd));
        Ok((ServerPeer { id, ufrag, media, key }, sdp))
    }

    /// The ICE password of the peer with server ufrag `ufrag`: derived from
    /// it with this acceptor's random secret (HMAC-SHA256, 128 bits in hex),
    /// so that any I/O thread can verify a check for a peer it does not hold
    /// ([`Mux::handle_packet`]) without asking anyone: an unauthenticated
    /// datagram reaches no shared state. Unguessable without the secret.
    fn ice_pwd(&self, ufrag: &str) -> String {
        let tag = ring::hmac::sign(&self.pwd_key, ufrag.as_bytes());
        tag.as_ref()[..16].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether `ufrag` has the form of the ufrags this acceptor hands out
    /// ("t", the peer id in hex, 6 hex digits): anything else is nobody's
    /// here, and costs no HMAC.
    fn could_be_ours(ufrag: &str) -> bool {
        (8..=24).contains(&ufrag.len())
            && ufrag.starts_with('t')
            && ufrag.bytes().skip(1).all(|b| b.is_ascii_hexdigit())
    }

    /// Whether `check` is signed with the password of the peer whose server
    /// ufrag is `ufrag` (see [`Acceptor::ice_pwd`]).
    fn verifies_for(&self, ufrag: &str, check: &[u8]) -> bool {
        CheckKey::new(&self.ice_pwd(ufrag)).verifies(check)
    }
}

/// Whether an SDP offer asks to receive stereo Opus (`stereo=1` on an
/// Opus payload type's `a=fmtp` line, RFC 7587): such a client is sent a
/// spatial room's stereo render.
pub fn asks_for_stereo(sdp: &str) -> bool {
    let opus = opus_payload_types(sdp);
    sdp.lines()
        .filter_map(|l| l.trim_end().strip_prefix("a=fmtp:"))
        .filter_map(|r| r.split_once(' '))
        .any(|(pt, params)| opus.contains(&pt) && params.split(';').any(|p| p.trim().eq_ignore_ascii_case("stereo=1")))
}

/// The payload types an SDP maps to Opus (`a=rtpmap:<pt> opus/…`).
fn opus_payload_types(sdp: &str) -> Vec<&str> {
    sdp.lines()
        .filter_map(|l| l.strip_prefix("a=rtpmap:"))
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, codec)| codec.to_ascii_lowercase().starts_with("opus/"))
        .map(|(pt, _)| pt)
        .collect()
}

/// Appends `param` to the `a=fmtp` line of every Opus payload type in `sdp`
/// (adding the line if there is none), unless it is there already.
fn with_opus_fmtp(sdp: &str, param: &str) -> String {
    let opus = opus_payload_types(sdp);
    let key = param.split('=').next().unwrap_or(param);
    let mut out = String::with_capacity(sdp.len() + 32);
    for line in sdp.split_inclusive('\n') {
        let body = line.trim_end_matches(['\r', '\n']);
        let ending = &line[body.len()..];
        match body.strip_prefix("a=fmtp:").and_then(|r| r.split_once(' ')) {
            Some((pt, params)) if opus.contains(&pt) && !params.split(';').any(|p| p.trim().starts_with(key)) => {
                out.push_str(body);
                out.push(';');
                out.push_str(param);
                out.push_str(ending);
            }
            _ => out.push_str(line),
        }
    }
    out
}

/// The value of the first `a=<name>:` line of an SDP (a bundle has one
/// `ice-ufrag` and one `ice-pwd`).
fn sdp_attribute<'a>(sdp: &'a str, name: &str) -> Option<&'a str> {
    sdp.lines().find_map(|l| l.trim_end().strip_prefix("a=")?.strip_prefix(name)?.strip_prefix(':'))
}

/// Whether an answer has an active (port not 0) audio section and our ufrag.
fn answers_audio(answer: &str, ufrag: &str) -> bool {
    let active_audio = answer.lines().any(|l| l.starts_with("m=audio ") && l.split_whitespace().nth(1) != Some("0"));
    let ours = answer.lines().any(|l| l.trim_end().strip_prefix("a=ice-ufrag:") == Some(ufrag));
    active_audio && ours
}

struct Peer {
    media: Box<Media>,
    ufrag: String,
    /// Its checks' MESSAGE-INTEGRITY key: only a check it verifies adds a route.
    key: Box<CheckKey>,
    /// Remote (transport, address) pairs routed to this peer (forgotten with
    /// it), the least recently authenticated first; at most [`MAX_ROUTES`].
    addrs: Vec<(bool, SocketAddr)>,
    deadline: Option<Instant>,
    last_seen: Instant,
    /// Not connected by then: given up ([`CONNECT_TIMEOUT`]).
    connect_by: Instant,
}

/// Many ICE-lite WebRTC peers behind one UDP address. Feed it datagrams
/// ([`Mux::handle_datagram`]) and timeouts ([`Mux::handle_timeout`]); drain
/// datagrams to send ([`Mux::poll_transmit`]) and events ([`Mux::poll_event`]).
/// It holds no socket and reads no clock.
///
/// Routing: a datagram from a known remote address goes to that address's
/// peer; otherwise a STUN request is routed by the server ufrag in its
/// USERNAME (each peer gets its own), and its address is learnt if its
/// MESSAGE-INTEGRITY verifies with that peer's password (at most
/// [`MAX_ROUTES`] per peer). Anything else is counted as unrouted and
/// dropped, here: only a verified check for a peer this mux does not hold
/// leaves it ([`Route::UnknownUfrag`]).
///
/// Several muxes can share one [`Acceptor`] (one mux per I/O thread, each
/// on its own socket bound to the same port): a peer is accepted anywhere
/// and adopted by the mux whose socket its first ICE check reaches.
pub struct Mux {
    acceptor: Acceptor,
    peers: HashMap<PeerId, Peer, BuildIdHasher>,
    by_ufrag: HashMap<String, PeerId>,
    /// Routes by remote (over TCP, address): a UDP and a TCP source may share ip:port.
    by_addr: HashMap<(bool, SocketAddr), PeerId>,
    deadlines: BinaryHeap<Reverse<(Instant, PeerId)>>,
    /// Idle checks: (when, peer); re-armed from `last_seen` when they fire.
    idle: BinaryHeap<Reverse<(Instant, PeerId)>>,
    events: VecDeque<MuxEvent>,
    transmits: VecDeque<Transmit>,
    /// Sent datagrams' buffers, for the next lean packets.
    spare: Spare,
    /// Where the lean receive path opens a datagram.
    scratch: Vec<u8>,
    stats: MuxStats,
}

impl std::fmt::Debug for Mux {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mux").field("local", &self.acceptor.local).field("peers", &self.peers.len()).finish()
    }
}

impl Mux {
    /// A mux with its own [`Acceptor`] for `local` and a 10 s idle timeout.
    pub fn new(local: SocketAddr) -> Result<Self, RtcError> {
        Ok(Self::with_acceptor(Acceptor::new(local, Duration::from_secs(10))?))
    }

    /// A mux whose peers come from `acceptor` (shared with other muxes).
    pub fn with_acceptor(acceptor: Acceptor) -> Self {
        Self {
            acceptor,
            peers: HashMap::default(),
            by_ufrag: HashMap::new(),
            by_addr: HashMap::new(),
            deadlines: BinaryHeap::new(),
            idle: BinaryHeap::new(),
            events: VecDeque::new(),
            transmits: VecDeque::new(),
            spare: Spare::default(),
            scratch: Vec::new(),
            stats: MuxStats::default(),
        }
    }

    /// The advertised local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.acceptor.local
    }

    /// The acceptor this mux's peers come from.
    pub fn acceptor(&self) -> &Acceptor {
        &self.acceptor
    }

    /// Counters.
    pub fn stats(&self) -> MuxStats {
        self.stats
    }

    /// Peers, connected or not.
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// Whether there are no peers.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// Whether this peer is here.
    pub fn contains(&self, id: PeerId) -> bool {
        self.peers.contains_key(&id)
    }

    /// The server ufrag of a peer here.
    pub fn ufrag_of(&self, id: PeerId) -> Option<&str> {
        self.peers.get(&id).map(|p| p.ufrag.as_str())
    }

    /// Routes a peer's ICE checks by a new server ufrag from now on (an ICE
    /// restart that changed the server's credentials; the old one no longer
    /// routes). Its known remote addresses, UDP and TCP, keep routing, and a
    /// new one (a new socket, a new TCP connection) is learnt from its first
    /// check. Returns whether the peer is here and the ufrag was free.
    pub fn set_ufrag(&mut self, id: PeerId, ufrag: &str) -> bool {
        if self.by_ufrag.get(ufrag).is_some_and(|&other| other != id) {
            return false;
        }
        let Some(peer) = self.peers.get_mut(&id) else { return false };
        self.by_ufrag.remove(&peer.ufrag);
        peer.ufrag = ufrag.to_owned();
        self.by_ufrag.insert(ufrag.to_owned(), id);
        true
    }

    /// The ids of every peer here.
    pub fn peer_ids(&self) -> impl Iterator<Item = PeerId> + '_ {
        self.peers.keys().copied()
    }

    /// Answers an offer and adopts the peer ([`Acceptor::accept`] + [`Mux::adopt`]).
    pub fn accept_offer(&mut self, offer: &str, now: Instant) -> Result<(PeerId, String), RtcError> {
        let (peer, sdp) = self.acceptor.accept(offer, now)?;
        let id = peer.id;
        self.adopt(peer, now);
        Ok((id, sdp))
    }

    /// Takes charge of an accepted peer: it becomes routable by its ufrag.
    pub fn adopt(&mut self, peer: ServerPeer, now: Instant) {
        let ServerPeer { id, ufrag, media, key } = peer;
        self.by_ufrag.insert(ufrag.clone(), id);
        self.stats.enter(media.state());
        let connect_by = now + CONNECT_TIMEOUT;
        let addrs = Vec::with_capacity(MAX_ROUTES);
        self.peers.insert(id, Peer { media, ufrag, key, addrs, deadline: None, last_seen: now, connect_by });
        self.idle.push(Reverse(((now + self.acceptor.idle_timeout).min(connect_by), id)));
        self.drain(id);
    }

    /// Takes one received datagram and says where it went.
    pub fn handle_datagram(&mut self, from: SocketAddr, data: &[u8], now: Instant) -> Route {
        self.handle_packet(from, false, data, now)
    }

    /// Takes one RFC 4571 frame received on the TCP connection from `from`
    /// (ICE-TCP; see [`crate::tcp`]) and says where it went. What the peer
    /// answers comes out of [`Mux::poll_transmit`] with `tcp` set.
    pub fn handle_tcp_frame(&mut self, from: SocketAddr, data: &[u8], now: Instant) -> Route {
        self.handle_packet(from, true, data, now)
    }

    /// Takes one packet, over UDP or TCP, and says where it went.
    ///
    /// Only authenticated input counts: a new remote address is learnt from
    /// an ICE check whose MESSAGE-INTEGRITY verifies with the peer's password
    /// (at most [`MAX_ROUTES`] per peer, the least recently authenticated
    /// dropped first), and a peer's idle timer restarts only on a verified
    /// check, audio whose SRTP authenticates, or anything while it connects
    /// (bounded by [`CONNECT_TIMEOUT`]). A check for a ufrag this mux does
    /// not hold goes out as [`Route::UnknownUfrag`] only when it verifies
    /// too ([`Acceptor::ice_pwd`]): unauthenticated datagrams reach nothing
    /// beyond this mux.
    pub fn handle_packet(&mut self, from: SocketAddr, tcp: bool, data: &[u8], now: Instant) -> Route {
        self.stats.datagrams_in += 1;
        self.stats.bytes_in += data.len() as u64;
        // Whether this datagram is known to be the peer's (a verified check).
        let mut verified = false;
        let id = match self.by_addr.get(&(tcp, from)) {
            Some(&id) => id,
            None => {
                let Some(ufrag) = stun::username(data).and_then(stun::local_ufrag) else {
                    self.stats.unrouted += 1;
                    return Route::Unrouted;
                };
                let Some(&id) = self.by_ufrag.get(ufrag) else {
                    if !Acceptor::could_be_ours(ufrag) {
                        self.stats.unrouted += 1;
                        return Route::Unrouted;
                    }
                    if self.acceptor.verifies_for(ufrag, data) {
                        return Route::UnknownUfrag(ufrag.to_owned());
                    }
                    self.stats.forged_checks += 1;
                    self.stats.unrouted += 1;
                    return Route::Unrouted;
                };
                if !self.peers.get(&id).is_some_and(|p| p.key.verifies(data)) {
                    // A forged check (or a peer gone): no route, no sign of life.
                    self.stats.forged_checks += 1;
                    self.stats.unrouted += 1;
                    return Route::Unrouted;
                }
                verified = true;
                id
            }
        };
        let Some(peer) = self.peers.get_mut(&id) else {
            self.stats.unrouted += 1;
            return Route::Unrouted;
        };
        if is_rtp(data) {
            match peer.media.read_lean(data, now, &mut self.scratch) {
                LeanRead::Audio(packet) => {
                    peer.last_seen = now;
                    peer.media.authenticated_from(from, tcp);
                    self.stats.lean_in += 1;
                    push_event(&mut self.events, &mut self.stats, id, PeerEvent::Audio(packet));
                    return Route::Peer(id);
                }
                // Failed authentication or a replay: counted, and nobody's.
                LeanRead::Dropped => {
                    self.stats.lean_dropped += 1;
                    return Route::Peer(id);
                }
                LeanRead::Rtc => peer.media.arriving_from(from, tcp),
            }
        }
        if stun::is_stun(data) {
            if peer.media.answer_check(data, from, tcp, now, &mut self.transmits, &mut self.spare) {
                // Answered: its integrity was verified. (A retired peer
                // answers checks from new addresses too: learnt here.)
                peer.last_seen = now;
                self.stats.lean_checks += 1;
                self.learn_route(id, (tcp, from));
                return Route::Peer(id);
            }
            // For webrtc-rs's agent, which verifies it again: the extra HMAC
            // is for the few checks not answered on the lean path.
            verified = verified || peer.key.verifies(data);
            if verified {
                peer.last_seen = now;
                self.learn_route(id, (tcp, from));
            }
        } else if !peer.media.is_connected() {
            // The handshake (DTLS, early media): bounded by CONNECT_TIMEOUT.
            peer.last_seen = now;
        }
        let Some(peer) = self.peers.get_mut(&id) else { return Route::Unrouted };
        if peer.media.is_retired() {
            match peer.media.read_retired(data, from, tcp, now, &mut self.scratch) {
                RetiredRead::Rtcp => peer.last_seen = now,
                RetiredRead::Closed => {
                    self.stats.leave(PeerState::Connected);
                    push_event(&mut self.events, &mut self.stats, id, PeerEvent::Closed);
                }
                RetiredRead::Nothing => {}
            }
            return Route::Peer(id);
        }
        // Copied for webrtc-rs only here: a lean read needs no copy.
        let msg = TaggedBytesMut {
            now,
            transport: TransportContext {
                local_addr: self.acceptor.local_for(from),
                peer_addr: from,
                transport_protocol: if tcp { TransportProtocol::TCP } else { TransportProtocol::UDP },
                ecn: None,
            },
            message: BytesMut::from(data),
        };
        // A DTLS record: its close_notify is looked for after it.
        if is_dtls(data) {
            peer.media.dtls_arriving();
        }
        // webrtc-rs logs and swallows per-packet errors; nothing to add here.
        if let Some(pc) = peer.media.pc.as_deref_mut() {
            let _ = pc.handle_read(msg);
        }
        let audio_before = self.stats.audio_in;
        if is_rtp(data) && peer.deadline.is_some() {
            // Media moves no timer: skip asking every handler for its deadline.
            self.drain_io(id);
        } else {
            self.drain(id);
        }
        if self.stats.audio_in != audio_before
            && let Some(peer) = self.peers.get_mut(&id)
        {
            // Audio that webrtc-rs's SRTP authenticated (the lean path off).
            peer.last_seen = now;
        }
        Route::Peer(id)
    }

    /// Routes `key` (transport, remote address) to peer `id`, whose check
    /// from there verified: a new address takes the place of the peer's
    /// least recently authenticated one beyond [`MAX_ROUTES`] (never the
    /// address its media goes to).
    fn learn_route(&mut self, id: PeerId, key: (bool, SocketAddr)) {
        let Some(peer) = self.peers.get_mut(&id) else { return };
        if peer.addrs.contains(&key) {
            Self::refresh_route(peer, key);
        } else {
            if peer.addrs.len() >= MAX_ROUTES {
                let selected = peer.media.selected_remote();
                if let Some(i) = peer.addrs.iter().position(|&(t, a)| selected != Some((a, t))) {
                    let old = peer.addrs.remove(i);
                    if self.by_addr.get(&old) == Some(&id) {
                        self.by_addr.remove(&old);
                    }
                    self.stats.routes_evicted += 1;
                }
            }
            peer.addrs.push(key);
        }
        // Also when another peer had it (a client's socket reused for a new call).
        if self.by_addr.insert(key, id) != Some(id) {
            self.stats.routes = self.by_addr.len() as u64;
        }
    }

    /// Marks a route the most recently authenticated of its peer's.
    fn refresh_route(peer: &mut Peer, key: (bool, SocketAddr)) {
        if peer.addrs.last() != Some(&key)
            && let Some(i) = peer.addrs.iter().position(|a| *a == key)
        {
            peer.addrs.remove(i);
            peer.addrs.push(key);
        }
    }

    /// The routes (transport, remote address) a peer has now, the least
    /// recently authenticated first.
    pub fn routes_of(&self, id: PeerId) -> Option<&[(bool, SocketAddr)]> {
        self.peers.get(&id).map(|p| p.addrs.as_slice())
    }

    /// Sends one 20 ms Opus frame to a connected peer, with its RFC 6464
    /// level, and the mixed sources (CSRCs with RFC 6465 levels) when the
    /// peer negotiated them, as the frame after the last one sent (or
    /// skipped): see [`Mux::send_audio_at`] to stamp it with the mixer's tick.
    pub fn send_audio(
        &mut self,
        id: PeerId,
        payload: Bytes,
        level: Option<u8>,
        contributors: &[Contributor],
        now: Instant,
    ) -> Result<(), RtcError> {
        self.send(id, None, &payload, level, contributors, now)
    }

    /// Sends the 20 ms Opus frame of mixer tick `tick` to a connected peer
    /// (as [`Mux::send_audio`]): its RTP timestamp is `tick` × 960 plus the
    /// peer's random offset, its sequence number the next one, and its
    /// marker bit is set when the previous tick was not sent (the first
    /// packet of a talkspurt after DTX).
    pub fn send_audio_at(
        &mut self,
        id: PeerId,
        tick: u64,
        payload: &Bytes,
        level: Option<u8>,
        contributors: &[Contributor],
        now: Instant,
    ) -> Result<(), RtcError> {
        self.send(id, Some(tick), payload, level, contributors, now)
    }

    fn send(
        &mut self,
        id: PeerId,
        tick: Option<u64>,
        payload: &Bytes,
        level: Option<u8>,
        contributors: &[Contributor],
        now: Instant,
    ) -> Result<(), RtcError> {
        let peer = self.peers.get_mut(&id).ok_or(RtcError::UnknownPeer(id))?;
        let timers_moved =
            peer.media.send_audio(tick, payload, level, contributors, now, &mut self.transmits, &mut self.spare)?;
        self.stats.audio_out += 1;
        if matches!(peer.media.send_path(), SendPath::Lean(_)) {
            self.stats.lean_out += 1;
        }
        if timers_moved {
            self.drain(id);
        }
        Ok(())
    }

    /// Reads the state that sending to these peers will read, one peer after
    /// the other with nothing in between, so that their cache misses overlap
    /// (the CPU has several in flight) instead of each send stalling on its
    /// own: the peers of a big room are thousands of bytes apart and cold by
    /// the next tick. Call it just before [`Mux::send_audio_at`] for the same
    /// peers; it changes nothing.
    pub fn warm(&self, ids: &[PeerId]) {
        for id in ids {
            if let Some(peer) = self.peers.get(id) {
                std::hint::black_box(peer.media.touch_send_state());
            }
        }
    }

    /// The path a peer's outgoing RTP takes (decided at its first packet).
    pub fn send_path(&self, id: PeerId) -> Option<SendPath> {
        self.peers.get(&id).map(|p| p.media.send_path())
    }

    /// The last RTCP sender report a peer sent us.
    pub fn last_sender_report(&self, id: PeerId) -> Option<SenderReportInfo> {
        self.peers.get(&id).and_then(|p| p.media.last_sender_report())
    }

    /// For tests: the sequence number of a peer's next packet, before its
    /// first (e.g. just short of a wrap). Returns whether it was set.
    #[doc(hidden)]
    pub fn set_next_sequence(&mut self, id: PeerId, seq: u16) -> bool {
        self.peers.get_mut(&id).is_some_and(|p| p.media.set_next_sequence(seq))
    }

    /// Runs the timers that are due, and reports peers idle for too long.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&Reverse((at, id))) = self.deadlines.peek() {
            if at > now {
                break;
            }
            self.deadlines.pop();
            let Some(peer) = self.peers.get_mut(&id) else { continue };
            if peer.deadline != Some(at) {
                continue; // superseded by a later entry
            }
            peer.deadline = None;
            let retired = peer.media.is_retired();
            peer.media.handle_timeout(now, &mut self.transmits);
            if !retired && peer.media.is_retired() {
                self.stats.retired += 1;
            }
            self.drain(id);
        }
        while let Some(&Reverse((at, id))) = self.idle.peek() {
            if at > now {
                break;
            }
            self.idle.pop();
            let Some(peer) = self.peers.get_mut(&id) else { continue };
            let state = peer.media.state();
            let expires = peer.last_seen + self.acceptor.idle_timeout;
            // Not connected in time, or silent while connecting: a failure to
            // connect. Silent once connected: the client vanished.
            if state == PeerState::Connecting && (now >= peer.connect_by || expires <= now) {
                let why = peer.media.failure_kind();
                peer.media.mark_closed();
                self.stats.leave(state);
                self.stats.failed(why);
                self.events.push_back(MuxEvent::Closed(id, CloseReason::Failed));
            } else if expires > now {
                let next = if state == PeerState::Connecting { expires.min(peer.connect_by) } else { expires };
                self.idle.push(Reverse((next, id)));
            } else if peer.media.mark_closed() {
                self.stats.leave(state);
                self.stats.timed_out += 1;
                self.events.push_back(MuxEvent::Closed(id, CloseReason::TimedOut));
            }
        }
    }

    /// The earliest instant [`Mux::handle_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let peek = |h: &BinaryHeap<Reverse<(Instant, PeerId)>>| h.peek().map(|Reverse((at, _))| *at);
        match (peek(&self.deadlines), peek(&self.idle)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        let t = self.transmits.pop_front()?;
        self.stats.datagrams_out += 1;
        self.stats.bytes_out += t.data.len() as u64;
        Some(t)
    }

    /// Hands back the buffer of a datagram from [`Mux::poll_transmit`] once
    /// it is sent: the lean path builds its next packets in such buffers
    /// instead of allocating one per packet. Optional (a buffer not handed
    /// back is freed); the mux keeps a bounded number.
    pub fn recycle(&mut self, data: BytesMut) {
        self.spare.give(data);
    }

    /// For tests: how many sent buffers are kept for the next packets.
    #[doc(hidden)]
    pub fn spare_buffers(&self) -> usize {
        self.spare.len()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<MuxEvent> {
        self.events.pop_front()
    }

    /// Answers a connected peer's ICE-restart offer (a client that moved to
    /// a new address or network): same participant, same DTLS session and
    /// keys, same server ufrag and password (fixed per peer), so its new
    /// checks route here as before. Returns the SDP answer.
    pub fn restart(&mut self, id: PeerId, offer: &str, now: Instant) -> Result<String, RtcError> {
        let peer = self.peers.get_mut(&id).ok_or(RtcError::UnknownPeer(id))?;
        if !peer.media.is_connected() {
            return Err(RtcError::NotConnected);
        }
        let sdp = peer.media.answer_restart(offer, now)?;
        // Checks with the new credentials are answered here too, once
        // webrtc-rs's agent has had them to itself for an idle timeout (it
        // nominates the new pair meanwhile; its state stays "connected").
        if let (Some(local), Some(pwd), Some(remote)) =
            (sdp_attribute(&sdp, "ice-ufrag"), sdp_attribute(&sdp, "ice-pwd"), sdp_attribute(offer, "ice-ufrag"))
        {
            let idle = self.acceptor.idle_timeout;
            peer.media.set_check_answerer(CheckAnswerer::new(local, pwd, remote), idle, Some(now + idle));
        }
        if let Some(pwd) = sdp_attribute(&sdp, "ice-pwd") {
            *peer.key = CheckKey::new(pwd);
        }
        peer.last_seen = now;
        self.drain(id);
        Ok(with_opus_fmtp(&sdp, SERVER_OPUS_DTX))
    }

    /// Closes a peer (DTLS close_notify goes out through `poll_transmit`) and forgets it.
    pub fn remove(&mut self, id: PeerId) -> Result<(), RtcError> {
        let mut peer = self.peers.remove(&id).ok_or(RtcError::UnknownPeer(id))?;
        self.stats.leave(peer.media.state());
        peer.media.close(&mut self.transmits);
        self.by_ufrag.remove(&peer.ufrag);
        for key in &peer.addrs {
            // Only if still ours: a later check may have moved it to another peer.
            if self.by_addr.get(key) == Some(&id) {
                self.by_addr.remove(key);
            }
        }
        self.stats.routes = self.by_addr.len() as u64;
        Ok(())
    }

    /// Collects what a peer has to send and say; its timer stays as it is.
    fn drain_io(&mut self, id: PeerId) {
        let Some(peer) = self.peers.get_mut(&id) else { return };
        let (events, stats) = (&mut self.events, &mut self.stats);
        let before = peer.media.state();
        peer.media.drain_io(&mut self.transmits, |event| push_event(events, stats, id, event));
        let after = peer.media.state();
        if after != before {
            stats.leave(before);
            stats.enter(after);
        }
    }

    /// Collects what a peer has to send and say, and re-arms its timer.
    fn drain(&mut self, id: PeerId) {
        let Some(peer) = self.peers.get_mut(&id) else { return };
        let (events, stats) = (&mut self.events, &mut self.stats);
        let before = peer.media.state();
        let next = peer.media.drain(&mut self.transmits, |event| push_event(events, stats, id, event));
        let after = peer.media.state();
        if after != before {
            stats.leave(before);
            stats.enter(after);
        }
        if next != peer.deadline {
            peer.deadline = next;
            if let Some(at) = next {
                self.deadlines.push(Reverse((at, id)));
            }
        }
    }
}

/// Hashes a [`PeerId`] with one multiplication (Fibonacci hashing): ids are
/// ours, handed out in sequence, so no one can aim collisions at the map;
/// SipHash's resistance to that costs each packet sent a few dozen ns.
#[derive(Debug, Clone, Copy, Default)]
struct BuildIdHasher;

impl std::hash::BuildHasher for BuildIdHasher {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

#[derive(Debug, Clone, Copy)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Not reached for a PeerId (one u64); any other key still hashes.
        for &b in bytes {
            self.write_u64(u64::from(b) ^ self.0.rotate_left(8));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn finish(&self) -> u64 {
        // hashbrown takes the top 7 bits as a tag and the low bits as the
        // bucket: fold the well-mixed high half down.
        self.0 ^ (self.0 >> 32)
    }
}

/// Turns a peer's event into the mux's, counting it.
fn push_event(events: &mut VecDeque<MuxEvent>, stats: &mut MuxStats, id: PeerId, event: PeerEvent) {
    events.push_back(match event {
        PeerEvent::Connected => MuxEvent::Connected(id),
        PeerEvent::Failed(why) => {
            stats.failed(why);
            MuxEvent::Closed(id, CloseReason::Failed)
        }
        PeerEvent::Closed => MuxEvent::Closed(id, CloseReason::Closed),
        PeerEvent::Audio(packet) => {
            stats.audio_in += 1;
            MuxEvent::Audio(id, packet)
        }
    });
}

#[cfg(test)]
mod tests {
    use super::with_opus_fmtp;

    #[test]
    fn stereo_is_read_from_the_opus_fmtp_line_only() {
        let opus = "a=rtpmap:111 opus/48000/2\r\na=fmtp:111 minptime=10;stereo=1\r\n";
        assert!(super::asks_for_stereo(opus));
        assert!(!super::asks_for_stereo("a=rtpmap:111 opus/48000/2\r\na=fmtp:111 sprop-stereo=1;stereo=0\r\n"));
        assert!(!super::asks_for_stereo("a=rtpmap:96 foo/48000\r\na=fmtp:96 stereo=1\r\n"));
    }

    #[test]
    fn dtx_is_added_to_the_opus_fmtp_line_only() {
        let sdp = "v=0\r\na=rtpmap:111 opus/48000/2\r\na=fmtp:111 minptime=10;useinbandfec=1\r\na=rtpmap:0 PCMU/8000\r\na=fmtp:0 x=1\r\n";
        let out = with_opus_fmtp(sdp, "usedtx=1");
        assert!(out.contains("a=fmtp:111 minptime=10;useinbandfec=1;usedtx=1\r\n"), "{out}");
        assert!(out.contains("a=fmtp:0 x=1\r\n"));
        assert_eq!(with_opus_fmtp(&out, "usedtx=1"), out, "added once");
    }
}
