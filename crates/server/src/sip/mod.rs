//! The SIP edge: a control plane beside the HTTP API (docs/features/sip.md).
//!
//! ```text
//! UDP datagram, TCP or TLS connection (`streams`: bounded, strangers closed) ─► rsipstack (parse, transactions, dialogs; a malformed one is dropped there)
//!   ─► source in a trunk's networks (`[[sip.trunks]]`, `[sip] trusted`)? else 403
//!      (tutti_sip_refused_total{reason="source"})
//!   ─► OPTIONS: 200 │ INVITE: the trunk (`trunks`: its number, else 404; its digest
//!      credentials, else 401 then 403), its `srtp` mode (`srtp`: else 488); in a cluster,
//!      the room's node (`cluster`: hosted here, else 302 to the node holding it), 100 Trying,
//!      then the ONE join (Sessions::join, a plain RTP/AVP or SDES RTP/SAVP offer: the `[rtp_in]` path) ─► 200 OK with its answer, or the
//!      refusal as a SIP status (`status`) │ CANCEL before the answer: 487, the
//!      participant (if it joined meanwhile) leaves
//!   ─► keys (RFC 4733 on the call's RTP, read by the `rtp-in` thread; SIP INFO):
//!      a `keypad` event to the room, and the `[sip] keypad` map's actions (`keypad`)
//!   ─► a trunk with `pin`: answered at once, spoken prompts, the keys make a PIN
//!      (`pin`, `pins`); the right one joins its room, after the tries a BYE
//!   ─► no SDP in the INVITE (`late`): tutti's offer in the 200, the ACK's answer joins
//!   ─► `Session-Expires` (`timers`, `expiry`): 422 below the minimum; a refresh (re-INVITE, UPDATE)
//!      keeps the call, none by the expiry is a BYE │ a re-offer's new address or hold
//!      (`moves`): a command to the `rtp-in` thread
//!   ─► BYE from the caller: the participant leaves; the participant removed by
//!      tutti (kick, room deleted, media timeout): BYE to the caller
//! dial-out (`dialout`): the API asks through the session layer's seam
//!   (`session::dialout`), registered by this edge at its start; the callee's
//!   answer joins through the same join, and the call is watched the same way
//! ```
//!
//! Everything runs on the API's tokio runtime; nothing here touches a media
//! thread. This folder is the only place that names the SIP stack
//! (rsipstack, pinned in the workspace's Cargo.toml).

mod calls;
mod cluster;
mod connections;
mod desk;
mod dialout;
mod endpoint;
mod expiry;
mod keypad;
mod late;
mod moves;
mod pin;
mod pins;
mod sequences;
mod srtp;
mod status;
mod streams;
mod timers;
mod trunks;

pub(crate) use dialout::offer_dial_out;
pub(crate) use endpoint::Edge;
