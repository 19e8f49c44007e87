//! What callers ask of the domain (acquire, permits) and what it answers (grants, tickets,
//! renewals, releases, admin outcomes).

use std::time::Duration;

pub use crate::redis::Degraded;

use super::{
    FencingToken, HolderLabel, IdempotencyKey, LeaseId, LeaseKind, LeaseToken, LockDelay, Metadata,
    RwPolicy, Timestamp, Ttl,
};

/// What a client asks for when it acquires: the lease it wants (a reentry's token travels
/// beside it). It goes whole, as it is, from the API to the acquire script's twin, so a new
/// field is added here, where the body is read (`api::acquire`), in the twin
/// (`scripts::acquire`) and in `lua/acquire.lua`, and nowhere between.
#[derive(Debug, Clone, Default)]
pub struct AcquireRequest {
    /// `None` on reentry: the lease keeps its own TTL.
    pub ttl: Option<Ttl>,
    pub holder: Option<HolderLabel>,
    pub metadata: Option<Metadata>,
    /// A lock kind (never `Semaphore`); `None`: reentrant for a new lease, the lease's own
    /// kind on reentry.
    pub kind: Option<LeaseKind>,
    pub policy: RwPolicy,
    /// A retry with the same key gets the first answer.
    pub idempotency: Option<IdempotencyKey>,
    /// A new lease's lock-delay (`None`: none); a reentry keeps the lease's own.
    pub lock_delay: Option<LockDelay>,
}

/// What a client asks of a semaphore.
#[derive(Debug, Clone)]
pub struct PermitRequest {
    pub ttl: Ttl,
    pub holder: Option<HolderLabel>,
    pub metadata: Option<Metadata>,
    /// The semaphore's size; every party must name the same.
    pub limit: u32,
    pub permits: u32,
    /// A retry with the same key gets the first answer.
    pub idempotency: Option<IdempotencyKey>,
}

/// The outcome of an acquisition that did not fail: a grant, or a place in a fair queue.
#[derive(Debug, Clone)]
pub enum Acquired {
    Granted(Grant),
    Queued(Ticket),
}

/// A place in a fair lock's queue, kept by polling before `poll_by`.
#[derive(Debug, Clone)]
pub struct Ticket {
    /// Also the id of the lease the ticket turns into.
    pub lease_id: LeaseId,
    /// Proves the ticket (and later its lease); shown when the ticket is first issued.
    pub token: Option<LeaseToken>,
    /// 1 = next in line.
    pub position: u64,
    /// The ticket expires unless polled before this.
    pub poll_by: Timestamp,
    /// The first answer to a retried Idempotency-Key: the ticket its first request got.
    pub replayed: bool,
    /// The lease holding the lock now, which the ticket waits for (none while the lock is
    /// free, in its lock-delay, or held by a shared kind).
    pub behind: Option<CurrentHold>,
}

/// The lease holding a lock that a request waits for: its label, and since when it holds
/// (by Redis's clock; `held_for` as of the answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentHold {
    pub holder: Option<String>,
    pub since: Timestamp,
    pub held_for: Duration,
}

/// A granted acquisition: a new lease or one more level of an existing one.
#[derive(Debug, Clone)]
pub struct Grant {
    pub lease_id: LeaseId,
    /// The new lease's token; `None` on reentry (the client already has it).
    pub token: Option<LeaseToken>,
    /// Whether this grant started a lease (201) rather than re-entered one (200).
    pub new_lease: bool,
    /// An answer given before, given again: a ticket polled after its grant, or a retry
    /// with the same Idempotency-Key.
    pub replayed: bool,
    pub kind: LeaseKind,
    pub holder: Option<String>,
    pub fencing_token: FencingToken,
    pub reentry_count: u64,
    pub ttl_ms: u64,
    pub acquired_at: Timestamp,
    pub expires_at: Timestamp,
    /// Replicas that acknowledged the grant (`None`: none were required).
    pub replicas_acked: Option<u32>,
    /// Set when the grant stands on its primary alone (its shard has no replica).
    pub degraded: Option<Degraded>,
}

/// Who holds a lock right now, as far as a refused acquirer may know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contention {
    /// The holder's label; `None` for unlabelled leases and Redisson clients.
    pub holder: Option<String>,
    pub lease_id: Option<LeaseId>,
    /// The raw Redis field (`<lease-id>:1`, or Redisson's `<client-uuid>:<thread-id>`).
    pub holder_id: Option<String>,
    /// When the holder's TTL runs out, if it has one; for a name in its lock-delay, when
    /// that ends.
    pub retry_after: Option<Duration>,
    /// The name is free but in its lock-delay (a lease ended other than by a release) until
    /// then: nobody holds it.
    pub delayed_until: Option<Timestamp>,
    /// Since when the holder holds, and for how long as of the refusal (Redis's clock; none
    /// for a Redisson client or a lock-delay). Boxed: every `LockError` is as large as its
    /// largest variant, and this one is only ever made on a refusal.
    pub held: Option<Box<(Timestamp, Duration)>>,
}

/// A successful heartbeat.
#[derive(Debug, Clone)]
pub struct Renewal {
    pub lease_id: LeaseId,
    pub reentry_count: u64,
    pub fencing_token: FencingToken,
    pub ttl_ms: u64,
    pub expires_at: Timestamp,
    /// How much of the previous TTL was left when the heartbeat arrived.
    pub slack_ms: i64,
    /// The lease's holder label, if it has one.
    pub holder: Option<String>,
    /// Replicas that acknowledged the extension (`None`: none were required).
    pub replicas_acked: Option<u32>,
    /// Set when the extension stands on the primary alone: its shard has no replica, or too
    /// few acknowledged it in time (a heartbeat is answered all the same: refusing it would
    /// only make the lease expire while it stands on the primary).
    pub degraded: Option<Degraded>,
    /// An admin asked the holder to let go: the lease was extended no further than its
    /// deadline.
    pub revocation: Option<super::Revocation>,
}

/// A successful release.
#[derive(Debug, Clone)]
pub struct Release {
    pub lease_id: LeaseId,
    /// Levels still held; 0 when the lock was let go.
    pub reentry_count: u64,
    pub released: bool,
    /// The first answer to a retried Idempotency-Key (nothing happened now).
    pub replayed: bool,
}
