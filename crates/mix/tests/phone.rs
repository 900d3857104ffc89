//! G.711 participants in a room, through real Opus: a phone caller's
//! 160-byte frames go in as they came; the room decodes them only while the
//! caller is selected, a listener hears the caller's tone in the mix, a
//! silent caller costs no decode, and what must carry Opus (a speaker feed,
//! the frames for a room's other nodes) gets the caller's tone as Opus.

use bytes::Bytes;
use tutti_mix::{
    Decoder, Delivery, FRAME_SAMPLES, G711, InputCodec, LocalCandidate, MixMode, MixPool, Packet, ParticipantId, Pcm,
    Room, RoomConfig, goertzel,
};

const NARROW: usize = 160;

/// A G.711 frame of a tone at 8 kHz (`n`: which 20 ms).
fn phone_frame(law: G711, freq: f32, amp: f32, n: usize) -> Bytes {
    (0..NARROW)
        .map(|i| {
            let t = (n * NARROW + i) as f32 / 8_000.0;
            law.encode(amp * (std::f32::consts::TAU * freq * t).sin())
        })
        .collect::<Vec<u8>>()
        .into()
}

fn push(room: &mut Room, id: ParticipantId, n: usize, payload: Bytes, level: u8) {
    let packet = Packet { seq: n as u16, timestamp: (n * FRAME_SAMPLES) as u32, payload, level: Some(level) };
    room.push_packet(id, packet).expect("pushed");
}

/// What `id` is sent, decoded (`None`: nothing sent this tick).
fn heard(room: &Room, id: ParticipantId, dec: &mut Decoder) -> Option<Pcm> {
    let payload = match room.delivery_for(id)? {
        Delivery::Mix(p) | Delivery::Forward { payload: p, .. } => p.clone(),
        _ => return None,
    };
    let mut pcm = [0.0; FRAME_SAMPLES];
    dec.decode(&payload, &mut pcm).expect("a valid frame");
    Some(pcm)
}

#[test]
fn a_phone_caller_is_decoded_by_the_room_only_while_selected_and_heard_by_a_listener() {
    let pool = MixPool::new(1).expect("a pool");
    let mut room = Room::new(RoomConfig::default()).expect("a room");
    let (phone, quiet_phone, browser) = (ParticipantId(1), ParticipantId(2), ParticipantId(3));
    for id in [phone, quiet_phone, browser] {
        room.add_participant(id).expect("added");
    }
    room.set_input_codec(phone, InputCodec::G711(G711::Pcma)).expect("set");
    room.set_input_codec(quiet_phone, InputCodec::G711(G711::Pcmu)).expect("set");
    let mut dec = Decoder::new().expect("a decoder");
    let (mut energy, mut modes, mut decodes) = (Vec::new(), Vec::new(), 0);
    for n in 0..50 {
        push(&mut room, phone, n, phone_frame(G711::Pcma, 600.0, 0.3, n), 12);
        // A silent caller: level 127, never selected, never decoded.
        push(&mut room, quiet_phone, n, phone_frame(G711::Pcmu, 600.0, 0.0, n), 127);
        let report = room.tick(&pool, n as u64);
        decodes += report.decodes;
        modes.push(report.mode);
        if let Some(pcm) = heard(&room, browser, &mut dec) {
            energy.push(goertzel(&pcm, 600.0));
        }
    }
    // Mixed even alone (a G.711 frame cannot be forwarded as it came).
    assert!(modes[5..].iter().all(|m| *m == MixMode::Mix), "{modes:?}");
    assert!(energy.len() > 40, "the browser was sent {} frames", energy.len());
    let settled = &energy[energy.len() - 20..];
    assert!(settled.iter().all(|e| *e > 0.1), "the browser hears the caller's 600 Hz: {settled:?}");
    // One decode per tick: the talking caller's; the silent one costs none.
    assert!(decodes <= 50, "{decodes} decodes in 50 ticks");
    let stats = room.participant_stats(quiet_phone).expect("stats");
    assert_eq!(stats.decoded, 0, "the silent caller was decoded");
}

#[test]
fn a_phone_speakers_frames_leave_as_opus_for_feeds_and_other_nodes() {
    let pool = MixPool::new(1).expect("a pool");
    let mut room = Room::new(RoomConfig::default()).expect("a room");
    let (phone, browser) = (ParticipantId(1), ParticipantId(2));
    room.add_participant(phone).expect("added");
    room.add_participant(browser).expect("added");
    room.set_input_codec(phone, InputCodec::G711(G711::Pcmu)).expect("set");
    let (mut fed, mut sent) = (Decoder::new().expect("a decoder"), Decoder::new().expect("a decoder"));
    let (mut feed_energy, mut node_energy) = (Vec::new(), Vec::new());
    let mut out: Vec<LocalCandidate> = Vec::new();
    for n in 0..30 {
        push(&mut room, phone, n, phone_frame(G711::Pcmu, 600.0, 0.3, n), 12);
        room.tick(&pool, n as u64);
        let frames: Vec<(ParticipantId, Option<Bytes>)> =
            room.speaker_frames().map(|(id, _, f)| (id, f.cloned())).collect();
        room.candidates(1, &mut out);
        if n < 5 {
            continue;
        }
        let mut pcm = [0.0; FRAME_SAMPLES];
        let feed = frames.iter().find(|(id, _)| *id == phone).and_then(|(_, f)| f.clone()).expect("a frame");
        fed.decode(&feed, &mut pcm).expect("the feed's frame is Opus");
        feed_energy.push(goertzel(&pcm, 600.0));
        let c = out.iter().find(|c| c.id == phone).expect("a candidate");
        let frame = c.frame.as_ref().expect("its frame");
        assert_eq!(frame, &feed, "one encode per frame, for both");
        sent.decode(frame, &mut pcm).expect("Opus for the other nodes");
        node_energy.push(goertzel(&pcm, 600.0));
    }
    assert!(feed_energy[5..].iter().all(|e| *e > 0.1), "{feed_energy:?}");
    assert!(node_energy[5..].iter().all(|e| *e > 0.1), "{node_energy:?}");
}
