//! Twin of `lua/semaphore_renew.lua`: a heartbeat for a semaphore lease.

use super::renew::{Renew, RenewReply};
use super::{Script, lua};
use crate::locks::kind::Resource;

pub(in crate::locks) struct SemaphoreRenew<'a>(pub Renew<'a>);

impl Script for SemaphoreRenew<'_> {
    const FILE: &'static str = "semaphore_renew";
    const RESOURCE: Resource = Resource::Semaphore;
    type Reply = RenewReply;

    fn script() -> &'static redis::Script {
        static SCRIPT: std::sync::LazyLock<redis::Script> =
            lua!("semlib.lua", "semaphore_renew.lua");
        &SCRIPT
    }

    fn args(&self, invocation: &mut redis::ScriptInvocation<'_>) {
        self.0.push(invocation);
    }
}
