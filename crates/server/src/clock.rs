//! The `mix-clock` thread: every 20 ms, on an absolute schedule, it ticks
//! every room on the `mix-N` pool (rooms in parallel, a big room's shards in
//! parallel within it) and hands the I/O threads one O(K) result per room.
//! A tick that starts more than one period late is counted as an overrun
//! and the schedule skips to the present; none is dropped silently.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rayon::prelude::*;
use tutti_mix::{ParticipantId, TalkEvent, TickReport};
use tutti_rtc::Contributor;

use crate::io::IoCommand;
use crate::metrics;
use crate::state::{MixOut, RoomEvent, RoomState, Shared, Stream, lock};

/// One 20 ms tick.
pub(crate) const TICK: Duration = Duration::from_millis(20);

/// Pending peers are checked for expiry, and refilled join-rate buckets
/// forgotten, every this many ticks (1 s).
const HOUSEKEEPING_TICKS: u64 = 50;

pub(crate) fn spawn(shared: Arc<Shared>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name("mix-clock".into()).spawn(move || run(&shared))
}

fn run(shared: &Shared) {
    let start = Instant::now();
    let mut tick = 0u64;
    while !shared.stopping.load(Ordering::Relaxed) {
        let due = start + TICK * u32::try_from(tick).unwrap_or(u32::MAX);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        } else if now - due > TICK {
            // Behind by more than a tick: count it and skip to the present.
            let behind = ((now - due).as_millis() / TICK.as_millis()) as u64;
            shared.overruns.fetch_add(behind, Ordering::Relaxed);
            metrics::tick_overruns(behind);
            tracing::warn!(ticks = behind, "mixer fell behind; ticks skipped");
            tick += behind;
        }
        let started = Instant::now();
        let rooms = shared.all_rooms();
        let ticked: Vec<(MixOut, TickReport)> =
            shared.pool.install(|| rooms.par_iter().filter_map(|room| tick_room(shared, room, tick)).collect());
        let mut totals = metrics::TickTotals::default();
        let outs: Vec<MixOut> = ticked
            .into_iter()
            .map(|(out, report)| {
                totals.add(&report);
                out
            })
            .collect();
        // Every room counts, including empty ones that had nothing to tick.
        totals.rooms = rooms.len();
        if !outs.is_empty() {
            let outs = Arc::new(outs);
            for io in shared.io() {
                io.send(IoCommand::Deliver(outs.clone()));
            }
        }
        metrics::tick(started.elapsed(), &totals);
        if tick.is_multiple_of(HOUSEKEEPING_TICKS) {
            let now = Instant::now();
            shared.expire_pending(now);
            shared.joins.prune(now);
        }
        tick += 1;
    }
}

/// Ticks one room: its inbox into the jitter buffers, the mix, then what
/// each participant is sent. `None` for a room with nobody in it.
fn tick_room(shared: &Shared, room: &Arc<RoomState>, tick: u64) -> Option<(MixOut, TickReport)> {
    let packets = std::mem::take(&mut *lock(&room.inbox));
    let mut core = lock(&room.core);
    if core.room.is_empty() {
        return None;
    }
    for (id, ssrc, packet) in packets {
        if core.ssrcs.get(&id) != Some(&ssrc) {
            core.ssrcs.insert(id, ssrc);
        }
        // Packets of a participant removed since they arrived are dropped here.
        let _ = core.room.push_packet(id, packet);
    }
    let report = core.room.tick(&shared.pool, tick);
    let contributor =
        |id: ParticipantId, level: u8| Contributor { ssrc: core.ssrcs.get(&id).copied().unwrap_or(0), level };
    let all: Vec<(ParticipantId, Contributor)> =
        report.speakers.iter().map(|s| (s.id, contributor(s.id, s.level))).collect();
    // The level of a mix is its loudest source's (RFC 6464: lower is louder).
    let stream = |payload: &bytes::Bytes, except: Option<ParticipantId>| {
        let contributors: Vec<Contributor> =
            all.iter().filter(|(id, _)| Some(*id) != except).map(|(_, c)| *c).collect();
        let level = contributors.iter().map(|c| c.level).min().unwrap_or(127);
        Stream { payload: payload.clone(), level: Some(level), contributors }
    };
    let out = MixOut {
        room: room.clone(),
        listener: stream(core.room.listener_payload(), None),
        speakers: core.room.speaker_payloads().map(|(id, p)| (id, stream(p, Some(id)))).collect(),
    };
    drop(core);
    if !report.events.is_empty() {
        let mut members = lock(&room.members);
        for event in &report.events {
            let (id, talking) = match *event {
                TalkEvent::Started(id) => (id, true),
                TalkEvent::Stopped(id) => (id, false),
            };
            if let Some(m) = members.get_mut(&id.0) {
                m.talking = talking;
            }
            room.publish(RoomEvent::Talking { id: id.0, talking });
        }
    }
    *lock(&room.speakers) = report.speakers.clone();
    Some((out, report))
}
