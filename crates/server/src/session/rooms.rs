//! Rooms as the control planes make, change and close them: a create
//! placed by the cluster, a room-wide change told to the other nodes of a
//! spread room, a delete that gives the room's lease back, the empty rooms
//! reaped, and the node's drain.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tutti_cluster::Owner;

use super::sessions::Sessions;
use crate::cluster::control::{self, Control};
use crate::cluster::hosting::{host, release};
use crate::cluster::node::unavailable;
use crate::cluster::options::RoomOptions;
use crate::refusal::Refused;
use crate::room::{Room, RoomError, RoomUpdate};

/// Where a created (or deleted) room is.
pub(crate) enum Placed {
    Here(Arc<Room>),
    /// Held by (or placed on) another node.
    Elsewhere(Owner),
}

/// A room-wide change (`PATCH /v1/rooms/{room}`).
#[derive(Debug, Default)]
pub(crate) struct RoomChange {
    pub(crate) locked: Option<bool>,
    pub(crate) max_participants: Option<usize>,
    pub(crate) max_speakers: Option<usize>,
    /// Mute everyone but the room's admins.
    pub(crate) mute_all: bool,
    // sound: the room's voice processing ("auto" | "on" | "off").
    pub(crate) noise_suppression: Option<String>,
    pub(crate) loudness: Option<bool>,
    /// Spatial mode and moderation options (each `None`: as they are).
    pub(crate) options: RoomOptions,
}

impl Sessions {
    /// Creates room `id` (its creator's limits and `options`). In cluster mode the room
    /// is placed on the lighter of two nodes (claimed here when the request
    /// was redirected here: `ticketed`); one placed elsewhere is not made here.
    /// The options go in the room's stored config: a node that hosts it
    /// later (a spread room) applies them too.
    pub(crate) async fn create_room(
        &self,
        id: &str,
        max_participants: Option<usize>,
        max_speakers: Option<usize>,
        options: RoomOptions,
        ticketed: bool,
    ) -> Refused<Placed> {
        let room = match &self.node.dir {
            None => self.rooms.create(id, max_participants, max_speakers)?,
            Some(c) => {
                // Until the room is made here: no lease of it is given back meanwhile.
                let _held = self.node.locks.share(id).await;
                if self.rooms.get(id).is_ok() {
                    return Err(RoomError::RoomExists(id.to_owned()).into());
                }
                if !crate::room::valid_room_id(id) {
                    return Err(RoomError::BadRoomId.into());
                }
                let mut config = serde_json::Map::new();
                config.insert("max_participants".into(), max_participants.into());
                config.insert("max_speakers".into(), max_speakers.into());
                options.write_into(&mut config);
                let config = serde_json::Value::Object(config).to_string();
                let placement =
                    if ticketed { c.claim(id, Some(&config)).await } else { c.place(id, Some(&config)).await };
                match placement.map_err(|e| unavailable(&e))? {
                    tutti_cluster::Placement::Local { .. } => {
                        host(&self.node, c, id, max_participants, max_speakers, true)?
                    }
                    tutti_cluster::Placement::Remote(owner) => return Ok(Placed::Elsewhere(owner)),
                }
            }
        };
        options.apply(&room);
        self.outputs.watch(&room);
        Ok(Placed::Here(room))
    }

    /// Deletes room `room`: every participant's peer is closed, the other
    /// nodes of a spread room close their copies, the lease is given back.
    /// A room held by another node: where it is.
    pub(crate) async fn delete_room(&self, room: &str) -> Refused<Option<Owner>> {
        // A spread room: the other nodes close their copies too.
        if self.rooms.get(room).is_ok() {
            control::publish(self.node.dir.as_ref(), room, &Control::Close);
        }
        // Held until the lease is given back: a join after this answer finds the room gone.
        let held = match &self.node.dir {
            Some(_) => Some(self.node.locks.lock(room).await),
            None => None,
        };
        match (self.rooms.delete(room), &self.node.dir) {
            (Ok(effects), cluster) => {
                self.apply(effects);
                if let Some(c) = cluster {
                    release(&self.node, c, room, held);
                }
                Ok(None)
            }
            (Err(e), None) => Err(e.into()),
            (Err(e), Some(c)) => {
                let owner = c.locate(room).await.map_err(|e| unavailable(&e))?.ok_or(e)?;
                Ok(Some(owner))
            }
        }
    }

    /// Changes a room hosted here (lock, size, speaker limit, mute-all,
    /// voice processing, spatial mode, moderation); the other nodes of a
    /// spread room apply it to their copies (their own participants). How
    /// many `mute_all` muted.
    pub(crate) fn update_room(&self, state: &Room, change: &RoomChange) -> Refused<usize> {
        let was_locked = state.is_locked();
        let update = RoomUpdate {
            locked: change.locked,
            max_participants: change.max_participants,
            max_speakers: change.max_speakers,
            mute_all: change.mute_all,
        };
        let muted = self.rooms.update_room(state, update)?;
        // The other nodes of a spread room apply it to their copies (their own participants).
        let control = Control::Update {
            locked: change.locked,
            max_participants: change.max_participants,
            max_speakers: change.max_speakers,
            mute_all: change.mute_all,
            noise_suppression: change.noise_suppression.clone(),
            loudness: change.loudness,
        };
        control::publish(self.node.dir.as_ref(), &state.id, &control);
        if !change.options.is_empty() {
            change.options.apply(state);
            control::publish(self.node.dir.as_ref(), &state.id, &Control::Options(change.options));
        }
        match change.locked {
            Some(true) if !was_locked => crate::metrics::stage_action("lock"),
            Some(false) if was_locked => crate::metrics::stage_action("unlock"),
            _ => {}
        }
        if change.max_participants.is_some() || change.max_speakers.is_some() {
            crate::metrics::stage_action("resize");
        }
        if change.mute_all {
            crate::metrics::stage_action("mute_all");
        }
        Ok(muted)
    }

    /// Deletes the rooms empty for `room.empty_timeout_seconds` (0: never); in
    /// cluster mode their leases are given back. Called every second.
    pub(crate) fn reap_empty(&self, now: Instant) {
        let secs = self.cfg.room.empty_timeout_seconds;
        if secs <= 0.0 || !secs.is_finite() {
            return;
        }
        for room in self.rooms.reap_empty(now, Duration::from_secs_f64(secs)) {
            if let Some(c) = &self.node.dir {
                release(&self.node, c, &room, None);
            }
        }
    }

    /// Closes the rooms whose last moderator left, set to end then
    /// (`on_moderator_leave = "end"`), as a `DELETE` would.
    async fn end_unmoderated(&self) {
        for (id, key) in self.rooms.take_unmoderated() {
            // The same room still (not one made again under its name), and no moderator came back meanwhile.
            if self.rooms.get(&id).is_ok_and(|room| room.key == key && !room.has_moderator()) {
                tracing::info!(room = %id, "room closed: its last moderator left");
                if let Err(e) = self.delete_room(&id).await {
                    tracing::warn!(room = %id, error = %e.message, "room whose moderator left not closed");
                }
            }
        }
    }

    /// Starts draining this node (once: later calls return the first
    /// drain's deadline; see `cluster::handover`). Returns the deadline in
    /// unix milliseconds.
    pub(crate) async fn drain(&self, within: Duration) -> u64 {
        let resumes = self.resumes.clone();
        crate::cluster::handover::begin(&self.node, within, Arc::new(move |id| resumes.holds(id))).await
    }

    /// Forgets join-rate buckets that refilled, reaps empty rooms and ends
    /// those whose moderator left, every second, until `stop`.
    pub(crate) async fn housekeeping(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut every = tokio::time::interval(Duration::from_secs(1));
        loop {
            let stopped = tokio::select! {
                _ = every.tick() => false,
                _ = stop.wait_for(|s| *s) => true,
            };
            if stopped {
                break;
            }
            let now = Instant::now();
            self.joins.prune(now);
            self.updates.prune(now);
            self.data.prune(now);
            // Replaced participants' peers not yet closed by their joiner's caller (plain RTP joins).
            self.apply(self.rooms.take_replaced());
            self.reap_empty(now);
            self.end_unmoderated().await;
        }
    }
}
