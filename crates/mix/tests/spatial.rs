//! A spatial room through real Opus: speakers on their seats in the stereo
//! render, each channel N-minus-self, the mono render the channels'
//! average; and the render's arithmetic as properties.

mod common;

use common::{StereoEar, ToneParticipant, tail};
use proptest::prelude::*;
use tutti_mix::{
    FRAME_SAMPLES, Limiter, MAX_SEAT, MixMode, MixPool, Pcm, Room, RoomConfig, Stereo, accumulate_scaled, goertzel,
    mono_gain,
};

fn db(a: f32, b: f32) -> f32 {
    20.0 * (a / b).log10()
}

/// Three talkers seated far left, middle and far right, loud enough that
/// the limiter works; a stereo listener and a mono one; every talker asks
/// for stereo too.
#[test]
fn seats_are_heard_where_they_are_and_the_mono_render_is_their_average() {
    let pool = MixPool::new(2).expect("pool");
    let mut room = Room::new(RoomConfig { spatial: true, ..Default::default() }).expect("room");
    let mut talkers =
        vec![ToneParticipant::new(1, 440.0), ToneParticipant::new(2, 660.0), ToneParticipant::new(3, 880.0)];
    let seats = [-MAX_SEAT, 0, MAX_SEAT];
    let (stereo_id, mono_id) = (tutti_mix::ParticipantId(10), tutti_mix::ParticipantId(11));
    for (t, &seat) in talkers.iter().zip(&seats) {
        room.add_participant(t.id).expect("join");
        room.set_seat(t.id, seat).expect("seat");
        room.set_stereo(t.id, true).expect("stereo");
    }
    room.add_participant(stereo_id).expect("join");
    room.set_stereo(stereo_id, true).expect("stereo");
    room.add_participant(mono_id).expect("join");
    assert!(room.set_seat(mono_id, MAX_SEAT + 1).is_err(), "a seat off the arc is refused");

    let mut ear = StereoEar::new();
    let mut talker_ears: Vec<StereoEar> = talkers.iter().map(|_| StereoEar::new()).collect();
    let mut mono = opus::Decoder::new(48_000, opus::Channels::Mono).expect("decoder");
    let mut mono_heard = Vec::new();
    let mut last = None;
    for tick in 0..100 {
        for t in &mut talkers {
            // Loud enough that the limiter works on the stereo channels.
            let packet = t.next_packet(0.4);
            room.push_packet(t.id, packet).expect("push");
        }
        last = Some(room.tick(&pool, tick));
        ear.receive(room.payload_for(stereo_id).expect("payload"));
        for (t, e) in talkers.iter().zip(&mut talker_ears) {
            e.receive(room.payload_for(t.id).expect("payload"));
        }
        let mut pcm = [0.0f32; FRAME_SAMPLES];
        mono.decode_float(room.payload_for(mono_id).expect("payload"), &mut pcm, false).expect("mono decodes");
        mono_heard.extend_from_slice(&pcm);
    }
    let last = last.expect("ticks ran");
    assert_eq!(last.speakers.len(), 3);
    assert_eq!(last.encodes, 5, "K+2: the mono and the stereo listener streams, one per speaker");
    let placed: Vec<Option<i8>> = last.speakers.iter().map(|s| s.seat).collect();
    assert!(placed.iter().all(|s| s.is_some()), "{placed:?}");

    let (l, r) = (tail(&ear.left, 1.0), tail(&ear.right, 1.0));
    let m = tail(&mono_heard, 1.0);
    let amp = |x: &[f32], f: f32| goertzel(x, f);
    assert!(db(amp(l, 440.0), amp(r, 440.0)) >= 6.0, "left seat: L {} R {}", amp(l, 440.0), amp(r, 440.0));
    assert!(db(amp(r, 880.0), amp(l, 880.0)) >= 6.0, "right seat: L {} R {}", amp(l, 880.0), amp(r, 880.0));
    assert!(db(amp(l, 660.0), amp(r, 660.0)).abs() <= 1.0, "middle: L {} R {}", amp(l, 660.0), amp(r, 660.0));
    for f in [440.0, 660.0, 880.0] {
        let average = (amp(l, f) + amp(r, f)) / 2.0;
        let d = db(amp(m, f), average);
        assert!(d.abs() <= 1.0, "{f} Hz: mono {} against the channels' average {average} ({d:.2} dB)", amp(m, f));
    }
    // Every talker hears the two others where they sit, and not themselves.
    for (n, (t, e)) in talkers.iter().zip(&talker_ears).enumerate() {
        let (l, r) = (tail(&e.left, 1.0), tail(&e.right, 1.0));
        assert!(amp(l, t.freq) < 0.01 && amp(r, t.freq) < 0.01, "{} Hz hears itself", t.freq);
        for (k, other) in talkers.iter().enumerate().filter(|(k, _)| *k != n) {
            assert!(amp(l, other.freq) + amp(r, other.freq) > 0.1, "{} Hz misses {}", t.freq, other.freq);
            if seats[k] < 0 {
                assert!(
                    db(amp(l, other.freq), amp(r, other.freq)) >= 6.0,
                    "{} Hz hears {} on the left",
                    t.freq,
                    other.freq
                );
            }
        }
    }
}

/// A lone talker is mixed, not forwarded, while stereo listeners are in
/// the room (a forwarded frame would come from the middle); forwarded
/// again once none is left.
#[test]
fn a_lone_talker_is_heard_from_their_seat_and_forwarded_without_stereo_listeners() {
    let pool = MixPool::new(1).expect("pool");
    let mut room = Room::new(RoomConfig { spatial: true, ..Default::default() }).expect("room");
    let mut talker = ToneParticipant::new(1, 440.0);
    let listener = tutti_mix::ParticipantId(2);
    room.add_participant(talker.id).expect("join");
    room.set_seat(talker.id, MAX_SEAT).expect("seat");
    room.add_participant(listener).expect("join");
    room.set_stereo(listener, true).expect("stereo");
    let mut ear = StereoEar::new();
    for tick in 0..60 {
        let packet = talker.next_packet(0.2);
        room.push_packet(talker.id, packet).expect("push");
        room.tick(&pool, tick);
        ear.receive(room.payload_for(listener).expect("payload"));
    }
    assert_eq!(room.mode(), MixMode::Mix);
    let (l, r) = (tail(&ear.left, 0.5), tail(&ear.right, 0.5));
    assert!(db(goertzel(r, 440.0), goertzel(l, 440.0)) >= 6.0, "heard from the right");
    room.set_stereo(listener, false).expect("mono");
    for tick in 60..100 {
        // Forwarding resumes in a pause of their speech.
        let packet = talker.next_packet(if tick % 20 < 3 { 0.0 } else { 0.2 });
        room.push_packet(talker.id, packet).expect("push");
        room.tick(&pool, tick);
    }
    assert_eq!(room.mode(), MixMode::Forward(talker.id), "mono listeners only: forwarded again");
}

/// A stereo output (a recording, an RTP forwarder) makes a spatial room
/// encode its stereo render with no stereo listener in it: a lone talker is
/// mixed at their seat, not forwarded; without outputs, forwarded again.
#[test]
fn a_stereo_output_takes_the_stereo_render_without_stereo_listeners() {
    let pool = MixPool::new(1).expect("pool");
    let mut room = Room::new(RoomConfig { spatial: true, ..Default::default() }).expect("room");
    let mut talker = ToneParticipant::new(1, 440.0);
    room.add_participant(talker.id).expect("join");
    room.set_seat(talker.id, -MAX_SEAT).expect("seat");
    room.add_participant(tutti_mix::ParticipantId(2)).expect("a mono listener");
    room.set_stereo_outputs(1);
    let mut ear = StereoEar::new();
    let mut last = None;
    for tick in 0..60 {
        let packet = talker.next_packet(0.2);
        room.push_packet(talker.id, packet).expect("push");
        last = Some(room.tick(&pool, tick));
        ear.receive(room.stereo_listener_delivery().payload());
    }
    assert_eq!(room.mode(), MixMode::Mix, "mixed at their seat, not forwarded");
    assert_eq!(last.expect("ticks ran").encodes, 2, "the mono and the stereo render");
    let (l, r) = (tail(&ear.left, 0.5), tail(&ear.right, 0.5));
    assert!(db(goertzel(l, 440.0), goertzel(r, 440.0)) >= 6.0, "heard from the left");
    room.set_stereo_outputs(0);
    for tick in 60..100 {
        let packet = talker.next_packet(if tick % 20 < 3 { 0.0 } else { 0.2 });
        room.push_packet(talker.id, packet).expect("push");
        room.tick(&pool, tick);
    }
    assert_eq!(room.mode(), MixMode::Forward(talker.id), "no stereo output: forwarded again");
    assert_eq!(room.stereo_listener_delivery(), room.listener_delivery());
}

fn frame(values: &[f32]) -> Pcm {
    let mut pcm = [0.0; FRAME_SAMPLES];
    for (i, x) in pcm.iter_mut().enumerate() {
        *x = values[i % values.len()];
    }
    pcm
}

proptest! {
    /// Each channel of a speaker's render is exactly the render of the
    /// others, and the mono render is the channels' average.
    #[test]
    fn the_stereo_render_is_n_minus_self_per_channel_and_downmixes_to_mono(
        voices in prop::collection::vec((prop::collection::vec(-0.5f32..0.5, 1..16), -MAX_SEAT..=MAX_SEAT), 1..8),
    ) {
        let pcm: Vec<(Pcm, i8)> = voices.iter().map(|(v, s)| (frame(v), *s)).collect();
        let mut all = Stereo::default();
        let mut mono = [0.0; FRAME_SAMPLES];
        for (p, seat) in &pcm {
            all.add(p, *seat);
            accumulate_scaled(&mut mono, p, mono_gain(*seat));
        }
        let mut down = [0.0; FRAME_SAMPLES];
        all.downmix(&mut down);
        for i in 0..FRAME_SAMPLES {
            prop_assert!((down[i] - mono[i]).abs() < 1e-5);
        }
        for (k, (own, seat)) in pcm.iter().enumerate() {
            let mut others = Stereo::default();
            for (j, (p, s)) in pcm.iter().enumerate() {
                if j != k {
                    others.add(p, *s);
                }
            }
            let mut minus = Stereo::default();
            all.minus(own, *seat, &mut minus);
            for i in 0..FRAME_SAMPLES {
                prop_assert!((minus.left[i] - others.left[i]).abs() < 1e-4);
                prop_assert!((minus.right[i] - others.right[i]).abs() < 1e-4);
            }
        }
    }

    /// The limiter works on each channel, linked: an overloaded channel is
    /// brought under full scale, and the other by the same gain, so the
    /// stage keeps its shape (the two channels' ratio holds where the
    /// saturator does not bend).
    #[test]
    fn the_limiter_works_on_each_channel_linked(loud in 1.0f32..50.0, quiet in 0.01f32..0.5, frames in 1usize..6) {
        let mut limiter = Limiter::default();
        let mut render = Stereo::default();
        for _ in 0..frames {
            render = Stereo { left: frame(&[loud, -loud]), right: frame(&[quiet, -quiet]) };
            limiter.process_pair(&mut render.left, &mut render.right);
            prop_assert!(render.left.iter().chain(&render.right).all(|x| x.abs() < 1.0));
        }
        // After the attack: the right channel carries the left's gain.
        let gain = limiter.gain();
        prop_assert!(gain < 1.0);
        let tail = FRAME_SAMPLES - 1;
        prop_assert!((render.right[tail].abs() - quiet * gain).abs() < 1e-4, "{} against {}", render.right[tail], quiet * gain);
    }
}
