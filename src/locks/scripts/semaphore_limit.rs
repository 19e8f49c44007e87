//! Twin of `lua/semaphore_limit.lua`: an admin gives a semaphore another limit.

use serde::Deserialize;

use super::{Script, lua};
use crate::locks::kind::Resource;

pub(in crate::locks) struct SemaphoreLimit<'a> {
    pub limit: u32,
    pub by: &'a str,
}

impl Script for SemaphoreLimit<'_> {
    const FILE: &'static str = "semaphore_limit";
    const RESOURCE: Resource = Resource::Semaphore;
    type Reply = LimitReply;

    fn script() -> &'static redis::Script {
        static SCRIPT: std::sync::LazyLock<redis::Script> =
            lua!("semlib.lua", "semaphore_limit.lua");
        &SCRIPT
    }

    fn args(&self, invocation: &mut redis::ScriptInvocation<'_>) {
        invocation.arg(self.limit).arg(self.by);
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
