//! Request bodies: read within the limit, JSON parsed with a clear error.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};

use crate::refusal::{Refusal, Refused};

/// The body, or the JSON error for why it could not be read (413 when too large).
pub(crate) fn body(body: Result<Bytes, BytesRejection>) -> Refused<Bytes> {
    body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => {
            Refusal::new(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", "the request body is too large")
        }
        status => Refusal::new(status, "bad_body", rejection.body_text()),
    })
}

pub(crate) fn content_type(headers: &HeaderMap) -> &str {
    let value = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    value.split(';').next().unwrap_or("").trim()
}

/// Parses a JSON body; an empty body is `T::default()` when `T` allows it.
pub(crate) fn json<T: serde::de::DeserializeOwned>(headers: &HeaderMap, bytes: &Bytes, empty: Option<T>) -> Refused<T> {
    if bytes.is_empty()
        && let Some(default) = empty
    {
        return Ok(default);
    }
    if !content_type(headers).eq_ignore_ascii_case("application/json") {
        return Err(Refusal::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as application/json",
        ));
    }
    serde_json::from_slice(bytes)
        .map_err(|e| Refusal::bad_request("bad_json", format!("the JSON body is not valid: {e}")))
}
