//! Legs in the lobby: a phone call answered but not yet in a room (it is
//! entering its PIN, `sip/pin.rs`). The `rtp-in` thread keeps them beside
//! its participants, on the same socket: it reads their keys (RFC 4733,
//! told as [`Keypress`]es under the leg's id) and plays them the prompts
//! the SIP edge asks for, one 20 ms frame every 20 ms of its own clock (a
//! lobby needs no room, so it does not wait for the mix). Nothing of a
//! lobby leg reaches a room; a G.711 leg hears the prompts transcoded as
//! it hears a room.
//!
//! ```text
//! SIP edge ─► LobbyCommand (Add, Play, Remove) ─► the rtp-in thread
//! caller's RTP ─► its keys ─► Keypress { id: the leg } ─► SIP edge
//! prompt (Clip) ─► a frame per 20 ms ─► (G.711: transcoded) ─► RTP to the caller
//! ```
//!
//! State per leg is bounded: the prompt being played (a shared clip and a
//! position), its RTP counters and its transcoder.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tutti_rtc::PeerId;
use tutti_rtc::plain::{Codec, PlainOffer, write_rtp};

use tutti_mix::phone::NARROW_FRAME;

use super::g711::Transcoder;
use super::keys::{Keypress, KeysIn};
use crate::room::playback::Clip;

/// One frame of a prompt every this long.
const FRAME: Duration = Duration::from_millis(20);

/// What the SIP edge asks of the lobby.
pub(crate) enum LobbyCommand {
    /// A call answered: its leg, as its offer says (no room).
    Add(PeerId, PlainOffer),
    /// Play a prompt to a leg from its start (replacing the one playing).
    Play(PeerId, Arc<Clip>),
    /// The leg leaves the lobby (its call joins a room, or ends).
    Remove(PeerId),
}

struct Leg {
    payload_type: u8,
    /// The RTP clock's advance per frame (960 for Opus, 160 for G.711).
    frame_samples: u32,
    g711: Option<Box<Transcoder>>,
    events: Option<(u8, KeysIn)>,
    playing: Option<(Arc<Clip>, usize)>,
    ssrc: u32,
    seq: u16,
    ts: u32,
    /// The next frame starts a talkspurt (RFC 3551 marker).
    marker: bool,
}

/// The lobby legs of the `rtp-in` thread.
#[derive(Default)]
pub(super) struct Lobby {
    legs: HashMap<PeerId, Leg>,
    /// When the next frames go out (`None`: nothing is playing).
    next: Option<Instant>,
}

impl Lobby {
    /// Runs one command. Returns the leg's offer when it was added (the
    /// thread routes its packets by it) or its id when removed.
    pub(super) fn command(&mut self, cmd: LobbyCommand, now: Instant) -> Option<Change> {
        match cmd {
            LobbyCommand::Add(id, offer) => {
                let g711 = match offer.codec {
                    Codec::Opus => None,
                    Codec::Pcmu | Codec::Pcma | Codec::G722 => match Transcoder::new(offer.codec) {
                        Ok(t) => Some(Box::new(t)),
                        Err(e) => {
                            // It hears no prompt; its keys still work.
                            tracing::warn!(peer = %id, error = %e, "lobby leg without G.711 transcoding");
                            None
                        }
                    },
                };
                let [ssrc, seq, ts] = random_u32s();
                let leg = Leg {
                    payload_type: offer.payload_type,
                    frame_samples: offer.codec.clock_rate() / 50,
                    g711,
                    events: offer.events.map(|e| (e.payload_type, KeysIn::default())),
                    playing: None,
                    ssrc,
                    seq: seq as u16,
                    ts,
                    marker: true,
                };
                self.legs.insert(id, leg);
                Some(Change::Added(id, offer))
            }
            LobbyCommand::Play(id, clip) => {
                if let Some(leg) = self.legs.get_mut(&id) {
                    leg.playing = Some((clip, 0));
                    leg.marker = true;
                    self.next.get_or_insert(now);
                }
                None
            }
            LobbyCommand::Remove(id) => self.legs.remove(&id).map(|_| Change::Removed(id)),
        }
    }

    /// Whether `id` is a lobby leg.
    pub(super) fn has(&self, id: PeerId) -> bool {
        self.legs.contains_key(&id)
    }

    /// A packet of lobby leg `id`: the key it ends, if it is one (all else
    /// a lobby leg sends is dropped).
    pub(super) fn packet(&mut self, id: PeerId, payload_type: u8, timestamp: u32, payload: &[u8]) -> Option<Keypress> {
        let (pt, keys) = self.legs.get_mut(&id)?.events.as_mut()?;
        if payload_type != *pt {
            return None;
        }
        keys.packet(timestamp, payload).map(|key| Keypress { id: id.0, key })
    }

    /// How long the thread may wait before [`Lobby::play`] has frames to send.
    pub(super) fn wait(&self, now: Instant, longest: Duration) -> Duration {
        self.next.map_or(longest, |at| at.saturating_duration_since(now).min(longest))
    }

    /// Sends each playing leg its next frame when one is due; `to` says
    /// where a leg's RTP goes (`None`: nowhere yet). Returns the datagrams sent.
    pub(super) fn play(
        &mut self,
        now: Instant,
        socket: &UdpSocket,
        buf: &mut Vec<u8>,
        to: impl Fn(PeerId) -> Option<SocketAddr>,
    ) -> u64 {
        let Some(at) = self.next.filter(|at| *at <= now) else { return 0 };
        let mut sent = 0;
        let mut playing = false;
        for (id, leg) in &mut self.legs {
            let Some((clip, i)) = leg.playing.as_mut() else { continue };
            let frame = clip.frame(*i);
            *i += 1;
            if *i >= clip.len() {
                leg.playing = None;
            } else {
                playing = true;
            }
            let mut narrow = [0u8; NARROW_FRAME];
            let payload = match leg.g711.as_mut() {
                None => &frame.payload[..],
                Some(g711) => match g711.send(&frame.payload, &mut narrow) {
                    Some(()) => &narrow[..],
                    None => continue,
                },
            };
            leg.seq = leg.seq.wrapping_add(1);
            leg.ts = leg.ts.wrapping_add(leg.frame_samples);
            let marker = std::mem::take(&mut leg.marker);
            let Some(addr) = to(*id) else { continue };
            write_rtp(buf, leg.payload_type, marker, leg.seq, leg.ts, leg.ssrc, payload);
            if socket.send_to(buf, addr).is_ok() {
                sent += 1;
            }
        }
        // On the frame grid; a late thread catches up to now, never bursts.
        self.next = playing.then(|| (at + FRAME).max(now));
        sent
    }
}

/// A new RTP stream's SSRC, first sequence number and timestamp offset (a
/// lobby leg's, and a plain RTP participant's).
pub(super) fn random_u32s() -> [u32; 3] {
    let mut b = [0u8; 12];
    // Without randomness the stream still works; only its SSRC/offsets are predictable.
    let _ = getrandom::fill(&mut b);
    [0, 4, 8].map(|i| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]))
}

/// What a command changed, for the thread's routing of packets.
pub(super) enum Change {
    Added(PeerId, PlainOffer),
    Removed(PeerId),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::room::playback::tone_file;

    #[test]
    fn a_leg_hears_a_prompt_at_20_ms_a_frame_and_its_keys_are_told() {
        let offer = PlainOffer::parse(
            "v=0\r\nc=IN IP4 127.0.0.1\r\nm=audio 4000 RTP/AVP 0 101\r\na=rtpmap:101 telephone-event/8000\r\n",
        )
        .expect("an offer");
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let phone = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let to = phone.local_addr().expect("bound");
        let mut lobby = Lobby::default();
        let (t, id) = (Instant::now(), PeerId(7));
        assert!(matches!(lobby.command(LobbyCommand::Add(id, offer), t), Some(Change::Added(..))));
        assert_eq!(lobby.wait(t, FRAME * 5), FRAME * 5, "nothing to play: the thread's own wait");
        let clip = Arc::new(Clip::parse("tone", &tone_file(440.0, 3)).expect("a clip"));
        lobby.command(LobbyCommand::Play(id, clip), t);
        let mut buf = Vec::new();
        assert_eq!(lobby.play(t, &socket, &mut buf, |_| Some(to)), 1);
        assert_eq!(lobby.play(t, &socket, &mut buf, |_| Some(to)), 0, "the next frame is 20 ms later");
        assert_eq!(lobby.wait(t, FRAME * 5), FRAME);
        assert_eq!(lobby.play(t + FRAME, &socket, &mut buf, |_| Some(to)), 1);
        assert_eq!(lobby.play(t + FRAME * 2, &socket, &mut buf, |_| Some(to)), 1);
        assert_eq!(lobby.play(t + FRAME * 3, &socket, &mut buf, |_| Some(to)), 0, "the prompt is over");
        let mut got = [0u8; 1500];
        let (n, _) = phone.recv_from(&mut got).expect("a frame");
        assert_eq!(n, 12 + NARROW_FRAME, "a G.711 leg hears 160-byte frames");
        assert_eq!(got[1] & 0x7f, 0, "on its payload type (PCMU)");
        // A key's end packet (repeated): one key; another payload type: nothing.
        let end = [5u8, 0x80 | 10, 0, 160];
        assert_eq!(lobby.packet(id, 101, 1000, &end), Some(Keypress { id: 7, key: '5' }));
        assert_eq!(lobby.packet(id, 101, 1000, &end), None);
        assert_eq!(lobby.packet(id, 0, 1160, &end), None);
        assert!(matches!(lobby.command(LobbyCommand::Remove(id), t), Some(Change::Removed(_))));
        assert!(!lobby.has(id));
    }
}
