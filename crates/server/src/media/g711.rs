//! Phone legs (G.711: PCMU, PCMA; G.722) on the `rtp-in` thread that
//! carries the leg's RTP:
//!
//! ```text
//! in, G.711: 8 kHz bytes (20 ms, 30 ms… joined and cut into 20 ms) ─► 160-byte frames for the room,
//!            with an RFC 6464 level from the decoded samples (the room decodes them only while the
//!            caller is a selected speaker: tutti_mix::phone)
//! in, G.722: 160 bytes ─► its decoder ─► ×3 up to 48 kHz ─► Opus encoder ─► the room
//! out:       the leg's Opus feed ─► Opus decoder ─► low-pass and ÷6 (÷3) down ─► 160 bytes of its codec
//! ```
//!
//! No allocation per packet but the frame handed to the room (as for any
//! leg; ezk-g722's API allocates one per G.722 frame each way); no I/O
//! here. The G.711 tables and the resamplers are `tutti_mix`'s.
//!
//! A leg that was offered comfort noise (RFC 3389) sends [`super::comfort`]'s
//! noise to the room from a CN packet until its next audio packet, made at
//! the leg's rate (as G.711 bytes, or for G.722 through its Opus encoder).

use bytes::Bytes;
use tutti_mix::phone::NARROW_FRAME;
use tutti_mix::resample::{Downsampler, TO_8K, TO_16K};
use tutti_mix::{Decoder, Encoder, EncoderConfig, FRAME_SAMPLES, G711, InputCodec, Pcm, level_of};
use tutti_rtc::plain::Codec;

use super::comfort::ComfortNoise;
use super::g722::{G722In, G722Out, WIDE_FRAME};

/// Most bytes one packet may carry (120 ms): a longer payload is refused.
const MAX_PACKET_SAMPLES: usize = 960;

/// The G.711 law of a plain RTP codec (µ-law for anything but PCMA).
pub(crate) fn law_of(codec: Codec) -> G711 {
    if codec == Codec::Pcma { G711::Pcma } else { G711::Pcmu }
}

/// What a leg of `codec` hands the room: a G.711 leg its bytes, an Opus or
/// G.722 leg Opus.
pub(crate) fn input_codec(codec: Codec) -> InputCodec {
    match codec {
        Codec::Pcmu | Codec::Pcma => InputCodec::G711(law_of(codec)),
        Codec::Opus | Codec::G722 => InputCodec::Opus,
    }
}

/// Why a G.711 leg could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("a G.711 leg's Opus codec: {0}")]
pub(crate) struct TranscoderError(#[from] tutti_mix::MixError);

/// One 20 ms frame for the room: its 160 G.711 bytes (a G.722 leg's: an
/// Opus packet), its RFC 6464 level, its sequence number and the (8 kHz)
/// timestamp of its first sample.
pub(crate) struct RoomFrame {
    pub(crate) payload: Bytes,
    pub(crate) level: u8,
    pub(crate) seq: u16,
    pub(crate) timestamp: u32,
}

/// What a leg's bytes are: G.711 (a table per byte; the 8 kHz resampler out,
/// and in for comfort noise only) or G.722 (its codec, the 16 kHz
/// resampler and an Opus encoder for the room, each way with its own state).
enum Narrow {
    G711 { law: G711, down: Downsampler },
    G722 { decode: Box<G722In>, encode: Box<G722Out>, opus: Box<Encoder> },
}

/// One G.711 or G.722 leg's transcoding, both ways.
pub(crate) struct Transcoder {
    codec: Codec,
    decoder: Decoder,
    narrow_codec: Narrow,
    /// Bytes received (one per 8 kHz tick) and not yet a whole frame.
    pending: [u8; NARROW_FRAME],
    pending_len: usize,
    /// The timestamp (8 kHz) the next received sample should have.
    next_ts: Option<u32>,
    /// The sequence number of the last frame for the room, and the timestamp the next one should have.
    seq: u16,
    next_frame: Option<u32>,
    wide: Box<Pcm>,
    narrow: [f32; WIDE_FRAME],
    /// Comfort noise (RFC 3389) since a CN packet, until the next audio
    /// packet, and the timestamp of its next frame.
    noise: ComfortNoise,
    noise_ts: u32,
}

impl Transcoder {
    /// A leg of `codec` (PCMU, PCMA or G.722). A G.722 leg's Opus encoder
    /// (for the room): voice, mono, no in-band FEC (the packets go straight
    /// into the room, nothing is lost), complexity 1 (at 1 SILK quantises
    /// without delayed decision, about half the time of 5).
    pub(crate) fn new(codec: Codec) -> Result<Self, TranscoderError> {
        let narrow_codec = match codec {
            Codec::G722 => {
                let cfg =
                    EncoderConfig { complexity: 1, bitrate_bps: 32_000, inband_fec: false, ..EncoderConfig::default() };
                Narrow::G722 {
                    decode: Box::new(G722In::new()),
                    encode: Box::new(G722Out::new()),
                    opus: Box::new(Encoder::new(&cfg)?),
                }
            }
            _ => Narrow::G711 { law: law_of(codec), down: Downsampler::new(&TO_8K) },
        };
        Ok(Self {
            codec,
            decoder: Decoder::new()?,
            narrow_codec,
            pending: [0; NARROW_FRAME],
            pending_len: 0,
            next_ts: None,
            seq: 0,
            next_frame: None,
            wide: Box::new([0.0; FRAME_SAMPLES]),
            narrow: [0.0; WIDE_FRAME],
            noise: ComfortNoise::new(),
            noise_ts: 0,
        })
    }

    /// What the leg hands the room.
    pub(crate) fn input_codec(&self) -> InputCodec {
        input_codec(self.codec)
    }

    /// The rate of the samples [`Self::encode_narrow`] takes: 8000 (G.711) or 16000 (G.722).
    pub(crate) fn rate(&self) -> u32 {
        if self.codec == Codec::G722 { 16_000 } else { 8_000 }
    }

    /// Takes one received payload (8 kHz `timestamp`); calls `frame`
    /// for each whole 20 ms frame it completes (none, one or more). A
    /// payload that does not follow the last one (a loss, a new talkspurt)
    /// drops the part frame before it. False when the payload is empty or
    /// longer than 120 ms (dropped). It ends comfort noise.
    pub(crate) fn receive(&mut self, timestamp: u32, payload: &[u8], mut frame: impl FnMut(RoomFrame)) -> bool {
        if payload.is_empty() || payload.len() > MAX_PACKET_SAMPLES {
            return false;
        }
        self.noise.stop();
        if self.next_ts != Some(timestamp) {
            self.pending_len = 0;
        }
        self.next_ts = Some(timestamp.wrapping_add(payload.len() as u32));
        let mut start = timestamp.wrapping_sub(self.pending_len as u32);
        for chunk in payload.chunks(NARROW_FRAME) {
            let take = chunk.len().min(NARROW_FRAME - self.pending_len);
            let (now, rest) = chunk.split_at(take);
            self.push(now);
            if self.pending_len == NARROW_FRAME {
                frame(self.encode_pending(start));
                start = start.wrapping_add(NARROW_FRAME as u32);
            }
            self.push(rest);
        }
        true
    }

    fn push(&mut self, bytes: &[u8]) {
        self.pending[self.pending_len..self.pending_len + bytes.len()].copy_from_slice(bytes);
        self.pending_len += bytes.len();
    }

    fn encode_pending(&mut self, timestamp: u32) -> RoomFrame {
        self.pending_len = 0;
        match &mut self.narrow_codec {
            Narrow::G711 { law, .. } => {
                // As it came; its level from the decoded samples.
                let narrow = &mut self.narrow[..NARROW_FRAME];
                law.decode_into(&self.pending, narrow);
                let level = level_of(narrow);
                self.room_frame(timestamp, Bytes::copy_from_slice(&self.pending), level)
            }
            Narrow::G722 { decode, opus, .. } => {
                decode.decode(&self.pending, &mut self.wide);
                let payload = opus.encode(&self.wide);
                let level = level_of(&self.wide[..]);
                self.room_frame(timestamp, payload, level)
            }
        }
    }

    /// `payload` as the room's next frame, at `timestamp`.
    fn room_frame(&mut self, timestamp: u32, payload: Bytes, level: u8) -> RoomFrame {
        // Frames lost before this one (up to a second's) leave their sequence
        // numbers unused, as the lost packets of an Opus leg would.
        let lost = self.next_frame.map_or(0, |n| timestamp.wrapping_sub(n) / NARROW_FRAME as u32);
        self.seq = self.seq.wrapping_add(1).wrapping_add(if lost < 50 { lost as u16 } else { 0 });
        self.next_frame = Some(timestamp.wrapping_add(NARROW_FRAME as u32));
        RoomFrame { payload, level, seq: self.seq, timestamp }
    }

    /// Takes a comfort noise packet (RFC 3389; 8 kHz `timestamp`): the leg
    /// makes noise at its level from then on, a frame per
    /// [`Self::comfort_noise`], until its next audio packet. False when the
    /// payload is empty (dropped).
    pub(crate) fn comfort(&mut self, timestamp: u32, payload: &[u8]) -> bool {
        if !self.noise.start(payload) {
            return false;
        }
        self.noise_ts = timestamp;
        self.pending_len = 0;
        self.next_ts = None;
        true
    }

    /// One 20 ms frame of comfort noise for the room (one per tick), when
    /// the last packet was a CN one; `None` otherwise.
    pub(crate) fn comfort_noise(&mut self) -> Option<RoomFrame> {
        // Made at the leg's rate, and coded as its audio is: noise in the phone's band.
        let (payload, level) = match &mut self.narrow_codec {
            Narrow::G711 { law, .. } => {
                let narrow = &mut self.narrow[..NARROW_FRAME];
                if !self.noise.fill(narrow) {
                    return None;
                }
                let level = level_of(narrow);
                let bytes: Vec<u8> = narrow.iter().map(|s| law.encode(*s)).collect();
                (Bytes::from(bytes), level)
            }
            Narrow::G722 { decode, opus, .. } => {
                if !self.noise.fill(&mut self.narrow) {
                    return None;
                }
                decode.upsample(&self.narrow, &mut self.wide);
                (opus.encode(&self.wide), level_of(&self.wide[..]))
            }
        };
        let ts = self.noise_ts;
        self.noise_ts = ts.wrapping_add(NARROW_FRAME as u32);
        Some(self.room_frame(ts, payload, level))
    }

    /// The leg's 20 ms of the room (an Opus payload) as 160 bytes of its
    /// codec in `out`; `None` when the payload does not decode (then nothing is sent).
    pub(crate) fn send(&mut self, opus: &[u8], out: &mut [u8; NARROW_FRAME]) -> Option<()> {
        self.decoder.decode(opus, &mut self.wide).ok()?;
        match &mut self.narrow_codec {
            Narrow::G711 { law, down } => {
                down.process(&self.wide, &mut self.narrow[..NARROW_FRAME]);
                law.encode_into(&self.narrow[..NARROW_FRAME], out);
            }
            Narrow::G722 { encode, .. } => encode.encode(&self.wide, out),
        }
        Some(())
    }

    /// 20 ms at [`Self::rate`] (160 or 320 samples) as 160 bytes of the leg's
    /// codec: G.711 a table lookup per sample, G.722 its encoder.
    pub(crate) fn encode_narrow(&mut self, narrow: &[f32], out: &mut [u8; NARROW_FRAME]) {
        match &mut self.narrow_codec {
            Narrow::G711 { law, .. } => law.encode_into(narrow, out),
            Narrow::G722 { encode, .. } => encode.encode_16k(narrow, out),
        }
    }
}

/// A room's listener mix at 8 kHz (for its G.711 legs) or 16 kHz (G.722),
/// decoded and resampled once per tick for every such leg of the room on
/// this thread that hears it (a selected speaker hears its own mix without
/// itself, transcoded by its own [`Transcoder`]). A hundred phone listeners
/// cost one Opus decode and one resampling per rate, not a hundred; each
/// leg's encode stays its own (a table lookup per sample for G.711, PCMU
/// and PCMA legs may share the room; G.722's ADPCM has state per leg).
pub(crate) struct SharedNarrow {
    decoder: Decoder,
    down: Downsampler,
    wide: Box<Pcm>,
    narrow: [f32; WIDE_FRAME],
    frame: usize,
    /// The tick `narrow` holds, and whether it decoded.
    tick: Option<(u64, bool)>,
}

impl SharedNarrow {
    /// The listener mix at `rate` (8000 or 16000, a leg's [`Transcoder::rate`]).
    pub(crate) fn new(rate: u32) -> Result<Self, TranscoderError> {
        let filter = if rate == 16_000 { &TO_16K } else { &TO_8K };
        Ok(Self {
            decoder: Decoder::new()?,
            down: Downsampler::new(filter),
            wide: Box::new([0.0; FRAME_SAMPLES]),
            narrow: [0.0; WIDE_FRAME],
            frame: filter.frame(),
            tick: None,
        })
    }

    /// The listener mix of `tick` (its Opus payload `opus`) at the rate: decoded
    /// on the first call of the tick, the same samples after; `None` when it
    /// does not decode.
    pub(crate) fn of(&mut self, tick: u64, opus: &[u8]) -> Option<&[f32]> {
        if self.tick.is_none_or(|(t, _)| t != tick) {
            let ok = self.decoder.decode(opus, &mut self.wide).is_ok();
            if ok {
                self.down.process(&self.wide, &mut self.narrow[..self.frame]);
            }
            self.tick = Some((tick, ok));
        }
        self.tick.is_some_and(|(_, ok)| ok).then_some(&self.narrow[..self.frame])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::test_signal::{db, sine};

    /// A 48 kHz tone as the room's 20 ms Opus frames.
    fn opus_tone(freq: f32, frames: usize) -> Vec<Bytes> {
        let mut enc = Encoder::new(&EncoderConfig::default()).expect("an encoder");
        sine(freq, 48_000.0, FRAME_SAMPLES * frames, 0.3)
            .chunks_exact(FRAME_SAMPLES)
            .map(|f| enc.encode(f.try_into().expect("a frame")))
            .collect()
    }

    #[test]
    fn a_leg_joins_30_ms_packets_into_20_ms_frames_and_sends_160_bytes() {
        let mut leg = Transcoder::new(Codec::Pcma).expect("a leg");
        let tone: Vec<u8> = sine(600.0, 8_000.0, 240 * 10, 0.3).iter().map(|s| G711::Pcma.encode(*s)).collect();
        let mut frames = Vec::new();
        for (i, packet) in tone.chunks(240).enumerate() {
            assert!(leg.receive(1_000 + 240 * i as u32, packet, |f| frames.push(f)));
        }
        // 2400 samples: 15 frames of the bytes as they came, starting where they do in the packets.
        assert_eq!(frames.len(), 15);
        let joined: Vec<u8> = frames.iter().flat_map(|f| f.payload.iter().copied()).collect();
        assert_eq!(joined, tone, "the room gets the caller's bytes, 160 at a time");
        let starts: Vec<u32> = frames.iter().take(3).map(|f| f.timestamp).collect();
        assert_eq!(starts, [1_000, 1_160, 1_320], "the 2nd frame starts 80 samples before the 2nd packet");
        assert!(frames.windows(2).all(|w| w[1].seq == w[0].seq.wrapping_add(1)));
        // A lost packet (30 ms) drops the part frame and skips the lost frame's number.
        let last = frames.last().map_or(0, |f| f.seq);
        let mut after = Vec::new();
        leg.receive(1_000 + 240 * 11, &tone[..240], |f| after.push((f.seq, f.timestamp)));
        assert_eq!(after, [(last.wrapping_add(2), 1_000 + 240 * 11)], "{after:?}");
        assert!(
            frames.last().is_some_and(|f| f.level < 30),
            "a 0.3 tone is loud: {:?}",
            frames.last().map(|f| f.level)
        );
        let quiet: Vec<u8> = sine(600.0, 8_000.0, 160, 0.001).iter().map(|s| G711::Pcma.encode(*s)).collect();
        let mut level = 0;
        leg.receive(1_000 + 240 * 20, &quiet, |f| level = f.level);
        assert!(level > 55, "a tone 50 dB lower is quiet: {level}");
        // Refused payloads say so.
        assert!(!leg.receive(0, &[], |_| {}));
        assert!(!leg.receive(0, &[0xD5; 961], |_| {}));
        // Out: the room's Opus frames as G.711 hold the tone.
        let mut out = [0u8; NARROW_FRAME];
        let mut heard = Vec::new();
        for opus in opus_tone(600.0, 15) {
            leg.send(&opus, &mut out).expect("decodes");
            heard.extend(out.iter().map(|b| G711::Pcma.decode(*b)));
        }
        assert!(leg.send(&[0x10, 0, 0], &mut out).is_none(), "40 ms, not a 20 ms frame: nothing sent");
        let wide: Vec<f32> = heard[800..].iter().flat_map(|s| [*s; 6]).collect();
        assert!(tutti_mix::goertzel(&wide, 600.0) > 0.2, "{}", tutti_mix::goertzel(&wide, 600.0));
    }

    #[test]
    fn legs_hearing_the_listener_mix_share_one_decode_and_send_what_their_own_would() {
        // The room's Opus stream; PCMU and PCMA legs hear it.
        let stream = opus_tone(600.0, 25);
        let mut own = [Transcoder::new(Codec::Pcmu).expect("a leg"), Transcoder::new(Codec::Pcma).expect("a leg")];
        let mut legs = [Transcoder::new(Codec::Pcmu).expect("a leg"), Transcoder::new(Codec::Pcma).expect("a leg")];
        let mut shared = SharedNarrow::new(8_000).expect("a decoder");
        for (tick, opus) in stream.iter().enumerate() {
            for (leg, own) in legs.iter_mut().zip(own.iter_mut()) {
                let (mut a, mut b) = ([0u8; NARROW_FRAME], [0u8; NARROW_FRAME]);
                own.send(opus, &mut a).expect("decodes");
                // Asked by each leg of the tick: decoded on the first ask only.
                leg.encode_narrow(shared.of(tick as u64, opus).expect("decodes"), &mut b);
                assert_eq!(a, b, "tick {tick}: a leg's own transcode and the shared one differ");
            }
        }
        // Asked again for a tick it holds, it does not decode again (a
        // payload that would not decode changes nothing); a new tick does.
        assert!(shared.of(24, &[0x10, 0, 0]).is_some());
        assert!(shared.of(25, &[0x10, 0, 0]).is_none(), "40 ms, not a 20 ms frame");
    }

    #[test]
    fn a_cn_packet_makes_frames_at_its_level_until_the_next_audio_packet() {
        for codec in [Codec::Pcmu, Codec::G722] {
            let mut leg = Transcoder::new(codec).expect("a leg");
            assert!(leg.comfort_noise().is_none(), "no CN packet yet: no noise");
            assert!(!leg.comfort(8_000, &[]), "an empty CN payload is dropped");
            assert!(leg.comfort(8_000, &[40]), "-40 dBov");
            let frames: Vec<RoomFrame> = (0..10).filter_map(|_| leg.comfort_noise()).collect();
            let levels: Vec<u8> = frames.iter().map(|f| f.level).collect();
            assert_eq!(frames.len(), 10, "{codec:?}: a frame per tick until the next audio packet");
            let starts: Vec<u32> = frames.iter().take(3).map(|f| f.timestamp).collect();
            assert_eq!(starts, [8_000, 8_160, 8_320], "on the CN packet's clock");
            assert!(frames.windows(2).all(|w| w[1].seq == w[0].seq.wrapping_add(1)));
            assert!(levels[2..].iter().all(|l| (39..=41).contains(l)), "{codec:?}: {levels:?}");
            // The room hears noise near that level: G.711 bytes as they are, G.722's through Opus.
            let heard = match codec {
                Codec::G722 => {
                    let (mut decoder, mut pcm) = (Decoder::new().expect("a decoder"), [0.0; FRAME_SAMPLES]);
                    for f in &frames {
                        decoder.decode(&f.payload, &mut pcm).expect("decodes");
                    }
                    db(&pcm)
                }
                _ => {
                    let last = frames.last().expect("frames");
                    assert_eq!(last.payload.len(), NARROW_FRAME, "160 G.711 bytes");
                    let pcm: Vec<f32> = last.payload.iter().map(|b| G711::Pcmu.decode(*b)).collect();
                    db(&pcm)
                }
            };
            assert!((heard + 40.0).abs() < 6.0, "{codec:?}: the room hears {heard} dB");
            // The next audio packet ends it.
            assert!(leg.receive(9_600, &[0xFF; NARROW_FRAME], |_| {}));
            assert!(leg.comfort_noise().is_none(), "{codec:?}: audio again, no noise");
        }
    }

    #[test]
    fn a_g722_leg_carries_a_tone_both_ways_and_shares_the_16_khz_listener_mix() {
        // In: 20 ms G.722 packets of a 1 kHz tone become the room's Opus frames holding it.
        let mut out = super::super::g722::G722Out::new();
        let tone = sine(1_000.0, 48_000.0, 48_000, 0.3);
        let mut packets = Vec::new();
        for f in tone.chunks_exact(FRAME_SAMPLES) {
            let mut bytes = [0u8; NARROW_FRAME];
            out.encode(f.try_into().expect("a frame"), &mut bytes);
            packets.push(bytes);
        }
        let mut leg = Transcoder::new(Codec::G722).expect("a leg");
        assert_eq!(leg.rate(), 16_000);
        let mut stream = Vec::new();
        for (i, p) in packets.iter().enumerate() {
            assert!(leg.receive(160 * i as u32, p, |f| stream.push(f)));
        }
        assert_eq!(stream.len(), 50, "one frame per 160 bytes");
        assert!(stream.last().is_some_and(|f| f.level < 20), "a 0.3 tone is loud");
        // Out: a leg's own transcode and the shared 16 kHz mix send the same bytes; they hold the tone.
        let (mut own, mut shared_leg) =
            (Transcoder::new(Codec::G722).expect("a leg"), Transcoder::new(Codec::G722).expect("a leg"));
        let mut shared = SharedNarrow::new(16_000).expect("a decoder");
        let mut heard = super::super::g722::G722In::new();
        let mut wide = Vec::new();
        for (tick, f) in stream.iter().enumerate() {
            let (mut a, mut b) = ([0u8; NARROW_FRAME], [0u8; NARROW_FRAME]);
            own.send(&f.payload, &mut a).expect("decodes");
            let pcm = shared.of(tick as u64, &f.payload).expect("decodes");
            assert_eq!(pcm.len(), 320, "16 kHz");
            shared_leg.encode_narrow(pcm, &mut b);
            assert_eq!(a, b, "tick {tick}: the shared 16 kHz mix and the leg's own differ");
            let mut pcm = [0.0; FRAME_SAMPLES];
            heard.decode(&a, &mut pcm);
            wide.extend_from_slice(&pcm);
        }
        let at = tutti_mix::goertzel(&wide[24_000..], 1_000.0);
        assert!(at > 0.2, "the G.722 leg hears the tone at {at}");
    }

    /// What one leg costs per 20 ms both ways (printed; run with `--nocapture`).
    #[test]
    fn a_legs_transcoding_cost_per_20_ms() {
        let mut leg = Transcoder::new(Codec::Pcmu).expect("a leg");
        let tone: Vec<u8> = sine(600.0, 8_000.0, 160 * 250, 0.3).iter().map(|s| G711::Pcmu.encode(*s)).collect();
        let mix = opus_tone(600.0, 250);
        let mut out = [0u8; NARROW_FRAME];
        let start = std::time::Instant::now();
        for (i, (packet, opus)) in tone.chunks(160).zip(&mix).enumerate() {
            leg.receive(160 * i as u32, packet, |_| {});
            leg.send(opus, &mut out);
        }
        let per = start.elapsed() / 250;
        eprintln!("one G.711 leg: {} µs per 20 ms (in, and out on its own decoder)", per.as_micros());
        assert!(per < std::time::Duration::from_millis(20), "{per:?}");
    }
}
