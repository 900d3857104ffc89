//! The session layer's state: this node ([`Node`]: the rooms, the media
//! handle, the outputs and the cluster), whether tokens are checked, the
//! per-address and per-participant limits of what it is asked, and the
//! resume slots of participants whose socket was lost.

use std::sync::Arc;

use crate::Config;
use crate::cluster::node::Node;
use crate::limit::{AddressLimiter, KeyedLimiter};
use crate::media::MediaHandle;
use crate::outputs::Outputs;
use crate::room::{Effect, Rooms};

use super::resumes::Resumes;

/// Where participants join, leave, move and are changed: one for every
/// control plane of the node.
pub(crate) struct Sessions {
    pub(crate) cfg: Config,
    pub(crate) node: Arc<Node>,
    pub(crate) rooms: Arc<Rooms>,
    pub(crate) media: Arc<MediaHandle>,
    pub(crate) outputs: Arc<Outputs>,
    /// Whether access tokens are checked. With auth off every caller is an
    /// admin with no identity: then nobody is a room's moderator (spared by
    /// mute-all).
    pub(crate) auth_on: bool,
    /// Joins (and ICE restarts) per client address.
    pub(crate) joins: AddressLimiter,
    /// Changes per participant (`PATCH …/participants/{id}`), counted apart
    /// for its own and its room's admins' (key: id, by an admin).
    pub(crate) updates: KeyedLimiter<(u64, bool)>,
    /// Data messages per sender: (room key, participant id; `u64::MAX`: the backend).
    pub(crate) data: KeyedLimiter<(u64, u64)>,
    /// WebSocket-joined participants a new socket may resume.
    pub(crate) resumes: Arc<Resumes>,
    /// What places dial-out calls: the SIP edge, once it started (`dialout`).
    pub(crate) dialer: std::sync::OnceLock<Arc<dyn super::dialer::Dialer>>,
}

impl Sessions {
    pub(crate) fn new(node: Arc<Node>, auth_on: bool) -> Self {
        let cfg = node.cfg.clone();
        Self {
            joins: AddressLimiter::new(cfg.limits.join_rate_per_second, cfg.limits.join_burst),
            updates: KeyedLimiter::new(cfg.limits.participant_updates_per_second, cfg.limits.participant_update_burst),
            data: KeyedLimiter::new(cfg.limits.data_messages_per_second, cfg.limits.data_message_burst),
            rooms: node.rooms.clone(),
            media: node.media.clone(),
            outputs: node.outputs.clone(),
            resumes: Arc::default(),
            dialer: std::sync::OnceLock::new(),
            auth_on,
            node,
            cfg,
        }
    }

    /// Hands room effects to the media plane.
    pub(crate) fn apply(&self, effects: impl IntoIterator<Item = Effect>) {
        self.media.apply(effects);
    }

    /// Client addresses the join rate limiter tracks.
    pub(crate) fn rate_limited_addresses(&self) -> usize {
        self.joins.tracked()
    }
}
