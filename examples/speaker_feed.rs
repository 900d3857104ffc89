//! A consumer of the per-speaker feed (`GET /v1/rooms/{room}/speakers`):
//! one Ogg/Opus file per speaker, for a captioner or an agent to take each
//! voice on its own. No decode and no encode: the speakers' own frames are
//! written as they come; the ticks a speaker was not selected are filled
//! with 1-byte "lost" packets (at most 30 s per gap), so each file keeps
//! its speaker's timing.
//!
//! ```sh
//! export TUTTI_TOKEN=$(tutti token --room demo --identity captions --admin)
//! cargo run --example speaker_feed -- 127.0.0.1:8080 demo ./speakers
//! ```
//!
//! It runs until the room closes (or Ctrl-C) and writes
//! `./speakers/<identity>-<id>.opus`. Feed messages (docs/features/speaker-feed.md):
//! text `{"type":"speaker","id","identity","name"}` before a speaker's first
//! frame; binary `id (u64) · tick (u64) · level (u8) · Opus`, big-endian.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::net::TcpStream;
use std::path::{Path, PathBuf};

use tungstenite::client::IntoClientRequest;
use tutti_server::outputs::ogg::{OggOpusWriter, OpusHead, plc_packet};

/// Samples in a 20 ms frame at 48 kHz.
const FRAME: u32 = 960;
/// Most ticks of a silence filled at once (30 s).
const MAX_GAP_TICKS: u64 = 1500;

struct Speaker {
    file: PathBuf,
    ogg: OggOpusWriter<BufWriter<File>>,
    last_tick: u64,
    frames: u64,
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [api, room, dir] = args.as_slice() else {
        anyhow::bail!(
            "usage: speaker_feed <host:port> <room> <directory>   (TUTTI_TOKEN: an admin token for the room)"
        );
    };
    let token = std::env::var("TUTTI_TOKEN")
        .map_err(|_| anyhow::anyhow!("set TUTTI_TOKEN to an admin token for room '{room}'"))?;
    std::fs::create_dir_all(dir)?;
    let mut request = format!("ws://{api}/v1/rooms/{room}/speakers").into_client_request()?;
    request.headers_mut().insert("authorization", format!("Bearer {token}").parse()?);
    let (mut feed, _) = tungstenite::client(request, TcpStream::connect(api.as_str())?)
        .map_err(|e| anyhow::anyhow!("the feed of room '{room}' at {api}: {e}"))?;
    let mut names: HashMap<u64, String> = HashMap::new();
    let mut speakers: HashMap<u64, Speaker> = HashMap::new();
    loop {
        match feed.read() {
            Ok(tungstenite::Message::Text(t)) => {
                let v: serde_json::Value = serde_json::from_str(t.as_str())?;
                match v["type"].as_str() {
                    Some("speaker") => {
                        let id = v["id"].as_u64().unwrap_or_default();
                        let who = v["identity"].as_str().filter(|s| !s.is_empty()).unwrap_or("anonymous");
                        names.insert(id, who.to_owned());
                    }
                    Some("lagged") => eprintln!("the feed dropped {} ticks (this reader was too slow)", v["ticks"]),
                    _ => {}
                }
            }
            Ok(tungstenite::Message::Binary(b)) if b.len() > 17 => {
                let id = u64::from_be_bytes(b[0..8].try_into()?);
                let tick = u64::from_be_bytes(b[8..16].try_into()?);
                let name = names.get(&id).map_or("anonymous", String::as_str);
                let speaker = match speakers.get_mut(&id) {
                    Some(s) => s,
                    None => speakers.entry(id).or_insert(open(Path::new(dir), name, id, tick)?),
                };
                // The ticks this speaker was not selected: "lost" packets keep the timing.
                let gap = tick.saturating_sub(speaker.last_tick + 1).min(MAX_GAP_TICKS);
                for _ in 0..gap {
                    speaker.ogg.push_packet(&plc_packet(b[17]), FRAME)?;
                }
                speaker.ogg.push_packet(&b[17..], FRAME)?;
                speaker.last_tick = tick;
                speaker.frames += 1;
            }
            Ok(tungstenite::Message::Close(_)) | Err(tungstenite::Error::ConnectionClosed) => break,
            Ok(_) => {}
            Err(e) => {
                eprintln!("feed: {e}");
                break;
            }
        }
    }
    for s in speakers.values_mut() {
        s.ogg.finish()?;
        println!("{}: {} frames", s.file.display(), s.frames);
    }
    Ok(())
}

/// A new file for speaker `id` (named `name`), first heard at `tick`.
fn open(dir: &Path, name: &str, id: u64, tick: u64) -> anyhow::Result<Speaker> {
    let safe: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    let file = dir.join(format!("{safe}-{id}.opus"));
    let head = OpusHead { channels: 1, pre_skip: 312, input_rate: 48_000 };
    let comments = [format!("SPEAKER={name}"), format!("FIRST_TICK={tick}")];
    let ogg =
        OggOpusWriter::new(BufWriter::new(File::create(&file)?), id as u32, head, "tutti speaker_feed", &comments)?;
    Ok(Speaker { file, ogg, last_tick: tick.saturating_sub(1), frames: 0 })
}
