//! Twin of `lua/semaphore_release.lua`: a semaphore lease's permits given back, or an
//! undelivered grant rolled back.

use super::Script;
use super::release::{ReleaseHow, ReleaseReply, semaphore_parts};
use crate::locks::types::{LeaseId, LeaseToken};

pub(in crate::locks) struct SemaphoreRelease<'a> {
    pub lease: LeaseId,
    pub token: &'a LeaseToken,
    pub how: ReleaseHow<'a>,
}

impl Script for SemaphoreRelease<'_> {
    const FILE: &'static str = "semaphore_release";
    const ARGS: &'static [&'static str] = &["lease_id", "proven", "nonce", "why", "key_digest", "fingerprint"];
    type Reply = ReleaseReply;

    fn parse(raw: &str) -> Result<ReleaseReply, crate::locks::error::LockError> {
        ReleaseReply::read(raw)
    }

    fn args(&self, cmd: &mut redis::Cmd) {
        cmd.arg(self.lease.to_string())
            .arg(super::proven(self.token, self.lease));
        super::args_trimmed(cmd, &semaphore_parts(self.how, self.lease, self.token));
    }
}
