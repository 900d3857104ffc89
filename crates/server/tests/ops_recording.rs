//! Recording to Ogg/Opus: real Opus frames (two "speakers" from two
//! encoders, a half-second gap between them) go through the recorder's
//! queue and writer thread; the file is read back with an independent page
//! parser (CRC checked), decoded with libopus and checked for each tone at
//! its time, and checked by Debian's `ffprobe` and `opusinfo`. Limits and
//! an unwritable directory end a recording with their reason.

mod ops_tools;

use std::process::Command;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use ops_tools::{ensure_tool, packets, read_pages, run, temp_dir, tone_frames};
use tutti_server::outputs::recording::{PushOutcome, Recorder, RecordingConfig, RecordingFinished, StopReason};

const PRE_SKIP: u16 = 312;

fn config(dir: &std::path::Path) -> RecordingConfig {
    RecordingConfig { dir: dir.to_owned(), pre_skip: PRE_SKIP, ..RecordingConfig::default() }
}

/// Pushes `frames` at consecutive ticks from `first`, pacing a little so the queue never overflows.
fn push_all(rec: &Recorder, first: u64, frames: &[Vec<u8>]) {
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(rec.push(first + i as u64, Bytes::from(f.clone())), PushOutcome::Queued);
    }
}

#[test]
fn a_recording_with_a_gap_and_a_speaker_change_decodes_to_both_tones_at_their_times() {
    let dir = temp_dir("rec");
    let (tx, rx) = std::sync::mpsc::channel::<RecordingFinished>();
    let on_finish = Box::new(move |f: &RecordingFinished| {
        let _ = tx.send(f.clone());
    });
    let rec = Recorder::start("demo", SystemTime::now(), &config(&dir), Some(on_finish)).expect("valid config");
    // 1 s of 440 Hz (ticks 1000..1050), nothing for 0.5 s, 1 s of 880 Hz from another encoder (ticks 1075..1125).
    push_all(&rec, 1000, &tone_frames(440.0, 50));
    push_all(&rec, 1075, &tone_frames(880.0, 50));
    let done = rec.stop_and_wait(Duration::from_secs(10)).expect("the writer finishes within 10 s");
    assert_eq!(rx.recv_timeout(Duration::from_secs(1)).expect("the callback ran"), done);
    assert_eq!(done.reason, StopReason::Stopped);
    assert_eq!(rec.push(1200, Bytes::from_static(&[0xF8])), PushOutcome::Finished);
    let stats = rec.stats();
    assert_eq!((stats.frames, stats.gap_frames, stats.dropped), (100, 25, 0));

    let data = std::fs::read(&done.path).expect("the file exists");
    assert_eq!(done.bytes, data.len() as u64);
    assert!(
        done.path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("demo-") && n.ends_with("Z.opus"))
    );
    let expected_samples = 125 * 960 - u64::from(PRE_SKIP);
    assert_eq!(done.duration, Duration::from_micros(expected_samples * 1_000_000 / 48_000));

    // Pages: CRC, sequence, BOS/EOS, headers alone on their pages, granules non-decreasing and final = 125 frames.
    let pages = read_pages(&data).expect("well-formed pages");
    assert!(pages.len() >= 5, "{} pages", pages.len());
    assert_eq!(pages[0].flags, 0x02, "first page is BOS");
    assert_eq!(pages[0].segments.len(), 1);
    assert_eq!(&pages[0].segments[0][..8], b"OpusHead");
    assert_eq!(u16::from_le_bytes([pages[0].segments[0][10], pages[0].segments[0][11]]), PRE_SKIP);
    assert_eq!(&pages[1].segments[0][..8], b"OpusTags");
    assert_eq!((pages[0].granule, pages[1].granule), (0, 0));
    let last = pages.last().expect("pages");
    assert_eq!(last.flags & 0x04, 0x04, "last page is EOS");
    assert_eq!(last.granule, 125 * 960);
    for (i, p) in pages.iter().enumerate() {
        assert_eq!(p.sequence, i as u32);
        assert_eq!(p.serial, pages[0].serial);
        if i > 0 {
            assert!(p.granule >= pages[i - 1].granule);
        }
        if i < pages.len() - 1 {
            assert_eq!(p.flags & 0x04, 0);
        }
    }
    let packets = packets(&pages);
    assert_eq!(packets.len(), 2 + 125);
    let plc: Vec<usize> = (2..packets.len()).filter(|&i| packets[i].len() == 1).collect();
    assert_eq!(plc, (52..77).collect::<Vec<_>>(), "the gap is 25 one-byte concealment packets");

    // Decode with libopus, drop the pre-skip, find each tone where it belongs.
    let mut dec = opus::Decoder::new(48_000, opus::Channels::Mono).expect("an Opus decoder");
    let mut pcm = Vec::new();
    for p in &packets[2..] {
        let mut out = [0f32; 960];
        let n = dec.decode_float(p, &mut out, false).expect("every packet decodes");
        assert_eq!(n, 960);
        pcm.extend_from_slice(&out);
    }
    let pcm = &pcm[usize::from(PRE_SKIP)..];
    let at = |from: f32, to: f32| &pcm[(from * 48_000.0) as usize..(to * 48_000.0) as usize];
    let rms = |s: &[f32]| (s.iter().map(|x| x * x).sum::<f32>() / s.len() as f32).sqrt();
    let first = at(0.1, 0.9);
    let gap = at(1.15, 1.45);
    let second = at(1.6, 2.4);
    let (a440, a880) = (tutti_mix::goertzel(first, 440.0), tutti_mix::goertzel(first, 880.0));
    let (b440, b880) = (tutti_mix::goertzel(second, 440.0), tutti_mix::goertzel(second, 880.0));
    eprintln!(
        "first: 440 Hz {a440:.3}, 880 Hz {a880:.3}; gap rms {:.4}; second: 440 Hz {b440:.3}, 880 Hz {b880:.3}",
        rms(gap)
    );
    assert!(a440 > 0.3 && a880 < 0.05, "the first speaker's 440 Hz at 0.1-0.9 s");
    assert!(b880 > 0.3 && b440 < 0.05, "the second speaker's 880 Hz at 1.6-2.4 s");
    assert!(rms(gap) < 0.05, "the gap is (concealed) near-silence, not audio shifted into it");

    // Debian's tools agree.
    let ffprobe = ensure_tool("ffprobe", "ffmpeg");
    let out = run(
        Command::new(ffprobe)
            .args(["-v", "error", "-show_entries", "stream=codec_name,channels:format=duration", "-of", "default=nw=1"])
            .arg(&done.path),
        "ffprobe",
        Duration::from_secs(30),
    )
    .expect("ffprobe reads the file");
    eprintln!("ffprobe: {out}");
    assert!(out.contains("codec_name=opus"), "{out}");
    assert!(out.contains("channels=1"), "{out}");
    let duration: f64 = out
        .lines()
        .find_map(|l| l.strip_prefix("duration="))
        .and_then(|d| d.trim().parse().ok())
        .expect("ffprobe prints the duration");
    assert!((duration - expected_samples as f64 / 48_000.0).abs() < 0.021, "ffprobe duration {duration}");
    let opusinfo = ensure_tool("opusinfo", "opus-tools");
    let out = run(Command::new(opusinfo).arg(&done.path), "opusinfo", Duration::from_secs(30))
        .expect("opusinfo reads the file");
    eprintln!("opusinfo: {out}");
    assert!(!out.contains("WARNING") && !out.contains("ERROR"), "opusinfo complains:\n{out}");
    assert!(out.contains("Pre-skip: 312"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_size_limit_ends_the_file_within_the_limit_as_a_valid_stream() {
    let dir = temp_dir("rec-limit");
    let cfg = RecordingConfig { max_bytes: 4096, ..config(&dir) };
    let rec = Recorder::start("limited", SystemTime::now(), &cfg, None).expect("valid config");
    let frames = tone_frames(440.0, 300);
    let mut refused = 0;
    for (i, f) in frames.iter().enumerate() {
        if rec.push(i as u64, Bytes::from(f.clone())) == PushOutcome::Finished {
            refused += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let done = rec.stop_and_wait(Duration::from_secs(10)).expect("finished");
    assert_eq!(done.reason, StopReason::SizeLimit);
    assert_eq!(done.reason.code(), "limit");
    let data = std::fs::read(&done.path).expect("the file exists");
    assert_eq!(done.bytes, data.len() as u64);
    assert!(data.len() <= 4096 && data.len() > 3000, "{} bytes", data.len());
    let pages = read_pages(&data).expect("well-formed pages");
    assert_eq!(pages.last().map(|p| p.flags & 0x04), Some(0x04), "ends with EOS");
    assert!(refused > 0, "pushes after the limit are refused");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_duration_limit_ends_the_file_at_the_limit() {
    let dir = temp_dir("rec-duration");
    let cfg = RecordingConfig { max_duration: Duration::from_secs(1), ..config(&dir) };
    let rec = Recorder::start("short", SystemTime::now(), &cfg, None).expect("valid config");
    // The writer may finish (at 1 s) before the last pushes: those are refused, not queued.
    let outcomes: Vec<PushOutcome> =
        tone_frames(440.0, 100).into_iter().enumerate().map(|(i, f)| rec.push(i as u64, Bytes::from(f))).collect();
    assert!(outcomes[..50].iter().all(|o| *o == PushOutcome::Queued));
    assert!(outcomes.iter().all(|o| *o != PushOutcome::Dropped));
    let done = rec.stop_and_wait(Duration::from_secs(10)).expect("finished");
    assert_eq!(done.reason, StopReason::DurationLimit);
    assert!(
        done.duration <= Duration::from_secs(1) && done.duration > Duration::from_millis(970),
        "{:?}",
        done.duration
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unwritable_directory_ends_the_recording_with_an_error_not_a_panic() {
    let dir = temp_dir("rec-bad");
    let file = dir.join("not-a-directory");
    std::fs::write(&file, b"x").expect("write a file");
    let cfg = config(&file.join("sub"));
    let rec = Recorder::start("demo", SystemTime::now(), &cfg, None).expect("the config itself is valid");
    let started = std::time::Instant::now();
    let outcome = loop {
        if let Some(o) = rec.outcome() {
            break o;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "no outcome after 5 s");
        // Pushing meanwhile never blocks and never panics.
        let _ = rec.push(0, Bytes::from_static(&[0xF8, 0]));
        std::thread::sleep(Duration::from_millis(5));
    };
    let StopReason::Error(msg) = &outcome.reason else { panic!("expected an error, got {:?}", outcome.reason) };
    assert!(msg.contains("cannot create directory"), "{msg}");
    assert_eq!(outcome.reason.code(), "error");
    assert_eq!(outcome.bytes, 0);
    assert_eq!(rec.push(1, Bytes::from_static(&[0xF8, 0])), PushOutcome::Finished);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_full_queue_drops_and_counts_without_blocking() {
    let dir = temp_dir("rec-queue");
    let cfg = RecordingConfig { queue_frames: 4, ..config(&dir) };
    let rec = Recorder::start("busy", SystemTime::now(), &cfg, None).expect("valid config");
    let frames = tone_frames(440.0, 200);
    let t = std::time::Instant::now();
    let dropped = frames
        .iter()
        .enumerate()
        .filter(|(i, f)| rec.push(*i as u64, Bytes::from((*f).clone())) == PushOutcome::Dropped)
        .count();
    let took = t.elapsed();
    let done = rec.stop_and_wait(Duration::from_secs(10)).expect("finished");
    let stats = rec.stats();
    eprintln!("200 pushes in {took:?}: {dropped} dropped; {stats:?}");
    assert_eq!(stats.dropped, dropped as u64);
    assert!(took < Duration::from_millis(200), "pushing never waits on the writer");
    // Every tick is in the file: written or concealed (dropped frames inside the run become concealment).
    assert_eq!(stats.frames + stats.gap_frames, done.duration.as_micros() as u64 * 48 / 1000 / 960 + 1);
    assert_eq!(done.reason, StopReason::Stopped);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The room's real listener stream (tutti-mix `Room`, real Opus in and out):
/// 440 Hz alone, then 660 + 880 Hz, then ticks the recorder never gets (as
/// when the clock overran), then all three. Each phase's tones are found
/// in the file at their times, and no other.
#[test]
fn a_rooms_listener_stream_records_every_talker_at_its_time() {
    use tutti_mix::{MixPool, Packet, ParticipantId, Room, RoomConfig, level_of, tone};
    let dir = temp_dir("rec-room");
    let rec = Recorder::start("room", SystemTime::now(), &config(&dir), None).expect("valid config");
    let pool = MixPool::new(1).expect("a mix pool");
    let mut room = Room::new(RoomConfig::default()).expect("a room");
    let freqs = [440.0f32, 660.0, 880.0];
    let mut encoders: Vec<opus::Encoder> = freqs
        .iter()
        .map(|_| opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Voip).expect("an encoder"))
        .collect();
    for i in 0..3 {
        room.add_participant(ParticipantId(i)).expect("join");
    }
    // Phases in ticks: [0, 75) 440 alone; [75, 150) 660 + 880; [150, 175) not recorded; [175, 250) all three.
    let talking = |i: usize, t: u64| match t {
        0..75 => i == 0,
        75..150 => i > 0,
        150..175 => false,
        _ => true,
    };
    for t in 0..250u64 {
        for (i, enc) in encoders.iter_mut().enumerate() {
            let amp = if talking(i, t) { 0.2 } else { 0.0 };
            let pcm = tone(freqs[i], amp, t * 960);
            let payload = Bytes::from(enc.encode_vec_float(&pcm, 1500).expect("encode"));
            let packet = Packet { seq: t as u16, timestamp: t as u32 * 960, payload, level: Some(level_of(&pcm)) };
            room.push_packet(ParticipantId(i as u64), packet).expect("in the room");
        }
        room.tick(&pool, t);
        if !(150..175).contains(&t) {
            let frame = room.listener_payload().clone();
            assert_eq!(rec.push(t, frame), PushOutcome::Queued);
        }
    }
    let done = rec.stop_and_wait(Duration::from_secs(10)).expect("finished");
    assert_eq!(done.reason, StopReason::Stopped);
    assert_eq!(rec.stats().gap_frames, 25);
    let data = std::fs::read(&done.path).expect("the file");
    let pages = read_pages(&data).expect("well-formed pages");
    assert_eq!(pages.last().map(|p| p.granule), Some(250 * 960));
    let mut dec = opus::Decoder::new(48_000, opus::Channels::Mono).expect("a decoder");
    let mut pcm = Vec::new();
    for p in &packets(&pages)[2..] {
        let mut out = [0f32; 960];
        assert_eq!(dec.decode_float(p, &mut out, false).expect("decodes"), 960);
        pcm.extend_from_slice(&out);
    }
    let pcm = &pcm[usize::from(PRE_SKIP)..];
    // Windows well inside each phase (the room's jitter buffer delays the mix by a few frames).
    let window = |from_tick: u64, to_tick: u64| &pcm[(from_tick * 960) as usize..(to_tick * 960) as usize];
    for (name, w, expect) in [
        ("440 alone", window(20, 70), [true, false, false]),
        ("660 + 880", window(95, 145), [false, true, true]),
        ("all three", window(195, 245), [true, true, true]),
    ] {
        let amps: Vec<f32> = freqs.iter().map(|&f| tutti_mix::goertzel(w, f)).collect();
        eprintln!("{name}: {amps:.3?}");
        for ((&f, &a), &e) in freqs.iter().zip(&amps).zip(&expect) {
            if e {
                assert!(a > 0.1, "{name}: {f} Hz only at {a}");
            } else {
                assert!(a < 0.02, "{name}: {f} Hz present at {a}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Packets of every awkward size (0 mod 255, 255 exactly, the largest
/// Opus packet) survive the page writer: read back byte for byte, pages
/// never over 255 lacing values, granules on the right pages.
#[test]
fn the_page_writer_round_trips_packets_of_every_size() {
    use tutti_server::outputs::ogg::{MAX_PACKET_BYTES, OggOpusWriter, OpusHead};
    let head = OpusHead { channels: 2, pre_skip: 0, input_rate: 48_000 };
    let mut w = OggOpusWriter::new(Vec::new(), 42, head, "t", &["A=b".into()]).expect("a Vec accepts");
    let mut sizes = vec![1usize, 254, 255, 256, 509, 510, 511, 1275, MAX_PACKET_BYTES];
    let mut x = 12_345u32;
    for _ in 0..300 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        sizes.push(1 + (x >> 8) as usize % MAX_PACKET_BYTES);
    }
    let sent: Vec<Vec<u8>> =
        sizes.iter().enumerate().map(|(i, &n)| (0..n).map(|j| (i * 31 + j) as u8 | 0x80).collect()).collect();
    for p in &sent {
        w.push_packet(p, 960).expect("a Vec accepts");
    }
    assert!(w.push_packet(&[], 960).is_err(), "an empty packet is refused");
    assert!(w.push_packet(&vec![0; MAX_PACKET_BYTES + 1], 960).is_err(), "an oversized packet is refused");
    w.finish().expect("a Vec accepts");
    let data = std::mem::take(w.get_mut());
    let pages = read_pages(&data).expect("well-formed pages");
    let got = packets(&pages);
    assert_eq!(got.len(), 2 + sent.len());
    assert_eq!(&got[2..], &sent[..]);
    // Each audio page's granule is the sample count after its last packet.
    let mut count = 0i64;
    for p in &pages[2..] {
        assert!(!p.open_end, "the writer never splits a packet across pages");
        count += p.segments.len() as i64 * 960;
        assert_eq!(p.granule, count);
    }
}
