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
//!                                (without one: read the Opus packet — DTX,
//!                                SILK VAD flag — and decode only what it
//!                                does not settle), update talking state;
//!                                shard's top-K; decode current speakers
//!                                while mixing (PLC, or in-band FEC on loss)
//!  B  once (O(shards·K))         select K speakers: hold + hysteresis;
//!                                choose the mode (below)
//!  C  per new speaker            decode (a fresh decoder at the onset)
//!     per speaker (in A or C)    voice: noise suppression (RNNoise) and
//!                                loudness normalisation, where on
//!  D  once + per stream          total = Σ speakers; listeners get
//!                                encode(total), shared; each speaker k
//!                                gets encode(total − own_k): K+1 encodes
//! ```
//!
//! ## What each participant receives: [`Delivery`]
//!
//! Codec work is spent only where it changes what someone hears
//! ([`MixMode`], chosen each tick after the selection):
//!
//! | selected speakers | listeners get | a speaker gets | codec work |
//! |---|---|---|---|
//! | none ([`RoomConfig::dtx`]) | [`Delivery::Dtx`] every [`DTX_INTERVAL_TICKS`] ticks (and on entering silence), [`Delivery::Nothing`] between | — | none |
//! | one ([`RoomConfig::passthrough`]) | [`Delivery::Forward`]: the speaker's own Opus frame, unchanged | DTX cadence as above | none |
//! | one, voice processed | [`Delivery::Mix`]: encode(their processed voice) | DTX cadence as above | 1 decode, 1 encode |
//! | two or more | [`Delivery::Mix`]: encode(total), shared | [`Delivery::Mix`]: encode(total − own) | K decodes, K+1 encodes |
//!
//! With `dtx` off, silence is an encoded frame every tick; with
//! `passthrough` off, one speaker is mixed like two (the policy before both
//! existed). The transport sends every non-empty delivery as the
//! participant's next RTP packet: its own SSRC and sequence number, and the
//! timestamp `tick × 960 + offset`, so the gaps are gaps in time the
//! receiver fills with comfort noise, never delay.
//!
//! A *source* ([`Room::add_source`]: a file played into the room) is heard
//! like a speaker and sent nothing: selected among the K ahead of any
//! talker while it sounds, forwarded when it
//! is the only one, mixed otherwise, with no N-minus-self encode of its own.
//!
//! A listener's one decoder hears forwarded frames (the speaker's encoder)
//! and then the mix (the room's encoder). Into the mix, the listener
//! encoder is first fed the forwarded speaker's last four frames and codes
//! two frames without inter-frame prediction; out of it, the room waits
//! [`RoomConfig::mix_hold_ticks`] and a pause of the remaining speaker.
//! `tests/switch_click.rs` measures the result through real Opus.
//!
//! ## Whisper channels
//!
//! [`Room::open_channel`] makes some participants hear the room plus a
//! channel: the channel's whisperers are left out of the room's mix and
//! heard by its members only. A tick then encodes the room's mix, one
//! N-minus-self per selected speaker (whisperers included, all within K)
//! and one "room + channel" mix per channel with a selected whisperer: at
//! most `1 + K + min(channels, K)` encodes, whatever the number of
//! listeners; a channel whose whisperers are silent costs nothing. The
//! room's mode (DTX, forwarding, mix) is chosen on the room's own speakers.
//! `tests/whisper.rs` checks who hears whom and counts the encodes.
//!
//! ## Remote participants and selection across nodes
//!
//! A room may span several nodes (issue 27): each node mixes for its own
//! participants and hears the others' through this seam, one codec
//! generation end to end. [`Room::add_remote`] adds a participant hosted
//! elsewhere: heard like a source (selected, mixed, forwarded alone, sent
//! nothing, no N-minus-self of its own, not counted as a participant), its
//! frames handed in per tick ([`Room::put_remote_frame`]: the original Opus
//! bytes and level its node sent) instead of a jitter buffer; a tick
//! without one is a loss, concealed while it is a speaker. After each tick
//! [`Room::candidates`] lists this node's loudest local participants
//! ([`LocalCandidate`]: the frame just played, the smoothed loudness in
//! 1/256 dB, whether selected), which the caller sends to the other nodes;
//! every node then runs the same selection over all nodes' candidates and
//! imposes it with [`Room::set_selection`], so every node mixes the same K
//! speakers. N-minus-self stays intact: a speaker is left out of their own
//! mix on their own node, where they are local. A lone remote speaker is
//! forwarded byte for byte. `tests/remote.rs` runs two rooms as two nodes
//! through real Opus. A room without remotes and without a selection from
//! outside runs as before (one branch per participant per tick).
//!
//! ## Spatial rooms
//!
//! With [`RoomConfig::spatial`] every speaker sits on a seat of an arc
//! ([`Room::set_seat`]; by default [`default_seat`] of their id, the server
//! sets one from their identity), seats of the selected speakers never
//! collide while free ones exist, and the tick renders the mix once in
//! stereo for the participants marked with [`Room::set_stereo`] (one stereo
//! encode for all of them, a stereo N-minus-self for each such speaker) and
//! once in mono, the two channels averaged, for everyone else and the
//! room's outputs. A room with stereo listeners mixes a lone speaker rather
//! than forwarding their mono frame (it would be heard from the middle):
//! at most K+2 encodes a tick. Whisper channels' mixes stay mono.
//! `tests/spatial.rs` checks the render per channel.
//!
//! The stereo render is panned (constant power), or with
//! [`RoomConfig::binaural`] each seat's voices go through a dummy head's
//! impulse responses (`binaural.rs`: summed per seat, then one FIR per
//! occupied seat and ear, O(K)); `tests/binaural.rs` checks the interaural
//! level and delay, N-minus-self and the mono level through real Opus.
//!
//! ## Voice processing
//!
//! Only the selected speakers' voices are processed, so the cost is O(K):
//! noise suppression ([`RoomConfig::noise_suppression`]: RNNoise, for
//! participants marked with [`Room::set_raw_source`] under the default
//! `Auto`) and loudness normalisation ([`RoomConfig::loudness`]: a slow,
//! bounded gain toward [`RoomConfig::loudness_target_dbfs`], frozen in
//! pauses), each switchable per participant ([`Room::set_noise_suppression`],
//! [`Room::set_loudness`]). The limiter stays the last stage of every mix.
//! A speaker whose voice is processed is never forwarded: forwarding would
//! skip the processing. `tests/voice.rs` measures both on real speech.
//!
//! Under load the caller sheds cost in steps with [`Room::set_shed_level`]
//! (lower encoder complexity, then fewer speakers) before it has to skip a tick.
//!
//! ## Example
//!
//! ```
//! use bytes::Bytes;
//! use tutti_mix::{Delivery, MixPool, Packet, ParticipantId, Room, RoomConfig};
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
//!     if seq > 2 {
//!         assert_eq!(report.speakers[0].id, alice);
//!         // Bob hears Alice: her own frame, forwarded (she is the only speaker).
//!         assert!(matches!(room.delivery_for(bob), Some(Delivery::Forward { from, .. }) if *from == alice));
//!         // Alice hears everyone but herself: nobody, so DTX now and then.
//!         assert!(matches!(room.delivery_for(alice), Some(Delivery::Nothing | Delivery::Dtx(_))));
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod binaural;
mod codec;
mod config;
mod dsp;
mod error;
mod id;
mod jitter;
pub mod phone;
mod pool;
mod probe;
pub mod resample;
mod room;
mod spatial;
mod voice;

pub use codec::{DecodeFailure, Decoder, Encoder, SAMPLE_RATE, STEREO_BITRATE_PERCENT};
pub use config::{DTX_INTERVAL_TICKS, EncoderConfig, JitterConfig, MAX_SPEAKERS, RoomConfig, SpeakerLimit};
pub use dsp::{FRAME_SAMPLES, Limiter, Pcm, accumulate, goertzel, level_of, mix_minus, tone};
pub use error::MixError;
pub use id::ParticipantId;
pub use jitter::{JitterBuffer, JitterStats, MAX_PAYLOAD_BYTES, Packet, Playout, PushOutcome};
pub use phone::{G711, InputCodec};
pub use pool::MixPool;
pub use probe::{Activity, DTX_FRAME, OpusMode, PacketInfo, inspect};
pub use room::{
    ActiveSpeaker, ChannelId, Delivery, LocalCandidate, MAX_CHANNELS, MAX_GAIN, MAX_SHED_LEVEL, MixMode,
    ParticipantStats, Room, TalkEvent, TickReport, VoiceStatus,
};
pub use spatial::{
    MAX_SEAT, SEATS, Stereo, accumulate_scaled, default_seat, minus_scaled, mono_gain, place, seat_gains,
};
pub use voice::{
    DEFAULT_LOUDNESS_TARGET_DBFS, LOUDNESS_GATE_DBFS, LOUDNESS_MAX_GAIN_DB, NoiseSuppression, NoiseSuppressor,
    Normaliser,
};
