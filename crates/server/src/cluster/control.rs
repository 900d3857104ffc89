//! Room-wide control across the nodes of a spread room: a change applied
//! here to this node's copy of a room (`PATCH /v1/rooms/{room}`, its
//! spatial mode and moderation options included, a ban, a
//! per-speaker recording started or stopped) is
//! told to every other node hosting the room, which applies it to its own
//! copy; a node that joins a room's span says so, so that the others read
//! the span at once rather than at their next refresh.
//!
//! ```text
//! PATCH /v1/rooms/r on node A ─► applied to A's copy (the answer says what A did)
//!   ─► publish(Control::Update) ─► Cluster::publish_control (signed, never blocks)
//!   ─► Redis pub/sub ─► node B: checked by the cluster crate (tag, age, nonce, epoch)
//!   ─► run() ─► apply(): B's copy of r locked, its non-admins muted, … (its own events)
//! ```
//!
//! Never re-published by a receiver (no loops); never on a media thread
//! (a tokio task, and the room's own locks as the API takes them). Other
//! nodes apply a change within about a Redis round trip of the answer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tutti_cluster::{Cluster, ControlMessage, RoomSpread};

use super::node::Node;
use super::options::RoomOptions;
use crate::outputs::SpeakersTimeline;
use crate::room::RoomUpdate;

/// What one node tells the other nodes of a room's span to apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Control {
    /// `PATCH /v1/rooms/{room}`, as applied on the node that took it.
    Update {
        locked: Option<bool>,
        max_participants: Option<usize>,
        max_speakers: Option<usize>,
        mute_all: bool,
        noise_suppression: Option<String>,
        loudness: Option<bool>,
    },
    /// A ban (`DELETE …/participants/{id}?ban_seconds=`): what it keeps
    /// out (the identity, or the name without one), for how long.
    Ban { key: String, seconds: u64 },
    /// The sender joined the room's span: read it now.
    Joined,
    /// `DELETE /v1/rooms/{room}`: every node closes its copy.
    Close,
    /// `POST …/recording` with `per_speaker`: every node records its own
    /// speakers, on the sender's timeline (same file names, same zero tick).
    RecordSpeakers { started_ms: u64, zero_tick: u64, only: Option<Vec<u64>> },
    /// `DELETE …/recording`: every node closes its speakers' files and writes its sidecar.
    StopSpeakers,
    /// Whether the sender has a moderator of the room now (sent when that
    /// changes, and to a node that joins the room): a moderator on any node
    /// opens a waiting room, the last one gone applies `on_moderator_leave`.
    Moderators { present: bool },
    /// The room's spatial mode and moderation options: set by a `PATCH` on
    /// the sender, or (both given) its copy's, told to a node that joined.
    Options(RoomOptions),
}

impl Control {
    /// The `kind` label of `tutti_cluster_control_applied_total`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Update { .. } => "update",
            Self::Ban { .. } => "ban",
            Self::Joined => "joined",
            Self::Close => "close",
            Self::RecordSpeakers { .. } => "record_speakers",
            Self::StopSpeakers => "stop_speakers",
            Self::Moderators { .. } => "moderators",
            Self::Options(_) => "options",
        }
    }

    /// Tells the other nodes to record their speakers on `at`.
    pub(crate) fn record_speakers(at: SpeakersTimeline) -> Self {
        Self::RecordSpeakers { started_ms: at.started_ms, zero_tick: at.zero_tick, only: at.only }
    }
}

/// Tells the other nodes of `room`'s span to apply `control` (cluster mode
/// with `room_spread`, a room hosted here; else nothing). Never blocks.
pub(crate) fn publish(dir: Option<&Cluster>, room: &str, control: &Control) {
    let Some(cluster) = dir else { return };
    if cluster.config().room_spread == RoomSpread::Off {
        return;
    }
    match serde_json::to_value(control) {
        Ok(body) => {
            if !cluster.publish_control(room, body) {
                tracing::debug!(room, kind = control.kind(), "no epoch of the room here: control not published");
            }
        }
        Err(e) => tracing::warn!(room, error = %e, "control not encoded"),
    }
}

/// Applies a control message from another node to this node's copy of its
/// room; what was applied (its kind), or `None` (the room is not hosted
/// here any more, or the body is not one this node reads).
pub(crate) fn apply(node: &Node, msg: &ControlMessage) -> Option<&'static str> {
    let control: Control = match serde_json::from_value(msg.body.clone()) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(room = %msg.room, origin = %msg.origin, error = %e, "control message not understood: ignored");
            return None;
        }
    };
    if control == Control::Joined {
        node.span_wake.notify_one();
        // The newcomer learns the room's options as they are now (a PATCH after its creation)
        // and that a moderator is here (it hears of later changes as they come),
        // and records its speakers for a per-speaker recording this node started.
        if let Ok(room) = node.rooms.get(&msg.room) {
            publish(node.dir.as_ref(), &msg.room, &Control::Options(RoomOptions::of(&room)));
            if room.has_moderator_here() {
                publish(node.dir.as_ref(), &msg.room, &Control::Moderators { present: true });
            }
            if let Some(at) = node.outputs.speakers_timeline(&room) {
                publish(node.dir.as_ref(), &msg.room, &Control::record_speakers(at));
            }
        }
        return Some(control.kind());
    }
    let room = node.rooms.get(&msg.room).ok().filter(|r| !r.is_handed_over() && !r.is_closed())?;
    match &control {
        Control::Update { locked, max_participants, max_speakers, mute_all, noise_suppression, loudness } => {
            let update = RoomUpdate {
                locked: *locked,
                max_participants: *max_participants,
                max_speakers: *max_speakers,
                mute_all: *mute_all,
            };
            if let Err(e) = node.rooms.update_room(&room, update) {
                tracing::warn!(room = %msg.room, origin = %msg.origin, error = %e, "room update from another node refused");
                return None;
            }
            let noise_suppression =
                noise_suppression.as_deref().and_then(|n| crate::room::parse_noise_suppression(n).ok());
            if noise_suppression.is_some() || loudness.is_some() {
                room.room_voice(noise_suppression, *loudness);
            }
        }
        Control::Ban { key, seconds } => {
            if let Err(e) = node.rooms.ban(&room, key.clone(), Duration::from_secs(*seconds), Instant::now()) {
                tracing::warn!(room = %msg.room, origin = %msg.origin, error = %e, "ban from another node refused");
                return None;
            }
        }
        Control::Close => match node.rooms.delete(&msg.room) {
            Ok(effects) => {
                node.apply(effects);
                // The span task takes this node out of the room's span (and
                // lets its lease go if it held it and nobody else hosts it).
                node.span_wake.notify_one();
            }
            Err(e) => {
                tracing::debug!(room = %msg.room, origin = %msg.origin, error = %e, "room closed already");
                return None;
            }
        },
        Control::RecordSpeakers { started_ms, zero_tick, only } => {
            let at = SpeakersTimeline { started_ms: *started_ms, zero_tick: *zero_tick, only: only.clone() };
            if let Err(e) = node.outputs.start_speakers_here(&room, &at) {
                tracing::warn!(room = %msg.room, origin = %msg.origin, error = %e, "per-speaker recording from another node refused");
                return None;
            }
        }
        Control::StopSpeakers => {
            let tracks = node.outputs.stop_speakers_here(&room)?;
            // The files close on their writers' threads; the sidecar is written off the async threads.
            tokio::task::spawn_blocking(move || tracks.stop(None));
        }
        Control::Moderators { present } => node.rooms.moderator_elsewhere(&room, &msg.origin, *present),
        Control::Options(options) => options.apply(&room),
        Control::Joined => {}
    }
    tracing::info!(room = %msg.room, origin = %msg.origin, kind = control.kind(), "room control from another node applied");
    Some(control.kind())
}

/// Applies the control messages other nodes send for rooms hosted here,
/// until `stop` (cluster mode).
pub(crate) async fn run(node: Arc<Node>, cluster: Cluster, mut stop: tokio::sync::watch::Receiver<bool>) {
    let Some(mut messages) = cluster.take_control() else { return };
    loop {
        tokio::select! {
            msg = messages.recv() => match msg {
                Some(msg) => {
                    if let Some(kind) = apply(&node, &msg) {
                        crate::metrics::cluster_control_applied(kind);
                    }
                }
                None => break,
            },
            _ = stop.wait_for(|s| *s) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Control, RoomOptions};

    #[test]
    fn control_bodies_round_trip_and_name_their_kind() {
        let all = [
            Control::Update {
                locked: Some(true),
                max_participants: None,
                max_speakers: Some(3),
                mute_all: true,
                noise_suppression: Some("on".into()),
                loudness: None,
            },
            Control::Ban { key: "id:mallory".into(), seconds: 60 },
            Control::Joined,
            Control::Close,
            Control::RecordSpeakers { started_ms: 1_795_912_398_123, zero_tick: 89_795_619_906, only: Some(vec![7]) },
            Control::StopSpeakers,
            Control::Moderators { present: true },
            Control::Options(RoomOptions { spatial: Some(crate::room::SpatialMode::Panned), moderation: None }),
        ];
        for c in all {
            let json = serde_json::to_value(&c).expect("encodes");
            assert_eq!(json["kind"], c.kind());
            assert_eq!(serde_json::from_value::<Control>(json).expect("decodes"), c);
        }
        assert!(serde_json::from_value::<Control>(serde_json::json!({"kind": "reboot"})).is_err());
    }
}
