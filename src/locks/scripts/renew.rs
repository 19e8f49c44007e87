//! Twin of `lua/renew.lua`: a heartbeat.

use serde::Deserialize;

use super::{Refusal, Script};
use crate::locks::types::{LeaseId, LeaseToken, Ttl};

pub(in crate::locks) struct Renew<'a> {
    pub lease: LeaseId,
    pub token: &'a LeaseToken,
    /// `None` keeps the lease's own TTL.
    pub ttl: Option<Ttl>,
}

impl Renew<'_> {
    /// The ARGV `lua/renew.lua` and `lua/semaphore_renew.lua` both take.
    pub(super) fn push(&self, cmd: &mut redis::Cmd) {
        cmd.arg(self.lease.to_string())
            .arg(super::proven(self.token, self.lease))
            .arg(self.ttl.map_or(0, Ttl::as_millis));
    }
}

impl Script for Renew<'_> {
    const FILE: &'static str = "renew";
    const ARGS: &'static [&'static str] = &["lease_id", "proven", "ttl_ms"];
    const REPLICATED: bool = true;
    type Reply = RenewReply;

    fn changes_lease(reply: &RenewReply) -> bool {
        matches!(reply, RenewReply::Renewed { .. })
    }

    fn args(&self, cmd: &mut redis::Cmd) {
        self.push(cmd);
    }
}

#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(in crate::locks) enum RenewReply {
    Renewed {
        reentry_count: u64,
        ttl_ms: u64,
        now_ms: u64,
        fencing_token: u64,
        slack_ms: i64,
        #[serde(default)]
        holder: Option<String>,
        /// The lease's pending revocation: its heartbeats extend it no further than the
        /// deadline.
        #[serde(default)]
        revocation: Option<crate::locks::types::Revocation>,
    },
    #[serde(untagged)]
    Refused(Refusal),
}
