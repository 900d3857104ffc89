//! The lean receive path: an SRTP datagram on a connected peer opened by
//! tutti's own receiver and read straight into an audio packet, with the
//! path's state and counts. STUN, DTLS and RTCP stay webrtc-rs's.

use std::time::Instant;

use bytes::Bytes;

use super::audio::{RtpFields, audio_from, rtp_extension};
use super::datagram::is_rtp;
use super::dtls::lean_key_pair;
use super::{LeanRead, LeanReceiver, Media, ReceivePath, ReceiveStats};
use crate::srtp::{SrtpError, SrtpReceiver};

/// Packets that fail on a fresh lean receiver, none authenticating, before
/// it gives up for this DTLS session and leaves reading to webrtc-rs (keys
/// that do not fit, or a first packet whose rollover counter it guessed
/// wrong: the sender's sequence number wrapped before we were connected).
const LEAN_RECEIVE_GIVE_UP: u32 = 16;

impl Media {
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
}
