//! What a client receives: its UDP datagrams (with the kernel's arrival
//! stamps) or ICE-TCP frames, handed to its peer; the peer's events
//! (connected, closed, audio scored and searched for markers); and its room
//! WebSocket, whose `moved` or close starts a move.

use std::io::Read;
use std::time::{Duration, Instant};

use tutti_rtc::ClientEvent;

use super::client::{Link, send_all};
use super::worker::{Worker, lock};
use crate::model::{ClientState, Detection};

/// Reads of one WebSocket per readiness event before the thread looks at its
/// send schedule (the rest is read on the next round).
const WS_PUMPS_PER_EVENT: usize = 4;

impl Worker {
    /// Reads client `i`'s WebSocket; remembers it when more may be waiting.
    /// A `moved` (the room handed over) or a socket closed by the server
    /// starts the client's move.
    pub(super) fn read_ws(&mut self, i: usize, now: Instant) {
        let Some(ws) = self.clients[i].ws.as_mut() else { return };
        let mut more = true;
        for _ in 0..WS_PUMPS_PER_EVENT {
            more = ws.pump();
            if !more {
                break;
            }
        }
        let (moved, open) = (ws.moved.take(), ws.open);
        if more && open {
            self.ws_pending.push(i);
        }
        if let Some(m) = moved {
            self.begin_move(i, Some(m), now);
        } else if !open {
            self.begin_move(i, None, now);
        }
    }

    /// Takes every datagram waiting on client `i`'s socket.
    pub(super) fn receive(&mut self, i: usize) {
        // An RTP packet moves no timer: the deadline is asked for again only
        // after anything else (STUN, DTLS, RTCP) arrived.
        let mut timers_moved = false;
        if matches!(self.clients[i].link, Link::Tcp(_)) {
            self.receive_tcp(i);
            return;
        }
        loop {
            let c = &mut self.clients[i];
            let Link::Udp(socket) = &c.link else { break };
            let (n, from, arrived) = match self.stamps.recv(socket, &mut self.buf) {
                Ok(r) => r,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // ICMP errors (e.g. the server went away) end nothing here.
                Err(_) => break,
            };
            timers_moved |= !tutti_rtc::is_rtp(&self.buf[..n]);
            // The peer's clock only moves forward; the figures take the arrival.
            c.peer.handle_datagram(from, &self.buf[..n], Instant::now());
            self.events(i, arrived);
        }
        let c = &mut self.clients[i];
        send_all(&mut c.peer, &mut c.link);
        if timers_moved || c.timer.is_none() {
            self.reschedule(i);
        }
    }

    /// Takes every frame waiting on client `i`'s TCP connection (edge-triggered:
    /// read until it would block), and writes what waits.
    fn receive_tcp(&mut self, i: usize) {
        let mut frames: Vec<Vec<u8>> = Vec::new();
        {
            let c = &mut self.clients[i];
            let Link::Tcp(side) = &mut c.link else { return };
            side.flush();
            loop {
                match side.stream.read(&mut self.buf) {
                    Ok(0) => {
                        side.broken = true;
                        break;
                    }
                    Ok(n) => {
                        if side.reader.read(&self.buf[..n], |f| frames.push(f.to_vec())).is_err() {
                            side.broken = true;
                            break;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        side.broken = true;
                        break;
                    }
                }
            }
        }
        let mut timers_moved = false;
        for f in frames {
            let now = Instant::now();
            timers_moved |= !tutti_rtc::is_rtp(&f);
            let c = &mut self.clients[i];
            let Link::Tcp(side) = &c.link else { return };
            let server = side.server;
            c.peer.handle_datagram(server, &f, now);
            self.events(i, now);
        }
        let c = &mut self.clients[i];
        if let Link::Tcp(side) = &c.link
            && side.broken
            && c.state != ClientState::Closed
        {
            // The server closed the connection: the call is over (it moves, if it can).
            c.state = ClientState::Closed;
            send_all(&mut c.peer, &mut c.link);
            self.begin_move(i, None, Instant::now());
            return;
        }
        send_all(&mut c.peer, &mut c.link);
        if timers_moved || c.timer.is_none() {
            self.reschedule(i);
        }
    }

    pub(super) fn events(&mut self, i: usize, now: Instant) {
        let marker_period = self.cfg.marker_period;
        let probes = self.cfg.probes.max(1);
        let c = &mut self.clients[i];
        let mut closed = false;
        while let Some(event) = c.peer.poll_event() {
            match event {
                ClientEvent::Connected => {
                    c.state = ClientState::Connected;
                    if let Link::Udp(socket) = &mut c.link
                        && c.polled
                    {
                        // Off the epoll: on loopback the server's `sendmmsg`
                        // ran its callback for every datagram delivered.
                        c.polled = self.poll.registry().deregister(socket).is_err();
                    }
                    if c.connected_at.is_some() {
                        continue; // a rejoin: the first connect and the marker schedule stand
                    }
                    c.connected_at = Some(now);
                    if let Some(p) = c.probe {
                        // Probes take turns: probe p fires p/P of a period after the others.
                        let offset = marker_period.mul_f64(p as f64 / probes as f64);
                        c.next_marker = Some(now + Duration::from_secs(1) + offset);
                    }
                }
                ClientEvent::Closed => {
                    c.state = ClientState::Closed;
                    closed = true;
                }
                ClientEvent::Audio(p) => {
                    c.quality.on_packet(now, p.seq, p.timestamp);
                    if let Some(from) = c.gap_from {
                        // The first packet after a move.
                        c.gap_from = None;
                        c.hand.gaps_ms.push(now.saturating_duration_since(from).as_secs_f64() * 1000.0);
                    }
                    let Some(l) = &mut c.listen else { continue };
                    let Ok(n) = l.decoder.decode_float(&p.payload, &mut l.pcm, false) else { continue };
                    for onset in l.detector.push(&l.pcm[..n]) {
                        if Some(onset.probe) == c.probe {
                            continue; // self-echo is judged by the peak
                        }
                        l.heard += 1;
                        let shift = Duration::from_secs_f64(onset.offset_samples.unsigned_abs() as f64 / 48_000.0);
                        let at = if onset.offset_samples >= 0 { now + shift } else { now - shift };
                        lock(&self.shared.detections).push(Detection { listener: c.index, probe: onset.probe, at });
                    }
                }
            }
        }
        if closed {
            // Its node closed the call (DTLS close_notify): it moves, if it can.
            self.begin_move(i, None, now);
        }
    }
}
