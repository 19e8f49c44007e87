//! Twin of `lua/inspect_lease.lua`: one lock lease's state, without its token.

use serde::Deserialize;

use super::Script;
use crate::locks::types::LeaseKind;
use crate::locks::types::{LeaseId, LeaseState};

pub(in crate::locks) struct InspectLease {
    pub lease: LeaseId,
}

impl Script for InspectLease {
    const FILE: &'static str = "inspect_lease";
    const ARGS: &'static [&'static str] = &["lease_id"];
    type Reply = LeaseSnapshot;

    fn args(&self, cmd: &mut redis::Cmd) {
        cmd.arg(self.lease.to_string());
    }
}

#[derive(Debug, Deserialize)]
pub(in crate::locks) struct LeaseSnapshot {
    pub found: bool,
    pub state: Option<LeaseState>,
    pub kind: Option<LeaseKind>,
    pub holder: Option<String>,
    pub metadata: Option<String>,
    pub fencing_token: Option<u64>,
    pub ttl_ms: Option<u64>,
    pub created_ms: Option<u64>,
    pub expires_ms: Option<u64>,
    pub ended_ms: Option<u64>,
    #[serde(default)]
    pub reentry_count: u64,
    pub read_count: Option<u64>,
    pub write_count: Option<u64>,
    pub position: Option<u64>,
    #[serde(default)]
    pub pttl: i64,
    #[serde(default)]
    pub now_ms: u64,
    /// Its revocation's record (JSON text), if an admin asked its holder to let go.
    pub revocation: Option<String>,
    /// While held: how many requests wait for the lock.
    pub waiters: Option<u64>,
}
