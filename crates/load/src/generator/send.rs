//! The send schedule: each client's frame in its own 1 ms slot of the
//! 20 ms frame (speech, silence with DTX, or a probe's marker), and the
//! slots fired in order as they come due.

use std::time::{Duration, Instant};

use super::client::{DTX_EVERY, send_all};
use super::worker::{SLOT, SLOTS, Worker, lock};
use crate::audio::Frame;
use crate::model::{ClientState, MarkerSent, Role, SilenceMode};
use crate::talk::TalkModel;

impl Worker {
    /// Reads this slot's connected UDP clients (what arrived since their
    /// last slot, with its kernel arrival stamps), then sends each its next frame.
    fn fire(&mut self, slot: usize, now: Instant) {
        for k in 0..self.slots[slot].len() {
            let i = self.slots[slot][k];
            if !self.clients[i].polled {
                self.receive(i);
            }
        }
        for k in 0..self.slots[slot].len() {
            let i = self.slots[slot][k];
            let c = &mut self.clients[i];
            if c.state != ClientState::Connected {
                continue;
            }
            let m = &*self.material;
            let frame: Option<&Frame> = match (c.role, c.probe) {
                (Role::ProbeTalker, Some(p)) => {
                    if c.marker_frame.is_none() && c.next_marker.is_some_and(|t| now >= t) {
                        c.marker_frame = Some(0);
                        c.next_marker = c.next_marker.map(|t| t + self.cfg.marker_period);
                        let at = Instant::now();
                        lock(&self.shared.markers).push(MarkerSent { room: c.room, probe: p, client: c.index, at });
                    }
                    match c.marker_frame {
                        Some(f) => {
                            let frames = &m.markers[p];
                            c.marker_frame = (f + 1 < frames.len()).then_some(f + 1);
                            frames.get(f)
                        }
                        None => Some(&m.silence),
                    }
                }
                _ => {
                    let talking = c.talk.as_mut().is_some_and(TalkModel::next_frame);
                    if talking {
                        c.clip_pos = (c.clip_pos + 1) % m.speech.len();
                        m.speech.get(c.clip_pos)
                    } else {
                        Some(&m.silence)
                    }
                }
            };
            // DTX: of the silent frames, one in DTX_EVERY goes out; the
            // others are skipped, and the next packet's timestamp shows it.
            let silent = frame.is_some_and(|f| std::ptr::eq(f, &m.silence));
            let frame = if silent && self.cfg.silence == SilenceMode::Dtx {
                c.silent_run += 1;
                if c.silent_run % DTX_EVERY == 1 {
                    frame
                } else {
                    c.peer.skip_frames(1);
                    None
                }
            } else {
                c.silent_run = 0;
                frame
            };
            if let Some(f) = frame
                && c.peer.send_audio(f.payload.clone(), c.level.then_some(f.level), now).is_ok()
            {
                c.sent += 1;
                send_all(&mut c.peer, &mut c.link);
                // Sending sets no earlier timer (RTCP reports run on their own
                // period); the next received packet reschedules anyway.
            }
        }
    }

    /// Fires the send slots that are due, in order (when more than a second
    /// behind, skips ahead). Returns when the next one is due.
    pub(super) fn fire_due(&mut self, start: Instant, slot_n: &mut u64, now: Instant) -> Instant {
        let slot_at = |n: u64| start + SLOT * u32::try_from(n).unwrap_or(u32::MAX);
        let mut due = slot_at(*slot_n);
        if now.saturating_duration_since(due) > Duration::from_secs(1) {
            *slot_n += (now - due).as_millis() as u64;
            due = slot_at(*slot_n);
        }
        while due <= now {
            let fired = Instant::now();
            self.lateness.record(fired - due);
            self.fire((*slot_n % SLOTS as u64) as usize, fired);
            *slot_n += 1;
            due = slot_at(*slot_n);
        }
        due
    }
}
