//! Joining with a plain RTP/AVP Opus offer (a SIP gateway such as
//! FreeSWITCH or Asterisk, or ffmpeg): no ICE, no DTLS, no SRTP. The join
//! route hands such offers here.
//!
//! Plain RTP has no encryption and no authentication, so it is refused
//! (403 `rtp_in_forbidden`) unless `[rtp_in] trusted` lists the networks
//! of both the API client and the RTP address its offer names; a malformed
//! plain offer is 400 `bad_sdp`. The answer names the server's plain RTP
//! address and the offered Opus payload type.

use std::net::IpAddr;
use std::sync::Arc;

use axum::http::StatusCode;
use tutti_rtc::plain::{PlainOffer, is_plain_offer};

use super::ApiState;
use super::error::{ApiError, ApiResult};
use crate::auth::Grant;
use crate::room::{PlainJoiner, Room};

fn forbidden(message: String) -> ApiError {
    crate::metrics::rtp_in_forbidden();
    tracing::info!(%message, "plain RTP join refused");
    ApiError::new(StatusCode::FORBIDDEN, "rtp_in_forbidden", message)
}

/// `None` when `sdp` is not a plain RTP/AVP offer (a WebRTC one goes its
/// usual way). Otherwise the parsed offer, if plain RTP is allowed from
/// `client` and to the offer's address.
pub(crate) fn check(api: &ApiState, sdp: &str, client: IpAddr) -> ApiResult<Option<PlainOffer>> {
    if !is_plain_offer(sdp) {
        return Ok(None);
    }
    // Validated at start: a bad entry cannot be here (and would trust nothing).
    let trusted = crate::cidr::parse_all(&api.cfg.rtp_in.trusted).unwrap_or_default();
    if trusted.is_empty() || api.media.plain_rtp().is_none() {
        return Err(forbidden(
            "plain RTP/AVP offers are not allowed on this server (see [rtp_in] trusted in the configuration)".into(),
        ));
    }
    if !crate::cidr::any_contains(&trusted, client) {
        return Err(forbidden(format!("plain RTP/AVP offers are not allowed from {client} (not a trusted network)")));
    }
    let offer = PlainOffer::parse(sdp).map_err(|e| ApiError::bad_request("bad_sdp", e.to_string()))?;
    if !crate::cidr::any_contains(&trusted, offer.remote.ip()) {
        return Err(forbidden(format!("the offer's RTP address {} is not in a trusted network", offer.remote.ip())));
    }
    Ok(Some(offer))
}

/// Joins `room` as a plain RTP participant. Returns (participant id, SDP answer).
pub(crate) fn join(
    api: &ApiState,
    room: &Arc<Room>,
    offer: PlainOffer,
    name: &str,
    grant: &Grant,
) -> ApiResult<(u64, String)> {
    let (local, io) =
        api.media.plain_rtp().ok_or_else(|| forbidden("plain RTP/AVP offers are not allowed on this server".into()))?;
    super::stage::admit(api, room, grant, name)?;
    let peer = api.media.reserve_id();
    let listen_only = !grant.speak;
    let joiner = PlainJoiner {
        id: peer,
        name: name.to_owned(),
        identity: grant.identity.clone(),
        listen_only,
        admin: grant.may_manage(&room.id),
        io,
    };
    let (id, listen_only) = api.rooms.join_plain(room, joiner)?;
    if !api.media.add_plain(peer, room.clone(), offer, listen_only) {
        // The plain RTP thread is gone (shutting down): undo the join.
        let _ = api.rooms.leave(room, id, crate::room::LeaveReason::Failed);
        return Err(ApiError::shutting_down());
    }
    tracing::info!(room = %room.id, participant = id, remote = %offer.remote, pt = offer.payload_type, comedia = offer.comedia, "plain RTP participant answered");
    Ok((id, offer.answer(local, id)))
}
