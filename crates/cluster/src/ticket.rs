//! Redirect tickets: what a node gives a client it redirects, so that the
//! client's bearer token need not survive the redirect (browsers drop
//! `Authorization` on a cross-origin redirect).
//!
//! A ticket is `base64url(claims JSON) "." base64url(HMAC-SHA256(secret, claims JSON))`,
//! signed with a key derived from the secret every node shares (the
//! server's `auth.secret`, purpose `cluster-ticket`, see
//! [`derive_key`](crate::derive_key)). It names the room, the identity, the
//! grants the redirecting node gives the request (the least it needs: the
//! server narrows them), the one request it may stand in for (method and
//! path: a ticket minted for a `DELETE` cannot serve a `POST`, nor another
//! path), an expiry (seconds since the Unix epoch: the one place where
//! node clocks must roughly agree; NTP is plenty for a 30 s ticket) and a
//! random nonce. This module is pure (the clock is passed in);
//! [`Cluster::verify_ticket`](crate::Cluster::verify_ticket) adds single use
//! through Redis.

use serde::{Deserialize, Serialize};

use crate::error::TicketError;
use crate::record::{KeyRing, fresh_nonce, is_nonce, open_signed, seal_signed};

/// Longest ticket accepted (a bound on what a client can make us parse).
pub const MAX_TICKET_BYTES: usize = 4096;

/// What a ticket vouches for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TicketClaims {
    /// The room the client was redirected for.
    pub room: String,
    /// Who the client is (the token's subject).
    pub identity: String,
    /// The token's grants, as the server encodes them (opaque here).
    #[serde(default)]
    pub grants: serde_json::Value,
    /// The HTTP method of the one request the ticket is for (`POST`, `GET`, …).
    pub method: String,
    /// The path (without the query) of that request.
    pub path: String,
    /// Expiry, seconds since the Unix epoch.
    pub exp: u64,
    /// 128 random bits, hex: the single-use key.
    pub nonce: String,
}

/// Signs and checks tickets with the cluster's shared secret.
pub struct TicketKey {
    key: KeyRing,
    ttl_seconds: u64,
}

impl std::fmt::Debug for TicketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TicketKey").field("ttl_seconds", &self.ttl_seconds).finish_non_exhaustive()
    }
}

impl TicketKey {
    /// A key from the shared secret; tickets live `ttl_seconds`.
    pub fn new(secret: &[u8], ttl_seconds: u64) -> Self {
        Self { key: KeyRing::new(secret), ttl_seconds }
    }

    /// Also accepts tickets signed with `secret` (a key as [`new`](Self::new)
    /// takes it, from a previous cluster secret); new ones are signed with the first.
    pub fn also_accept(mut self, secret: &[u8]) -> Self {
        self.key.accept(secret);
        self
    }

    /// Lifetime of the tickets this key mints.
    pub fn ttl_seconds(&self) -> u64 {
        self.ttl_seconds
    }

    /// A ticket for `room` and `identity` with `grants`, for the request
    /// `method path` only, valid until `now_unix + ttl`, with a fresh random nonce.
    pub fn mint(
        &self,
        room: &str,
        identity: &str,
        grants: serde_json::Value,
        (method, path): (&str, &str),
        now_unix: u64,
    ) -> Result<(String, TicketClaims), TicketError> {
        let nonce = fresh_nonce().map_err(|e| TicketError::Encode(e.to_string()))?;
        let claims = TicketClaims {
            room: room.to_owned(),
            identity: identity.to_owned(),
            grants,
            method: method.to_owned(),
            path: path.to_owned(),
            exp: now_unix.saturating_add(self.ttl_seconds),
            nonce,
        };
        let json = serde_json::to_vec(&claims).map_err(|e| TicketError::Encode(e.to_string()))?;
        let ticket = seal_signed(self.key.signer(), &json);
        if ticket.len() > MAX_TICKET_BYTES {
            return Err(TicketError::Encode(format!("ticket of {} bytes exceeds {MAX_TICKET_BYTES}", ticket.len())));
        }
        Ok((ticket, claims))
    }

    /// Checks the signature (in constant time), the room, the request
    /// (`method path`) and the expiry; single use is the caller's part.
    pub fn verify(
        &self,
        ticket: &str,
        room: &str,
        (method, path): (&str, &str),
        now_unix: u64,
    ) -> Result<TicketClaims, TicketError> {
        let refusals = (TicketError::Malformed, TicketError::BadSignature);
        let claims: TicketClaims = open_signed(&self.key, ticket, MAX_TICKET_BYTES, refusals)?;
        if !is_nonce(&claims.nonce) {
            return Err(TicketError::Malformed);
        }
        if claims.room != room {
            return Err(TicketError::WrongRoom);
        }
        if claims.method != method || claims.path != path {
            return Err(TicketError::WrongRequest);
        }
        if now_unix >= claims.exp {
            return Err(TicketError::Expired);
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    use super::*;

    const NOW: u64 = 1_800_000_000;
    const REQ: (&str, &str) = ("POST", "/v1/rooms/r1/participants");

    #[test]
    fn a_minted_ticket_verifies_until_it_expires() {
        let key = TicketKey::new(b"0123456789abcdef0123456789abcdef", 30);
        let grants = serde_json::json!({"publish": true});
        let (t, claims) = key.mint("r1", "alice", grants.clone(), REQ, NOW).expect("mint");
        let got = key.verify(&t, "r1", REQ, NOW + 29).expect("valid");
        assert_eq!(got, claims);
        assert_eq!((got.identity.as_str(), got.grants), ("alice", grants));
        assert_eq!(key.verify(&t, "r1", REQ, NOW + 30), Err(TicketError::Expired));
        assert_eq!(key.verify(&t, "r2", REQ, NOW), Err(TicketError::WrongRoom));
        // Bound to its request: another method or path is refused.
        assert_eq!(key.verify(&t, "r1", ("DELETE", REQ.1), NOW), Err(TicketError::WrongRequest));
        assert_eq!(key.verify(&t, "r1", ("POST", "/v1/rooms/r1"), NOW), Err(TicketError::WrongRequest));
    }

    #[test]
    fn altered_forged_or_garbage_tickets_are_refused() {
        let key = TicketKey::new(b"0123456789abcdef0123456789abcdef", 30);
        let other = TicketKey::new(b"another secret, another cluster!", 30);
        let (t, _) = key.mint("r1", "alice", serde_json::Value::Null, REQ, NOW).expect("mint");
        assert_eq!(
            key.verify(&other.mint("r1", "a", serde_json::Value::Null, REQ, NOW).expect("mint").0, "r1", REQ, NOW),
            Err(TicketError::BadSignature)
        );
        // Change the identity inside the payload and re-encode it.
        let (payload, tag) = t.split_once('.').expect("two parts");
        let json = String::from_utf8(URL_SAFE_NO_PAD.decode(payload).expect("b64")).expect("utf8");
        let forged = format!("{}.{tag}", URL_SAFE_NO_PAD.encode(json.replace("alice", "mallory")));
        assert_eq!(key.verify(&forged, "r1", REQ, NOW), Err(TicketError::BadSignature));
        for junk in ["", ".", "abc", "a.b.c", "!!!.???", &"x".repeat(MAX_TICKET_BYTES + 1)] {
            assert!(matches!(
                key.verify(junk, "r1", REQ, NOW),
                Err(TicketError::Malformed | TicketError::BadSignature)
            ));
        }
    }
}
