//! Rooms across nodes: where a join goes by `room_spread`, this node's
//! membership of rooms' spans, the spans read with their members, the node
//! of a span by number, and the members' rosters.

use std::collections::HashMap;
use std::time::Duration;

use redis::Value;

use super::lease::parse_lease;
use super::route::node_number_of;
use super::values::{JoinPlacement, Owner, Placement, Span, SpanMember};
use super::{Cluster, lock};
use crate::config::RoomSpread;
use crate::error::ClusterError;
use crate::placement::{NodeInfo, choose_for_join};
use crate::roster::{RosterOf, RosterWrite, Rosters, parse_roster, read_script, script_reply};

impl Cluster {
    /// The epoch of `room` at this node: the lease's when it holds it, else
    /// the one it joined the room's span at (no I/O).
    pub fn room_epoch(&self, room: &str) -> Option<u64> {
        self.owned_epoch(room).or_else(|| lock(&self.inner.spanned).get(room).copied())
    }

    /// The live node of `room`'s span (at the lease's epoch) whose number
    /// is `number`, from signed records only; `None` when no such node
    /// hosts the room (the caller answers as if the id were unknown).
    pub async fn span_node(&self, room: &str, number: u32) -> Result<Option<Owner>, ClusterError> {
        let Some(span) = self.spans(&[room.to_owned()]).await?.pop() else { return Ok(None) };
        let epoch = span.lease.as_ref().map(|(_, e)| *e);
        Ok(span.members.into_iter().find(|m| m.number == Some(number) && epoch.is_none_or(|e| e == m.epoch)).map(|m| {
            Owner {
                node_id: m.node_id,
                epoch: m.epoch,
                api_url: m.api_url,
                media_addr: String::new(),
                sip_addr: String::new(),
            }
        }))
    }

    /// Where a join of `room` goes, by `room_spread` (see [`RoomSpread`]).
    /// `off`: as [`place`](Self::place) (or [`claim`](Self::claim) when
    /// `ticketed`). Otherwise a join that was redirected here (`ticketed`)
    /// stays: this node claims the room if nobody holds it, else joins its
    /// span (never fencing the owner). A fresh join of a room nobody holds
    /// is placed as a new room; of a held room, it goes to the owner while
    /// the owner has room (`when_full`), else to the least-loaded eligible
    /// node of the span, else of the cluster (`always`: of the cluster
    /// straight away); a tie stays here. The chosen node's pending joins go
    /// up (until its next heartbeat) so that joins in a burst spread.
    pub async fn place_join(&self, room: &str, ticketed: bool) -> Result<JoinPlacement, ClusterError> {
        self.place_join_from(room, ticketed, false).await
    }

    /// [`place_join`](Self::place_join) from a node that is full (at its
    /// own participant limit, whatever its last heartbeat said): a fresh
    /// join of a held room goes to another eligible node (of the span
    /// first, with `when_full`); `Here` only when no other node may take
    /// it, or when the join was redirected here (`ticketed`: a client never
    /// bounces), or for a room nobody holds (placed as a new room, by the
    /// nodes' records).
    pub async fn place_join_when_full(&self, room: &str, ticketed: bool) -> Result<JoinPlacement, ClusterError> {
        self.place_join_from(room, ticketed, true).await
    }

    async fn place_join_from(
        &self,
        room: &str,
        ticketed: bool,
        full_here: bool,
    ) -> Result<JoinPlacement, ClusterError> {
        let spread = self.inner.cfg.room_spread;
        let me = self.inner.node_id.clone();
        let here = |p: Placement| match p {
            Placement::Local { epoch, .. } => JoinPlacement::Here { epoch, owner: true },
            Placement::Remote(o) => JoinPlacement::Elsewhere(o),
        };
        if spread == RoomSpread::Off {
            return Ok(here(if ticketed { self.claim(room, None).await? } else { self.place(room, None).await? }));
        }
        if ticketed {
            return match self.claim(room, None).await? {
                Placement::Local { epoch, .. } => Ok(JoinPlacement::Here { epoch, owner: true }),
                Placement::Remote(owner) => {
                    self.join_spans(&[(room.to_owned(), owner.epoch)]).await?;
                    Ok(JoinPlacement::Here { epoch: owner.epoch, owner: false })
                }
            };
        }
        let Some(owner) = self.locate(room).await? else {
            return Ok(here(self.place(room, None).await?));
        };
        let nodes = self.nodes().await?;
        let budget = Duration::from_secs_f64(self.inner.cfg.tick_budget_seconds);
        // A full node takes no join, whatever its record says.
        let may_take = |n: &NodeInfo| !(full_here && n.id == me);
        let owner_has_room = nodes.iter().any(|n| n.id == owner.node_id && n.eligible(budget) && may_take(n));
        let target = match spread {
            RoomSpread::WhenFull if owner_has_room => None,
            RoomSpread::WhenFull => {
                let span = self.spans(&[room.to_owned()]).await?.pop().unwrap_or_default();
                let member = |n: &NodeInfo| span.members.iter().any(|m| m.node_id == n.id && m.epoch == owner.epoch);
                choose_for_join(&nodes, budget, &me, |n| member(n) && may_take(n))
                    .or_else(|| choose_for_join(&nodes, budget, &me, may_take))
            }
            _ => choose_for_join(&nodes, budget, &me, may_take),
        };
        let Some(target) = target.map(|i| &nodes[i]) else {
            return Ok(if owner.node_id == me {
                JoinPlacement::Here { epoch: owner.epoch, owner: true }
            } else {
                JoinPlacement::Elsewhere(owner)
            });
        };
        self.count_join(&target.id).await;
        if target.id == me {
            if owner.node_id == me {
                return Ok(JoinPlacement::Here { epoch: owner.epoch, owner: true });
            }
            self.join_spans(&[(room.to_owned(), owner.epoch)]).await?;
            return Ok(JoinPlacement::Here { epoch: owner.epoch, owner: false });
        }
        Ok(JoinPlacement::Elsewhere(Owner {
            node_id: target.id.clone(),
            epoch: owner.epoch,
            api_url: target.api_url.clone(),
            media_addr: target.media_addr.clone(),
            sip_addr: target.sip_addr.clone(),
        }))
    }

    /// Counts a join sent to `node` in its record until its next heartbeat
    /// (best effort; only while its record exists, so that a dead node's
    /// record is never brought back without its TTL).
    async fn count_join(&self, node: &str) {
        const BUMP: &str = "if redis.call('EXISTS', KEYS[1]) == 1 then \
            return redis.call('HINCRBY', KEYS[1], 'joins', 1) end return 0";
        let mut con = self.inner.con.clone();
        let key = self.inner.keys.node(node);
        let _: Result<i64, _> =
            self.run(async move { redis::Script::new(BUMP).key(key).invoke_async(&mut con).await }).await;
    }

    /// Records this node as a member of each room's span at the given
    /// epoch (again: members rewrite it every few seconds, and the span key
    /// lives three lease TTLs past its last rewrite).
    pub async fn join_spans(&self, rooms: &[(String, u64)]) -> Result<(), ClusterError> {
        if rooms.is_empty() {
            return Ok(());
        }
        let keep = self.inner.cfg.lease_ttl_ms() * 3;
        lock(&self.inner.spanned).extend(rooms.iter().cloned());
        let mut pipe = redis::pipe();
        for (room, epoch) in rooms {
            let key = self.inner.keys.span(room);
            pipe.cmd("HSET").arg(&key).arg(&self.inner.node_id).arg(*epoch).ignore();
            pipe.cmd("PEXPIRE").arg(&key).arg(keep).ignore();
            // This node's roster of the room lives as long as its membership.
            pipe.cmd("PEXPIRE").arg(self.inner.keys.roster(room, &self.inner.node_id)).arg(keep).ignore();
        }
        let mut con = self.inner.con.clone();
        self.run(async move { pipe.exec_async(&mut con).await }).await
    }

    /// Takes this node out of `room`'s span (its last participant there left).
    pub async fn leave_span(&self, room: &str) -> Result<(), ClusterError> {
        lock(&self.inner.spanned).remove(room);
        let mut con = self.inner.con.clone();
        let key = self.inner.keys.span(room);
        let node = self.inner.node_id.clone();
        let roster = self.inner.keys.roster(room, &node);
        let mut pipe = redis::pipe();
        pipe.cmd("HDEL").arg(key).arg(node).ignore();
        pipe.cmd("DEL").arg(roster).ignore();
        self.run(async move { pipe.exec_async(&mut con).await }).await
    }

    /// Writes changes to this node's rosters of spread rooms (see the
    /// `roster` module), each room's atomically, all in one round trip.
    /// The caller bounds them (a room's `max_participants` entries).
    pub async fn write_rosters(&self, writes: &[RosterWrite]) -> Result<(), ClusterError> {
        if writes.is_empty() {
            return Ok(());
        }
        let keep = self.inner.cfg.lease_ttl_ms() * 3;
        let mut pipe = redis::pipe();
        pipe.atomic();
        for w in writes {
            let key = self.inner.keys.roster(&w.room, &self.inner.node_id);
            if w.full {
                pipe.cmd("DEL").arg(&key).ignore();
            }
            if !w.upserts.is_empty() {
                let mut hset = redis::cmd("HSET");
                hset.arg(&key);
                let of = RosterOf { key: &self.inner.roster_key, room: &w.room, node_id: &self.inner.node_id };
                for (id, summary) in &w.upserts {
                    hset.arg(*id).arg(of.seal_summary(*id, summary));
                }
                pipe.add_command(hset).ignore();
            }
            if !w.removals.is_empty() {
                pipe.cmd("HDEL").arg(&key).arg(&w.removals).ignore();
            }
            pipe.cmd("PEXPIRE").arg(&key).arg(keep).ignore();
        }
        let mut con = self.inner.con.clone();
        self.run(async move { pipe.exec_async(&mut con).await }).await
    }

    /// The rosters of `room` kept by `members` (node id and number: the
    /// span's members at the room's epoch, from their signed records; this
    /// node's own is never read), each read only if it holds at most `cap`
    /// entries, and only the entries that name participants of that node
    /// (see the `roster` module). One round trip.
    pub async fn rosters(&self, room: &str, members: &[(String, u32)], cap: usize) -> Result<Rosters, ClusterError> {
        let members: Vec<&(String, u32)> = members.iter().filter(|(n, _)| *n != self.inner.node_id).collect();
        if members.is_empty() {
            return Ok(Rosters::default());
        }
        let script = read_script();
        let mut invocation = script.prepare_invoke();
        invocation.arg(cap);
        for (node, _) in &members {
            invocation.key(self.inner.keys.roster(room, node));
        }
        let mut con = self.inner.con.clone();
        let reply: Value = self.run(async move { invocation.invoke_async(&mut con).await }).await?;
        let reply = script_reply(reply, members.len()).ok_or_else(|| ClusterError::Corrupt("roster read".into()))?;
        let mut out = Rosters::default();
        for ((node, number), fields) in members.into_iter().zip(reply) {
            match fields {
                Some(fields) => {
                    let of = RosterOf { key: &self.inner.roster_key, room, node_id: node };
                    let (entries, refused) = parse_roster(&of, |id| node_number_of(id) == Some(*number), fields);
                    out.entries.extend(entries);
                    out.refused += refused;
                }
                None => out.refused += 1,
            }
        }
        Ok(out)
    }

    /// The spans of `rooms`: each room's lease and its live members with
    /// their mesh addresses, from signed records only (an address Redis
    /// holds without a valid signature is never used). Two round trips
    /// whatever the number of rooms, plus the registry read.
    pub async fn spans(&self, rooms: &[String]) -> Result<Vec<Span>, ClusterError> {
        if rooms.is_empty() {
            return Ok(Vec::new());
        }
        let keys = &self.inner.keys;
        let mut pipe = redis::pipe();
        for room in rooms {
            pipe.cmd("GET").arg(keys.lease(room));
            pipe.cmd("HGETALL").arg(keys.span(room));
        }
        let mut con = self.inner.con.clone();
        let replies: Vec<Value> = self.run(async move { pipe.query_async(&mut con).await }).await?;
        let nodes: HashMap<String, NodeInfo> = self.nodes().await?.into_iter().map(|n| (n.id.clone(), n)).collect();
        let mut out = Vec::with_capacity(rooms.len());
        for (room, pair) in rooms.iter().zip(replies.chunks(2)) {
            let [lease, span] = pair else {
                return Err(ClusterError::Corrupt("short pipeline reply".into()));
            };
            let lease: Option<String> =
                redis::from_redis_value(lease.clone()).map_err(|e| ClusterError::Corrupt(e.to_string()))?;
            let span: HashMap<String, String> =
                redis::from_redis_value(span.clone()).map_err(|e| ClusterError::Corrupt(e.to_string()))?;
            let mut members: Vec<SpanMember> = span
                .into_iter()
                .filter_map(|(node, epoch)| {
                    let n = nodes.get(&node)?;
                    Some(SpanMember {
                        node_id: node,
                        epoch: epoch.parse().ok()?,
                        mesh_addr: n.mesh_addr,
                        number: n.number,
                        api_url: n.api_url.clone(),
                    })
                })
                .collect();
            members.sort_by(|a, b| a.node_id.cmp(&b.node_id));
            let lease = lease.as_deref().and_then(parse_lease).map(|(n, e)| (n.to_owned(), e));
            out.push(Span { room: room.clone(), lease, members });
        }
        Ok(out)
    }
}
