//! What a SIP caller is told: a refused join as a SIP status, and the room
//! a Request-URI names.

use axum::http::StatusCode as Http;
use rsipstack::sip::StatusCode;

use crate::refusal::Refusal;

/// The SIP status for a refused join (the REST route's JSON refusal).
pub(super) fn for_refusal(r: &Refusal) -> StatusCode {
    match (r.status, r.code) {
        (Http::NOT_FOUND, _) => StatusCode::NotFound,
        (Http::FORBIDDEN, _) | (Http::UNAUTHORIZED, _) => StatusCode::Forbidden,
        // The offer: no Opus, G.722, PCMU or PCMA, or not a plain RTP/AVP one.
        (Http::BAD_REQUEST, _) | (Http::UNSUPPORTED_MEDIA_TYPE, _) => StatusCode::NotAcceptableHere,
        (Http::CONFLICT, _) => StatusCode::BusyHere,
        // Locked (may open again), or on another node of a cluster (no redirect yet).
        (Http::LOCKED, _) | (Http::TEMPORARY_REDIRECT, _) => StatusCode::TemporarilyUnavailable,
        (Http::TOO_MANY_REQUESTS, _) | (Http::SERVICE_UNAVAILABLE, _) => StatusCode::ServiceUnavailable,
        _ => StatusCode::ServerInternalError,
    }
}

/// The room a Request-URI's user part names, `prefix` before it; `None`
/// without a user part, or with one that cannot be a room id.
pub(super) fn room_of(user: Option<&str>, prefix: &str) -> Option<String> {
    let user = user?.trim();
    if user.is_empty() {
        return None;
    }
    let room = format!("{prefix}{user}");
    crate::room::valid_room_id(&room).then_some(room)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_map_to_sip_statuses() {
        let cases = [
            (Http::NOT_FOUND, "room_not_found", 404),
            (Http::FORBIDDEN, "banned", 403),
            (Http::FORBIDDEN, "rtp_in_forbidden", 403),
            (Http::BAD_REQUEST, "bad_sdp", 488),
            (Http::CONFLICT, "room_full", 486),
            (Http::LOCKED, "room_locked", 480),
            (Http::SERVICE_UNAVAILABLE, "server_full", 503),
            (Http::TOO_MANY_REQUESTS, "rate_limited", 503),
            (Http::INTERNAL_SERVER_ERROR, "internal", 500),
        ];
        for (http, code, sip) in cases {
            assert_eq!(u16::from(for_refusal(&Refusal::new(http, code, "x"))), sip, "{http} {code}");
        }
    }

    #[test]
    fn the_user_part_names_the_room() {
        assert_eq!(room_of(Some("standup"), "").as_deref(), Some("standup"));
        assert_eq!(room_of(Some("42"), "phone-").as_deref(), Some("phone-42"));
        assert_eq!(room_of(None, "p"), None);
        assert_eq!(room_of(Some(""), ""), None);
    }
}
