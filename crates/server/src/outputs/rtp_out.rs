//! Forwarding a room's mix as plain RTP (RFC 3550, Opus payload per
//! RFC 7587) to a fixed UDP address: a broadcast encoder, a captioning
//! service, `ffplay`.
//!
//! The forwarder sends the room's listener frames (the stream a listen-only
//! participant hears: no extra encode) with its own SSRC, a sequence number
//! that goes up by one per packet from a random start, and an RTP
//! timestamp of `offset + tick × 960` (random offset), so ticks without a
//! frame (DTX) show as a timestamp jump, as RFC 7587 expects. The marker
//! bit is set on the first packet after such a gap (start of a talkspurt).
//!
//! The socket is non-blocking; a send that fails (buffer full, no route,
//! ICMP port unreachable reported on a later send) is counted and the
//! frame lost, never retried: this is live audio. No RTCP is sent; there
//! is no SRTP: use it on a trusted network or loopback.
//!
//! [`RtpForwarder::sdp`] renders the SDP a receiver needs, e.g.
//! `ffmpeg -protocol_whitelist file,udp,rtp -i stream.sdp out.wav`.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};

/// Samples per mixer tick (20 ms at 48 kHz): the RTP clock advance per tick.
const TICK_SAMPLES: u32 = 960;
/// Largest payload forwarded, in bytes (keeps packets under a 1,500-byte MTU).
pub const MAX_PAYLOAD_BYTES: usize = 1_400;

/// Where and how to forward.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RtpOutConfig {
    /// The receiver's address.
    pub dest: SocketAddr,
    /// Local address to send from (port 0: any).
    pub bind: SocketAddr,
    /// RTP payload type (dynamic: 96..=127; 111 is the common Opus choice).
    pub payload_type: u8,
    /// The SSRC; `None`: random.
    pub ssrc: Option<u32>,
    /// Whether the stream is stereo (`a=fmtp` `stereo=1`): a spatial room's stereo render.
    pub stereo: bool,
}

impl RtpOutConfig {
    /// Forwarding to `dest` from any local port, payload type 111, random SSRC, mono.
    pub fn new(dest: SocketAddr) -> Self {
        let bind = if dest.is_ipv4() { SocketAddr::from(([0, 0, 0, 0], 0)) } else { SocketAddr::from(([0u16; 8], 0)) };
        Self { dest, bind, payload_type: 111, ssrc: None, stereo: false }
    }
}

/// Why a forwarder could not start.
#[derive(Debug, thiserror::Error)]
pub enum RtpOutError {
    /// The payload type is not a dynamic one (96..=127).
    #[error("rtp_out.payload_type must be 96..=127, got {0}")]
    PayloadType(u8),
    /// The destination is unspecified (0.0.0.0 / ::) or port 0.
    #[error("rtp_out.dest {0} is not a usable address")]
    Dest(SocketAddr),
    /// The socket could not be made.
    #[error("rtp_out socket: {0}")]
    Socket(io::Error),
}

/// What [`RtpForwarder::send`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOutcome {
    /// Handed to the kernel.
    Sent,
    /// Lost: the send failed (counted).
    Failed,
    /// Not sent: the frame is empty or larger than [`MAX_PAYLOAD_BYTES`], or its tick is not after the last (counted).
    Invalid,
}

/// Counters (for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RtpOutStats {
    /// Packets sent.
    pub packets: u64,
    /// Bytes sent (RTP header included).
    pub bytes: u64,
    /// Sends that failed.
    pub failed: u64,
    /// Frames refused (empty, too large, tick not after the last).
    pub invalid: u64,
}

/// Sends one room's listener frames as an RTP stream. Owned by the thread
/// that has the frames (the mix clock); `&mut self` per send, no locks.
#[derive(Debug)]
pub struct RtpForwarder {
    socket: UdpSocket,
    cfg: RtpOutConfig,
    ssrc: u32,
    seq: u16,
    ts_offset: u32,
    last_tick: Option<u64>,
    buf: Vec<u8>,
    packets: AtomicU64,
    bytes: AtomicU64,
    failed: AtomicU64,
    invalid: AtomicU64,
}

impl RtpForwarder {
    /// Opens a non-blocking UDP socket for `cfg`.
    pub fn new(cfg: RtpOutConfig) -> Result<Self, RtpOutError> {
        if !(96..=127).contains(&cfg.payload_type) {
            return Err(RtpOutError::PayloadType(cfg.payload_type));
        }
        if cfg.dest.ip().is_unspecified() || cfg.dest.port() == 0 {
            return Err(RtpOutError::Dest(cfg.dest));
        }
        let socket = UdpSocket::bind(cfg.bind).map_err(RtpOutError::Socket)?;
        socket.set_nonblocking(true).map_err(RtpOutError::Socket)?;
        let r = random_bytes();
        let ssrc = cfg.ssrc.unwrap_or(u32::from_le_bytes([r[0], r[1], r[2], r[3]]));
        let seq = u16::from_le_bytes([r[4], r[5]]);
        let ts_offset = u32::from_le_bytes([r[6], r[7], r[8], r[9]]);
        Ok(Self {
            socket,
            cfg,
            ssrc,
            seq,
            ts_offset,
            last_tick: None,
            buf: Vec::with_capacity(12 + MAX_PAYLOAD_BYTES),
            packets: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            invalid: AtomicU64::new(0),
        })
    }

    /// The stream's SSRC.
    pub fn ssrc(&self) -> u32 {
        self.ssrc
    }

    /// The local address packets leave from.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Sends the Opus frame of mixer tick `tick`. Never blocks.
    pub fn send(&mut self, tick: u64, opus: &[u8]) -> SendOutcome {
        if opus.is_empty() || opus.len() > MAX_PAYLOAD_BYTES || self.last_tick.is_some_and(|t| tick <= t) {
            self.invalid.fetch_add(1, Ordering::Relaxed);
            return SendOutcome::Invalid;
        }
        let marker = self.last_tick.is_none_or(|t| tick != t + 1);
        self.last_tick = Some(tick);
        let ts = self.ts_offset.wrapping_add((tick as u32).wrapping_mul(TICK_SAMPLES));
        self.buf.clear();
        self.buf.push(0x80); // V=2, no padding, no extension, no CSRC
        self.buf.push(self.cfg.payload_type | if marker { 0x80 } else { 0 });
        self.buf.extend_from_slice(&self.seq.to_be_bytes());
        self.buf.extend_from_slice(&ts.to_be_bytes());
        self.buf.extend_from_slice(&self.ssrc.to_be_bytes());
        self.buf.extend_from_slice(opus);
        self.seq = self.seq.wrapping_add(1);
        match self.socket.send_to(&self.buf, self.cfg.dest) {
            Ok(n) => {
                self.packets.fetch_add(1, Ordering::Relaxed);
                self.bytes.fetch_add(n as u64, Ordering::Relaxed);
                SendOutcome::Sent
            }
            Err(e) => {
                let failed = self.failed.fetch_add(1, Ordering::Relaxed) + 1;
                if failed.is_power_of_two() {
                    tracing::warn!(dest = %self.cfg.dest, error = %e, failed, "rtp_out send failed");
                }
                SendOutcome::Failed
            }
        }
    }

    /// Its counters.
    pub fn stats(&self) -> RtpOutStats {
        RtpOutStats {
            packets: self.packets.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            invalid: self.invalid.load(Ordering::Relaxed),
        }
    }

    /// The SDP describing this stream, for the receiver (`name` becomes `s=`).
    pub fn sdp(&self, name: &str) -> String {
        render_sdp(&self.cfg, name)
    }
}

/// The SDP (RFC 4566, RFC 7587 §7) a receiver of `cfg`'s stream opens:
/// the destination address and port, Opus at 48 kHz, `recvonly` from the
/// receiver's side.
pub fn render_sdp(cfg: &RtpOutConfig, name: &str) -> String {
    let (family, addr) = match cfg.dest {
        SocketAddr::V4(a) => ("IP4", a.ip().to_string()),
        SocketAddr::V6(a) => ("IP6", a.ip().to_string()),
    };
    let name: String = name.chars().filter(|c| !c.is_control()).take(128).collect();
    let name = if name.trim().is_empty() { "tutti".to_owned() } else { name };
    let pt = cfg.payload_type;
    let stereo = u8::from(cfg.stereo);
    format!(
        "v=0\r\no=- 0 0 IN {family} {addr}\r\ns={name}\r\nc=IN {family} {addr}\r\nt=0 0\r\n\
         m=audio {port} RTP/AVP {pt}\r\na=rtpmap:{pt} opus/48000/2\r\n\
         a=fmtp:{pt} stereo={stereo};sprop-stereo={stereo}\r\na=recvonly\r\n",
        port = cfg.dest.port(),
    )
}

fn random_bytes() -> [u8; 10] {
    let mut b = [0u8; 10];
    // Without the OS's randomness the stream is merely predictable, not wrong.
    let _ = getrandom::fill(&mut b);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_follow_rfc_3550() {
        let rx = UdpSocket::bind("127.0.0.1:0").expect("loopback bind");
        let dest = rx.local_addr().expect("bound");
        let mut f = RtpForwarder::new(RtpOutConfig { ssrc: Some(0xABCD), ..RtpOutConfig::new(dest) }).expect("valid");
        assert_eq!(f.send(5, &[0xF8, 1, 2]), SendOutcome::Sent);
        assert_eq!(f.send(6, &[0xF8, 3]), SendOutcome::Sent);
        assert_eq!(f.send(9, &[0xF8, 4]), SendOutcome::Sent);
        assert_eq!(f.send(9, &[0xF8, 4]), SendOutcome::Invalid);
        assert_eq!(f.send(10, &[]), SendOutcome::Invalid);
        rx.set_read_timeout(Some(std::time::Duration::from_secs(2))).expect("timeout");
        let mut got = Vec::new();
        for _ in 0..3 {
            let mut b = [0u8; 64];
            let n = rx.recv(&mut b).expect("loopback delivers");
            got.push(b[..n].to_vec());
        }
        let seq = |p: &[u8]| u16::from_be_bytes([p[2], p[3]]);
        let ts = |p: &[u8]| u32::from_be_bytes([p[4], p[5], p[6], p[7]]);
        assert_eq!(got[0][0], 0x80);
        assert_eq!(got[0][1], 0x80 | 111, "first packet has the marker");
        assert_eq!(got[1][1], 111, "continuing packet has none");
        assert_eq!(got[2][1], 0x80 | 111, "packet after a gap has the marker");
        assert_eq!(seq(&got[1]), seq(&got[0]).wrapping_add(1));
        assert_eq!(seq(&got[2]), seq(&got[0]).wrapping_add(2));
        assert_eq!(ts(&got[1]).wrapping_sub(ts(&got[0])), 960);
        assert_eq!(ts(&got[2]).wrapping_sub(ts(&got[0])), 4 * 960);
        assert_eq!(&got[0][8..12], &0xABCDu32.to_be_bytes());
        assert_eq!(&got[0][12..], &[0xF8, 1, 2]);
        assert_eq!(f.stats(), RtpOutStats { packets: 3, bytes: 12 * 3 + 3 + 2 + 2, failed: 0, invalid: 2 });
    }

    #[test]
    fn bad_config_is_refused() {
        let dest: SocketAddr = "127.0.0.1:5004".parse().expect("literal");
        assert!(matches!(
            RtpForwarder::new(RtpOutConfig { payload_type: 0, ..RtpOutConfig::new(dest) }),
            Err(RtpOutError::PayloadType(0))
        ));
        let unspecified: SocketAddr = "0.0.0.0:5004".parse().expect("literal");
        assert!(matches!(RtpForwarder::new(RtpOutConfig::new(unspecified)), Err(RtpOutError::Dest(_))));
    }

    #[test]
    fn sdp_names_address_port_and_opus() {
        let sdp = render_sdp(&RtpOutConfig::new("127.0.0.1:5004".parse().expect("literal")), "room\r\ndemo");
        assert!(sdp.contains("c=IN IP4 127.0.0.1\r\n"));
        assert!(sdp.contains("m=audio 5004 RTP/AVP 111\r\n"));
        assert!(sdp.contains("a=rtpmap:111 opus/48000/2\r\n"));
        assert!(sdp.contains("s=roomdemo\r\n"), "control characters cannot break the SDP: {sdp}");
    }
}
