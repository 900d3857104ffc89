//! Phase A of a tick, per shard: each participant's frame popped (or a
//! remote's taken), its level read or measured, talking state and events
//! updated, and the shard's loudest unselected talkers kept as candidates.

use super::participant::Participant;
use super::report::TalkEvent;
use crate::ParticipantId;
#[cfg(doc)]
use crate::Room;
use crate::config::RoomConfig;
use crate::jitter::Playout;

/// A decoder unused for this many ticks is freed (60 s); it is made again on demand.
const DECODER_IDLE_TICKS: u64 = 3_000;

#[derive(Debug, Clone, Copy)]
pub(super) struct Candidate {
    pub(super) id: ParticipantId,
    pub(super) loudness: f32,
}

/// Aligned to two cache lines so threads working on neighbouring shards do
/// not write to the same line (false sharing).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(super) struct Shard {
    pub(super) members: Vec<Participant>,
    pub(super) candidates: Vec<Candidate>,
    pub(super) events: Vec<TalkEvent>,
}

impl Shard {
    /// Phase A for one shard. Returns the decodes it ran (participants whose
    /// packets carry no audio level are decoded to measure it) and the frames
    /// it found lost and concealed.
    /// `challenge`: the loudness from which a talking unlevelled participant
    /// is decoded every tick ([`Room::challenge_floor`]).
    /// `keep_onsets`: keep each unseated local talker's frame for the next
    /// tick (`Participant::unplayed`).
    pub(super) fn observe(
        &mut self,
        cfg: &RoomConfig,
        tick: u64,
        k: usize,
        decode_speakers: bool,
        challenge: f32,
        keep_onsets: bool,
    ) -> Observed {
        let mut seen = Observed::default();
        self.candidates.clear();
        for p in &mut self.members {
            // A remote's frame was handed in; a missing one is lost only
            // while selected (its node sends it then), else the remote is
            // just not among its node's candidates.
            let popped = if p.remote
                && let Some(feed) = &mut p.feed
            {
                feed.take(p.slot.is_some())
            } else {
                p.jitter.pop()
            };
            // The level of the frame that came (a speaker played a tick late
            // is heard from the one before, but talks with this one).
            let level = match &popped {
                Playout::Frame(f) => f.level,
                Playout::Lost { .. } | Playout::Empty => Some(127),
            };
            p.onset = std::mem::replace(&mut p.unplayed, Playout::Empty);
            // Only frames that carry their level: an unlevelled one may be
            // decoded below to measure it, and a decoder takes frames in order.
            if keep_onsets && p.slot.is_none() && !p.remote && !p.source && !p.muted && level.is_some() {
                p.unplayed = popped.clone();
            }
            p.pending = match &mut p.lagged {
                Some(held) => std::mem::replace(held, popped),
                None => popped,
            };
            let lost = matches!(p.pending, Playout::Lost { .. });
            seen.lost += u64::from(lost);
            // Current speakers are decoded here, in parallel, while the room
            // mixes (they are almost always selected again); frames without
            // an audio level are measured (a decode only when the packet
            // does not say it is silent, see `measure_unlevelled`).
            let (decoded, level) = if p.muted {
                (None, level.unwrap_or(127))
            } else if p.slot.is_some() && decode_speakers {
                let measured = p.decode_pending(tick, cfg);
                (measured, level.or(measured).unwrap_or(127))
            } else if let Some(level) = level {
                (None, level)
            } else {
                let (level, ran) = p.measure_unlevelled(tick, cfg, challenge);
                (ran.then_some(level), level)
            };
            seen.decodes += usize::from(decoded.is_some());
            seen.remote_decodes += usize::from(decoded.is_some() && p.remote);
            seen.concealed += u64::from(lost && decoded.is_some());
            p.level = level;
            if p.dec.as_ref().is_some_and(|d| d.decoded_at.is_none_or(|t| tick - t > DECODER_IDLE_TICKS))
                && p.slot.is_none()
            {
                p.dec = None;
                // RNNoise's state goes with the decoder (the normaliser's few bytes stay).
                if let Some(v) = &mut p.voice {
                    v.suppressor = None;
                }
            }
            let active = !p.muted && p.level < cfg.silence_level;
            let instant = if active { f32::from(127 - p.level) + p.gain_db } else { 0.0 };
            p.loudness = instant.max(p.loudness - cfg.release_db_per_tick).max(0.0);
            if active {
                p.last_active = Some(tick);
                if !p.talking {
                    p.talking = true;
                    self.events.push(TalkEvent::Started(p.id));
                }
            } else if p.talking && (p.muted || p.last_active.is_none_or(|t| tick - t > u64::from(cfg.hold_ticks))) {
                p.talking = false;
                self.events.push(TalkEvent::Stopped(p.id));
            }
            if p.talking && !p.muted && p.slot.is_none() {
                self.candidates.push(Candidate { id: p.id, loudness: p.rank() });
            }
        }
        if self.candidates.len() > k {
            self.candidates.select_nth_unstable_by(k - 1, |a, b| b.loudness.total_cmp(&a.loudness));
            self.candidates.truncate(k);
        }
        seen
    }
}

/// What phase A saw in one shard.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Observed {
    pub(super) decodes: usize,
    pub(super) remote_decodes: usize,
    pub(super) lost: u64,
    pub(super) concealed: u64,
}

impl Observed {
    pub(super) fn sum(a: Self, b: Self) -> Self {
        Self {
            decodes: a.decodes + b.decodes,
            remote_decodes: a.remote_decodes + b.remote_decodes,
            lost: a.lost + b.lost,
            concealed: a.concealed + b.concealed,
        }
    }
}
