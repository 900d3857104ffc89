//! Ogg/Opus encapsulation (RFC 3533 pages, RFC 7845 Opus mapping), writing
//! side only: identification header (`OpusHead`), comment header
//! (`OpusTags`), then audio pages whose granule position counts 48 kHz
//! samples.
//!
//! The writer is sans-I/O in spirit: it formats pages into any
//! [`std::io::Write`] and tracks the bytes and samples written, so the
//! recorder can decide limits before it writes.
//!
//! Pages: the two headers each get their own page (RFC 7845 §3). Audio
//! packets are gathered into a page of at most [`PAGE_PACKETS`] packets
//! (one second at 20 ms) or 255 lacing values, whichever comes first. The
//! last page is always written on [`OggOpusWriter::finish`] with the
//! end-of-stream flag and at least one packet (a zero-length-frame packet
//! is added if none is pending), so a reader sees a proper EOS.

use std::io::{self, Write};

/// Audio packets gathered into one page at most (1 s of 20 ms frames).
pub const PAGE_PACKETS: usize = 50;
/// Largest Opus packet accepted, in bytes (RFC 6716 §3.2: 120 ms, 6 × 1275 bytes plus framing).
pub const MAX_PACKET_BYTES: usize = 7_680;
/// Bytes of an Ogg page header before the lacing values.
const PAGE_HEADER_BYTES: usize = 27;

/// The Ogg CRC-32 (polynomial 0x04C11DB7, not reflected, initial 0, no final xor) as a table.
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut r = (i as u32) << 24;
        let mut bit = 0;
        while bit < 8 {
            r = if r & 0x8000_0000 != 0 { (r << 1) ^ 0x04C1_1DB7 } else { r << 1 };
            bit += 1;
        }
        table[i] = r;
        i += 1;
    }
    table
};

/// The Ogg page checksum of `data` (with the page's CRC field zeroed).
pub fn ogg_crc(data: &[u8]) -> u32 {
    data.iter().fold(0u32, |crc, &b| (crc << 8) ^ CRC_TABLE[(((crc >> 24) as u8) ^ b) as usize])
}

/// Samples (at 48 kHz) an Opus packet decodes to, from its TOC byte and
/// frame count (RFC 6716 §3.1); `None` for an empty or malformed packet.
pub fn opus_packet_samples(packet: &[u8]) -> Option<u32> {
    let toc = *packet.first()?;
    let config = toc >> 3;
    let frame: u32 = match config {
        0..=11 => [480, 960, 1920, 2880][usize::from(config % 4)],
        12..=15 => [480, 960][usize::from(config % 2)],
        _ => [120, 240, 480, 960][usize::from(config % 4)],
    };
    let frames: u32 = match toc & 3 {
        0 => 1,
        1 | 2 => 2,
        _ => u32::from(*packet.get(1)? & 0x3F),
    };
    let samples = frame * frames;
    (frames > 0 && samples <= 5_760).then_some(samples)
}

/// The one-byte packet that asks the decoder for packet-loss concealment
/// in place of one frame (RFC 7845 §4.1, RFC 6716 §3.2.1: code 0 with a
/// zero-length frame), in the same configuration (mode, bandwidth, frame
/// size, stereo flag) as the packet whose TOC is `toc`.
pub fn plc_packet(toc: u8) -> [u8; 1] {
    [toc & 0xFC]
}

/// Lacing values a packet of `len` bytes takes in a page.
fn lacing_len(len: usize) -> usize {
    len / 255 + 1
}

/// Size in bytes of one page holding packets of these lengths.
fn page_bytes<'a>(lens: impl IntoIterator<Item = &'a usize>) -> u64 {
    lens.into_iter().map(|&l| (lacing_len(l) + l) as u64).sum::<u64>() + PAGE_HEADER_BYTES as u64
}

/// The parameters of an `OpusHead` (RFC 7845 §5.1), channel mapping family 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpusHead {
    /// 1 (mono) or 2 (stereo).
    pub channels: u8,
    /// Samples (48 kHz) the decoder discards at the start.
    pub pre_skip: u16,
    /// The original input rate, informational (48 000).
    pub input_rate: u32,
}

impl OpusHead {
    /// The 19-byte identification header packet.
    pub fn packet(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(19);
        p.extend_from_slice(b"OpusHead");
        p.push(1); // version
        p.push(self.channels);
        p.extend_from_slice(&self.pre_skip.to_le_bytes());
        p.extend_from_slice(&self.input_rate.to_le_bytes());
        p.extend_from_slice(&0i16.to_le_bytes()); // output gain
        p.push(0); // mapping family 0: mono or stereo, no table
        p
    }
}

/// The comment header packet (RFC 7845 §5.2): vendor string and `KEY=value` comments.
pub fn opus_tags(vendor: &str, comments: &[String]) -> Vec<u8> {
    let mut p = Vec::with_capacity(16 + vendor.len() + comments.iter().map(|c| c.len() + 4).sum::<usize>());
    p.extend_from_slice(b"OpusTags");
    p.extend_from_slice(&(vendor.len() as u32).to_le_bytes());
    p.extend_from_slice(vendor.as_bytes());
    p.extend_from_slice(&(comments.len() as u32).to_le_bytes());
    for c in comments {
        p.extend_from_slice(&(c.len() as u32).to_le_bytes());
        p.extend_from_slice(c.as_bytes());
    }
    p
}

/// Writes one logical Ogg/Opus stream into `W`.
#[derive(Debug)]
pub struct OggOpusWriter<W: Write> {
    out: W,
    serial: u32,
    sequence: u32,
    /// Granule position after the last packet handed in (48 kHz samples, pre-skip included).
    granule: u64,
    /// Granule position after each pending packet.
    pending: Vec<(Vec<u8>, u64)>,
    pending_lacing: usize,
    bytes: u64,
    last_toc: Option<u8>,
    head: OpusHead,
    finished: bool,
}

impl<W: Write> OggOpusWriter<W> {
    /// Writes the two header pages and returns the writer for audio.
    pub fn new(out: W, serial: u32, head: OpusHead, vendor: &str, comments: &[String]) -> io::Result<Self> {
        let mut w = Self {
            out,
            serial,
            sequence: 0,
            granule: 0,
            pending: Vec::with_capacity(PAGE_PACKETS),
            pending_lacing: 0,
            bytes: 0,
            last_toc: None,
            head,
            finished: false,
        };
        w.write_page(&[&head.packet()], 0, 0x02)?;
        let tags = opus_tags(vendor, comments);
        if lacing_len(tags.len()) > 255 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "OpusTags longer than one page"));
        }
        w.write_page(&[&tags], 0, 0)?;
        Ok(w)
    }

    /// Bytes written to `W` so far (pending packets not included).
    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    /// Granule position after the last packet pushed (48 kHz samples, pre-skip included).
    pub fn granule(&self) -> u64 {
        self.granule
    }

    /// Samples a player plays from what was pushed so far (granule minus pre-skip).
    pub fn playable_samples(&self) -> u64 {
        self.granule.saturating_sub(u64::from(self.head.pre_skip))
    }

    /// The file's size if a packet of `len` bytes were pushed and the stream then finished.
    pub fn size_if_finished_after(&self, len: usize) -> u64 {
        let lens: Vec<usize> = self.pending.iter().map(|(p, _)| p.len()).collect();
        if self.needs_flush_before(len) {
            self.bytes + page_bytes(&lens) + page_bytes(&[len])
        } else {
            self.bytes + page_bytes(lens.iter().chain(std::iter::once(&len)))
        }
    }

    fn needs_flush_before(&self, len: usize) -> bool {
        !self.pending.is_empty() && (self.pending.len() >= PAGE_PACKETS || self.pending_lacing + lacing_len(len) > 255)
    }

    /// Adds one packet decoding to `samples` samples (48 kHz). A full page
    /// is written first if the packet does not fit in the pending one.
    pub fn push_packet(&mut self, packet: &[u8], samples: u32) -> io::Result<()> {
        if self.finished {
            return Err(io::Error::other("stream already finished"));
        }
        if packet.is_empty() || packet.len() > MAX_PACKET_BYTES {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "Opus packet size out of range"));
        }
        if self.needs_flush_before(packet.len()) {
            self.flush_pending(0)?;
        }
        self.granule += u64::from(samples);
        self.pending_lacing += lacing_len(packet.len());
        self.pending.push((packet.to_vec(), self.granule));
        self.last_toc = Some(packet[0]);
        Ok(())
    }

    /// The TOC byte of the last packet pushed.
    pub fn last_toc(&self) -> Option<u8> {
        self.last_toc
    }

    fn flush_pending(&mut self, flags: u8) -> io::Result<()> {
        let Some(&(_, granule)) = self.pending.last() else { return Ok(()) };
        let pending = std::mem::take(&mut self.pending);
        let packets: Vec<&[u8]> = pending.iter().map(|(p, _)| p.as_slice()).collect();
        self.write_page(&packets, granule, flags)?;
        self.pending = pending;
        self.pending.clear();
        self.pending_lacing = 0;
        Ok(())
    }

    /// Writes what is pending as the last page (end-of-stream flag) and flushes `W`.
    pub fn finish(&mut self) -> io::Result<()> {
        if self.finished {
            return Ok(());
        }
        if self.pending.is_empty() {
            // An EOS page carries at least one packet: one frame of concealment (20 ms).
            let toc = self.last_toc.unwrap_or(0xF8); // CELT fullband 20 ms mono
            self.push_packet(&plc_packet(toc), 960)?;
        }
        self.flush_pending(0x04)?;
        self.finished = true;
        self.out.flush()
    }

    /// The inner writer.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    fn write_page(&mut self, packets: &[&[u8]], granule: u64, flags: u8) -> io::Result<()> {
        let lacing: usize = packets.iter().map(|p| lacing_len(p.len())).sum();
        debug_assert!(lacing <= 255);
        let body: usize = packets.iter().map(|p| p.len()).sum();
        let mut page = Vec::with_capacity(PAGE_HEADER_BYTES + lacing + body);
        page.extend_from_slice(b"OggS");
        page.push(0); // version
        page.push(flags);
        page.extend_from_slice(&granule.to_le_bytes());
        page.extend_from_slice(&self.serial.to_le_bytes());
        page.extend_from_slice(&self.sequence.to_le_bytes());
        page.extend_from_slice(&[0; 4]); // CRC, filled below
        page.push(lacing as u8);
        for p in packets {
            page.extend(std::iter::repeat_n(255u8, p.len() / 255));
            page.push((p.len() % 255) as u8);
        }
        for p in packets {
            page.extend_from_slice(p);
        }
        let crc = ogg_crc(&page);
        page[22..26].copy_from_slice(&crc.to_le_bytes());
        self.out.write_all(&page)?;
        self.sequence = self.sequence.wrapping_add(1);
        self.bytes += page.len() as u64;
        Ok(())
    }
}

/// An Ogg/Opus file of `frames` 20 ms frames of a `freq` Hz sine at
/// amplitude 0.3 (real Opus, this writer), and its Opus packets: a sound to
/// play into a room in tests and examples.
pub fn tone_file(freq: f32, frames: usize) -> io::Result<(Vec<u8>, Vec<bytes::Bytes>)> {
    let mut enc = tutti_mix::Encoder::new(&tutti_mix::EncoderConfig::default()).map_err(io::Error::other)?;
    let head = OpusHead { channels: 1, pre_skip: 312, input_rate: 48_000 };
    let mut w = OggOpusWriter::new(Vec::new(), 7, head, "tutti tone", &[])?;
    let mut packets = Vec::with_capacity(frames);
    for n in 0..frames {
        let pcm = tutti_mix::tone(freq, 0.3, (n * tutti_mix::FRAME_SAMPLES) as u64);
        let packet = enc.encode(&pcm);
        w.push_packet(&packet, 960)?;
        packets.push(packet);
    }
    w.finish()?;
    Ok((std::mem::take(w.get_mut()), packets))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_a_known_page() {
        // The Ogg CRC of "123456789" (CRC-32/MPEG-2 without the init/xorout: CRC-32/OGG... check value 0x89A1897F).
        assert_eq!(ogg_crc(b"123456789"), 0x89A1_897F);
    }

    #[test]
    fn packet_durations_follow_the_toc() {
        assert_eq!(opus_packet_samples(&[0xF8]), Some(960)); // CELT FB 20 ms, one frame
        assert_eq!(opus_packet_samples(&[0x08 | 0x01, 0, 0]), Some(1920)); // SILK NB 20 ms, two frames
        assert_eq!(opus_packet_samples(&[0xFB, 0x03]), Some(2880)); // code 3, three 20 ms frames
        assert_eq!(opus_packet_samples(&[0xFB, 0x07]), None); // 140 ms > 120 ms
        assert_eq!(opus_packet_samples(&[0xFB]), None); // code 3 without its count byte
        assert_eq!(opus_packet_samples(&[]), None);
    }

    #[test]
    fn pages_split_at_fifty_packets_and_sizes_are_predicted() {
        let mut w =
            OggOpusWriter::new(Vec::new(), 7, OpusHead { channels: 1, pre_skip: 312, input_rate: 48_000 }, "t", &[])
                .expect("writing to a Vec cannot fail");
        for i in 0..120usize {
            let len = 10 + i % 300;
            let predicted = w.size_if_finished_after(len);
            w.push_packet(&vec![0xF8; len], 960).expect("a Vec accepts");
            let mut copy_pending_finish = w.bytes_written();
            // Finishing now would write exactly the predicted size.
            let lens: Vec<usize> = w.pending.iter().map(|(p, _)| p.len()).collect();
            copy_pending_finish += page_bytes(&lens);
            assert_eq!(predicted, copy_pending_finish, "packet {i}");
        }
        w.finish().expect("a Vec accepts");
        assert_eq!(w.granule(), 120 * 960);
        assert_eq!(w.bytes_written(), w.get_mut().len() as u64);
    }
}
