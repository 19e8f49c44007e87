//! A fair ticket's session: polled, polled again after its grant, polled by two connections
//! at once, left, or abandoned.

use std::time::Duration;

use rand::RngExt as _;

use super::{CLIENT_SLACK, Client};
use crate::history::{Family, Op, Outcome, Request};

impl Client {
    pub(super) async fn ticket_session(
        &mut self,
        name: String,
        family: Family,
        ticket: String,
        token: String,
        ttl_ms: u64,
    ) {
        let plan = self.rng.random_range(0..20);
        if plan == 0 {
            return; // abandoned: never polled; it must stop blocking others by itself
        }
        if plan == 1 {
            self.leave(&name, family, &ticket, &token).await;
            return;
        }
        for _ in 0..20 {
            if !self.running() {
                // Give the place up rather than leave it to expire.
                self.leave(&name, family, &ticket, &token).await;
                return;
            }
            let wait_ms = self.rng.random_range(0..=800);
            let twice_at_once = self.rng.random_bool(0.1);
            let (a, b) = if twice_at_once {
                let mut other = Client::new(self.id, self.rng.random(), self.shared.clone());
                let (a, b) = tokio::join!(
                    self.poll(&name, family, &ticket, &token, wait_ms),
                    other.poll(&name, family, &ticket, &token, wait_ms)
                );
                (a, Some(b))
            } else {
                (
                    self.poll(&name, family, &ticket, &token, wait_ms).await,
                    None,
                )
            };
            let granted =
                [Some(&a), b.as_ref()]
                    .into_iter()
                    .flatten()
                    .find_map(|op| match &op.outcome {
                        Outcome::Granted { fence, ttl_ms, .. } => Some((op.send, *fence, *ttl_ms)),
                        _ => None,
                    });
            let gone = [Some(&a), b.as_ref()]
                .into_iter()
                .flatten()
                .any(|op| matches!(op.outcome, Outcome::Lost { .. } | Outcome::Refused { .. }));
            if let Some((send, fence, granted_ttl)) = granted {
                // A 410 from the other poll at once does not take the grant back: a poll
                // must never release the lease its ticket was granted.
                let mut held = self.new_held(
                    &name,
                    family,
                    "fair",
                    ticket.clone(),
                    token.clone(),
                    fence,
                    if granted_ttl > 0 { granted_ttl } else { ttl_ms },
                    send,
                );
                // Polled again in a row after the grant: must answer with the same grant (or
                // a clear 409/410) and never give the lease back.
                if self.rng.random_bool(0.3) {
                    self.poll(&name, family, &ticket, &token, 0).await;
                }
                held.renewed_at = held.renewed_at.min(send);
                self.hold(held).await;
                return;
            }
            if gone {
                return;
            }
        }
    }

    /// Gives the ticket's place in line up (`DELETE .../tickets/{ticket}`).
    async fn leave(&mut self, name: &str, family: Family, ticket: &str, token: &str) {
        let path = format!("/v1/locks/{name}/tickets/{ticket}");
        self.call(
            name,
            family,
            reqwest::Method::DELETE,
            path,
            None,
            Some(token),
            None,
            CLIENT_SLACK,
            Request::Leave {
                ticket: ticket.to_owned(),
            },
        )
        .await;
    }

    async fn poll(
        &mut self,
        name: &str,
        family: Family,
        ticket: &str,
        token: &str,
        wait_ms: u64,
    ) -> Op {
        self.call(
            name,
            family,
            reqwest::Method::POST,
            format!("/v1/locks/{name}/tickets/{ticket}?wait_ms={wait_ms}"),
            None,
            Some(token),
            None,
            Duration::from_millis(wait_ms) + CLIENT_SLACK,
            Request::Poll {
                ticket: ticket.to_owned(),
                wait_ms,
            },
        )
        .await
    }
}
