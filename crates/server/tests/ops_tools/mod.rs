//! Helpers the ops tests share: running a tool with a time limit, Debian's
//! ffmpeg/opus-tools (installed with apt-get when missing and we are root),
//! a minimal Ogg page reader with its own CRC, and temporary directories.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Runs `cmd` to completion within `timeout`; stdout + stderr on success.
pub fn run(cmd: &mut Command, what: &str, timeout: Duration) -> Result<String, String> {
    tutti_client::process::run_bounded_output(cmd, what, timeout).map(|(out, err)| out + &err)
}

/// The path of `/usr/bin/<bin>`, installing Debian's `package` with apt-get if it is missing and we are root.
pub fn ensure_tool(bin: &str, package: &str) -> PathBuf {
    tutti_client::process::ensure_debian_package(&format!("/usr/bin/{bin}"), package)
}

/// A fresh directory under the system's temporary directory.
pub fn temp_dir(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("tutti-{tag}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create a temporary directory");
    dir
}

/// One Ogg page, as read back.
#[derive(Debug)]
pub struct Page {
    pub flags: u8,
    pub granule: i64,
    pub serial: u32,
    pub sequence: u32,
    /// Packets (or packet pieces) on the page, split by the lacing values.
    pub segments: Vec<Vec<u8>>,
    /// Whether the last piece continues on the next page.
    pub open_end: bool,
}

/// Ogg's CRC-32, bit by bit (independent of the writer's table).
fn crc(data: &[u8]) -> u32 {
    let mut c = 0u32;
    for &b in data {
        c ^= u32::from(b) << 24;
        for _ in 0..8 {
            c = if c & 0x8000_0000 != 0 { (c << 1) ^ 0x04C1_1DB7 } else { c << 1 };
        }
    }
    c
}

/// Splits an Ogg file into pages, checking each page's capture pattern, version and CRC.
pub fn read_pages(data: &[u8]) -> Result<Vec<Page>, String> {
    let mut pages = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let h = data.get(at..at + 27).ok_or("truncated page header")?;
        if &h[..4] != b"OggS" || h[4] != 0 {
            return Err(format!("no page at byte {at}"));
        }
        let n = usize::from(h[26]);
        let lacing = data.get(at + 27..at + 27 + n).ok_or("truncated lacing")?;
        let body_len: usize = lacing.iter().map(|&l| usize::from(l)).sum();
        let end = at + 27 + n + body_len;
        let page = data.get(at..end).ok_or("truncated body")?;
        let mut zeroed = page.to_vec();
        zeroed[22..26].fill(0);
        let stored = u32::from_le_bytes([page[22], page[23], page[24], page[25]]);
        if crc(&zeroed) != stored {
            return Err(format!("bad CRC on the page at byte {at}"));
        }
        let mut segments = Vec::new();
        let mut cur = Vec::new();
        let mut off = at + 27 + n;
        for &l in lacing {
            cur.extend_from_slice(&data[off..off + usize::from(l)]);
            off += usize::from(l);
            if l < 255 {
                segments.push(std::mem::take(&mut cur));
            }
        }
        let open_end = lacing.last() == Some(&255);
        if open_end {
            segments.push(cur);
        }
        pages.push(Page {
            flags: h[5],
            granule: i64::from_le_bytes(h[6..14].try_into().map_err(|_| "granule")?),
            serial: u32::from_le_bytes(h[14..18].try_into().map_err(|_| "serial")?),
            sequence: u32::from_le_bytes(h[18..22].try_into().map_err(|_| "sequence")?),
            segments,
            open_end,
        });
        at = end;
    }
    Ok(pages)
}

/// The packets of a single-stream Ogg file, joining pieces across pages.
pub fn packets(pages: &[Page]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut carry = false;
    for p in pages {
        for (i, s) in p.segments.iter().enumerate() {
            if i == 0
                && carry
                && p.flags & 1 == 1
                && let Some(last) = out.last_mut()
            {
                last.extend_from_slice(s);
                continue;
            }
            out.push(s.clone());
        }
        carry = p.open_end;
    }
    out
}

/// 20 ms Opus frames of a `freq` Hz tone (peak 0.5) from one fresh encoder.
pub fn tone_frames(freq: f32, frames: usize) -> Vec<Vec<u8>> {
    let mut enc = opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Voip).expect("an Opus encoder");
    (0..frames)
        .map(|i| {
            let pcm = tutti_mix::tone(freq, 0.5, (i * 960) as u64);
            let mut out = [0u8; 1500];
            let n = enc.encode_float(&pcm, &mut out).expect("encoding a 20 ms frame");
            out[..n].to_vec()
        })
        .collect()
}

/// The PCM of an Ogg/Opus file (pre-skip removed), decoded with libopus.
pub fn decode_ogg(path: &std::path::Path) -> Vec<f32> {
    let data = std::fs::read(path).expect("the recording");
    let pages = read_pages(&data).expect("well-formed Ogg pages");
    let mut dec = opus::Decoder::new(48_000, opus::Channels::Mono).expect("a decoder");
    let mut pcm = Vec::new();
    for p in &packets(&pages)[2..] {
        let mut out = [0f32; 960];
        let n = dec.decode_float(p, &mut out, false).expect("every packet decodes");
        pcm.extend_from_slice(&out[..n]);
    }
    pcm.split_off(312.min(pcm.len()))
}

/// Seconds into `pcm` (48 kHz) of the first 20 ms window where `freq` is
/// heard (amplitude over `floor`), if any.
pub fn onset_of(pcm: &[f32], freq: f32, floor: f32) -> Option<f64> {
    pcm.chunks(960).position(|w| w.len() == 960 && tutti_mix::goertzel(w, freq) > floor).map(|i| i as f64 * 0.02)
}

/// Waits (up to 5 s) for every one of `files` to be closed (its last Ogg
/// page ends the stream), then checks that Debian's `ffprobe` reads each as Opus.
pub fn ffprobe_reads_opus(files: &[PathBuf]) {
    let ffprobe = ensure_tool("ffprobe", "ffmpeg");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while files.iter().any(|f| {
        read_pages(&std::fs::read(f).unwrap_or_default()).map_or(true, |p| p.last().is_none_or(|p| p.flags & 4 == 0))
    }) && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    for f in files {
        let mut cmd = Command::new(&ffprobe);
        cmd.args(["-v", "error", "-show_entries", "stream=codec_name", "-of", "csv=p=0"]).arg(f);
        let out = run(&mut cmd, "ffprobe", Duration::from_secs(20)).unwrap_or_else(|e| panic!("ffprobe: {e}"));
        assert!(out.contains("opus"), "ffprobe reads {}: {out}", f.display());
    }
}
