//! What the fuzz targets share: a server [`Mux`] with one peer connected
//! (ICE, DTLS, SRTP up) to an in-memory [`ClientPeer`], on a virtual clock.
//!
//! The handshake costs milliseconds, so one pair lives per fuzzing thread
//! and is only rebuilt once the fuzzer's input has closed it. Inputs are
//! therefore not fully independent: a crash found here is replayed with
//! `cargo fuzz run <target> <artifact>` and, if it needs the state of
//! earlier inputs, by running the whole corpus before it.

use std::net::SocketAddr;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use tutti_rtc::{Acceptor, AudioPacket, ClientEvent, ClientPeer, Mux, MuxEvent, PeerId};

/// The server's advertised address.
pub const SERVER: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1)), 4000);
/// The connected client's address.
pub const CLIENT: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2)), 5000);

/// One shared acceptor (one DTLS certificate), as in the server.
pub static ACCEPTOR: LazyLock<Acceptor> = LazyLock::new(|| {
    Acceptor::new(SERVER, Duration::from_secs(10)).expect("an acceptor (certificate generation) for the fuzzer")
});

/// A valid offer, as tutti's own client makes it.
pub fn offer() -> String {
    let (_, sdp) = ClientPeer::new(CLIENT, Instant::now()).expect("a client offer");
    sdp
}

/// A connected server peer and client, and what each received.
pub struct Pair {
    /// The server side.
    pub mux: Mux,
    /// The peer's id in the mux.
    pub peer: PeerId,
    /// The client side.
    pub client: ClientPeer,
    /// The virtual clock.
    pub now: Instant,
    /// Audio the server received from the client since the last take.
    pub audio: Vec<AudioPacket>,
    /// The server peer closed (then the pair is rebuilt).
    pub closed: bool,
}

impl Pair {
    /// A pair through ICE and DTLS, or `None` if the handshake did not
    /// complete within a bounded number of turns.
    pub fn connect() -> Option<Self> {
        let now = Instant::now();
        let mut mux = Mux::with_acceptor(ACCEPTOR.clone());
        let (mut client, offer) = ClientPeer::new(CLIENT, now).ok()?;
        let (peer, answer) = ACCEPTOR.accept(&offer, now).ok()?;
        let id = peer.id();
        mux.adopt(peer, now);
        client.accept_answer(&answer, now).ok()?;
        let mut pair = Self { mux, peer: id, client, now, audio: Vec::new(), closed: false };
        let mut server_up = false;
        for _ in 0..400 {
            server_up |= pair.pump();
            if server_up && pair.client.is_connected() {
                return Some(pair);
            }
            pair.now += Duration::from_millis(5);
        }
        None
    }

    /// Sends one real audio packet from the client and returns whether the
    /// server read it on its lean receive path (the default,
    /// `Acceptor::lean_receive`). After that first authentic packet the
    /// lean receiver never falls back to webrtc-rs, whatever garbage
    /// follows; before it, 16 failed packets would turn it off.
    pub fn open_lean(&mut self) -> bool {
        let before = self.mux.stats().lean_in;
        if self.client.send_audio(bytes::Bytes::from_static(&[0xF8, 0xFF, 0xFE]), Some(30), self.now).is_err() {
            return false;
        }
        self.pump();
        let read = self.audio.drain(..).count();
        read == 1 && self.mux.stats().lean_in == before + 1
    }

    /// Moves datagrams both ways and runs due timers until quiet (bounded).
    /// Returns whether the server reported the peer connected.
    pub fn pump(&mut self) -> bool {
        let mut connected = false;
        for _ in 0..16 {
            let mut moved = false;
            self.mux.handle_timeout(self.now);
            self.client.handle_timeout(self.now);
            while let Some(t) = self.client.poll_transmit() {
                moved = true;
                self.mux.handle_datagram(CLIENT, &t.data, self.now);
            }
            while let Some(t) = self.mux.poll_transmit() {
                moved = true;
                if t.to == CLIENT {
                    self.client.handle_datagram(SERVER, &t.data, self.now);
                }
            }
            while let Some(e) = self.mux.poll_event() {
                match e {
                    MuxEvent::Connected(_) => connected = true,
                    MuxEvent::Audio(_, a) => self.audio.push(a),
                    MuxEvent::Closed(id, _) => {
                        let _ = self.mux.remove(id);
                        self.closed = true;
                    }
                }
            }
            while let Some(e) = self.client.poll_event() {
                if e == ClientEvent::Closed {
                    self.closed = true;
                }
            }
            if !moved {
                break;
            }
        }
        connected
    }
}
