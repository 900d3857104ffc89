//! The one join. Every control plane — the REST route (WHIP or JSON), the
//! room WebSocket's `join`, a plain RTP/AVP offer (RTP in), and later the
//! SIP edge — calls [`Sessions::join`], which runs every check in a fixed
//! order:
//!
//! ```text
//! grant may see the room, has `listen` (403) ─► join rate of the address (429)
//!   ─► the offer (the plane parses it only now: 400, 415)
//!   ─► plain RTP/AVP? allowed from `rtp_in.trusted` only (403 rtp_in_forbidden)
//!   ─► where the room is (cluster::locate: here, created on join, or another node: 307)
//!   ─► room space (409, 503) ─► lock and bans (423, 403) ─► SDP answer ─► Rooms::join
//!   ─► the participant its identity had here, if any, is replaced (its peer closed)
//! ```

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::http::StatusCode;
use tutti_cluster::Owner;
use tutti_rtc::plain::{PlainOffer, is_plain_offer};

use super::grants::may_see;
use super::sessions::Sessions;
use crate::auth::Grant;
use crate::cluster::locate::{Located, locate_for_join};
use crate::refusal::{Refusal, Refused};
use crate::room::{PlainJoiner, Room, RoomError};

/// Where a join's room is looked for.
pub(crate) enum Place<'a> {
    /// Found here or placed by the cluster (REST, RTP in); `ticketed`: the
    /// request was redirected here by another node.
    Locate { ticketed: bool },
    /// The room the caller's socket is on (the room WebSocket: it was
    /// located at the socket's upgrade).
    Given(&'a Arc<Room>),
}

/// A join as a control plane asks for it.
pub(crate) struct JoinRequest<'a> {
    pub(crate) room: &'a str,
    pub(crate) grant: &'a Grant,
    /// The address that asked: its join rate, and whether plain RTP may come from it.
    pub(crate) client: IpAddr,
    pub(crate) place: Place<'a>,
    /// Whether this plane takes plain RTP/AVP offers (the REST route does,
    /// from trusted networks; the WebSocket does not).
    pub(crate) plain: bool,
}

/// The offer of a join and the name others see.
pub(crate) struct Offer {
    pub(crate) sdp: String,
    pub(crate) name: String,
}

/// A join's outcome.
pub(crate) enum Joined {
    /// Joined here: the participant's id and the SDP answer.
    Here { id: u64, answer: String },
    /// The room is held by another node (cluster mode): join there.
    Elsewhere(Owner),
}

impl Sessions {
    /// 403 unless the grant may join `room`; 429 if `ip` joins too often.
    pub(crate) fn may_join(&self, grant: &Grant, room: &str, ip: IpAddr) -> Refused<()> {
        may_see(grant, room)?;
        if !grant.listen {
            return Err(Refusal::forbidden("joining needs a token with the 'listen' permission"));
        }
        self.joins.check(ip, Instant::now()).map_err(Refusal::rate_limited)
    }

    /// Joins a room with an SDP offer, as `req.grant` allows (without
    /// `speak`, the participant is muted for good): the checks in the
    /// order of the module's diagram. `offer` is read once the caller may
    /// join (a refused caller's body is never parsed).
    pub(crate) async fn join(&self, req: JoinRequest<'_>, offer: impl FnOnce() -> Refused<Offer>) -> Refused<Joined> {
        self.may_join(req.grant, req.room, req.client)?;
        let offer = offer()?;
        // A plain RTP/AVP offer (SIP gateway): allowed from trusted networks only.
        let plain = if req.plain { self.plain_offer(&offer.sdp, req.client)? } else { None };
        let room = match req.place {
            Place::Given(room) => room.clone(),
            Place::Locate { ticketed } => match locate_for_join(&self.node, req.room, ticketed).await? {
                Located::Here(room) => room,
                Located::Elsewhere(owner) => return Ok(Joined::Elsewhere(owner)),
            },
        };
        let (id, answer) = match plain {
            Some(plain) => self.join_plain(&room, plain, &offer.name, req.grant)?,
            None => self.join_webrtc(&room, &offer.sdp, &offer.name, req.grant)?,
        };
        // The participant its identity had here, if any, was replaced: close its peer.
        self.apply(self.rooms.take_replaced());
        Ok(Joined::Here { id, answer })
    }

    /// Refuses a join into a locked room or by a banned identity (counted),
    /// before the offer is looked at.
    fn admit(&self, room: &Room, grant: &Grant, name: &str) -> Refused<()> {
        self.rooms.admit(room, &grant.identity, name, Instant::now()).map_err(|e| {
            crate::metrics::stage_action(if matches!(e, RoomError::Locked(_)) {
                "refused_locked"
            } else {
                "refused_banned"
            });
            Refusal::from(e)
        })
    }

    /// A WebRTC join: checks space, admits, answers. Returns (participant id, SDP answer).
    fn join_webrtc(&self, room: &Arc<Room>, sdp: &str, name: &str, grant: &Grant) -> Refused<(u64, String)> {
        self.rooms.check_space(room)?;
        self.admit(room, grant, name)?;
        if is_plain_offer(sdp) {
            // The REST join takes these (`plain_offer`); here (the WebSocket) they would wait for ICE forever.
            return Err(Refusal::bad_request(
                "bad_sdp",
                "plain RTP/AVP offers join with POST /v1/rooms/{room}/participants",
            ));
        }
        let now = Instant::now();
        let (peer, answer) = self.media.accept(sdp, now).map_err(|e| match e {
            tutti_rtc::RtcError::BadSdp(_) | tutti_rtc::RtcError::NoAudio => {
                Refusal::bad_request("bad_sdp", e.to_string())
            }
            e => Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()),
        })?;
        let joiner = crate::room::Joiner {
            peer,
            name: name.to_owned(),
            identity: grant.identity.clone(),
            listen_only: !grant.speak,
            // With auth off every caller is an admin: then nobody is spared by mute-all.
            admin: if self.auth_on { crate::room::Admin::of(grant, &room.id) } else { crate::room::Admin::No },
            attributes: grant.attributes.clone(),
            stereo: tutti_rtc::asks_for_stereo(sdp),
        };
        let id = self.rooms.join(room, joiner, now)?;
        Ok((id, answer))
    }
}

// RTP in: joining with a plain RTP/AVP Opus offer (a SIP gateway such as
// FreeSWITCH or Asterisk, or ffmpeg): no ICE, no DTLS; SRTP when the offer
// carries SDES keys (`a=crypto`, RTP/SAVP), answered with a key of our own.
//
// Plain RTP has no encryption and no authentication, so it is refused
// (403 `rtp_in_forbidden`) unless `[rtp_in] trusted` lists the networks
// of both the API client and the RTP address its offer names; a malformed
// plain offer is 400 `bad_sdp`. The answer names the server's plain RTP
// address and the codec it takes (Opus, else G.722, else PCMA or PCMU: transcoded at
// the leg) on the offered payload type.

fn rtp_in_forbidden(message: String) -> Refusal {
    crate::metrics::rtp_in_forbidden();
    tracing::info!(%message, "plain RTP join refused");
    Refusal::new(StatusCode::FORBIDDEN, "rtp_in_forbidden", message)
}

impl Sessions {
    /// `None` when `sdp` is not a plain RTP/AVP offer (a WebRTC one goes its
    /// usual way). Otherwise the parsed offer, if plain RTP is allowed from
    /// `client` and to the offer's address.
    pub(super) fn plain_offer(&self, sdp: &str, client: IpAddr) -> Refused<Option<PlainOffer>> {
        if !is_plain_offer(sdp) {
            return Ok(None);
        }
        // Validated at start: a bad entry cannot be here (and would trust nothing).
        let trusted = crate::cidr::parse_all(&self.cfg.rtp_in.trusted).unwrap_or_default();
        if trusted.is_empty() || self.media.plain_rtp().is_none() {
            return Err(rtp_in_forbidden(
                "plain RTP/AVP offers are not allowed on this server (see [rtp_in] trusted in the configuration)"
                    .into(),
            ));
        }
        if !crate::cidr::any_contains(&trusted, client) {
            return Err(rtp_in_forbidden(format!(
                "plain RTP/AVP offers are not allowed from {client} (not a trusted network)"
            )));
        }
        let offer = PlainOffer::parse(sdp).map_err(|e| Refusal::bad_request("bad_sdp", e.to_string()))?;
        if !crate::cidr::any_contains(&trusted, offer.remote.ip()) {
            return Err(rtp_in_forbidden(format!(
                "the offer's RTP address {} is not in a trusted network",
                offer.remote.ip()
            )));
        }
        Ok(Some(offer))
    }

    /// Joins `room` as a plain RTP participant. Returns (participant id, SDP answer).
    fn join_plain(&self, room: &Arc<Room>, offer: PlainOffer, name: &str, grant: &Grant) -> Refused<(u64, String)> {
        let (local, io) = self
            .media
            .plain_rtp()
            .ok_or_else(|| rtp_in_forbidden("plain RTP/AVP offers are not allowed on this server".into()))?;
        // SDES: a fresh key of ours for the offer's (never logged).
        let srtp = match offer.crypto {
            Some(remote) => {
                let local = tutti_rtc::sdes::Crypto::fresh(&remote).map_err(|e| {
                    tracing::error!(error = %e, "no random bytes for an SRTP key");
                    Refusal::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "no_randomness",
                        "no SRTP key could be made: try again",
                    )
                })?;
                Some(tutti_rtc::sdes::Sdes { remote, local })
            }
            None => None,
        };
        self.admit(room, grant, name)?;
        let peer = self.media.reserve_id();
        let listen_only = !grant.speak;
        let joiner = PlainJoiner {
            id: peer,
            name: name.to_owned(),
            identity: grant.identity.clone(),
            listen_only,
            admin: crate::room::Admin::of(grant, &room.id),
            io,
            attributes: grant.attributes.clone(),
        };
        let (id, listen_only) = self.rooms.join_plain(room, joiner)?;
        if !self.media.add_plain(peer, room.clone(), offer, srtp, listen_only) {
            // The plain RTP thread is gone (shutting down): undo the join.
            let _ = self.rooms.leave(room, id, crate::room::LeaveReason::Failed);
            return Err(Refusal::shutting_down());
        }
        tracing::info!(room = %room.id, participant = id, remote = %offer.remote, pt = offer.payload_type, comedia = offer.comedia, srtp = srtp.is_some(), "plain RTP participant answered");
        Ok((id, offer.answer(local, id, srtp.as_ref())))
    }
}
