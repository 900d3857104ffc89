//! A binaural room through real Opus: a far-left voice is louder and
//! earlier in the left ear, every speaker's stereo mix is N-minus-self, and
//! the mono render keeps the panned room's level.

mod common;

use bytes::Bytes;
use common::{StereoEar, ToneParticipant, tail};
use tutti_mix::{FRAME_SAMPLES, MAX_SEAT, MixPool, Packet, ParticipantId, Pcm, Room, RoomConfig, goertzel, level_of};

fn db(a: f32, b: f32) -> f32 {
    20.0 * (a / b).log10()
}

fn rms(x: &[f32]) -> f32 {
    (x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32).sqrt()
}

/// A talker sending speech-shaped noise (white noise through a one-pole
/// low-pass at 800 Hz; the same for every run), Opus-coded.
struct NoiseTalker {
    id: ParticipantId,
    encoder: opus::Encoder,
    seq: u16,
    state: u32,
    low: f32,
}

impl NoiseTalker {
    fn new(id: u64) -> Self {
        let encoder = opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Voip).expect("encoder");
        Self { id: ParticipantId(id), encoder, seq: 0, state: 0x1234_5678, low: 0.0 }
    }

    fn next_packet(&mut self) -> Packet {
        let mut pcm: Pcm = [0.0; FRAME_SAMPLES];
        for x in &mut pcm {
            // xorshift32
            self.state ^= self.state << 13;
            self.state ^= self.state >> 17;
            self.state ^= self.state << 5;
            let white = (self.state as f32 / u32::MAX as f32 - 0.5) * 1.2;
            // exp(−2π · 800 / 48000)
            self.low = 0.9005 * self.low + 0.0995 * white;
            *x = self.low;
        }
        let payload = Bytes::from(self.encoder.encode_vec_float(&pcm, 1500).expect("encode"));
        let packet =
            Packet { seq: self.seq, timestamp: u32::from(self.seq) * 960, payload, level: Some(level_of(&pcm)) };
        self.seq = self.seq.wrapping_add(1);
        packet
    }
}

/// What a stereo and a mono listener hear of one noise talker on `seat`.
fn hear_noise(binaural: bool, seat: i8) -> (StereoEar, Vec<f32>) {
    let pool = MixPool::new(1).expect("pool");
    let mut room = Room::new(RoomConfig { spatial: true, binaural, ..Default::default() }).expect("room");
    let mut talker = NoiseTalker::new(1);
    let (stereo_id, mono_id) = (ParticipantId(10), ParticipantId(11));
    room.add_participant(talker.id).expect("join");
    room.set_seat(talker.id, seat).expect("seat");
    room.add_participant(stereo_id).expect("join");
    room.set_stereo(stereo_id, true).expect("stereo");
    room.add_participant(mono_id).expect("join");
    let mut ear = StereoEar::new();
    let mut mono = opus::Decoder::new(48_000, opus::Channels::Mono).expect("decoder");
    let mut mono_heard = Vec::new();
    for tick in 0..75 {
        room.push_packet(talker.id, talker.next_packet()).expect("push");
        room.tick(&pool, tick);
        ear.receive(room.payload_for(stereo_id).expect("payload"));
        let mut pcm = [0.0f32; FRAME_SAMPLES];
        mono.decode_float(room.payload_for(mono_id).expect("payload"), &mut pcm, false).expect("mono decodes");
        mono_heard.extend_from_slice(&pcm);
    }
    (ear, mono_heard)
}

/// Power over the speech band, 300 Hz to 3.4 kHz in 50 Hz steps.
fn speech_band_power(x: &[f32]) -> f32 {
    (300..=3400).step_by(50).map(|f| goertzel(x, f as f32).powi(2)).sum()
}

/// The lag (samples) at which `right` best matches `left`: positive when
/// the right ear hears it later.
fn lag(left: &[f32], right: &[f32]) -> i32 {
    let n = left.len().min(right.len());
    let corr = |lag: i32| -> f32 { (48..n - 48).map(|i| left[i] * right[(i as i32 + lag) as usize]).sum() };
    (-48..=48).max_by(|&a, &b| corr(a).total_cmp(&corr(b))).expect("lags")
}

#[test]
fn a_far_left_voice_is_louder_and_earlier_in_the_left_ear() {
    let (ear, _) = hear_noise(true, -MAX_SEAT);
    let (l, r) = (tail(&ear.left, 1.0), tail(&ear.right, 1.0));
    let ild = 10.0 * (speech_band_power(l) / speech_band_power(r)).log10();
    assert!(ild >= 6.0, "ILD over the speech band {ild:.1} dB");
    let itd = lag(l, r);
    println!("far left: ILD {ild:.1} dB over the speech band, the right ear {itd} samples later");
    assert!((14..=34).contains(&itd), "the right ear {itd} samples ({:.2} ms) later", itd as f32 / 48.0);
    // Panned, both ears hear it at once.
    let (ear, _) = hear_noise(false, -MAX_SEAT);
    assert_eq!(lag(tail(&ear.left, 1.0), tail(&ear.right, 1.0)), 0, "panned: no delay");
}

/// For speech-shaped noise (the HRIRs are normalised for it: the dummy
/// head's far seats are duller above 4 kHz than a panned voice).
#[test]
fn the_mono_render_keeps_the_panned_level_on_every_seat() {
    let mut off = Vec::new();
    for seat in -MAX_SEAT..=MAX_SEAT {
        let (_, binaural) = hear_noise(true, seat);
        let (_, panned) = hear_noise(false, seat);
        let (b, p) = (tail(&binaural, 1.0), tail(&panned, 1.0));
        let d = db(rms(b), rms(p));
        println!("seat {seat}: mono binaural against panned {d:.2} dB");
        if d.abs() > 1.0 {
            off.push(format!("seat {seat}: {d:.2} dB"));
        }
    }
    assert!(off.is_empty(), "mono binaural against panned beyond 1 dB: {off:?}");
}

/// Three talkers on the far left, the middle and the far right, each
/// hearing the two others where they sit, never themselves.
#[test]
fn every_talker_hears_the_others_binaurally_and_not_themselves() {
    let pool = MixPool::new(2).expect("pool");
    let mut room = Room::new(RoomConfig { spatial: true, binaural: true, ..Default::default() }).expect("room");
    let mut talkers =
        vec![ToneParticipant::new(1, 1500.0), ToneParticipant::new(2, 2000.0), ToneParticipant::new(3, 2500.0)];
    let seats = [-MAX_SEAT, 0, MAX_SEAT];
    let mono_id = ParticipantId(11);
    for (t, &seat) in talkers.iter().zip(&seats) {
        room.add_participant(t.id).expect("join");
        room.set_seat(t.id, seat).expect("seat");
        room.set_stereo(t.id, true).expect("stereo");
    }
    // The middle talker takes mono: its N-minus-self is the mono downmix's.
    room.set_stereo(talkers[1].id, false).expect("mono");
    room.add_participant(mono_id).expect("join");
    let mut ears: Vec<StereoEar> = talkers.iter().map(|_| StereoEar::new()).collect();
    for tick in 0..75 {
        for t in &mut talkers {
            let packet = t.next_packet(0.2);
            room.push_packet(t.id, packet).expect("push");
        }
        room.tick(&pool, tick);
        for (n, (t, e)) in talkers.iter_mut().zip(&mut ears).enumerate() {
            if n == 1 {
                t.receive(&room);
            } else {
                e.receive(room.payload_for(t.id).expect("payload"));
            }
        }
    }
    let amp = |x: &[f32], f: f32| goertzel(x, f);
    let middle = tail(&talkers[1].heard, 1.0);
    assert!(amp(middle, 2000.0) < 0.01, "the mono talker hears itself: {}", amp(middle, 2000.0));
    assert!(amp(middle, 1500.0) > 0.05 && amp(middle, 2500.0) > 0.05, "and hears the others");
    for n in [0, 2] {
        let (t, e) = (&talkers[n], &ears[n]);
        let (l, r) = (tail(&e.left, 1.0), tail(&e.right, 1.0));
        assert!(amp(l, t.freq) < 0.01 && amp(r, t.freq) < 0.01, "{} Hz hears itself", t.freq);
        let other = &talkers[2 - n];
        let (near, far) = if n == 0 { (r, l) } else { (l, r) };
        assert!(
            db(amp(near, other.freq), amp(far, other.freq)) >= 6.0,
            "{} Hz hears {} on its side: {} {}",
            t.freq,
            other.freq,
            amp(near, other.freq),
            amp(far, other.freq)
        );
    }
}
