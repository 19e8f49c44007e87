//! Twin of `lua/proclaim.lua`: an election's leader publishes a new value.

use serde::Deserialize;

use super::{Refusal, Script};
use crate::locks::types::{LeaseId, LeaseToken};

pub(in crate::locks) struct Proclaim<'a> {
    pub lease: LeaseId,
    pub token: &'a LeaseToken,
    /// The lease's new metadata, as JSON text.
    pub metadata: &'a str,
}

impl Script for Proclaim<'_> {
    const FILE: &'static str = "proclaim";
    const ARGS: &'static [&'static str] = &["lease_id", "proven", "metadata"];
    const REPLICATED: bool = true;
    type Reply = ProclaimReply;

    fn changes_lease(reply: &ProclaimReply) -> bool {
        matches!(reply, ProclaimReply::Proclaimed { .. })
    }

    fn args(&self, cmd: &mut redis::Cmd) {
        cmd.arg(self.lease.to_string())
            .arg(super::proven(self.token, self.lease))
            .arg(self.metadata);
    }
}

#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(in crate::locks) enum ProclaimReply {
    Proclaimed {
        fencing_token: u64,
        expires_ms: u64,
        #[serde(default)]
        holder: Option<String>,
    },
    #[serde(untagged)]
    Refused(Refusal),
}
