//! Cost shedding under load: the shed level, and the encoder settings and
//! speaker limit that follow from it.

#[cfg(doc)]
use super::report::TickReport;
use super::{MAX_SHED_LEVEL, Room};
use crate::config::{EncoderConfig, SpeakerLimit};

impl Room {
    /// Sheds cost in steps before the caller has to skip a tick, from the
    /// next tick on: 0 none; 1 encoder complexity at most 5; 2 complexity 0;
    /// 3, 4, 5 also at most 3, 2, 1 speakers (and a single speaker is
    /// forwarded at once, without waiting for a pause). Values above
    /// [`MAX_SHED_LEVEL`] are clamped. Audio keeps flowing at every level.
    /// The caller (the server's clock) raises it when ticks near their
    /// budget and lowers it when they have room again, and counts it
    /// ([`TickReport::shed_level`]).
    pub fn set_shed_level(&mut self, level: u8) {
        let level = level.min(MAX_SHED_LEVEL);
        if level == self.shed {
            return;
        }
        self.shed = level;
        let complexity = self.encoder_config().complexity;
        let speaker_complexity = self.speaker_encoder_config().complexity;
        self.listener.encoder.set_complexity(complexity);
        if let Some(stereo) = &mut self.stereo_listener {
            stereo.encoder.set_complexity(complexity);
        }
        for sel in &mut self.selected {
            sel.stream.encoder.set_complexity(speaker_complexity);
        }
        for e in &mut self.spare_encoders {
            e.set_complexity(speaker_complexity);
        }
        for ch in &mut self.channels {
            ch.stream.encoder.set_complexity(complexity);
        }
    }

    /// The current shed level.
    pub fn shed_level(&self) -> u8 {
        self.shed
    }

    /// The encoder settings at the current shed level.
    pub(super) fn encoder_config(&self) -> EncoderConfig {
        let mut e = self.cfg.encoder;
        e.complexity = match self.shed {
            0 => e.complexity,
            1 => e.complexity.min(5),
            _ => 0,
        };
        e
    }

    /// The encoder settings of a selected speaker's own stream (heard by
    /// them alone) at the current shed level: `speaker_complexity`, never
    /// above the listeners' stream's.
    pub(super) fn speaker_encoder_config(&self) -> EncoderConfig {
        let mut e = self.encoder_config();
        e.complexity = e.complexity.min(self.cfg.encoder.speaker_complexity);
        e
    }

    /// Speakers mixed at the current shed level.
    pub(super) fn speaker_limit(&self) -> usize {
        let k = match self.cfg.max_speakers {
            SpeakerLimit::Top(k) => k,
            SpeakerLimit::All => usize::MAX,
        };
        match self.shed {
            0..=2 => k,
            3 => k.min(3),
            4 => k.min(2),
            _ => 1,
        }
    }
}
