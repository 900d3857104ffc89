//! The `rtp-in` thread: plain RTP/AVP participants (SIP gateways, ffmpeg),
//! no ICE, no DTLS, on a UDP socket of their own; SRTP when their offer
//! carried SDES keys (a SIP call's `a=crypto`: [`super::plain_srtp`]).
//!
//! ```text
//! API join (RTP/AVP offer, trusted) ─► Rooms::join_plain ─► PlainHandle::add ─► this thread
//! socket ─► RTP (source address checked) ─► the room's inbox, as any participant's packets
//! mix-clock ─► IoCommand::Deliver ─► each participant's N-minus-self feed as plain RTP to its offered address
//! API move ─► Rooms::move_member ─► IoCommand::Rehome ─► the same participant fed by, and feeding, another room
//! ```
//!
//! The thread sits in the media plane's list of I/O threads, so the clock's
//! mixes, room effects (`ClosePeer`) and shutdown reach it as they reach
//! the others; the WebRTC I/O threads never see its socket.
//!
//! Which packets count as a participant's (see [`Sources`], and
//! docs/features/rtp-in.md): by default only
//! those from the exact `c=`/`m=` address of its offer, where its mix goes
//! too (symmetric RTP, as FreeSWITCH and Asterisk send). An offer with
//! `a=direction:active` (comedia: a gateway behind NAT, or ffmpeg, sending
//! from another port) may also be latched: the first packet from another
//! port of the offer's IP, while that participant is the only comedia one
//! of that IP not heard yet, ties that address to it, and its mix goes
//! there; when the offer announces its SSRC (`a=ssrc:`), only a packet of
//! that SSRC latches, so another process on the gateway's address cannot
//! take the participant over. An SRTP leg's packet must authenticate
//! before it counts as heard or latches. The offered address always wins: a packet from it undoes a latch
//! for good. Packets from any other address, RTCP, other payload types
//! (comfort noise) and malformed packets are dropped and counted.
//!
//! Keypad events (RFC 4733, the telephone-event payload type its offer
//! names) become [`Keypress`]es on a bounded channel (never waited on: a
//! full one drops the key); keys the API sends a leg go out beside its mix
//! ([`super::keys`]).

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::IpAddr;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use nix::poll::{PollFd, PollFlags, ppoll};
use nix::sys::eventfd::{EfdFlags, EventFd};
use tutti_mix::phone::NARROW_FRAME;
use tutti_mix::{Packet, ParticipantId};
use tutti_rtc::plain::{
    Codec, KeyEvent, RTP_HEADER_BYTES, RtcpPort, RtpParseError, TelephoneEvents, parse_rtp, write_rtp,
};
use tutti_rtc::plain_rtcp::PlainReports;
use tutti_rtc::{MuxStats, PeerId};

use super::command::{IoCommand, IoCounters, IoHandle};
use super::g711::{RoomFrame, SharedNarrow, Transcoder, input_codec};
use super::keys::{KEY_PERIOD, KeyPacket, Keypress, KeysIn, KeysOut, MAX_KEYS};
use super::lobby::{Change, Lobby, LobbyCommand, random_u32s};
use super::plain_srtp::{Srtp, outgoing};
use crate::metrics;
use crate::room::{Inboxes, LeaveReason, Room, RoomKey, RoomMix, Rooms};
use crate::sync::lock;

/// Datagrams read per loop turn at most (commands and timers are never starved).
const RECV_PER_TURN: usize = 256;
/// Longest wait for work.
const IDLE_WAIT: Duration = Duration::from_millis(100);
/// How often silent participants are looked for.
const TIMEOUT_CHECK: Duration = Duration::from_millis(500);

/// A plain RTP participant to serve.
pub(crate) struct NewPlain {
    pub(crate) id: PeerId,
    pub(crate) room: Arc<Room>,
    /// Its offer's `c=`/`m=` address (where its mix goes, unless latched).
    pub(crate) remote: SocketAddr,
    /// Its offer said `a=direction:active`: it may be latched (see [`Sources`]).
    pub(crate) comedia: bool,
    /// The SSRC its offer announced (`a=ssrc:`): a latch takes only that one.
    pub(crate) ssrc: Option<u32>,
    /// Its codec (G.711 is transcoded here) and payload type.
    pub(crate) codec: Codec,
    pub(crate) payload_type: u8,
    /// The telephone-event payload type its offer named, if any.
    pub(crate) events: Option<TelephoneEvents>,
    /// The comfort noise (RFC 3389) payload type its offer named, if any.
    pub(crate) comfort_noise: Option<u8>,
    /// Its SRTP (SDES keys), if its offer had them.
    pub(crate) srtp: Option<Box<Srtp>>,
    /// Its speak right, as the room sets it (an admin may grant or revoke it).
    pub(crate) listen_only: crate::room::ListenOnly,
    /// Where its RTCP goes, beside where its RTP goes.
    pub(crate) rtcp: RtcpPort,
}

/// A change to a running leg, from its call's signalling (a re-INVITE or UPDATE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Steer {
    /// Its media moved (a new `c=`/`m=` address): its mix goes there, and
    /// packets from there are its own (latching starts over).
    Remote(SocketAddr),
    /// Held (`Some(bound)`: it sends nothing; removed only when silent
    /// this long) or resumed (`None`: the peer timeout again, counted from now).
    Hold(Option<Duration>),
}

/// Steering commands queued for the thread at most (one per re-offer).
const STEERS: usize = 1024;

/// Why keys were not sent to a leg.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum KeysRefused {
    /// The participant is not a plain RTP leg of this node.
    #[error("participant {0} is not a phone or plain RTP leg")]
    NotALeg(u64),
    /// Its offer named no telephone-event payload type.
    #[error("participant {0}'s call did not offer RFC 4733 telephone-event: keys cannot be sent to it")]
    NoEvents(u64),
    /// Keys of an earlier request are still being sent.
    #[error("keys are still being sent to participant {0}: send more after them")]
    Busy(u64),
    /// No key, or more than [`MAX_KEYS`].
    #[error("send 1 to {MAX_KEYS} keys at a time, got {0}")]
    Count(usize),
    /// A character that is not a key.
    #[error("'{0}' is not a key: keys are 0-9, *, #, A-D")]
    BadKey(char),
}

/// A leg as the API sees it: whether keys may be sent, and until when the
/// last ones are being sent.
struct Leg {
    events: bool,
    busy_until: Instant,
}

/// The legs of the thread, shared with the API (held for a lookup only).
type Legs = Arc<std::sync::Mutex<HashMap<PeerId, Leg>>>;

/// How the API reaches the `rtp-in` thread.
pub(crate) struct PlainHandle {
    add: Sender<NewPlain>,
    lobby: Sender<LobbyCommand>,
    /// Keys to send, by leg (bounded by `legs`: one request per leg at a time).
    keys: Sender<(PeerId, Vec<u8>)>,
    steer: std::sync::mpsc::SyncSender<(PeerId, Steer)>,
    legs: Legs,
    wake: Arc<EventFd>,
    /// The bound socket's address.
    pub(crate) bound: SocketAddr,
    /// Its index in the media plane's list of I/O threads (the `io` of its `ClosePeer` effects).
    pub(crate) io: usize,
}

impl PlainHandle {
    /// Hands a joined participant to the thread. False when the thread is gone.
    pub(crate) fn add(&self, peer: NewPlain) -> bool {
        let leg = Leg { events: peer.events.is_some(), busy_until: Instant::now() };
        lock(&self.legs).insert(peer.id, leg);
        let id = peer.id;
        let ok = self.add.send(peer).is_ok();
        if ok {
            let _ = self.wake.write(1);
        } else {
            lock(&self.legs).remove(&id);
        }
        ok
    }

    /// Tells the lobby (see [`super::lobby`]). False when the thread is gone.
    pub(crate) fn lobby(&self, cmd: LobbyCommand) -> bool {
        let ok = self.lobby.send(cmd).is_ok();
        let _ = self.wake.write(1);
        ok
    }

    /// Steers leg `id` (see [`Steer`]). False when the queue is full or the thread is gone.
    pub(crate) fn steer(&self, id: PeerId, steer: Steer) -> bool {
        let ok = self.steer.try_send((id, steer)).is_ok();
        let _ = self.wake.write(1);
        ok
    }

    /// Sends `keys` (`0`-`9`, `*`, `#`, `A`-`D`) to leg `id` as RFC 4733
    /// events; returns how long sending them takes.
    pub(crate) fn send_keys(&self, id: PeerId, keys: &str) -> Result<Duration, KeysRefused> {
        let count = keys.chars().count();
        if count == 0 || count > MAX_KEYS {
            return Err(KeysRefused::Count(count));
        }
        let events =
            keys.chars().map(|k| KeyEvent::of_key(k).ok_or(KeysRefused::BadKey(k))).collect::<Result<Vec<u8>, _>>()?;
        let now = Instant::now();
        let takes = KEY_PERIOD * count as u32;
        {
            let mut legs = lock(&self.legs);
            let leg = legs.get_mut(&id).ok_or(KeysRefused::NotALeg(id.0))?;
            if !leg.events {
                return Err(KeysRefused::NoEvents(id.0));
            }
            if leg.busy_until > now {
                return Err(KeysRefused::Busy(id.0));
            }
            leg.busy_until = now + takes;
        }
        if self.keys.send((id, events)).is_err() {
            return Err(KeysRefused::NotALeg(id.0));
        }
        let _ = self.wake.write(1);
        Ok(takes)
    }
}

struct Peer {
    room: Arc<Room>,
    payload_type: u8,
    /// The RTP clock's advance per 20 ms tick (960 for Opus, 160 for G.711).
    tick_samples: u32,
    /// A G.711 or G.722 leg's transcoding (`None`: Opus, carried as is).
    g711: Option<Box<Transcoder>>,
    /// Its comfort noise payload type (a G.711 or G.722 leg's), if offered.
    comfort_noise: Option<u8>,
    listen_only: crate::room::ListenOnly,
    last_heard: Instant,
    /// Held by its call: removed when silent this long instead of the peer timeout.
    held: Option<Duration>,
    /// The SSRC its packets carry, once seen.
    their_ssrc: Option<u32>,
    ssrc: u32,
    seq: u16,
    ts_offset: u32,
    /// The last tick sent; a later tick that is not the next one is a gap (marker bit).
    last_tick: Option<u64>,
    /// Its telephone-event payload type, the keys it pressed, the keys it is sent.
    events: Option<(u8, KeysIn, KeysOut)>,
    /// Its SRTP, both ways (`None`: plain RTP).
    srtp: Option<Box<Srtp>>,
    /// Its RTCP (plain RTP legs; an SRTP leg sends and reads none: SRTCP is
    /// not done), and the port it goes to.
    rtcp: Option<Box<PlainReports>>,
    rtcp_port: RtcpPort,
}

/// Packets and participants counted since the last publish.
#[derive(Default)]
struct Tally {
    received: u64,
    sent: u64,
    source: u64,
    malformed: u64,
    payload_type: u64,
    rtcp: u64,
    /// RTCP reports read, and sent.
    rtcp_in: u64,
    rtcp_out: u64,
    /// SRTP packets that did not authenticate, replayed or too old.
    srtp: u64,
}

struct PlainThread {
    rooms: Arc<Rooms>,
    socket: UdpSocket,
    rx: Receiver<IoCommand>,
    adds: Receiver<NewPlain>,
    lobby_rx: Receiver<LobbyCommand>,
    /// Calls answered but in no room yet (their PIN): keys and prompts only.
    lobby: Lobby,
    keys: Receiver<(PeerId, Vec<u8>)>,
    steers: Receiver<(PeerId, Steer)>,
    legs: Legs,
    /// Where keypresses go (never waited on).
    pressed: tokio::sync::mpsc::Sender<Keypress>,
    wake: Arc<EventFd>,
    counters: Arc<IoCounters>,
    peer_timeout: Duration,
    peers: HashMap<PeerId, Peer>,
    /// Which participant a packet's source is, and where each one's mix goes.
    sources: Sources,
    by_room: HashMap<RoomKey, Vec<PeerId>>,
    /// Per room and rate with G.711 (8 kHz) or G.722 (16 kHz) legs here: its
    /// listener mix at that rate, made once a tick for all of them.
    narrow: HashMap<(RoomKey, u32), SharedNarrow>,
    inbox: Inboxes,
    stats: MuxStats,
    last_stats: MuxStats,
    tally: Tally,
    buf: Vec<u8>,
    next_timeout_check: Instant,
}

/// Binds the plain RTP socket on `bind` and starts the `rtp-in` thread as
/// I/O thread number `index`. Returns its I/O handle (for the media plane's
/// list), the handle the API adds participants through, and the thread.
pub(crate) fn spawn(
    bind: SocketAddr,
    index: usize,
    rooms: Arc<Rooms>,
    peer_timeout: Duration,
    thread_nice: i32,
    pressed: tokio::sync::mpsc::Sender<Keypress>,
) -> std::io::Result<(IoHandle, PlainHandle, JoinHandle<()>)> {
    let socket = UdpSocket::bind(bind)?;
    socket.set_nonblocking(true)?;
    let bound = socket.local_addr()?;
    let wake = Arc::new(
        EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(std::io::Error::from)?,
    );
    let (tx, rx) = mpsc::channel();
    let (add, adds) = mpsc::channel();
    let (lobby, lobby_rx) = mpsc::channel();
    let (keys_tx, keys) = mpsc::channel();
    let (steer, steers) = mpsc::sync_channel(STEERS);
    let legs = Legs::default();
    let counters = Arc::new(IoCounters::default());
    let io = IoHandle { tx, wake: wake.clone(), counters: counters.clone() };
    let handle =
        PlainHandle { add, lobby, keys: keys_tx, steer, legs: legs.clone(), wake: wake.clone(), bound, io: index };
    let thread = std::thread::Builder::new().name("rtp-in".into()).spawn(move || {
        crate::priority::media_thread(thread_nice);
        PlainThread {
            rooms,
            socket,
            rx,
            adds,
            lobby_rx,
            lobby: Lobby::default(),
            keys,
            steers,
            legs,
            pressed,
            wake,
            counters,
            peer_timeout,
            peers: HashMap::new(),
            sources: Sources::default(),
            by_room: HashMap::new(),
            narrow: HashMap::new(),
            inbox: Inboxes::default(),
            stats: MuxStats::default(),
            last_stats: MuxStats::default(),
            tally: Tally::default(),
            buf: Vec::with_capacity(1500),
            next_timeout_check: Instant::now() + TIMEOUT_CHECK,
        }
        .run()
    })?;
    tracing::info!(%bound, "plain RTP (rtp_in) socket open: no encryption, trusted networks only");
    Ok((io, handle, thread))
}

impl PlainThread {
    fn run(&mut self) {
        loop {
            self.wait();
            let now = Instant::now();
            // Before the adds: a call leaves the lobby before it joins, on the same address.
            while let Ok(cmd) = self.lobby_rx.try_recv() {
                match self.lobby.command(cmd, now) {
                    Some(Change::Added(id, o)) => self.sources.add(id, o.remote, o.comedia, o.ssrc),
                    Some(Change::Removed(id)) => self.sources.remove(id),
                    None => {}
                }
            }
            while let Ok(p) = self.adds.try_recv() {
                self.add(p, now);
            }
            while let Ok((id, keys)) = self.keys.try_recv() {
                if let Some((_, _, out)) = self.peers.get_mut(&id).and_then(|p| p.events.as_mut()) {
                    out.push(&keys);
                }
            }
            while let Ok((id, steer)) = self.steers.try_recv() {
                self.steer(id, steer, now);
            }
            if !self.commands() {
                break;
            }
            self.receive(now);
            let sources = &self.sources;
            self.stats.datagrams_out +=
                self.lobby.play(Instant::now(), &self.socket, &mut self.buf, |id| sources.send_to(id));
            self.inbox.flush();
            if now >= self.next_timeout_check {
                self.next_timeout_check = now + TIMEOUT_CHECK;
                self.expire(now);
            }
            self.publish();
        }
        self.peers.clear();
        self.publish();
    }

    fn wait(&self) {
        let timeout = nix::sys::time::TimeSpec::from_duration(self.lobby.wait(Instant::now(), IDLE_WAIT));
        let socket = PollFd::new(self.socket.as_fd(), PollFlags::POLLIN);
        let wake = PollFd::new(self.wake.as_fd(), PollFlags::POLLIN);
        let _ = ppoll(&mut [socket, wake], Some(timeout), None);
        let _ = self.wake.read();
    }

    fn add(&mut self, mut p: NewPlain, now: Instant) {
        // The registry's record wins: a move (or a leave) may have come
        // before this thread took the participant in.
        match self.rooms.room_of(p.id.0) {
            Some(room) => p.room = room,
            None => {
                lock(&self.legs).remove(&p.id);
                return;
            }
        }
        if p.room.is_closed() {
            lock(&self.legs).remove(&p.id);
            return;
        }
        let g711 = match p.codec {
            Codec::Opus => None,
            Codec::Pcmu | Codec::Pcma | Codec::G722 => match Transcoder::new(p.codec) {
                Ok(t) => Some(Box::new(t)),
                Err(e) => {
                    tracing::warn!(room = %p.room.id, peer = %p.id, error = %e, "G.711 leg not set up: removed");
                    lock(&self.legs).remove(&p.id);
                    let _ = self.rooms.leave(&p.room, p.id.0, LeaveReason::Failed);
                    return;
                }
            },
        };
        // The room decodes a G.711 caller's frames itself (while it is selected).
        p.room.set_input_codec(ParticipantId(p.id.0), input_codec(p.codec));
        let [ssrc, seq, ts_offset] = random_u32s();
        self.sources.add(p.id, p.remote, p.comedia, p.ssrc);
        self.by_room.entry(p.room.key).or_default().push(p.id);
        tracing::debug!(room = %p.room.id, peer = %p.id, remote = %p.remote, comedia = p.comedia, codec = ?p.codec, "plain RTP participant added");
        self.peers.insert(
            p.id,
            Peer {
                room: p.room,
                payload_type: p.payload_type,
                tick_samples: p.codec.clock_rate() / 50,
                g711,
                comfort_noise: p.comfort_noise,
                listen_only: p.listen_only,
                last_heard: now,
                held: None,
                their_ssrc: None,
                ssrc,
                seq: seq as u16,
                ts_offset,
                last_tick: None,
                events: p.events.map(|e| (e.payload_type, KeysIn::default(), KeysOut::new(e.rate))),
                rtcp: p.srtp.is_none().then(|| Box::new(PlainReports::new(ssrc, p.codec.clock_rate(), "tutti"))),
                rtcp_port: p.rtcp,
                srtp: p.srtp,
            },
        );
    }

    /// Runs queued commands. Returns false on shutdown.
    fn commands(&mut self) -> bool {
        while let Ok(cmd) = self.rx.try_recv() {
            match cmd {
                IoCommand::Deliver(mixes) => self.deliver(&mixes),
                IoCommand::Close(id) => {
                    self.forget(id);
                }
                IoCommand::Rehome(id) => self.rehome(id),
                IoCommand::Shutdown => return false,
                // Nothing is forwarded to this thread (its peers have no ICE);
                // other commands are the WebRTC threads'.
                #[allow(unreachable_patterns)]
                _ => {}
            }
        }
        true
    }

    /// A leg's call moved its media or held it (see [`Steer`]).
    fn steer(&mut self, id: PeerId, steer: Steer, now: Instant) {
        let Some(peer) = self.peers.get_mut(&id) else { return };
        match steer {
            Steer::Remote(to) => self.sources.repoint(id, to),
            Steer::Hold(bound) => {
                peer.held = bound;
                peer.last_heard = now;
            }
        }
        tracing::debug!(room = %peer.room.id, peer = %id, ?steer, "plain RTP leg steered");
    }

    /// A participant was moved to another room (a breakout): its packets
    /// go to the new room's inbox and it is sent the new room's mix from
    /// the next tick on. The same socket, address, SSRC, sequence numbers
    /// and timestamps (they follow the clock's tick, which every room
    /// shares): the caller sees one unbroken stream.
    fn rehome(&mut self, id: PeerId) {
        let Some(room) = self.rooms.room_of(id.0) else { return };
        let Some(peer) = self.peers.get_mut(&id) else { return };
        if peer.room.key == room.key {
            return;
        }
        if let Some(g711) = &peer.g711 {
            room.set_input_codec(ParticipantId(id.0), g711.input_codec());
        }
        let old = std::mem::replace(&mut peer.room, room.clone());
        // The new room learns its SSRC from its next packet.
        peer.their_ssrc = None;
        if let Some(list) = self.by_room.get_mut(&old.key) {
            list.retain(|p| *p != id);
            if list.is_empty() {
                self.by_room.remove(&old.key);
                self.narrow.retain(|(room, _), _| *room != old.key);
            }
        }
        self.by_room.entry(room.key).or_default().push(id);
        tracing::debug!(from = %old.id, to = %room.id, peer = %id, "plain RTP participant moved to another room");
    }

    fn forget(&mut self, id: PeerId) -> Option<Peer> {
        let peer = self.peers.remove(&id)?;
        lock(&self.legs).remove(&id);
        self.sources.remove(id);
        if let Some(list) = self.by_room.get_mut(&peer.room.key) {
            list.retain(|p| *p != id);
            if list.is_empty() {
                self.by_room.remove(&peer.room.key);
                self.narrow.retain(|(room, _), _| *room != peer.room.key);
            }
        }
        Some(peer)
    }

    /// Sends each participant its feed of each room's mix.
    fn deliver(&mut self, mixes: &[RoomMix]) {
        let now = Instant::now();
        for mix in mixes {
            let Some(ids) = self.by_room.get(&mix.key) else { continue };
            for id in ids {
                let Some(peer) = self.peers.get_mut(id) else { continue };
                // A leg in its comfort noise (RFC 3389) sends the room a frame of it each tick.
                if !peer.listen_only.get()
                    && let Some(frame) = peer.g711.as_mut().and_then(|t| t.comfort_noise())
                {
                    self.inbox.push(&peer.room, ParticipantId(id.0), room_packet(frame));
                }
                // A comedia participant not heard yet has nowhere to be sent to.
                let Some(to) = self.sources.send_to(*id) else { continue };
                let ts = peer.ts_offset.wrapping_add((mix.tick as u32).wrapping_mul(peer.tick_samples));
                if let Some((pt, _, out)) = peer.events.as_mut()
                    && let Some(key) = out.tick(mix.tick, ts)
                {
                    let pt = *pt;
                    send_key(&self.socket, &mut self.buf, peer, pt, key, to, &mut self.stats);
                }
                if let Some(report) = peer.rtcp.as_mut().and_then(|r| r.due(now))
                    && self.socket.send_to(&report, peer.rtcp_port.of(to)).is_ok()
                {
                    self.tally.rtcp_out += 1;
                }
                let feed = mix.feed_for(ParticipantId(id.0));
                if feed.payload.is_empty() {
                    continue;
                }
                // A tick that is not the next after the last sent: a gap (DTX,
                // a skipped tick), the start of a talkspurt (RFC 3551 marker).
                let marker = peer.last_tick.is_none_or(|t| mix.tick != t + 1);
                if peer.last_tick.is_some_and(|t| mix.tick <= t) {
                    continue;
                }
                peer.last_tick = Some(mix.tick);
                let mut narrow = [0u8; NARROW_FRAME];
                let payload = match peer.g711.as_mut() {
                    None => &feed.payload[..],
                    // The listener mix: decoded and resampled once for every G.711 leg of the room.
                    Some(g711) if std::ptr::eq(feed, &mix.listeners) => {
                        let shared = match self.narrow.entry((mix.key, g711.rate())) {
                            std::collections::hash_map::Entry::Occupied(e) => Some(e.into_mut()),
                            std::collections::hash_map::Entry::Vacant(e) => {
                                SharedNarrow::new(g711.rate()).ok().map(|s| e.insert(s))
                            }
                        };
                        let Some(pcm) = shared.and_then(|s| s.of(mix.tick, &feed.payload)) else { continue };
                        g711.encode_narrow(pcm, &mut narrow);
                        &narrow[..]
                    }
                    Some(g711) => match g711.send(&feed.payload, &mut narrow) {
                        Some(()) => &narrow[..],
                        None => continue,
                    },
                };
                peer.seq = peer.seq.wrapping_add(1);
                write_rtp(&mut self.buf, peer.payload_type, marker, peer.seq, ts, peer.ssrc, payload);
                let Some(datagram) = outgoing(peer.srtp.as_deref_mut(), &self.buf) else { continue };
                match self.socket.send_to(datagram, to) {
                    Ok(n) => {
                        self.stats.datagrams_out += 1;
                        self.stats.bytes_out += n as u64;
                        self.stats.audio_out += 1;
                        self.tally.sent += 1;
                        if let Some(r) = peer.rtcp.as_mut() {
                            r.on_sent(payload.len(), ts, now);
                        }
                    }
                    Err(_) => {
                        // Buffer full, or an ICMP unreachable from an earlier send: this frame is lost.
                        self.counters.send_errors.fetch_add(1, Ordering::Relaxed);
                        metrics::packets_out(0, 0, 1);
                    }
                }
            }
        }
    }

    /// Reads what is waiting, at most [`RECV_PER_TURN`] datagrams.
    fn receive(&mut self, now: Instant) {
        let mut buf = [0u8; 1500];
        for _ in 0..RECV_PER_TURN {
            let (n, from) = match self.socket.recv_from(&mut buf) {
                Ok(r) => r,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                // ICMP errors of earlier sends surface here (ECONNREFUSED): keep reading.
                Err(_) => continue,
            };
            self.stats.datagrams_in += 1;
            self.stats.bytes_in += n as u64;
            self.packet(from, &mut buf[..n], now);
        }
    }

    fn packet(&mut self, from: SocketAddr, data: &mut [u8], now: Instant) {
        // The header is in the clear (SRTP too): whose packet is it?
        if data.len() < RTP_HEADER_BYTES || data[0] >> 6 != 2 {
            self.tally.malformed += 1;
            return;
        }
        if (200..=204).contains(&data[1]) {
            self.rtcp(from, data, now);
            return;
        }
        let ssrc = u32::from_be_bytes([data[8], data[9], data[10], data[11]]);
        let Some(id) = self.sources.peek(from, ssrc) else {
            self.tally.source += 1;
            self.stats.unrouted += 1;
            return;
        };
        if self.lobby.has(id) {
            // A call entering its PIN (plain RTP): its keys only.
            let Ok(rtp) = parse_rtp(data) else {
                self.tally.malformed += 1;
                return;
            };
            self.sources.source(from, ssrc);
            if let Some(press) = self.lobby.packet(id, rtp.payload_type, rtp.timestamp, rtp.payload)
                && self.pressed.try_send(press).is_err()
            {
                tracing::debug!(peer = %id, "lobby keypress dropped: its queue is full");
            }
            return;
        }
        let Some(peer) = self.peers.get_mut(&id) else { return };
        // An SRTP leg's packet authenticates first: a forged one neither latches nor is heard.
        let data: &[u8] = match peer.srtp.as_mut() {
            None => data,
            Some(srtp) => match srtp.open(data) {
                Ok(len) => &data[..len],
                Err(_) => {
                    self.tally.srtp += 1;
                    return;
                }
            },
        };
        let rtp = match parse_rtp(data) {
            Ok(rtp) => rtp,
            Err(RtpParseError::Rtcp) => {
                self.tally.rtcp += 1;
                return;
            }
            Err(RtpParseError::Malformed) => {
                self.tally.malformed += 1;
                return;
            }
        };
        self.sources.source(from, ssrc);
        peer.last_heard = now;
        if let Some((pt, keys, _)) = peer.events.as_mut()
            && rtp.payload_type == *pt
        {
            // A key works muted and listen-only too (it may be the unmute).
            if let Some(key) = keys.packet(rtp.timestamp, rtp.payload)
                && self.pressed.try_send(Keypress { id: id.0, key }).is_err()
            {
                tracing::debug!(peer = %id, %key, "keypress dropped: its queue is full");
            }
            return;
        }
        let comfort = peer.comfort_noise == Some(rtp.payload_type);
        if rtp.payload_type != peer.payload_type && !comfort {
            self.tally.payload_type += 1;
            return;
        }
        if peer.listen_only.get() {
            self.counters.listen_only_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let pid = ParticipantId(id.0);
        if peer.their_ssrc != Some(rtp.ssrc) {
            peer.their_ssrc = Some(rtp.ssrc);
            peer.room.set_source(pid, rtp.ssrc);
        }
        self.stats.audio_in += 1;
        self.tally.received += 1;
        if let Some(r) = peer.rtcp.as_mut() {
            r.on_received(rtp.ssrc, rtp.seq, rtp.timestamp, now);
        }
        if let Some(g711) = peer.g711.as_mut() {
            // Into the room as 20 ms frames of its G.711 bytes, on the room's 48 kHz clock.
            let (room, inbox) = (&peer.room, &mut self.inbox);
            let whole = if comfort {
                // Its noise goes to the room a frame per tick ([`Self::deliver`]) until its next audio packet.
                g711.comfort(rtp.timestamp, rtp.payload)
            } else {
                g711.receive(rtp.timestamp, rtp.payload, |f| inbox.push(room, pid, room_packet(f)))
            };
            if !whole {
                self.tally.malformed += 1;
            }
            return;
        }
        let packet = Packet {
            seq: rtp.seq,
            timestamp: rtp.timestamp,
            payload: Bytes::copy_from_slice(rtp.payload),
            level: None,
        };
        self.inbox.push(&peer.room, pid, packet);
    }

    /// An RTCP packet: read when it comes from where a plain leg's RTCP
    /// goes (symmetric RTCP, as its RTP) and names the leg's SSRC as its
    /// sender; else dropped and counted. Never counts as hearing the leg.
    fn rtcp(&mut self, from: SocketAddr, data: &[u8], now: Instant) {
        let ssrc = u32::from_be_bytes([data[4], data[5], data[6], data[7]]);
        // Its RTP address is the same (rtcp-mux) or the port before; it must
        // come from where we send the leg's RTCP, with the leg's SSRC.
        let by = |addr: SocketAddr| self.sources.by_addr.get(&addr).copied();
        let leg = by(from).or_else(|| by(SocketAddr::new(from.ip(), from.port().wrapping_sub(1))));
        let read = leg.and_then(|id| {
            let to = self.sources.send_to(id)?;
            let p = self.peers.get_mut(&id)?;
            if p.rtcp_port.of(to) != from || p.their_ssrc != Some(ssrc) {
                return None;
            }
            p.rtcp.as_mut().map(|r| r.on_rtcp(data, now))
        });
        if read == Some(true) {
            self.tally.rtcp_in += 1;
        } else {
            self.tally.rtcp += 1;
        }
    }

    /// Removes participants nothing arrived from for the peer timeout (like
    /// WebRTC peers' idle timeout; a joined participant that never sends, too).
    fn expire(&mut self, now: Instant) {
        let silent: Vec<PeerId> = self
            .peers
            .iter()
            .filter(|(_, p)| now.saturating_duration_since(p.last_heard) > p.held.unwrap_or(self.peer_timeout))
            .map(|(id, _)| *id)
            .collect();
        for id in silent {
            let Some(peer) = self.forget(id) else { continue };
            self.stats.timed_out += 1;
            tracing::info!(room = %peer.room.id, peer = %id, "plain RTP participant silent for the peer timeout: removed");
            // Where the registry has it (a move's re-home may still be queued).
            // Its ClosePeer effect names this thread, where it is gone already.
            let room = self.rooms.room_of(id.0).unwrap_or(peer.room);
            let _ = self.rooms.leave(&room, id.0, LeaveReason::TimedOut);
        }
    }

    /// Publishes the counters (to the server's stats and the metrics).
    fn publish(&mut self) {
        let change = self.peers.len() as i64 - self.stats.connected as i64;
        self.stats.connected = self.peers.len() as u64;
        let t = std::mem::take(&mut self.tally);
        metrics::rtp_in(
            change,
            t.received,
            t.sent,
            (t.rtcp_in, t.rtcp_out),
            &[
                ("source", t.source),
                ("malformed", t.malformed),
                ("payload_type", t.payload_type),
                ("rtcp", t.rtcp),
                ("srtp", t.srtp),
            ],
        );
        let s = self.stats;
        if s == self.last_stats {
            return;
        }
        let last = self.last_stats;
        metrics::packets_in(s.datagrams_in - last.datagrams_in, s.bytes_in - last.bytes_in);
        metrics::packets_out(s.datagrams_out - last.datagrams_out, s.bytes_out - last.bytes_out, 0);
        metrics::media(&mut self.last_stats, s);
        *lock(&self.counters.mux) = s;
    }
}

/// A transcoded leg's frame as the room's packet, on the room's 48 kHz clock.
fn room_packet(f: RoomFrame) -> Packet {
    Packet { seq: f.seq, timestamp: f.timestamp.wrapping_mul(6), payload: f.payload, level: Some(f.level) }
}

/// Sends one tick's key packet (`repeats` times) to `to`, on the leg's
/// SSRC and sequence.
fn send_key(
    socket: &UdpSocket,
    buf: &mut Vec<u8>,
    peer: &mut Peer,
    pt: u8,
    key: KeyPacket,
    to: SocketAddr,
    stats: &mut MuxStats,
) {
    for _ in 0..key.repeats {
        peer.seq = peer.seq.wrapping_add(1);
        write_rtp(buf, pt, key.marker, peer.seq, key.start, peer.ssrc, &key.event.to_bytes());
        let Some(datagram) = outgoing(peer.srtp.as_deref_mut(), buf) else { continue };
        if let Ok(n) = socket.send_to(datagram, to) {
            stats.datagrams_out += 1;
            stats.bytes_out += n as u64;
        }
    }
}

/// Which plain RTP participant a packet's source address is, and where each
/// one's mix goes (see the module's documentation for the rules).
///
/// Per packet from a known address: one lookup by address and one by
/// participant, as before; from an unknown one, at most one more lookup (by
/// IP, among the comedia participants not heard yet): no scan of the
/// participants, no allocation.
#[derive(Default)]
struct Sources {
    /// Offered and latched addresses.
    by_addr: HashMap<SocketAddr, PeerId>,
    /// Comedia participants not heard from yet, by their offer's IP.
    waiting: HashMap<IpAddr, Vec<PeerId>>,
    peers: HashMap<PeerId, Source>,
}

struct Source {
    /// The offer's `c=`/`m=` address.
    offered: SocketAddr,
    /// The offer said `a=direction:active`.
    comedia: bool,
    /// Another address of the offer's IP, latched (comedia only) until the
    /// offered address is heard.
    latched: Option<SocketAddr>,
    /// The SSRC the offer announced: only a packet of it latches.
    ssrc: Option<u32>,
    /// A packet came from the offered or the latched address.
    heard: bool,
}

impl Sources {
    fn add(&mut self, id: PeerId, offered: SocketAddr, comedia: bool, ssrc: Option<u32>) {
        // Two participants offering one address: the first keeps it.
        self.by_addr.entry(offered).or_insert(id);
        if comedia {
            self.waiting.entry(offered.ip()).or_default().push(id);
        }
        self.peers.insert(id, Source { offered, comedia, latched: None, ssrc, heard: false });
    }

    fn remove(&mut self, id: PeerId) {
        let Some(s) = self.peers.remove(&id) else { return };
        for addr in std::iter::once(s.offered).chain(s.latched) {
            if self.by_addr.get(&addr) == Some(&id) {
                self.by_addr.remove(&addr);
            }
        }
        self.unwait(id, s.offered.ip());
    }

    /// `id`'s media moved to `to`: the old addresses are forgotten, `to`
    /// is its offered address (comedia latches anew).
    fn repoint(&mut self, id: PeerId, to: SocketAddr) {
        let Some(s) = self.peers.get(&id) else { return };
        if s.offered != to {
            let (comedia, ssrc) = (s.comedia, s.ssrc);
            self.remove(id);
            self.add(id, to, comedia, ssrc);
        }
    }

    fn unwait(&mut self, id: PeerId, ip: IpAddr) {
        if let Some(list) = self.waiting.get_mut(&ip) {
            list.retain(|p| *p != id);
            if list.is_empty() {
                self.waiting.remove(&ip);
            }
        }
    }

    /// The participant a packet from `from` with SSRC `ssrc` would belong
    /// to, changing nothing (see [`Sources::source`]).
    fn peek(&self, from: SocketAddr, ssrc: u32) -> Option<PeerId> {
        if let Some(&id) = self.by_addr.get(&from) {
            return Some(id);
        }
        // Another address: only a comedia participant's, the only one of
        // that IP not heard yet (two would be a guess).
        let &[id] = self.waiting.get(&from.ip())?.as_slice() else { return None };
        let s = self.peers.get(&id)?;
        if s.ssrc.is_some_and(|want| want != ssrc) {
            return None;
        }
        Some(id)
    }

    /// The participant a packet from `from` belongs to, latching it if the
    /// rules allow (its SSRC `ssrc` must be the one the offer announced,
    /// when it did); `None`: nobody's (dropped).
    fn source(&mut self, from: SocketAddr, ssrc: u32) -> Option<PeerId> {
        if let Some(&id) = self.by_addr.get(&from) {
            let s = self.peers.get(&id)?;
            if !s.heard || (s.latched.is_some() && from == s.offered) {
                self.hear(id, from);
            }
            return Some(id);
        }
        // Another address: the comedia participant `peek` names, if any.
        let id = self.peek(from, ssrc)?;
        let s = self.peers.get_mut(&id)?;
        s.latched = Some(from);
        self.by_addr.insert(from, id);
        tracing::debug!(peer = %id, %from, offered = %s.offered, "plain RTP source latched (comedia)");
        self.hear(id, from);
        Some(id)
    }

    /// A packet of `id` came from `from` (its offered or latched address).
    fn hear(&mut self, id: PeerId, from: SocketAddr) {
        let Some(s) = self.peers.get_mut(&id) else { return };
        if from == s.offered
            && let Some(old) = s.latched.take()
        {
            // The offer wins, for good (the participant waits no more).
            tracing::info!(peer = %id, latched = %old, offered = %from, "plain RTP: the offered address spoke; latch undone");
            if self.by_addr.get(&old) == Some(&id) {
                self.by_addr.remove(&old);
            }
        }
        if !s.heard {
            s.heard = true;
            if s.comedia {
                let ip = s.offered.ip();
                self.unwait(id, ip);
            }
        }
    }

    /// Where `id`'s mix goes: its latched address, else its offered one;
    /// nowhere for a comedia participant not heard yet.
    fn send_to(&self, id: PeerId) -> Option<SocketAddr> {
        let s = self.peers.get(&id)?;
        if s.comedia && !s.heard {
            return None;
        }
        Some(s.latched.unwrap_or(s.offered))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("an address")
    }

    #[test]
    fn without_comedia_only_the_offered_address_counts() {
        let mut s = Sources::default();
        let gw = PeerId(1);
        s.add(gw, addr("10.0.0.5:40000"), false, None);
        assert_eq!(s.send_to(gw), Some(addr("10.0.0.5:40000")), "the mix goes to the offer at once");
        // A packet from another port of the gateway's IP, before the gateway's first: nobody's.
        assert_eq!(s.source(addr("10.0.0.5:40002"), 7), None);
        assert_eq!(s.source(addr("10.0.0.5:40000"), 7), Some(gw));
        assert_eq!(s.source(addr("10.0.0.5:40002"), 7), None);
        assert_eq!(s.source(addr("10.0.0.6:40000"), 7), None);
        assert_eq!(s.send_to(gw), Some(addr("10.0.0.5:40000")));
    }

    #[test]
    fn a_comedia_offer_with_its_ssrc_latches_only_that_ssrc() {
        let mut s = Sources::default();
        let gw = PeerId(1);
        s.add(gw, addr("10.0.0.5:9"), true, Some(0xC0FFEE));
        // Another process on the gateway's address, first: not latched.
        assert_eq!(s.source(addr("10.0.0.5:6666"), 0xBAD), None, "another SSRC never latches");
        assert_eq!(s.send_to(gw), None, "its mix goes nowhere yet");
        // The gateway's own stream latches.
        assert_eq!(s.source(addr("10.0.0.5:5000"), 0xC0FFEE), Some(gw));
        assert_eq!(s.send_to(gw), Some(addr("10.0.0.5:5000")));
        assert_eq!(s.source(addr("10.0.0.5:6666"), 0xC0FFEE), None, "one latch only");
    }

    #[test]
    fn comedia_latches_one_port_of_the_offered_ip_and_the_offer_still_wins() {
        let mut s = Sources::default();
        let gw = PeerId(1);
        s.add(gw, addr("10.0.0.5:9"), true, None);
        assert_eq!(s.send_to(gw), None, "nowhere to send before it is heard");
        assert_eq!(s.source(addr("10.0.0.6:5000"), 7), None, "another IP never latches");
        assert_eq!(s.source(addr("10.0.0.5:5000"), 7), Some(gw), "latched");
        assert_eq!(s.send_to(gw), Some(addr("10.0.0.5:5000")), "symmetric RTP: the mix follows");
        assert_eq!(s.source(addr("10.0.0.5:5001"), 7), None, "one latch only");
        assert_eq!(s.source(addr("10.0.0.5:5000"), 7), Some(gw));
        // The offered address speaks: the latch is undone, for good.
        assert_eq!(s.source(addr("10.0.0.5:9"), 7), Some(gw));
        assert_eq!(s.send_to(gw), Some(addr("10.0.0.5:9")));
        assert_eq!(s.source(addr("10.0.0.5:5000"), 7), None);
        assert_eq!(s.source(addr("10.0.0.5:5002"), 7), None);
        s.remove(gw);
        assert_eq!(s.source(addr("10.0.0.5:9"), 7), None);
        assert!(s.by_addr.is_empty() && s.waiting.is_empty() && s.peers.is_empty());
    }

    #[test]
    fn two_comedia_participants_of_one_ip_latch_nothing_until_one_is_heard() {
        let mut s = Sources::default();
        let (a, b) = (PeerId(1), PeerId(2));
        s.add(a, addr("10.0.0.5:4000"), true, None);
        s.add(b, addr("10.0.0.5:4002"), true, None);
        assert_eq!(s.source(addr("10.0.0.5:7000"), 7), None, "ambiguous: dropped");
        assert_eq!(s.source(addr("10.0.0.5:4000"), 7), Some(a), "a is heard at its offer");
        assert_eq!(s.source(addr("10.0.0.5:7000"), 7), Some(b), "b is the only one waiting now");
        assert_eq!(s.send_to(b), Some(addr("10.0.0.5:7000")));
        s.remove(b);
        assert_eq!(s.source(addr("10.0.0.5:7000"), 7), None);
        assert_eq!(s.source(addr("10.0.0.5:4000"), 7), Some(a));
    }
}
