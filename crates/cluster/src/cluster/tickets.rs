//! Redirect tickets: minted for a redirect, verified and burnt once in the
//! whole cluster, and the redirects counted.

use std::sync::atomic::Ordering::Relaxed;

use super::{Cluster, unix_now};
use crate::error::TicketError;
use crate::ticket::TicketClaims;

impl Cluster {
    /// A redirect ticket for `room`, vouching for `identity` and `grants`
    /// (the server's token claims, opaque here: give the least the request
    /// needs), for the one request `(method, path)`, valid `ticket_ttl_seconds`.
    pub fn mint_ticket(
        &self,
        room: &str,
        identity: &str,
        grants: serde_json::Value,
        request: (&str, &str),
    ) -> Result<String, TicketError> {
        let (ticket, _) = self.inner.tickets.mint(room, identity, grants, request, unix_now())?;
        self.inner.counters.tickets_minted.fetch_add(1, Relaxed);
        Ok(ticket)
    }

    /// Checks a ticket for `room` and the request `(method, path)` it comes
    /// with, and burns it: a ticket is accepted once in
    /// the whole cluster (`SET ticket:<nonce> 1 NX EX <ttl + 30 s>`). When
    /// Redis cannot be reached the ticket is refused with
    /// [`TicketError::Unavailable`] (answer 503 + Retry-After).
    pub async fn verify_ticket(
        &self,
        ticket: &str,
        room: &str,
        request: (&str, &str),
    ) -> Result<TicketClaims, TicketError> {
        let result = self.verify_ticket_inner(ticket, room, request).await;
        let c = &self.inner.counters;
        match &result {
            Ok(_) => c.tickets_accepted.fetch_add(1, Relaxed),
            Err(_) => c.tickets_refused.fetch_add(1, Relaxed),
        };
        result
    }

    async fn verify_ticket_inner(
        &self,
        ticket: &str,
        room: &str,
        request: (&str, &str),
    ) -> Result<TicketClaims, TicketError> {
        let claims = self.inner.tickets.verify(ticket, room, request, unix_now())?;
        let mut con = self.inner.con.clone();
        let key = self.inner.keys.ticket(&claims.nonce);
        // Kept past the expiry, with slack for clocks a little apart.
        let keep = self.inner.tickets.ttl_seconds() + 30;
        let set: Option<String> =
            self.run(async move {
                redis::cmd("SET").arg(key).arg(1).arg("NX").arg("EX").arg(keep).query_async(&mut con).await
            })
            .await
            .map_err(|e| TicketError::Unavailable(e.to_string()))?;
        match set {
            Some(_) => Ok(claims),
            None => Err(TicketError::Replayed),
        }
    }

    /// Counts a redirect the server answered (for `tutti_cluster_redirects_total`).
    pub fn record_redirect(&self) {
        self.inner.counters.redirects.fetch_add(1, Relaxed);
    }
}
