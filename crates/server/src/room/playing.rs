//! The room's side of playback: [`Room`]'s methods that start and stop
//! playbacks and room sounds under its mixing lock and publish their events
//! (the playbacks themselves, and what the mix clock feeds, are in
//! `playback`).

use std::sync::Arc;

use super::event::RoomEvent;
use super::playback::{
    Active, Clip, Defaults, PlaybackError, PlaybackInfo, Purpose, SoundNames, SoundsChange, count_start, remove, start,
    started,
};
use super::room::Room;
use crate::sync::lock;

impl Room {
    /// Sets the room's playback limit and sounds (at creation).
    pub(crate) fn init_playback(&self, defaults: Defaults) {
        lock(&self.mixing).playbacks.defaults = defaults;
    }

    /// Plays `clip` into the room (an admin's announcement), from the next tick.
    pub(crate) fn play(&self, clip: Arc<Clip>, looping: bool) -> Result<PlaybackInfo, PlaybackError> {
        if self.is_closed() {
            return Err(PlaybackError::Closed(self.id.clone()));
        }
        let (info, event) = {
            let mut guard = lock(&self.mixing);
            let m = &mut *guard;
            let a =
                start(&self.id, (&mut m.mixer, &mut m.sources, &m.playbacks), clip, looping, Purpose::Announcement)?;
            let out = (a.info(), started(&a));
            m.playbacks.active.push(a);
            out
        };
        count_start(Purpose::Announcement);
        self.publish_all(event);
        tracing::info!(room = %self.id, playback = info.id, file = %info.file, looping, "playback started");
        Ok(info)
    }

    /// Stops playback `id` (whatever started it).
    pub(crate) fn stop_playback(&self, id: u64) -> Result<PlaybackInfo, PlaybackError> {
        let (info, event) = {
            let mut guard = lock(&self.mixing);
            let m = &mut *guard;
            let at = m.playbacks.find(id).ok_or(PlaybackError::NotFound(id))?;
            remove((&mut m.mixer, &mut m.sources, &mut m.playbacks), at, Some("stopped"))
        };
        self.publish_all(event);
        tracing::info!(room = %self.id, playback = id, file = %info.file, "playback stopped");
        Ok(info)
    }

    /// The playbacks under way.
    pub(crate) fn playbacks(&self) -> Vec<PlaybackInfo> {
        lock(&self.mixing).playbacks.active.iter().map(Active::info).collect()
    }

    /// The room's sounds, by file name.
    pub(crate) fn sounds(&self) -> SoundNames {
        let m = lock(&self.mixing);
        let s = &m.playbacks.defaults.sounds;
        let name = |c: &Option<Arc<Clip>>| c.as_ref().map(|c| c.name.clone());
        SoundNames { enter: name(&s.enter), leave: name(&s.leave), hold: name(&s.hold) }
    }

    /// Changes the room's sounds. A hold music playing is replaced by the
    /// new one (or stopped when removed).
    pub(crate) fn set_sounds(&self, change: SoundsChange) -> SoundNames {
        let hold_changed = change.hold.is_some();
        {
            let mut m = lock(&self.mixing);
            let s = &mut m.playbacks.defaults.sounds;
            if let Some(enter) = change.enter {
                s.enter = enter;
            }
            if let Some(leave) = change.leave {
                s.leave = leave;
            }
            if let Some(hold) = change.hold {
                s.hold = hold;
            }
        }
        if hold_changed {
            let mut events = self.stop_purpose(Purpose::Hold, "replaced");
            if self.len() == 1 {
                events.extend(self.start_sound(Purpose::Hold));
            }
            events.into_iter().for_each(|e| self.publish(e));
        }
        self.sounds()
    }

    /// Other nodes host this room too (`true`), or no longer (`false`), as
    /// the node's span reader finds. Its participants are then not the
    /// whole room: the hold music (one participant alone) stops, and starts
    /// again when the room is this node's alone with one participant here;
    /// a room waiting for its moderator keeps it (every node plays it to its
    /// own held participants). Its playbacks are heard on every node (the
    /// mixer sends them as candidates), its hold music only here.
    pub(crate) fn set_spread(&self, spread: bool) {
        if self.spread.swap(spread, std::sync::atomic::Ordering::Relaxed) == spread {
            return;
        }
        let events = if spread && self.is_waiting() {
            Vec::new()
        } else if spread {
            self.stop_purpose(Purpose::Hold, "joined")
        } else if self.len() == 1 {
            self.start_sound(Purpose::Hold).into_iter().collect()
        } else {
            Vec::new()
        };
        self.publish_all(events);
    }

    /// Starts the hold music for a room that waits for its moderator, or
    /// stops it when the room opens (unless one is alone: then it plays on).
    pub(super) fn hold_music(&self, on: bool) {
        let events = if on {
            self.start_sound(Purpose::Hold).into_iter().collect()
        } else if self.len() != 1 || self.is_spread() {
            self.stop_purpose(Purpose::Hold, "joined")
        } else {
            Vec::new()
        };
        self.publish_all(events);
    }

    /// After a join: `members` participants now. Hold music stops when a
    /// second joins (not while the room waits for its moderator); the enter
    /// sound plays for the others; one alone gets the hold music.
    pub(super) fn sounds_on_join(&self, members: usize) {
        let mut events = Vec::new();
        if members >= 2 {
            if !self.is_waiting() {
                events.extend(self.stop_purpose(Purpose::Hold, "joined"));
            }
            events.extend(self.start_sound(Purpose::Enter));
        } else if members == 1 {
            events.extend(self.start_sound(Purpose::Hold));
        }
        events.into_iter().for_each(|e| self.publish(e));
    }

    /// After a leave: `members` participants now. Those left hear the leave
    /// sound; one left alone gets the hold music; nobody left, it stops.
    pub(super) fn sounds_on_leave(&self, members: usize) {
        let mut events = Vec::new();
        if members == 0 {
            events.extend(self.stop_purpose(Purpose::Hold, "empty"));
        } else {
            events.extend(self.start_sound(Purpose::Leave));
            if members == 1 {
                events.extend(self.start_sound(Purpose::Hold));
            }
        }
        events.into_iter().for_each(|e| self.publish(e));
    }

    /// Starts the room's sound for `purpose`, if it has one and it is not
    /// playing (an enter or leave sound: if neither is); a room at its
    /// limit skips it (counted).
    fn start_sound(&self, purpose: Purpose) -> Option<RoomEvent> {
        // A closing room, or one handed over to another node (its
        // participants leave to rejoin there): no sounds for that.
        if self.is_closed() || self.is_handed_over() {
            return None;
        }
        // Read before the mixing lock (the waiting state has a lock of its own).
        let waiting = purpose == Purpose::Hold && self.is_waiting();
        let mut guard = lock(&self.mixing);
        let m = &mut *guard;
        let sounds = &m.playbacks.defaults.sounds;
        let clip = match purpose {
            Purpose::Enter => sounds.enter.clone(),
            Purpose::Leave => sounds.leave.clone(),
            Purpose::Hold => sounds.hold.clone(),
            Purpose::Announcement => None,
        }?;
        let busy = match purpose {
            Purpose::Enter | Purpose::Leave => {
                m.playbacks.playing(Purpose::Enter).is_some() || m.playbacks.playing(Purpose::Leave).is_some()
            }
            _ => m.playbacks.playing(purpose).is_some(),
        };
        // Hold music is for one participant alone in the room, or those held until a
        // moderator comes: never while other nodes host it, unless the room waits.
        if (busy || (self.is_spread() && !waiting)) && purpose == Purpose::Hold {
            return None;
        }
        let a = if busy {
            None
        } else {
            start(&self.id, (&mut m.mixer, &mut m.sources, &m.playbacks), clip, purpose == Purpose::Hold, purpose).ok()
        };
        let Some(a) = a else {
            drop(guard);
            metrics::counter!(crate::metrics::outputs::PLAYBACK_SOUNDS_SKIPPED, "purpose" => purpose.as_str())
                .increment(1);
            tracing::debug!(room = %self.id, purpose = purpose.as_str(), "room sound skipped");
            return None;
        };
        let event = started(&a);
        m.playbacks.active.push(a);
        drop(guard);
        count_start(purpose);
        event
    }

    /// Stops every playback of `purpose`.
    fn stop_purpose(&self, purpose: Purpose, reason: &'static str) -> Vec<RoomEvent> {
        let mut guard = lock(&self.mixing);
        let m = &mut *guard;
        let mut events = Vec::new();
        while let Some(at) = m.playbacks.active.iter().position(|a| a.purpose == purpose) {
            let (_, event) = remove((&mut m.mixer, &mut m.sources, &mut m.playbacks), at, Some(reason));
            events.extend(event);
        }
        events
    }

    fn publish_all(&self, events: impl IntoIterator<Item = RoomEvent>) {
        events.into_iter().for_each(|e| self.publish(e));
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use tutti_mix::{MixMode, RoomConfig};

    use super::super::playback::tone_file;
    use super::super::playback::{Sounds, is_playback};
    use super::*;
    use crate::room::Rooms;

    fn clip(frames: usize) -> Arc<Clip> {
        Arc::new(Clip::parse("tone.opus", &tone_file(523.0, frames)).expect("clip"))
    }

    fn events(
        room: &Room,
        rx: &mut tokio::sync::broadcast::Receiver<Arc<super::super::event::EventBatch>>,
    ) -> Vec<RoomEvent> {
        room.flush_events();
        let mut out = Vec::new();
        while let Ok(batch) = rx.try_recv() {
            out.extend(batch.events.iter().cloned());
        }
        out
    }

    #[test]
    fn a_playback_plays_its_frames_in_order_then_finishes_and_leaves_the_mixer() {
        let rooms = Rooms::new(RoomConfig::default(), 4, 10).expect("rooms");
        let room = rooms.create("r", None, None).expect("room");
        let mut rx = room.subscribe();
        let c = clip(10);
        let info = room.play(c.clone(), false).expect("plays");
        assert!(is_playback(info.id));
        assert_eq!((info.purpose, info.looping, info.duration_seconds), ("announcement", false, 0.2));
        assert!(matches!(&events(&room, &mut rx)[..], [RoomEvent::PlaybackStarted { id, .. }] if *id == info.id));
        let mut forwarded = Vec::new();
        for tick in 0..40 {
            let Some((mix, report)) = room.tick(None, tick, 0) else { break };
            if let MixMode::Forward(from) = report.mode {
                assert_eq!(from.0, info.id);
                assert_eq!(report.decodes, 0, "a lone playback is forwarded without a decode");
                forwarded.push(mix.listeners.payload.clone());
            }
            assert!(mix.speakers.iter().all(|(_, f)| f.payload.is_empty()), "the playback is sent nothing");
        }
        // Its frames, unchanged and in order (the first, the encoder's ramp, may be under the talking threshold).
        let frames: Vec<Bytes> = (0..c.len()).map(|i| c.frame(i).payload).collect();
        assert!(forwarded.len() >= 8, "{}", forwarded.len());
        let start = frames.iter().position(|f| *f == forwarded[0]).expect("a frame of the file");
        assert_eq!(&frames[start..start + forwarded.len()], &forwarded[..]);
        assert!(room.playbacks().is_empty(), "gone after its end");
        assert!(room.tick(None, 41, 0).is_none(), "the mixer is empty again");
        assert!(
            events(&room, &mut rx)
                .iter()
                .any(|e| matches!(e, RoomEvent::PlaybackFinished { id, .. } if *id == info.id))
        );
        assert_eq!(room.speaker_ids(), Vec::<u64>::new(), "a playback is never listed as a speaker");
    }

    #[test]
    fn a_looped_playback_goes_on_until_stopped_and_the_limit_holds() {
        let rooms = Rooms::new(RoomConfig::default(), 4, 10).expect("rooms");
        let room = rooms.create("r", None, None).expect("room");
        room.init_playback(Defaults { max_per_room: 2, sounds: Sounds::default() });
        let looped = room.play(clip(5), true).expect("plays");
        room.play(clip(5), false).expect("a second");
        assert!(matches!(room.play(clip(5), false), Err(PlaybackError::TooMany { max: 2, .. })));
        for tick in 0..60 {
            room.tick(None, tick, 0);
        }
        let now = room.playbacks();
        assert_eq!(now.len(), 1, "the other one finished: {now:?}");
        assert!(now[0].loops >= 10, "{now:?}");
        let stopped = room.stop_playback(looped.id).expect("stopped");
        assert_eq!(stopped.id, looped.id);
        assert_eq!(room.stop_playback(looped.id), Err(PlaybackError::NotFound(looped.id)));
        assert!(room.playbacks().is_empty());
    }

    #[test]
    fn hold_music_plays_to_one_alone_and_stops_for_two_and_enter_and_leave_sounds_play() {
        let rooms = Rooms::new(RoomConfig::default(), 4, 10).expect("rooms");
        let room = rooms.create("r", None, None).expect("room");
        let sounds = Sounds { enter: Some(clip(5)), leave: Some(clip(5)), hold: Some(clip(50)) };
        room.init_playback(Defaults { max_per_room: 4, sounds });
        let mut rx = room.subscribe();
        let purposes = |room: &Room| room.playbacks().iter().map(|p| p.purpose).collect::<Vec<_>>();
        let acceptor =
            tutti_rtc::Acceptor::new("127.0.0.1:4000".parse().expect("addr"), std::time::Duration::from_secs(5))
                .expect("acceptor");
        let join = |name: &str| {
            let joiner = crate::room::PlainJoiner {
                id: acceptor.reserve_id(),
                name: name.to_owned(),
                identity: String::new(),
                listen_only: false,
                admin: crate::room::Admin::No,
                io: 0,
                attributes: Default::default(),
            };
            rooms.join_plain(&room, joiner).expect("joins").0
        };
        let a = join("a");
        assert_eq!(purposes(&room), ["hold"], "alone: hold music");
        let b = join("b");
        assert_eq!(purposes(&room), ["enter"], "two: the hold music stops, the enter sound plays");
        let seen = events(&room, &mut rx);
        assert!(seen.iter().any(|e| matches!(e, RoomEvent::PlaybackStarted { purpose: "hold", looping: true, .. })));
        assert!(seen.iter().any(|e| matches!(e, RoomEvent::PlaybackStopped { reason: "joined", .. })));
        assert!(!seen.iter().any(|e| matches!(e, RoomEvent::PlaybackStarted { purpose: "enter", .. })), "{seen:?}");
        let _ = rooms.leave(&room, b, crate::room::LeaveReason::Left);
        let mut now = purposes(&room);
        now.sort_unstable();
        assert_eq!(now, ["enter", "hold"], "alone again: hold music (the leave sound waits for the enter sound)");
        let _ = rooms.leave(&room, a, crate::room::LeaveReason::Left);
        assert!(!purposes(&room).contains(&"hold"), "nobody left: no hold music");

        // Spread over nodes: one participant here is not alone in the room.
        let a = join("a");
        assert!(purposes(&room).contains(&"hold"), "alone: hold music");
        room.set_spread(true);
        assert!(!purposes(&room).contains(&"hold"), "another node hosts the room: the hold music stops");
        let b = join("b");
        let _ = rooms.leave(&room, b, crate::room::LeaveReason::Left);
        assert!(!purposes(&room).contains(&"hold"), "one here, spread: no hold music");
        room.set_spread(false);
        assert!(purposes(&room).contains(&"hold"), "the room is this node's alone again, one here: hold music");
        let _ = rooms.leave(&room, a, crate::room::LeaveReason::Left);
    }
}
