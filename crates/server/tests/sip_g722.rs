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

mod common;
mod ops_tools;
#[path = "common/sip.rs"]
mod sip_common;

use std::time::{Duration, Instant};

use sip_common::{Baresip, LOCAL, pin_wrong_then_right, room_with_talker, roster, wav_tone};
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
