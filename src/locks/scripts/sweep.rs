//! Twin of `lua/sweep.lua`: record the leases of a name that ran out unobserved.

use serde::Deserialize;

use super::Script;

pub(in crate::locks) struct Sweep;

impl Script for Sweep {
    const FILE: &'static str = "sweep";
    const ARGS: &'static [&'static str] = &[];
    type Reply = SweepReply;

    fn args(&self, _cmd: &mut redis::Cmd) {}
}

#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(in crate::locks) enum SweepReply {
    /// `expired`: how many expiries this call recorded (0 when another instance was first).
    Swept {
        expired: u64,
    },
    TooLate,
}
