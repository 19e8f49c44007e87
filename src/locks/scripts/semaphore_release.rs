//! Twin of `lua/semaphore_release.lua`: a semaphore lease's permits given back, or an
//! undelivered grant rolled back.

use super::release::{ReleaseHow, ReleaseReply, semaphore_parts};
use super::{Script, lua};
use crate::locks::kind::Resource;
use crate::locks::model::{LeaseId, LeaseToken};

pub(in crate::locks) struct SemaphoreRelease<'a> {
    pub lease: LeaseId,
    pub token: &'a LeaseToken,
    pub how: ReleaseHow<'a>,
}

impl Script for SemaphoreRelease<'_> {
    const FILE: &'static str = "semaphore_release";
    const RESOURCE: Resource = Resource::Semaphore;
    type Reply = ReleaseReply;

    fn script() -> &'static redis::Script {
        static SCRIPT: std::sync::LazyLock<redis::Script> =
            lua!("semlib.lua", "semaphore_release.lua");
        &SCRIPT
    }

    fn args(&self, invocation: &mut redis::ScriptInvocation<'_>) {
        invocation
            .arg(self.lease.to_string())
            .arg(self.token.digest().hex());
        for part in semaphore_parts(self.how, self.lease, self.token) {
            invocation.arg(part);
        }
    }
}
