//! A spatial room's recording and RTP out follow their `stereo` setting:
//! by default (`[recording] stereo`, `[rtp_out] stereo`) they carry the
//! room's stereo render, a talker seated far left heard on the left and
//! one seated far right on the right; asked for mono, one channel. Real
//! WebRTC peers (`ToneClient`s, each its own tone), the recorded file read
//! by Debian's ffprobe and decoded with libopus, the RTP caught on a UDP
//! socket of the test and decoded with libopus.

mod common;
mod ops_tools;

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use common::{http, start_with, test_config};
use ops_tools::{ensure_tool, packets, read_pages, run, temp_dir};
use tutti_client::{JoinAs, ToneClient, run_until};
use tutti_mix::goertzel;

const JSON: Option<&str> = Some("application/json");
const LEFT_HZ: f32 = 440.0;
const RIGHT_HZ: f32 = 880.0;

fn json(r: &tutti_client::Response) -> serde_json::Value {
    serde_json::from_str(&r.body).unwrap_or(serde_json::Value::Null)
}

/// A spatial room `id` with a talker seated far left (440 Hz) and one far
/// right (880 Hz), pumped until each sent `frames` frames (bounded: 30 s).
fn seated_talkers(api: SocketAddr, id: &str, frames: u64) -> Vec<ToneClient> {
    let mut clients: Vec<ToneClient> = [(LEFT_HZ, -4), (RIGHT_HZ, 4)]
        .iter()
        .map(|&(f, seat)| {
            let c = ToneClient::join(api, id, f, JoinAs::Json).expect("join");
            let body = format!(r#"{{"attributes":{{"tutti.seat":"{seat}"}}}}"#);
            let r = http(api, "PATCH", &format!("/v1/rooms/{id}/participants/{}", c.id), JSON, body.as_bytes());
            assert_eq!(r.status, 200, "{}", r.body);
            c
        })
        .collect();
    pump(&mut clients, frames);
    clients
}

/// Pumps `clients` until each sent `frames` more frames (bounded: 30 s).
fn pump(clients: &mut [ToneClient], frames: u64) {
    let start: Vec<u64> = clients.iter().map(|c| c.sent).collect();
    let mut refs: Vec<&mut ToneClient> = clients.iter_mut().collect();
    let done = run_until(&mut refs, Instant::now() + Duration::from_secs(30), |cs| {
        cs.iter().zip(&start).all(|(c, s)| c.sent >= s + frames)
    });
    assert!(done, "every client connected and sent {frames} frames");
}

/// Decodes Opus packets with a decoder of `channels`; returns each channel.
fn decode(payloads: &[Vec<u8>], channels: usize) -> Vec<Vec<f32>> {
    let layout = if channels == 2 { opus::Channels::Stereo } else { opus::Channels::Mono };
    let mut dec = opus::Decoder::new(48_000, layout).expect("a decoder");
    let mut out = vec![Vec::new(); channels];
    for p in payloads {
        let mut pcm = vec![0f32; 960 * channels];
        let n = dec.decode_float(p, &mut pcm, false).expect("every packet decodes");
        for frame in pcm[..n * channels].chunks_exact(channels) {
            for (c, x) in out.iter_mut().zip(frame) {
                c.push(*x);
            }
        }
    }
    out
}

fn db(a: f32, b: f32) -> f32 {
    20.0 * (a / b.max(1e-6)).log10()
}

/// The last second of a stereo decode: the left talker >= 6 dB louder on
/// the left, the right one on the right.
fn assert_seated(left: &[f32], right: &[f32], what: &str) {
    assert!(left.len() > 48_000, "{what}: {} samples", left.len());
    let (l, r) = (&left[left.len() - 48_000..], &right[right.len() - 48_000..]);
    let (l440, r440, l880, r880) =
        (goertzel(l, LEFT_HZ), goertzel(r, LEFT_HZ), goertzel(l, RIGHT_HZ), goertzel(r, RIGHT_HZ));
    eprintln!("{what}: 440 Hz L {l440:.3} R {r440:.3}; 880 Hz L {l880:.3} R {r880:.3}");
    assert!(l440 > 0.02 && r880 > 0.02, "{what}: both talkers heard (440 L {l440}, 880 R {r880})");
    assert!(db(l440, r440) >= 6.0, "{what}: the far-left talker on the left: L {l440} R {r440}");
    assert!(db(r880, l880) >= 6.0, "{what}: the far-right talker on the right: L {l880} R {r880}");
}

/// Records the room until `frames` more frames were sent, with `body`;
/// returns the start's answer and the file's path.
fn record(
    api: SocketAddr,
    dir: &std::path::Path,
    clients: &mut [ToneClient],
    body: &[u8],
) -> (serde_json::Value, std::path::PathBuf) {
    let r = http(api, "POST", "/v1/rooms/stage/recording", JSON, body);
    assert_eq!(r.status, 201, "{}", r.body);
    let started = json(&r);
    pump(clients, 150);
    let r = http(api, "DELETE", "/v1/rooms/stage/recording", None, b"");
    assert_eq!(r.status, 200, "{}", r.body);
    (started, dir.join(json(&r)["file"].as_str().expect("a file name")))
}

/// The channel count ffprobe reads, and the file decoded as its `OpusHead` says.
fn probe_and_decode(path: &std::path::Path) -> (String, Vec<Vec<f32>>) {
    let probe = run(
        std::process::Command::new(ensure_tool("ffprobe", "ffmpeg"))
            .args(["-v", "error", "-show_entries", "stream=channels", "-of", "csv=p=0"])
            .arg(path),
        "ffprobe",
        Duration::from_secs(20),
    )
    .expect("ffprobe reads the file");
    let data = std::fs::read(path).expect("the recording");
    let packets = packets(&read_pages(&data).expect("well-formed Ogg pages"));
    let head = &packets[0];
    assert!(head.starts_with(b"OpusHead"), "the first packet is the OpusHead");
    (probe.trim().to_owned(), decode(&packets[2..], usize::from(head[9])))
}

#[test]
fn a_spatial_rooms_recording_is_stereo_by_default_and_mono_when_asked() {
    let dir = temp_dir("spatial-rec");
    let mut cfg = test_config();
    cfg.recording.dir = dir.display().to_string();
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let r = http(api, "POST", "/v1/rooms", JSON, br#"{"id":"stage","spatial":true}"#);
    assert_eq!(r.status, 201, "{}", r.body);
    let r = http(api, "POST", "/v1/rooms/stage/recording", JSON, br#"{"stereo":"yes"}"#);
    assert_eq!(r.status, 400, "stereo is a boolean: {}", r.body);
    let mut clients = seated_talkers(api, "stage", 50);

    // The default (`[recording] stereo = true`): two channels, the stage kept.
    let (started, path) = record(api, &dir, &mut clients, b"");
    assert_eq!(started["channels"], 2, "{started}");
    let (probed, pcm) = probe_and_decode(&path);
    assert_eq!((probed.as_str(), pcm.len()), ("2", 2), "ffprobe reads 2 channels, so does the OpusHead");
    assert_seated(&pcm[0], &pcm[1], "the stereo recording");

    // Asked for mono: one channel, both talkers in it.
    let (started, path) = record(api, &dir, &mut clients, br#"{"stereo":false}"#);
    assert_eq!(started["channels"], 1, "{started}");
    let (probed, pcm) = probe_and_decode(&path);
    assert_eq!((probed.as_str(), pcm.len()), ("1", 1), "ffprobe reads 1 channel, so does the OpusHead");
    let last = &pcm[0][pcm[0].len() - 48_000..];
    assert!(goertzel(last, LEFT_HZ) > 0.02 && goertzel(last, RIGHT_HZ) > 0.02, "both talkers in the mono file");

    for c in &mut clients {
        c.close();
    }
    rt.block_on(server.shutdown());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Opus payload of an RTP packet (RFC 3550: CSRCs and an extension skipped).
fn rtp_payload(packet: &[u8]) -> Option<&[u8]> {
    let csrcs = usize::from(packet.first()? & 0x0f);
    let mut at = 12 + 4 * csrcs;
    if packet[0] & 0x10 != 0 {
        let words = u16::from_be_bytes([*packet.get(at + 2)?, *packet.get(at + 3)?]);
        at += 4 + 4 * usize::from(words);
    }
    packet.get(at..).filter(|p| !p.is_empty())
}

#[test]
fn rtp_out_of_a_spatial_room_sends_stereo_opus_and_mono_when_asked() {
    let mut cfg = test_config();
    cfg.rtp_out.allowed = vec!["127.0.0.0/8".into()];
    let (rt, server) = start_with(cfg);
    let api = server.http_addr();
    let r = http(api, "POST", "/v1/rooms", JSON, br#"{"id":"stage","spatial":true}"#);
    assert_eq!(r.status, 201, "{}", r.body);
    let mut clients = seated_talkers(api, "stage", 50);

    for (body, channels) in [(None, 2), (Some(false), 1)] {
        let rx = UdpSocket::bind("127.0.0.1:0").expect("bind");
        rx.set_read_timeout(Some(Duration::from_millis(200))).expect("timeout");
        let mut start = serde_json::json!({ "address": rx.local_addr().expect("addr").to_string() });
        if let Some(stereo) = body {
            start["stereo"] = stereo.into();
        }
        let r = http(api, "POST", "/v1/rooms/stage/rtp_out", JSON, start.to_string().as_bytes());
        assert_eq!(r.status, 201, "{}", r.body);
        let state = json(&r);
        assert_eq!(state["channels"], channels, "{state}");
        let stereo = u8::from(channels == 2);
        assert!(state["sdp"].as_str().unwrap_or("").contains(&format!("stereo={stereo}")), "{state}");
        let catch = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = [0u8; 1500];
            let until = Instant::now() + Duration::from_secs(20);
            while got.len() < 150 && Instant::now() < until {
                if let Ok(n) = rx.recv(&mut buf)
                    && let Some(p) = rtp_payload(&buf[..n])
                {
                    got.push(p.to_vec());
                }
            }
            got
        });
        pump(&mut clients, 170);
        let got = catch.join().expect("the receiver");
        let r = http(api, "DELETE", "/v1/rooms/stage/rtp_out", None, b"");
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(got.len() >= 150, "{} packets", got.len());
        // The TOC byte's `s` bit (RFC 6716 §3.1): coded as stereo or mono.
        let coded_stereo = got.iter().filter(|p| p.len() > 2 && p[0] & 0x04 != 0).count();
        if channels == 2 {
            assert!(coded_stereo > 140, "stereo Opus: {coded_stereo} of {} packets", got.len());
            let pcm = decode(&got, 2);
            assert_seated(&pcm[0], &pcm[1], "RTP out in stereo");
        } else {
            assert_eq!(coded_stereo, 0, "mono Opus");
        }
    }
    for c in &mut clients {
        c.close();
    }
    rt.block_on(server.shutdown());
}
