//! Whisper channels: opening, changing and closing them, and the whisper
//! pass of a tick, which encodes one "room + channel" mix per channel with a
//! selected whisperer and the N-minus-self of each selected speaker in it.

use super::Room;
use super::channel::{Channel, ChannelId, MAX_CHANNELS};
use super::delivery::{Delivery, Stream};
use crate::codec::Encoder;
use crate::dsp::{FRAME_SAMPLES, Limiter, Pcm, accumulate};
use crate::jitter::Playout;
use crate::{MixError, ParticipantId};

impl Room {
    /// Opens whisper channel `id`, or changes who is in it: its
    /// `whisperers` are heard by its members only (not by the rest of the
    /// room); every member (whisperer or listener) hears the room plus the
    /// channel. A participant is in one channel at most, and a source or a
    /// remote ([`Room::add_remote`]) in none. From the next tick on.
    ///
    /// The cost grows with the distinct mixes, never with the listeners:
    /// a tick encodes the room's mix, one N-minus-self per selected speaker
    /// (whisperers included, all within the room's K), and one "room +
    /// channel" mix per channel with a selected whisperer; at most
    /// `1 + K + min(channels, K)`. A channel whose whisperers are silent
    /// costs nothing (its members are sent the room's mix).
    pub fn open_channel(
        &mut self,
        id: ChannelId,
        whisperers: &[ParticipantId],
        listeners: &[ParticipantId],
    ) -> Result<(), MixError> {
        let exists = self.channels.iter().any(|ch| ch.id == id);
        if !exists && self.channels.len() >= MAX_CHANNELS {
            return Err(MixError::TooManyChannels(self.channels.len()));
        }
        for &m in whisperers.iter().chain(listeners) {
            let p = self.participant(m)?;
            if p.source || p.remote {
                return Err(MixError::UnknownParticipant(m));
            }
            if p.channel.is_some_and(|(c, _)| c != id) {
                return Err(MixError::InChannel(m));
            }
        }
        if exists {
            self.clear_channel(id);
        } else {
            let stream = Stream::new(Encoder::new(&self.encoder_config())?, Limiter::default());
            self.channels.push(Channel { id, stream, out: Delivery::Nothing, active: false, idle: true, members: 0 });
        }
        let mut members = 0;
        // A participant named as both whispers (the first role given wins).
        for (&m, whispers) in whisperers.iter().map(|m| (m, true)).chain(listeners.iter().map(|m| (m, false))) {
            let p = self.participant_mut(m)?;
            if p.channel.is_none() {
                p.channel = Some((id, whispers));
                members += 1;
            }
        }
        if let Some(ch) = self.channels.iter_mut().find(|ch| ch.id == id) {
            ch.members = members;
        }
        Ok(())
    }

    /// Closes whisper channel `id`: its whisperers are heard by the whole
    /// room again, from the next tick on.
    pub fn close_channel(&mut self, id: ChannelId) -> Result<(), MixError> {
        let n = self.channels.iter().position(|ch| ch.id == id).ok_or(MixError::UnknownChannel(id.0))?;
        self.clear_channel(id);
        self.channels.swap_remove(n);
        Ok(())
    }

    /// Takes everyone out of channel `id` (O(N), on a change by an admin only).
    fn clear_channel(&mut self, id: ChannelId) {
        for shard in &mut self.shards {
            for p in &mut shard.members {
                if p.channel.is_some_and(|(c, _)| c == id) {
                    p.channel = None;
                }
            }
        }
    }

    /// A participant's whisper channel and whether they whisper in it.
    pub fn channel_of(&self, id: ParticipantId) -> Option<(ChannelId, bool)> {
        self.participant(id).ok().and_then(|p| p.channel)
    }

    /// The whisper channels open, with their members.
    pub fn channels(&self) -> impl Iterator<Item = (ChannelId, usize)> + '_ {
        self.channels.iter().map(|ch| (ch.id, ch.members))
    }

    /// What the members of each whisper channel with a selected whisperer
    /// are sent after the last tick (those who are not selected speakers
    /// themselves); the members of the other channels are sent
    /// [`Room::listener_delivery`].
    pub fn channel_deliveries(&self) -> impl Iterator<Item = (ChannelId, &Delivery)> {
        self.channels.iter().filter(|ch| ch.active).map(|ch| (ch.id, &ch.out))
    }

    /// The whisper pass (after the room's own deliveries): for every
    /// channel with a selected whisperer, one "room + channel" mix for its
    /// members, and each selected speaker in it gets that mix without
    /// themselves. Decodes the selected speakers not decoded yet this tick
    /// (the forwarded one, whisperers while the room forwards or is silent).
    pub(super) fn whisper(&mut self, tick: u64, chan: &[Option<(ChannelId, bool)>], dtx_out: &Delivery) -> Whispered {
        let mut w = Whispered::default();
        let mut pcm: Vec<Option<Pcm>> = Vec::with_capacity(self.selected.len());
        for sel in &self.selected {
            let (s, i) = self.index[&sel.id];
            let p = &mut self.shards[s].members[i];
            let lost = matches!(p.pending, Playout::Lost { .. });
            let decoded = p.decode_pending(tick, &self.cfg).is_some();
            w.decodes += usize::from(decoded);
            w.remote_decodes += usize::from(decoded && p.remote);
            w.concealed += u64::from(lost && decoded);
            pcm.push(p.dec.as_ref().filter(|d| d.decoded_at == Some(tick)).map(|d| *d.pcm));
        }
        let whispers_in = |n: usize, c: ChannelId| chan.get(n).copied().flatten() == Some((c, true));
        let mut room = [0.0f32; FRAME_SAMPLES];
        let mut room_speakers = 0;
        for (n, p) in pcm.iter().enumerate() {
            if !chan.get(n).copied().flatten().is_some_and(|(_, w)| w) {
                room_speakers += 1;
                if let Some(p) = p {
                    accumulate(&mut room, p);
                }
            }
        }
        for ch in self.channels.iter_mut().filter(|ch| ch.active) {
            let mut total = room;
            let mut voices = room_speakers;
            for (n, p) in pcm.iter().enumerate() {
                if whispers_in(n, ch.id) {
                    voices += 1;
                    if let Some(p) = p {
                        accumulate(&mut total, p);
                    }
                }
            }
            if std::mem::take(&mut ch.idle) {
                ch.stream.encoder.reset();
            }
            ch.stream.encode(&total, None);
            ch.out = Delivery::Mix(ch.stream.payload.clone());
            w.channels += 1;
            for (n, sel) in self.selected.iter_mut().enumerate() {
                if sel.source || chan.get(n).copied().flatten().is_none_or(|(c, _)| c != ch.id) {
                    continue;
                }
                if voices <= 1 && self.cfg.dtx {
                    // They are the only voice they could hear: nobody.
                    sel.idle = true;
                    w.dtx += usize::from(!dtx_out.is_nothing());
                    sel.out = dtx_out.clone();
                    continue;
                }
                if std::mem::take(&mut sel.idle) {
                    sel.stream.encoder.reset();
                }
                sel.stream.encode(&total, pcm[n].as_ref());
                sel.out = Delivery::Mix(sel.stream.payload.clone());
                w.encodes += 1;
            }
        }
        w
    }
}

/// What the whisper pass did ([`Room::whisper`]).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Whispered {
    pub(super) decodes: usize,
    pub(super) remote_decodes: usize,
    pub(super) concealed: u64,
    /// Selected speakers' own mixes encoded.
    pub(super) encodes: usize,
    /// Channels' "room + channel" mixes encoded.
    pub(super) channels: usize,
    pub(super) dtx: usize,
}
