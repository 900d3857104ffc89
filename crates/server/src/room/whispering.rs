//! The room's side of whisper channels: [`Room`]'s methods that open,
//! change and close channels under its mixing lock and tell the room (the
//! channels themselves, and what each tick reads of them, are in
//! `whisper`).

use tutti_mix::{ChannelId, MixError, ParticipantId};

use super::event::RoomEvent;
use super::room::{Mixing, Room};
use super::whisper::{WhisperError, WhisperInfo, WhisperLimits, sorted};
use crate::sync::lock;

impl Room {
    /// The open channels.
    pub(crate) fn whispers(&self) -> Vec<WhisperInfo> {
        lock(&self.mixing).whispers.channels.values().cloned().collect()
    }

    /// Opens a channel: `speakers` are heard by its members only; everyone
    /// in it hears the room plus the channel. From the next tick on.
    pub(crate) fn open_whisper(
        &self,
        speakers: Vec<u64>,
        listeners: Vec<u64>,
        limits: WhisperLimits,
    ) -> Result<WhisperInfo, WhisperError> {
        let mut m = lock(&self.mixing);
        if m.whispers.channels.len() >= limits.max_channels {
            return Err(WhisperError::TooMany(limits.max_channels));
        }
        m.whispers.next += 1;
        let id = m.whispers.next;
        let info = self.set_whisper(&mut m, id, speakers, listeners, limits)?;
        let talking = self.sync_talking(&m, info.speakers.iter().copied());
        drop(m);
        self.tell(talking);
        metrics::gauge!(crate::metrics::outputs::WHISPER_CHANNELS).increment(1.0);
        self.publish(RoomEvent::WhisperOpened {
            id,
            speakers: info.speakers.clone(),
            listeners: info.listeners.clone(),
        });
        tracing::info!(room = %self.id, channel = id, "whisper channel opened");
        Ok(info)
    }

    /// Changes who is in channel `id` (a list left out is kept).
    pub(crate) fn change_whisper(
        &self,
        id: u64,
        speakers: Option<Vec<u64>>,
        listeners: Option<Vec<u64>>,
        limits: WhisperLimits,
    ) -> Result<WhisperInfo, WhisperError> {
        let mut m = lock(&self.mixing);
        let old = m.whispers.channels.get(&id).cloned().ok_or(WhisperError::NotFound(id))?;
        let old_speakers = old.speakers.clone();
        let info =
            self.set_whisper(&mut m, id, speakers.unwrap_or(old.speakers), listeners.unwrap_or(old.listeners), limits)?;
        let talking = self.sync_talking(&m, old_speakers.into_iter().chain(info.speakers.iter().copied()));
        drop(m);
        self.tell(talking);
        self.publish(RoomEvent::WhisperChanged {
            id,
            speakers: info.speakers.clone(),
            listeners: info.listeners.clone(),
        });
        Ok(info)
    }

    /// Closes channel `id`: its speakers are heard by the whole room again.
    pub(crate) fn close_whisper(&self, id: u64) -> Result<WhisperInfo, WhisperError> {
        let mut m = lock(&self.mixing);
        let info = m.whispers.channels.remove(&id).ok_or(WhisperError::NotFound(id))?;
        let _ = m.mixer.close_channel(ChannelId(id));
        m.whispers.rebuild();
        let talking = self.sync_talking(&m, info.speakers.iter().copied());
        drop(m);
        self.tell(talking);
        metrics::gauge!(crate::metrics::outputs::WHISPER_CHANNELS).decrement(1.0);
        self.publish(RoomEvent::WhisperClosed { id, reason: "closed" });
        tracing::info!(room = %self.id, channel = id, "whisper channel closed");
        Ok(info)
    }

    /// The room's view of whether each of `ids` talks, made true again after
    /// a change of who whispers: a speaker who starts whispering mid-word
    /// stops talking for the room; one whose channel closes mid-word talks.
    /// Returns the `talking` events to tell (after the locks).
    fn sync_talking(&self, m: &Mixing, ids: impl Iterator<Item = u64>) -> Vec<RoomEvent> {
        let mut events = Vec::new();
        let mut members = lock(&self.members);
        for id in ids {
            let talking =
                m.mixer.is_talking(ParticipantId(id)).unwrap_or(false) && m.whispers.of(id).is_none_or(|(_, w)| !w);
            if let Some(member) = members.get_mut(&id)
                && std::mem::replace(&mut member.talking, talking) != talking
            {
                events.push(RoomEvent::Talking { id, talking });
            }
        }
        events
    }

    fn tell(&self, events: Vec<RoomEvent>) {
        for e in events {
            self.publish(e);
        }
    }

    /// Checks and applies channel `id`'s members (under the mixer's lock).
    fn set_whisper(
        &self,
        m: &mut Mixing,
        id: u64,
        speakers: Vec<u64>,
        listeners: Vec<u64>,
        limits: WhisperLimits,
    ) -> Result<WhisperInfo, WhisperError> {
        if self.is_closed() {
            return Err(WhisperError::Closed);
        }
        if speakers.is_empty() {
            return Err(WhisperError::Bad("a whisper channel needs a speaker".into()));
        }
        if listeners.is_empty() {
            return Err(WhisperError::Bad("a whisper channel needs a listener: someone to hear it".into()));
        }
        if speakers.len() + listeners.len() > limits.max_members {
            return Err(WhisperError::TooManyMembers(limits.max_members));
        }
        let (speakers, listeners) = (sorted(speakers)?, sorted(listeners)?);
        if let Some(both) = speakers.iter().find(|s| listeners.binary_search(s).is_ok()) {
            return Err(WhisperError::Bad(format!("participant {both} is named as a speaker and as a listener")));
        }
        {
            let members = lock(&self.members);
            for &p in speakers.iter().chain(&listeners) {
                if !members.contains_key(&p) {
                    return Err(WhisperError::NoParticipant(p));
                }
                if let Some((channel, _)) = m.whispers.of(p).filter(|(c, _)| *c != id) {
                    return Err(WhisperError::InChannel { participant: p, channel });
                }
            }
        }
        let ids = |v: &[u64]| v.iter().map(|&p| ParticipantId(p)).collect::<Vec<_>>();
        m.mixer.open_channel(ChannelId(id), &ids(&speakers), &ids(&listeners)).map_err(|e| match e {
            MixError::UnknownParticipant(p) => WhisperError::NoParticipant(p.0),
            MixError::TooManyChannels(n) => WhisperError::TooMany(n),
            other => WhisperError::Bad(other.to_string()),
        })?;
        let info = WhisperInfo { id, speakers, listeners };
        m.whispers.channels.insert(id, info.clone());
        m.whispers.rebuild();
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use tutti_mix::ParticipantId;

    use super::super::whisper::{heard, lookup};
    use crate::room::room::{Feed, RoomKey, RoomMix};

    fn feed(bytes: &'static [u8]) -> Feed {
        Feed { payload: Bytes::from_static(bytes), level: Some(30), contributors: Vec::new() }
    }

    #[test]
    fn each_participant_is_sent_its_own_mix_its_channels_or_the_rooms_and_a_deaf_one_nothing() {
        // Channel 9: 5 whispers to 6 and 7 (7 is deaf); 8 is in channel 10, which is silent.
        let members: Arc<[(u64, u64, bool)]> = Arc::from([(5, 9, true), (6, 9, false), (7, 9, false), (8, 10, false)]);
        let mix = RoomMix {
            key: RoomKey(1),
            tick: 0,
            listeners: feed(b"room"),
            speakers: vec![(ParticipantId(5), feed(b"room+9-5")), (ParticipantId(1), feed(b"room-1"))],
            deaf: Arc::from([7]),
            whisper: members.clone(),
            channels: vec![(9, feed(b"room+9"))],
            stereo: None,
        };
        let sent = |id: u64| mix.feed_for(ParticipantId(id)).payload.clone();
        assert_eq!(sent(5), Bytes::from_static(b"room+9-5"), "a selected whisperer: its own");
        assert_eq!(sent(1), Bytes::from_static(b"room-1"), "a selected room speaker: its own");
        assert_eq!(sent(6), Bytes::from_static(b"room+9"), "a listener of an active channel");
        assert!(sent(7).is_empty(), "deaf in a channel: nothing");
        assert_eq!(sent(8), Bytes::from_static(b"room"), "a silent channel's member: the room's");
        assert_eq!(sent(2), Bytes::from_static(b"room"), "anyone else: the room's");
        assert!(!mix.sends_nothing());
        // Who is named to whom.
        assert!(heard(&members, 5, Some(9)) && !heard(&members, 5, None) && !heard(&members, 5, Some(10)));
        assert!(heard(&members, 6, None) && heard(&members, 1, None));
        assert_eq!(lookup(&members, 8), Some((10, false)));
        assert_eq!(lookup(&members, 2), None);
    }
}
