//! Twin of `lua/revoke.lua`: an admin asks a lease's holder to let go within a grace.

use serde::Deserialize;

use super::Script;
use crate::locks::types::{LeaseId, Resource, Revocation};

pub(in crate::locks) struct Revoke<'a> {
    pub lease: LeaseId,
    pub resource: Resource,
    pub grace_ms: u64,
    pub by: &'a str,
    pub reason: &'a str,
}

impl Script for Revoke<'_> {
    const FILE: &'static str = "revoke";
    const ARGS: &'static [&'static str] = &["lease_id", "grace_ms", "by", "reason", "resource"];
    type Reply = RevokeReply;

    fn args(&self, cmd: &mut redis::Cmd) {
        cmd.arg(self.lease.to_string())
            .arg(self.grace_ms)
            .arg(self.by)
            .arg(self.reason)
            .arg(match self.resource {
                Resource::Semaphore => "semaphore",
                Resource::Lock => "",
            });
    }
}

#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(in crate::locks) enum RevokeReply {
    RevocationRequested {
        revocation: Revocation,
        /// It was pending already: the earlier deadline stands.
        again: bool,
        #[serde(default)]
        holder: Option<String>,
        #[serde(default)]
        fencing_token: Option<u64>,
    },
    NotHeld,
    TooLate,
}
