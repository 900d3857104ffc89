//! RTP out: a tone forwarded as plain RTP to a local UDP socket is parsed
//! back and decoded with libopus; and Debian's `ffmpeg`, opening the SDP
//! the forwarder renders, receives 440 Hz then 880 Hz and writes a WAV in
//! which both tones are found at their times.

mod ops_tools;

use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use ops_tools::{ensure_tool, run, temp_dir, tone_frames};
use tutti_server::outputs::rtp_out::{RtpForwarder, RtpOutConfig, SendOutcome};

#[test]
fn forwarded_rtp_parses_and_decodes_to_the_tone() {
    let rx = UdpSocket::bind("127.0.0.1:0").expect("bind loopback");
    rx.set_read_timeout(Some(Duration::from_secs(2))).expect("timeout");
    let mut fwd = RtpForwarder::new(RtpOutConfig::new(rx.local_addr().expect("bound"))).expect("valid config");
    let frames = tone_frames(440.0, 100);
    let mut dec = opus::Decoder::new(48_000, opus::Channels::Mono).expect("an Opus decoder");
    let mut pcm = Vec::new();
    let mut prev: Option<(u16, u32)> = None;
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(fwd.send(7_000 + i as u64, f), SendOutcome::Sent);
        let mut buf = [0u8; 1500];
        let n = rx.recv(&mut buf).expect("loopback delivers");
        let p = &buf[..n];
        assert_eq!(p[0] >> 6, 2, "RTP version 2");
        assert_eq!(p[1] & 0x7F, 111);
        assert_eq!(u32::from_be_bytes([p[8], p[9], p[10], p[11]]), fwd.ssrc());
        let (seq, ts) = (u16::from_be_bytes([p[2], p[3]]), u32::from_be_bytes([p[4], p[5], p[6], p[7]]));
        if let Some((s0, t0)) = prev {
            assert_eq!(seq, s0.wrapping_add(1));
            assert_eq!(ts, t0.wrapping_add(960));
        }
        prev = Some((seq, ts));
        assert_eq!(&p[12..], f.as_slice());
        let mut out = [0f32; 960];
        assert_eq!(dec.decode_float(&p[12..], &mut out, false).expect("decodes"), 960);
        pcm.extend_from_slice(&out);
    }
    let (a440, a880) = (tutti_mix::goertzel(&pcm[9_600..], 440.0), tutti_mix::goertzel(&pcm[9_600..], 880.0));
    assert!(a440 > 0.3 && a880 < 0.05, "440 Hz {a440}, 880 Hz {a880}");
    assert_eq!(fwd.stats().packets, 100);
}

/// An even local UDP port with the next one free too (ffmpeg binds RTP and RTCP), by trying a few.
fn free_port_pair() -> u16 {
    for _ in 0..50 {
        let s = UdpSocket::bind("127.0.0.1:0").expect("bind loopback");
        let port = s.local_addr().expect("bound").port() & !1;
        drop(s);
        if port > 1024
            && UdpSocket::bind(("127.0.0.1", port)).is_ok()
            && UdpSocket::bind(("127.0.0.1", port + 1)).is_ok()
        {
            return port;
        }
    }
    panic!("no free even UDP port pair on 127.0.0.1 in 50 tries");
}

#[test]
fn ffmpeg_receives_the_stream_through_the_sdp_and_hears_both_tones() {
    let ffmpeg = ensure_tool("ffmpeg", "ffmpeg");
    let dir = temp_dir("rtp-out");
    let port = free_port_pair();
    let dest: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut fwd = RtpForwarder::new(RtpOutConfig::new(dest)).expect("valid config");
    let sdp = dir.join("stream.sdp");
    std::fs::write(&sdp, fwd.sdp("tutti room demo")).expect("write the SDP");
    let wav = dir.join("out.wav");
    let mut cmd = Command::new(&ffmpeg);
    cmd.args(["-hide_banner", "-loglevel", "error", "-protocol_whitelist", "file,udp,rtp", "-i"])
        .arg(&sdp)
        .args(["-t", "2.6", "-ac", "1", "-ar", "48000", "-y"])
        .arg(&wav);
    let ffmpeg_run = std::thread::spawn(move || run(&mut cmd, "ffmpeg", Duration::from_secs(30)));
    // Wait (bounded) until ffmpeg has bound the port.
    let t = Instant::now();
    while UdpSocket::bind(dest).is_ok() {
        assert!(t.elapsed() < Duration::from_secs(15), "ffmpeg did not bind {dest} within 15 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    // 1.5 s of 440 Hz, then 1.5 s of 880 Hz (another encoder: a speaker change), paced at 20 ms.
    let frames: Vec<Vec<u8>> = tone_frames(440.0, 75).into_iter().chain(tone_frames(880.0, 75)).collect();
    let start = Instant::now();
    for (i, f) in frames.iter().enumerate() {
        let due = start + Duration::from_millis(20 * i as u64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        assert_eq!(fwd.send(i as u64, f), SendOutcome::Sent);
    }
    let out = ffmpeg_run.join().expect("the ffmpeg thread");
    if let Err(e) = out {
        panic!("ffmpeg: {e}");
    }
    let mut reader = hound::WavReader::open(&wav).expect("ffmpeg wrote a WAV");
    let spec = reader.spec();
    assert_eq!((spec.sample_rate, spec.channels), (48_000, 1));
    let pcm: Vec<f32> = reader.samples::<i16>().map(|s| f32::from(s.unwrap_or(0)) / 32_768.0).collect();
    let secs = pcm.len() as f32 / 48_000.0;
    let at = |from: f32, to: f32| &pcm[(from * 48_000.0) as usize..((to * 48_000.0) as usize).min(pcm.len())];
    let (first, second) = (at(0.2, 1.3), at(1.7, 2.5));
    let (a440, a880) = (tutti_mix::goertzel(first, 440.0), tutti_mix::goertzel(first, 880.0));
    let (b440, b880) = (tutti_mix::goertzel(second, 440.0), tutti_mix::goertzel(second, 880.0));
    eprintln!(
        "ffmpeg wrote {secs:.2} s: 0.2-1.3 s 440 Hz {a440:.3} / 880 Hz {a880:.3}; 1.7-2.5 s 440 Hz {b440:.3} / 880 Hz {b880:.3}"
    );
    assert!(secs > 2.5, "ffmpeg wrote {secs} s");
    assert!(a440 > 0.3 && a880 < 0.05, "440 Hz first");
    assert!(b880 > 0.3 && b440 < 0.05, "880 Hz second");
    assert_eq!(fwd.stats().failed, 0);
    let _ = std::fs::remove_dir_all(&dir);
}
