//! A semaphore session: several permits at once, then held like a lease.

use std::time::Duration;

use rand::RngExt as _;
use serde_json::json;

use super::{CLIENT_SLACK, Client};
use crate::history::{Family, Outcome, Request};

impl Client {
    pub(super) async fn semaphore_session(&mut self, name: String) {
        let limit = self.shared.plan.semaphore_limit;
        let permits = self.rng.random_range(1..=limit);
        let ttl_ms = self.rng.random_range(300..=1500);
        let wait_ms = if self.rng.random_bool(0.4) {
            0
        } else {
            self.rng.random_range(50..=1500)
        };
        let op = self
            .call(
                &name,
                Family::Semaphore,
                reqwest::Method::POST,
                format!("/v1/semaphores/{name}/leases?wait_ms={wait_ms}"),
                Some(json!({"limit": limit, "permits": permits, "ttl_ms": ttl_ms,
                    "holder": format!("c{}", self.id)})),
                None,
                None,
                Duration::from_millis(wait_ms) + CLIENT_SLACK,
                Request::AcquirePermits {
                    permits,
                    limit,
                    ttl_ms,
                    wait_ms,
                },
            )
            .await;
        if let Outcome::Granted {
            lease,
            fence,
            ttl_ms,
            ..
        } = op.outcome
        {
            let token = self.token_of_last();
            let mut held = self.new_held(
                &name,
                Family::Semaphore,
                "semaphore",
                lease,
                token,
                fence,
                ttl_ms,
                op.send,
            );
            held.semaphore = true;
            self.hold(held).await;
        }
    }
}
