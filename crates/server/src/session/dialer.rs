//! What the session layer calls to place a dial-out call, and what comes
//! back: the SIP edge implements [`Dialer`] (see `dialout`). A leaf file:
//! `sessions` holds the registered dialer, `dialout` uses it.

use std::time::Duration;

use tokio::sync::oneshot;

use crate::refusal::Refused;

/// A call to place from a room.
#[derive(Debug, Clone)]
pub(crate) struct DialRequest {
    pub(crate) room: String,
    /// A SIP URI (`sip:alice@example.com`) or a number (sent to the trunk's address).
    pub(crate) to: String,
    /// The `[[sip.outbound]]` trunk's name.
    pub(crate) trunk: String,
    /// The callee's name in the room.
    pub(crate) name: String,
    /// The callee's identity; `None`: `sip:<to>#<Call-ID>`.
    pub(crate) identity: Option<String>,
    pub(crate) ringing_timeout: Duration,
    /// The longest the call may last once answered; `None`: no limit.
    pub(crate) max_duration: Option<Duration>,
    /// Keypad digits sent (RFC 4733) once it is answered; empty = none.
    pub(crate) digits: String,
}

/// How a placed call ended up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DialOutcome {
    /// Answered: the callee is participant `id` of the room.
    Answered { id: u64 },
    /// Not answered: the SIP status (486, 603, 408 for no answer in time…;
    /// 0 when none came, the trunk unreachable) and why, for a person.
    Failed { sip_status: u16, reason: String },
}

/// A call being placed: its SIP Call-ID, and its outcome when known.
pub(crate) struct Dialling {
    pub(crate) call_id: String,
    pub(crate) outcome: oneshot::Receiver<DialOutcome>,
}

/// What places calls: the SIP edge, registered at its start.
pub(crate) trait Dialer: Send + Sync {
    /// Starts the call, or refuses it at once (unknown trunk, too many calls).
    fn dial(&self, request: DialRequest) -> Refused<Dialling>;
}
