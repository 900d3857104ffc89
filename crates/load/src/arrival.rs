//! When a datagram arrived, as the kernel stamped it (`SO_TIMESTAMPNS`),
//! not when a worker got round to reading it: a worker reads its clients'
//! sockets after its sleep to the next send slot (up to 1 ms later) and one
//! after another through a burst of hundreds, and jitter and mouth-to-ear
//! are measured from the arrival.

use std::io::IoSliceMut;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::socket::{ControlMessageOwned, MsgFlags, SockaddrIn, recvmsg, setsockopt, sockopt};
use nix::sys::time::TimeSpec;

/// A kernel stamp further back than this is not believed (the wall clock
/// was stepped): the read time stands in.
const MAX_AGE: Duration = Duration::from_secs(1);

/// Asks the kernel to stamp each datagram `socket` receives.
pub(crate) fn enable(socket: &impl AsFd) -> std::io::Result<()> {
    setsockopt(socket, sockopt::ReceiveTimestampns, &true).map_err(std::io::Error::from)
}

/// A worker's reader of stamped datagrams: one control-message buffer for
/// all its reads, and one reading of both clocks per round of reads.
pub(crate) struct Stamps {
    cmsg: Vec<u8>,
    /// The same moment on the wall clock (the kernel's stamps) and on [`Instant`].
    wall: SystemTime,
    now: Instant,
}

impl Stamps {
    pub(crate) fn new() -> Self {
        Self { cmsg: nix::cmsg_space!(TimeSpec), wall: SystemTime::now(), now: Instant::now() }
    }

    /// Reads both clocks: once before a round of reads.
    pub(crate) fn refresh(&mut self) {
        self.wall = SystemTime::now();
        self.now = Instant::now();
    }

    /// Reads one datagram without waiting: its length, sender and arrival
    /// (the kernel's stamp mapped onto [`Instant`], or the read time without one).
    pub(crate) fn recv(&mut self, socket: &impl AsFd, buf: &mut [u8]) -> std::io::Result<(usize, SocketAddr, Instant)> {
        let mut iov = [IoSliceMut::new(buf)];
        let msg =
            recvmsg::<SockaddrIn>(socket.as_fd().as_raw_fd(), &mut iov, Some(&mut self.cmsg), MsgFlags::MSG_DONTWAIT)
                .map_err(std::io::Error::from)?;
        // The clients' sockets are bound to 127.0.0.1: IPv4 senders only.
        let from = msg
            .address
            .map(|a| SocketAddr::from(std::net::SocketAddrV4::from(a)))
            .ok_or(std::io::ErrorKind::InvalidData)?;
        let stamp = msg.cmsgs().ok().and_then(|mut c| {
            c.find_map(|m| match m {
                ControlMessageOwned::ScmTimestampns(t) => Some(t),
                _ => None,
            })
        });
        let at = arrival(stamp, self.wall, self.now).unwrap_or_else(Instant::now);
        Ok((msg.bytes, from, at))
    }
}

/// The instant `stamp` (wall clock) was, given that `wall` and `now` are
/// the same moment; `None` without a stamp or with one over [`MAX_AGE`]
/// away from it (the wall clock was stepped).
fn arrival(stamp: Option<TimeSpec>, wall: SystemTime, now: Instant) -> Option<Instant> {
    let stamp = stamp?;
    let at = SystemTime::UNIX_EPOCH
        + Duration::new(u64::try_from(stamp.tv_sec()).ok()?, stamp.tv_nsec().clamp(0, 999_999_999) as u32);
    match wall.duration_since(at) {
        Ok(before) if before <= MAX_AGE => now.checked_sub(before),
        Err(after) if after.duration() <= MAX_AGE => now.checked_add(after.duration()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datagram_read_late_keeps_its_arrival() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        enable(&rx).expect("SO_TIMESTAMPNS");
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let mut stamps = Stamps::new();
        // The clocks read before the datagram arrives, as a round of reads may.
        stamps.refresh();
        std::thread::sleep(Duration::from_millis(10));
        tx.send_to(b"one", rx.local_addr().expect("addr")).expect("send");
        let sent = Instant::now();
        std::thread::sleep(Duration::from_millis(40));
        let mut buf = [0u8; 64];
        let (n, from, at) = stamps.recv(&rx, &mut buf).expect("a datagram waits");
        assert_eq!((&buf[..n], from), (&b"one"[..], tx.local_addr().expect("addr")));
        let read = Instant::now();
        // Stamped on arrival, 40 ms before this read: not the read time,
        // and not the clocks' reading before it either.
        assert!(read.duration_since(at) >= Duration::from_millis(35), "arrival {:?} before the read", read - at);
        assert!(at.duration_since(sent) < Duration::from_millis(5), "arrival {:?} after the send", at - sent);
        assert!(sent.duration_since(at) < Duration::from_millis(5), "arrival {:?} before the send", sent - at);
        // Nothing more: it would block.
        let empty = stamps.recv(&rx, &mut buf).map(|_| ()).expect_err("nothing more waits");
        assert_eq!(empty.kind(), std::io::ErrorKind::WouldBlock);
    }

    #[test]
    fn an_unbelievable_stamp_gives_none() {
        let now = Instant::now();
        let wall = SystemTime::now();
        let secs = |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).expect("after 1970");
        let ts = |d: Duration| TimeSpec::new(d.as_secs() as i64, d.subsec_nanos() as i64);
        let ms = Duration::from_millis;
        assert_eq!(arrival(None, wall, now), None);
        // Over a second after the clocks were read, or before.
        assert_eq!(arrival(Some(ts(secs(wall) + Duration::from_secs(3))), wall, now), None);
        assert_eq!(arrival(Some(ts(secs(wall) - Duration::from_secs(5))), wall, now), None);
        assert_eq!(arrival(Some(ts(secs(wall) - ms(7))), wall, now), Some(now - ms(7)));
        assert_eq!(arrival(Some(ts(secs(wall) + ms(3))), wall, now), Some(now + ms(3)));
    }
}
