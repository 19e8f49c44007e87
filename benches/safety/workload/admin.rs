//! The admin client: force-releases a random name now and then, or (a share of its rounds)
//! asks the holders of a held lock or semaphore to let go within a short grace. RedLock
//! names too: both routes act on every node (the leases layer), and a RedLock holder's watch
//! tells it of the revocation as any holder's does.

use std::time::Duration;

use rand::RngExt as _;
use serde_json::json;

use super::{Answer, CLIENT_SLACK, Client, outcome_of};
use crate::cluster::ADMIN_TOKEN;
use crate::history::{Family, Outcome, Request};

/// The share of the admin's rounds that revoke rather than force-release.
const REVOKE_SHARE: f64 = 0.3;

impl Client {
    pub(super) async fn admin_round(&mut self) {
        tokio::time::sleep(Duration::from_millis(self.rng.random_range(1500..=3500))).await;
        if !self.running() {
            return;
        }
        let family =
            self.shared.plan.families[self.rng.random_range(0..self.shared.plan.families.len())];
        // (An election's leader does not watch its term here: its revocation is left out.)
        if family != Family::Election && self.rng.random_bool(REVOKE_SHARE) {
            self.revoke_round(family).await;
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

impl Client {
    /// Asks the holders of one of the family's names to let go within 200-500 ms: the names
    /// are tried in turn until one is held (a name nobody holds answers 404).
    async fn revoke_round(&mut self, family: Family) {
        let mut names = self.shared.plan.names(family);
        let semaphore = family == Family::Semaphore;
        let what = if semaphore { "semaphores" } else { "locks" };
        while !names.is_empty() {
            let name = names.swap_remove(self.rng.random_range(0..names.len()));
            let grace_ms = self.rng.random_range(200..=500);
            let op = self
                .call_read(
                    &name,
                    family,
                    reqwest::Method::POST,
                    format!("/v1/admin/{what}/{name}/revoke"),
                    Some(json!({"grace_ms": grace_ms, "reason": "harness"})),
                    Some(ADMIN_TOKEN),
                    None,
                    CLIENT_SLACK,
                    Request::Revoke {
                        semaphore,
                        grace_ms,
                    },
                    revoked,
                )
                .await;
            if matches!(op.outcome, Outcome::Revoked { .. }) {
                return;
            }
        }
    }
}

/// A revocation's answer: the leases asked (a 200 with `leases`), or what any answer says.
fn revoked(answer: &Result<Answer, String>) -> Outcome {
    match answer {
        Ok(a) if a.status == 200 && a.body["leases"].is_array() => Outcome::Revoked {
            leases: a.body["leases"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|l| l["lease_id"].as_str().map(str::to_owned))
                .collect(),
        },
        _ => outcome_of(answer),
    }
}
