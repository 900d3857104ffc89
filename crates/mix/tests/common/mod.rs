//! Helpers shared by the scenario tests: real Opus senders and receivers.
#![allow(dead_code, missing_docs)]

use bytes::Bytes;
use tutti_mix::{FRAME_SAMPLES, MixPool, Packet, ParticipantId, Pcm, Room, TickReport, level_of, tone};

/// A client that sends a continuous tone, encoded with real Opus, and
/// decodes what it is sent.
pub struct ToneParticipant {
    pub id: ParticipantId,
    pub freq: f32,
    encoder: opus::Encoder,
    decoder: opus::Decoder,
    seq: u16,
    /// Everything this client decoded, in order.
    pub heard: Vec<f32>,
}

impl ToneParticipant {
    pub fn new(id: u64, freq: f32) -> Self {
        Self {
            id: ParticipantId(id),
            freq,
            encoder: opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Voip).expect("encoder"),
            decoder: opus::Decoder::new(48_000, opus::Channels::Mono).expect("decoder"),
            seq: 0,
            heard: Vec::new(),
        }
    }

    /// The next packet of this client's tone (amplitude 0 = silence, level 127).
    pub fn next_packet(&mut self, amplitude: f32) -> Packet {
        let n = u64::from(self.seq);
        let pcm: Pcm = tone(self.freq, amplitude, n * FRAME_SAMPLES as u64);
        let payload = Bytes::from(self.encoder.encode_vec_float(&pcm, 1500).expect("encode"));
        let packet = Packet { seq: self.seq, timestamp: self.seq as u32 * 960, payload, level: Some(level_of(&pcm)) };
        self.seq = self.seq.wrapping_add(1);
        packet
    }

    /// Decodes the payload the room produced for this client.
    pub fn receive(&mut self, room: &Room) {
        let payload = room.payload_for(self.id).expect("every participant gets a payload");
        let mut pcm = [0.0f32; FRAME_SAMPLES];
        let n = self.decoder.decode_float(payload, &mut pcm, false).expect("the mix decodes");
        assert_eq!(n, FRAME_SAMPLES);
        self.heard.extend_from_slice(&pcm);
    }
}

/// A default room holding these clients and any `extra` participants.
pub fn room_with(clients: &[ToneParticipant], extra: &[ParticipantId]) -> Room {
    let mut room = Room::new(tutti_mix::RoomConfig::default()).expect("room");
    for id in clients.iter().map(|c| c.id).chain(extra.iter().copied()) {
        room.add_participant(id).expect("join");
    }
    room
}

/// Three clients sending 440, 660 and 880 Hz.
pub fn three_tones() -> Vec<ToneParticipant> {
    vec![ToneParticipant::new(1, 440.0), ToneParticipant::new(2, 660.0), ToneParticipant::new(3, 880.0)]
}

/// Runs `ticks` ticks in which every client sends a frame of its tone at
/// `amplitude(client index, tick)` and decodes its mix.
pub fn run(
    room: &mut Room,
    pool: &MixPool,
    clients: &mut [ToneParticipant],
    first_tick: u64,
    ticks: u64,
    amplitude: impl Fn(usize, u64) -> f32,
) -> Vec<TickReport> {
    let mut reports = Vec::new();
    for t in first_tick..first_tick + ticks {
        for (i, c) in clients.iter_mut().enumerate() {
            let packet = c.next_packet(amplitude(i, t));
            room.push_packet(c.id, packet).expect("participant in room");
        }
        reports.push(room.tick(pool, t));
        for c in clients.iter_mut() {
            c.receive(room);
        }
    }
    reports
}

/// The last `seconds` of what a client heard.
pub fn tail(heard: &[f32], seconds: f32) -> &[f32] {
    let n = (seconds * 48_000.0) as usize;
    &heard[heard.len().saturating_sub(n)..]
}

/// A client that decodes what it is sent in stereo, as a browser that asked for it does.
pub struct StereoEar {
    decoder: opus::Decoder,
    pub left: Vec<f32>,
    pub right: Vec<f32>,
}

impl StereoEar {
    pub fn new() -> Self {
        Self {
            decoder: opus::Decoder::new(48_000, opus::Channels::Stereo).expect("decoder"),
            left: vec![],
            right: vec![],
        }
    }

    pub fn receive(&mut self, payload: &[u8]) {
        let mut both = [0.0f32; 2 * FRAME_SAMPLES];
        let n = self.decoder.decode_float(payload, &mut both, false).expect("the stereo mix decodes");
        assert_eq!(n, FRAME_SAMPLES);
        for frame in both.chunks_exact(2) {
            self.left.push(frame[0]);
            self.right.push(frame[1]);
        }
    }
}
