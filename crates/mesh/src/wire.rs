//! The wire format of a mesh datagram: a plaintext header (the AEAD's
//! associated data), then the sealed body (summary + candidates), then the
//! 16-byte tag. See the crate documentation for the layout.

use crate::error::DecodeError;

/// Wire format version carried in every datagram's first byte.
pub const VERSION: u8 = 1;
/// Bytes of the plaintext header (authenticated, not encrypted).
pub const HEADER_BYTES: usize = 44;
/// Bytes of the AEAD tag after the sealed body.
pub const TAG_BYTES: usize = 16;
/// Largest datagram sent or accepted: fits a 1280-byte IPv6 minimum MTU
/// with IP and UDP headers, so no datagram is ever fragmented.
pub const MAX_DATAGRAM_BYTES: usize = 1200;
/// Bytes of the per-part summary.
pub const SUMMARY_BYTES: usize = 8;
/// Bytes of a candidate before its Opus frame.
pub const CANDIDATE_FIXED_BYTES: usize = 20;
/// Largest Opus frame a candidate may carry: what fits alone in one
/// datagram. (RFC 6716 allows 1275; a 20 ms voice frame is ~80 at 32 kb/s.)
pub const MAX_FRAME_BYTES: usize =
    MAX_DATAGRAM_BYTES - HEADER_BYTES - TAG_BYTES - SUMMARY_BYTES - CANDIDATE_FIXED_BYTES;
/// Most candidates one node sends for one tick (over all its parts):
/// [`MAX_SPEAKERS`](https://docs.rs/) of the mixer (16) plus challengers.
pub const MAX_CANDIDATES: usize = 32;
/// Most datagrams ("parts") one node sends for one tick.
pub const MAX_PARTS: usize = 8;

/// A node, on the wire: 64 bits, the same on every node
/// ([`NodeId::from_name`] hashes the cluster's node id string).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u64);

/// A room, on the wire: 64 bits ([`RoomId::from_name`] hashes the room's name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RoomId(pub u64);

fn hash64(domain: &str, name: &str) -> u64 {
    let d = ring::digest::digest(&ring::digest::SHA256, format!("tutti v1 {domain}\0{name}").as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&d.as_ref()[..8]);
    u64::from_be_bytes(b)
}

impl NodeId {
    /// The first 64 bits of SHA-256 of the node's id string (a collision
    /// among a room's nodes has odds ~n²/2⁶⁵).
    pub fn from_name(name: &str) -> Self {
        Self(hash64("mesh-node", name))
    }
}

impl RoomId {
    /// The first 64 bits of SHA-256 of the room's name.
    pub fn from_name(name: &str) -> Self {
        Self(hash64("mesh-room", name))
    }
}

/// The plaintext header of every datagram: what it is about, who sent it,
/// and which part of the sender's tick it is. It is the AEAD's associated
/// data, so none of it can be changed in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The room.
    pub room: RoomId,
    /// The room's epoch (from the cluster directory); the key is per epoch.
    pub epoch: u64,
    /// The sending node.
    pub sender: NodeId,
    /// The sender's session: larger than any earlier session of the same
    /// node in the room (a new one at each start and each room joined).
    /// Keys are per session, so a restarted node never reuses a nonce.
    pub session: u64,
    /// The tick the candidates belong to.
    pub tick: u64,
    /// This datagram's index among the tick's parts (0-based).
    pub part: u8,
    /// How many parts the sender sent for this tick (1..=[`MAX_PARTS`]).
    pub parts: u8,
}

impl Header {
    /// Writes the header's [`HEADER_BYTES`].
    pub fn write(&self, out: &mut Vec<u8>) {
        out.push(VERSION);
        out.push(0); // kind: 0 = tick message; others reserved.
        out.push(self.part);
        out.push(self.parts);
        out.extend_from_slice(&self.room.0.to_be_bytes());
        out.extend_from_slice(&self.epoch.to_be_bytes());
        out.extend_from_slice(&self.sender.0.to_be_bytes());
        out.extend_from_slice(&self.session.to_be_bytes());
        out.extend_from_slice(&self.tick.to_be_bytes());
    }

    /// Reads and checks a datagram's header (no key needed).
    pub fn read(datagram: &[u8]) -> Result<Self, DecodeError> {
        if datagram.len() > MAX_DATAGRAM_BYTES {
            return Err(DecodeError::TooLarge);
        }
        if datagram.len() < HEADER_BYTES + TAG_BYTES {
            return Err(DecodeError::Truncated);
        }
        let mut r = Reader(&datagram[..HEADER_BYTES]);
        let version = r.u8()?;
        let kind = r.u8()?;
        if version != VERSION || kind != 0 {
            return Err(DecodeError::Version(version));
        }
        let part = r.u8()?;
        let parts = r.u8()?;
        if parts == 0 || usize::from(parts) > MAX_PARTS || part >= parts {
            return Err(DecodeError::BadPart);
        }
        Ok(Self {
            room: RoomId(r.u64()?),
            epoch: r.u64()?,
            sender: NodeId(r.u64()?),
            session: r.u64()?,
            tick: r.u64()?,
            part,
            parts,
        })
    }
}

/// What a node says about its share of the room every tick, in every part,
/// so that silence is explicit (a tick with no candidates still sends it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    /// Participants of the room hosted on the sender (saturating).
    pub participants: u32,
    /// Of them, how many are talking (within their hold time).
    pub talking: u16,
    /// Candidates the sender sent for this tick over all parts.
    pub candidates: u8,
}

/// One candidate speaker: a participant hosted on the sender, with the
/// original Opus frame it sent this tick (never PCM, never a mix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The participant (ids are unique in a room across nodes).
    pub participant: u64,
    /// RFC 6464 audio level of the frame: −dBov, 0 loudest, 127 silent.
    pub level: u8,
    /// The origin node's smoothed loudness of the participant (what
    /// selection ranks), in 1/256 dB; larger is louder.
    pub rank: u16,
    /// The origin node counted this participant among the room's selected
    /// speakers last tick (its incumbency, for hysteresis).
    pub selected: bool,
    /// RTP sequence number of the frame as the participant sent it.
    pub seq: u16,
    /// RTP timestamp of the frame as the participant sent it.
    pub rtp_time: u32,
    /// The participant's Opus frame, unchanged (empty: lost this tick).
    pub frame: Vec<u8>,
}

impl Candidate {
    /// Bytes this candidate takes in a body.
    pub fn wire_len(&self) -> usize {
        CANDIDATE_FIXED_BYTES + self.frame.len()
    }

    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.participant.to_be_bytes());
        out.push(self.level.min(127));
        out.push(u8::from(self.selected));
        out.extend_from_slice(&self.rank.to_be_bytes());
        out.extend_from_slice(&self.seq.to_be_bytes());
        out.extend_from_slice(&self.rtp_time.to_be_bytes());
        // Callers keep frames to MAX_FRAME_BYTES (< 2^16).
        out.extend_from_slice(&(self.frame.len() as u16).to_be_bytes());
        out.extend_from_slice(&self.frame);
    }
}

impl Summary {
    pub(crate) fn write(&self, in_part: u8, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.participants.to_be_bytes());
        out.extend_from_slice(&self.talking.to_be_bytes());
        out.push(self.candidates);
        out.push(in_part);
    }
}

/// Parses an opened body: the summary and this part's candidates. Bounded:
/// at most [`MAX_CANDIDATES`], each frame at most [`MAX_FRAME_BYTES`], no
/// trailing bytes.
pub(crate) fn read_body(body: &[u8]) -> Result<(Summary, Vec<Candidate>), DecodeError> {
    let mut r = Reader(body);
    let summary = Summary { participants: r.u32()?, talking: r.u16()?, candidates: r.u8()? };
    let in_part = usize::from(r.u8()?);
    if in_part > MAX_CANDIDATES
        || usize::from(summary.candidates) > MAX_CANDIDATES
        || in_part > usize::from(summary.candidates)
    {
        return Err(DecodeError::TooManyCandidates);
    }
    let mut candidates = Vec::with_capacity(in_part);
    for _ in 0..in_part {
        let participant = r.u64()?;
        let level = r.u8()?;
        let flags = r.u8()?;
        if level > 127 || flags > 1 {
            return Err(DecodeError::BadField);
        }
        let rank = r.u16()?;
        let seq = r.u16()?;
        let rtp_time = r.u32()?;
        let len = usize::from(r.u16()?);
        if len > MAX_FRAME_BYTES {
            return Err(DecodeError::FrameTooLarge);
        }
        let frame = r.take(len)?.to_vec();
        candidates.push(Candidate { participant, level, rank, selected: flags == 1, seq, rtp_time, frame });
    }
    if !r.0.is_empty() {
        return Err(DecodeError::TrailingBytes);
    }
    Ok((summary, candidates))
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.0.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array()?))
    }
}
