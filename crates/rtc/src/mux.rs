//! Many WebRTC peers behind one UDP address, sans-IO.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use rtc::ice::mdns::MulticastDnsMode;
use rtc::peer_connection::certificate::{CertificateParams, RTCCertificate};
use rtc::peer_connection::configuration::setting_engine::SettingEngineBuilder;
use rtc::peer_connection::sdp::RTCSessionDescription;
use rtc::sansio::Protocol;
use rtc::shared::{TaggedBytesMut, TransportContext, TransportProtocol};

use crate::media::{
    AudioPacket, Media, PeerEvent, PeerFailure, PeerState, RtcError, Transmit, add_audio_track, add_host_candidate,
    bad_sdp, build_connection, internal, local_sdp,
};
use crate::stun;

/// Identifies a peer within a [`Mux`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub u64);

impl std::fmt::Display for PeerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What a [`Mux`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MuxEvent {
    /// ICE and DTLS are up: audio can flow both ways.
    Connected(PeerId),
    /// A peer sent an audio packet.
    Audio(PeerId, AudioPacket),
    /// The peer's connection failed or was closed; remove it.
    Closed(PeerId),
}

/// Counters of a [`Mux`], and its peers by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MuxStats {
    /// Datagrams from addresses that belong to no peer and carry no known ICE username.
    pub unrouted: u64,
    /// Audio packets handed out.
    pub audio_in: u64,
    /// Audio packets written.
    pub audio_out: u64,
    /// Peers now answered but not connected yet (ICE and DTLS under way).
    pub connecting: u64,
    /// Peers now connected.
    pub connected: u64,
    /// Peers whose connection failed before ICE connected.
    pub ice_failures: u64,
    /// Peers whose ICE connected but whose DTLS handshake failed.
    pub dtls_failures: u64,
    /// Connected peers whose connection failed later (ICE consent lost:
    /// the client vanished without saying goodbye).
    pub lost: u64,
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

struct Peer {
    media: Media,
    ufrag: String,
    /// Remote addresses routed to this peer (forgotten with it).
    addrs: Vec<SocketAddr>,
    deadline: Option<Instant>,
    /// Not connected by then: the peer is given up ([`CONNECT_TIMEOUT`]).
    connect_by: Instant,
}

/// How long a peer may take to connect (ICE and DTLS) after its answer
/// before it is given up and closed. webrtc-rs fails a peer whose ICE
/// checks never come, but waits forever on a DTLS handshake that stalls.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Many ICE-lite WebRTC peers behind one UDP address. Feed it datagrams
/// ([`Mux::handle_datagram`]) and timeouts ([`Mux::handle_timeout`]); drain
/// datagrams to send ([`Mux::poll_transmit`]) and events ([`Mux::poll_event`]).
/// It holds no socket and reads no clock.
///
/// Routing: a datagram from a known remote address goes to that address's
/// peer; otherwise a STUN request is routed by the server ufrag in its
/// USERNAME (each peer gets its own), and its address is learnt. Anything
/// else is counted as unrouted and dropped.
pub struct Mux {
    local: SocketAddr,
    cert: RTCCertificate,
    next_id: u64,
    peers: HashMap<PeerId, Peer>,
    by_ufrag: HashMap<String, PeerId>,
    by_addr: HashMap<SocketAddr, PeerId>,
    deadlines: BinaryHeap<Reverse<(Instant, PeerId)>>,
    events: VecDeque<MuxEvent>,
    transmits: VecDeque<Transmit>,
    stats: MuxStats,
}

impl std::fmt::Debug for Mux {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mux").field("local", &self.local).field("peers", &self.peers.len()).finish()
    }
}

fn random_hex(bytes: usize) -> Result<String, RtcError> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(internal)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

impl Mux {
    /// A mux whose peers are reached at `local` (the address advertised in
    /// every answer's ICE candidate, and the one datagrams arrive on).
    pub fn new(local: SocketAddr) -> Result<Self, RtcError> {
        // One DTLS certificate for every peer: a key pair per peer would cost a
        // signature-key generation per join.
        let provider = rtc::crypto::default_provider().map_err(internal)?;
        let params = CertificateParams::new(vec!["tutti".to_owned()]).map_err(internal)?;
        let cert = RTCCertificate::generate(provider.crypto(), rtc::crypto::SignatureScheme::EcdsaP256Sha256, params)
            .map_err(internal)?;
        Ok(Self {
            local,
            cert,
            next_id: 1,
            peers: HashMap::new(),
            by_ufrag: HashMap::new(),
            by_addr: HashMap::new(),
            deadlines: BinaryHeap::new(),
            events: VecDeque::new(),
            transmits: VecDeque::new(),
            stats: MuxStats::default(),
        })
    }

    /// The advertised local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
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

    /// Answers an SDP offer (non-trickle: the answer carries our one host
    /// candidate). The peer is routable as soon as this returns, so ICE
    /// checks that race the HTTP answer are not lost.
    pub fn accept_offer(&mut self, offer: &str, now: Instant) -> Result<(PeerId, String), RtcError> {
        if !offer.lines().any(|l| l.starts_with("m=audio")) {
            return Err(RtcError::NoAudio);
        }
        let id = PeerId(self.next_id);
        self.next_id += 1;
        let ufrag = format!("t{:x}{}", id.0, random_hex(3)?);
        let pwd = random_hex(12)?;
        let settings = SettingEngineBuilder::new()
            .with_lite(true)
            .with_multicast_dns_mode(MulticastDnsMode::Disabled)
            .with_ice_credentials(ufrag.clone(), pwd)
            .build();
        let mut pc = build_connection(settings, vec![self.cert.clone()], now)?;
        let offer = RTCSessionDescription::offer(offer.to_owned()).map_err(bad_sdp)?;
        pc.set_remote_description(now, offer).map_err(bad_sdp)?;
        let (sender, ssrc) = add_audio_track(&mut pc)?;
        add_host_candidate(&mut pc, self.local)?;
        let answer = pc.create_answer(None).map_err(bad_sdp)?;
        pc.set_local_description(now, answer).map_err(bad_sdp)?;
        let sdp = local_sdp(&pc)?;
        let media = Media::new(pc, sender, ssrc)?;
        self.by_ufrag.insert(ufrag.clone(), id);
        self.stats.enter(media.state());
        let connect_by = now + CONNECT_TIMEOUT;
        self.deadlines.push(Reverse((connect_by, id)));
        self.peers.insert(id, Peer { media, ufrag, addrs: Vec::new(), deadline: None, connect_by });
        self.drain(id);
        Ok((id, sdp))
    }

    /// Takes one received datagram. Returns the peer it was routed to, or
    /// `None` when it belongs to no peer (counted in [`MuxStats::unrouted`]).
    pub fn handle_datagram(&mut self, from: SocketAddr, data: &[u8], now: Instant) -> Option<PeerId> {
        let id = match self.by_addr.get(&from) {
            Some(&id) => id,
            None => {
                let routed = stun::username(data)
                    .and_then(stun::local_ufrag)
                    .and_then(|ufrag| self.by_ufrag.get(ufrag).copied());
                let Some(id) = routed else {
                    self.stats.unrouted += 1;
                    return None;
                };
                // ICE checks this request's integrity; only then does the
                // agent answer, so a forged USERNAME gains nothing but a
                // routing entry, replaced by the real peer's next check.
                self.by_addr.insert(from, id);
                if let Some(peer) = self.peers.get_mut(&id) {
                    peer.addrs.push(from);
                }
                id
            }
        };
        let peer = self.peers.get_mut(&id)?;
        let msg = TaggedBytesMut {
            now,
            transport: TransportContext {
                local_addr: self.local,
                peer_addr: from,
                transport_protocol: TransportProtocol::UDP,
                ecn: None,
            },
            message: BytesMut::from(data),
        };
        // webrtc-rs logs and swallows per-packet errors; nothing to add here.
        let _ = peer.media.pc.handle_read(msg);
        self.drain(id);
        Some(id)
    }

    /// Sends one 20 ms Opus frame to a connected peer, with its RFC 6464
    /// level when the peer negotiated the extension.
    pub fn send_audio(&mut self, id: PeerId, payload: Bytes, level: Option<u8>, now: Instant) -> Result<(), RtcError> {
        let peer = self.peers.get_mut(&id).ok_or(RtcError::UnknownPeer(id))?;
        peer.media.send_audio(payload, level, now)?;
        self.stats.audio_out += 1;
        self.drain(id);
        Ok(())
    }

    /// Runs the timers that are due.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&Reverse((at, id))) = self.deadlines.peek() {
            if at > now {
                break;
            }
            self.deadlines.pop();
            let Some(peer) = self.peers.get_mut(&id) else { continue };
            if now >= peer.connect_by && peer.media.state() == PeerState::Connecting {
                let why = peer.media.give_up(&mut self.transmits);
                self.stats.leave(PeerState::Connecting);
                self.stats.failed(why);
                self.events.push_back(MuxEvent::Closed(id));
                continue;
            }
            if peer.deadline != Some(at) {
                continue; // superseded by a later entry
            }
            peer.deadline = None;
            let _ = peer.media.pc.handle_timeout(now);
            self.drain(id);
        }
    }

    /// The earliest instant [`Mux::handle_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines.peek().map(|Reverse((at, _))| *at)
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<MuxEvent> {
        self.events.pop_front()
    }

    /// Closes a peer (DTLS close_notify goes out through `poll_transmit`) and forgets it.
    pub fn remove(&mut self, id: PeerId) -> Result<(), RtcError> {
        let mut peer = self.peers.remove(&id).ok_or(RtcError::UnknownPeer(id))?;
        self.stats.leave(peer.media.state());
        peer.media.close(&mut self.transmits);
        self.by_ufrag.remove(&peer.ufrag);
        for addr in &peer.addrs {
            // Only if still ours: a later check may have moved it to another peer.
            if self.by_addr.get(addr) == Some(&id) {
                self.by_addr.remove(addr);
            }
        }
        Ok(())
    }

    /// Collects what a peer has to send and say, and re-arms its timer.
    fn drain(&mut self, id: PeerId) {
        let Some(peer) = self.peers.get_mut(&id) else { return };
        let (events, stats) = (&mut self.events, &mut self.stats);
        let before = peer.media.state();
        let next = peer.media.drain(&mut self.transmits, |event| {
            events.push_back(match event {
                PeerEvent::Connected => MuxEvent::Connected(id),
                PeerEvent::Closed => MuxEvent::Closed(id),
                PeerEvent::Audio(packet) => {
                    stats.audio_in += 1;
                    MuxEvent::Audio(id, packet)
                }
            })
        });
        let after = peer.media.state();
        if after != before {
            stats.leave(before);
            stats.enter(after);
            if let Some(why) = peer.media.failure() {
                stats.failed(why);
            }
        }
        if next != peer.deadline {
            peer.deadline = next;
            if let Some(at) = next {
                self.deadlines.push(Reverse((at, id)));
            }
        }
    }
}
