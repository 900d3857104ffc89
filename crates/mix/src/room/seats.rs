//! A spatial room's seats and stereo listeners: who sits where, who takes
//! the stereo render, and placing the selected speakers so their seats do
//! not collide.

use super::Room;
use crate::spatial::{MAX_SEAT, place};
use crate::{MixError, ParticipantId};

impl Room {
    /// Turns the room's spatial rendering on or off (see
    /// [`crate::RoomConfig::spatial`]); takes effect at the next tick.
    pub fn set_spatial(&mut self, on: bool) {
        self.cfg.spatial = on;
    }

    /// Renders the room's stereo binaurally or panned (see
    /// [`crate::RoomConfig::binaural`]); takes effect at the next tick.
    pub fn set_binaural(&mut self, on: bool) {
        self.cfg.binaural = on;
    }

    /// Seats a participant (−[`MAX_SEAT`] far left to +[`MAX_SEAT`] far
    /// right). A selected speaker moves at the next tick, to this seat or,
    /// when another selected speaker holds it, the nearest free one.
    pub fn set_seat(&mut self, id: ParticipantId, seat: i8) -> Result<(), MixError> {
        if !(-MAX_SEAT..=MAX_SEAT).contains(&seat) {
            return Err(MixError::InvalidSeat(seat));
        }
        let p = self.participant_mut(id)?;
        p.seat = seat;
        if let Some(sel) = p.slot.and_then(|slot| self.selected.get_mut(slot)) {
            sel.seat = None;
        }
        Ok(())
    }

    /// Where a participant sits: their placed seat while a selected speaker,
    /// their preferred one otherwise.
    pub fn seat_of(&self, id: ParticipantId) -> Result<i8, MixError> {
        let p = self.participant(id)?;
        Ok(p.slot.and_then(|slot| self.selected.get(slot)).and_then(|sel| sel.seat).unwrap_or(p.seat))
    }

    /// Marks a participant as taking the stereo render of a spatial room
    /// (their client asked for stereo Opus). Sources and remotes are sent
    /// nothing: the mark is refused for them.
    pub fn set_stereo(&mut self, id: ParticipantId, stereo: bool) -> Result<(), MixError> {
        let p = self.participant_mut(id)?;
        if p.source || p.remote || p.stereo == stereo {
            return Ok(());
        }
        p.stereo = stereo;
        if stereo {
            self.stereo_members += 1;
        } else {
            self.stereo_members -= 1;
        }
        Ok(())
    }

    /// How many outputs of the room (a recording, an RTP forwarder) take
    /// its stereo render, from the next tick: while any does, a spatial
    /// room renders and encodes the stereo listeners' stream even with no
    /// stereo listener in it (one encode, shared by all of them and the
    /// stereo listeners; [`Room::stereo_listener_delivery`]), and a lone
    /// speaker is mixed at their seat rather than forwarded.
    pub fn set_stereo_outputs(&mut self, outputs: usize) {
        self.stereo_outputs = outputs;
    }

    /// Whether a participant is marked stereo ([`Room::set_stereo`]).
    pub fn is_stereo(&self, id: ParticipantId) -> bool {
        self.participant(id).is_ok_and(|p| p.stereo)
    }

    /// Whether `id`'s own stream is to be stereo.
    pub(super) fn wants_stereo(&self, id: ParticipantId) -> bool {
        self.cfg.spatial && self.is_stereo(id)
    }

    /// Whether this tick renders in stereo for anyone.
    pub(super) fn renders_stereo(&self) -> bool {
        self.cfg.spatial && (self.stereo_members > 0 || self.stereo_outputs > 0)
    }

    /// Places the selected speakers not placed yet, in selection order,
    /// away from the seats the others hold; gives each selected speaker's
    /// stream the encoder its format needs (a participant marked stereo, or
    /// the room switched, since it was selected).
    pub(super) fn place_speakers(&mut self) {
        for n in 0..self.selected.len() {
            let id = self.selected[n].id;
            if self.selected[n].seat.is_none() {
                let preferred = self.participant(id).map_or(0, |p| p.seat);
                let selected = &self.selected;
                let seat = place(preferred, |s| selected.iter().any(|o| o.seat == Some(s)));
                self.selected[n].seat = Some(seat);
            }
            let stereo = !self.selected[n].source && self.wants_stereo(id);
            if self.selected[n].stream.encoder.is_stereo() != stereo
                && let Some(encoder) = self.spare_encoder(stereo)
            {
                let old = std::mem::replace(&mut self.selected[n].stream.encoder, encoder);
                self.spare_encoders.push(old);
                self.selected[n].idle = true;
            }
        }
    }
}
