//! Keys, sealing and opening of mesh datagrams, and the replay window.
//!
//! Keys: `room key = HKDF-SHA256(salt = "tutti v1 cluster-mesh", ikm =
//! shared secret, info = "room" ‖ room ‖ epoch)`, then one AES-256-GCM key
//! per sending node's session: `HKDF-Expand(room key, "sender" ‖ node ‖
//! session)`. The nonce is `tick (8 bytes) ‖ part (1) ‖ 0 0 0`: unique
//! under one sender-session key as long as a session never sends the same
//! (tick, part) twice, which the sender guarantees; a restarted node has a
//! new session, hence a new key. A 96-bit nonce cannot hold sender,
//! session, tick and part at once: hence the per-sender-session key.

use std::collections::HashMap;

use ring::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::hkdf;

use crate::error::{DropReason, SealError};
use crate::wire::{
    Candidate, HEADER_BYTES, Header, MAX_CANDIDATES, MAX_DATAGRAM_BYTES, MAX_FRAME_BYTES, MAX_PARTS, NodeId, RoomId,
    SUMMARY_BYTES, Summary, TAG_BYTES, read_body,
};

/// Salt of the room-key derivation (the label of the purpose).
pub const KEY_SALT: &[u8] = b"tutti v1 cluster-mesh";

/// Ticks the replay window reaches back from the newest tick seen.
pub const REPLAY_WINDOW_TICKS: u64 = 128 / MAX_PARTS as u64;

/// The key of one room at one epoch, from which each sender's key derives.
pub struct RoomKey {
    prk: hkdf::Prk,
    room: RoomId,
    epoch: u64,
}

impl std::fmt::Debug for RoomKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoomKey").field("room", &self.room).field("epoch", &self.epoch).finish_non_exhaustive()
    }
}

struct Len(usize);
impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

impl RoomKey {
    /// Derives the room's key at `epoch` from the cluster's shared secret.
    pub fn derive(secret: &[u8], room: RoomId, epoch: u64) -> Self {
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, KEY_SALT).extract(secret);
        let (r, e) = (room.0.to_be_bytes(), epoch.to_be_bytes());
        let info: [&[u8]; 3] = [b"room", &r, &e];
        let mut bytes = [0u8; 32];
        // 32 bytes is far below HKDF-SHA256's 255 × 32 limit: cannot fail.
        if let Ok(okm) = prk.expand(&info, Len(32)) {
            let _ = okm.fill(&mut bytes);
        }
        Self { prk: hkdf::Prk::new_less_safe(hkdf::HKDF_SHA256, &bytes), room, epoch }
    }

    /// The room.
    pub fn room(&self) -> RoomId {
        self.room
    }

    /// The epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    fn sender_key(&self, sender: NodeId, session: u64) -> LessSafeKey {
        let (n, s) = (sender.0.to_be_bytes(), session.to_be_bytes());
        let info: [&[u8]; 3] = [b"sender", &n, &s];
        let mut bytes = [0u8; 32];
        if let Ok(okm) = self.prk.expand(&info, Len(32)) {
            let _ = okm.fill(&mut bytes);
        }
        // A 32-byte key is what AES-256-GCM takes: cannot fail.
        let unbound = UnboundKey::new(&AES_256_GCM, &bytes).unwrap_or_else(|_| unreachable!("32-byte AES-256 key"));
        LessSafeKey::new(unbound)
    }
}

fn nonce(tick: u64, part: u8) -> Nonce {
    let mut n = [0u8; 12];
    n[..8].copy_from_slice(&tick.to_be_bytes());
    n[8] = part;
    Nonce::assume_unique_for_key(n)
}

/// Seals this node's ticks for one room.
pub struct Sealer {
    key: LessSafeKey,
    room: RoomId,
    epoch: u64,
    sender: NodeId,
    session: u64,
    /// The next tick must be above the last one sealed: never a nonce twice.
    last_tick: Option<u64>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer").field("room", &self.room).field("sender", &self.sender).finish_non_exhaustive()
    }
}

/// What sealing a tick produced besides the datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sealed {
    /// Datagrams (parts) written.
    pub parts: usize,
    /// Candidates left out because their frame exceeds [`MAX_FRAME_BYTES`].
    pub oversize: usize,
}

impl Sealer {
    /// A sealer for `sender`'s `session` in the room of `key`.
    pub fn new(key: &RoomKey, sender: NodeId, session: u64) -> Self {
        Self {
            key: key.sender_key(sender, session),
            room: key.room,
            epoch: key.epoch,
            sender,
            session,
            last_tick: None,
        }
    }

    /// Encodes and seals one tick into `out` (cleared first): one datagram
    /// when everything fits in [`MAX_DATAGRAM_BYTES`], else several parts,
    /// candidates packed in the given order, each part carrying the header
    /// and summary so it stands alone. A tick not above the last one sealed
    /// is refused (it would reuse nonces).
    pub fn seal_tick(
        &mut self,
        tick: u64,
        summary: Summary,
        candidates: &[Candidate],
        out: &mut Vec<Vec<u8>>,
    ) -> Result<Sealed, SealError> {
        out.clear();
        if self.last_tick.is_some_and(|t| tick <= t) {
            return Err(SealError::TickNotAfterLast);
        }
        if candidates.len() > MAX_CANDIDATES {
            return Err(SealError::TooManyCandidates);
        }
        let fits: Vec<&Candidate> = candidates.iter().filter(|c| c.frame.len() <= MAX_FRAME_BYTES).collect();
        let oversize = candidates.len() - fits.len();
        // Pack into parts.
        let room_per_part = MAX_DATAGRAM_BYTES - HEADER_BYTES - TAG_BYTES - SUMMARY_BYTES;
        let mut parts: Vec<std::ops::Range<usize>> = Vec::new();
        let (mut start, mut used) = (0, 0);
        for (i, c) in fits.iter().enumerate() {
            if used + c.wire_len() > room_per_part {
                parts.push(start..i);
                start = i;
                used = 0;
            }
            used += c.wire_len();
        }
        parts.push(start..fits.len());
        if parts.len() > MAX_PARTS {
            return Err(SealError::TooManyParts);
        }
        let summary = Summary { candidates: fits.len() as u8, ..summary };
        for (p, range) in parts.iter().enumerate() {
            let header = Header {
                room: self.room,
                epoch: self.epoch,
                sender: self.sender,
                session: self.session,
                tick,
                part: p as u8,
                parts: parts.len() as u8,
            };
            let mut d = Vec::with_capacity(MAX_DATAGRAM_BYTES);
            header.write(&mut d);
            summary.write(range.len() as u8, &mut d);
            for c in &fits[range.clone()] {
                c.write(&mut d);
            }
            let (head, body) = d.split_at_mut(HEADER_BYTES);
            let tag = self
                .key
                .seal_in_place_separate_tag(nonce(tick, p as u8), Aad::from(&*head), body)
                .map_err(|_| SealError::Crypto)?;
            d.extend_from_slice(tag.as_ref());
            out.push(d);
        }
        self.last_tick = Some(tick);
        Ok(Sealed { parts: parts.len(), oversize })
    }
}

/// One opened, verified datagram: a part of a peer's tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Its header (room, epoch, sender, session, tick, part of parts).
    pub header: Header,
    /// The sender's summary of the tick.
    pub summary: Summary,
    /// The candidates in this part.
    pub candidates: Vec<Candidate>,
}

/// Replay window over (tick, part) of one sender session: the newest seen
/// and a bitmap of the 128 (tick, part) slots below it.
#[derive(Debug, Clone, Copy, Default)]
struct Window {
    top: Option<u64>,
    seen: u128,
}

impl Window {
    fn index(tick: u64, part: u8) -> Option<u64> {
        tick.checked_mul(MAX_PARTS as u64)?.checked_add(u64::from(part))
    }

    /// Whether (tick, part) is new and within the window (no update).
    fn fresh(&self, i: u64) -> bool {
        match self.top {
            None => true,
            Some(top) if i > top => true,
            Some(top) => {
                let back = top - i;
                back < 128 && self.seen & (1u128 << back) == 0
            }
        }
    }

    fn mark(&mut self, i: u64) {
        match self.top {
            Some(top) if i <= top => self.seen |= 1u128 << (top - i),
            Some(top) => {
                let shift = i - top;
                self.seen = if shift >= 128 { 0 } else { self.seen << shift };
                self.seen |= 1;
                self.top = Some(i);
            }
            None => {
                self.seen = 1;
                self.top = Some(i);
            }
        }
    }
}

struct PeerSession {
    session: u64,
    key: LessSafeKey,
    window: Window,
}

/// Opens one room's datagrams from its peers: checks room, epoch, sender,
/// session, replay, then the tag, then parses the body.
pub struct Opener {
    key: RoomKey,
    /// The room's keys under previous cluster secrets (a roll of the
    /// secret): a peer session that does not open under `key` may open
    /// under one of these, and keeps that key.
    accepted: Vec<RoomKey>,
    /// This node: its own datagrams (looped back) are refused.
    local: NodeId,
    peers: HashMap<NodeId, Option<PeerSession>>,
}

impl std::fmt::Debug for Opener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opener").field("key", &self.key).field("peers", &self.peers.len()).finish()
    }
}

impl Opener {
    /// An opener for the room of `key`, accepting the given peers.
    pub fn new(key: RoomKey, local: NodeId, peers: impl IntoIterator<Item = NodeId>) -> Self {
        let peers = peers.into_iter().filter(|&p| p != local).map(|p| (p, None)).collect();
        Self { key, accepted: Vec::new(), local, peers }
    }

    /// Also opens peer sessions sealed under `key` (the same room and epoch
    /// under a previous cluster secret); others are ignored.
    pub fn also_accept(mut self, key: RoomKey) -> Self {
        if (key.room, key.epoch) == (self.key.room, self.key.epoch) {
            self.accepted.push(key);
        }
        self
    }

    /// The key of `header`'s new session: under this room's key, else the
    /// first accepted one that opens the datagram (tried on a copy: only a
    /// session's first datagram, and only while a roll lists other keys).
    fn session_key(&self, header: &Header, datagram: &[u8]) -> Result<LessSafeKey, DropReason> {
        let key = self.key.sender_key(header.sender, header.session);
        if self.accepted.is_empty() {
            return Ok(key);
        }
        let opens = |key: &LessSafeKey| {
            let mut copy = datagram.to_vec();
            let (head, sealed) = copy.split_at_mut(HEADER_BYTES);
            key.open_in_place(nonce(header.tick, header.part), Aad::from(&*head), sealed).is_ok()
        };
        std::iter::once(key)
            .chain(self.accepted.iter().map(|k| k.sender_key(header.sender, header.session)))
            .find(opens)
            .ok_or(DropReason::Auth)
    }

    /// The room and epoch this opener is for.
    pub fn room_epoch(&self) -> (RoomId, u64) {
        (self.key.room, self.key.epoch)
    }

    /// Replaces the set of peers; peers kept keep their session and window.
    pub fn set_peers(&mut self, peers: impl IntoIterator<Item = NodeId>) {
        let mut next: HashMap<NodeId, Option<PeerSession>> = HashMap::new();
        for p in peers {
            if p != self.local {
                let state = self.peers.remove(&p).flatten();
                next.insert(p, state);
            }
        }
        self.peers = next;
    }

    /// Opens one datagram whose header has been read. `datagram` is
    /// modified (decrypted in place).
    pub fn open(&mut self, header: &Header, datagram: &mut [u8]) -> Result<Message, DropReason> {
        if header.room != self.key.room {
            return Err(DropReason::Unknown);
        }
        if header.epoch != self.key.epoch {
            return Err(DropReason::WrongEpoch);
        }
        let index = Window::index(header.tick, header.part).ok_or(DropReason::Replay)?;
        let known = match self.peers.get(&header.sender) {
            None => return Err(DropReason::Unknown),
            Some(slot) => slot.as_ref().is_some_and(|s| header.session <= s.session),
        };
        let mut new_key = if known { None } else { Some(self.session_key(header, datagram)?) };
        let Some(slot) = self.peers.get_mut(&header.sender) else {
            return Err(DropReason::Unknown);
        };
        let mut fresh_session = None;
        let (key, window) = match slot {
            Some(s) if header.session == s.session => {
                if !s.window.fresh(index) {
                    return Err(DropReason::Replay);
                }
                (&s.key, &mut s.window)
            }
            Some(s) if header.session < s.session => return Err(DropReason::StaleSession),
            _ => {
                let Some(key) = new_key.take() else { return Err(DropReason::Auth) };
                fresh_session = Some(PeerSession { session: header.session, key, window: Window::default() });
                let s = fresh_session.as_mut().map(|s| (&s.key, &mut s.window));
                s.ok_or(DropReason::Auth)?
            }
        };
        let (head, sealed) = datagram.split_at_mut(HEADER_BYTES);
        let body = key
            .open_in_place(nonce(header.tick, header.part), Aad::from(&*head), sealed)
            .map_err(|_| DropReason::Auth)?;
        let (summary, candidates) = read_body(body)?;
        window.mark(index);
        if let Some(s) = fresh_session {
            *slot = Some(s);
        }
        Ok(Message { header: *header, summary, candidates })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn cand(p: u64, len: usize) -> Candidate {
        Candidate {
            participant: p,
            level: 30,
            rank: 97 * 256,
            selected: p.is_multiple_of(2),
            seq: p as u16,
            rtp_time: 960 * p as u32,
            frame: vec![p as u8; len],
        }
    }

    fn pair() -> (Sealer, Opener) {
        let secret = b"0123456789abcdef0123456789abcdef";
        let room = RoomId::from_name("standup");
        let (a, b) = (NodeId(1), NodeId(2));
        (Sealer::new(&RoomKey::derive(secret, room, 7), a, 1000), Opener::new(RoomKey::derive(secret, room, 7), b, [a]))
    }

    fn open(o: &mut Opener, d: &[u8]) -> Result<Message, DropReason> {
        let h = Header::read(d)?;
        o.open(&h, &mut d.to_vec())
    }

    #[test]
    fn a_tick_round_trips() {
        let (mut s, mut o) = pair();
        let cs = vec![cand(1, 80), cand(2, 0), cand(3, 120)];
        let mut out = Vec::new();
        let sealed = s.seal_tick(5, Summary { participants: 40, talking: 3, candidates: 0 }, &cs, &mut out).unwrap();
        assert_eq!(sealed, Sealed { parts: 1, oversize: 0 });
        let m = open(&mut o, &out[0]).unwrap();
        assert_eq!(m.candidates, cs);
        assert_eq!(m.summary, Summary { participants: 40, talking: 3, candidates: 3 });
        assert_eq!((m.header.tick, m.header.part, m.header.parts), (5, 0, 1));
    }

    #[test]
    fn during_a_roll_a_session_sealed_under_a_previous_secret_opens_and_keeps_its_key() {
        let (old, new) = (b"the old cluster secret, 32 bytes", b"the new cluster secret, 32 bytes");
        let room = RoomId::from_name("standup");
        let (a, b) = (NodeId(1), NodeId(2));
        let mut out = Vec::new();
        // B still seals under the old secret; A opens under the new one, the old one accepted.
        let mut sealer = Sealer::new(&RoomKey::derive(old, room, 7), a, 1000);
        sealer.seal_tick(1, Summary::default(), &[cand(1, 40)], &mut out).unwrap();
        let mut plain = Opener::new(RoomKey::derive(new, room, 7), b, [a]);
        assert_eq!(open(&mut plain, &out[0]), Err(DropReason::Auth), "without the old secret listed");
        let mut rolling = Opener::new(RoomKey::derive(new, room, 7), b, [a]).also_accept(RoomKey::derive(old, room, 7));
        assert_eq!(open(&mut rolling, &out[0]).unwrap().candidates.len(), 1);
        sealer.seal_tick(2, Summary::default(), &[], &mut out).unwrap();
        assert!(open(&mut rolling, &out[0]).is_ok(), "the session keeps the key that opened it");
        // Its own secret still opens; an unrelated one, or another epoch's key, does not.
        let mut current = Sealer::new(&RoomKey::derive(new, room, 7), a, 2000);
        current.seal_tick(1, Summary::default(), &[], &mut out).unwrap();
        assert!(open(&mut rolling, &out[0]).is_ok());
        let mut stranger = Sealer::new(&RoomKey::derive(b"an unrelated cluster secret, 32b", room, 7), a, 3000);
        stranger.seal_tick(1, Summary::default(), &[], &mut out).unwrap();
        assert_eq!(open(&mut rolling, &out[0]), Err(DropReason::Auth));
        let other_epoch = Opener::new(RoomKey::derive(new, room, 7), b, [a]).also_accept(RoomKey::derive(old, room, 8));
        assert!(other_epoch.accepted.is_empty(), "a key of another room or epoch is not taken");
    }

    #[test]
    fn silence_is_one_small_datagram() {
        let (mut s, mut o) = pair();
        let mut out = Vec::new();
        s.seal_tick(1, Summary { participants: 9, ..Summary::default() }, &[], &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].len(), HEADER_BYTES + SUMMARY_BYTES + TAG_BYTES);
        assert!(open(&mut o, &out[0]).unwrap().candidates.is_empty());
    }

    #[test]
    fn big_frames_split_into_self_describing_parts() {
        let (mut s, mut o) = pair();
        let cs: Vec<Candidate> = (1..=6).map(|p| cand(p, 400)).collect();
        let mut out = Vec::new();
        let sealed = s.seal_tick(3, Summary::default(), &cs, &mut out).unwrap();
        assert_eq!(sealed.parts, 3);
        let mut got = Vec::new();
        // Any order: each part stands alone.
        for d in out.iter().rev() {
            assert!(d.len() <= MAX_DATAGRAM_BYTES);
            let m = open(&mut o, d).unwrap();
            assert_eq!((m.header.parts, m.summary.candidates), (3, 6));
            got.extend(m.candidates);
        }
        got.sort_by_key(|c| c.participant);
        assert_eq!(got, cs);
        // An oversize frame is left out and counted, the rest goes.
        let cs = vec![cand(1, MAX_FRAME_BYTES + 1), cand(2, MAX_FRAME_BYTES)];
        let sealed = s.seal_tick(4, Summary::default(), &cs, &mut out).unwrap();
        assert_eq!(sealed, Sealed { parts: 1, oversize: 1 });
        assert_eq!(out[0].len(), MAX_DATAGRAM_BYTES);
        assert_eq!(open(&mut o, &out[0]).unwrap().candidates, cs[1..]);
        // Too many candidates, or ticks going backwards, are refused.
        let many: Vec<Candidate> = (0..=MAX_CANDIDATES as u64).map(|p| cand(p, 1)).collect();
        assert_eq!(s.seal_tick(9, Summary::default(), &many, &mut out), Err(SealError::TooManyCandidates));
        assert_eq!(s.seal_tick(4, Summary::default(), &[], &mut out), Err(SealError::TickNotAfterLast));
    }

    #[test]
    fn tampered_replayed_foreign_and_stale_datagrams_are_refused() {
        let (mut s, mut o) = pair();
        let mut out = Vec::new();
        s.seal_tick(10, Summary::default(), &[cand(1, 50)], &mut out).unwrap();
        let good = out[0].clone();
        for i in [0usize, 5, 30, HEADER_BYTES + 2, good.len() - 1] {
            let mut bad = good.clone();
            bad[i] ^= 1;
            assert!(open(&mut o, &bad).is_err(), "byte {i} flipped");
        }
        assert!(open(&mut o, &good).is_ok());
        assert_eq!(open(&mut o, &good), Err(DropReason::Replay));
        // Older ticks within the window are accepted once; beyond it, never.
        s.seal_tick(11, Summary::default(), &[], &mut out).unwrap();
        let t11 = out[0].clone();
        s.seal_tick(40, Summary::default(), &[], &mut out).unwrap();
        assert!(open(&mut o, &out[0]).is_ok());
        assert_eq!(open(&mut o, &t11), Err(DropReason::Replay), "29 ticks back is outside the window");
        // Another key (another secret, epoch or room) does not open.
        let room = RoomId::from_name("standup");
        let mut other = Sealer::new(&RoomKey::derive(b"another secret, also 32 bytes...", room, 7), NodeId(1), 1000);
        other.seal_tick(50, Summary::default(), &[], &mut out).unwrap();
        assert_eq!(open(&mut o, &out[0]), Err(DropReason::Auth));
        let mut epoch8 = Sealer::new(&RoomKey::derive(b"0123456789abcdef0123456789abcdef", room, 8), NodeId(1), 1000);
        epoch8.seal_tick(50, Summary::default(), &[], &mut out).unwrap();
        assert_eq!(open(&mut o, &out[0]), Err(DropReason::WrongEpoch));
        // A stranger, and our own datagrams, are unknown.
        let key = RoomKey::derive(b"0123456789abcdef0123456789abcdef", room, 7);
        Sealer::new(&key, NodeId(3), 1).seal_tick(1, Summary::default(), &[], &mut out).unwrap();
        assert_eq!(open(&mut o, &out[0]), Err(DropReason::Unknown));
        Sealer::new(&key, NodeId(2), 1).seal_tick(1, Summary::default(), &[], &mut out).unwrap();
        assert_eq!(open(&mut o, &out[0]), Err(DropReason::Unknown));
        // A restarted sender (newer session) is accepted from tick 0; the old session no more.
        let mut restarted = Sealer::new(&key, NodeId(1), 2000);
        restarted.seal_tick(0, Summary::default(), &[], &mut out).unwrap();
        assert!(open(&mut o, &out[0]).is_ok());
        assert_eq!(open(&mut o, &t11), Err(DropReason::StaleSession));
        // A forged newer session does not displace the real one.
        let mut forged = out[0].clone();
        forged[28..36].copy_from_slice(&3000u64.to_be_bytes());
        assert_eq!(open(&mut o, &forged), Err(DropReason::Auth));
        restarted.seal_tick(1, Summary::default(), &[], &mut out).unwrap();
        assert!(open(&mut o, &out[0]).is_ok());
    }

    mod hostile {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn random_bytes_never_panic_and_never_open(bytes in prop::collection::vec(any::<u8>(), 0..1400)) {
                let (_, mut o) = pair();
                if let Ok(h) = Header::read(&bytes) {
                    prop_assert!(o.open(&h, &mut bytes.clone()).is_err());
                }
            }

            #[test]
            fn a_real_header_over_random_bytes_never_opens(body in prop::collection::vec(any::<u8>(), 0..1200)) {
                let (mut s, mut o) = pair();
                let mut out = Vec::new();
                s.seal_tick(1, Summary::default(), &[], &mut out).unwrap();
                let mut d = out[0][..HEADER_BYTES].to_vec();
                d.extend_from_slice(&body);
                if let Ok(h) = Header::read(&d) {
                    prop_assert!(o.open(&h, &mut d).is_err());
                }
            }

            #[test]
            fn the_body_parser_is_bounded(
                summary in prop::collection::vec(any::<u8>(), 8),
                items in prop::collection::vec((any::<u64>(), 0u8..130, 0u8..3, any::<u16>(), 0u16..1300, prop::collection::vec(any::<u8>(), 0..200)), 0..40),
                cut in any::<prop::sample::Index>(),
            ) {
                // A plausible body (what a holder of the key could send): it parses or is refused, never panics.
                let mut b = summary.clone();
                for (p, level, flags, rank, len, frame) in &items {
                    b.extend_from_slice(&p.to_be_bytes());
                    b.extend_from_slice(&[*level, *flags]);
                    b.extend_from_slice(&rank.to_be_bytes());
                    b.extend_from_slice(&[0; 6]);
                    b.extend_from_slice(&len.to_be_bytes());
                    b.extend_from_slice(frame);
                }
                b.truncate(cut.index(b.len() + 1));
                if let Ok((sum, cands)) = read_body(&b) {
                    prop_assert!(cands.len() <= MAX_CANDIDATES && cands.len() <= usize::from(sum.candidates));
                    prop_assert!(cands.iter().all(|c| c.frame.len() <= MAX_FRAME_BYTES && c.level <= 127));
                }
            }

            #[test]
            fn a_changed_datagram_never_opens(
                k in 0usize..8,
                len in 0usize..300,
                edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
                cut in any::<prop::sample::Index>(),
                extra in prop::collection::vec(any::<u8>(), 0..8),
            ) {
                let (mut s, _) = pair();
                let cs: Vec<Candidate> = (0..k as u64).map(|p| cand(p, len)).collect();
                let mut out = Vec::new();
                s.seal_tick(1, Summary::default(), &cs, &mut out).unwrap();
                for d in &out {
                    let mut bad = d.clone();
                    for (i, v) in &edits {
                        let i = i.index(bad.len());
                        bad[i] = *v;
                    }
                    let cut = cut.index(bad.len() + 1);
                    bad.truncate(cut);
                    bad.extend_from_slice(&extra);
                    let (_, mut o) = pair();
                    let opened = Header::read(&bad).map_err(DropReason::from).and_then(|h| o.open(&h, &mut bad.clone()));
                    prop_assert!(opened.is_err() || &bad == d, "a changed datagram opened");
                }
            }
        }
    }
}
