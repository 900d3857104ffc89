//! The SIP endpoint: the UDP transport, the transaction and dialog layers
//! of the stack, and the loop that sorts what arrives (source check,
//! OPTIONS, INVITE, in-dialog requests) and follows the dialogs' ends.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use rsipstack::dialog::DialogId;
use rsipstack::dialog::dialog::{DialogState, DialogStateReceiver, DialogStateSender};
use rsipstack::dialog::dialog_layer::DialogLayer;
use rsipstack::platform::CancellationToken;
use rsipstack::sip::{Header, HeadersExt, Method, StatusCode, Uri, headers::ContentType};
use rsipstack::transaction::{Endpoint, TransactionReceiver};
use rsipstack::transport::{TransportLayer, udp::UdpConnection};

use crate::room::{LeaveReason, Room};
use crate::session::sessions::Sessions;
use crate::sync::lock;

/// A joined call: its room and participant (the INVITE's handling is in `calls`).
pub(super) struct Call {
    pub(super) room: Arc<Room>,
    pub(super) id: u64,
    /// tutti's last SDP answer (a re-INVITE's answer is this one, its
    /// direction and version changed).
    pub(super) answer: String,
}

/// The SIP edge of a server: bound at start, served until the server stops.
pub(crate) struct Edge {
    pub(super) session: Arc<Sessions>,
    pub(super) dialogs: Arc<DialogLayer>,
    /// The Contact of tutti's answers.
    pub(super) contact: Uri,
    /// Who may call: `[[sip.trunks]]`, then `[sip] trusted`.
    pub(super) trunks: super::trunks::Trunks,
    /// The joined calls, by dialog id: whoever takes one out makes it leave.
    pub(super) calls: Mutex<HashMap<String, Call>>,
    /// The callers' keys towards a `[sip] keypad` sequence.
    pub(super) keys: Mutex<super::sequences::Sequences>,
    /// Dispatch by PIN: the PINs, the prompts, the calls entering one.
    pub(super) pin: super::desk::PinDesk,
    /// The calls' session timers (`timers`).
    pub(super) timers: super::timers::Timers,
    /// The TCP and TLS listeners (`streams`).
    pub(super) streams: super::streams::Streams,
    states: DialogStateSender,
    pub(super) endpoint: Endpoint,
    cancel: CancellationToken,
    bound: SocketAddr,
}

impl Edge {
    /// Binds `[sip] listen` (UDP; TCP and TLS: `streams`). The Contact host is `public_address`,
    /// else `fallback` (the advertised media IP) with the bound port.
    pub(crate) async fn bind(
        session: Arc<Sessions>,
        fallback: IpAddr,
    ) -> Result<(Arc<Self>, DialogStateReceiver), String> {
        let cfg = session.cfg.sip.clone();
        let cancel = CancellationToken::new();
        let udp = UdpConnection::create_connection(cfg.listen, None, Some(cancel.child_token()))
            .await
            .map_err(|e| format!("sip.listen {}: {e}", cfg.listen))?;
        let bound = udp.get_addr().get_socketaddr().map_err(|e| format!("sip.listen {}: {e}", cfg.listen))?;
        let streams = super::streams::Streams::bind(&cfg, bound).await?;
        let transport = TransportLayer::new(cancel.clone());
        transport.set_stream_idle_timeout(std::time::Duration::from_secs(cfg.connection_idle_seconds));
        transport.add_transport(udp.into());
        if let Some(tls) = super::streams::client_tls(&cfg) {
            transport.set_tls_config(tls);
        }
        let endpoint = rsipstack::EndpointBuilder::new()
            .with_cancel_token(cancel.clone())
            .with_transport_layer(transport)
            .with_user_agent(concat!("tutti/", env!("CARGO_PKG_VERSION")))
            .build();
        let contact = format!("sip:tutti@{}", cfg.contact(fallback, bound));
        let contact = Uri::try_from(contact.as_str()).map_err(|e| format!("sip.public_address: {e}"))?;
        let dialogs = Arc::new(DialogLayer::new(endpoint.inner.clone()));
        let (states, state_rx) = dialogs.new_dialog_state_channel();
        let trunks = super::trunks::Trunks::new(&cfg);
        if trunks.is_empty() {
            tracing::warn!(listen = %bound, "SIP: no [[sip.trunks]] and [sip] trusted is empty: every call is refused with 403");
        }
        if session.cfg.rtp_in.trusted.is_empty() {
            tracing::warn!("SIP: [rtp_in] trusted is empty: calls carry plain RTP, so every call is refused with 403");
        }
        // Validated at load, as `trusted`.
        let keys = Mutex::new(super::sequences::Sequences::new(cfg.keypad_map().unwrap_or_default()));
        let pin = super::desk::PinDesk::new(&cfg)?;
        let edge = Self {
            session,
            keys,
            pin,
            dialogs,
            contact,
            trunks,
            calls: Mutex::default(),
            timers: Default::default(),
            streams,
            states,
            endpoint,
            cancel,
            bound,
        };
        Ok((Arc::new(edge), state_rx))
    }

    /// The bound UDP address.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.bound
    }

    /// Serves until `stop` turns true: the stack, the requests, the dialogs' ends.
    pub(crate) async fn serve(
        self: Arc<Self>,
        states: DialogStateReceiver,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let incoming = match self.endpoint.incoming_transactions() {
            Ok(rx) => rx,
            Err(e) => {
                tracing::error!(error = %e, "SIP: no incoming transactions; the SIP edge is off");
                return;
            }
        };
        let (tcp, tls) = (self.streams.tcp_addr, self.streams.tls_addr);
        tracing::info!(listen = %self.bound, ?tcp, ?tls, contact = %self.contact, "SIP edge is serving");
        tokio::select! {
            _ = self.endpoint.serve() => {}
            _ = self.clone().requests(incoming) => {}
            _ = self.clone().ends(states) => {}
            _ = self.clone().keypresses() => {}
            _ = self.clone().accept_streams(self.cancel.clone()) => {}
            _ = stop.wait_for(|s| *s) => {}
        }
        self.cancel.cancel();
        self.endpoint.shutdown();
    }

    /// Sorts each new server transaction.
    async fn requests(self: Arc<Self>, mut incoming: TransactionReceiver) {
        while let Some(mut tx) = incoming.recv().await {
            let source = tx.connection.as_ref().and_then(|c| c.get_remote_addr()).and_then(|a| a.get_socketaddr().ok());
            // A dial-out's callee may be outside every trunk's networks: within its dialog it is known.
            let in_dialog = tx.original.to_header().ok().and_then(|t| t.tag().ok().flatten()).is_some();
            let dialled = || in_dialog && self.dialogs.match_dialog(&tx).is_some();
            let Some(source) = source.filter(|s| self.trunks.knows(s.ip()) || dialled()) else {
                crate::metrics::sip_refused("source");
                tracing::info!(?source, method = %tx.original.method, "SIP request refused: not from a trunk's networks");
                if tx.original.method != Method::Ack {
                    tokio::spawn(async move { tx.reply(StatusCode::Forbidden).await.ok() });
                }
                continue;
            };
            if in_dialog && tx.original.method == Method::Info {
                let code = self.info(&tx);
                tokio::spawn(async move { tx.reply(code).await.ok() });
                continue;
            }
            if in_dialog {
                match self.dialogs.match_dialog(&tx) {
                    Some(mut dialog) => {
                        tokio::spawn(async move { dialog.handle(&mut tx).await.ok() });
                    }
                    None if tx.original.method == Method::Ack => {}
                    None => {
                        tokio::spawn(async move { tx.reply(StatusCode::CallTransactionDoesNotExist).await.ok() });
                    }
                }
                continue;
            }
            match tx.original.method {
                Method::Invite => {
                    tokio::spawn(self.clone().invite(tx, source));
                }
                // A health probe (a dispatcher's), or a UA's capability query.
                Method::Options => {
                    tokio::spawn(async move { tx.reply(StatusCode::OK).await.ok() });
                }
                Method::Ack => {}
                Method::Bye => {
                    tokio::spawn(async move { tx.reply(StatusCode::CallTransactionDoesNotExist).await.ok() });
                }
                _ => {
                    tokio::spawn(async move { tx.reply(StatusCode::MethodNotAllowed).await.ok() });
                }
            }
        }
    }

    /// Follows the dialogs: an ended one (BYE, CANCEL, no ACK) is
    /// forgotten, and its participant, if still here, leaves.
    async fn ends(self: Arc<Self>, mut states: DialogStateReceiver) {
        while let Some(state) = states.recv().await {
            self.on_state(state).await;
        }
    }

    /// One dialog's new state (an inbound call's, or a dial-out's: `dialout`).
    pub(super) async fn on_state(&self, state: DialogState) {
        match state {
            DialogState::Terminated(id, reason) => {
                tracing::debug!(dialog = %id, ?reason, "SIP dialog ended");
                self.dialogs.remove_dialog(&id);
                self.hang_up(&id);
            }
            // A keep-alive within the call (some PBXs send them): 200. (Its channel
            // holds 4: the send does not wait.)
            DialogState::Options(_, _, handle) => {
                handle.reply(StatusCode::OK).await.ok();
            }
            // A re-INVITE or UPDATE: hold, resume, a refresh.
            DialogState::Updated(id, request, handle) => {
                let (code, body) = self.reoffer(&id, &request.body);
                let mut headers = self.refreshed(&id.to_string());
                if body.is_some() {
                    headers.push(Header::ContentType(ContentType::new("application/sdp")));
                }
                handle.respond(code, Some(headers), body).await.ok();
            }
            // Others (REFER; INFO is taken before the dialog sees it) are not taken: dropping the handle
            // answers 501 and the call goes on.
            _ => {}
        }
    }

    /// The call of dialog `id` leaves its room, if it is still listed.
    pub(super) fn hang_up(&self, id: &DialogId) {
        let call = lock(&self.calls).remove(&id.to_string());
        if let Some(call) = call {
            lock(&self.keys).forget(call.id);
            tracing::info!(room = %call.room.id, participant = call.id, "SIP caller hung up");
            self.session.leave(&call.room, call.id, LeaveReason::Left);
        }
    }

    /// A new offer within call `id`: the answer (the same media address,
    /// the direction the offer's asks), and the participant muted while
    /// held, unmuted on resume. No offer: the current answer again.
    fn reoffer(&self, id: &DialogId, offer: &[u8]) -> (StatusCode, Option<Vec<u8>>) {
        let mut calls = lock(&self.calls);
        let Some(call) = calls.get_mut(&id.to_string()) else {
            return (StatusCode::CallTransactionDoesNotExist, None);
        };
        let offer = String::from_utf8_lossy(offer);
        if offer.trim().is_empty() {
            return (StatusCode::OK, Some(call.answer.clone().into_bytes()));
        }
        let direction = answer_direction(&offer);
        let held = direction != "sendrecv";
        if let Err(why) = self.follow(call.id, &offer, held) {
            tracing::info!(room = %call.room.id, participant = call.id, reason = why, "SIP re-offer refused (488)");
            return (StatusCode::NotAcceptableHere, None);
        }
        call.answer = redirect(&call.answer, direction);
        if let Err(r) = self.session.set_muted(&call.room, call.id, held) {
            tracing::info!(participant = call.id, reason = %r.message, "SIP hold/resume: mute not changed");
        }
        tracing::info!(room = %call.room.id, participant = call.id, direction, "SIP re-offer answered");
        (StatusCode::OK, Some(call.answer.clone().into_bytes()))
    }

    /// A state channel for a new dialog.
    pub(super) fn states(&self) -> DialogStateSender {
        self.states.clone()
    }
}

/// The direction that answers an offer's: hold (`sendonly`, or the old
/// `c=` 0.0.0.0) is `recvonly`, `inactive` is `inactive`, else `sendrecv`.
fn answer_direction(offer: &str) -> &'static str {
    let lines = || offer.lines().map(str::trim);
    if lines().any(|l| l == "a=inactive") {
        "inactive"
    } else if lines().any(|l| l == "a=sendonly" || l.starts_with("c=IN IP4 0.0.0.0")) {
        "recvonly"
    } else {
        "sendrecv"
    }
}

/// `answer` with its direction set to `direction` and its `o=` version
/// one up (RFC 3264: a changed session description has a new version).
fn redirect(answer: &str, direction: &str) -> String {
    let mut out = String::with_capacity(answer.len() + 16);
    for line in answer.lines().map(str::trim_end) {
        if matches!(line, "a=sendrecv" | "a=sendonly" | "a=recvonly" | "a=inactive") || line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("o=") {
            let mut fields: Vec<String> = rest.split(' ').map(str::to_owned).collect();
            if let Some(v) = fields.get_mut(2)
                && let Ok(n) = v.parse::<u64>()
            {
                *v = n.wrapping_add(1).to_string();
            }
            out.push_str("o=");
            out.push_str(&fields.join(" "));
        } else {
            out.push_str(line);
        }
        out.push_str("\r\n");
    }
    out.push_str("a=");
    out.push_str(direction);
    out.push_str("\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::{answer_direction, redirect};

    #[test]
    fn hold_resume_directions_and_version() {
        assert_eq!(answer_direction("v=0\r\na=sendonly\r\n"), "recvonly");
        assert_eq!(answer_direction("c=IN IP4 0.0.0.0\r\n"), "recvonly");
        assert_eq!(answer_direction("a=inactive\r\n"), "inactive");
        assert_eq!(answer_direction("a=sendrecv\r\n"), "sendrecv");
        let held = redirect("v=0\r\no=- 7 2 IN IP4 1.2.3.4\r\nm=audio 5 RTP/AVP 96\r\na=sendrecv\r\n", "recvonly");
        assert_eq!(held, "v=0\r\no=- 7 3 IN IP4 1.2.3.4\r\nm=audio 5 RTP/AVP 96\r\na=recvonly\r\n");
    }
}
