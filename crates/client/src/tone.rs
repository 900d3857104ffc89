//! [`ToneClient`]: a real WebRTC participant (ICE, DTLS, SRTP, Opus) that
//! sends a sine tone and keeps what it hears, for tests and tools.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tutti_mix::{Decoder, Encoder, EncoderConfig, FRAME_SAMPLES, goertzel, level_of, tone};
use tutti_rtc::{AudioPacket, ClientEvent, ClientPeer, TcpLink};

use crate::http::{Requester, request_following};

/// How a [`ToneClient`] joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinAs {
    /// `POST …/participants` with `application/sdp` (WHIP-style).
    Whip,
    /// `POST …/participants` with JSON `{sdp, name}`.
    Json,
}

/// Which network a [`ToneClient`] offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// A UDP host candidate on its own socket.
    #[default]
    Udp,
    /// Only an active TCP candidate (ICE-TCP, RFC 6544), as a browser on a
    /// network that drops UDP: it connects to the server's passive one.
    Tcp,
}

/// A real WebRTC participant for tests and tools: its own UDP socket on
/// 127.0.0.1, a [`ClientPeer`], and a sine tone it sends every 20 ms on an
/// absolute schedule (or Opus silence marked level 127 while not talking).
/// It keeps what it hears, with arrival times.
pub struct ToneClient {
    /// The WebRTC peer.
    pub peer: ClientPeer,
    socket: UdpSocket,
    /// Its tone, in Hz.
    pub freq: f32,
    /// Whether it sends its tone (true) or silence (false).
    pub talking: bool,
    /// While silent, send one packet every 400 ms and skip the rest, as an
    /// Opus encoder in DTX mode does (what tutti's answer asks for).
    pub dtx: bool,
    encoder: Encoder,
    silence: Bytes,
    /// Frames sent.
    pub sent: u64,
    next_send: Option<Instant>,
    /// Everything received, with when it arrived.
    pub heard: Vec<(Instant, AudioPacket)>,
    /// ICE and DTLS are up.
    pub connected: bool,
    /// The server closed the call (or it failed).
    pub closed: bool,
    /// Its participant URL (`/v1/rooms/{room}/participants/{id}`).
    pub location: String,
    /// Its participant id.
    pub id: u64,
    buf: Vec<u8>,
    /// Its ICE-TCP connection, when it offered only TCP.
    tcp: Option<TcpLink>,
}

impl std::fmt::Debug for ToneClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToneClient").field("freq", &self.freq).field("id", &self.id).finish()
    }
}

/// Why a [`ToneClient`] could not join.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// A socket or HTTP failure.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The server refused the join.
    #[error("the server answered {status}: {body}")]
    Refused {
        /// HTTP status.
        status: u16,
        /// The body (a JSON error).
        body: String,
    },
    /// The WebRTC side failed.
    #[error("webrtc: {0}")]
    Rtc(#[from] tutti_rtc::RtcError),
    /// The codec could not be set up.
    #[error("opus: {0}")]
    Codec(#[from] tutti_mix::MixError),
}

impl ToneClient {
    /// A client that has made its offer but not joined yet (see
    /// [`ToneClient::accept_answer`]); for joins through other channels, such
    /// as the WebSocket.
    pub fn offer(freq: f32) -> Result<(Self, String), JoinError> {
        Self::offer_over(freq, Transport::Udp)
    }

    /// [`ToneClient::offer`] over `transport`.
    pub fn offer_over(freq: f32, transport: Transport) -> Result<(Self, String), JoinError> {
        let socket = UdpSocket::bind("127.0.0.1:0")?;
        socket.set_nonblocking(true)?;
        let (peer, offer) = match transport {
            Transport::Udp => ClientPeer::new(socket.local_addr()?, Instant::now())?,
            Transport::Tcp => ClientPeer::new_tcp(std::net::Ipv4Addr::LOCALHOST.into(), Instant::now())?,
        };
        let mut encoder = Encoder::new(&EncoderConfig::default())?;
        let silence = encoder.encode(&[0.0; FRAME_SAMPLES]);
        let client = Self {
            peer,
            socket,
            freq,
            talking: true,
            dtx: false,
            encoder,
            silence,
            sent: 0,
            next_send: None,
            heard: Vec::new(),
            connected: false,
            closed: false,
            location: String::new(),
            id: 0,
            buf: vec![0; 2048],
            tcp: (transport == Transport::Tcp).then(TcpLink::new),
        };
        Ok((client, offer))
    }

    /// Joins `room` on the server at `api` over HTTP.
    pub fn join(api: SocketAddr, room: &str, freq: f32, how: JoinAs) -> Result<Self, JoinError> {
        Self::join_as(api, &Requester::default(), room, freq, how)
    }

    /// [`ToneClient::join`] as `requester` (with its token).
    pub fn join_as(
        api: SocketAddr,
        requester: &Requester<'_>,
        room: &str,
        freq: f32,
        how: JoinAs,
    ) -> Result<Self, JoinError> {
        Self::join_following(api, requester, room, freq, how, 0).map(|(client, _)| client)
    }

    /// [`ToneClient::join_as`], following up to `max_redirects` `307`s (a
    /// cluster node redirecting to the node holding the room): the request
    /// goes again to the `Location`, without the token (the redirect's
    /// ticket stands in for it). Returns the client and the redirects followed.
    pub fn join_following(
        api: SocketAddr,
        requester: &Requester<'_>,
        room: &str,
        freq: f32,
        how: JoinAs,
        max_redirects: usize,
    ) -> Result<(Self, usize), JoinError> {
        Self::join_over(api, requester, room, freq, how, max_redirects, Transport::Udp)
    }

    /// [`ToneClient::join_following`] over `transport` (TCP: the offer has
    /// only an active TCP candidate, and media goes over ICE-TCP).
    pub fn join_over(
        api: SocketAddr,
        requester: &Requester<'_>,
        room: &str,
        freq: f32,
        how: JoinAs,
        max_redirects: usize,
        transport: Transport,
    ) -> Result<(Self, usize), JoinError> {
        let (mut client, offer) = Self::offer_over(freq, transport)?;
        let (content_type, body) = match how {
            JoinAs::Whip => ("application/sdp", offer),
            JoinAs::Json => {
                ("application/json", serde_json::json!({ "sdp": offer, "name": format!("{freq} Hz") }).to_string())
            }
        };
        let path = format!("/v1/rooms/{room}/participants");
        let (r, _, redirects) =
            request_following(api, requester, "POST", &path, Some(content_type), body.as_bytes(), max_redirects)?;
        if r.status != 201 {
            return Err(JoinError::Refused { status: r.status, body: r.body });
        }
        let answer = match how {
            JoinAs::Whip => r.body.clone(),
            JoinAs::Json => serde_json::from_str::<serde_json::Value>(&r.body)
                .ok()
                .and_then(|v| v["sdp"].as_str().map(str::to_owned))
                .unwrap_or_default(),
        };
        client.location = r.header("location").unwrap_or_default().to_owned();
        let id = client.location.rsplit('/').next().and_then(|s| s.parse().ok()).unwrap_or(0);
        client.accept_answer(&answer, id)?;
        Ok((client, redirects))
    }

    /// Takes the server's answer; connecting starts.
    pub fn accept_answer(&mut self, answer: &str, id: u64) -> Result<(), JoinError> {
        self.id = id;
        self.peer.accept_answer(answer, Instant::now())?;
        Ok(())
    }

    /// Moves to a new UDP socket (a new local port, as a phone moving from
    /// Wi-Fi to mobile data gets a new address) and starts an ICE restart
    /// from it: returns the offer for the server. The old socket is closed;
    /// until the answer is applied ([`ToneClient::accept_restart`]) what
    /// the client sends leaves from the new socket.
    pub fn move_and_restart(&mut self) -> Result<String, JoinError> {
        let socket = UdpSocket::bind("127.0.0.1:0")?;
        socket.set_nonblocking(true)?;
        let offer = self.peer.restart_ice(socket.local_addr()?, Instant::now())?;
        self.socket = socket;
        Ok(offer)
    }

    /// Applies the server's answer to [`ToneClient::move_and_restart`]'s offer.
    pub fn accept_restart(&mut self, answer: &str) -> Result<(), JoinError> {
        self.peer.accept_restart(answer, Instant::now())?;
        Ok(())
    }

    /// The local address it sends from.
    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.socket.local_addr()
    }

    /// One turn: network in and out, events, and the next frame when due.
    pub fn pump(&mut self, now: Instant) {
        match &mut self.tcp {
            Some(link) => {
                if self.peer.pump_tcp(link, &mut self.buf, now).is_err() && !self.closed {
                    // The server closed the connection, or it could not be made.
                    self.closed = true;
                }
            }
            None => {
                let _ = self.peer.pump_udp(&self.socket, &mut self.buf, now);
            }
        }
        while let Some(event) = self.peer.poll_event() {
            match event {
                ClientEvent::Connected => {
                    self.connected = true;
                    self.next_send = Some(now);
                }
                ClientEvent::Audio(p) => self.heard.push((now, p)),
                ClientEvent::Closed => self.closed = true,
            }
        }
        if let Some(due) = self.next_send
            && now >= due
            && !self.closed
        {
            let (payload, level) = if self.talking {
                let pcm = tone(self.freq, 0.2, self.sent * FRAME_SAMPLES as u64);
                (self.encoder.encode(&pcm), level_of(&pcm))
            } else {
                (self.silence.clone(), 127)
            };
            if !self.talking && self.dtx && !self.sent.is_multiple_of(20) {
                self.peer.skip_frames(1);
            } else {
                let _ = self.peer.send_audio(payload, Some(level), now);
            }
            self.sent += 1;
            self.next_send = Some(due + Duration::from_millis(20));
        }
    }

    /// Decodes what arrived after `since` (mono f32 at 48 kHz).
    pub fn heard_since(&self, since: Instant) -> Vec<f32> {
        let Ok(mut dec) = Decoder::new() else { return Vec::new() };
        let mut pcm = Vec::new();
        let mut frame = [0.0f32; FRAME_SAMPLES];
        for (at, p) in &self.heard {
            if *at >= since && dec.decode(&p.payload, &mut frame).is_ok() {
                pcm.extend_from_slice(&frame);
            }
        }
        pcm
    }

    /// How loud `freq` is in what arrived after `since` (Goertzel amplitude).
    pub fn hears(&self, freq: f32, since: Instant) -> f32 {
        goertzel(&self.heard_since(since), freq)
    }

    /// Hangs up.
    pub fn close(&mut self) {
        self.peer.close();
        match &mut self.tcp {
            Some(link) => {
                let _ = self.peer.pump_tcp(link, &mut self.buf, Instant::now());
            }
            None => {
                let _ = self.peer.pump_udp(&self.socket, &mut self.buf, Instant::now());
            }
        }
    }

    /// The transport it offered.
    pub fn transport(&self) -> Transport {
        if self.tcp.is_some() { Transport::Tcp } else { Transport::Udp }
    }
}

/// Pumps `clients` every millisecond for `duration`.
pub fn run_for(clients: &mut [&mut ToneClient], duration: Duration) {
    run_until(clients, Instant::now() + duration, |_| false);
}

/// Pumps `clients` every millisecond until `done` or `deadline`. Returns whether `done` held.
pub fn run_until(
    clients: &mut [&mut ToneClient],
    deadline: Instant,
    mut done: impl FnMut(&[&mut ToneClient]) -> bool,
) -> bool {
    loop {
        let now = Instant::now();
        for c in clients.iter_mut() {
            c.pump(now);
        }
        if done(clients) {
            return true;
        }
        if now >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
