//! A room spread over nodes, seen whole from any of them: its participants
//! (the roster) and their events.
//!
//! ```text
//! while other nodes host the room too (`spans` says so every 250 ms;
//! a room that spreads is written whole, a room alone is neither written nor read):
//! this node's participants change (its room's event batches, on the relay task)
//!   ─► Roster::touch: the ids, coalesced per room (bounded: past ROSTER_DIRTY_IDS, the room is
//!      rewritten whole, counted) ─► writer task, every ROSTER_FLUSH: each changed room's
//!      summaries (at most max_participants) ─► Cluster::write_rosters (one round trip)
//! GET /v1/rooms/{room}, a room socket's snapshot:
//!   this node's participants (memory) + others(): the span's members at the room's epoch
//!   (signed records) ─► Cluster::rosters (each at most max_participants entries), shared by
//!   every reader for ROSTER_FRESH
//! the other nodes' event batches (events:<room>, published by each hosting node):
//!   Cluster::watch ─► from a member of the span? ─► joined/left/muted/permissions/hand/deaf of
//!   that node's participants ─► Room::publish_relayed: batched with this node's own (one
//!   serialization per batch, at most one batch per 260 ms), never published again
//! ```
//!
//! Talking is not relayed: every node of the span mixes the same speakers,
//! and its mixer names the remote ones by their real ids (`Room::tick`).
//! Nothing here runs on a media thread: the relay and writer are tokio
//! tasks, the mix clock only batches what they queued.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::broadcast::error::RecvError;
use tutti_cluster::{Cluster, RosterWrite, Span};

use crate::room::{Member, Room, Rooms, listed_participant};
use crate::sync::lock;

/// How often the writer writes what changed (at most).
const ROSTER_FLUSH: Duration = Duration::from_millis(200);
/// Participant changes queued per room before the room is rewritten whole.
const ROSTER_DIRTY_IDS: usize = 256;
/// How long a read of the other nodes' rosters serves every reader.
const ROSTER_FRESH: Duration = Duration::from_millis(250);
/// How often an unknown sender of events makes the span be read again.
const SPAN_RECHECK: Duration = Duration::from_millis(200);

/// Participant summaries (JSON objects), shared by the readers of one read.
type Summaries = Arc<[serde_json::Value]>;

/// What changed in a room's roster since the last write.
#[derive(Debug, Default)]
struct Dirty {
    full: bool,
    ids: HashSet<u64>,
}

/// This node's side of the rosters: the changes waiting to be written, and
/// the other nodes' rosters as last read.
#[derive(Default)]
pub(crate) struct Roster {
    /// The rooms hosted here that other nodes host too (the span task
    /// says): only theirs are written and read.
    spread: Mutex<HashSet<String>>,
    dirty: Mutex<HashMap<String, Dirty>>,
    cache: Mutex<HashMap<String, (Instant, Summaries)>>,
}

impl Roster {
    /// Queues participants `ids` of `room` for the next write (never
    /// blocks; beyond [`ROSTER_DIRTY_IDS`] the room is rewritten whole).
    pub(crate) fn touch(&self, room: &str, ids: impl IntoIterator<Item = u64>) {
        let mut dirty = lock(&self.dirty);
        let d = dirty.entry(room.to_owned()).or_default();
        if d.full {
            return;
        }
        d.ids.extend(ids);
        if d.ids.len() > ROSTER_DIRTY_IDS {
            crate::metrics::roster_overflow(d.ids.len() as u64);
            d.ids.clear();
            d.full = true;
        }
    }

    /// Queues `room`'s whole roster for the next write.
    pub(crate) fn rewrite(&self, room: &str) {
        let mut dirty = lock(&self.dirty);
        let d = dirty.entry(room.to_owned()).or_default();
        d.ids.clear();
        d.full = true;
    }

    /// Whether other nodes host `room` too (the span task tells, every
    /// 250 ms); a room that becomes spread has its roster written whole.
    pub(crate) fn set_spread(&self, room: &str, spread: bool) {
        let changed = {
            let mut rooms = lock(&self.spread);
            if spread { rooms.insert(room.to_owned()) } else { rooms.remove(room) }
        };
        if changed && spread {
            self.rewrite(room);
        }
    }

    fn is_spread(&self, room: &str) -> bool {
        lock(&self.spread).contains(room)
    }

    /// The changes waiting, of the spread rooms (those of the others are
    /// dropped: a room that spreads is written whole).
    fn take(&self) -> HashMap<String, Dirty> {
        let mut dirty = std::mem::take(&mut *lock(&self.dirty));
        dirty.retain(|room, _| self.is_spread(room));
        dirty
    }
}

/// Queues the roster changes of a batch of `room`'s own events (the relay
/// task calls it for every batch it publishes).
pub(crate) fn note_batch(roster: &Roster, room: &str, batch: &crate::room::EventBatch) {
    let ids: Vec<u64> = batch
        .events
        .iter()
        .enumerate()
        .filter(|(i, _)| !batch.is_foreign(*i))
        .filter_map(|(_, e)| listed_participant(e))
        .collect();
    if !ids.is_empty() {
        roster.touch(room, ids);
    }
}

/// The writer, until `stop`: every [`ROSTER_FLUSH`], the rooms whose
/// participants changed, each room's changed summaries (or all of them, at
/// most its `max_participants`), in one round trip. A failed write is
/// queued again whole. A participant written before its ICE and DTLS were
/// up (no event says when they come up) is written again once they are.
pub(crate) async fn write(
    roster: Arc<Roster>,
    rooms: Arc<Rooms>,
    cluster: Cluster,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut every = tokio::time::interval(ROSTER_FLUSH);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Per room, the participants written as not connected yet.
    let mut unconnected: HashMap<String, HashSet<u64>> = HashMap::new();
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        unconnected.retain(|name, ids| {
            let Ok(room) = rooms.get(name) else { return false };
            let members = lock(&room.members);
            let up: Vec<u64> = ids.iter().copied().filter(|id| members.get(id).is_none_or(|m| m.connected)).collect();
            drop(members);
            if !up.is_empty() {
                roster.touch(name, up);
            }
            !ids.is_empty()
        });
        let dirty = roster.take();
        if dirty.is_empty() {
            continue;
        }
        let writes: Vec<RosterWrite> = dirty
            .into_iter()
            .filter_map(|(name, d)| {
                // A room no longer hosted here: its roster went with its span (`Cluster::leave_span`).
                let room = rooms.get(&name).ok().filter(|r| !r.is_handed_over() && !r.is_closed())?;
                Some(changes(&room, d, unconnected.entry(name).or_default()))
            })
            .collect();
        let ok = cluster.write_rosters(&writes).await.is_ok();
        crate::metrics::roster_write(ok);
        if !ok {
            for w in &writes {
                roster.rewrite(&w.room);
            }
        }
    }
}

/// What to write of `room`'s roster for the changes `d`: each changed
/// participant's summary, or its removal; all of them when `d.full`.
/// `unconnected` follows who is written as not connected yet. The
/// members are copied under their lock (as a listing does) and serialized
/// after it: the mix clock takes that lock every tick.
fn changes(room: &Room, d: Dirty, unconnected: &mut HashSet<u64>) -> RosterWrite {
    let cap = room.max_participants();
    let (present, removals): (Vec<Member>, Vec<u64>) = {
        let members = lock(&room.members);
        if d.full {
            (members.values().take(cap).cloned().collect(), Vec::new())
        } else {
            let (mut present, mut gone) = (Vec::new(), Vec::new());
            for id in d.ids {
                match members.get(&id) {
                    Some(m) => present.push(m.clone()),
                    None => gone.push(id),
                }
            }
            (present, gone)
        }
    };
    if d.full {
        unconnected.clear();
    }
    for id in &removals {
        unconnected.remove(id);
    }
    for m in &present {
        if m.connected {
            unconnected.remove(&m.id);
        } else {
            unconnected.insert(m.id);
        }
    }
    let upserts = present.iter().filter_map(|m| serde_json::to_string(m).ok().map(|s| (m.id, s))).collect();
    RosterWrite { room: room.id.clone(), full: d.full, upserts, removals }
}

/// The span's members at the room's epoch other than this node, with their
/// numbers (from their signed records).
fn members_of(cluster: &Cluster, span: &Span) -> Vec<(String, u32)> {
    let epoch = span.lease.as_ref().map(|(_, e)| *e).or_else(|| cluster.room_epoch(&span.room));
    span.members
        .iter()
        .filter(|m| Some(m.epoch) == epoch && m.node_id != cluster.node_id())
        .filter_map(|m| Some((m.node_id.clone(), m.number?)))
        .collect()
}

/// The other nodes' participants of `room` (each summary with its `node`),
/// as their rosters hold them; empty on a single node, for a room not
/// spread, or while Redis cannot be read. Read at most once per
/// [`ROSTER_FRESH`] for all readers; `talking` is this node's view (the same
/// speakers are selected on every node).
pub(crate) async fn others(dir: Option<&Cluster>, roster: &Roster, room: &Room) -> Arc<[serde_json::Value]> {
    let Some(cluster) = dir else { return Arc::from([]) };
    // Not spread (no other node hosts it): nothing to read, no Redis asked.
    if !roster.is_spread(&room.id) {
        return Arc::from([]);
    }
    let cached = lock(&roster.cache).get(&room.id).filter(|(at, _)| at.elapsed() < ROSTER_FRESH).cloned();
    let entries = match cached {
        Some((_, entries)) => entries,
        None => {
            // A failed read serves its readers too (as nothing): Redis away
            // costs one timeout per ROSTER_FRESH, not one per request.
            let entries: Summaries = match read(cluster, room).await {
                Ok(entries) => entries.into(),
                Err(e) => {
                    tracing::debug!(room = %room.id, error = %e, "other nodes' rosters not read");
                    Arc::from([])
                }
            };
            let mut cache = lock(&roster.cache);
            cache.retain(|_, (at, _)| at.elapsed() < ROSTER_FRESH);
            cache.insert(room.id.clone(), (Instant::now(), entries.clone()));
            entries
        }
    };
    let speakers = room.speaker_ids();
    if speakers.is_empty() {
        return entries;
    }
    entries
        .iter()
        .map(|e| {
            let mut e = e.clone();
            let talking = e["id"].as_u64().is_some_and(|id| speakers.contains(&id));
            e["talking"] = talking.into();
            e
        })
        .collect()
}

async fn read(cluster: &Cluster, room: &Room) -> Result<Vec<serde_json::Value>, tutti_cluster::ClusterError> {
    let Some(span) = cluster.spans(std::slice::from_ref(&room.id)).await?.pop() else { return Ok(Vec::new()) };
    let members = members_of(cluster, &span);
    if members.is_empty() {
        return Ok(Vec::new());
    }
    let rosters = cluster.rosters(&room.id, &members, room.max_participants()).await?;
    crate::metrics::roster_refused(rosters.refused as u64);
    Ok(rosters
        .entries
        .into_iter()
        .map(|e| {
            let mut summary = e.summary;
            summary["node"] = e.node_id.into();
            summary
        })
        .collect())
}

/// This node's participants of `room`, each with this node's id when in
/// cluster mode, then the other nodes' ([`others`]).
pub(crate) async fn participants(dir: Option<&Cluster>, roster: &Roster, room: &Room) -> Vec<serde_json::Value> {
    let node = dir.map(|c| c.node_id().to_owned());
    let mut out: Vec<serde_json::Value> = room
        .member_list()
        .iter()
        .filter_map(|m| serde_json::to_value(m).ok())
        .map(|mut m| {
            if let Some(node) = &node {
                m["node"] = node.clone().into();
            }
            m
        })
        .collect();
    out.extend(others(dir, roster, room).await.iter().cloned());
    out
}

/// The other nodes' events of a spread room hosted here, until the room
/// closes or is handed over: relayed into the room's own batches
/// ([`Room::publish_relayed`]). Only from members of the room's span at
/// its epoch (read again, at most every [`SPAN_RECHECK`], when an unknown
/// node speaks), about participants of that node (their ids carry its
/// number).
pub(crate) fn relay_span_events(cluster: Cluster, room: &Arc<Room>, roster: Arc<Roster>, max_data_bytes: usize) {
    let room = Arc::clone(room);
    tokio::spawn(async move {
        let mut events = match cluster.watch(&room.id).await {
            Ok(rx) => rx,
            Err(e) => {
                tracing::warn!(room = %room.id, error = %e, "other nodes' events of a spread room not watched");
                return;
            }
        };
        let mut members: HashMap<String, u32> = HashMap::new();
        let mut checked: Option<Instant> = None;
        // Only to notice the room's end (its batches go to the sockets by themselves).
        let mut closes = room.subscribe();
        let mut every = tokio::time::interval(Duration::from_secs(1));
        // The seats asked of the rosters, and how often (see `seats_from_rosters`).
        let mut asked: HashMap<u64, u8> = HashMap::new();
        loop {
            let event = tokio::select! {
                e = events.recv() => e,
                b = closes.recv() => match b {
                    Err(RecvError::Closed) => break,
                    _ if room.is_closed() || room.is_handed_over() => break,
                    _ => continue,
                },
                _ = every.tick() => {
                    if room.is_closed() || room.is_handed_over() {
                        break;
                    }
                    seats_from_rosters(&cluster, &roster, &room, &mut asked).await;
                    continue;
                }
            };
            let event = match event {
                Ok(e) => e,
                Err(RecvError::Lagged(n)) => {
                    tracing::info!(room = %room.id, lagged = n, "other nodes' events fell behind");
                    continue;
                }
                Err(RecvError::Closed) => break,
            };
            if room.is_closed() || room.is_handed_over() {
                break;
            }
            if !members.contains_key(&event.origin) && checked.is_none_or(|at| at.elapsed() >= SPAN_RECHECK) {
                checked = Some(Instant::now());
                if let Ok(Some(span)) = cluster.spans(std::slice::from_ref(&room.id)).await.map(|mut s| s.pop()) {
                    members = members_of(&cluster, &span).into_iter().collect();
                }
            }
            let Some(&number) = members.get(&event.origin) else {
                crate::metrics::span_events(false, 1);
                continue;
            };
            let theirs = |id| tutti_cluster::node_number_of(id) == Some(number);
            if let Some(message) = crate::room::DataMessage::relayed(&event.event, theirs, max_data_bytes) {
                crate::metrics::data_messages("relayed", 1);
                room.send_data(message);
                continue;
            }
            let relayed = crate::room::relayed_events(&event.event, theirs);
            crate::metrics::span_events(true, relayed.len() as u64);
            if !relayed.is_empty() {
                // A spatial room seats their participants where their node does.
                room.note_remote_seats(&relayed);
                room.publish_relayed(relayed);
            }
        }
    });
}

/// Times a participant's seat is asked of the rosters before it is left
/// where this node's mixer puts it (its node gives it none).
const SEAT_ASKS: u8 = 5;

/// The seats of the other nodes' participants in `room`'s mixer that no
/// event told (they joined before this node hosted the room), read from
/// their rosters ([`others`]): at most one read per call (the relay's
/// second), and only while such a participant is unseated (each asked
/// [`SEAT_ASKS`] times at most; `asked` is bounded like the seats).
async fn seats_from_rosters(cluster: &Cluster, roster: &Roster, room: &Room, asked: &mut HashMap<u64, u8>) {
    let unseated: Vec<u64> =
        room.unseated_remotes().into_iter().filter(|id| asked.get(id).is_none_or(|n| *n < SEAT_ASKS)).collect();
    if unseated.is_empty() {
        return;
    }
    if asked.len() >= crate::room::MAX_REMOTE_SEATS {
        asked.clear();
    }
    for id in unseated {
        *asked.entry(id).or_default() += 1;
    }
    let entries = others(Some(cluster), roster, room).await;
    let read: Vec<(u64, i8)> = entries
        .iter()
        .filter_map(|e| {
            let seat = e["attributes"][crate::attributes::SEAT].as_str()?;
            let one = crate::attributes::Attributes::from([(crate::attributes::SEAT.to_owned(), seat.to_owned())]);
            Some((e["id"].as_u64()?, crate::attributes::seat_of(&one)?))
        })
        .collect();
    room.note_seats_read(&read);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_coalesced_per_room_and_bounded() {
        let roster = Roster::default();
        roster.touch("alone", [1]);
        assert!(roster.take().is_empty(), "a room no other node hosts is not written");
        roster.set_spread("r", true);
        roster.set_spread("s", true);
        assert!(roster.take()["r"].full, "a room that spreads is written whole");
        roster.touch("r", [1, 2]);
        roster.touch("r", [2, 3]);
        roster.touch("s", [9]);
        let mut taken = roster.take();
        assert_eq!(taken.len(), 2);
        let r = taken.remove("r").expect("r");
        assert!(!r.full);
        assert_eq!(r.ids, HashSet::from([1, 2, 3]), "each participant once");
        assert!(roster.take().is_empty(), "taken: nothing waits");
        // Past the bound: the room is written whole, its ids let go.
        roster.touch("r", 0..=ROSTER_DIRTY_IDS as u64);
        roster.touch("r", [7]);
        let r = roster.take().remove("r").expect("r");
        assert!(r.full && r.ids.is_empty());
        roster.touch("r", [1]);
        roster.rewrite("r");
        let r = roster.take().remove("r").expect("r");
        assert!(r.full && r.ids.is_empty());
    }
}
