//! Twin of `lua/force_release.lua`: an admin removes every holder of a lock.

use serde::Deserialize;

use super::{HolderEntry, Script, list};

pub(in crate::locks) struct ForceRelease<'a> {
    pub by: &'a str,
    pub reason: &'a str,
    /// Semaphores only: remove the semaphore itself too.
    pub clear: bool,
    /// This request's: the same call run again (a retry of a command whose reply was lost)
    /// finds its history entry by it and answers as it did, removing nobody else.
    pub nonce: &'a str,
}

impl ForceRelease<'_> {
    /// The ARGV `lua/semaphore_force_release.lua` takes (the lock's takes them without
    /// `clear`).
    pub(super) fn push(&self, cmd: &mut redis::Cmd) {
        cmd.arg(self.by)
            .arg(self.reason)
            .arg(if self.clear { "clear" } else { "" })
            .arg(self.nonce);
    }
}

impl Script for ForceRelease<'_> {
    const FILE: &'static str = "force_release";
    const ARGS: &'static [&'static str] = &["by", "reason", "nonce"];
    type Reply = ForceReleaseReply;

    fn args(&self, cmd: &mut redis::Cmd) {
        cmd.arg(self.by).arg(self.reason).arg(self.nonce);
    }
}

#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(in crate::locks) enum ForceReleaseReply {
    ForceReleased {
        #[serde(deserialize_with = "list")]
        holders: Vec<HolderEntry>,
    },
    /// Nobody held it, and its lock-delay was lifted.
    DelayLifted,
    NotHeld,
    KindConflict {
        held_as: String,
    },
    TooLate,
    /// (Evictions at a revocation's deadline only) the deadline has not come yet.
    TooEarly {
        wait_ms: u64,
    },
}
