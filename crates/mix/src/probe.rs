//! What an Opus packet says about itself without being decoded (RFC 6716
//! §3.1 and §4.1–4.2), so a participant whose packets carry no RFC 6464
//! level is not decoded every tick just to be measured.
//!
//! - The TOC byte gives the mode (SILK-only, hybrid, CELT-only), the
//!   bandwidth, the frame duration and the frame count.
//! - A packet of one or two bytes has no audio data: DTX (the sender is
//!   silent; the decoder plays comfort noise).
//! - In SILK-only and hybrid packets the first range-coded symbols are the
//!   SILK frames' voice-activity flags, each coded with probability 1/2
//!   (`ec_dec_bit_logp(dec, 1)` in libopus `silk_Decode`). The range decoder
//!   starts from `val = 127 − (byte1 >> 1)` in a range of 128, and a
//!   probability-1/2 symbol decodes as 1 when `val < 64`: the top bit of the
//!   first data byte is the first SILK frame's VAD flag. (Verified against
//!   libopus 1.5 in `tests/level_probe.rs`: silence and comfort noise give
//!   0, speech and tones 1.)
//! - CELT-only packets carry no VAD flag; their first symbol is a silence
//!   flag coded with probability 2^-15, which a packet of three bytes or fewer
//!   or a first data byte of 0xFF with a high second byte indicates.
//!   Otherwise a CELT-only packet says nothing about activity: the mixer then
//!   decodes one such frame in several to measure it (see `room.rs`).

/// The coding mode of an Opus packet (RFC 6716 §3.1, the TOC's config field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpusMode {
    /// Linear-prediction coding only (configs 0–11).
    Silk,
    /// SILK below 8 kHz plus CELT above (configs 12–15).
    Hybrid,
    /// MDCT coding only (configs 16–31).
    Celt,
}

/// What the mixer can tell about a frame without decoding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// DTX or a silence flag: nothing to hear.
    Silent,
    /// The encoder's voice-activity detector flagged speech.
    Voice,
    /// The packet does not say (CELT-only audio, or an unusual framing).
    Unknown,
}

/// The fields of an Opus packet's first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketInfo {
    /// Coding mode.
    pub mode: OpusMode,
    /// Samples at 48 kHz per frame (120 to 2880).
    pub frame_samples: u32,
    /// Frames in the packet (1 to 48).
    pub frames: u32,
    /// Whether the packet is stereo.
    pub stereo: bool,
    /// Voice activity of the first frame, as far as the packet tells.
    pub activity: Activity,
}

impl PacketInfo {
    /// Samples at 48 kHz the packet lasts.
    pub fn samples(&self) -> u32 {
        self.frame_samples * self.frames
    }
}

/// Reads an Opus packet's TOC byte (and, for its activity, the first data
/// byte). `None` for an empty or malformed packet.
pub fn inspect(packet: &[u8]) -> Option<PacketInfo> {
    let (&toc, rest) = packet.split_first()?;
    let config = toc >> 3;
    let stereo = toc & 0x04 != 0;
    let (mode, frame_samples) = match config {
        0..=11 => (OpusMode::Silk, [480, 960, 1920, 2880][usize::from(config & 3)]),
        12..=15 => (OpusMode::Hybrid, [480, 960][usize::from(config & 1)]),
        _ => (OpusMode::Celt, [120, 240, 480, 960][usize::from(config & 3)]),
    };
    // The first frame's data starts after the framing bytes.
    let (frames, data): (u32, &[u8]) = match toc & 3 {
        0 => (1, rest),
        1 => (2, rest),
        2 => {
            // One or two bytes give the first frame's length.
            let &b = rest.first()?;
            let skip = if b >= 252 { 2 } else { 1 };
            (2, rest.get(skip..)?)
        }
        _ => {
            let &count = rest.first()?;
            let frames = u32::from(count & 0x3F);
            if frames == 0 || frames * frame_samples > 5760 {
                return None;
            }
            // Padding and VBR lengths follow: activity is not worth parsing them for.
            (frames, &[][..])
        }
    };
    let activity = if packet.len() <= 2 {
        Activity::Silent
    } else if data.is_empty() {
        Activity::Unknown
    } else {
        match mode {
            OpusMode::Silk | OpusMode::Hybrid if data[0] & 0x80 != 0 => Activity::Voice,
            OpusMode::Silk | OpusMode::Hybrid => Activity::Silent,
            OpusMode::Celt if data.len() <= 2 || (data[0] == 0xFF && data.get(1).is_none_or(|&b| b >= 0x80)) => {
                Activity::Silent
            }
            OpusMode::Celt => Activity::Unknown,
        }
    };
    Some(PacketInfo { mode, frame_samples, frames, stereo, activity })
}

/// A one-byte Opus packet (TOC only: hybrid, fullband, 20 ms, mono, one
/// frame, no data): what libopus and browsers send during DTX. A decoder
/// conceals it as a lost frame, i.e. plays comfort noise.
pub const DTX_FRAME: [u8; 1] = [0x78];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toc_fields() {
        let info = inspect(&[0x78, 0x9A, 0x00]).expect("valid");
        assert_eq!((info.mode, info.frame_samples, info.frames, info.stereo), (OpusMode::Hybrid, 960, 1, false));
        assert_eq!(info.activity, Activity::Voice);
        assert_eq!(inspect(&[0x78, 0x0B, 0x00]).expect("valid").activity, Activity::Silent);
        assert_eq!(inspect(&DTX_FRAME).expect("valid").activity, Activity::Silent);
        let celt = inspect(&[0xF8, 0x70, 0x11, 0x22]).expect("valid");
        assert_eq!((celt.mode, celt.activity), (OpusMode::Celt, Activity::Unknown));
        assert_eq!(inspect(&[0xF8, 0xFF, 0xFE]).expect("valid").activity, Activity::Silent);
        // SILK WB 60 ms, two frames (code 1): 120 ms.
        assert_eq!(inspect(&[(11 << 3) | 1, 0x80, 0]).expect("valid").samples(), 5760);
        assert!(inspect(&[]).is_none());
        assert!(inspect(&[0x03]).is_none(), "code 3 without its count byte");
        assert!(inspect(&[0x0B, 0x00]).is_none(), "code 3 with zero frames");
    }
}
