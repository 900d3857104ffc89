//! Plain RTP/AVP audio (no ICE, no DTLS): the SDP offer a SIP
//! gateway (FreeSWITCH, Asterisk) or `ffmpeg` sends, the answer, and the
//! RTP packets themselves (RFC 3550 header, Opus payload per RFC 7587, or
//! G.722, else G.711 PCMU/PCMA per RFC 3551 when the offer has no Opus; RFC
//! 3389 comfort noise beside G.711 and G.722).
//!
//! ```text
//! offer  c=IN IP4 10.0.0.5 / m=audio 40000 RTP/AVP 111 / a=rtpmap:111 opus/48000/2
//!   ─► PlainOffer::parse ─► { remote 10.0.0.5:40000, payload type 111 }
//! answer c=IN IP4 <server> / m=audio <server port> RTP/AVP 111 / a=rtpmap:111 opus/48000/2
//! ```
//!
//! An offer may carry SDES keys for SRTP (RFC 4568 `a=crypto`, read by
//! [`crate::sdes`]): `RTP/SAVP` must, `RTP/AVP` may ("best effort"); the
//! first line tutti takes, in the offer's order, is [`PlainOffer::crypto`],
//! answered with a key of tutti's own ([`PlainOffer::answer`] with
//! [`crate::sdes::Sdes`]). An `RTP/AVP` offer whose lines tutti cannot take
//! is plain RTP.
//!
//! Pure functions, no sockets and no clock; nothing here panics on input.
//! Plain RTP carries no encryption and no authentication: whoever can send
//! to the server's port from the right address speaks in the room. The
//! server allows it only from configured trusted networks, and takes a
//! participant's packets from its offer's exact `c=`/`m=` address only,
//! unless the offer says `a=direction:active` ([`PlainOffer::comedia`]).

use std::net::{IpAddr, SocketAddr};

/// The RTP header length without CSRCs or extension.
pub const RTP_HEADER_BYTES: usize = 12;

/// Why a plain RTP/AVP offer was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlainSdpError {
    /// No `m=audio … RTP/AVP …` (or `RTP/SAVP`) line.
    #[error("no m=audio line with the RTP/AVP or RTP/SAVP profile")]
    NoAudio,
    /// An `RTP/SAVP` offer without an `a=crypto` line tutti takes (why the first was not).
    #[error("an RTP/SAVP offer needs an a=crypto line tutti takes: {0}")]
    NoCrypto(String),
    /// The `m=audio` line is malformed or has port 0.
    #[error("the m=audio line is malformed or has port 0: {0}")]
    BadMedia(String),
    /// No `c=` line (session or media level), or one that is not an IP address.
    #[error("no usable c= connection address (an IPv4 or IPv6 literal, not 0.0.0.0): {0}")]
    BadConnection(String),
    /// No payload type of the m= line is Opus (`opus/48000`), G.722, PCMU or PCMA.
    #[error(
        "no supported codec among the m=audio formats: offer Opus (a=rtpmap:<pt> opus/48000/2), G.722 (9), PCMU (0) or PCMA (8)"
    )]
    NoCodec,
}

/// The audio codec of a plain RTP leg.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// Opus at 48 kHz (RFC 7587): what the room mixes, carried as is.
    Opus,
    /// G.711 µ-law at 8 kHz (RFC 3551 payload type 0): transcoded at the leg.
    Pcmu,
    /// G.711 A-law at 8 kHz (RFC 3551 payload type 8): transcoded at the leg.
    Pcma,
    /// G.722 at 16 kHz, 64 kbit/s (RFC 3551 payload type 9): transcoded at
    /// the leg. Its RTP clock runs at 8000 Hz (RFC 3551 §4.5.2), so 20 ms
    /// is 160 bytes and 160 clock ticks, as for G.711.
    G722,
}

impl Codec {
    /// Its RTP clock rate.
    pub fn clock_rate(self) -> u32 {
        match self {
            Self::Opus => 48_000,
            Self::Pcmu | Self::Pcma | Self::G722 => 8_000,
        }
    }

    /// Its `a=rtpmap` encoding name and clock (`opus/48000/2`, `PCMU/8000`).
    pub fn rtpmap(self) -> &'static str {
        match self {
            Self::Opus => "opus/48000/2",
            Self::Pcmu => "PCMU/8000",
            Self::Pcma => "PCMA/8000",
            Self::G722 => "G722/8000",
        }
    }

    /// Whether payload type `pt` may carry it: a dynamic one (96 to 127),
    /// or its static one (PCMU 0, PCMA 8, G.722 9).
    pub fn fits(self, pt: u8) -> bool {
        (96..=127).contains(&pt) || matches!((self, pt), (Self::Pcmu, 0) | (Self::Pcma, 8) | (Self::G722, 9))
    }

    /// The codec payload type `pt` is in an offer with these `a=rtpmap`
    /// lines (lowercased codecs): Opus on a dynamic type; PCMU, PCMA and
    /// G.722 on their static types 0, 8 and 9 (no rtpmap needed) or a dynamic one.
    fn of(pt: u8, maps: &[(u8, String)]) -> Option<Self> {
        let map = maps.iter().find(|(p, _)| *p == pt).map(|(_, c)| c.as_str());
        match (pt, map) {
            (96..=127, Some("opus/48000/2" | "opus/48000")) => Some(Self::Opus),
            (0, None | Some("pcmu/8000" | "pcmu/8000/1")) | (96..=127, Some("pcmu/8000" | "pcmu/8000/1")) => {
                Some(Self::Pcmu)
            }
            (8, None | Some("pcma/8000" | "pcma/8000/1")) | (96..=127, Some("pcma/8000" | "pcma/8000/1")) => {
                Some(Self::Pcma)
            }
            (9, None | Some("g722/8000" | "g722/8000/1")) | (96..=127, Some("g722/8000" | "g722/8000/1")) => {
                Some(Self::G722)
            }
            _ => None,
        }
    }
}

/// A plain RTP/AVP (or SDES RTP/SAVP) offer: where the participant
/// receives, its codec and payload type, its SRTP key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlainOffer {
    /// The address and port the participant receives RTP on (`c=` and `m=audio`).
    pub remote: SocketAddr,
    /// The codec answered: Opus when offered, else G.722 when offered
    /// (wideband beats narrowband), else the first of PCMU and PCMA in the offer's order.
    pub codec: Codec,
    /// Its payload type in the offer.
    pub payload_type: u8,
    /// The offer says `a=direction:active` (session or audio level): the
    /// "comedia" convention (draft-ietf-mmusic-sdp-comedia, RFC 4145's
    /// `direction` attribute) of a sender behind NAT, whose packets come from
    /// another port than the one it offered and which expects the answer's
    /// media back at that source (symmetric RTP). Without it only the offered
    /// address counts.
    pub comedia: bool,
    /// The SSRC the offer announces for its audio (`a=ssrc:`), if any: a
    /// comedia latch takes only packets of that SSRC, so another process
    /// on the gateway's address cannot take the participant over.
    pub ssrc: Option<u32>,
    /// RFC 4733 keypad events (`a=rtpmap:<pt> telephone-event/<rate>`) the
    /// offer carries: at the codec's clock when it offers that (48000 Hz
    /// for Opus, 8000 Hz for G.711), else at the other; `None` when it
    /// offers neither.
    pub events: Option<TelephoneEvents>,
    /// The profile is `RTP/SAVP` (SRTP required by the offerer).
    pub savp: bool,
    /// The first `a=crypto` line of the audio section tutti takes, if any:
    /// the call's RTP is SRTP with it (always for `RTP/SAVP`).
    pub crypto: Option<crate::sdes::Crypto>,
    /// Where it receives RTCP: its RTP port (`a=rtcp-mux`, RFC 5761), the
    /// port `a=rtcp:` names (RFC 3605), or else the RTP port plus one.
    pub rtcp: RtcpPort,
    /// The payload type of RFC 3389 comfort noise (`CN/8000`: the static 13,
    /// or a dynamic one its rtpmap names) when the offer has it and the
    /// codec answered runs at 8000 Hz (G.711, G.722); `None` otherwise.
    pub comfort_noise: Option<u8>,
}

/// Where a plain leg receives RTCP, beside its RTP address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RtcpPort {
    /// The RTP port plus one (RFC 3550 §11).
    #[default]
    Next,
    /// The RTP port itself (`a=rtcp-mux`).
    Mux,
    /// This port (`a=rtcp:<port>`).
    Port(u16),
}

impl RtcpPort {
    /// Its RTCP address, for RTP to `rtp` (the offered or latched address).
    pub fn of(self, rtp: SocketAddr) -> SocketAddr {
        match self {
            Self::Next => SocketAddr::new(rtp.ip(), rtp.port().wrapping_add(1)),
            Self::Mux => rtp,
            Self::Port(p) => SocketAddr::new(rtp.ip(), p),
        }
    }
}

/// The telephone-event payload type of a call and its clock rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TelephoneEvents {
    /// Its payload type (96 to 127).
    pub payload_type: u8,
    /// Its RTP clock rate: 8000 or 48000.
    pub rate: u32,
}

/// Whether an SDP offer is a plain RTP/AVP one: its first `m=audio` line
/// uses the `RTP/AVP` or the SDES `RTP/SAVP` profile (a WebRTC offer says
/// `UDP/TLS/RTP/SAVPF`).
pub fn is_plain_offer(sdp: &str) -> bool {
    sdp.lines()
        .map(str::trim)
        .find(|l| l.starts_with("m=audio"))
        .and_then(|l| l.split_whitespace().nth(2))
        .is_some_and(plain_profile)
}

/// `RTP/AVP` or `RTP/SAVP`, any case.
fn plain_profile(proto: &str) -> bool {
    proto.eq_ignore_ascii_case("RTP/AVP") || proto.eq_ignore_ascii_case("RTP/SAVP")
}

/// At most this many `a=crypto` lines of an offer are read.
const MAX_CRYPTO_LINES: usize = 16;

fn connection(line: &str) -> Result<IpAddr, PlainSdpError> {
    // c=IN IP4 10.0.0.5 (a multicast "/ttl" suffix is not for us).
    let mut parts = line.trim_start_matches("c=").split_whitespace();
    let (net, kind, addr) = (parts.next(), parts.next(), parts.next());
    let bad = || PlainSdpError::BadConnection(line.to_owned());
    if net != Some("IN") || !matches!(kind, Some("IP4" | "IP6")) {
        return Err(bad());
    }
    let ip: IpAddr = addr.ok_or_else(bad)?.parse().map_err(|_| bad())?;
    if ip.is_unspecified() || ip.is_multicast() || (kind == Some("IP4")) != ip.is_ipv4() {
        return Err(bad());
    }
    Ok(ip)
}

/// The first plain audio section as read so far: port, formats, its own
/// `c=` address, and its `a=rtpmap` lines (payload type, lowercased codec).
type AudioSection = (u16, Vec<u8>, Option<IpAddr>, Vec<(u8, String)>);

impl PlainOffer {
    /// Parses a plain RTP/AVP offer: the first `m=audio` line with the
    /// `RTP/AVP` profile, its (or the session's) `c=` address, and its
    /// codec: the first payload type that `a=rtpmap` maps to `opus/48000`,
    /// else the first G.722 one, else the first PCMU or PCMA one in the offer's order.
    pub fn parse(sdp: &str) -> Result<Self, PlainSdpError> {
        let mut session_c = None;
        let (mut session_active, mut media_active) = (false, false);
        let mut media: Option<AudioSection> = None;
        let (mut in_audio, mut seen_m) = (false, false);
        let mut ssrc = None;
        let (mut savp, mut crypto, mut crypto_lines) = (false, None, 0);
        let mut crypto_refused: Option<crate::sdes::CryptoError> = None;
        let mut rtcp = RtcpPort::Next;
        for line in sdp.lines().map(str::trim) {
            if let Some(m_line) = line.strip_prefix("m=") {
                seen_m = true;
                if media.is_some() {
                    // Only the first audio section counts.
                    in_audio = false;
                    continue;
                }
                let f: Vec<&str> = m_line.split_whitespace().collect();
                if f.first() == Some(&"audio") && f.get(2).is_some_and(|p| plain_profile(p)) {
                    savp = f[2].eq_ignore_ascii_case("RTP/SAVP");
                    let bad = || PlainSdpError::BadMedia(line.to_owned());
                    // "40000" or "40000/2" (a port count; the first port is ours).
                    let port: u16 = f[1].split('/').next().unwrap_or("").parse().map_err(|_| bad())?;
                    if port == 0 {
                        return Err(bad());
                    }
                    let fmts = f[3..].iter().map(|p| p.parse::<u8>().map_err(|_| bad())).collect::<Result<_, _>>()?;
                    media = Some((port, fmts, None, Vec::new()));
                    in_audio = true;
                } else {
                    in_audio = false;
                }
                continue;
            }
            if line.starts_with("c=") {
                match &mut media {
                    Some(m) if in_audio => m.2 = Some(connection(line)?),
                    _ if !seen_m => session_c = Some(connection(line)?),
                    _ => {}
                }
                continue;
            }
            if line.strip_prefix("a=direction:").is_some_and(|d| d.trim().eq_ignore_ascii_case("active")) {
                match &media {
                    Some(_) if in_audio => media_active = true,
                    _ if !seen_m => session_active = true,
                    _ => {}
                }
                continue;
            }
            if in_audio && let Some(value) = line.strip_prefix("a=crypto:") {
                crypto_lines += 1;
                if crypto.is_none() && crypto_lines <= MAX_CRYPTO_LINES {
                    match crate::sdes::Crypto::parse(value) {
                        Ok(c) => crypto = Some(c),
                        Err(e) => {
                            crypto_refused.get_or_insert(e);
                        }
                    }
                }
                continue;
            }
            if in_audio && line == "a=rtcp-mux" {
                rtcp = RtcpPort::Mux;
                continue;
            }
            if in_audio
                && rtcp == RtcpPort::Next
                && let Some(rest) = line.strip_prefix("a=rtcp:")
                && let Some(Ok(port @ 1..)) = rest.split_whitespace().next().map(str::parse::<u16>)
            {
                rtcp = RtcpPort::Port(port);
                continue;
            }
            if in_audio
                && ssrc.is_none()
                && let Some(rest) = line.strip_prefix("a=ssrc:")
            {
                ssrc = rest.split_whitespace().next().and_then(|s| s.parse::<u32>().ok());
                continue;
            }
            if in_audio
                && let Some(rest) = line.strip_prefix("a=rtpmap:")
                && let Some(m) = &mut media
                && let Some((pt, codec)) = rest.split_once(char::is_whitespace)
                && let Ok(pt) = pt.parse::<u8>()
            {
                m.3.push((pt, codec.trim().to_ascii_lowercase()));
            }
        }
        let (port, fmts, media_c, maps) = media.ok_or(PlainSdpError::NoAudio)?;
        if savp && crypto.is_none() {
            let why = crypto_refused.map_or_else(|| "it has none".to_owned(), |e| e.to_string());
            return Err(PlainSdpError::NoCrypto(why));
        }
        let ip = media_c.or(session_c).ok_or_else(|| PlainSdpError::BadConnection("no c= line".to_owned()))?;
        let codecs = || fmts.iter().filter_map(|&pt| Some((Codec::of(pt, &maps)?, pt)));
        let first = |want: Codec| codecs().find(|(c, _)| *c == want);
        let (codec, payload_type) = first(Codec::Opus)
            .or_else(|| first(Codec::G722))
            .or_else(|| codecs().next())
            .ok_or(PlainSdpError::NoCodec)?;
        let comfort_noise = (codec != Codec::Opus)
            .then(|| {
                fmts.iter().copied().find(|&pt| {
                    let map = maps.iter().find(|(p, _)| *p == pt).map(|(_, c)| c.as_str());
                    matches!((pt, map), (13, None | Some("cn/8000")) | (96..=127, Some("cn/8000")))
                })
            })
            .flatten();
        let rates = if codec == Codec::Opus { [48_000, 8_000] } else { [8_000, 48_000] };
        let events = rates.into_iter().find_map(|rate| {
            let name = format!("telephone-event/{rate}");
            let pt = fmts.iter().copied().find(|pt| {
                (96..=127).contains(pt) && *pt != payload_type && maps.iter().any(|(p, c)| p == pt && *c == name)
            })?;
            Some(TelephoneEvents { payload_type: pt, rate })
        });
        Ok(Self {
            remote: SocketAddr::new(ip, port),
            codec,
            payload_type,
            comedia: session_active || media_active,
            ssrc,
            events,
            savp,
            crypto,
            rtcp,
            comfort_noise,
        })
    }

    /// The answer: receive on `local` (the server's address and port), the
    /// codec on the offered payload type, 20 ms frames, send and receive; and the
    /// offer's telephone-event payload type, when it has one (digits 0-9,
    /// `*`, `#`, A-D: events 0-15); with `srtp` (its `local` key made for
    /// the offer's [`PlainOffer::crypto`]), the offer's profile and tutti's
    /// `a=crypto` line.
    pub fn answer(&self, local: SocketAddr, session_id: u64, srtp: Option<&crate::sdes::Sdes>) -> String {
        let ip = local.ip();
        let kind = if ip.is_ipv4() { "IP4" } else { "IP6" };
        let pt = self.payload_type;
        let (mut formats, mut events) = match self.events {
            Some(TelephoneEvents { payload_type: te, rate }) => {
                (format!("{pt} {te}"), format!("a=rtpmap:{te} telephone-event/{rate}\r\na=fmtp:{te} 0-15\r\n"))
            }
            None => (pt.to_string(), String::new()),
        };
        if let Some(cn) = self.comfort_noise {
            formats = format!("{formats} {cn}");
            events = format!("{events}a=rtpmap:{cn} CN/8000\r\n");
        }
        let fmtp = match self.codec {
            Codec::Opus => format!("a=fmtp:{pt} minptime=10;useinbandfec=1\r\n"),
            Codec::Pcmu | Codec::Pcma | Codec::G722 => String::new(),
        };
        let (profile, crypto) = match srtp {
            Some(s) => (if self.savp { "RTP/SAVP" } else { "RTP/AVP" }, format!("a=crypto:{}\r\n", s.local.to_value())),
            None => ("RTP/AVP", String::new()),
        };
        // Our RTCP comes in on our RTP port (one socket for everything).
        let rtcp = if self.rtcp == RtcpPort::Mux {
            "a=rtcp-mux\r\n".to_owned()
        } else {
            format!("a=rtcp:{}\r\n", local.port())
        };
        format!(
            "v=0\r\no=tutti {session_id} 1 IN {kind} {ip}\r\ns=tutti\r\nc=IN {kind} {ip}\r\nt=0 0\r\n\
             m=audio {port} {profile} {formats}\r\na=rtpmap:{pt} {map}\r\n\
             {fmtp}{events}{crypto}{rtcp}a=ptime:20\r\na=sendrecv\r\n",
            port = local.port(),
            map = self.codec.rtpmap(),
        )
    }
}

/// Why a datagram is not an RTP packet we take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RtpParseError {
    /// Shorter than its header says, not version 2, or empty payload.
    #[error("not a well-formed RTP packet")]
    Malformed,
    /// An RTCP packet (payload type 200 to 204 in the second byte): not audio.
    #[error("an RTCP packet")]
    Rtcp,
}

/// The fields of a received RTP packet that the mixer needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpView<'a> {
    /// Payload type.
    pub payload_type: u8,
    /// Sequence number.
    pub seq: u16,
    /// Timestamp (48 kHz for Opus).
    pub timestamp: u32,
    /// Synchronization source.
    pub ssrc: u32,
    /// The payload, without CSRCs, extension or padding.
    pub payload: &'a [u8],
}

/// Parses an RTP packet (RFC 3550 §5.1): CSRCs, a header extension and
/// padding are skipped. RTCP (multiplexed or not) is told apart.
pub fn parse_rtp(data: &[u8]) -> Result<RtpView<'_>, RtpParseError> {
    if data.len() < RTP_HEADER_BYTES || data[0] >> 6 != 2 {
        return Err(RtpParseError::Malformed);
    }
    if (200..=204).contains(&data[1]) {
        return Err(RtpParseError::Rtcp);
    }
    let csrcs = usize::from(data[0] & 0x0F);
    let mut start = RTP_HEADER_BYTES + 4 * csrcs;
    if data[0] & 0x10 != 0 {
        let ext = data.get(start..start + 4).ok_or(RtpParseError::Malformed)?;
        start += 4 + 4 * usize::from(u16::from_be_bytes([ext[2], ext[3]]));
    }
    let mut end = data.len();
    if data[0] & 0x20 != 0 {
        let pad = usize::from(data[end - 1]);
        end = end.checked_sub(pad).ok_or(RtpParseError::Malformed)?;
    }
    if start >= end {
        return Err(RtpParseError::Malformed);
    }
    Ok(RtpView {
        payload_type: data[1] & 0x7F,
        seq: u16::from_be_bytes([data[2], data[3]]),
        timestamp: u32::from_be_bytes([data[4], data[5], data[6], data[7]]),
        ssrc: u32::from_be_bytes([data[8], data[9], data[10], data[11]]),
        payload: &data[start..end],
    })
}

/// Writes a 12-byte RTP header and `payload` into `out` (cleared first).
pub fn write_rtp(
    out: &mut Vec<u8>,
    payload_type: u8,
    marker: bool,
    seq: u16,
    timestamp: u32,
    ssrc: u32,
    payload: &[u8],
) {
    out.clear();
    out.push(0x80);
    out.push((payload_type & 0x7F) | if marker { 0x80 } else { 0 });
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(&timestamp.to_be_bytes());
    out.extend_from_slice(&ssrc.to_be_bytes());
    out.extend_from_slice(payload);
}

/// One RFC 4733 telephone-event payload (§2.3): the event, whether it is
/// the end of it, and its duration so far in the event clock's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyEvent {
    /// The event: 0-9 are the digits, 10 `*`, 11 `#`, 12-15 A-D.
    pub event: u8,
    /// The E bit: the event ended (sent three times, one timestamp).
    pub end: bool,
    /// The volume (dBm0 below zero, 0 to 63).
    pub volume: u8,
    /// How long it has lasted, in the event clock's units.
    pub duration: u16,
}

/// The keys of the keypad, in event order (RFC 4733 §3.2, events 0-15).
const KEYS: &[u8; 16] = b"0123456789*#ABCD";

impl KeyEvent {
    /// Parses a telephone-event payload; `None` when it is shorter than 4
    /// bytes or not a keypad event (0-15: other events are not keys).
    pub fn parse(payload: &[u8]) -> Option<Self> {
        let [event, flags, d0, d1, ..] = *payload else { return None };
        KEYS.get(usize::from(event))?;
        Some(Self { event, end: flags & 0x80 != 0, volume: flags & 0x3F, duration: u16::from_be_bytes([d0, d1]) })
    }

    /// The key it is (`0`-`9`, `*`, `#`, `A`-`D`).
    pub fn key(&self) -> char {
        KEYS.get(usize::from(self.event)).map_or('?', |k| char::from(*k))
    }

    /// The event of key `key` (`0`-`9`, `*`, `#`, `A`-`D`, any case); `None` for another character.
    pub fn of_key(key: char) -> Option<u8> {
        let key = u8::try_from(key.to_ascii_uppercase()).ok()?;
        KEYS.iter().position(|k| *k == key).map(|i| i as u8)
    }

    /// The 4 payload bytes.
    pub fn to_bytes(self) -> [u8; 4] {
        let [d0, d1] = self.duration.to_be_bytes();
        [self.event, (if self.end { 0x80 } else { 0 }) | (self.volume & 0x3F), d0, d1]
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn telephone_events_are_offered_answered_and_parsed() {
        let base = "v=0\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\n";
        let parse = |m: &str| PlainOffer::parse(&format!("{base}{m}")).expect("parses");
        let both = parse(
            "m=audio 4000 RTP/AVP 111 101 102\r\na=rtpmap:111 opus/48000/2\r\n\
             a=rtpmap:101 telephone-event/8000\r\na=rtpmap:102 telephone-event/48000\r\n",
        );
        assert_eq!(both.events, Some(TelephoneEvents { payload_type: 102, rate: 48_000 }), "48000 preferred");
        let answer = both.answer("10.1.2.3:5000".parse().expect("addr"), 7, None);
        assert!(answer.contains("m=audio 5000 RTP/AVP 111 102\r\n"), "{answer}");
        assert!(answer.contains("a=rtpmap:102 telephone-event/48000\r\na=fmtp:102 0-15\r\n"), "{answer}");
        let narrow =
            parse("m=audio 4000 RTP/AVP 111 101\r\na=rtpmap:111 opus/48000/2\r\na=rtpmap:101 telephone-event/8000\r\n");
        assert_eq!(narrow.events, Some(TelephoneEvents { payload_type: 101, rate: 8_000 }));
        // Listed in rtpmap but not among the m= formats: not offered.
        let unlisted =
            parse("m=audio 4000 RTP/AVP 111\r\na=rtpmap:111 opus/48000/2\r\na=rtpmap:101 telephone-event/8000\r\n");
        assert_eq!(unlisted.events, None);
        assert!(!unlisted.answer("10.1.2.3:5000".parse().expect("addr"), 7, None).contains("telephone-event"));

        let ev = KeyEvent::parse(&[10, 0x80 | 10, 0x03, 0x20]).expect("a key");
        assert_eq!((ev.key(), ev.end, ev.volume, ev.duration), ('*', true, 10, 800));
        assert_eq!(KeyEvent::parse(&ev.to_bytes()), Some(ev));
        assert_eq!(KeyEvent::parse(&[16, 0, 0, 0]), None, "not a keypad event");
        assert_eq!(KeyEvent::parse(&[1, 0, 0]), None, "short");
        assert_eq!(KeyEvent::of_key('#'), Some(11));
        assert_eq!(KeyEvent::of_key('d'), Some(15));
        assert_eq!(KeyEvent::of_key('x'), None);
    }

    #[test]
    fn g711_is_answered_when_opus_is_not_offered_in_the_offers_order() {
        let base = "v=0\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\n";
        let parse = |m: &str| PlainOffer::parse(&format!("{base}{m}")).expect("parses");
        let local: SocketAddr = "10.1.2.3:5000".parse().expect("addr");
        // A phone: PCMA first, PCMU, keys at 8000 Hz (no rtpmap for the static types).
        let phone = parse("m=audio 4000 RTP/AVP 8 0 101\r\na=rtpmap:101 telephone-event/8000\r\n");
        assert_eq!((phone.codec, phone.payload_type), (Codec::Pcma, 8));
        assert_eq!(phone.events, Some(TelephoneEvents { payload_type: 101, rate: 8_000 }));
        let answer = phone.answer(local, 1, None);
        assert!(answer.contains("m=audio 5000 RTP/AVP 8 101\r\na=rtpmap:8 PCMA/8000\r\n"), "{answer}");
        assert!(answer.contains("a=rtpmap:101 telephone-event/8000\r\n") && !answer.contains("fmtp:8"), "{answer}");
        // PCMU first; G.711 keeps its own clock's events even when 48000 ones are offered too.
        let pcmu = parse(
            "m=audio 4000 RTP/AVP 0 8 101 102\r\na=rtpmap:0 PCMU/8000\r\n\
             a=rtpmap:102 telephone-event/48000\r\na=rtpmap:101 telephone-event/8000\r\n",
        );
        assert_eq!((pcmu.codec, pcmu.payload_type, pcmu.events.map(|e| e.rate)), (Codec::Pcmu, 0, Some(8_000)));
        assert!(pcmu.answer(local, 1, None).contains("RTP/AVP 0 101\r\na=rtpmap:0 PCMU/8000\r\n"));
        // Opus wins wherever it is in the list.
        let both = parse("m=audio 4000 RTP/AVP 0 8 111\r\na=rtpmap:111 opus/48000/2\r\n");
        assert_eq!((both.codec, both.payload_type), (Codec::Opus, 111));
        // RTCP: the next port, the one a=rtcp names, or muxed; our answer says where ours comes in.
        let port = |sdp: &str| parse(&format!("m=audio 4000 RTP/AVP 0\r\n{sdp}")).rtcp;
        let rtp: SocketAddr = "10.0.0.5:4000".parse().expect("an address");
        let addr = |s: &str| s.parse::<SocketAddr>().expect("an address");
        assert_eq!(port("").of(rtp), addr("10.0.0.5:4001"));
        assert_eq!(port("a=rtcp:4011 IN IP4 10.0.0.5\r\n").of(rtp), addr("10.0.0.5:4011"));
        assert_eq!(port("a=rtcp:0\r\n"), RtcpPort::Next, "port 0 is no port");
        let mux = parse("m=audio 4000 RTP/AVP 0\r\na=rtcp:4011\r\na=rtcp-mux\r\n");
        assert_eq!(mux.rtcp.of(rtp), rtp);
        assert!(mux.answer(local, 1, None).contains("a=rtcp-mux\r\n"));
        assert!(pcmu.answer(local, 1, None).contains(&format!("a=rtcp:{}\r\n", local.port())));
        // A static type mapped to something else is not G.711.
        let odd = PlainOffer::parse(&format!("{base}m=audio 4000 RTP/AVP 0\r\na=rtpmap:0 G729/8000\r\n"));
        assert_eq!(odd, Err(PlainSdpError::NoCodec));
    }

    #[test]
    fn g722_beats_g711_but_not_opus_and_comfort_noise_is_answered_beside_them() {
        let base = "v=0\r\nc=IN IP4 10.0.0.5\r\n";
        let parse = |m: &str| PlainOffer::parse(&format!("{base}{m}")).expect("parses");
        let local: SocketAddr = "10.1.2.3:5000".parse().expect("addr");
        // A wideband phone: PCMU first, G.722 (static 9, no rtpmap needed), CN, keys.
        let phone = parse("m=audio 4000 RTP/AVP 0 9 13 101\r\na=rtpmap:101 telephone-event/8000\r\n");
        assert_eq!((phone.codec, phone.payload_type, phone.comfort_noise), (Codec::G722, 9, Some(13)));
        assert_eq!(phone.events.map(|e| e.rate), Some(8_000), "G.722's RTP clock is 8000 Hz");
        let answer = phone.answer(local, 1, None);
        assert!(answer.contains("m=audio 5000 RTP/AVP 9 101 13\r\na=rtpmap:9 G722/8000\r\n"), "{answer}");
        assert!(answer.contains("a=rtpmap:13 CN/8000\r\n"), "{answer}");
        // On a dynamic type too; Opus still wins, and gets no CN/8000.
        let dynamic = parse("m=audio 4000 RTP/AVP 8 98\r\na=rtpmap:98 G722/8000\r\n");
        assert_eq!((dynamic.codec, dynamic.payload_type, dynamic.comfort_noise), (Codec::G722, 98, None));
        let opus = parse("m=audio 4000 RTP/AVP 9 111 13\r\na=rtpmap:111 opus/48000/2\r\n");
        assert_eq!((opus.codec, opus.comfort_noise), (Codec::Opus, None));
        assert!(!opus.answer(local, 1, None).contains("CN/"));
        // CN beside G.711, and a static 9 mapped to something else is not G.722.
        let pcma = parse("m=audio 4000 RTP/AVP 8 13\r\na=rtpmap:13 CN/8000\r\n");
        assert_eq!((pcma.codec, pcma.comfort_noise), (Codec::Pcma, Some(13)));
        assert_eq!(
            PlainOffer::parse(&format!("{base}m=audio 4000 RTP/AVP 9\r\na=rtpmap:9 G729/8000\r\n")),
            Err(PlainSdpError::NoCodec)
        );
    }

    const FFMPEG_OFFER: &str = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=No Name\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
        a=tool:libavformat\r\nm=audio 40000 RTP/AVP 97\r\nb=AS:64\r\na=rtpmap:97 opus/48000/2\r\n\
        a=fmtp:97 sprop-stereo=0\r\n";

    #[test]
    fn an_ffmpeg_style_offer_parses_and_is_answered() {
        assert!(is_plain_offer(FFMPEG_OFFER));
        let offer = PlainOffer::parse(FFMPEG_OFFER).expect("parses");
        assert_eq!(
            offer,
            PlainOffer {
                remote: "127.0.0.1:40000".parse().expect("addr"),
                codec: Codec::Opus,
                payload_type: 97,
                comedia: false,
                ssrc: None,
                events: None,
                savp: false,
                crypto: None,
                rtcp: RtcpPort::Next,
                comfort_noise: None,
            }
        );
        let answer = offer.answer("10.1.2.3:5000".parse().expect("addr"), 7, None);
        assert!(answer.contains("c=IN IP4 10.1.2.3\r\n"), "{answer}");
        assert!(answer.contains("m=audio 5000 RTP/AVP 97\r\n"), "{answer}");
        assert!(answer.contains("a=rtpmap:97 opus/48000/2\r\n"), "{answer}");
    }

    #[test]
    fn media_level_connection_wins_and_the_first_opus_type_is_taken() {
        let sdp = "v=0\nc=IN IP4 10.0.0.1\nm=audio 4002 RTP/AVP 0 8 111 101\nc=IN IP6 fd00::5\n\
                   a=rtpmap:0 PCMU/8000\na=rtpmap:111 OPUS/48000/2\na=rtpmap:101 telephone-event/8000\n";
        let offer = PlainOffer::parse(sdp).expect("parses");
        assert_eq!(offer.remote, "[fd00::5]:4002".parse::<SocketAddr>().expect("addr"));
        assert_eq!(offer.payload_type, 111);
        assert!(offer.answer("[fd00::1]:6000".parse().expect("addr"), 1, None).contains("c=IN IP6 fd00::1"));
    }

    #[test]
    fn direction_active_asks_for_comedia_at_session_or_audio_level_only() {
        let base = "v=0\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\n";
        let audio = "m=audio 4000 RTP/AVP 111\r\na=rtpmap:111 opus/48000/2\r\n";
        let parse = |sdp: String| PlainOffer::parse(&sdp).expect("parses").comedia;
        assert!(!parse(format!("{base}{audio}")), "no attribute: the offered address only");
        assert!(parse(format!("{base}a=direction:active\r\n{audio}")), "session level");
        assert!(parse(format!("{base}{audio}a=direction:Active\r\n")), "audio level, any case");
        assert!(!parse(format!("{base}{audio}a=direction:passive\r\n")), "passive is not comedia");
        assert!(!parse(format!("{base}a=direction:both\r\n{audio}")));
        // Another section's attribute is not the audio section's.
        assert!(!parse(format!("{base}{audio}m=video 5000 RTP/AVP 96\r\na=direction:active\r\n")));
    }

    #[test]
    fn the_audio_sections_first_ssrc_is_read() {
        let base = "v=0\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\n";
        let audio = "m=audio 4000 RTP/AVP 111\r\na=rtpmap:111 opus/48000/2\r\n";
        let ssrc = |sdp: String| PlainOffer::parse(&sdp).expect("parses").ssrc;
        assert_eq!(ssrc(format!("{base}{audio}")), None);
        assert_eq!(ssrc(format!("{base}{audio}a=ssrc:12345 cname:gw\r\na=ssrc:777 cname:x\r\n")), Some(12345));
        assert_eq!(ssrc(format!("{base}{audio}a=ssrc:notanumber\r\n")), None);
        assert_eq!(ssrc(format!("{base}{audio}m=video 5000 RTP/AVP 96\r\na=ssrc:9\r\n")), None, "another section's");
    }

    #[test]
    fn sdes_offers_take_the_first_line_tutti_takes_and_are_answered_with_its_own_key() {
        let key = "WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz";
        let base = "v=0\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\n";
        let parse = |m: &str| PlainOffer::parse(&format!("{base}{m}"));
        let savp = format!(
            "m=audio 4000 RTP/SAVP 0\r\na=crypto:1 F8_128_HMAC_SHA1_80 inline:{key}\r\n\
             a=crypto:2 AES_CM_128_HMAC_SHA1_32 inline:{key}\r\na=crypto:3 AES_CM_128_HMAC_SHA1_80 inline:{key}\r\n"
        );
        assert!(is_plain_offer(&format!("{base}{savp}")));
        let offer = parse(&savp).expect("parses");
        let taken = offer.crypto.expect("a line taken");
        assert!(offer.savp);
        assert_eq!((taken.tag, taken.profile), (2, crate::SrtpProfile::Aes128CmHmacSha1_32), "the first it takes");
        let sdes = crate::sdes::Sdes { remote: taken, local: crate::sdes::Crypto::fresh(&taken).expect("random") };
        let answer = offer.answer("10.1.2.3:5000".parse().expect("addr"), 1, Some(&sdes));
        assert!(answer.contains("m=audio 5000 RTP/SAVP 0\r\n"), "{answer}");
        let ours = answer.lines().find_map(|l| l.strip_prefix("a=crypto:")).expect("a crypto line");
        assert!(ours.starts_with("2 AES_CM_128_HMAC_SHA1_32 inline:") && !ours.contains(key), "{answer}");
        assert_eq!(crate::sdes::Crypto::parse(ours), Ok(sdes.local));
        // RTP/SAVP with no line tutti takes: refused, saying why.
        let refused =
            parse(&format!("m=audio 4000 RTP/SAVP 0\r\na=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:{key}|1:4\r\n"));
        assert!(matches!(&refused, Err(PlainSdpError::NoCrypto(why)) if why.contains("MKI")), "{refused:?}");
        assert!(matches!(parse("m=audio 4000 RTP/SAVP 0\r\n"), Err(PlainSdpError::NoCrypto(_))));
        // RTP/AVP with crypto (best effort): SRTP when a line is taken, plain RTP otherwise.
        let best = parse(&format!("m=audio 4000 RTP/AVP 0\r\na=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:{key}\r\n"));
        let best = best.expect("parses");
        assert!(!best.savp && best.crypto.is_some());
        let sdes = crate::sdes::Sdes { remote: taken, local: taken };
        assert!(best.answer("10.1.2.3:5000".parse().expect("addr"), 1, Some(&sdes)).contains("RTP/AVP 0\r\n"));
        let odd = parse("m=audio 4000 RTP/AVP 0\r\na=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:short\r\n");
        assert_eq!(odd.expect("parses").crypto, None, "plain RTP");
        // Another section's line is not the audio's.
        let other = parse(&format!(
            "m=audio 4000 RTP/AVP 0\r\nm=video 5000 RTP/SAVP 96\r\na=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:{key}\r\n"
        ));
        assert_eq!(other.expect("parses").crypto, None);
    }

    #[test]
    fn bad_offers_name_what_is_wrong() {
        let webrtc = "v=0\nm=audio 9 UDP/TLS/RTP/SAVPF 111\nc=IN IP4 0.0.0.0\na=rtpmap:111 opus/48000/2\n";
        assert!(!is_plain_offer(webrtc));
        assert_eq!(PlainOffer::parse(webrtc), Err(PlainSdpError::NoAudio));
        let gsm = "v=0\nc=IN IP4 10.0.0.1\nm=audio 4000 RTP/AVP 3 96\na=rtpmap:96 speex/8000\n";
        assert_eq!(PlainOffer::parse(gsm), Err(PlainSdpError::NoCodec));
        let port0 = "v=0\nc=IN IP4 10.0.0.1\nm=audio 0 RTP/AVP 111\na=rtpmap:111 opus/48000/2\n";
        assert!(matches!(PlainOffer::parse(port0), Err(PlainSdpError::BadMedia(_))));
        let host = "v=0\nc=IN IP4 gw.example\nm=audio 4000 RTP/AVP 111\na=rtpmap:111 opus/48000/2\n";
        assert!(matches!(PlainOffer::parse(host), Err(PlainSdpError::BadConnection(_))));
        let hold = "v=0\nc=IN IP4 0.0.0.0\nm=audio 4000 RTP/AVP 111\na=rtpmap:111 opus/48000/2\n";
        assert!(matches!(PlainOffer::parse(hold), Err(PlainSdpError::BadConnection(_))));
        let none = "v=0\nm=audio 4000 RTP/AVP 111\na=rtpmap:111 opus/48000/2\n";
        assert!(matches!(PlainOffer::parse(none), Err(PlainSdpError::BadConnection(_))));
        let junk = "v=0\nc=IN IP4 10.0.0.1\nm=audio 99999 RTP/AVP x\n";
        assert!(matches!(PlainOffer::parse(junk), Err(PlainSdpError::BadMedia(_))));
        for garbage in ["", "m=audio", "m=audio 1 RTP/AVP", "\u{0}\u{ff}m=\n", "c=\nm=audio 5 RTP/AVP 300\n"] {
            assert!(PlainOffer::parse(garbage).is_err(), "{garbage:?}");
        }
    }

    /// A seeded xorshift: the random inputs of this crate's unit tests.
    pub(crate) fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// Seeded random bytes and mutations of valid inputs (the stable
    /// counterpart of the `plain_rtp` fuzz target): no panic, and what
    /// parses is consistent.
    #[test]
    fn random_and_mutated_inputs_never_panic() {
        let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
        let mut valid = Vec::new();
        write_rtp(&mut valid, 111, false, 1, 960, 7, &[0xF8; 40]);
        for round in 0..20_000 {
            let mut data: Vec<u8> =
                if round % 2 == 0 { valid.clone() } else { (0..next() % 64).map(|_| next() as u8).collect() };
            for _ in 0..next() % 4 {
                if !data.is_empty() {
                    let i = (next() as usize) % data.len();
                    data[i] = next() as u8;
                }
            }
            if let Ok(v) = parse_rtp(&data) {
                assert!(!v.payload.is_empty() && v.payload.len() + RTP_HEADER_BYTES <= data.len());
            }
            let mut sdp = FFMPEG_OFFER.as_bytes().to_vec();
            for _ in 0..next() % 6 {
                let i = (next() as usize) % sdp.len();
                sdp[i] = b" 0123456789/=:\r\nmcaRTPAVopus"[(next() % 28) as usize];
            }
            if let Ok(offer) = PlainOffer::parse(&String::from_utf8_lossy(&sdp)) {
                assert!(offer.remote.port() > 0 && offer.codec.fits(offer.payload_type), "{offer:?}");
            }
        }
    }

    #[test]
    fn rtp_round_trips_and_odd_packets_are_refused_not_panicked_on() {
        let mut buf = Vec::new();
        write_rtp(&mut buf, 111, true, 65_535, 4_000_000_000, 0xDEAD_BEEF, &[1, 2, 3]);
        assert_eq!(buf[1], 0x80 | 111);
        let v = parse_rtp(&buf).expect("parses");
        assert_eq!(
            (v.payload_type, v.seq, v.timestamp, v.ssrc, v.payload),
            (111, 65_535, 4_000_000_000, 0xDEAD_BEEF, &[1u8, 2, 3][..])
        );
        // One CSRC, a one-word extension and two bytes of padding around the payload.
        let mut odd = vec![0x80 | 0x20 | 0x10 | 1, 111, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3];
        odd.extend_from_slice(&[9, 9, 9, 9]);
        odd.extend_from_slice(&[0xBE, 0xDE, 0, 1, 7, 7, 7, 7]);
        odd.extend_from_slice(&[42, 43, 0, 2]);
        assert_eq!(parse_rtp(&odd).expect("parses").payload, &[42, 43]);
        assert_eq!(parse_rtp(&[0x80, 200, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0]), Err(RtpParseError::Rtcp));
        for bad in [&[][..], &[0x80; 11][..], &[0x40; 20][..], &[0x90, 111, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0][..]] {
            assert_eq!(parse_rtp(bad), Err(RtpParseError::Malformed), "{bad:?}");
        }
        let mut padded_away = vec![0xA0, 111, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5];
        assert_eq!(parse_rtp(&padded_away), Err(RtpParseError::Malformed));
        padded_away[12] = 200;
        assert_eq!(parse_rtp(&padded_away), Err(RtpParseError::Malformed));
    }
}
