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
use rsipstack::sip::{HeadersExt, Method, StatusCode, Uri};
use rsipstack::transaction::{Endpoint, TransactionReceiver};
use rsipstack::transport::{TransportLayer, udp::UdpConnection};

use crate::cidr::Cidr;
use crate::room::{LeaveReason, Room};
use crate::session::sessions::Sessions;
use crate::sync::lock;

/// A joined call: its room and participant (the INVITE's handling is in `calls`).
pub(super) struct Call {
    pub(super) room: Arc<Room>,
    pub(super) id: u64,
}

/// The SIP edge of a server: bound at start, served until the server stops.
pub(crate) struct Edge {
    pub(super) session: Arc<Sessions>,
    pub(super) dialogs: DialogLayer,
    /// The Contact of tutti's answers.
    pub(super) contact: Uri,
    pub(super) room_prefix: String,
    trusted: Vec<Cidr>,
    /// The joined calls, by dialog id: whoever takes one out makes it leave.
    pub(super) calls: Mutex<HashMap<String, Call>>,
    states: DialogStateSender,
    endpoint: Endpoint,
    cancel: CancellationToken,
    bound: SocketAddr,
}

impl Edge {
    /// Binds `[sip] listen` (UDP). The Contact host is `public_address`,
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
        let transport = TransportLayer::new(cancel.clone());
        transport.add_transport(udp.into());
        let endpoint = rsipstack::EndpointBuilder::new()
            .with_cancel_token(cancel.clone())
            .with_transport_layer(transport)
            .with_user_agent(concat!("tutti/", env!("CARGO_PKG_VERSION")))
            .build();
        let contact = format!("sip:tutti@{}", cfg.contact(fallback, bound));
        let contact = Uri::try_from(contact.as_str()).map_err(|e| format!("sip.public_address: {e}"))?;
        let dialogs = DialogLayer::new(endpoint.inner.clone());
        let (states, state_rx) = dialogs.new_dialog_state_channel();
        // Validated at load: a bad entry cannot be here.
        let trusted = crate::cidr::parse_all(&cfg.trusted).unwrap_or_default();
        if trusted.is_empty() {
            tracing::warn!(listen = %bound, "SIP: [sip] trusted is empty: every call is refused with 403");
        }
        if session.cfg.rtp_in.trusted.is_empty() {
            tracing::warn!("SIP: [rtp_in] trusted is empty: calls carry plain RTP, so every call is refused with 403");
        }
        let edge = Self {
            session,
            dialogs,
            contact,
            room_prefix: cfg.room_prefix,
            trusted,
            calls: Mutex::default(),
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
        tracing::info!(listen = %self.bound, contact = %self.contact, "SIP edge is serving");
        tokio::select! {
            _ = self.endpoint.serve() => {}
            _ = self.clone().requests(incoming) => {}
            _ = self.clone().ends(states) => {}
            _ = stop.wait_for(|s| *s) => {}
        }
        self.cancel.cancel();
        self.endpoint.shutdown();
    }

    /// Sorts each new server transaction.
    async fn requests(self: Arc<Self>, mut incoming: TransactionReceiver) {
        while let Some(mut tx) = incoming.recv().await {
            let source = tx.connection.as_ref().and_then(|c| c.get_remote_addr()).and_then(|a| a.get_socketaddr().ok());
            let Some(source) = source.filter(|s| crate::cidr::any_contains(&self.trusted, s.ip())) else {
                crate::metrics::sip_refused("source");
                tracing::info!(?source, method = %tx.original.method, "SIP request refused: not from a [sip] trusted network");
                if tx.original.method != Method::Ack {
                    tokio::spawn(async move { tx.reply(StatusCode::Forbidden).await.ok() });
                }
                continue;
            };
            let in_dialog = tx.original.to_header().ok().and_then(|t| t.tag().ok().flatten()).is_some();
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
                // Others (a re-INVITE, UPDATE, INFO) are not taken yet: dropping the
                // handle answers 501 and the call goes on.
                _ => {}
            }
        }
    }

    /// The call of dialog `id` leaves its room, if it is still listed.
    pub(super) fn hang_up(&self, id: &DialogId) {
        let call = lock(&self.calls).remove(&id.to_string());
        if let Some(call) = call {
            tracing::info!(room = %call.room.id, participant = call.id, "SIP caller hung up");
            self.session.leave(&call.room, call.id, LeaveReason::Left);
        }
    }

    /// A state channel for a new dialog.
    pub(super) fn states(&self) -> DialogStateSender {
        self.states.clone()
    }
}
