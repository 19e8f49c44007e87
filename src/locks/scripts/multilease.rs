//! Twin of `lua/multilease.lua`: a multilease's record, and an Idempotency-Key's claim on one.

use serde::Deserialize;

use super::Script;
use crate::locks::types::LeaseId;

/// What to do with the record (or the claim).
pub enum MultiOp<'a> {
    /// Writes the record of a multilease whose members are all held (again: answers the
    /// record as it is).
    Put { ttl_ms: u64, body: &'a str },
    /// Extends the record with its members' heartbeat (`0`: the TTL it has).
    Renew { ttl_ms: u64 },
    /// Marks it ended (`member`: the member whose loss ended it).
    End { state: &'a str, member: &'a str },
    Get,
    /// Claims an Idempotency-Key for the multilease, unless a request claimed it first.
    Claim {
        keep_ms: u64,
        fingerprint: &'a str,
        sealed: &'a str,
    },
    /// Lets a claim go (the request it claimed for failed: a retry starts afresh).
    Unclaim,
}

pub(in crate::locks) struct Multilease<'a> {
    pub id: LeaseId,
    pub op: MultiOp<'a>,
}

impl Script for Multilease<'_> {
    const FILE: &'static str = "multilease";
    const ARGS: &'static [&'static str] = &["op", "lease_id", "ttl_ms", "body", "detail"];
    type Reply = MultiReply;

    fn args(&self, cmd: &mut redis::Cmd) {
        let id = self.id.to_string();
        match &self.op {
            MultiOp::Put { ttl_ms, body } => {
                cmd.arg("put").arg(id).arg(ttl_ms).arg(body);
            }
            MultiOp::Renew { ttl_ms } => {
                cmd.arg("renew").arg(id).arg(ttl_ms);
            }
            MultiOp::End { state, member } => {
                cmd.arg("end").arg(id).arg(0).arg(state).arg(member);
            }
            MultiOp::Get => {
                cmd.arg("get").arg(id);
            }
            MultiOp::Claim {
                keep_ms,
                fingerprint,
                sealed,
            } => {
                cmd.arg("claim")
                    .arg(id)
                    .arg(keep_ms)
                    .arg(fingerprint)
                    .arg(sealed);
            }
            MultiOp::Unclaim => {
                cmd.arg("unclaim").arg(id);
            }
        }
    }
}

/// The record as the function shows it.
#[derive(Debug, Deserialize)]
pub struct MultiRecord {
    pub state: String,
    /// What `Put` stored, as it was sent.
    pub body: serde_json::Value,
    pub ttl_ms: u64,
    pub acquired_ms: u64,
    pub expires_ms: u64,
    pub ended_ms: Option<u64>,
    pub member: Option<String>,
    pub now_ms: u64,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum MultiReply {
    Put(MultiRecord),
    Renewed(MultiRecord),
    Ended(serde::de::IgnoredAny),
    Found(MultiRecord),
    /// It had ended before this call (renew, end).
    Lost(MultiRecord),
    Unknown,
    New,
    Claimed {
        fingerprint: String,
        sealed: String,
    },
    Unclaimed,
    TooLate,
}
