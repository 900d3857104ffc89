//! Why a datagram was refused, or a tick could not be sent.

use thiserror::Error;

/// A datagram that does not parse (before or after opening).
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// Shorter than its fields say.
    #[error("datagram truncated")]
    Truncated,
    /// Longer than `MAX_DATAGRAM_BYTES`.
    #[error("datagram larger than the maximum")]
    TooLarge,
    /// An unknown wire version or message kind.
    #[error("unknown wire version {0}")]
    Version(u8),
    /// Part index not below the part count, or a count of 0 or above `MAX_PARTS`.
    #[error("bad part index or count")]
    BadPart,
    /// More candidates than `MAX_CANDIDATES`, or more in the part than in the tick.
    #[error("too many candidates")]
    TooManyCandidates,
    /// A frame longer than `MAX_FRAME_BYTES`.
    #[error("frame larger than the maximum")]
    FrameTooLarge,
    /// A level above 127 or unknown flag bits.
    #[error("field out of range")]
    BadField,
    /// Bytes after the last candidate.
    #[error("trailing bytes")]
    TrailingBytes,
}

/// Why a received datagram was dropped (each reason has its counter).
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// It does not parse.
    #[error("malformed: {0}")]
    Malformed(#[from] DecodeError),
    /// A room this node does not share with the sender, or a sender not among the room's peers.
    #[error("unknown room or sender")]
    Unknown,
    /// The room's epoch is not the one this node holds.
    #[error("wrong epoch")]
    WrongEpoch,
    /// The tag does not verify (forged, tampered, or sealed with another key).
    #[error("authentication failed")]
    Auth,
    /// A (tick, part) already received, or older than the replay window.
    #[error("replayed or too old")]
    Replay,
    /// A session older than the newest one seen from that sender.
    #[error("stale session")]
    StaleSession,
}

/// A tick that could not be sealed.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum SealError {
    /// More than `MAX_CANDIDATES` candidates.
    #[error("too many candidates")]
    TooManyCandidates,
    /// The candidates need more than `MAX_PARTS` datagrams.
    #[error("too many parts")]
    TooManyParts,
    /// The tick is not above the last one sealed (its nonces were used).
    #[error("tick not after the last one sealed")]
    TickNotAfterLast,
    /// The AEAD refused (never expected with a valid key).
    #[error("sealing failed")]
    Crypto,
}
