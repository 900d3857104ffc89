//! A clip: an Ogg/Opus file read whole, checked and cut into the 20 ms
//! Opus frames the mixer takes, each with its RFC 6464 level. Parsing and
//! the one decode that measures the levels run where the caller runs them
//! (the API, on a blocking thread): never on a media thread.
//!
//! The Ogg layer is the `ogg` crate's (RustAudio; pages, lacing, CRC,
//! fuzzed upstream): reading pages is a parser of untrusted bytes, and a
//! maintained one beats a new one. The Opus layer is RFC 7845: an
//! `OpusHead` (version 0.x, 1 or 2 channels, mapping family 0 or 1), an
//! `OpusTags`, then audio packets. Only 20 ms packets are taken (what the
//! mixer mixes and forwards; `opusenc`'s default), so a file's frames are
//! forwarded as they are when it plays alone.

use std::io::Cursor;

use bytes::{Bytes, BytesMut};
use tutti_mix::{Decoder, FRAME_SAMPLES, MAX_PAYLOAD_BYTES, inspect, level_of};

/// Longest clip, in 20 ms frames (3 hours): bounds the memory and the
/// decode a file of tiny frames could cost.
pub(crate) const MAX_FRAMES: usize = 3 * 3600 * 50;

/// Why a file cannot be played. Each names what is wrong in words a user can act on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum ClipError {
    /// Not an Ogg stream, or its pages are damaged.
    #[error("not a readable Ogg file: {0}")]
    NotOgg(String),
    /// An Ogg stream of something else than Opus (Vorbis, FLAC, …).
    #[error("the Ogg stream is not Opus (no OpusHead): only Ogg/Opus files are played")]
    NotOpus,
    /// The Opus headers are malformed or unsupported.
    #[error("unsupported Opus header: {0}")]
    BadHeader(String),
    /// More than one logical stream (a multiplexed or chained file).
    #[error("the file holds more than one Ogg stream; only a single Opus stream is played")]
    MultipleStreams,
    /// An audio packet that is not one 20 ms Opus packet.
    #[error(
        "audio packet {index} lasts {samples} samples, not 960 (20 ms): encode with 20 ms frames (opusenc --framesize 20)"
    )]
    FrameSize {
        /// Its position among the audio packets, from 0.
        index: usize,
        /// Its duration at 48 kHz (0: unreadable).
        samples: u32,
    },
    /// An audio packet that does not decode.
    #[error("audio packet {index} is not valid Opus")]
    Corrupt {
        /// Its position among the audio packets, from 0.
        index: usize,
    },
    /// No audio at all.
    #[error("the file holds no audio")]
    Empty,
    /// Longer than [`MAX_FRAMES`].
    #[error("the file lasts more than {} hours", MAX_FRAMES / 50 / 3600)]
    TooLong,
}

/// One 20 ms frame of a clip.
#[derive(Debug, Clone)]
pub(crate) struct ClipFrame {
    /// The Opus packet, as in the file (a slice of the clip's one buffer).
    pub(crate) payload: Bytes,
    /// Its RFC 6464 level, measured once when the clip was read.
    pub(crate) level: u8,
}

/// A file ready to play: its frames, in order, in one buffer with 5 bytes
/// per frame beside it (where each ends, its level), so that what a clip
/// holds in memory ([`Clip::memory_bytes`]) is about its file's size for an
/// ordinary file (a file of tiny frames holds more: the callers bound it).
#[derive(Debug)]
pub(crate) struct Clip {
    /// Its file name (or `upload` for a body).
    pub(crate) name: String,
    /// Every frame's Opus packet, one after the other.
    data: Bytes,
    /// Where each frame ends in `data`.
    ends: Vec<u32>,
    /// Each frame's RFC 6464 level, measured once when the clip was read.
    levels: Vec<u8>,
}

impl Clip {
    /// Reads an Ogg/Opus file from `bytes` (the whole file).
    pub(crate) fn parse(name: &str, bytes: &[u8]) -> Result<Self, ClipError> {
        let mut reader = ogg::PacketReader::new(Cursor::new(bytes));
        let mut next = || reader.read_packet().map_err(|e| ClipError::NotOgg(e.to_string()));
        let head = next()?.ok_or_else(|| ClipError::NotOgg("no Ogg page found".into()))?;
        let serial = head.stream_serial();
        // Mono or stereo: either is mixed (and decoded) as mono.
        opus_head(&head.data)?;
        let tags = next()?.ok_or(ClipError::BadHeader("no OpusTags packet".into()))?;
        if tags.stream_serial() != serial {
            return Err(ClipError::MultipleStreams);
        }
        if !tags.data.starts_with(b"OpusTags") {
            return Err(ClipError::BadHeader("the second packet is not OpusTags".into()));
        }
        // One buffer for the whole clip; each frame is a view of it.
        let mut all = BytesMut::with_capacity(bytes.len());
        let mut ends: Vec<u32> = Vec::new();
        while let Some(p) = next()? {
            if p.stream_serial() != serial {
                return Err(ClipError::MultipleStreams);
            }
            let index = ends.len();
            if index >= MAX_FRAMES {
                return Err(ClipError::TooLong);
            }
            let samples = inspect(&p.data).map_or(0, |i| i.samples());
            if samples != FRAME_SAMPLES as u32 || p.data.len() > MAX_PAYLOAD_BYTES {
                // The last packet may be shorter (the encoder's tail): dropped, not refused.
                if samples > 0 && samples < FRAME_SAMPLES as u32 && p.last_in_stream() {
                    break;
                }
                return Err(ClipError::FrameSize { index, samples });
            }
            all.extend_from_slice(&p.data);
            // Within the file's own length (at most `max_file_bytes`, far below 4 GiB).
            ends.push(u32::try_from(all.len()).map_err(|_| ClipError::TooLong)?);
        }
        if ends.is_empty() {
            return Err(ClipError::Empty);
        }
        let mut decoder = Decoder::new().map_err(|e| ClipError::BadHeader(e.to_string()))?;
        let mut pcm = [0.0f32; FRAME_SAMPLES];
        let mut levels = Vec::with_capacity(ends.len());
        let mut at = 0;
        for (index, &end) in ends.iter().enumerate() {
            decoder.decode(&all[at..end as usize], &mut pcm).map_err(|_| ClipError::Corrupt { index })?;
            levels.push(level_of(&pcm));
            at = end as usize;
        }
        ends.shrink_to_fit();
        // Exactly the packets (the buffer was sized for the whole file).
        Ok(Self { name: name.to_owned(), data: Bytes::copy_from_slice(&all), ends, levels })
    }

    /// Its frames.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Frame `i` (`i < len()`): a view of the clip's buffer (no copy) and its level.
    pub(crate) fn frame(&self, i: usize) -> ClipFrame {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        ClipFrame { payload: self.data.slice(start..self.ends[i] as usize), level: self.levels[i] }
    }

    /// What it holds in memory: its packets and 5 bytes per frame.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.data.len() + self.ends.len() * 5 + self.name.len()
    }

    /// How long it plays once, in seconds.
    pub(crate) fn duration_seconds(&self) -> f64 {
        self.len() as f64 * 0.02
    }
}

/// Checks an `OpusHead` (RFC 7845 §5.1).
fn opus_head(p: &[u8]) -> Result<(), ClipError> {
    if !p.starts_with(b"OpusHead") {
        return Err(ClipError::NotOpus);
    }
    if p.len() < 19 {
        return Err(ClipError::BadHeader("OpusHead is shorter than 19 bytes".into()));
    }
    let (version, channels, family) = (p[8], p[9], p[18]);
    if version >> 4 != 0 {
        return Err(ClipError::BadHeader(format!("OpusHead version {version} (only 0.x is defined)")));
    }
    if !(1..=2).contains(&channels) {
        return Err(ClipError::BadHeader(format!("{channels} channels (mono or stereo only)")));
    }
    if family > 1 {
        return Err(ClipError::BadHeader(format!("channel mapping family {family} (0 or 1 only)")));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::outputs::ogg::{OggOpusWriter, OpusHead};

    /// An Ogg/Opus file of `frames` 20 ms frames of a `freq` Hz tone.
    pub(crate) fn tone_file(freq: f32, frames: usize) -> Vec<u8> {
        crate::outputs::ogg::tone_file(freq, frames).expect("tone file").0
    }

    #[test]
    fn a_real_tone_file_is_read_frame_by_frame_with_levels() {
        let file = tone_file(440.0, 100);
        let clip = Clip::parse("tone.opus", &file).expect("parsed");
        assert_eq!(clip.len(), 100);
        // An ordinary file holds about its size in memory (its packets, 5 bytes a frame).
        let (held, size) = (clip.memory_bytes(), file.len());
        assert!(held < size + size / 10, "{held} bytes held for a file of {size}");
        assert!((clip.duration_seconds() - 2.0).abs() < 1e-9);
        // A 0.3 sine is about −13 dBov; the first frame holds the encoder's ramp-up.
        assert!((10..100).all(|i| (10..=16).contains(&clip.frame(i).level)), "{:?}", clip.frame(10).level);
    }

    #[test]
    fn what_is_not_a_20_ms_ogg_opus_stream_is_refused_with_the_reason() {
        let good = tone_file(440.0, 10);
        assert!(matches!(Clip::parse("x", b"RIFF....WAVEfmt "), Err(ClipError::NotOgg(_))));
        assert!(matches!(Clip::parse("x", b""), Err(ClipError::NotOgg(_))));
        // A damaged page: the CRC catches it.
        let mut bad = good.clone();
        let last = bad.len() - 5;
        bad[last] ^= 0xFF;
        assert!(matches!(Clip::parse("x", &bad), Err(ClipError::NotOgg(_))), "{:?}", Clip::parse("x", &bad).err());
        // Truncated in the middle of a page.
        assert!(Clip::parse("x", &good[..good.len() - 10]).is_err());
        // Headers only.
        let mut w =
            OggOpusWriter::new(Vec::new(), 1, OpusHead { channels: 1, pre_skip: 0, input_rate: 48_000 }, "t", &[])
                .expect("headers");
        assert_eq!(Clip::parse("x", w.get_mut()).err(), Some(ClipError::Empty));
        // Another codec in Ogg: a Vorbis-like first packet.
        let mut w =
            OggOpusWriter::new(Vec::new(), 1, OpusHead { channels: 1, pre_skip: 0, input_rate: 48_000 }, "t", &[])
                .expect("headers");
        w.push_packet(&[0x08; 3], 960).expect("push");
        w.finish().expect("finish");
        let mut file = std::mem::take(w.get_mut());
        // Rewrite "OpusHead" as "OpusHeaX" and fix the page CRC.
        let at = file.windows(8).position(|w| w == b"OpusHead").expect("head");
        file[at + 7] = b'X';
        fix_crc(&mut file, 0);
        assert_eq!(Clip::parse("x", &file).err(), Some(ClipError::NotOpus));
    }

    #[test]
    fn packets_of_another_duration_are_refused() {
        let mut enc = opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Audio).expect("encoder");
        let mut w =
            OggOpusWriter::new(Vec::new(), 3, OpusHead { channels: 1, pre_skip: 312, input_rate: 48_000 }, "t", &[])
                .expect("headers");
        for n in 0..5 {
            // 40 ms packets.
            let pcm: Vec<f32> = (0..1920).map(|i| 0.2 * ((n * 1920 + i) as f32 * 0.05).sin()).collect();
            w.push_packet(&enc.encode_vec_float(&pcm, 1500).expect("encode"), 1920).expect("push");
        }
        w.finish().expect("finish");
        let file = std::mem::take(w.get_mut());
        assert_eq!(Clip::parse("x", &file).err(), Some(ClipError::FrameSize { index: 0, samples: 1920 }));
    }

    #[test]
    fn damaged_files_give_errors_never_panics() {
        // Every byte of a real file flipped in turn (CRC fixed where the page
        // still parses, so the Opus checks see the damage too), and every
        // truncation: an error or a clip, never a panic.
        let good = tone_file(440.0, 8);
        let mut outcomes = (0, 0);
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0xA5;
            if good[..4] == bad[..4] {
                fix_crc(&mut bad, 0);
            }
            match Clip::parse("x", &bad) {
                Ok(c) => assert!(c.len() <= 8),
                Err(_) => outcomes.1 += 1,
            }
            outcomes.0 += 1;
            let _ = Clip::parse("x", &good[..at]);
        }
        assert!(outcomes.1 > outcomes.0 / 2, "most damage is refused: {outcomes:?}");
    }

    /// Recomputes the CRC of the page starting at `at`.
    fn fix_crc(file: &mut [u8], at: usize) {
        let Some(&segments) = file.get(at + 26) else { return };
        let Some(lacing) = file.get(at + 27..at + 27 + usize::from(segments)) else { return };
        let end = at + 27 + lacing.len() + lacing.iter().map(|&l| usize::from(l)).sum::<usize>();
        if end > file.len() {
            return;
        }
        file[at + 22..at + 26].fill(0);
        let crc = crate::outputs::ogg::ogg_crc(&file[at..end]);
        file[at + 22..at + 26].copy_from_slice(&crc.to_le_bytes());
    }
}
