//! Twin of `lua/force_release.lua`: an admin removes every holder of a lock.

use serde::Deserialize;

use super::{HolderEntry, Script, list, lua};
use crate::locks::kind::Resource;

pub(in crate::locks) struct ForceRelease<'a> {
    pub by: &'a str,
    pub reason: &'a str,
    /// Semaphores only: remove the semaphore itself too.
    pub clear: bool,
}

impl ForceRelease<'_> {
    /// The ARGV `lua/force_release.lua` and `lua/semaphore_force_release.lua` both take.
    pub(super) fn push(&self, invocation: &mut redis::ScriptInvocation<'_>) {
        invocation
            .arg(self.by)
            .arg(self.reason)
            .arg(if self.clear { "clear" } else { "" });
    }
}

impl Script for ForceRelease<'_> {
    const FILE: &'static str = "force_release";
    const RESOURCE: Resource = Resource::Lock;
    type Reply = ForceReleaseReply;

    fn script() -> &'static redis::Script {
        static SCRIPT: std::sync::LazyLock<redis::Script> =
            lua!("locklib.lua", "force_release.lua");
        &SCRIPT
    }

    fn args(&self, invocation: &mut redis::ScriptInvocation<'_>) {
        self.push(invocation);
    }
}

#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(in crate::locks) enum ForceReleaseReply {
    ForceReleased {
        #[serde(deserialize_with = "list")]
        holders: Vec<HolderEntry>,
    },
    NotHeld,
    KindConflict {
        held_as: String,
    },
    TooLate,
}
