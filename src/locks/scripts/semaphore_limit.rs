//! Twin of `lua/semaphore_limit.lua`: an admin gives a semaphore another limit.

use serde::Deserialize;

use super::Script;

pub(in crate::locks) struct SemaphoreLimit<'a> {
    pub limit: u32,
    pub by: &'a str,
    /// This request's: the same call run again answers as it did (see `ForceRelease`).
    pub nonce: &'a str,
}

impl Script for SemaphoreLimit<'_> {
    const FILE: &'static str = "semaphore_limit";
    const ARGS: &'static [&'static str] = &["limit", "by", "nonce"];
    type Reply = LimitReply;

    fn args(&self, cmd: &mut redis::Cmd) {
        cmd.arg(self.limit).arg(self.by).arg(self.nonce);
    }
}

#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(in crate::locks) enum LimitReply {
    Changed {
        limit: u32,
        previous: u32,
        available: i64,
    },
    NotFound,
    KindConflict {
        held_as: String,
    },
    TooLate,
}
