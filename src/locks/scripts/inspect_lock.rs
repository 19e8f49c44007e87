//! Twin of `lua/inspect_lock.lua`: a lock's state in one snapshot.

use serde::Deserialize;

use super::{HolderEntry, Script, list};
use crate::locks::types::HeldAs;

pub(in crate::locks) struct InspectLock {
    /// How many queued waiters to list at most.
    pub queue_listed: u64,
}

impl Script for InspectLock {
    const FILE: &'static str = "inspect_lock";
    const ARGS: &'static [&'static str] = &["queue_listed"];
    type Reply = LockSnapshot;

    fn args(&self, cmd: &mut redis::Cmd) {
        cmd.arg(self.queue_listed);
    }
}

#[derive(Debug, Deserialize)]
pub(in crate::locks) struct LockSnapshot {
    pub known: bool,
    pub held_as: Option<HeldAs>,
    pub mode: Option<String>,
    pub fence: u64,
    pub pttl: i64,
    #[serde(deserialize_with = "list")]
    pub holders: Vec<HolderEntry>,
    #[serde(deserialize_with = "list")]
    pub queue: Vec<QueueEntry>,
    pub queue_length: u64,
    pub now_ms: u64,
    /// The lock-delay key's value and time left (lua/locklib.lua), when it lives.
    pub lock_delay_ms: Option<u64>,
    pub delay_pttl: Option<i64>,
}

#[derive(Debug, Deserialize)]
pub(in crate::locks) struct QueueEntry {
    pub holder_id: String,
    pub deadline_ms: Option<u64>,
    pub lease_id: Option<String>,
    pub holder: Option<String>,
    pub queued_ms: Option<u64>,
}
