//! One call: an INVITE joins its room through the one join, is answered
//! with the join's SDP, and ends when either side hangs up.

use std::net::SocketAddr;
use std::sync::Arc;

use rsipstack::dialog::dialog::DialogState;
use rsipstack::dialog::invite_dialog::InviteDialog;
use rsipstack::sip::{Header, HeadersExt, StatusCode, headers::ContentType, headers::Warning};
use rsipstack::transaction::Transaction;
use tokio::sync::broadcast::{Receiver, error::RecvError};

use super::cluster::Routed;
use super::endpoint::{Call, Edge};
use super::status;
use super::trunks::Admission;
use crate::auth::Grant;
use crate::refusal::Refusal;
use crate::room::{EventBatch, Room, RoomEvent, clean_name};
use crate::session::join::{JoinRequest, Joined, Offer, Place};
use crate::sync::lock;

/// A call's attributes (`sip.call_id`, `sip.from` unless the caller asked
/// for privacy, `sip.to`, `sip.trunk`): reserved keys, so the participant
/// cannot change them; each value cut to fit the attributes' bounds.
fn call_attributes(tx: &Transaction, dialled: Option<&str>, trunk: &str) -> crate::attributes::Attributes {
    let fit = |v: &str| v.chars().filter(|c| !c.is_control()).take(256).collect::<String>();
    let mut attributes = crate::attributes::Attributes::new();
    if let Ok(c) = tx.original.call_id_header() {
        attributes.insert("sip.call_id".to_owned(), fit(c.value()));
    }
    let private = tx.original.headers.iter().any(|h| {
        let h = h.to_string().to_ascii_lowercase();
        h.starts_with("privacy:") && (h.contains("id") || h.contains("user"))
    });
    let from = tx.original.from_header().ok().and_then(|f| f.uri().ok()).and_then(|u| u.auth.map(|a| a.user));
    if let Some(from) = from.filter(|f| !private && !f.eq_ignore_ascii_case("anonymous")) {
        attributes.insert("sip.from".to_owned(), fit(&from));
    }
    if let Some(to) = dialled {
        attributes.insert("sip.to".to_owned(), fit(to));
    }
    attributes.insert("sip.trunk".to_owned(), fit(trunk));
    attributes
}

/// Who called: `sip:<From user>@<source IP>` and the Call-ID (so two
/// calls from one phone are two participants), at most 128 bytes.
fn identity(tx: &Transaction, source: SocketAddr) -> (String, String) {
    let user = tx
        .original
        .from_header()
        .ok()
        .and_then(|f| f.uri().ok())
        .and_then(|u| u.auth.map(|a| a.user))
        .unwrap_or_else(|| "anonymous".to_owned());
    let call_id = tx.original.call_id_header().map(|c| c.value().to_owned()).unwrap_or_default();
    let mut identity = format!("sip:{user}@{}#{call_id}", source.ip());
    while identity.len() > crate::auth::MAX_IDENTITY_BYTES {
        identity.pop();
    }
    (identity, clean_name(&user))
}

impl Edge {
    /// An INVITE outside a dialog: 100 Trying, the join, then 200 with the
    /// answer or the refusal's status; a CANCEL meanwhile leaves nothing behind.
    pub(super) async fn invite(self: Arc<Self>, mut tx: Transaction, source: SocketAddr) {
        let user = tx.original.uri.auth.as_ref().map(|a| a.user.clone());
        let (trunk, room, pin, srtp) = match self.trunks.admit(&tx.original, source.ip(), crate::auth::unix_now()) {
            Admission::Call(trunk) => {
                let room = match &trunk.room {
                    Some(room) => Some(room.clone()),
                    None => status::room_of(user.as_deref(), &trunk.room_prefix),
                };
                (trunk.name.clone(), room, trunk.pin, trunk.srtp)
            }
            Admission::Challenge(code, headers) => {
                crate::metrics::sip_refused("challenge");
                tracing::debug!(%source, status = u16::from(code.clone()), "SIP INVITE challenged");
                tx.reply_with(code, headers, None).await.ok();
                return;
            }
            Admission::Refuse { code, reason, why } => {
                crate::metrics::sip_refused(reason);
                let from = tx.original.from_header().ok().and_then(|f| f.uri().ok()).map(|u| u.to_string());
                tracing::info!(%source, ?from, number = ?user, status = u16::from(code.clone()), reason = why, "SIP INVITE refused");
                tx.reply(code).await.ok();
                return;
            }
        };
        // A PIN call's room comes from its PIN (`pin`).
        let Some(room) = room.or_else(|| pin.then(String::new)) else {
            tx.reply(StatusCode::NotFound).await.ok();
            return;
        };
        // A PIN call's room is not known yet: it is located when the PIN names it.
        let here = match if pin { Routed::Single } else { self.route(&mut tx, &room, user.as_deref()).await } {
            Routed::Answered => return,
            Routed::Here(room) => Some(room),
            Routed::Single => None,
        };
        let (identity, name) = identity(&tx, source);
        let attributes = call_attributes(&tx, user.as_deref(), &trunk);
        let sdp = String::from_utf8(tx.original.body.clone()).unwrap_or_default();
        // The PIN lobby plays and reads plain RTP only (no SRTP keys there yet).
        let srtp_in_lobby = pin && (sdp.contains("RTP/SAVP") || sdp.contains("a=crypto"));
        let sdp = match super::srtp::apply(srtp, &sdp) {
            Ok(_) if srtp_in_lobby => {
                let why = "a call that enters a PIN takes plain RTP (RTP/AVP) only";
                crate::metrics::sip_refused("media");
                tracing::info!(%source, %trunk, reason = why, "SIP INVITE refused (488)");
                let warning = Header::Warning(Warning::new(format!("399 tutti \"{why}\"")));
                tx.reply_with(StatusCode::NotAcceptableHere, vec![warning], None).await.ok();
                return;
            }
            Ok(sdp) => sdp.into_owned(),
            Err(why) => {
                crate::metrics::sip_refused("media");
                tracing::info!(%source, %trunk, reason = why, "SIP INVITE refused (488)");
                let warning = Header::Warning(Warning::new(format!("399 tutti \"{why}\"")));
                tx.reply_with(StatusCode::NotAcceptableHere, vec![warning], None).await.ok();
                return;
            }
        };
        let Ok(timer) = self.session_timer(&mut tx).await else { return };
        let dialog = match self.dialogs.get_or_create_server_invite(
            &tx,
            self.states(),
            None,
            Some(self.contact_on(tx.connection.as_ref())),
        ) {
            Ok(d) => d,
            Err(e) => {
                tracing::info!(error = %e, "SIP INVITE without a dialog");
                tx.reply(StatusCode::CallTransactionDoesNotExist).await.ok();
                return;
            }
        };
        // 100 Trying before the join (the caller stops retransmitting), then the
        // transaction waits for the ACK or a CANCEL (487).
        tx.send_trying().await.ok();
        let mut handling = dialog.clone();
        tokio::spawn(async move { handling.handle(&mut tx).await.ok() });
        if pin {
            let caller = Caller { sdp, source, identity, name, attributes, trunk };
            return self.pin_call(dialog, caller).await;
        }
        let timer_headers = timer.map(|t| t.headers()).unwrap_or_default();
        // Late offer (`late`): tutti offers in the 200, the caller answers in its ACK.
        let late = if sdp.trim().is_empty() {
            let Some(late) = self.late_offer(&dialog, timer_headers.clone()).await else { return };
            Some(late)
        } else {
            None
        };
        let sdp = late.as_ref().map_or(sdp, |(answer, _)| answer.clone());

        let grant = Grant { attributes, ..Grant::participant(room.as_str(), identity.as_str()) };
        // Here when the room spreads to this node (`route`), else wherever it is.
        let request = JoinRequest {
            place: here.as_ref().map_or(Place::Locate { ticketed: false }, Place::Given),
            ..join_request(&room, &grant, source)
        };
        let offer = || {
            if sdp.trim().is_empty() {
                return Err(Refusal::bad_request("bad_sdp", "an INVITE without SDP is not taken yet"));
            }
            Ok(Offer { sdp: sdp.clone(), name })
        };
        let joined = self.session.join(request, offer).await;
        let (id, answer) = match joined {
            Ok(Joined::Here { id, answer }) => (id, answer),
            Ok(Joined::Elsewhere(_)) if late.is_some() => {
                return self.end_late(&dialog, "the room is on another node").await;
            }
            Err(r) if late.is_some() => return self.end_late(&dialog, &r.message).await,
            Ok(Joined::Elsewhere(_)) => {
                return refuse(&dialog, StatusCode::TemporarilyUnavailable, "the room is on another node");
            }
            Err(r) => {
                if r.status == axum::http::StatusCode::BAD_REQUEST {
                    crate::metrics::sip_refused("media");
                } else {
                    crate::metrics::sip_refused("join");
                }
                return refuse(&dialog, status::for_refusal(&r), &r.message);
            }
        };
        let answer = match &late {
            Some((_, offer)) => super::late::same_origin(&answer, offer),
            None => answer,
        };
        let Ok(state) = self.session.rooms.get(&room) else { return };
        // Subscribed before the answer: a removal from now on is seen.
        let events = state.subscribe();
        let key = dialog.id().to_string();
        lock(&self.calls).insert(key, Call { room: state.clone(), id, answer: answer.clone() });
        // Cancelled while joining: the dialog ended before the call was listed.
        if matches!(dialog.state(), DialogState::Terminated(..)) {
            self.hang_up(&dialog.id());
            return;
        }
        let mut headers = timer_headers;
        headers.push(Header::ContentType(ContentType::new("application/sdp")));
        if late.is_none()
            && let Err(e) = dialog.accept(Some(headers), Some(answer.into_bytes()))
        {
            tracing::info!(error = %e, "SIP answer not sent");
            self.hang_up(&dialog.id());
            return;
        }
        tracing::info!(%room, participant = id, %identity, %trunk, late_offer = late.is_some(), "SIP caller joined");
        if let Some(timer) = timer {
            let (edge, dialog) = (self.clone(), dialog.clone());
            tokio::spawn(async move { edge.run_timer(timer, dialog, id).await });
        }
        self.watch(state, events, id, dialog).await;
    }

    /// Until the call ends: the participant removed by tutti (kick, room
    /// deleted, media timeout) gets a BYE.
    pub(super) async fn watch(
        &self,
        room: Arc<Room>,
        mut events: Receiver<Arc<EventBatch>>,
        id: u64,
        dialog: InviteDialog,
    ) {
        let ended = dialog.cancel_token().clone();
        loop {
            let gone = tokio::select! {
                _ = ended.cancelled() => return,
                batch = events.recv() => match batch {
                    Ok(batch) => batch.events.iter().any(|e| match e {
                        RoomEvent::Left { id: left, .. } => *left == id,
                        RoomEvent::RoomClosed => true,
                        _ => false,
                    }),
                    Err(RecvError::Lagged(_)) => !lock(&room.members).contains_key(&id),
                    Err(RecvError::Closed) => true,
                },
            };
            if gone {
                break;
            }
        }
        // Taken out here: tutti removed it (a hang-up by the caller takes it out first).
        if lock(&self.calls).remove(&dialog.id().to_string()).is_some() {
            tracing::info!(room = %room.id, participant = id, "SIP caller removed: BYE");
            dialog.bye().await.ok();
        }
    }
}

/// Who called, for the join once the PIN is right.
pub(super) struct Caller {
    pub(super) sdp: String,
    pub(super) source: SocketAddr,
    pub(super) identity: String,
    pub(super) name: String,
    pub(super) attributes: crate::attributes::Attributes,
    pub(super) trunk: String,
}

/// A call's join: into its room wherever it is located, plain RTP from the caller's address.
pub(super) fn join_request<'a>(room: &'a str, grant: &'a Grant, source: SocketAddr) -> JoinRequest<'a> {
    JoinRequest { room, grant, client: source.ip(), place: Place::Locate { ticketed: false }, plain: true }
}

/// Refuses an INVITE (its dialog ends).
pub(super) fn refuse(dialog: &InviteDialog, code: StatusCode, why: &str) {
    tracing::info!(status = u16::from(code.clone()), reason = why, "SIP call refused");
    dialog.reject(Some(code), None).ok();
}
