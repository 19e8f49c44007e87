//! Twin of `lua/release.lua`: one level of a lease (or all of them) let go, or an undelivered
//! grant rolled back.

use std::time::Duration;

use serde::Deserialize;

use super::{Refusal, Script, parse, status_of};
use crate::locks::error::LockError;
use crate::locks::types::LeaseKind;
use crate::locks::types::{IdempotencyKey, LeaseId, LeaseToken, RwMode, fingerprint};

/// Why a release script runs.
#[derive(Debug, Clone, Copy)]
pub(in crate::locks) enum ReleaseHow<'a> {
    /// The lease's holder asked. `nonce`: this request's (see `request_nonce`), which the
    /// script keeps with what it released, so that the same call run again (a retry of a
    /// command whose reply was lost) answers as it did instead of releasing again.
    Asked {
        all: bool,
        mode: Option<RwMode>,
        idempotency: Option<&'a IdempotencyKey>,
        nonce: &'a str,
    },
    /// A grant whose client went away is taken back, if the request that made it (`nonce`)
    /// is still the only one that knows it.
    Rollback { nonce: &'a str },
}

impl ReleaseHow<'_> {
    pub fn reason(self) -> &'static str {
        match self {
            Self::Asked { .. } => "released",
            Self::Rollback { .. } => "client_gone",
        }
    }

    /// The ARGV a release script takes after the lease and its token: nonce, all, reason,
    /// mode, idempotency key digest, fingerprint (`lua/release.lua`; the semaphore's takes the
    /// same minus all and mode). The usual values are sent as "" (all: one level; reason:
    /// released), so that a plain release sends none after its nonce (see `args_trimmed`).
    fn parts(self, lease: LeaseId, token: &LeaseToken) -> [String; 6] {
        // (reason: "" for released, see above.)
        let (all, reason, mode, nonce, key) = match self {
            Self::Asked {
                all,
                mode,
                idempotency,
                nonce,
            } => (all, "", mode, nonce, idempotency),
            Self::Rollback { nonce } => (true, self.reason(), None, nonce, None),
        };
        let mode = mode.map_or("", RwMode::as_str);
        // (Only with a key: the parts cost a hash of the token.)
        let fp = if key.is_some() {
            fingerprint(
                key,
                &[
                    "release",
                    &lease.to_string(),
                    if all { "all" } else { "one" },
                    mode,
                    &token.digest().hex(),
                ],
            )
        } else {
            String::new()
        };
        [
            nonce.to_owned(),
            if all { "all" } else { "" }.to_owned(),
            reason.to_owned(),
            mode.to_owned(),
            key.map(IdempotencyKey::digest_hex).unwrap_or_default(),
            fp,
        ]
    }
}

pub(in crate::locks) struct Release<'a> {
    pub lease: LeaseId,
    pub token: &'a LeaseToken,
    pub how: ReleaseHow<'a>,
}

impl Script for Release<'_> {
    const FILE: &'static str = "release";
    const ARGS: &'static [&'static str] = &["lease_id", "proven", "nonce", "all", "why", "mode", "key_digest", "fingerprint"];
    type Reply = ReleaseReply;

    fn parse(raw: &str) -> Result<ReleaseReply, LockError> {
        ReleaseReply::read(raw)
    }

    fn args(&self, cmd: &mut redis::Cmd) {
        cmd.arg(self.lease.to_string())
            .arg(super::proven(self.token, self.lease));
        super::args_trimmed(cmd, &self.how.parts(self.lease, self.token));
    }
}

/// The ARGV of `lua/semaphore_release.lua` after the lease and its token.
pub(in crate::locks) fn semaphore_parts(
    how: ReleaseHow<'_>,
    lease: LeaseId,
    token: &LeaseToken,
) -> [String; 4] {
    let [nonce, _, reason, _, key, fp] = how.parts(lease, token);
    [nonce, reason, key, fp]
}

#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(in crate::locks) enum ReleaseReply {
    Released(Released),
    StillHeld {
        reentry_count: u64,
        holder: Option<String>,
        /// The first answer to a retried Idempotency-Key.
        #[serde(default)]
        replayed: bool,
    },
    /// A rollback found the grant delivered by another request: it stays.
    NotRolledBack,
    IdempotencyMismatch,
    #[serde(untagged)]
    Refused(Refusal),
}

/// A lease let go entirely.
#[derive(Debug, Deserialize)]
pub(in crate::locks) struct Released {
    /// When the lease was granted and when it was let go (Redis's clock, ms): its age, for
    /// the hold-time metric, is worked out here rather than in Lua, where formatting a
    /// number costs Redis more than the rest of the reply.
    pub since_ms: Option<u64>,
    pub now_ms: Option<u64>,
    pub kind: Option<LeaseKind>,
    /// The first answer to a retried Idempotency-Key: nothing happened now.
    #[serde(default)]
    pub replayed: bool,
}

impl Released {
    /// How long the lease was held, when the reply says.
    pub(in crate::locks) fn held(&self) -> Option<Duration> {
        Some(Duration::from_millis(
            self.now_ms?.saturating_sub(self.since_ms?),
        ))
    }
}

impl ReleaseReply {
    /// Reads a reply: a release (most replies) straight into [`Released`], anything else by
    /// its tag (see [`status_of`]).
    pub(in crate::locks) fn read(raw: &str) -> Result<Self, LockError> {
        match status_of(raw) {
            Some("released") => parse(raw).map(Self::Released),
            _ => parse(raw),
        }
    }
}
