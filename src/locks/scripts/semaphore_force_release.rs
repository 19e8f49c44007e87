//! Twin of `lua/semaphore_force_release.lua`: an admin returns every permit of a semaphore
//! (or removes the semaphore).

use super::Script;
use super::force_release::{ForceRelease, ForceReleaseReply};

pub(in crate::locks) struct SemaphoreForceRelease<'a>(pub ForceRelease<'a>);

impl Script for SemaphoreForceRelease<'_> {
    const FILE: &'static str = "semaphore_force_release";
    const ARGS: &'static [&'static str] = &["by", "reason", "clear", "nonce"];
    type Reply = ForceReleaseReply;

    fn args(&self, cmd: &mut redis::Cmd) {
        self.0.push(cmd);
    }
}
