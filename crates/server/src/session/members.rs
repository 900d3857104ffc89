//! A participant's life after its join: leaving (its own, its socket's
//! end, a kick, a ban), and the changes a plane asks for (mute, gain, the
//! right to speak, a hand, deafness, voice processing, attributes).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::grants::may_act_on;
use super::sessions::Sessions;
use crate::auth::Grant;
use crate::cluster::control::{self, Control};
use crate::refusal::{Refusal, Refused};
use crate::room::{LeaveReason, Member, ParticipantVoice, Room, RoomError};
use crate::sync::lock;

/// What a plane asks to change of a participant (each `None`: unchanged).
#[derive(Debug, Default)]
pub(crate) struct Change {
    pub(crate) muted: Option<bool>,
    /// 0 to 4 (admin only).
    pub(crate) gain: Option<f32>,
    /// Grant or revoke the right to speak (admin only).
    pub(crate) speak: Option<bool>,
    /// Raise or lower the hand (its own, or an admin).
    pub(crate) hand: Option<bool>,
    /// Hear no one, or hear the room again (its own, or an admin).
    pub(crate) deaf: Option<bool>,
    /// Over the room's setting (admin only; `Some(None)`: the room's again).
    pub(crate) noise_suppression: Option<Option<bool>>,
    /// Over the room's setting (admin only; `Some(None)`: the room's again).
    pub(crate) loudness: Option<Option<bool>>,
    /// Attributes to set (a value) or remove (`None`); reserved keys: admin only.
    pub(crate) attributes: Option<crate::attributes::AttributesPatch>,
}

impl Sessions {
    /// Participant `id` leaves `room` for `reason` (nothing if it is gone already).
    pub(crate) fn leave(&self, room: &Room, id: u64, reason: LeaveReason) {
        if let Ok(effect) = self.rooms.leave(room, id, reason) {
            self.apply(effect);
        }
    }

    /// Participant `id` leaves (its own grant), or an admin removes it
    /// (reason `kicked`), with `ban_seconds` banning its identity from the
    /// room for that long (in a room spread over nodes, on every node of it:
    /// they refuse its joins within the pub/sub latency).
    pub(crate) fn remove(&self, state: &Room, id: u64, grant: &Grant, ban_seconds: Option<u64>) -> Refused<()> {
        let admin = may_act_on(grant, state, id)?;
        let own = lock(&state.members).get(&id).is_some_and(|m| m.identity == grant.identity);
        let effect = match ban_seconds {
            Some(secs) => {
                let key = self.rooms.ban_key_of(state, id);
                let ban = Duration::from_secs(secs);
                let effect = self.rooms.kick(state, id, Some(ban), Instant::now())?;
                crate::metrics::stage_action("ban");
                // The other nodes of a spread room refuse the identity too.
                if let Some(key) = key {
                    control::publish(self.node.dir.as_ref(), &state.id, &Control::Ban { key, seconds: secs });
                }
                effect
            }
            // An admin removing someone else kicks it (with auth off, every caller is an admin with no identity: it leaves).
            None if admin && !own => {
                let effect = self.rooms.kick(state, id, None, Instant::now())?;
                crate::metrics::stage_action("kick");
                effect
            }
            None => self.rooms.leave(state, id, LeaveReason::Left)?,
        };
        self.apply(effect);
        Ok(())
    }

    /// Changes participant `id` of `state` as `grant` may: the participant
    /// itself (mute, hand, deafness) or an admin (everything). A participant
    /// takes at most `limits.participant_updates_per_second` changes of its
    /// own and as many from its room's admins (each is fanned out to every
    /// socket of the room): its own cannot make an admin's fail. Returns the participant
    /// as it is now and its voice settings.
    pub(crate) fn update(
        &self,
        state: &Room,
        id: u64,
        grant: &Grant,
        change: &Change,
    ) -> Refused<(Member, ParticipantVoice)> {
        let admin = may_act_on(grant, state, id)?;
        self.check_update_rate(id, admin)?;
        if change.gain.is_some() && !admin {
            return Err(Refusal::forbidden("changing a participant's gain needs an admin token"));
        }
        if change.speak.is_some() && !admin {
            return Err(Refusal::forbidden("granting or revoking the right to speak needs an admin token"));
        }
        // sound: noise suppression and loudness switches (admin only).
        if (change.noise_suppression.is_some() || change.loudness.is_some()) && !admin {
            return Err(Refusal::forbidden(
                "changing a participant's noise suppression or loudness needs an admin token",
            ));
        }
        // First: a refused set of attributes leaves everything else unchanged.
        if let Some(patch) = &change.attributes {
            self.rooms.set_attributes(state, id, patch, (&self.cfg.limits.reserved_attributes, admin))?;
        }
        if let Some(gain) = change.gain {
            self.rooms.set_gain(state, id, gain)?;
        }
        // Speak first: a grant unmutes, so `{"speak": true, "muted": true}` ends muted.
        if let Some(speak) = change.speak
            && self.rooms.set_speak(state, id, speak)?
        {
            crate::metrics::stage_action(if speak { "grant" } else { "revoke" });
        }
        if let Some(raised) = change.hand
            && self.rooms.set_hand(state, id, raised)?
        {
            crate::metrics::stage_action(if raised { "hand_raised" } else { "hand_lowered" });
        }
        if let Some(deaf) = change.deaf
            && self.rooms.set_deaf(state, id, deaf)?
        {
            crate::metrics::stage_action(if deaf { "deafened" } else { "undeafened" });
        }
        if let Some(muted) = change.muted {
            if !muted && !admin {
                self.check_unmute(state, id)?;
            }
            self.rooms.set_muted(state, id, muted)?;
        }
        // sound: last, so a refused gain or mute above leaves it unchanged.
        let voice = self.rooms.set_voice(state, id, change.noise_suppression, change.loudness)?;
        let member = lock(&state.members).get(&id).cloned().ok_or(RoomError::NoParticipant(id))?;
        Ok((member, voice))
    }

    /// One bucket for a participant's own changes, another for its room's
    /// admins' (each change is fanned out to every socket of the room): a
    /// participant cannot spend the admins' share.
    fn check_update_rate(&self, id: u64, admin: bool) -> Refused<()> {
        self.updates.check((id, admin), Instant::now()).map_err(|retry| {
            let mut e = Refusal::rate_limited(retry);
            e.message = format!(
                "participant {id} is updated too often (limits.participant_updates_per_second = {}); retry in {} s",
                self.cfg.limits.participant_updates_per_second,
                retry.as_secs_f64().ceil().max(1.0)
            );
            e
        })
    }

    /// Changes the attributes of participant `target` (the socket's own,
    /// one of the caller's identity, or anyone's for an admin) by `patch`,
    /// at the rate of [`Sessions::update`]. Only an admin sets a reserved key.
    pub(crate) fn set_attributes(
        &self,
        room: &Room,
        grant: &Grant,
        me: Option<u64>,
        target: u64,
        patch: &crate::attributes::AttributesPatch,
    ) -> Refused<()> {
        let admin = if Some(target) == me { grant.may_manage(&room.id) } else { may_act_on(grant, room, target)? };
        self.check_update_rate(target, admin)?;
        self.rooms.set_attributes(room, target, patch, (&self.cfg.limits.reserved_attributes, admin))?;
        Ok(())
    }

    /// Refuses a participant's unmuting of itself while its room waits for a moderator.
    fn check_unmute(&self, room: &Room, id: u64) -> Refused<()> {
        let member = lock(&room.members).get(&id).cloned().ok_or(RoomError::NoParticipant(id))?;
        room.check_unmute(&member)?;
        Ok(())
    }

    /// Mutes or unmutes a socket's own participant.
    pub(crate) fn set_muted(&self, room: &Room, id: u64, muted: bool) -> Refused<()> {
        if !muted {
            self.check_unmute(room, id)?;
        }
        self.rooms.set_muted(room, id, muted)?;
        Ok(())
    }

    /// Raises or lowers participant `target`'s hand: `me`'s own (the
    /// caller's participant), one of the caller's identity, or anyone's
    /// for an admin.
    pub(crate) fn set_hand(
        &self,
        room: &Room,
        grant: &Grant,
        me: Option<u64>,
        target: u64,
        raised: bool,
    ) -> Refused<()> {
        let identity = &grant.identity;
        let own = Some(target) == me
            || lock(&room.members).get(&target).is_some_and(|m| !identity.is_empty() && m.identity == *identity);
        if !own && !grant.may_manage(&room.id) {
            return Err(Refusal::forbidden("raising or lowering another participant's hand needs an admin token"));
        }
        if self.rooms.set_hand(room, target, raised)? {
            crate::metrics::stage_action(if raised { "hand_raised" } else { "hand_lowered" });
        }
        Ok(())
    }

    /// The socket of participant `id` is gone. A clean close (or no grace
    /// configured) leaves at once; a lost socket leaves after the grace
    /// period (`limits.ws_resume_seconds`) unless a new socket resumes it first.
    pub(crate) fn socket_gone(self: &Arc<Self>, room: &Arc<Room>, id: u64, clean: bool) {
        let grace = self.cfg.limits.ws_resume_seconds;
        let generation = if clean || grace <= 0.0 { None } else { self.resumes.detach(id) };
        let Some(generation) = generation else {
            self.resumes.forget(id);
            self.socket_leave(room, id);
            return;
        };
        tracing::info!(room = %room.id, participant = id, grace, "WebSocket lost: the participant waits for a resume");
        let (sessions, room) = (self.clone(), room.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs_f64(grace)).await;
            if sessions.resumes.expire(id, generation) {
                tracing::info!(room = %room.id, participant = id, "no resume within the grace period: leaving");
                sessions.socket_leave(&room, id);
            }
        });
    }

    /// Its participant leaves with its socket: `moved` when the room was
    /// handed over (a drain: the client went to the new node), else `left`.
    pub(crate) fn socket_leave(&self, room: &Room, id: u64) {
        // Moved to another room of this node since (a breakout): it leaves from there.
        let now_in = self.rooms.room_of(id);
        let room = now_in.as_deref().unwrap_or(room);
        let reason = if room.is_handed_over() { LeaveReason::Moved } else { LeaveReason::Left };
        self.leave(room, id, reason);
    }
}
