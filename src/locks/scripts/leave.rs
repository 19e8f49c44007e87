//! Twin of `lua/leave.lua`: a waiter gives up its place.

use serde::Deserialize;

use super::{Refusal, Script, lua};
use crate::locks::kind::Resource;
use crate::locks::model::{LeaseId, LeaseState, LeaseToken};

pub(in crate::locks) struct Leave<'a> {
    pub ticket: LeaseId,
    pub token: &'a LeaseToken,
}

impl Script for Leave<'_> {
    const FILE: &'static str = "leave";
    const RESOURCE: Resource = Resource::Lock;
    type Reply = LeaveReply;

    fn script() -> &'static redis::Script {
        static SCRIPT: std::sync::LazyLock<redis::Script> = lua!("locklib.lua", "leave.lua");
        &SCRIPT
    }

    fn args(&self, invocation: &mut redis::ScriptInvocation<'_>) {
        invocation
            .arg(self.ticket.to_string())
            .arg(self.token.digest().hex());
    }
}

#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(in crate::locks) enum LeaveReply {
    Left,
    NotQueued {
        state: Option<LeaseState>,
    },
    #[serde(untagged)]
    Refused(Refusal),
}
