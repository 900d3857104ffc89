//! Room events as webhooks: one task per room subscribes to the room's
//! event batches (the same broadcast the WebSockets read) and hands
//! `room_started`, `participant_joined`, `participant_left`,
//! `participant_attributes_changed`,
//! `playback_started`, `playback_stopped`, `playback_finished` and
//! `room_finished` to the [`WebhookSender`], whose `send` never blocks.
//! A watcher that falls more than the broadcast's queue behind loses
//! batches: counted and logged, never waited for.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use tokio::sync::broadcast::error::RecvError;

use super::Outputs;
use crate::metrics::outputs as m;
use crate::outputs::webhook::{CallInfo, ParticipantInfo, PlaybackInfo, WebhookEvent, WebhookSender};
use crate::room::{Room, RoomEvent};
use crate::sync::lock;

/// Watches `room` until it is closed (or dropped).
impl Outputs {
    /// Starts [`watch`] on the current runtime (the wiring calls this
    /// without naming this file: no circle between the two).
    pub(super) fn spawn_watcher(
        self: &Arc<Self>,
        runtime: &tokio::runtime::Handle,
        room: &Arc<Room>,
        sender: &Arc<WebhookSender>,
    ) {
        runtime.spawn(watch(self.clone(), room.clone(), sender.clone()));
    }
}

pub(crate) async fn watch(outputs: Arc<Outputs>, room: Arc<Room>, sender: Arc<WebhookSender>) {
    let key = room.key;
    let id = room.id.clone();
    // Subscribe first, then look: a join in between is seen twice, and the
    // set of known participants drops the second.
    let mut rx = room.subscribe();
    let mut known: HashMap<u64, ParticipantInfo> = HashMap::new();
    sender.send(&WebhookEvent::RoomStarted { room: id.clone() });
    for member in room.member_list() {
        let info = ParticipantInfo {
            id: member.id.to_string(),
            identity: member.identity.clone(),
            attributes: member.attributes.clone(),
        };
        sender.send(&WebhookEvent::ParticipantJoined { room: id.clone(), participant: info.clone() });
        known.insert(member.id, info);
    }
    let weak: Weak<Room> = Arc::downgrade(&room);
    drop(room);
    let mut finished = false;
    while !finished {
        let batch = match rx.recv().await {
            Ok(batch) => batch,
            Err(RecvError::Lagged(n)) => {
                m::webhook_events_lost(n);
                tracing::warn!(room = %id, batches = n, "webhook watcher fell behind: room events lost");
                continue;
            }
            Err(RecvError::Closed) => break,
        };
        for event in &batch.events {
            match event {
                RoomEvent::Joined { id: pid, name, attributes } => {
                    if known.contains_key(pid) {
                        continue;
                    }
                    let identity = weak
                        .upgrade()
                        .and_then(|r| lock(&r.members).get(pid).map(|m| m.identity.clone()))
                        .filter(|i| !i.is_empty())
                        .unwrap_or_else(|| name.clone());
                    let info = ParticipantInfo { id: pid.to_string(), identity, attributes: attributes.clone() };
                    sender.send(&WebhookEvent::ParticipantJoined { room: id.clone(), participant: info.clone() });
                    known.insert(*pid, info);
                }
                RoomEvent::Left { id: pid, reason } => {
                    let participant = known.remove(pid).unwrap_or_else(|| ParticipantInfo {
                        id: pid.to_string(),
                        identity: String::new(),
                        attributes: Default::default(),
                    });
                    sender.send(&WebhookEvent::ParticipantLeft {
                        room: id.clone(),
                        participant,
                        reason: (*reason).to_owned(),
                    });
                }
                RoomEvent::AttributesChanged { id: pid, attributes } => {
                    // Only a participant of this node (another node's tells its own webhooks).
                    let Some(info) = known.get_mut(pid) else { continue };
                    info.attributes = attributes.clone();
                    let participant = info.clone();
                    sender.send(&WebhookEvent::ParticipantAttributesChanged { room: id.clone(), participant });
                }
                RoomEvent::PlaybackStarted { id: pid, file, purpose, looping } => {
                    let playback = PlaybackInfo {
                        id: *pid,
                        file: file.clone(),
                        purpose: Some((*purpose).to_owned()),
                        looping: Some(*looping),
                    };
                    sender.send(&WebhookEvent::PlaybackStarted { room: id.clone(), playback });
                }
                RoomEvent::PlaybackStopped { id: pid, file, reason } => {
                    let playback = PlaybackInfo { id: *pid, file: file.clone(), purpose: None, looping: None };
                    let reason = (*reason).to_owned();
                    sender.send(&WebhookEvent::PlaybackStopped { room: id.clone(), playback, reason });
                }
                RoomEvent::PlaybackFinished { id: pid, file } => {
                    let playback = PlaybackInfo { id: *pid, file: file.clone(), purpose: None, looping: None };
                    sender.send(&WebhookEvent::PlaybackFinished { room: id.clone(), playback });
                }
                RoomEvent::CallRinging { call_id, to } => {
                    let call = CallInfo { to: Some(to.clone()), ..CallInfo::new(call_id) };
                    sender.send(&WebhookEvent::CallRinging { room: id.clone(), call });
                }
                RoomEvent::CallAnswered { call_id, id: pid } => {
                    let call = CallInfo { id: Some(*pid), ..CallInfo::new(call_id) };
                    sender.send(&WebhookEvent::CallAnswered { room: id.clone(), call });
                }
                RoomEvent::CallFailed { call_id, sip_status, code, reason } => {
                    let call = CallInfo {
                        sip_status: Some(*sip_status),
                        code: Some((*code).to_owned()),
                        ..CallInfo::new(call_id)
                    };
                    sender.send(&WebhookEvent::CallFailed { room: id.clone(), call, reason: reason.clone() });
                }
                RoomEvent::RoomClosed => finished = true,
                _ => {}
            }
        }
    }
    sender.send(&WebhookEvent::RoomFinished { room: id });
    outputs.unwatch(key);
}
