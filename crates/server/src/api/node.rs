//! The node itself: `GET /v1/node` (what it holds, whether it drains) and
//! `POST /v1/node/drain` (a drain without a signal, for operators who have
//! none), and the drain they and SIGTERM start.
//!
//! ```text
//! SIGTERM, or POST /v1/node/drain (admin of every room)
//!   ─► draining: /readyz 503, no new room here (Rooms::drain), rooms told `draining` {deadline}
//!   single node: calls go on; `tutti serve` shuts down when the last participant
//!                has left, or at the deadline (`drain_seconds`)
//!   cluster:     Cluster::set_draining (placement skips this node), then each room:
//!                its stored config read ─► lease released ─► placed afresh (never here)
//!                ─► Room::hand_over(node B): every socket gets `moved` {room, node,
//!                   api_url, reason: "drain", ticket} and rejoins at B, then closes here;
//!                   participants without a socket (WHIP, REST) are closed at once
//!                   (DTLS close_notify): they rejoin through any node, and are sent to B
//!                no other node (or no Redis) ─► the room stays here, as on a single node
//! ```
//!
//! A drain is not undone: a draining node ends with a shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::extract::ws::Message;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tutti_cluster::{Cluster, Placement};

use super::error::{ApiError, ApiResult};
use super::schema::{ErrorBody, shapes};
use super::{ApiState, authenticate};
use crate::auth::Grant;
use crate::room::{LeaveReason, MovedTo, Room};
use crate::sync::lock;

/// What the participants of a draining node are told.
const DRAINING_MESSAGE: &str = "this server is restarting: your call goes on for now";

/// A node's drain: whether one started, and until when.
#[derive(Debug, Default)]
pub(crate) struct Drain {
    /// Unix milliseconds at which the drain ends at the latest; 0 = not draining.
    deadline_ms: AtomicU64,
    /// Wakes [`Drain::requested`] when the API asked for a drain.
    asked: tokio::sync::Notify,
}

impl Drain {
    /// The drain's deadline (unix seconds, rounded up), once one started.
    pub(crate) fn deadline(&self) -> Option<u64> {
        Some(self.deadline_ms.load(Ordering::Relaxed)).filter(|d| *d > 0).map(|ms| ms.div_ceil(1000))
    }

    /// Resolves once the API has asked this node to drain.
    pub(crate) async fn requested(&self) {
        self.asked.notified().await;
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Starts draining this node (once: later calls return the first drain's
/// deadline). `within`: how long calls may go on here at most. Returns
/// the deadline in unix milliseconds.
pub(crate) async fn begin(api: &Arc<ApiState>, within: Duration) -> u64 {
    let deadline_ms = unix_ms() + within.as_millis() as u64;
    let set = api.drain.deadline_ms.compare_exchange(0, deadline_ms.max(1), Ordering::Relaxed, Ordering::Relaxed);
    if let Err(first) = set {
        return first;
    }
    crate::metrics::set_draining(true);
    if let Some(cluster) = &api.cluster
        && let Err(e) = cluster.set_draining().await
    {
        tracing::warn!(error = %e, "could not mark this node draining in the cluster directory");
    }
    api.rooms.drain(deadline_ms.div_ceil(1000), DRAINING_MESSAGE);
    tracing::warn!(
        rooms = api.rooms.all().len(),
        participants = api.rooms.participants(),
        seconds = within.as_secs_f64(),
        "draining: no new rooms here; calls go on until they end or the drain time runs out"
    );
    if let Some(cluster) = api.cluster.clone() {
        // Not in the caller's way: each room is a few Redis round trips.
        tokio::spawn(hand_over_all(api.clone(), cluster, deadline_ms.div_ceil(1000)));
    }
    deadline_ms
}

/// Hands every room of this node over to another node, one by one.
/// `until`: the drain's deadline (Unix seconds), when what the rooms carry
/// (their lock and bans) stops applying on the new node.
async fn hand_over_all(api: Arc<ApiState>, cluster: Cluster, until: u64) {
    for room in api.rooms.all() {
        match hand_over(&api, &cluster, &room, until).await {
            Ok(Some(to)) => {
                tracing::info!(room = %room.id, node = %to.node, "room handed over");
                room.hand_over(to);
                close_socketless(&api, &room);
            }
            Ok(None) => tracing::warn!(room = %room.id, "no other node can take the room: it stays here"),
            Err(e) => {
                tracing::warn!(room = %room.id, error = %e, "could not hand the room over: it stays here");
            }
        }
    }
}

/// Places `room` on another node: its creation config kept with its
/// current limits, lock and bans written in ([`carried_config`]), this
/// node's lease given up, the room claimed for the lighter of the others
/// (this node is draining: placement skips it). `Ok(None)` when no other
/// node can take it (the room is claimed back here, with the config it
/// had). A lease that could not be released is claimed back too: `release`
/// stops renewing it at once.
async fn hand_over(
    api: &ApiState,
    cluster: &Cluster,
    room: &Room,
    until: u64,
) -> Result<Option<MovedTo>, tutti_cluster::ClusterError> {
    let config = cluster.room_config(&room.id).await?;
    let carried = carried_config(api, room, config.as_deref(), until);
    let room = room.id.as_str();
    let placed = match cluster.release(room).await {
        Ok(_) => cluster.place(room, Some(&carried)).await,
        Err(e) => Err(e),
    };
    match placed {
        Ok(Placement::Remote(owner)) => Ok(Some(MovedTo { node: owner.node_id, api_url: owner.api_url })),
        Ok(Placement::Local { .. }) => Ok(None),
        Err(e) => {
            // Nobody else (or Redis went away): keep serving it here.
            cluster.claim(room, config.as_deref()).await?;
            match e {
                tutti_cluster::ClusterError::NoEligibleNode => Ok(None),
                e => Err(e),
            }
        }
    }
}

/// The stored config (JSON) the room's new node hosts it with: what its
/// creator gave (fields this node does not know kept as they are), its
/// limits as they stand now, and its lock, bans and participants as
/// `handover` (see [`crate::room::CarriedStage`]).
fn carried_config(api: &ApiState, room: &Room, stored: Option<&str>, until: u64) -> String {
    let mut config = stored
        .and_then(|c| serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(c).ok())
        .unwrap_or_default();
    config.insert("max_participants".into(), room.max_participants().into());
    config.insert("max_speakers".into(), room.max_speakers().into());
    let stage = api.rooms.carry_stage(room, until, std::time::Instant::now(), crate::auth::unix_now());
    config.insert("handover".into(), serde_json::to_value(stage).unwrap_or_default());
    serde_json::Value::Object(config).to_string()
}

/// Closes the participants of a handed-over room that no WebSocket can
/// tell (WHIP and REST joins): their peers get DTLS close_notify, and they
/// rejoin through any node, which sends them to the room's new node.
fn close_socketless(api: &ApiState, room: &Room) {
    let ids: Vec<u64> = lock(&room.members).keys().copied().filter(|id| !api.ws_resumes.holds(*id)).collect();
    for id in ids {
        if let Ok(Some(effect)) = api.rooms.leave(room, id, LeaveReason::Moved) {
            api.apply([effect]);
        }
    }
}

/// The `moved` message a socket of a handed-over room gets: where to
/// rejoin, with a single-use ticket for the page's way in there
/// ([`super::cluster::moved_message`]), carrying no more than what the
/// socket may do now (its participant's speak right as it stands, which an
/// admin may have granted on stage), and `reason: "drain"`.
pub(crate) fn move_message(
    api: &ApiState,
    room: &Room,
    grant: &Grant,
    me: Option<u64>,
    to: &MovedTo,
    token_exp: Option<u64>,
) -> Message {
    let speak = match me {
        Some(id) => lock(&room.members).get(&id).is_some_and(|m| !m.listen_only),
        None => grant.speak,
    };
    let grant = Grant { speak, ..grant.clone() };
    let mut message = super::cluster::moved_message(api, &room.id, &to.node, &to.api_url, &grant, token_exp);
    message["reason"] = "drain".into();
    Message::Text(message.to_string().into())
}

/// The node's routes.
pub(crate) fn routes() -> Router<Arc<ApiState>> {
    Router::new().route("/v1/node", get(status)).route("/v1/node/drain", post(drain))
}

/// 403 unless the caller is an admin of every room (the node is everyone's).
fn node_admin(api: &ApiState, headers: &HeaderMap) -> ApiResult<()> {
    let grant = authenticate(api, headers, None)?;
    if !grant.may_list() {
        return Err(ApiError::forbidden("the node's routes need an admin token for every room ('*')"));
    }
    Ok(())
}

fn summary(api: &ApiState) -> serde_json::Value {
    serde_json::json!({
        "node": api.cluster.as_ref().map(Cluster::node_id),
        "draining": api.drain.deadline().is_some(),
        "drain_deadline": api.drain.deadline(),
        "rooms": api.rooms.all().len(),
        "participants": api.rooms.participants(),
    })
}

/// `GET /v1/node`: whether it drains, what it holds.
#[utoipa::path(
    get,
    path = "/v1/node",
    tag = "node",
    operation_id = "node_status",
    responses(
        (status = 200, description = "The node", body = shapes::NodeSummary),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`", body = ErrorBody),
        (status = 403, description = "`forbidden`: not an admin of every room", body = ErrorBody),
    ),
)]
pub(super) async fn status(State(api): State<Arc<ApiState>>, headers: HeaderMap) -> ApiResult<Response> {
    node_admin(&api, &headers)?;
    Ok(axum::Json(summary(&api)).into_response())
}

/// `POST /v1/node/drain`: starts a drain of `drain_seconds` (as SIGTERM
/// does); `tutti serve` shuts down when it ends. 202, with the node's summary.
#[utoipa::path(
    post,
    path = "/v1/node/drain",
    tag = "node",
    operation_id = "node_drain",
    responses(
        (status = 202, description = "Draining (a second call changes nothing)", body = shapes::NodeSummary),
        (status = 401, description = "`token_missing`, `token_invalid`, `token_expired`", body = ErrorBody),
        (status = 403, description = "`forbidden`: not an admin of every room", body = ErrorBody),
    ),
)]
pub(super) async fn drain(State(api): State<Arc<ApiState>>, headers: HeaderMap) -> ApiResult<Response> {
    node_admin(&api, &headers)?;
    begin(&api, api.cfg.drain_time()).await;
    api.drain.asked.notify_one();
    Ok((StatusCode::ACCEPTED, axum::Json(summary(&api))).into_response())
}
