//! What the API's handlers share: the session layer they call down into,
//! this node (for reads: where a room is, the directory's list), and what
//! only the API keeps (its open sockets, clips, the token verifier).

use std::collections::HashMap;
use std::hash::RandomState;
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, Weak};
use std::time::SystemTime;

use crate::Config;
use crate::auth::Auth;
use crate::cluster::node::Node;
use crate::limit::{Counts, KeyedLimiter};
use crate::media::MediaHandle;
use crate::outputs::Outputs;
use crate::room::Rooms;
use crate::room::playback::Clip;
use crate::session::sessions::Sessions;

/// Invites a room's admins may mint per room and node, per hour (at once:
/// as many); beyond: 429 `too_many_invites`.
pub(crate) const INVITES_PER_ROOM_PER_HOUR: u32 = 1000;

/// What the API handlers share.
pub(crate) struct ApiState {
    pub(crate) cfg: Config,
    /// Where participants join, leave, move and are changed.
    pub(crate) session: Arc<Sessions>,
    /// This node: the cluster directory (none on a single node) and what it keeps.
    pub(crate) node: Arc<Node>,
    /// The room domain, for reads (the session layer changes it).
    pub(crate) rooms: Arc<Rooms>,
    pub(crate) media: Arc<MediaHandle>,
    /// Recordings, RTP out, webhooks.
    pub(crate) outputs: Arc<Outputs>,
    /// Verifies access tokens; `None` when auth is disabled.
    pub(crate) auth: Option<Auth>,
    /// Open WebSocket sessions (shutdown waits for them to be told).
    pub(crate) ws_sessions: AtomicUsize,
    /// Open WebSockets per token identity.
    pub(crate) ws_identities: Counts,
    /// Files of the playback directory read once for every room playing them.
    pub(crate) clips: ClipCache,
    /// Invites minted per room (by a keyed hash of its name).
    pub(crate) invites: KeyedLimiter<u64>,
    /// The key of that hash (per process: nobody aims a collision).
    pub(crate) room_hasher: RandomState,
}

impl ApiState {
    pub(crate) fn new(session: Arc<Sessions>, auth: Option<Auth>) -> Self {
        let node = session.node.clone();
        Self {
            cfg: node.cfg.clone(),
            rooms: node.rooms.clone(),
            media: node.media.clone(),
            outputs: node.outputs.clone(),
            node,
            session,
            auth,
            ws_sessions: AtomicUsize::new(0),
            ws_identities: Counts::default(),
            clips: ClipCache::default(),
            invites: KeyedLimiter::new(INVITES_PER_ROOM_PER_HOUR as f64 / 3600.0, INVITES_PER_ROOM_PER_HOUR),
            room_hasher: RandomState::new(),
        }
    }
}

/// The clips of the playback directory read so far and still playing
/// somewhere, by path: a file played into 500 rooms is read, checked and
/// held in memory once. An entry is used only while the file's size and
/// modification time are as they were, and while a playback holds it.
#[derive(Default)]
pub(crate) struct ClipCache(pub(crate) Mutex<HashMap<PathBuf, Cached>>);

/// A cache entry: the file's modification time and size when read, and its clip.
pub(crate) type Cached = (Option<SystemTime>, u64, Weak<Clip>);
