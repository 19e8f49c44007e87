//! Twin of `lua/acquire.lua`: a new lease on a lock of any kind, a reentry, or a fair ticket
//! trying again.

use serde::Deserialize;

use super::{Refusal, Script, parse, status_of};
use crate::locks::error::LockError;
use crate::locks::types::LeaseKind;
use crate::locks::types::{
    AcquireRequest, HolderLabel, IdempotencyKey, LeaseId, LeaseToken, Metadata, RwPolicy, Ttl,
    fingerprint,
};

/// How an attempt identifies itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub(in crate::locks) enum Op {
    /// A new lease (id and token made here).
    New,
    /// One more level of the lease the token proves.
    Reenter,
    /// A fair queue ticket tries again.
    Poll,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

pub(in crate::locks) struct Acquire<'a> {
    pub op: Op,
    /// What the client asked for (its `ttl` `None` keeps the lease's own: reentry, poll; its
    /// `kind` `None` on reentry: the lease's own).
    pub request: &'a AcquireRequest,
    /// The lease (or ticket): a new token's, a reentry token's, or the polled ticket's.
    pub id: LeaseId,
    pub token: &'a LeaseToken,
    /// How long a queue place lasts without a further attempt.
    pub liveness_ms: u64,
    /// When this request first tried (from an earlier reply), 0 for now.
    pub arrived_ms: u64,
    /// Names the grants this request makes (only it may roll them back).
    pub nonce: &'a str,
}

impl Script for Acquire<'_> {
    const FILE: &'static str = "acquire";
    const ARGS: &'static [&'static str] = &["ttl_ms", "op", "lease_id", "proven", "kind", "nonce", "arrived_ms", "policy", "liveness_ms", "holder", "metadata", "key_digest", "fingerprint", "sealed_token", "lock_delay_ms"];
    const NOTES_NAME: bool = true;
    const REPLICATED: bool = true;
    type Reply = AcquireReply;

    /// A grant, and a new place in a fair line (a ticket keeps its place across a failover
    /// only if a replica has it).
    fn changes_lease(reply: &AcquireReply) -> bool {
        matches!(
            reply,
            AcquireReply::Acquired(_)
                | AcquireReply::Reentered(_)
                | AcquireReply::Queued { new: true, .. }
        )
    }

    fn parse(raw: &str) -> Result<AcquireReply, LockError> {
        AcquireReply::read(raw)
    }

    fn args(&self, cmd: &mut redis::Cmd) {
        let r = self.request;
        let ttl_ms = r.ttl.map_or(0, Ttl::as_millis).to_string();
        let holder = r.holder.as_ref().map_or("", HolderLabel::as_str);
        let metadata = r.metadata.as_ref().map(Metadata::to_json).unwrap_or_default();
        let kind = r.kind.map_or("", LeaseKind::as_str);
        let idempotency = r.idempotency.as_ref();
        // What a retry must repeat for its key to replay: for a reentry, the lease it proves;
        // for a new lease, everything the lease is made of.
        let lease = self.id.to_string();
        // (A new lease's lock-delay only, as a reentry keeps the lease's own.)
        let lock_delay = match (self.op, r.lock_delay) {
            (Op::Reenter, _) | (_, None) => String::new(),
            (_, Some(delay)) => delay.as_millis().to_string(),
        };
        let mut asked = vec![
            "acquire",
            self.op.as_str(),
            kind,
            &ttl_ms,
            holder,
            &metadata,
            r.policy.as_str(),
            if self.op == Op::Reenter { &lease } else { "" },
        ];
        // (Added only when asked: a request without one keeps the fingerprint it had.)
        if !lock_delay.is_empty() {
            asked.push(&lock_delay);
        }
        let fp = fingerprint(idempotency, &asked);
        // A new lease's token, sealed under the key, so that a retry can be handed it.
        let sealed = match (idempotency, self.op) {
            (Some(key), Op::New) => key.seal(self.token),
            _ => String::new(),
        };
        cmd.arg(ttl_ms)
            .arg(self.op.as_str())
            .arg(lease)
            .arg(super::proven(self.token, self.id))
            .arg(kind)
            .arg(self.nonce);
        // The optional ones last, and "" where they change nothing, so that the usual first
        // try for a new lease sends none of them: a request's first try arrives now; the
        // read/write policy is readers_first unless it says fifo; and a new reentrant,
        // exclusive or read lease never stands in a queue (fair tickets and waiting writers
        // do), so it has no use for a queue place's lifetime.
        let arrived = match self.arrived_ms {
            0 => String::new(),
            ms => ms.to_string(),
        };
        let policy = match r.policy {
            RwPolicy::ReadersFirst => "",
            RwPolicy::Fifo => r.policy.as_str(),
        };
        let queueless = self.op == Op::New
            && matches!(
                r.kind,
                Some(LeaseKind::Reentrant | LeaseKind::Exclusive | LeaseKind::Read)
            );
        let liveness = if queueless {
            String::new()
        } else {
            self.liveness_ms.to_string()
        };
        let key = idempotency
            .map(IdempotencyKey::digest_hex)
            .unwrap_or_default();
        super::args_trimmed(
            cmd,
            &[
                arrived.as_str(),
                policy,
                &liveness,
                holder,
                &metadata,
                &key,
                &fp,
                &sealed,
                &lock_delay,
            ],
        );
    }
}

#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(in crate::locks) enum AcquireReply {
    Acquired(Granted),
    Reentered(Granted),
    Held(HeldReply),
    Queued {
        lease_id: String,
        position: u64,
        pttl: i64,
        deadline_ms: u64,
        /// A retried Idempotency-Key's first ticket: its token, sealed under the key.
        sealed: Option<String>,
        /// This call queued the ticket (rather than it trying again).
        #[serde(default)]
        new: bool,
        holder: Option<String>,
        now_us: Option<u64>,
        /// The lease holding the lock now (its label), and when it was granted.
        held_by: Option<String>,
        held_since_ms: Option<u64>,
    },
    UnknownToken,
    TicketToken,
    TicketExpired,
    KindConflict {
        held_as: String,
    },
    NotReentrant,
    UpgradeRefused,
    LimitMismatch {
        limit: u32,
    },
    IdempotencyMismatch,
    #[serde(untagged)]
    Refused(Refusal),
}

/// Who holds the lock, for a refused request (or, `delayed`, the lock-delay it is in).
#[derive(Debug, Deserialize)]
pub(in crate::locks) struct HeldReply {
    pub pttl: i64,
    pub holder_id: Option<String>,
    pub lease_id: Option<String>,
    pub holder: Option<String>,
    pub arrived_ms: Option<u64>,
    /// Nobody holds the name, but it is in its lock-delay for `pttl` more ms (from
    /// `now_ms`).
    #[serde(default)]
    pub delayed: bool,
    pub now_ms: Option<u64>,
    /// When the holding lease was granted.
    pub since_ms: Option<u64>,
}

impl AcquireReply {
    /// Reads a reply: a grant (most replies) straight into [`Granted`], anything else by its
    /// tag (see [`status_of`]).
    pub(in crate::locks) fn read(raw: &str) -> Result<Self, LockError> {
        match status_of(raw) {
            Some("acquired") => parse(raw).map(Self::Acquired),
            Some("reentered") => parse(raw).map(Self::Reentered),
            _ => parse(raw),
        }
    }
}

#[derive(Debug, Deserialize)]
pub(in crate::locks) struct Granted {
    /// Answered before (a re-polled ticket, a retried Idempotency-Key).
    #[serde(default)]
    pub replayed: bool,
    /// A retried Idempotency-Key's first token, sealed under the key.
    pub sealed: Option<String>,
    /// When the lease expires, for a grant answered again (else now + ttl): to another
    /// request (`replayed`), or to this one, its call run again (a retry of a command whose
    /// reply was lost), which is answered as the same grant, not marked replayed.
    pub expires_ms: Option<u64>,
    pub lease_id: String,
    pub holder: Option<String>,
    pub kind: LeaseKind,
    pub reentry_count: u64,
    pub fencing_token: u64,
    pub ttl_ms: u64,
    pub now_ms: u64,
    /// Redis's clock when it was granted (µs): orders the events of concurrent requests.
    pub now_us: Option<u64>,
    pub created_ms: u64,
}
