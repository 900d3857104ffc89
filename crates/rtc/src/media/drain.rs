//! Draining webrtc-rs's connection: its datagrams into `transmits` (and,
//! from them, where the lean path sends), its state changes into peer
//! events, the peer's close_notify, and the RTP and RTCP it received.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Instant;

use rtc::peer_connection::event::RTCPeerConnectionEvent;
use rtc::peer_connection::message::RTCMessage;
use rtc::peer_connection::state::{RTCIceConnectionState, RTCPeerConnectionState};
use rtc::peer_connection::transport::RTCDtlsTransportState;
use rtc::sansio::Protocol;
use rtc::shared::TransportProtocol;

use super::audio::audio_of;
use super::datagram::{Transmit, is_rtcp};
use super::{Media, PeerEvent};

impl Media {
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
}
