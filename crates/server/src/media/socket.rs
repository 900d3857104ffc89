//! The media sockets: one UDP socket per I/O thread on the one media port
//! (SO_REUSEPORT: the kernel sends a given client address to the same
//! socket every time), read with `recvmmsg` and written with `sendmmsg`.

use std::io::IoSliceMut;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use nix::sys::socket::{MsgFlags, MultiHeaders, SockaddrStorage, recvmmsg, sendmmsg};
use tutti_rtc::Transmit;

/// Datagrams per `recvmmsg` / `sendmmsg` call.
pub(crate) const BATCH: usize = 64;
/// Largest datagram read; longer ones are truncated (and fail SRTP/DTLS).
pub(crate) const MAX_DATAGRAM: usize = 2048;

/// Binds `n` sockets on `addr` (the first fixes the port if `addr` has port
/// 0), each with SO_REUSEPORT and the buffers asked for.
pub(crate) fn bind(addr: SocketAddr, n: usize, buffer: usize) -> std::io::Result<Vec<UdpSocket>> {
    let mut sockets = Vec::with_capacity(n);
    let mut addr = addr;
    for i in 0..n {
        let s = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::DGRAM, None)?;
        s.set_reuse_port(true)?;
        // Root may exceed net.core.{r,w}mem_max; others get what the cap allows.
        let size = buffer.min(i32::MAX as usize);
        let forced = nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::RcvBufForce, &size).is_ok()
            && nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::SndBufForce, &size).is_ok();
        if !forced {
            s.set_recv_buffer_size(size)?;
            s.set_send_buffer_size(size)?;
        }
        s.bind(&addr.into())?;
        let socket: UdpSocket = s.into();
        if i == 0 {
            addr = socket.local_addr()?;
            // Linux reports twice the size set (the kernel's bookkeeping share).
            let sock = socket2::SockRef::from(&socket);
            tracing::info!(
                asked = buffer,
                recv_granted = sock.recv_buffer_size().unwrap_or(0) / 2,
                send_granted = sock.send_buffer_size().unwrap_or(0) / 2,
                forced,
                "media socket buffers (bytes)"
            );
        }
        sockets.push(socket);
    }
    Ok(sockets)
}

/// One socket with its batch buffers and syscall headers, allocated once
/// (the headers hold raw pointers, so the owning thread makes them itself).
pub(crate) struct BatchSocket {
    pub(crate) socket: UdpSocket,
    bufs: Vec<[u8; MAX_DATAGRAM]>,
    rx_headers: MultiHeaders<SockaddrStorage>,
    tx_headers: MultiHeaders<SockaddrStorage>,
    /// The destinations of the batch being sent.
    tx_addrs: Vec<Option<SockaddrStorage>>,
    got: Vec<(usize, Option<SocketAddr>)>,
}

impl BatchSocket {
    pub(crate) fn new(socket: UdpSocket) -> Self {
        Self {
            socket,
            bufs: vec![[0u8; MAX_DATAGRAM]; BATCH],
            rx_headers: MultiHeaders::preallocate(BATCH, None),
            tx_headers: MultiHeaders::preallocate(BATCH, None),
            tx_addrs: Vec::with_capacity(BATCH),
            got: Vec::with_capacity(BATCH),
        }
    }

    /// Reads up to [`BATCH`] datagrams without waiting and hands each to
    /// `each(from, bytes)`. Returns how many were read (0 when none waited
    /// or the read failed: the next turn tries again).
    pub(crate) fn receive(&mut self, mut each: impl FnMut(SocketAddr, &[u8])) -> usize {
        self.got.clear();
        {
            let mut iovs: Vec<[IoSliceMut<'_>; 1]> =
                self.bufs.iter_mut().map(|b| [IoSliceMut::new(&mut b[..])]).collect();
            let fd = self.socket.as_raw_fd();
            match recvmmsg(fd, &mut self.rx_headers, iovs.iter_mut(), MsgFlags::MSG_DONTWAIT, None) {
                Ok(msgs) => self.got.extend(msgs.map(|m| (m.bytes, m.address.and_then(|a| to_socket_addr(&a))))),
                Err(_) => return 0, // EAGAIN: nothing more; other errors: try next turn
            }
        }
        for (buf, (len, from)) in self.bufs.iter().zip(&self.got) {
            if let Some(from) = from {
                each(*from, &buf[..(*len).min(MAX_DATAGRAM)]);
            }
        }
        self.got.len()
    }

    /// Sends `transmits`, [`BATCH`] datagrams per `sendmmsg`. Returns how
    /// many the OS refused (each dropped: UDP loses datagrams; peers cope).
    pub(crate) fn send(&mut self, transmits: &[Transmit]) -> u64 {
        let mut failed = 0;
        let mut start = 0;
        while start < transmits.len() {
            let chunk = &transmits[start..(start + BATCH).min(transmits.len())];
            let iovs: Vec<[std::io::IoSlice<'_>; 1]> = chunk.iter().map(|t| [std::io::IoSlice::new(&t.data)]).collect();
            self.tx_addrs.clear();
            self.tx_addrs.extend(chunk.iter().map(|t| Some(SockaddrStorage::from(t.to))));
            let sent = sendmmsg(
                self.socket.as_raw_fd(),
                &mut self.tx_headers,
                iovs.iter(),
                &self.tx_addrs,
                [],
                MsgFlags::empty(),
            )
            .map(Iterator::count);
            match sent {
                Ok(n) if n > 0 => start += n,
                // The first datagram of the chunk failed: drop it.
                _ => {
                    failed += 1;
                    start += 1;
                }
            }
        }
        failed
    }
}

fn to_socket_addr(a: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::from(std::net::SocketAddrV4::from(*v4)));
    }
    a.as_sockaddr_in6().map(|v6| SocketAddr::from(std::net::SocketAddrV6::from(*v6)))
}
