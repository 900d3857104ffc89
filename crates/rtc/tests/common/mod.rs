//! Shared by the rtc integration tests that run a `Mux` on a real socket.

use std::io::ErrorKind;
use std::net::UdpSocket;
use std::time::Instant;

use tutti_rtc::Mux;

/// One turn of the server side over UDP: sends what the mux queued, takes
/// every datagram waiting on `sock` (non-blocking), runs due timers. Events
/// are left for the caller to poll.
pub fn pump_server(mux: &mut Mux, sock: &UdpSocket, buf: &mut [u8], now: Instant) {
    while let Some(t) = mux.poll_transmit() {
        let _ = sock.send_to(&t.data, t.to);
    }
    loop {
        match sock.recv_from(buf) {
            Ok((n, from)) => {
                mux.handle_datagram(from, &buf[..n], now);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("server socket: {e}"),
        }
    }
    mux.handle_timeout(now);
}
