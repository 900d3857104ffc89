//! G.722 calls with a real SIP peer: Debian's baresip (installed with
//! apt-get when missing) with its G.722 module only, offering `G722/8000`
//! (payload type 9, 16 kHz audio on an 8 kHz RTP clock).
//!
//! - It dials a room: tutti answers G.722, the WebRTC participant hears
//!   baresip's 600 Hz and baresip hears the room's 440 Hz (transcoded at its
//!   leg both ways, 16 kHz to and from the room's 48 kHz), and a 5 kHz tone
//!   of a second WebRTC talker, which a G.711 call (its band ends at 4 kHz)
//!   could not carry: the call is wideband end to end.
//! - PIN dispatch over G.722: a wrong PIN (twice, by RFC 4733) hears the
//!   spoken prompts (transcoded to G.722) and gets a BYE, never a
//!   participant; the right PIN joins the room and talks both ways.
//!
//! Comfort noise (RFC 3389), with a phone made in the test (raw SIP and
//! RTP: Debian's baresip 1.0 sends no CN): its PCMA offer with `CN/8000`
//! is answered with CN; after a second of A-law silence it sends one CN
//! packet naming -30 dBov and then nothing, and the WebRTC participant
//! hears noise near that level (the room's noise suppression off); its next audio packets (silence) end it.

mod common;
mod ops_tools;
#[path = "common/sip.rs"]
mod sip_common;

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use sip_common::{
    Baresip, LOCAL, call_in, in_dialog, pin_wrong_then_right, room_with_talker, room_with_talker_on, roster,
    sip_config, wav_tone,
};
use tutti_client::{JoinAs, ToneClient, run_until};

#[test]
fn baresip_over_g722_talks_with_the_room_both_ways_in_wideband() {
    let (rt, server, api, sip, mut webrtc) = room_with_talker("wideband");
    // A second talker above G.711's band: 5 kHz.
    let mut high = ToneClient::join(api, "wideband", 5_000.0, JoinAs::Whip).expect("a second WebRTC participant joins");

    let call_seconds: u32 = 10;
    let mut baresip = Baresip::dial(sip, "wideband", "g722.so", "G722", 16_000, call_seconds, &LOCAL);
    let mut clients = [&mut webrtc, &mut high];
    let end = Instant::now() + Duration::from_secs(6);
    while roster(api, "wideband").len() < 3 && Instant::now() < end {
        run_until(&mut clients, Instant::now() + Duration::from_millis(100), |_| false);
    }
    let names = roster(api, "wideband");
    assert_eq!(names.len(), 3, "the G.722 caller joins the roster: {names:?}\nbaresip:\n{}", baresip.log());
    assert!(baresip.log().contains("G722"), "the call is G.722:\n{}", baresip.log());

    // The WebRTC participant hears baresip's 600 Hz, through G.722 and the leg's resampler.
    let since = || Instant::now() - Duration::from_secs(2);
    run_until(&mut clients, Instant::now() + Duration::from_secs(6), |cs| cs[0].hears(600.0, since()) > 0.05);
    let hears600 = clients[0].hears(600.0, since());
    assert!(hears600 > 0.05, "the WebRTC participant hears the G.722 caller at {hears600}\n{}", baresip.log());

    // baresip quits after its call; what it heard holds the room: 440 Hz, and 5 kHz (wideband), not itself.
    let child = &mut baresip.child;
    let end = Instant::now() + Duration::from_secs(u64::from(call_seconds) + 5);
    run_until(&mut clients, end, |_| !matches!(child.try_wait(), Ok(None)));
    assert!(!matches!(baresip.child.try_wait(), Ok(None)), "baresip did not quit\n{}", baresip.log());
    let (mix440, mix600) = baresip.heard();
    let mix5k = wav_tone(&baresip.dump(), 5_000.0, 3.0);
    eprintln!(
        "G.722: WebRTC hears 600 Hz {hears600:.3}; baresip heard 440 Hz {mix440:.3}, 5 kHz {mix5k:.3}, 600 Hz {mix600:.3}"
    );
    assert!(mix440 > 0.03, "the G.722 caller hears the WebRTC 440 Hz only at {mix440}");
    assert!(mix5k > 0.03, "the G.722 caller hears the room's 5 kHz (beyond G.711's band) only at {mix5k}");
    assert!(mix600 < 0.01, "the G.722 caller hears itself at {mix600}");
    rt.block_on(server.shutdown());
}

/// PIN dispatch with real baresip over G.722 (see the module's doc).
#[test]
fn baresip_over_g722_enters_a_pin_wrong_then_right() {
    pin_wrong_then_right("g722.so", "G722", 16_000, "the G.722 caller");
}

/// RMS of what `webrtc` heard over the last `seconds`.
fn rms_heard(webrtc: &ToneClient, seconds: f32) -> f32 {
    let pcm = webrtc.heard_since(Instant::now() - Duration::from_secs_f32(seconds));
    (pcm.iter().map(|x| x * x).sum::<f32>() / pcm.len().max(1) as f32).sqrt()
}

#[test]
fn a_phones_comfort_noise_is_heard_at_its_level_until_its_next_audio_packet() {
    // The room's noise suppression (on for phones by default) would take
    // the noise out in part: off here, so the level is the leg's.
    let mut cfg = sip_config("127.0.0.0/8");
    cfg.room.noise_suppression = "off".into();
    let (rt, server, api, sip, mut webrtc) = room_with_talker_on(cfg, "quiet");
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket.set_read_timeout(Some(Duration::from_millis(100))).expect("timeout");
    let (ok, to, rtp, port) = call_in(&socket, sip, "quiet", "cn", "8 13\r\na=rtpmap:13 CN/8000\r\n");
    assert!(ok.contains("RTP/AVP 8 13\r\n") && ok.contains("a=rtpmap:13 CN/8000\r\n"), "CN answered: {ok}");
    let tutti = SocketAddr::from(([127, 0, 0, 1], port));
    let (mut seq, mut ts) = (0u16, 0u32);
    // `ticks` of 20 ms, sending `payload` on `pt` each tick (`None`: nothing), the WebRTC participant running.
    let mut run = |ticks: u32, packet: Option<(u8, &[u8])>, webrtc: &mut ToneClient| {
        for _ in 0..ticks {
            if let Some((pt, payload)) = packet {
                let mut p = vec![0x80, pt];
                p.extend_from_slice(&seq.to_be_bytes());
                p.extend_from_slice(&ts.to_be_bytes());
                p.extend_from_slice(&0x0C0F_FEE0u32.to_be_bytes());
                p.extend_from_slice(payload);
                rtp.send_to(&p, tutti).expect("send");
                seq = seq.wrapping_add(1);
            }
            ts = ts.wrapping_add(160);
            let mut refs = [&mut *webrtc];
            run_until(&mut refs, Instant::now() + Duration::from_millis(20), |_| false);
        }
    };
    let silence = [0xD5u8; 160];
    run(75, Some((8, &silence)), &mut webrtc);
    assert_eq!(roster(api, "quiet").len(), 2, "the phone is in the room");
    let quiet = rms_heard(&webrtc, 0.5);
    // One CN packet: -30 dBov (RMS 0.032), then nothing for 1.5 s.
    run(1, Some((13, &[30])), &mut webrtc);
    run(75, None, &mut webrtc);
    let noise = rms_heard(&webrtc, 1.0);
    // Audio again (silence): the noise ends.
    run(50, Some((8, &silence)), &mut webrtc);
    let after = rms_heard(&webrtc, 0.5);
    eprintln!(
        "comfort noise: RMS {quiet:.4} in silence, {noise:.4} after CN at -30 dBov, {after:.4} after audio again"
    );
    assert!(quiet < 0.003, "A-law silence is quiet: {quiet}");
    assert!((0.016..0.064).contains(&noise), "-30 dBov of noise (RMS 0.032 within 6 dB) heard at {noise}");
    assert!(after < 0.003, "the next audio packet ends the noise: {after}");
    let local = socket.local_addr().expect("bound");
    socket.send_to(in_dialog("BYE", local, "cn", &to, 2).as_bytes(), sip).expect("send a BYE");
    rt.block_on(server.shutdown());
}
