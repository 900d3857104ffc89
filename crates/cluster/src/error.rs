//! What can go wrong in the control plane.

/// An operation of the cluster failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// Redis could not be reached or did not answer in time: the API should
    /// answer `503` with `Retry-After` (see [`ClusterError::retry_after_seconds`]).
    #[error("the cluster directory (Redis) is unavailable: {0}")]
    Unavailable(String),
    /// Redis answered with an error (a script error, a wrong type): a bug or
    /// a foreign key in our prefix, not an outage.
    #[error("the cluster directory (Redis) answered with an error: {0}")]
    Backend(String),
    /// No node may take a new room: every node is draining, full or dead.
    #[error("no node can take a new room (all draining, full or gone)")]
    NoEligibleNode,
    /// A configuration value is wrong.
    #[error("cluster.{field}: {reason}")]
    Config {
        /// The key, under `cluster.`.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// Redis refused this node: a wrong or missing password, or a TLS
    /// server certificate that does not check out. Not an outage: the
    /// configuration is wrong, and [`Cluster::start`](crate::Cluster::start)
    /// fails with it rather than retrying for ever.
    #[error(
        "Redis refused this node: {0} (check cluster.redis_password or the URL's password, and for rediss:// cluster.redis_ca_file)"
    )]
    Refused(String),
    /// Redis names a node whose registry record is not signed with the
    /// cluster's key (written by hand, or by a node with another secret):
    /// nobody is sent there; the API answers `503`.
    #[error("the cluster directory is not trusted here: {0}")]
    Untrusted(String),
    /// A value read from Redis does not have the shape this crate writes.
    #[error("unexpected data in the cluster directory: {0}")]
    Corrupt(String),
}

impl ClusterError {
    /// For a `Retry-After` header: seconds after which trying again makes sense.
    pub fn retry_after_seconds(&self) -> u32 {
        match self {
            Self::Unavailable(_) | Self::NoEligibleNode | Self::Refused(_) => 2,
            _ => 5,
        }
    }

    pub(crate) fn from_redis(e: redis::RedisError) -> Self {
        let text = e.to_string();
        if e.kind() == redis::ErrorKind::AuthenticationFailed
            || ["NOAUTH", "WRONGPASS", "invalid password", "certificate"].iter().any(|m| text.contains(m))
        {
            return Self::Refused(text);
        }
        if e.is_io_error()
            || e.is_timeout()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_unrecoverable_error()
        {
            Self::Unavailable(e.to_string())
        } else {
            Self::Backend(e.to_string())
        }
    }
}

/// A redirect ticket was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TicketError {
    /// Not `payload.signature` in base64url, or the payload is not ours.
    #[error("malformed ticket")]
    Malformed,
    /// The signature does not match: forged or altered.
    #[error("ticket signature does not match")]
    BadSignature,
    /// Past its expiry.
    #[error("ticket expired")]
    Expired,
    /// Minted for another room.
    #[error("ticket is for another room")]
    WrongRoom,
    /// Minted for another request (method or path).
    #[error("ticket is for another request")]
    WrongRequest,
    /// Already used once.
    #[error("ticket already used")]
    Replayed,
    /// Single use could not be checked (Redis unavailable): refuse, retry later.
    #[error("ticket cannot be checked now: {0}")]
    Unavailable(String),
    /// The claims could not be encoded.
    #[error("ticket claims cannot be encoded: {0}")]
    Encode(String),
}
