//! A client's moves between nodes: a drain's `moved` or a call its node
//! closed asks the rejoin threads for a new call, a failed try is retried
//! after a backoff until the call counts as lost, and a new call takes the
//! old one's place.

use std::cmp::Reverse;
use std::time::{Duration, Instant};

use mio::Token;

use super::client::{Link, send_all};
use super::join::JoinedPeer;
use super::worker::{WS_TOKEN, Worker, lock};
use crate::events::Moved;
use crate::handover;
use crate::model::ClientState;

/// How long an old WebSocket, closed after its client moved, may take to
/// finish the close handshake before it is dropped anyway.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

impl Worker {
    /// Client `i`'s call moves: `moved` names where its room went (its
    /// old call goes on until the new one is joined); `None`: the node
    /// closed the call. Asks for a rejoin unless one is under way, the
    /// call is already lost, or rejoins are off.
    pub(super) fn begin_move(&mut self, i: usize, moved: Option<Moved>, now: Instant) {
        let c = &mut self.clients[i];
        if self.rejoin.is_none() || self.cfg.rejoin_attempts == 0 || c.hand.lost.is_some() {
            return;
        }
        if c.hand.moving {
            // Under way: a later `moved` says better where to go.
            if moved.is_some() {
                c.hand.moved = moved;
            }
            return;
        }
        c.hand.moving = true;
        c.hand.failed = 0;
        c.hand.moves += 1;
        c.hand.began = Some(now);
        c.hand.moved = moved;
        self.ask_rejoin(i);
    }

    /// Sends client `i`'s next rejoin try to the rejoin threads.
    pub(super) fn ask_rejoin(&mut self, i: usize) {
        let c = &mut self.clients[i];
        let req = handover::Request {
            thread: self.id,
            slot: i,
            index: c.index,
            room: self.room_names.get(c.room).cloned().unwrap_or_default(),
            attempt: c.hand.failed,
            // The ticket is single-use: the first try takes it.
            moved: c.hand.moved.take(),
            current: c.hand.node,
        };
        let sent = self.rejoin.as_ref().is_some_and(|tx| tx.send(req).is_ok());
        if !sent {
            self.rejoin_failed(i, "the rejoin threads ended".into(), Instant::now());
        }
    }

    /// A rejoin try failed: another after a backoff, or the call is lost.
    pub(super) fn rejoin_failed(&mut self, i: usize, why: String, now: Instant) {
        let attempts = self.cfg.rejoin_attempts;
        let c = &mut self.clients[i];
        c.hand.failed += 1;
        if c.hand.failed >= attempts {
            c.hand.moving = false;
            c.hand.lost = Some(format!("lost its call: {} rejoin tries failed, the last: {why}", c.hand.failed));
            c.state = ClientState::Closed;
        } else {
            self.retries.push(Reverse((now + handover::backoff(c.hand.failed), i)));
        }
    }

    /// Client `i` rejoined: the new call takes the old one's place (the old
    /// WebSocket is closed only now, so the participant it held there leaves
    /// once the new one is in), and the stream's baselines start again.
    pub(super) fn swap(&mut self, i: usize, j: JoinedPeer, now: Instant) {
        let link = match self.register(j.link, i) {
            Ok(l) => l,
            Err(e) => return self.rejoin_failed(i, format!("registering a socket: {e}"), now),
        };
        let registry = self.poll.registry();
        let c = &mut self.clients[i];
        match &mut c.link {
            Link::Udp(socket) if c.polled => {
                let _ = registry.deregister(socket);
            }
            Link::Udp(_) => {}
            Link::Tcp(side) => {
                let _ = registry.deregister(&mut side.stream);
            }
        }
        c.peer.close();
        send_all(&mut c.peer, &mut c.link);
        if let Some(mut old) = c.ws.take() {
            old.deregister(registry);
            old.close();
            // Kept until the server answers the close: dropped now, with
            // unread events in its buffer, the connection would be reset,
            // and the server would keep the old participant for a resume.
            self.closing.push((old, now + CLOSE_WAIT));
        }
        if let Some(ws) = &j.ws
            && let Err(e) = ws.register(registry, Token(WS_TOKEN + i))
        {
            eprintln!("load-{}: registering a WebSocket: {e}", self.id);
        }
        let mut peer = j.peer;
        peer.set_lean_receive(self.cfg.lean_receive);
        c.peer = peer;
        c.link = link;
        c.ws = j.ws;
        c.polled = true;
        c.state = ClientState::Connecting;
        c.timer = None;
        // A move begun before the last one's new call delivered audio: one
        // gap, from the last audio heard before both.
        c.gap_from = c.gap_from.or(c.quality.last_arrival).or(c.hand.began);
        c.quality.rebase();
        c.hand.moving = false;
        c.hand.failed = 0;
        c.hand.moved = None;
        c.hand.rejoins += 1;
        c.hand.node = Some(j.node);
        let index = c.index;
        c.peer.handle_timeout(now);
        send_all(&mut c.peer, &mut c.link);
        lock(&self.shared.locations).insert(index, (j.node, j.location));
        self.reschedule(i);
        self.ws_pending.push(i);
    }
}
