//! Dial-out: tutti calls a phone through an `[[sip.outbound]]` trunk and
//! the callee becomes a participant of the room (docs/features/sip.md#dial-out).
//!
//! ```text
//! POST /v1/rooms/{room}/calls ─► Sessions::dial ─► the Dialer registered here at start
//!   ─► the trunk (400 unknown_trunk), the slots (429 too_many_calls: per trunk, per room)
//!   ─► INVITE to the trunk's address, tutti's plain RTP address in the offer (Opus, PCMU,
//!      PCMA, telephone-event); a 401/407 answered with the trunk's credentials (the stack)
//!   ─► 180/183: `call_ringing` ─► no final answer within the ringing timeout: CANCEL, 408
//!   ─► 2xx: the answer's SDP joins the room through the ONE join (as an inbound
//!      call's offer does) ─► `call_answered`, the digits (RFC 4733), the call is
//!      watched as an inbound one (BYE both ways) until its maximum length: BYE
//!   ─► 3xx-6xx, or no answer: `call_failed` with the SIP status
//! ```
//!
//! Bounded: a call holds a slot of its trunk (`max_calls`) and of its room
//! (`[sip] max_calls_per_room`) from the request to its end; a callee that
//! never answers is cancelled after the ringing timeout (at most 10 minutes).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use axum::http::StatusCode as Http;
use rsipstack::dialog::authenticate::Credential;
use rsipstack::dialog::dialog::DialogState;
use rsipstack::dialog::invitation::InviteOption;
use rsipstack::sip::Uri;
use tokio::sync::oneshot;

use super::endpoint::{Call, Edge};
use crate::auth::Grant;
use crate::config::OutboundConfig;
use crate::refusal::{Refusal, Refused};
use crate::room::{LeaveReason, RoomEvent, clean_name};
use crate::session::dialer::{DialOutcome, DialRequest, Dialer, Dialling};
use crate::session::dialout::failure_code;
use crate::session::join::{JoinRequest, Joined, Offer, Place};
use crate::sync::lock;

/// The payload types tutti offers: Opus, PCMU, PCMA, and telephone-event at
/// 48 kHz (with Opus) and 8 kHz (with G.711).
const OFFER_FORMATS: &str = "96 0 8 101 102";

/// The dialer the SIP edge registers in the session layer.
struct DialOut {
    edge: Weak<Edge>,
    /// Calls up, by trunk name and by room.
    slots: Mutex<(HashMap<String, usize>, HashMap<String, usize>)>,
}

/// A call's slots of its trunk and room, given back when it is dropped.
struct Slot {
    dialer: Arc<DialOut>,
    trunk: String,
    room: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut guard = lock(&self.dialer.slots);
        let slots = &mut *guard;
        for (map, key) in [(&mut slots.0, &self.trunk), (&mut slots.1, &self.room)] {
            if let Some(n) = map.get_mut(key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    map.remove(key);
                }
            }
        }
    }
}

impl DialOut {
    fn new(edge: &Arc<Edge>) -> Arc<Self> {
        Arc::new(Self { edge: Arc::downgrade(edge), slots: Mutex::default() })
    }

    /// A slot of `trunk` and `room`, or 429 when either is full.
    fn take_slot(self: &Arc<Self>, trunk: &OutboundConfig, room: &str, per_room: usize) -> Refused<Slot> {
        let mut slots = lock(&self.slots);
        let on_trunk = slots.0.get(&trunk.name).copied().unwrap_or(0);
        let in_room = slots.1.get(room).copied().unwrap_or(0);
        if on_trunk >= trunk.max_calls || in_room >= per_room {
            let which = if on_trunk >= trunk.max_calls {
                format!("trunk '{}' has {on_trunk} calls up (its max_calls)", trunk.name)
            } else {
                format!("room '{room}' has {in_room} dial-out calls up ([sip] max_calls_per_room)")
            };
            return Err(Refusal::new(Http::TOO_MANY_REQUESTS, "too_many_calls", format!("{which}; retry later")));
        }
        *slots.0.entry(trunk.name.clone()).or_default() += 1;
        *slots.1.entry(room.to_owned()).or_default() += 1;
        Ok(Slot { dialer: self.clone(), trunk: trunk.name.clone(), room: room.to_owned() })
    }
}

/// A dial-out handle, registered in the session layer (an `Arc<DialOut>`).
struct Registered(Arc<DialOut>);

/// Registers `edge` as the node's dialer: the API reaches it through the
/// session layer's seam (`Sessions::dial`).
pub(crate) fn offer_dial_out(edge: &Arc<Edge>) {
    edge.session.set_dialer(Arc::new(Registered(DialOut::new(edge))));
}

impl Dialer for Registered {
    fn dial(&self, request: DialRequest) -> Refused<Dialling> {
        let edge = self.0.edge.upgrade().ok_or_else(Refusal::shutting_down)?;
        let sip = &edge.session.cfg.sip;
        let Some(trunk) = sip.outbound.iter().find(|t| t.name == request.trunk).cloned() else {
            let names: Vec<&str> = sip.outbound.iter().map(|t| t.name.as_str()).collect();
            let message = if names.is_empty() {
                "no [[sip.outbound]] trunk is configured on this server".to_owned()
            } else {
                format!("no outbound trunk '{}'; the trunks are {}", request.trunk, names.join(", "))
            };
            return Err(Refusal::bad_request("unknown_trunk", message));
        };
        let callee = callee(&request.to, &trunk.address)?;
        let Some((local, _)) = edge.session.media.plain_rtp() else {
            return Err(Refusal::new(
                Http::SERVICE_UNAVAILABLE,
                "rtp_in_off",
                "dial-out carries plain RTP: set [rtp_in] trusted to the networks of the callees' media",
            ));
        };
        let slot = self.0.take_slot(&trunk, &request.room, sip.max_calls_per_room)?;
        let call_id = new_call_id()?;
        let (tell, outcome) = oneshot::channel();
        let placing = Placing { request, trunk, callee, local, call_id: call_id.clone(), slot };
        tokio::spawn(edge.place(placing, tell));
        Ok(Dialling { call_id, outcome })
    }
}

/// A Call-ID nobody can guess: 16 random bytes.
fn new_call_id() -> Refused<String> {
    let mut bytes = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| Refusal::new(Http::INTERNAL_SERVER_ERROR, "internal", "no random source for a Call-ID"))?;
    Ok(format!("tutti-{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()))
}

/// `to` as a SIP URI: `sip:…` as given, or a number (up to 32 of `0`-`9`,
/// `+`, `*`, `#`) at the trunk's address.
fn callee(to: &str, address: &str) -> Refused<Uri> {
    let to = to.trim();
    let text = if to.starts_with("sip:") {
        to.to_owned()
    } else if !to.is_empty() && to.len() <= 32 && to.chars().all(|c| c.is_ascii_digit() || "+*#".contains(c)) {
        format!("sip:{to}@{address}")
    } else {
        return Err(Refusal::bad_request(
            "bad_to",
            "`to` must be a SIP URI (sip:alice@example.com) or a number of up to 32 digits, + * #",
        ));
    };
    Uri::try_from(text.as_str())
        .map_err(|e| Refusal::bad_request("bad_to", format!("`to` is not a SIP URI ({e}), like sip:alice@example.com")))
}

/// A call being placed.
struct Placing {
    request: DialRequest,
    trunk: OutboundConfig,
    callee: Uri,
    /// tutti's plain RTP address (the offer's).
    local: SocketAddr,
    call_id: String,
    slot: Slot,
}

impl Edge {
    /// Places a call and, answered, keeps it until it ends; `tell` hears the outcome.
    async fn place(self: Arc<Self>, call: Placing, tell: oneshot::Sender<DialOutcome>) {
        let Placing { request, trunk, callee, local, call_id, slot } = call;
        let _slot = slot;
        let room = request.room.clone();
        let publish = |event: RoomEvent| {
            if let Ok(state) = self.session.rooms.get(&room) {
                state.publish(event);
            }
        };
        let failed = |sip_status: u16, reason: String| {
            tracing::info!(%room, call = %call_id, sip_status, %reason, "SIP dial-out failed");
            publish(RoomEvent::CallFailed {
                call_id: call_id.clone(),
                sip_status,
                code: failure_code(sip_status),
                reason: reason.clone(),
            });
            DialOutcome::Failed { sip_status, reason }
        };
        let destination = match tokio::net::lookup_host(trunk.address.as_str()).await.map(|mut a| a.next()) {
            Ok(Some(addr)) => addr,
            _ => {
                let _ = tell.send(failed(0, format!("trunk address '{}' does not resolve", trunk.address)));
                return;
            }
        };
        let offer = offer_sdp(local, &call_id);
        let caller = Uri::try_from(format!("sip:{}@{}", trunk.caller(), self.contact.host_with_port).as_str());
        let Ok(caller) = caller else {
            let _ = tell.send(failed(0, "the caller id makes no SIP URI".into()));
            return;
        };
        let credential = (!trunk.username.is_empty()).then(|| Credential {
            username: trunk.username.clone(),
            password: trunk.password.clone(),
            realm: None,
            auth_username: None,
        });
        let option = InviteOption {
            caller_display_name: (!trunk.from_name.is_empty()).then(|| trunk.from_name.clone()),
            caller,
            callee: callee.clone(),
            destination: Some(super::streams::destination(destination, &trunk.transport)),
            content_type: Some("application/sdp".into()),
            offer: Some(offer.clone().into_bytes()),
            contact: self.contact_for(super::streams::transport(&trunk.transport)),
            credential,
            call_id: Some(call_id.clone()),
            ..InviteOption::default()
        };
        // This call's dialog states: ringing told here, the rest as any dialog's.
        let (states, mut state_rx) = self.dialogs.new_dialog_state_channel();
        let (dialog, mut invite) = match self.dialogs.do_invite_async(option, states) {
            Ok(d) => d,
            Err(e) => {
                let _ = tell.send(failed(0, format!("the INVITE was not sent: {e}")));
                return;
            }
        };
        tracing::info!(%room, call = %call_id, to = %callee, trunk = %trunk.name, "SIP dial-out: INVITE");
        let edge = self.clone();
        let (ring_room, ring_call) = (room.clone(), call_id.clone());
        let to_text = callee.to_string();
        tokio::spawn(async move {
            let mut rang = false;
            while let Some(state) = state_rx.recv().await {
                if let DialogState::Early(..) = state
                    && !std::mem::replace(&mut rang, true)
                    && let Ok(r) = edge.session.rooms.get(&ring_room)
                {
                    r.publish(RoomEvent::CallRinging { call_id: ring_call.clone(), to: to_text.clone() });
                }
                edge.on_state(state).await;
            }
        });
        let result = match tokio::time::timeout(request.ringing_timeout, &mut invite).await {
            Ok(joined) => joined,
            Err(_) => {
                dialog.cancel().await.ok();
                // The CANCEL's 487 (or a 2xx that raced it: the stack ends it with BYE).
                tokio::time::timeout(Duration::from_secs(10), &mut invite).await.ok();
                let secs = request.ringing_timeout.as_secs();
                let _ = tell.send(failed(408, format!("no answer within {secs} s")));
                return;
            }
        };
        let response = match result {
            Ok(Ok((_, Some(response)))) => response,
            Ok(Ok((_, None))) => {
                let _ = tell.send(failed(0, "no final answer".into()));
                return;
            }
            Ok(Err(e)) => {
                let _ = tell.send(failed(408, format!("no answer from the trunk: {e}")));
                return;
            }
            Err(e) => {
                let _ = tell.send(failed(0, format!("the call's task failed: {e}")));
                return;
            }
        };
        let status = u16::from(response.status_code.clone());
        if !(200..300).contains(&status) {
            let _ = tell.send(failed(status, format!("the callee answered {}", response.status_code)));
            return;
        }
        let answer = String::from_utf8_lossy(&response.body).into_owned();
        let joined = self.join_callee(&request, &trunk, &callee, &call_id, destination, answer).await;
        let (id, state) = match joined {
            Ok(j) => j,
            Err(reason) => {
                dialog.bye().await.ok();
                let _ = tell.send(failed(0, reason));
                return;
            }
        };
        let events = state.subscribe();
        let key = dialog.id().to_string();
        lock(&self.calls).insert(key.clone(), Call { room: state.clone(), id, answer: offer });
        if matches!(dialog.state(), DialogState::Terminated(..)) {
            self.hang_up(&dialog.id());
            let _ = tell.send(failed(0, "the callee hung up at once".into()));
            return;
        }
        tracing::info!(%room, participant = id, call = %call_id, "SIP dial-out answered");
        state.publish(RoomEvent::CallAnswered { call_id: call_id.clone(), id });
        let _ = tell.send(DialOutcome::Answered { id });
        if !request.digits.is_empty()
            && let Err(r) = self.session.send_keys(&state, id, &request.digits)
        {
            tracing::info!(participant = id, reason = %r.message, "SIP dial-out: digits not sent");
        }
        let limit = request.max_duration.unwrap_or(Duration::MAX);
        let watched = self.watch(state.clone(), events, id, dialog.clone());
        if tokio::time::timeout(limit, watched).await.is_err() && lock(&self.calls).remove(&key).is_some() {
            tracing::info!(%room, participant = id, "SIP dial-out reached its max_duration_seconds: BYE");
            self.session.leave(&state, id, LeaveReason::Left);
            dialog.bye().await.ok();
        }
    }

    /// The callee joins the room through the one join, its answer as the
    /// offer (the join picks the codec it answered with); the participant
    /// id and room, or why not.
    async fn join_callee(
        &self,
        request: &DialRequest,
        trunk: &OutboundConfig,
        callee: &Uri,
        call_id: &str,
        destination: SocketAddr,
        answer: String,
    ) -> Result<(u64, Arc<crate::room::Room>), String> {
        let fit = |v: &str| v.chars().filter(|c| !c.is_control()).take(256).collect::<String>();
        let mut attributes = crate::attributes::Attributes::new();
        attributes.insert("sip.call_id".to_owned(), fit(call_id));
        attributes.insert("sip.to".to_owned(), fit(&callee.to_string()));
        attributes.insert("sip.trunk".to_owned(), fit(&trunk.name));
        attributes.insert("sip.direction".to_owned(), "outbound".to_owned());
        let mut identity = request.identity.clone().unwrap_or_else(|| format!("{callee}#{call_id}"));
        while identity.len() > crate::auth::MAX_IDENTITY_BYTES {
            identity.pop();
        }
        let grant = Grant { attributes, ..Grant::participant(request.room.as_str(), identity.as_str()) };
        let join = JoinRequest {
            room: &request.room,
            grant: &grant,
            client: destination.ip(),
            place: Place::Locate { ticketed: false },
            plain: true,
        };
        let name = clean_name(&request.name);
        let offer = || {
            if answer.trim().is_empty() {
                return Err(Refusal::bad_request("bad_sdp", "the callee's 200 OK carries no SDP"));
            }
            Ok(Offer { sdp: answer.clone(), name })
        };
        match self.session.join(join, offer).await {
            Ok(Joined::Here { id, .. }) => {
                self.session.rooms.get(&request.room).map(|s| (id, s)).map_err(|e| Refusal::from(e).message)
            }
            Ok(Joined::Elsewhere(_)) => Err("the room is on another node".into()),
            Err(r) => Err(format!("the callee could not join: {} ({})", r.message, r.code)),
        }
    }
}

/// tutti's offer: its plain RTP address, Opus, PCMU, PCMA and telephone-event.
fn offer_sdp(local: SocketAddr, call_id: &str) -> String {
    let ip = local.ip();
    let kind = if ip.is_ipv4() { "IP4" } else { "IP6" };
    let session = call_id.bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    format!(
        "v=0\r\no=tutti {session} 1 IN {kind} {ip}\r\ns=tutti\r\nc=IN {kind} {ip}\r\nt=0 0\r\n\
         m=audio {port} RTP/AVP {OFFER_FORMATS}\r\na=rtpmap:96 opus/48000/2\r\n\
         a=fmtp:96 minptime=10;useinbandfec=1\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:8 PCMA/8000\r\n\
         a=rtpmap:101 telephone-event/48000\r\na=fmtp:101 0-15\r\na=rtpmap:102 telephone-event/8000\r\n\
         a=fmtp:102 0-15\r\na=ptime:20\r\na=sendrecv\r\n",
        port = local.port(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_go_to_the_trunk_and_uris_as_given() {
        let at = |to: &str| callee(to, "192.0.2.10:5060").map(|u| u.to_string()).map_err(|r| r.code);
        assert_eq!(at("+4930123").as_deref(), Ok("sip:+4930123@192.0.2.10:5060"));
        assert_eq!(at("sip:alice@example.com").as_deref(), Ok("sip:alice@example.com"));
        assert_eq!(at("alice"), Err("bad_to"));
        assert_eq!(at(""), Err("bad_to"));
        assert_eq!(at(&"1".repeat(33)), Err("bad_to"));
    }

    #[test]
    fn the_offer_parses_as_a_plain_one() {
        let sdp = offer_sdp("127.0.0.1:4000".parse().expect("addr"), "c1");
        assert!(tutti_rtc::plain::is_plain_offer(&sdp), "{sdp}");
        let parsed = tutti_rtc::plain::PlainOffer::parse(&sdp).expect("parses");
        assert_eq!((parsed.payload_type, parsed.events.map(|e| e.payload_type)), (96, Some(101)));
    }
}
