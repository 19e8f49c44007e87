//! Twin of `lua/evict.lua`: an admin removes one lease of a lock or semaphore.

use super::Script;
use super::force_release::ForceReleaseReply;
use crate::locks::types::LeaseId;
use crate::locks::types::{Resource, Timestamp};

pub(in crate::locks) struct Evict<'a> {
    pub lease: LeaseId,
    pub resource: Resource,
    pub by: &'a str,
    pub reason: &'a str,
    /// This request's: the same call run again answers as it did (see `ForceRelease`).
    pub nonce: &'a str,
    /// A revocation's deadline: nothing is removed before it (by Redis's clock).
    pub not_before: Option<Timestamp>,
}

impl Script for Evict<'_> {
    const FILE: &'static str = "evict";
    const ARGS: &'static [&'static str] =
        &["lease_id", "by", "reason", "resource", "nonce", "not_before"];
    type Reply = ForceReleaseReply;

    fn args(&self, cmd: &mut redis::Cmd) {
        cmd.arg(self.lease.to_string())
            .arg(self.by)
            .arg(self.reason)
            .arg(match self.resource {
                Resource::Semaphore => "semaphore",
                Resource::Lock => "",
            })
            .arg(self.nonce);
        if let Some(at) = self.not_before {
            cmd.arg(at.0);
        }
    }
}
