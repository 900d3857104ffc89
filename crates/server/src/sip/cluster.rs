//! A call in a cluster: it joins its room wherever it arrives.
//!
//! ```text
//! INVITE for room r on this node (a cluster's): Sessions::place_call(r)
//!   Here (hosted; or made here; or r spreads and this node has room: it joins r's span)
//!     ─► the call joins here
//!   Elsewhere (another node holds r, or takes the spread room's join)
//!     ─► 302 Moved Temporarily, Contact: <sip:<user>@<that node's sip_addr>>
//!        (from its signed node record); a node without a SIP edge: 480
//! ```
//!
//! The room is found before the call's dialog is made: a 302 is the
//! INVITE's only answer.

use std::sync::Arc;

use rsipstack::sip::{Header, StatusCode, headers::Contact};
use rsipstack::transaction::Transaction;

use super::endpoint::Edge;
use super::status;
use crate::room::Room;
use crate::session::calls::CallPlace;

/// Where a call's room was found.
pub(super) enum Routed {
    /// A single node (no cluster): the join finds or makes the room, as a REST join.
    Single,
    /// Hosted here now: the call joins it.
    Here(Arc<Room>),
    /// The INVITE is answered (a 302 to the room's node, or a refusal): nothing more to do.
    Answered,
}

impl Edge {
    /// This node's SIP address as its Contact names it (`host:port`): what
    /// its cluster record publishes.
    pub(crate) fn sip_addr(&self) -> String {
        self.contact.host_with_port.to_string()
    }

    /// In a cluster, finds the room of an INVITE (see the module's diagram):
    /// hosted here, or the INVITE answered with a 302 to the node that
    /// holds it (`user`: the Request-URI's user part, kept in the Contact),
    /// or with the refusal's status (`room_not_found` 404, the directory
    /// unavailable 503, …).
    pub(super) async fn route(&self, tx: &mut Transaction, room: &str, user: Option<&str>) -> Routed {
        if !self.session.cfg.cluster.enabled() {
            return Routed::Single;
        }
        // The directory may take a few round trips: the caller stops retransmitting.
        tx.send_trying().await.ok();
        let owner = match self.session.place_call(room).await {
            Ok(CallPlace::Anywhere) => return Routed::Single,
            Ok(CallPlace::Here(room)) => return Routed::Here(room),
            Ok(CallPlace::Elsewhere(owner)) => owner,
            Err(r) => {
                crate::metrics::sip_refused("join");
                tracing::info!(room, status = %r.status, reason = %r.message, "SIP INVITE refused: its room not placed");
                tx.reply(status::for_refusal(&r)).await.ok();
                return Routed::Answered;
            }
        };
        // The dialled user part as it came: the other node names the room from it as this one did.
        let user = user.unwrap_or(room);
        let plain = user.chars().all(|c| c.is_ascii_graphic() && !"<>\"@:;?".contains(c));
        let contact =
            Some(owner.sip_addr.as_str()).filter(|a| plain && !a.is_empty()).map(|addr| format!("<sip:{user}@{addr}>"));
        match contact {
            Some(contact) => {
                tracing::info!(room, node = %owner.node_id, %contact, "SIP INVITE redirected (302) to the room's node");
                let headers = vec![Header::Contact(Contact::new(contact))];
                tx.reply_with(StatusCode::MovedTemporarily, headers, None).await.ok();
            }
            None => {
                crate::metrics::sip_refused("join");
                tracing::info!(room, node = %owner.node_id, "SIP INVITE refused (480): the room's node has no SIP edge");
                tx.reply(StatusCode::TemporarilyUnavailable).await.ok();
            }
        }
        Routed::Answered
    }
}
