//! Twin of `lua/semaphore_force_release.lua`: an admin returns every permit of a semaphore
//! (or removes the semaphore).

use super::force_release::{ForceRelease, ForceReleaseReply};
use super::{Script, lua};
use crate::locks::kind::Resource;

pub(in crate::locks) struct SemaphoreForceRelease<'a>(pub ForceRelease<'a>);

impl Script for SemaphoreForceRelease<'_> {
    const FILE: &'static str = "semaphore_force_release";
    const RESOURCE: Resource = Resource::Semaphore;
    type Reply = ForceReleaseReply;

    fn script() -> &'static redis::Script {
        static SCRIPT: std::sync::LazyLock<redis::Script> =
            lua!("semlib.lua", "semaphore_force_release.lua");
        &SCRIPT
    }

    fn args(&self, invocation: &mut redis::ScriptInvocation<'_>) {
        self.0.push(invocation);
    }
}
