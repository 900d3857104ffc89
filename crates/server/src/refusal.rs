//! A refusal: why a request of any control plane (REST, the room
//! WebSocket, RTP in, a SIP edge) was not done, as a status class (an HTTP
//! status code, which another plane maps to its own), a stable
//! machine-readable code and a sentence. The layers below the API return
//! it; each control plane renders it its own way (the API as a JSON body
//! `{"code", "message"}`: `api::error`).

use std::time::Duration;

use axum::http::StatusCode;

use crate::auth::AuthError;
use crate::room::RoomError;

/// Why a request was refused.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
    /// `WWW-Authenticate` (RFC 6750 §3), for 401 and 403.
    pub(crate) challenge: Option<&'static str>,
    /// `Retry-After`, in seconds, for 429.
    pub(crate) retry_after: Option<u64>,
}

pub(crate) type Refused<T> = Result<T, Refusal>;

impl Refusal {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), challenge: None, retry_after: None }
    }

    /// 400 with `code`.
    pub(crate) fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 401: no valid token. The code tells a client what to say:
    /// `token_missing` (none came), `token_expired`, or `token_invalid`
    /// (malformed, not HS256, or a signature this server did not make).
    pub(crate) fn unauthorized(e: &AuthError) -> Self {
        let (challenge, code) = match e {
            AuthError::Missing => (r#"Bearer realm="tutti""#, "token_missing"),
            AuthError::Expired => (r#"Bearer realm="tutti", error="invalid_token""#, "token_expired"),
            AuthError::Malformed | AuthError::Algorithm | AuthError::BadSignature | AuthError::Attributes(_) => {
                (r#"Bearer realm="tutti", error="invalid_token""#, "token_invalid")
            }
        };
        Self { challenge: Some(challenge), ..Self::new(StatusCode::UNAUTHORIZED, code, e.to_string()) }
    }

    /// 403 `wrong_room`: a valid token for another room.
    pub(crate) fn wrong_room(room: &str) -> Self {
        Self { code: "wrong_room", ..Self::forbidden(format!("this token is not for room '{room}'")) }
    }

    /// 403: a valid token that does not allow this.
    pub(crate) fn forbidden(message: impl Into<String>) -> Self {
        Self {
            challenge: Some(r#"Bearer realm="tutti", error="insufficient_scope""#),
            ..Self::new(StatusCode::FORBIDDEN, "forbidden", message)
        }
    }

    /// 429: too many joins from this address.
    pub(crate) fn rate_limited(retry: Duration) -> Self {
        let secs = retry.as_secs_f64().ceil().max(1.0) as u64;
        Self {
            retry_after: Some(secs),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!("too many joins from this address; retry in {secs} s"),
            )
        }
    }

    /// 503 `cluster_unavailable` with `Retry-After`: the cluster directory
    /// (Redis) cannot place or find the room now.
    pub(crate) fn cluster_unavailable(message: impl Into<String>, retry_after_seconds: u32) -> Self {
        Self {
            retry_after: Some(retry_after_seconds.into()),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "cluster_unavailable", message)
        }
    }

    /// 503 `shutting_down`.
    pub(crate) fn shutting_down() -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", "the server is shutting down")
    }
}

impl From<RoomError> for Refusal {
    fn from(e: RoomError) -> Self {
        let (status, code) = match &e {
            RoomError::NoRoom(_) => (StatusCode::NOT_FOUND, "room_not_found"),
            RoomError::NoParticipant(_) => (StatusCode::NOT_FOUND, "participant_not_found"),
            RoomError::RoomExists(_) => (StatusCode::CONFLICT, "room_exists"),
            RoomError::BadRoomId => (StatusCode::BAD_REQUEST, "bad_room_id"),
            RoomError::BadRoomConfig(_) => (StatusCode::BAD_REQUEST, "bad_room_config"),
            RoomError::RoomFull { .. } => (StatusCode::CONFLICT, "room_full"),
            RoomError::TooManyRooms(_) | RoomError::TooManyParticipants(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "server_full")
            }
            RoomError::ListenOnly(_) => return Self::forbidden(e.to_string()),
            RoomError::BadValue(_) => (StatusCode::BAD_REQUEST, "bad_value"),
            RoomError::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
            RoomError::Draining => (StatusCode::SERVICE_UNAVAILABLE, "draining"),
            RoomError::Locked(_) => (StatusCode::LOCKED, "room_locked"),
            RoomError::Banned(_) => (StatusCode::FORBIDDEN, "banned"),
            RoomError::SameRoom(_) => (StatusCode::BAD_REQUEST, "same_room"),
            RoomError::Attributes(crate::attributes::AttributeError::Reserved(_)) => {
                (StatusCode::FORBIDDEN, "reserved_attribute")
            }
            RoomError::Attributes(_) => (StatusCode::BAD_REQUEST, "bad_attributes"),
            RoomError::Waiting(_) => (StatusCode::CONFLICT, "waiting_for_moderator"),
        };
        Self::new(status, code, e.to_string())
    }
}
