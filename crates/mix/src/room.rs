//! A room: its participants in shards, its speaker selection and its streams.
//!
//! [`Room`] is driven from outside: packets in ([`Room::push_packet`]), one
//! tick every 20 ms ([`Room::tick`]), then what each participant is sent read
//! back (the accessors below). Its parts, one concern a file:
//!
//! - `members`: joining and leaving, per-participant settings and counters;
//! - `participant`: one participant's state and its per-frame work (decode
//!   once a tick, voice processing, measuring frames without a level);
//! - `shard`: phase A of a tick, run per shard (pop, level, talking state,
//!   the shard's top-K candidates);
//! - `select`: speaker selection with hold and hysteresis;
//! - `tick`: the tick itself, from phase A to the K+1 encodes;
//! - `mode`: how listeners are served (DTX, forwarding, mix) and the switch
//!   from forwarding to the mix;
//! - `delivery`: what a participant is sent and the encoded streams behind it;
//! - `channel` and `whisper`: whisper channels and their pass of a tick;
//! - `seats`: a spatial room's seats and stereo listeners;
//! - `shed`: cost shedding under load;
//! - `remote`: remotes and the selection across nodes;
//! - `report`: what a tick and a participant report.

mod channel;
mod delivery;
mod members;
mod mode;
mod participant;
mod remote;
mod report;
mod seats;
mod select;
mod shard;
mod shed;
mod tick;
mod whisper;

pub use channel::{ChannelId, MAX_CHANNELS};
pub use delivery::{Delivery, MixMode};
pub use participant::MAX_GAIN;
pub use report::{ActiveSpeaker, LocalCandidate, ParticipantStats, TalkEvent, TickReport, VoiceStatus};

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use bytes::Bytes;

use crate::binaural::Binaural;
use crate::codec::Encoder;
use crate::config::RoomConfig;
use crate::dsp::Limiter;
use crate::phone::InputCodec;
use crate::probe::DTX_FRAME;
use crate::{MixError, ParticipantId};
use channel::Channel;
use delivery::{NOTHING, Selected, Stream};
use participant::Participant;
use shard::Shard;

/// Frames of the forwarded speaker fed to the listener encoder at a switch to the mix.
const PRIME_FRAMES: usize = 4;

/// The highest [`Room::set_shed_level`]: complexity 0 and one speaker.
pub const MAX_SHED_LEVEL: u8 = 5;

/// Hashes a [`ParticipantId`] with one multiplication. Ids are assigned by
/// the server, not chosen by clients, so the flooding resistance of the
/// default SipHash buys nothing on this per-packet lookup.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type IdMap<V> = HashMap<ParticipantId, V, BuildHasherDefault<IdHasher>>;

/// One room's mixer. Drive it with [`Room::push_packet`] as packets arrive
/// and [`Room::tick`] every 20 ms; read what to send from [`Room::deliveries`].
#[derive(Debug)]
pub struct Room {
    cfg: RoomConfig,
    shards: Vec<Shard>,
    index: IdMap<(usize, usize)>,
    selected: Vec<Selected>,
    listener: Stream,
    /// What every participant who is not a selected speaker is sent after the last tick.
    listener_out: Delivery,
    /// A spatial room's stereo listeners' stream (made at the first tick that needs it).
    stereo_listener: Option<Stream>,
    /// What a stereo listener who is not a selected speaker is sent after the last tick.
    stereo_out: Delivery,
    /// Participants marked stereo ([`Room::set_stereo`]), sources and remotes not counted.
    stereo_members: usize,
    /// Outputs taking the stereo render ([`Room::set_stereo_outputs`]).
    stereo_outputs: usize,
    /// A binaural room's per-seat filters and renders (made at the first tick that needs them).
    binaural: Option<Box<Binaural>>,
    /// How the last tick served the listeners.
    mode: MixMode,
    /// Ticks of mix in a row with exactly one speaker (for `mix_hold_ticks`).
    alone_for: u32,
    /// The forwarded speaker's last payloads, oldest first (at most [`PRIME_FRAMES`]), to
    /// prime the listener encoder at a switch to the mix.
    recent: Vec<Bytes>,
    /// Cost shedding level, 0 to [`MAX_SHED_LEVEL`].
    shed: u8,
    /// Listener frames still to encode without prediction after a switch.
    independent_left: u8,
    dtx_frame: Bytes,
    no_speakers: Arc<[ActiveSpeaker]>,
    spare_encoders: Vec<Encoder>,
    /// Tick of the last `tick` call, so a tick number is never run twice.
    last_tick: Option<u64>,
    /// Packets dropped as late since the last tick ([`TickReport::late`]).
    late: u64,
    /// Sources among the participants ([`Room::add_source`]).
    sources: usize,
    /// Remotes among the participants ([`Room::add_remote`]).
    remotes: usize,
    /// The selection set from outside ([`Room::set_selection`]), if any.
    external: Option<Vec<ParticipantId>>,
    /// Scratch for applying `external`, kept for its capacity.
    chosen: Vec<ParticipantId>,
    /// Whether seats `external` leaves free go to this room's own talkers
    /// ([`Room::fill_free_seats`]).
    fill: bool,
    /// This room's own participants given a free seat this tick beyond
    /// `external`.
    filled: Vec<ParticipantId>,
    /// Whisper channels ([`Room::open_channel`]), at most [`MAX_CHANNELS`].
    channels: Vec<Channel>,
}

impl Room {
    /// An empty room. Fails on an invalid configuration.
    pub fn new(cfg: RoomConfig) -> Result<Self, MixError> {
        cfg.validate()?;
        let listener = Stream::new(Encoder::new(&cfg.encoder)?, Limiter::default());
        Ok(Self {
            cfg,
            shards: Vec::new(),
            index: IdMap::default(),
            selected: Vec::new(),
            listener,
            listener_out: Delivery::Nothing,
            stereo_listener: None,
            stereo_out: Delivery::Nothing,
            stereo_members: 0,
            stereo_outputs: 0,
            binaural: None,
            mode: MixMode::Silent,
            alone_for: 0,
            recent: Vec::with_capacity(PRIME_FRAMES + 1),
            shed: 0,
            independent_left: 0,
            dtx_frame: Bytes::from_static(&DTX_FRAME),
            no_speakers: Arc::from([]),
            spare_encoders: Vec::new(),
            last_tick: None,
            late: 0,
            sources: 0,
            remotes: 0,
            external: None,
            chosen: Vec::new(),
            fill: false,
            filled: Vec::new(),
            channels: Vec::new(),
        })
    }

    /// The room's configuration.
    pub fn config(&self) -> &RoomConfig {
        &self.cfg
    }

    fn participant_mut(&mut self, id: ParticipantId) -> Result<&mut Participant, MixError> {
        let (s, i) = *self.index.get(&id).ok_or(MixError::UnknownParticipant(id))?;
        Ok(&mut self.shards[s].members[i])
    }

    fn participant(&self, id: ParticipantId) -> Result<&Participant, MixError> {
        let (s, i) = *self.index.get(&id).ok_or(MixError::UnknownParticipant(id))?;
        Ok(&self.shards[s].members[i])
    }

    /// The currently selected speakers, in selection order.
    pub fn speakers(&self) -> impl Iterator<Item = ParticipantId> + '_ {
        self.selected.iter().map(|s| s.id)
    }

    /// What to send each participant after the last tick, shard by shard
    /// (shards can be sent from different threads): the listeners' shared
    /// delivery, or a selected speaker's own. References, never copies.
    pub fn delivery_shards(&self) -> impl Iterator<Item = impl Iterator<Item = (ParticipantId, &Delivery)>> {
        self.shards.iter().map(|shard| shard.members.iter().map(|p| (p.id, self.delivery_of(p))))
    }

    /// What to send each participant after the last tick (see [`Room::delivery_shards`]).
    pub fn deliveries(&self) -> impl Iterator<Item = (ParticipantId, &Delivery)> {
        self.delivery_shards().flatten()
    }

    /// What every participant who is not a selected speaker is sent after
    /// the last tick ([`Delivery::Nothing`] before the first tick).
    pub fn listener_delivery(&self) -> &Delivery {
        &self.listener_out
    }

    /// What each selected speaker is sent after the last tick, in selection
    /// order. With [`Room::listener_delivery`], everything a tick produced:
    /// at most K+1 payloads, whatever the room size.
    pub fn speaker_deliveries(&self) -> impl Iterator<Item = (ParticipantId, &Delivery)> {
        self.selected.iter().map(|sel| (sel.id, &sel.out))
    }

    /// Each selected speaker's own frame of the last tick as it arrived (no
    /// decode, no encode), in selection order, with their level: `None`
    /// when their frame was missing, concealed or could not be decoded.
    /// For feeds that must tell speakers apart (captions, agents).
    /// A G.711 caller's frame is encoded to Opus here (once per frame).
    pub fn speaker_frames(&mut self) -> impl Iterator<Item = (ParticipantId, u8, Option<&Bytes>)> {
        for sel in &self.selected {
            if let Some(&(s, i)) = self.index.get(&sel.id) {
                let p = &mut self.shards[s].members[i];
                if p.codec != InputCodec::Opus {
                    p.opus_frame(false);
                }
            }
        }
        self.selected.iter().filter_map(|sel| {
            let &(s, i) = self.index.get(&sel.id)?;
            let p = &self.shards[s].members[i];
            Some((sel.id, p.level, p.played_opus()))
        })
    }

    /// What a participant is sent after the last tick (`None`: not in the room).
    pub fn delivery_for(&self, id: ParticipantId) -> Option<&Delivery> {
        self.participant(id).ok().map(|p| self.delivery_of(p))
    }

    /// The payload of [`Room::listener_delivery`] (empty: send nothing).
    pub fn listener_payload(&self) -> &Bytes {
        self.listener_out.payload()
    }

    /// The payloads of [`Room::speaker_deliveries`] (empty: send nothing).
    pub fn speaker_payloads(&self) -> impl Iterator<Item = (ParticipantId, &Bytes)> {
        self.selected.iter().map(|sel| (sel.id, sel.out.payload()))
    }

    /// The payload of [`Room::delivery_for`] (empty: send nothing).
    pub fn payload_for(&self, id: ParticipantId) -> Option<&Bytes> {
        self.delivery_for(id).map(Delivery::payload)
    }

    fn delivery_of(&self, p: &Participant) -> &Delivery {
        if p.source || p.remote {
            return &NOTHING;
        }
        if let Some(sel) = p.slot.and_then(|slot| self.selected.get(slot)) {
            return &sel.out;
        }
        if let Some((c, _)) = p.channel
            && let Some(ch) = self.channels.iter().find(|ch| ch.id == c && ch.active)
        {
            return &ch.out;
        }
        if p.stereo && self.cfg.spatial {
            return &self.stereo_out;
        }
        &self.listener_out
    }

    /// What a stereo listener of a spatial room who is not a selected
    /// speaker (or a stereo output, [`Room::set_stereo_outputs`]) is sent
    /// after the last tick: the same as [`Room::listener_delivery`] in a
    /// room that is not spatial, or with neither stereo listeners nor
    /// stereo outputs.
    pub fn stereo_listener_delivery(&self) -> &Delivery {
        if self.renders_stereo() { &self.stereo_out } else { &self.listener_out }
    }

    /// How the last tick served the listeners.
    pub fn mode(&self) -> MixMode {
        self.mode
    }
}
