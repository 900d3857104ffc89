//! # tutti-mix: the mixing core of tutti
//!
//! Every participant of a room sends one Opus stream; every 20 ms this core
//! produces what each one must hear: the mix of everyone but themselves
//! ("N-minus-self"), encoded. It holds no sockets, no async runtime and no
//! clock: packets and tick numbers are passed in, so it runs the same in a
//! server, an offline tool or a test that drives it tick by tick.
//!
//! ## One tick
//!
//! ```text
//! push_packet ─► jitter buffer (per participant, ordered by RTP sequence)
//! tick:
//!  A  per participant (sharded)  pop a frame, read its RFC 6464 level
//!                                (decode to measure it when absent),
//!                                update talking state; shard's top-K;
//!                                decode current speakers (PLC, or
//!                                in-band FEC on loss)
//!  B  once (O(shards·K))         select K speakers: hold + hysteresis
//!  C  per new speaker            decode (a fresh decoder at the onset)
//!  D  once + per stream          total = Σ speakers; listeners get
//!                                encode(total), shared; each speaker k
//!                                gets encode(total − own_k): K+1 encodes
//! ```
//!
//! Then [`Room::deliveries`] yields each participant's payload by reference:
//! the listeners' one shared encode, or a speaker's own stream.
//!
//! Work that grows with N (phase A) is split in shards of
//! [`RoomConfig::shard_size`] participants that run on a rayon pool
//! ([`MixPool`], threads `mix-0`, `mix-1`, …); codec work is O(K).
//!
//! ## Example
//!
//! ```
//! use bytes::Bytes;
//! use tutti_mix::{MixPool, Packet, ParticipantId, Room, RoomConfig};
//!
//! let pool = MixPool::new(2)?;
//! let mut room = Room::new(RoomConfig::default())?;
//! let (alice, bob) = (ParticipantId(1), ParticipantId(2));
//! room.add_participant(alice)?;
//! room.add_participant(bob)?;
//!
//! // An Opus frame of a 440 Hz tone, as Alice's client would send it.
//! let mut enc = opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Voip)?;
//! let mut tick = 0;
//! for seq in 0..10u16 {
//!     let pcm: Vec<f32> = (0..960)
//!         .map(|i| 0.3 * (6.2832 * 440.0 * (seq as f32 * 960.0 + i as f32) / 48_000.0).sin())
//!         .collect();
//!     let payload = Bytes::from(enc.encode_vec_float(&pcm, 1500)?);
//!     room.push_packet(alice, Packet { seq, timestamp: seq as u32 * 960, payload, level: Some(13) })?;
//!     let report = room.tick(&pool, tick);
//!     tick += 1;
//!     // Bob hears Alice; Alice hears everyone but herself (here: silence).
//!     assert!(room.payload_for(bob).is_some());
//!     if seq > 2 {
//!         assert_eq!(report.speakers[0].id, alice);
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod codec;
mod config;
mod dsp;
mod error;
mod jitter;
mod pool;
mod probe;
mod room;

pub use codec::{DecodeFailure, Decoder, Encoder, SAMPLE_RATE};
pub use config::{DTX_INTERVAL_TICKS, EncoderConfig, JitterConfig, MAX_SPEAKERS, RoomConfig, SpeakerLimit};
pub use dsp::{FRAME_SAMPLES, Limiter, Pcm, accumulate, goertzel, level_of, mix_minus, tone};
pub use error::MixError;
pub use jitter::{JitterBuffer, JitterStats, MAX_PAYLOAD_BYTES, Packet, Playout, PushOutcome};
pub use pool::MixPool;
pub use probe::{Activity, DTX_FRAME, OpusMode, PacketInfo, inspect};
pub use room::{
    ActiveSpeaker, Delivery, MAX_GAIN, MAX_SHED_LEVEL, MixMode, ParticipantStats, Room, TalkEvent, TickReport,
};

/// Identifies a participant within a room (assigned by the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ParticipantId(pub u64);

impl std::fmt::Display for ParticipantId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}
