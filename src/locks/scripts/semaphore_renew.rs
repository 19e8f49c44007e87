//! Twin of `lua/semaphore_renew.lua`: a heartbeat for a semaphore lease.

use super::Script;
use super::renew::{Renew, RenewReply};

pub(in crate::locks) struct SemaphoreRenew<'a>(pub Renew<'a>);

impl Script for SemaphoreRenew<'_> {
    const FILE: &'static str = "semaphore_renew";
    const ARGS: &'static [&'static str] = &["lease_id", "proven", "ttl_ms"];
    const REPLICATED: bool = true;
    type Reply = RenewReply;

    fn changes_lease(reply: &RenewReply) -> bool {
        matches!(reply, RenewReply::Renewed { .. })
    }

    fn args(&self, cmd: &mut redis::Cmd) {
        self.0.push(cmd);
    }
}
