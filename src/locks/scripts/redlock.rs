//! Twin of `lua/redlock.lua`: the main Redis's index of RedLock leases (which names hold
//! one, and when each runs out).

use serde::Deserialize;

use super::Script;

/// What to do with the index.
pub(in crate::locks) enum RedlockOp<'a> {
    /// Indexes a lease: `member` in the key space's index, `due` in the deployment's due list
    /// at `expires_ms` (0: `ttl_ms` from now).
    Put {
        member: &'a str,
        due: &'a str,
        expires_ms: u64,
        ttl_ms: u64,
    },
    /// Takes a lease out of both.
    End { member: &'a str, due: &'a str },
    /// The due list's members that ran out by now, at most `count`.
    Due { count: usize },
}

pub(in crate::locks) struct RedlockIndex<'a>(pub RedlockOp<'a>);

impl Script for RedlockIndex<'_> {
    const FILE: &'static str = "redlock";
    const ARGS: &'static [&'static str] = &["op", "member", "due_member", "expires_ms", "ttl_ms"];
    type Reply = RedlockReply;

    fn args(&self, cmd: &mut redis::Cmd) {
        match &self.0 {
            RedlockOp::Put {
                member,
                due,
                expires_ms,
                ttl_ms,
            } => {
                cmd.arg("put")
                    .arg(member)
                    .arg(due)
                    .arg(expires_ms)
                    .arg(ttl_ms);
            }
            RedlockOp::End { member, due } => {
                cmd.arg("end").arg(member).arg(due);
            }
            RedlockOp::Due { count } => {
                cmd.arg("due").arg(count);
            }
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(in crate::locks) enum RedlockReply {
    Put,
    Ended {
        removed: u8,
    },
    Due {
        #[serde(deserialize_with = "super::list")]
        members: Vec<String>,
        now_ms: u64,
    },
    TooLate,
}
