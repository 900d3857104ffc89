//! Mixes a few WAV files through tutti's mixing core, offline, and writes
//! what each participant hears.
//!
//! ```text
//! cargo run --release --example mix_wavs                  # the bundled clips
//! cargo run --release --example mix_wavs -- a.wav b.wav   # your own (48 kHz mono 16-bit)
//! ```
//!
//! Each WAV is one participant. Every 20 ms each one "sends" an Opus frame
//! (encoded here as their client would, with its RFC 6464 level), the room
//! ticks, and each participant's payload is decoded as their client would.
//! A silent listener joins too. Output: `target/mix_wavs/<name>-hears.wav`.

use std::error::Error;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use tutti_mix::{FRAME_SAMPLES, MixPool, Packet, ParticipantId, Pcm, Room, RoomConfig, level_of};

struct Participant {
    name: String,
    input: Vec<f32>,
    encoder: opus::Encoder,
    decoder: opus::Decoder,
    heard: Vec<f32>,
}

fn read_wav(path: &Path) -> Result<Vec<f32>, Box<dyn Error>> {
    let mut reader = hound::WavReader::open(path)?;
    let spec = reader.spec();
    if spec.sample_rate != 48_000 || spec.channels != 1 || spec.bits_per_sample != 16 {
        return Err(format!("{}: need 48 kHz mono 16-bit, got {spec:?}", path.display()).into());
    }
    Ok(reader.samples::<i16>().map(|s| s.map(|s| f32::from(s) / 32_768.0)).collect::<Result<_, _>>()?)
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut paths: Vec<PathBuf> = std::env::args().skip(1).map(PathBuf::from).collect();
    if paths.is_empty() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/audio");
        paths = vec![dir.join("alice.wav"), dir.join("bob.wav")];
    }
    let mut people = Vec::new();
    for path in &paths {
        let name = path.file_stem().map_or("participant".into(), |s| s.to_string_lossy().into_owned());
        people.push((name, read_wav(path)?));
    }
    people.push(("listener".into(), Vec::new())); // joins, never speaks

    let pool = MixPool::new(0)?; // one mix thread per core
    let mut room = Room::new(RoomConfig::default())?;
    let mut participants = Vec::new();
    for (i, (name, input)) in people.into_iter().enumerate() {
        room.add_participant(ParticipantId(i as u64))?;
        participants.push(Participant {
            name,
            input,
            encoder: opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Voip)?,
            decoder: opus::Decoder::new(48_000, opus::Channels::Mono)?,
            heard: Vec::new(),
        });
    }

    let longest = participants.iter().map(|p| p.input.len()).max().unwrap_or(0);
    let ticks = longest.div_ceil(FRAME_SAMPLES) as u64 + 5; // a few more to drain the jitter buffers
    let mut talkspurts = 0;
    for tick in 0..ticks {
        for (i, p) in participants.iter_mut().enumerate() {
            let start = tick as usize * FRAME_SAMPLES;
            let mut pcm: Pcm = [0.0; FRAME_SAMPLES];
            for (out, x) in pcm.iter_mut().zip(p.input.iter().skip(start)) {
                *out = *x;
            }
            let payload = Bytes::from(p.encoder.encode_vec_float(&pcm, 1500)?);
            let packet =
                Packet { seq: tick as u16, timestamp: (tick * 960) as u32, payload, level: Some(level_of(&pcm)) };
            room.push_packet(ParticipantId(i as u64), packet)?;
        }
        let report = room.tick(&pool, tick);
        talkspurts += report.events.iter().filter(|e| matches!(e, tutti_mix::TalkEvent::Started(_))).count();
        for (id, delivery) in room.deliveries() {
            let p = &mut participants[id.0 as usize];
            let mut pcm = [0.0f32; FRAME_SAMPLES];
            // Nothing sent this tick (DTX pause): the decoder conceals 20 ms, as a receiver's would.
            let payload: &[u8] = delivery.payload();
            p.decoder.decode_float(payload, &mut pcm, false)?;
            p.heard.extend_from_slice(&pcm);
        }
    }

    let out_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/mix_wavs");
    std::fs::create_dir_all(&out_dir)?;
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 48_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    println!("{} participants, {ticks} ticks, {talkspurts} talkspurts", participants.len());
    for p in &participants {
        let path = out_dir.join(format!("{}-hears.wav", p.name));
        let mut writer = hound::WavWriter::create(&path, spec)?;
        for &x in &p.heard {
            writer.write_sample((x.clamp(-1.0, 1.0) * 32_767.0) as i16)?;
        }
        writer.finalize()?;
        let rms = (p.heard.iter().map(|x| x * x).sum::<f32>() / p.heard.len().max(1) as f32).sqrt();
        println!("{:>10} hears everyone but themselves: {} (RMS {rms:.3})", p.name, path.display());
    }
    Ok(())
}
