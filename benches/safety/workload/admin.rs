//! The admin client: force-releases a random name now and then.

use std::time::Duration;

use rand::RngExt as _;

use super::{CLIENT_SLACK, Client};
use crate::cluster::ADMIN_TOKEN;
use crate::history::{Family, Request};

impl Client {
    pub(super) async fn admin_round(&mut self) {
        tokio::time::sleep(Duration::from_millis(self.rng.random_range(1500..=3500))).await;
        if !self.running() {
            return;
        }
        let family =
            self.shared.plan.families[self.rng.random_range(0..self.shared.plan.families.len())];
        // RedLock leases are not the admin's to force-release (the route acts on the main Redis).
        if family == Family::Redlock {
            return;
        }
        let names = self.shared.plan.names(family);
        let name = names[self.rng.random_range(0..names.len())].clone();
        let semaphore = family == Family::Semaphore;
        let path = if family == Family::Election {
            // Ends the term: recorded as a force release of the name, which it is.
            format!("/v1/admin/elections/{name}?reason=harness")
        } else if semaphore {
            format!("/v1/admin/semaphores/{name}?reason=harness")
        } else {
            format!("/v1/admin/locks/{name}?reason=harness")
        };
        self.call(
            &name,
            family,
            reqwest::Method::DELETE,
            path,
            None,
            Some(ADMIN_TOKEN),
            None,
            CLIENT_SLACK,
            Request::ForceRelease { semaphore },
        )
        .await;
    }
}
