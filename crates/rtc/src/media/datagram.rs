//! Datagrams in and out: how one is told apart on the shared port (RFC 7983:
//! RTP, RTCP or DTLS), the [`Transmit`] a datagram to send leaves in, and
//! the pool of sent buffers ([`Spare`]) the lean send path builds packets in.

use std::net::SocketAddr;

use bytes::BytesMut;

/// Whether a datagram is an RTP (not RTCP) packet (RFC 7983 demultiplexing,
/// RFC 5761 payload types): its arrival moves no timer.
pub fn is_rtp(data: &[u8]) -> bool {
    data.len() >= 12 && (128..=191).contains(&data[0]) && !is_rtcp_type(data[1])
}

/// Whether a datagram is RTCP, by the same rule as [`is_rtp`].
pub(crate) fn is_rtcp(data: &[u8]) -> bool {
    data.len() >= 8 && (128..=191).contains(&data[0]) && is_rtcp_type(data[1])
}

/// RFC 5761 §4: an RTP/RTCP packet's second byte is RTCP's packet type
/// 200–206, or RTP's marker bit and the payload types 72–78 it rules out.
fn is_rtcp_type(second: u8) -> bool {
    (200..=206).contains(&(second | 0x80))
}

/// Whether a datagram is a DTLS record (RFC 7983: first byte 20 to 63).
pub(crate) fn is_dtls(data: &[u8]) -> bool {
    data.first().is_some_and(|b| (20..=63).contains(b))
}

/// A datagram to send.
#[derive(Debug)]
pub struct Transmit {
    /// Where to.
    pub to: SocketAddr,
    /// What.
    pub data: BytesMut,
    /// Over TCP (ICE-TCP, RFC 6544: framed per RFC 4571 on the connection
    /// from `to`); else a UDP datagram.
    pub tcp: bool,
}

/// Datagram buffers that were sent, kept for the next lean packets, so that
/// the lean send path allocates nothing per packet: the owner of the queue
/// hands each sent [`Transmit`]'s buffer back (`Mux::recycle`,
/// `ClientPeer::recycle`). Bounded: a buffer past [`Spare::MAX`], or one
/// bigger than a datagram ever is, is dropped.
#[derive(Debug, Default)]
pub(crate) struct Spare(Vec<BytesMut>);

impl Spare {
    /// Buffers kept at most: a few ticks' worth of one I/O thread's packets.
    const MAX: usize = 4096;
    /// A new buffer's capacity: any lean audio packet fits.
    const CAPACITY: usize = 256;
    /// A buffer of more capacity is not kept (a TCP frame, a DTLS flight).
    const KEEP_MAX: usize = 2048;

    /// An empty buffer of at least `len` bytes of capacity.
    pub(crate) fn take(&mut self, len: usize) -> BytesMut {
        match self.0.pop() {
            Some(mut buf) => {
                buf.reserve(len);
                buf
            }
            None => BytesMut::with_capacity(len.max(Self::CAPACITY)),
        }
    }

    /// A sent datagram's buffer, kept when there is room.
    pub(crate) fn give(&mut self, mut buf: BytesMut) {
        if self.0.len() >= Self::MAX || buf.capacity() > Self::KEEP_MAX {
            return;
        }
        buf.clear();
        // Shared with a `Bytes` still alive, or small: not worth keeping.
        if buf.try_reclaim(Self::CAPACITY) {
            self.0.push(buf);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spare_buffers_are_reused_and_bounded() {
        let mut spare = Spare::default();
        let mut first = spare.take(100);
        assert!(first.capacity() >= Spare::CAPACITY);
        first.extend_from_slice(&[9; 100]);
        let at = first.as_ptr();
        spare.give(first);
        let again = spare.take(180);
        assert_eq!((again.as_ptr(), again.len()), (at, 0), "the same buffer, empty");
        assert!(again.capacity() >= 180);
        // Its storage shared with a live `Bytes`, and its own part too
        // small for a packet: not kept.
        let mut shared = spare.take(64);
        shared.extend_from_slice(&[1; 64]);
        let head = shared.split_to(32).freeze();
        spare.give(shared);
        assert_eq!(spare.len(), 0);
        assert_eq!(&head[..], &[1; 32]);
        // Too big to keep.
        spare.give(BytesMut::with_capacity(Spare::KEEP_MAX + 1));
        assert_eq!(spare.len(), 0);
        // Bounded.
        for _ in 0..Spare::MAX + 10 {
            spare.give(BytesMut::with_capacity(Spare::CAPACITY));
        }
        assert_eq!(spare.len(), Spare::MAX);
    }
}
