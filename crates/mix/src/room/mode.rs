//! Pass-through and DTX: how a tick serves the listeners (silence, the one
//! speaker's frames forwarded, or the mix), and priming the listener
//! encoder at a switch from forwarding to the mix.

use super::Room;
use super::delivery::MixMode;
use super::participant::{DecodeState, apply_gain, processing};
use crate::ParticipantId;
use crate::dsp::FRAME_SAMPLES;
use crate::phone::InputCodec;

/// A frame this many dB under a speaker's smoothed loudness is a pause.
const PAUSE_DB: f32 = 20.0;

impl Room {
    /// Whether participant `id`'s voice is processed (suppressed or
    /// normalised) when they speak.
    fn processed(&self, id: ParticipantId) -> bool {
        self.participant(id).is_ok_and(|p| {
            let (s, n) = processing(&self.cfg, p.raw_source, p.suppress, p.normalise);
            s || n
        })
    }

    /// Whether participant `id` sends Opus: a G.711 caller is mixed even
    /// alone (its frame would have to be encoded anyway, and the mix is one encode).
    fn opus_in(&self, id: ParticipantId) -> bool {
        self.participant(id).is_ok_and(|p| p.codec == InputCodec::Opus)
    }

    /// How this tick serves the listeners, from the selection just made
    /// (the room's speakers: whisperers are served by the whisper pass).
    pub(super) fn next_mode(&mut self, room_speakers: &[ParticipantId]) -> MixMode {
        let cfg = &self.cfg;
        let mode = match room_speakers {
            [] if cfg.dtx => MixMode::Silent,
            // A speaker whose voice is processed is decoded, processed and
            // encoded even alone: forwarding would skip the processing. So
            // is one of a spatial room with stereo listeners: a forwarded
            // frame would be heard from the middle, not from their seat.
            [only] if cfg.passthrough && !self.processed(*only) && self.opus_in(*only) && !self.renders_stereo() => {
                // Switch in a pause: the listeners' decoders then change
                // streams while there is nothing to hear.
                let quiet = self
                    .participant(*only)
                    .is_ok_and(|p| p.level >= cfg.silence_level || f32::from(127 - p.level) + PAUSE_DB <= p.loudness);
                // Shedding speakers (level 3+) forwards at once: cost first.
                let held = (self.alone_for >= cfg.mix_hold_ticks && quiet) || self.shed >= 3;
                if self.mode == MixMode::Mix && !held { MixMode::Mix } else { MixMode::Forward(*only) }
            }
            _ => MixMode::Mix,
        };
        self.alone_for = if mode == MixMode::Mix && room_speakers.len() == 1 { self.alone_for + 1 } else { 0 };
        mode
    }

    /// Feeds the forwarded speaker's last frames (decoded afresh) to the
    /// listener encoder, output discarded, so the first mixed frame
    /// continues the signal the listeners' decoders just played and the
    /// speaker's decoder is warm for this tick's frame. Returns the frames
    /// primed (each one decode and one encode).
    pub(super) fn prime(&mut self, id: ParticipantId, tick: u64) -> usize {
        let Some(&(s, i)) = self.index.get(&id) else { return 0 };
        let recent = std::mem::take(&mut self.recent);
        let p = &mut self.shards[s].members[i];
        let dec = match &mut p.dec {
            Some(dec) => dec,
            None => match DecodeState::new(p.codec) {
                Some(dec) => p.dec.insert(dec),
                None => return 0,
            },
        };
        dec.decoder.reset();
        p.decoder_resets += 1;
        let mut primed = 0;
        for payload in &recent {
            let mut pcm = [0.0f32; FRAME_SAMPLES];
            if dec.decoder.decode(payload, &mut pcm).is_err() {
                continue;
            }
            apply_gain(&mut pcm, p.gain);
            self.listener.encode(&pcm, None);
            primed += 1;
        }
        if primed > 0 && tick > 0 {
            // This tick's frame continues the primed decoder (no reset).
            dec.decoded_at = Some(tick - 1);
        }
        self.recent = recent;
        primed
    }
}
