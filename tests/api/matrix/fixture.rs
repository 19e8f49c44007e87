//! One cell's fixture: what its probe's request acts on, made afresh by tenant A's owner for
//! every cell (a cell's request may release, revoke or delete it).

use serde_json::json;

use crate::helpers::{Lease, TestApp, Ticket};

/// What one cell's requests act on: tenant A's lock, semaphore, fair ticket and key.
pub(super) struct Fixture {
    pub(super) n: usize,
    pub(super) lease: Lease,
    pub(super) sem_lease: Lease,
    pub(super) ticket: Ticket,
    pub(super) key_id: String,
    /// A multilease's path and token.
    pub(super) multi: (String, String),
    /// The leader of election `e<n>`: its path and token.
    pub(super) leader: (String, String),
}

impl Fixture {
    pub(super) fn lock(&self) -> String {
        format!("m{}", self.n)
    }

    pub(super) fn sem(&self) -> String {
        format!("s{}", self.n)
    }

    pub(super) fn fair(&self) -> String {
        format!("f{}", self.n)
    }

    pub(super) fn election(&self) -> String {
        format!("e{}", self.n)
    }
}

pub(super) async fn fixture(app: &TestApp, owner: &TestApp, n: usize) -> Fixture {
    let lease = owner
        .lease(&format!("m{n}"), json!({"ttl_ms": 60_000}))
        .await;
    let sem_lease = owner
        .permits(&format!("s{n}"), json!({"limit": 5, "ttl_ms": 60_000}))
        .await;
    owner
        .lease(&format!("f{n}"), json!({"kind": "fair", "ttl_ms": 60_000}))
        .await;
    let queued = owner
        .acquire_with(&format!("f{n}"), 50, json!({"kind": "fair"}), None)
        .await;
    let ticket = Ticket::from_reply(&format!("f{n}"), &queued);
    let (key_id, _) = app
        .create_key(json!({"name": format!("victim-{n}"), "tenant": "a", "roles": ["client"]}))
        .await;
    let multi = owner
        .send(
            owner
                .http
                .post(owner.url("/v1/multileases"))
                .json(&json!({"locks": [{"name": format!("mm{n}")}], "ttl_ms": 60_000})),
        )
        .await;
    multi.assert_status(201);
    let multi = (
        multi.header("location").expect("Location").to_owned(),
        multi.str("token"),
    );
    let leader = owner
        .send(
            owner
                .http
                .post(owner.url(&format!("/v1/elections/e{n}/candidates")))
                .json(&json!({"value": "matrix", "ttl_ms": 60_000})),
        )
        .await;
    leader.assert_status(201);
    let leader = (
        leader.header("location").expect("Location").to_owned(),
        leader.str("token"),
    );
    Fixture {
        n,
        lease,
        sem_lease,
        ticket,
        key_id,
        multi,
        leader,
    }
}
