//! What the lock domain reports as it works, for whoever listens: the metrics implement
//! [`Observer`] (the domain never imports them), and [`Unobserved`] listens to nothing.

use std::time::Duration;

use super::types::LeaseKind;
use super::types::{LeaseId, LockName};

/// How one acquire request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum AcquireOutcome {
    /// A new lease (at once or after waiting).
    Granted,
    /// One more level of a lease the request proved with its token.
    Reentered,
    /// A fair ticket still queued when the wait ended (202).
    Queued,
    /// Held by someone else and the request did not wait (`wait_ms=0`): 409.
    Contended,
    /// Held by someone else for the whole wait: 409.
    TimedOut,
    /// Refused for another reason (kind conflict, not reentrant, lease lost, ...).
    Refused,
    /// Redis failed or the instance is stopping.
    Failed,
}

impl AcquireOutcome {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// What woke a waiting request before the attempt that got the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Wake {
    /// An unlock message (pub/sub) reached this instance.
    Message,
    /// A timer: the holder's TTL (or the queue head's deadline) ran out.
    Timer,
}

impl Wake {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One acquire request, as it ended.
#[derive(Debug, Clone, Copy)]
pub struct AcquireReport<'a> {
    pub lock: &'a LockName,
    /// The lease's kind; `None` for a reentry refused before its kind was known.
    pub kind: Option<LeaseKind>,
    pub outcome: AcquireOutcome,
    /// How long it waited server-side, if its first attempt found the lock taken and it
    /// waited.
    pub waited: Option<Duration>,
    /// For a waiting request that got the lock: what woke it, and how long ago.
    pub handoff: Option<(Wake, Duration)>,
}

/// Listens to the lock domain. Every method has a default that ignores the report.
pub trait Observer: Send + Sync + 'static {
    /// A script ran (`script` names its file in `lua/`).
    fn script_call(&self, _script: &'static str, _took: Duration, _ok: bool) {}
    /// A script ran on RedLock node `node` (its URL without credentials): a node's calls are
    /// counted apart from the leases' (each RedLock call is reported once, as a lease's).
    fn node_call(&self, _node: &str, _script: &'static str, _took: Duration, _ok: bool) {}
    fn acquisition(&self, _report: AcquireReport<'_>) {}
    /// A lease was granted or renewed through this instance with `ttl` from now.
    fn lease_live(&self, _lease: LeaseId, _ttl: Duration) {}
    /// A lease ended without its holder releasing it here (force release, lost).
    fn lease_ended(&self, _lease: LeaseId) {}
    /// A call found its lease expired.
    fn lease_expired(&self, _lease: LeaseId) {}
    /// A lease let go of its last level; `held`: its age, for releases its holder asked for.
    fn released(&self, _lease: LeaseId, _kind: Option<LeaseKind>, _held: Option<Duration>) {}
    /// A heartbeat renewed its lease with `slack` of the old TTL left.
    fn heartbeat(&self, _slack: Duration, _ttl: Duration) {}
    /// A heartbeat came after its lease expired.
    fn heartbeat_too_late(&self) {}
}

/// Listens to nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct Unobserved;

impl Observer for Unobserved {}
