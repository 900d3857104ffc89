//! Remote participants and the selection from outside: the mixer's seam
//! for a room that spans several nodes (issue 27).
//!
//! A remote is a participant hosted by another node of the room. This node
//! hears it like a source (it is selected, mixed or forwarded, and is sent
//! nothing), but its frames do not come through a jitter buffer: the
//! caller hands in, before each tick, the frame its node sent as a
//! candidate ([`Room::put_remote_frame`]). Which speakers are heard is then
//! decided across the nodes ([`Room::set_selection`], from every node's
//! [`Room::candidates`]), so every node mixes the same speakers.

use bytes::Bytes;

use super::Room;
use super::members::Kind;
use super::report::LocalCandidate;
use crate::config::SpeakerLimit;
use crate::jitter::Playout;
use crate::{MixError, ParticipantId};

/// The mixer's smoothed loudness (dB above the silence floor) in 1/256 dB.
fn rank_of(loudness: f32) -> u16 {
    // In range by the clamp; a NaN (never produced) would map to 0.
    (loudness * 256.0).round().clamp(0.0, f32::from(u16::MAX)) as u16
}

impl Room {
    /// Adds a remote: a participant hosted by another node of the room.
    /// It is heard like a source: selected, mixed, forwarded when it is the
    /// only speaker, never sent anything and never encoded for, and not
    /// counted as a participant ([`crate::TickReport::participants`],
    /// [`crate::RoomConfig::max_participants`]). It has no jitter buffer:
    /// its frames are handed in per tick ([`Room::put_remote_frame`]); its
    /// voice is not processed here (its own node's business). It is in no
    /// whisper channel. Removed with [`Room::remove_participant`].
    pub fn add_remote(&mut self, id: ParticipantId) -> Result<(), MixError> {
        self.add(id, Kind::Remote)
    }

    /// Remotes in the room ([`Room::add_remote`]).
    pub fn remotes(&self) -> usize {
        self.remotes
    }

    /// Whether `id` is a remote ([`Room::add_remote`]).
    pub fn is_remote(&self, id: ParticipantId) -> bool {
        self.participant(id).is_ok_and(|p| p.remote)
    }

    /// Hands in a remote's frame for the NEXT tick: its original Opus
    /// payload and RFC 6464 level (0..=127; above is read as 127). A tick
    /// without one is a lost frame, concealed by the remote's decoder when
    /// it is a speaker, as a local loss is; a second call before the tick
    /// replaces the first. A payload that is not valid Opus is heard as
    /// silence and counted ([`crate::ParticipantStats::decode_errors`]).
    /// O(1). Fails for an id that is not a remote of the room.
    pub fn put_remote_frame(&mut self, id: ParticipantId, level: u8, payload: Bytes) -> Result<(), MixError> {
        let p = self.participant_mut(id)?;
        let feed = p.feed.as_mut().ok_or(MixError::NotRemote(id))?;
        feed.next = Some((level.min(127), payload));
        Ok(())
    }

    /// Sets the room's speakers from outside, from the next tick on.
    ///
    /// `Some(ids)`: the selected speakers are exactly `ids`, in that order
    /// (local or remote; ids not in the room, repeated or muted are
    /// skipped; at most K, the first ones, with K as shedding lowers it),
    /// replacing the mixer's own choice until the next call; hold and
    /// hysteresis are then the caller's (`tutti_mesh::select`). `None`:
    /// the mixer selects again, starting from the speakers it has.
    /// Everything after the selection is unchanged: forwarding a lone
    /// speaker, N-minus-self for the local speakers, whisper channels,
    /// shedding and DTX.
    pub fn set_selection(&mut self, speakers: Option<Vec<ParticipantId>>) {
        if speakers.is_none() {
            self.filled.clear();
        }
        self.external = speakers;
    }

    /// With a selection from outside ([`Room::set_selection`]): whether the
    /// seats it leaves free (fewer than K) go, each tick, to this room's own
    /// participants and sources (not remotes) who are talking and not
    /// named, sources and then the loudest first, after the named ones. A selection across nodes
    /// is made of the candidates of the tick before, so it names a local
    /// talker one tick after their first frame, which would otherwise be
    /// clipped on their own node. [`Room::candidates`] does not count such a
    /// seat as selected: the next selection across nodes decides. Off by default.
    pub fn fill_free_seats(&mut self, on: bool) {
        self.fill = on;
        if !on {
            self.filled.clear();
        }
    }

    /// Keeps a participant or source (`on`) out of this node's candidates
    /// ([`Room::candidates`]): it is heard here only, on a seat the selection
    /// across nodes leaves free ([`Room::fill_free_seats`]), as when the room
    /// is this node's alone. A room's hold music: each node plays it to its
    /// own held participants, and never twice over to another node's.
    pub fn keep_local(&mut self, id: ParticipantId, on: bool) -> Result<(), MixError> {
        self.participant_mut(id)?.local = on;
        Ok(())
    }

    /// The selection set from outside ([`Room::set_selection`]), if any.
    pub fn selection(&self) -> Option<&[ParticipantId]> {
        self.external.as_deref()
    }

    /// After a tick, this node's candidates for the selection across nodes,
    /// into `out` (cleared first; reuse it, and no tick allocates), loudest
    /// first: among the LOCAL participants and sources (not remotes, not
    /// muted), the K loudest by smoothed loudness plus `extra` challengers
    /// (a source sounding ranks above everyone, [`u16::MAX`], as it does in
    /// a node's own selection: a playback is heard on every node),
    /// and every selected speaker still talking (within the hold time; a
    /// speaker whose hold ran out is left out, so that the selection
    /// across nodes lets them go). A participant whose level this tick is
    /// at or above the silence threshold ([`crate::RoomConfig::silence_level`])
    /// is left out unless selected, as is one kept here ([`Room::keep_local`]). A whisperer of a channel is never a
    /// candidate: a channel lives on one node (its members are this room's
    /// own participants), so a whisperer's frames never leave the node and
    /// no other node mixes, records or announces them; their channel hears
    /// them on a seat the selection across nodes leaves free
    /// ([`Room::fill_free_seats`]). One pass over the participants, no decode.
    pub fn candidates(&mut self, extra: usize, out: &mut Vec<LocalCandidate>) {
        out.clear();
        let silence = self.cfg.silence_level;
        for p in self.shards.iter().flat_map(|s| &s.members) {
            if p.remote || p.muted || p.local || p.channel.is_some_and(|(_, whispers)| whispers) {
                continue;
            }
            // A seat given to a local talker for this tick only is not the
            // selection across nodes' (the next one decides).
            let selected = p.slot.is_some() && !self.filled.contains(&p.id);
            if p.level < silence || (selected && p.talking) {
                let rank = if p.source { u16::MAX } else { rank_of(p.loudness) };
                out.push(LocalCandidate { id: p.id, level: p.level, rank, selected, frame: None });
            }
        }
        let k = match self.cfg.max_speakers {
            SpeakerLimit::Top(k) => k,
            SpeakerLimit::All => usize::MAX,
        };
        let keep = k.saturating_add(extra);
        let order = |a: &LocalCandidate, b: &LocalCandidate| b.rank.cmp(&a.rank).then(a.id.cmp(&b.id));
        if out.len() > keep {
            // keep ≥ 1: K is at least 1.
            out.select_nth_unstable_by(keep - 1, order);
            let mut i = keep;
            while i < out.len() {
                if out[i].selected {
                    i += 1;
                } else {
                    out.swap_remove(i);
                }
            }
        }
        out.sort_unstable_by(order);
        for c in out.iter_mut() {
            let Ok(p) = self.participant_mut(c.id) else { continue };
            // This tick's own frame (a speaker played a tick late holds it
            // back), as Opus (a G.711 caller's encoded here: K + extra at most).
            c.frame = p.opus_frame(true);
        }
    }

    /// Applies the selection set from outside: the first `k` usable ids, in
    /// their order. O(K²) on the selection, no allocation unless it changes.
    pub(super) fn select_external(&mut self, k: usize) {
        let Some(ids) = self.external.take() else { return };
        let mut chosen = std::mem::take(&mut self.chosen);
        chosen.clear();
        for &id in &ids {
            if chosen.len() >= k {
                break;
            }
            if !chosen.contains(&id) && self.participant(id).is_ok_and(|p| !p.muted) {
                chosen.push(id);
            }
        }
        self.external = Some(ids);
        self.filled.clear();
        // Free seats: first those kept here ([`Room::keep_local`]: never named
        // across nodes) who sit already and still sound, so that they keep
        // their seat from tick to tick;
        if self.fill {
            for sel in &self.selected {
                let kept = self.participant(sel.id).is_ok_and(|p| p.local && p.talking && !p.muted);
                if chosen.len() < k && kept && !chosen.contains(&sel.id) {
                    chosen.push(sel.id);
                    self.filled.push(sel.id);
                }
            }
        }
        // then this room's own talkers not named, loudest first (the
        // shards' candidates of this tick: talking, unmuted, unseated).
        while self.fill && chosen.len() < k {
            let fresh = self
                .shards
                .iter()
                .flat_map(|s| &s.candidates)
                // A source's loudness is its rank: above everyone while it sounds.
                .filter(|c| !chosen.contains(&c.id) && self.participant(c.id).is_ok_and(|p| !p.remote))
                .max_by(|a, b| a.loudness.total_cmp(&b.loudness).then(b.id.cmp(&a.id)));
            let Some(c) = fresh else { break };
            chosen.push(c.id);
            self.filled.push(c.id);
        }
        if self.selected.iter().any(|sel| !chosen.contains(&sel.id)) {
            self.drop_speakers(|sel| !chosen.contains(&sel.id));
        }
        for &id in &chosen {
            if self.participant(id).is_ok_and(|p| p.slot.is_none()) {
                // Seated by a selection made of the last tick's candidates:
                // its frame of that tick, which the other nodes play now, is
                // played here too (and the rest of its turn a tick late, as
                // there) rather than lost.
                if !self.filled.contains(&id)
                    && let Ok(p) = self.participant_mut(id)
                    && !matches!(p.onset, Playout::Empty)
                {
                    let onset = std::mem::replace(&mut p.onset, Playout::Empty);
                    p.lagged = Some(std::mem::replace(&mut p.pending, onset));
                }
                self.add_speaker(id);
            }
        }
        let in_order = self.selected.iter().map(|sel| sel.id).eq(chosen.iter().copied());
        if !in_order {
            // A speaker missing (no encoder could be made) keeps the rest in order.
            self.selected.sort_by_key(|sel| chosen.iter().position(|&c| c == sel.id));
            for n in 0..self.selected.len() {
                let id = self.selected[n].id;
                if let Ok(p) = self.participant_mut(id) {
                    p.slot = Some(n);
                }
            }
        }
        self.chosen = chosen;
    }
}
