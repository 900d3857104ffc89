//! The API's rendering of a [`Refusal`]: its status, a JSON body `{"code",
//! "message"}`, and `WWW-Authenticate` and `Retry-After` where it has them.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use crate::refusal::Refusal;

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "code": self.code, "message": self.message });
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(challenge) = self.challenge {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
        }
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}
