//! Twin of `lua/leave.lua`: a waiter gives up its place.

use serde::Deserialize;

use super::{Refusal, Script};
use crate::locks::types::{LeaseId, LeaseState, LeaseToken};

pub(in crate::locks) struct Leave<'a> {
    pub ticket: LeaseId,
    pub token: &'a LeaseToken,
    /// This request's: the same call run again finds the ticket's end by it.
    pub nonce: &'a str,
}

impl Script for Leave<'_> {
    const FILE: &'static str = "leave";
    const ARGS: &'static [&'static str] = &["lease_id", "proven", "nonce"];
    type Reply = LeaveReply;

    fn args(&self, cmd: &mut redis::Cmd) {
        cmd.arg(self.ticket.to_string())
            .arg(super::proven(self.token, self.ticket))
            .arg(self.nonce);
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
