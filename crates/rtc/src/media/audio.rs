//! The audio packet tutti reads ([`AudioPacket`], its [`Contributor`]s), read
//! from a parsed RTP packet by either parser: webrtc-rs's, or the lean receive
//! path's own reading of the header and its extensions. Also the fuzz
//! targets' packet shape and parsers (the `fuzzing` feature).

use bytes::Bytes;

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

/// An RTP packet as tutti reads it: the RFC 6464 level from the extension
/// `level_ext`, the contributors from the CSRCs with RFC 6465 levels from
/// `csrc_level_ext`.
pub(super) fn audio_of(packet: rtc::rtp::Packet, level_ext: Option<u8>, csrc_level_ext: Option<u8>) -> AudioPacket {
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
pub(super) struct RtpFields {
    pub(super) ssrc: u32,
    pub(super) seq: u16,
    pub(super) timestamp: u32,
    pub(super) marker: bool,
}

/// An [`AudioPacket`] from a parsed RTP packet, whichever parser read it
/// (webrtc-rs's for [`audio_of`], tutti's for [`Media::read_lean`]): the
/// RFC 6464 level from extension `level_ext`, the contributors from the
/// CSRCs with RFC 6465 levels from `csrc_level_ext` (127 when missing).
pub(super) fn audio_from<E: AsRef<[u8]>>(
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
pub(super) fn rtp_extension(header: &[u8], id: u8) -> Option<&[u8]> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rtc::shared::marshal::Unmarshal;

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
}
