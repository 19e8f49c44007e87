//! Twin of `lua/semaphore_inspect.lua`: a semaphore (and one of its leases) in one snapshot.

use serde::Deserialize;

use super::{Script, list};
use crate::locks::types::{LeaseId, LeaseState};

pub(in crate::locks) struct SemaphoreInspect {
    /// A lease to describe as well.
    pub lease: Option<LeaseId>,
}

impl Script for SemaphoreInspect {
    const FILE: &'static str = "semaphore_inspect";
    const ARGS: &'static [&'static str] = &["lease_id"];
    type Reply = SemaphoreSnapshot;

    fn args(&self, cmd: &mut redis::Cmd) {
        cmd.arg(self.lease.map(|id| id.to_string()).unwrap_or_default());
    }
}

#[derive(Debug, Deserialize)]
pub(in crate::locks) struct SemaphoreSnapshot {
    pub known: bool,
    pub limit: Option<u32>,
    pub used: u64,
    pub fence: u64,
    #[serde(deserialize_with = "list")]
    pub holders: Vec<PermitEntry>,
    pub now_ms: u64,
    pub lease: Option<PermitLease>,
}

#[derive(Debug, Deserialize)]
pub(in crate::locks) struct PermitEntry {
    /// `None` for the permits Redisson clients hold.
    pub lease_id: Option<String>,
    pub holder: Option<String>,
    pub metadata: Option<String>,
    pub permits: u64,
    pub fencing_token: Option<u64>,
    pub created_ms: Option<u64>,
    pub expires_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub(in crate::locks) struct PermitLease {
    pub state: LeaseState,
    pub holder: Option<String>,
    pub metadata: Option<String>,
    pub fencing_token: Option<u64>,
    pub ttl_ms: Option<u64>,
    pub created_ms: Option<u64>,
    pub expires_ms: Option<u64>,
    pub ended_ms: Option<u64>,
    pub permits: Option<u64>,
    /// Its revocation's record (JSON text), if an admin asked its holder to let go.
    pub revocation: Option<String>,
    /// While held: how many requests wait for the semaphore.
    pub waiters: Option<u64>,
}
