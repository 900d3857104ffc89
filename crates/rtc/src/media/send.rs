//! The send path: one 20 ms Opus frame made an RTP packet on our SSRC, on the
//! path chosen at the stream's first packet: built straight into its datagram
//! buffer and protected in place (lean), or through webrtc-rs's write
//! pipeline. Also the fuzz targets' raw packets (the `fuzzing` feature).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
#[cfg(feature = "fuzzing")]
use rtc::shared::marshal::{Marshal, MarshalSize};

#[cfg(feature = "fuzzing")]
use super::audio::RawRtp;
use super::audio::{Contributor, MAX_CONTRIBUTORS};
use super::datagram::{Spare, Transmit};
use super::dtls::lean_keys;
use super::error::{RtcError, internal};
use super::numbering::PacketFields;
use super::rtcp::FIRST_REPORT;
use super::{LeanSender, Media, SendPath};
use crate::srtp::SrtpContext;

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

impl Media {
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
    pub(super) fn decide(&mut self, now: Instant) {
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

    /// Lets `frames` 20 ms frames pass unsent (DTX): the next packet's
    /// timestamp shows the time that went by, and its marker bit is set.
    pub(crate) fn skip_frames(&mut self, frames: u32) {
        self.numbering.next_tick = self.numbering.next_tick.wrapping_add(u64::from(frames));
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extension_blocks_are_padded_to_words() {
        let mut b = BytesMut::new();
        put_one_byte_extensions(&mut b, &[(1, &[0x25])]);
        assert_eq!(&b[..], &[0xBE, 0xDE, 0, 1, 0x10, 0x25, 0, 0]);
        let mut b = BytesMut::new();
        put_one_byte_extensions(&mut b, &[(1, &[5]), (2, &[1, 2, 3])]);
        assert_eq!(&b[..], &[0xBE, 0xDE, 0, 2, 0x10, 5, 0x22, 1, 2, 3, 0, 0]);
    }
}
