//! # tutti-mesh: one room across nodes, the media between them
//!
//! A room may span several tutti nodes. Each node mixes its own
//! participants; every tick (20 ms) it sends every other node of the room
//! its **candidates**: the original Opus frames of its local loudest
//! participants (never PCM, never a mix), and every node runs the same
//! [`select`] over local and remote candidates to pick the room's top K.
//! A node forwards only frames that originate on it: no loops. This crate
//! is that transport and that choice, and nothing else: no mixer, no
//! server types, no Redis (membership, epochs and peer addresses come from
//! the cluster directory, through the caller).
//!
//! ## Data flow
//!
//! ```text
//! mix clock, tick t, room r (epoch e), on node A:
//!   local top-K + challengers + A's incumbents ─► Candidate { participant, level, rank,
//!        selected, seq, rtp_time, frame: original Opus }          (≤ MAX_CANDIDATES)
//!   MeshSocket::send_tick(r, t, Summary, &candidates)
//!        ─► Sealer: header ‖ AES-256-GCM(summary ‖ candidates), ≤ 1200 B per datagram,
//!           split into self-describing parts when K frames do not fit
//!        ─► non-blocking send_to every peer of r
//! node B, thread mesh-rx:
//!   recv ─► Header::read (bounds) ─► room known? sender is a peer, from its address?
//!        ─► epoch ─► session ─► replay window ─► open (tag) ─► parse body (bounds)
//!        ─► bounded queue (overflow counted) ─► MeshSocket::drain by the mix clock
//!   Liveness::heard(sender, at) ;  select(K, hysteresis, local ∪ remote entries)
//! ```
//!
//! ## Wire format (version 1, big-endian)
//!
//! ```text
//! header (44 B, plaintext, the AEAD's associated data)
//!   0  u8  version = 1          1  u8  kind = 0 (tick message)
//!   2  u8  part (0-based)       3  u8  parts (1..=8)
//!   4  u64 room id              12 u64 epoch
//!   20 u64 sender node id       28 u64 sender session
//!   36 u64 tick
//! body (sealed)
//!   summary (8 B): u32 participants on the sender, u16 talking,
//!                  u8 candidates in the tick (all parts), u8 candidates in this part
//!   per candidate (20 B + frame):
//!     u64 participant, u8 level (RFC 6464 −dBov, ≤127), u8 flags (bit 0: selected),
//!     u16 rank (smoothed loudness, 1/256 dB), u16 RTP sequence, u32 RTP timestamp,
//!     u16 frame length (≤ MAX_FRAME_BYTES), frame (the original Opus bytes)
//! tag (16 B)
//! ```
//!
//! Ids on the wire are 64-bit: [`NodeId::from_name`] and
//! [`RoomId::from_name`] hash the cluster's strings. A silent tick is one
//! 68-byte datagram (the summary makes silence explicit). A datagram is at
//! most [`MAX_DATAGRAM_BYTES`] (1200: no IP fragmentation, even on a
//! 1280-byte IPv6 path); when a tick's frames do not fit, they are packed in
//! order into up to [`MAX_PARTS`] datagrams, each with the header and the
//! summary, so each is opened, checked and used alone (a lost part loses
//! only its candidates). A frame over [`MAX_FRAME_BYTES`] is left out and
//! counted. Decoding never panics and never reads past a bound (fuzzable:
//! [`Header::read`] then [`Opener::open`]).
//!
//! ## Keys and trust
//!
//! Nodes share the cluster's secret (`auth.secret`, which cluster mode
//! requires to be the same on every node); the caller passes it. A room key
//! per (room, epoch) is derived with HKDF-SHA256 (salt `tutti v1
//! cluster-mesh`: its own purpose, never the token key), and from it one
//! AES-256-GCM key per sender session, so the nonce `tick ‖ part` never
//! repeats under a key, even across a node's restart or a room left and
//! joined again (each is a new, larger session: [`MeshSocket::session_now`]). The
//! header is authenticated. Refused and counted ([`MeshStats`]): datagrams
//! that do not parse, from a room or node not configured or from another
//! address than the peer's, of another epoch, failing the tag (tampered,
//! other key), replayed or older than the window ([`REPLAY_WINDOW_TICKS`]),
//! or of a sender's older session. A fenced epoch's datagrams stop opening
//! as soon as the caller sets the new epoch.
//!
//! ## UDP + AEAD rather than QUIC datagrams
//!
//! Each message is independent and useless after its tick: no streams, no
//! retransmission, no congestion window wanted (a late frame is a lost
//! frame). The peers and the shared secret are already known from the
//! cluster's signed directory, so QUIC's handshake and certificates would
//! add a second identity system and a connection state machine per peer
//! pair; QUIC datagrams are capped by the path MTU too, so splitting would
//! remain ours; and `quinn` wants an async runtime on the media path
//! (`quinn-proto` alone is sans-IO, but still adds per-packet framing, ACK
//! frames and timers). Measured here (`cargo bench -p tutti-mesh --bench
//! mesh`, shared 2-core box, best of alternated rounds): encode + seal plus
//! header check + open + decode of one message costs ~0.8–1.2 µs for K = 3
//! to 5 frames of 80 bytes, about a third of the ~3–4 µs a datagram costs
//! the kernel on loopback: the transport is the syscall, which QUIC would
//! not save. AES-256-GCM is ~1.9–2× faster than ChaCha20-Poly1305 here
//! (AES-NI), hence the choice. What UDP+AEAD lacks, forward secrecy from a
//! handshake, is bounded by per-epoch keys.
//!
//! ## Selection and liveness
//!
//! [`select`] is a pure function of one tick's candidates; hysteresis
//! state travels in them (each origin flags its incumbents), so nodes that
//! saw the same candidates agree, in any order, and nodes that missed a
//! datagram agree again at the next tick they see the same ones.
//! [`Liveness`] marks a peer absent after [`ABSENT_AFTER`] (200 ms) without
//! a verified datagram; its candidates leave selection.
//!
//! ## Example
//!
//! ```
//! use tutti_mesh::{Candidate, MeshSocket, NodeId, Peer, RoomId, Summary};
//! let secret = b"the auth.secret all nodes share!";
//! let (a, b) = (NodeId::from_name("node-a"), NodeId::from_name("node-b"));
//! let mut sa = MeshSocket::bind("127.0.0.1:0".parse().unwrap(), a, 1, secret, 256).unwrap();
//! let mut sb = MeshSocket::bind("127.0.0.1:0".parse().unwrap(), b, 1, secret, 256).unwrap();
//! let room = RoomId::from_name("standup");
//! sa.set_room(room, 3, &[Peer { node: b, addr: sb.local_addr().unwrap() }]);
//! sb.set_room(room, 3, &[Peer { node: a, addr: sa.local_addr().unwrap() }]);
//! let alice = Candidate { participant: 1, level: 20, rank: 107 * 256, selected: false,
//!                         seq: 7, rtp_time: 960, frame: vec![0xfc, 1, 2, 3] };
//! sa.send_tick(room, 1, Summary { participants: 1, talking: 1, candidates: 1 }, &[alice.clone()]).unwrap();
//! let mut got = Vec::new();
//! for _ in 0..200 {
//!     if sb.drain(16, &mut got) > 0 { break }
//!     std::thread::sleep(std::time::Duration::from_millis(5));
//! }
//! assert_eq!(got[0].message.candidates, vec![alice]);
//! ```

mod crypto;
mod error;
mod liveness;
mod select;
mod socket;
mod wire;

pub use crypto::{KEY_SALT, Message, Opener, REPLAY_WINDOW_TICKS, RoomKey, Sealed, Sealer};
pub use error::{DecodeError, DropReason, SealError};
pub use liveness::{ABSENT_AFTER, Liveness};
pub use select::{Entry, Speaker, select};
pub use socket::{MeshSocket, MeshStats, Peer, Received};
pub use wire::{
    CANDIDATE_FIXED_BYTES, Candidate, HEADER_BYTES, Header, MAX_CANDIDATES, MAX_DATAGRAM_BYTES, MAX_FRAME_BYTES,
    MAX_PARTS, NodeId, RoomId, SUMMARY_BYTES, Summary, TAG_BYTES, VERSION,
};
