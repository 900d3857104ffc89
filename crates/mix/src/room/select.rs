//! Speaker selection: the room's own, with hold and hysteresis, seating
//! and unseating speakers (each with a stream of their own), and the
//! loudness from which an unlevelled talker could challenge a speaker.

use super::Room;
use super::delivery::{Delivery, Selected, Stream};
use super::participant::{CHALLENGE_MARGIN_DB, Participant};
use super::shard::Candidate;
use crate::ParticipantId;
use crate::codec::Encoder;
use crate::config::SpeakerLimit;

impl Room {
    /// The loudness from which an unselected, talking, unlevelled
    /// participant could matter to this tick's selection: within
    /// [`CHALLENGE_MARGIN_DB`] of beating the weakest speaker by the
    /// hysteresis. −∞ (everyone talking is decoded) while a seat is free or
    /// the selection comes from outside ([`Room::set_selection`]: the mesh
    /// ranks candidates by their loudness, kept fresh).
    pub(super) fn challenge_floor(&self, k: usize) -> f32 {
        if self.external.is_some() || self.selected.len() < k {
            return f32::NEG_INFINITY;
        }
        let weakest = self
            .selected
            .iter()
            .map(|sel| self.participant(sel.id).map_or(0.0, Participant::rank))
            .fold(f32::INFINITY, f32::min);
        weakest + self.cfg.hysteresis_db - CHALLENGE_MARGIN_DB
    }

    /// Speaker selection with hold and hysteresis (or the one set from
    /// outside, [`Room::set_selection`]).
    pub(super) fn select(&mut self, k: usize) {
        if self.external.is_some() {
            self.select_external(k);
            return;
        }
        // A lower limit (shedding) drops the weakest speakers.
        while self.selected.len() > k {
            let weakest = self
                .selected
                .iter()
                .map(|sel| (sel.id, self.participant(sel.id).map_or(0.0, Participant::rank)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(id, _)| id);
            let Some(out) = weakest else { break };
            self.drop_speakers(|sel| sel.id == out);
        }
        // Speakers who stopped talking (hold expired) or were muted leave.
        let index = &self.index;
        let shards = &self.shards;
        let still = |id: ParticipantId| {
            let (s, i) = index[&id];
            let p = &shards[s].members[i];
            p.talking && !p.muted
        };
        let leaving: Vec<ParticipantId> = self.selected.iter().map(|s| s.id).filter(|&id| !still(id)).collect();
        if !leaving.is_empty() {
            self.drop_speakers(|sel| leaving.contains(&sel.id));
        }

        let mut challengers: Vec<Candidate> = self
            .shards
            .iter()
            .flat_map(|s| s.candidates.iter().copied())
            .filter(|c| self.participant(c.id).is_ok_and(|p| p.slot.is_none()))
            .collect();
        challengers.sort_unstable_by(|a, b| b.loudness.total_cmp(&a.loudness));
        let mut challengers = challengers.into_iter().peekable();

        // Free slots go to the loudest challengers.
        while self.selected.len() < k {
            let Some(c) = challengers.next() else { break };
            self.add_speaker(c.id);
        }
        // A full set changes only for a challenger louder than the weakest
        // speaker by the hysteresis margin.
        while let Some(c) = challengers.peek().copied() {
            let weakest = self
                .selected
                .iter()
                .enumerate()
                .map(|(n, sel)| (n, self.participant(sel.id).map_or(0.0, Participant::rank)))
                .min_by(|a, b| a.1.total_cmp(&b.1));
            let Some((n, weakest_loudness)) = weakest else { break };
            if c.loudness <= weakest_loudness + self.cfg.hysteresis_db {
                break;
            }
            challengers.next();
            let out = self.selected[n].id;
            self.drop_speakers(|sel| sel.id == out);
            self.add_speaker(c.id);
        }
    }

    pub(super) fn add_speaker(&mut self, id: ParticipantId) {
        let stereo = self.wants_stereo(id);
        let Some(encoder) = self.spare_encoder(stereo) else {
            // libopus out of memory: this challenger is not selected this tick.
            return;
        };
        // Start at the listener stream's limiter gain so the level is continuous.
        let limiter = self.listener.limiter.clone();
        let source = self.participant(id).is_ok_and(|p| p.source || p.remote);
        self.selected.push(Selected {
            id,
            stream: Stream::new(encoder, limiter),
            out: Delivery::Nothing,
            idle: false,
            source,
            seat: None,
        });
        let slot = self.selected.len() - 1;
        if let Ok(p) = self.participant_mut(id) {
            p.slot = Some(slot);
        }
    }

    /// A speaker's stream encoder: a spare one of the right kind, reset, or a new one.
    pub(super) fn spare_encoder(&mut self, stereo: bool) -> Option<Encoder> {
        match self.spare_encoders.iter().rposition(|e| e.is_stereo() == stereo) {
            Some(n) => {
                let mut e = self.spare_encoders.swap_remove(n);
                e.reset();
                Some(e)
            }
            None if stereo => Encoder::stereo(&self.speaker_encoder_config()).ok(),
            None => Encoder::new(&self.speaker_encoder_config()).ok(),
        }
    }

    pub(super) fn drop_speakers(&mut self, mut leaves: impl FnMut(&Selected) -> bool) {
        let mut kept = Vec::with_capacity(self.selected.len());
        for sel in self.selected.drain(..) {
            if leaves(&sel) {
                if let Some(&(s, i)) = self.index.get(&sel.id) {
                    let p = &mut self.shards[s].members[i];
                    p.slot = None;
                    // Unseated: played as it comes again (the frame held back is dropped).
                    p.lagged = None;
                }
                self.spare_encoders.push(sel.stream.encoder);
            } else {
                kept.push(sel);
            }
        }
        self.selected = kept;
        for (n, sel) in self.selected.iter().enumerate() {
            if let Some(&(s, i)) = self.index.get(&sel.id) {
                self.shards[s].members[i].slot = Some(n);
            }
        }
        // Keep a few spares, free the rest.
        let keep = match self.cfg.max_speakers {
            SpeakerLimit::Top(k) => k,
            SpeakerLimit::All => 8,
        };
        self.spare_encoders.truncate(keep);
    }
}
