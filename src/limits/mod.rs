//! Abuse limits that are not HTTP's own (those are in `server`): how fast one caller may
//! send requests ([`rate`]), what it may hold at once across every instance ([`ledger`]:
//! live leases, waiting requests), and what it may hold open on one instance ([`slots`]:
//! event streams, waiters per lock). Each refusal is a problem+json with `Retry-After` where
//! waiting helps (429 for a caller over its own budget, 503 when a shared resource is full).

pub mod budget;
pub mod ledger;
pub mod rate;
pub mod slots;

/// What one caller (an API key, or an address when anonymous) may do, unless its key says
/// otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    /// Requests per second, sustained (0: no limit).
    pub rate_per_second: u32,
    /// Requests allowed in a burst above the rate.
    pub rate_burst: u32,
    /// Live leases (and fair tickets) at once, across every instance.
    pub leases: u64,
    /// Requests waiting server-side at once, across every instance.
    pub waiters: u64,
    /// Distinct lock and semaphore names given Redis state, across every instance: what
    /// bounds the Redis memory one caller's names take (each keeps state until its lease ends
    /// and about an hour of history after).
    pub names: u64,
    /// The same for every caller of one tenant together.
    pub tenant_names: u64,
    /// Bytes of Redis state one caller's leases, names and histories may keep, estimated
    /// (see [`budget`]).
    pub state_bytes: u64,
    /// The same for every caller of one tenant together.
    pub tenant_state_bytes: u64,
    /// Open event streams on one instance.
    pub streams: u64,
    /// Whether anonymous callers on loopback are limited by their address too. Off by
    /// default: on loopback the address names the machine, not a caller, so one budget
    /// would be shared by every local process.
    pub limit_loopback: bool,
}

/// What the operator lets each tenant have, whatever its admin keys grant: keys, and one
/// request rate for all its callers together (so that keys minted by a tenant's admin share
/// one budget instead of bringing one each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantCaps {
    /// API keys per tenant (the admin token may make more).
    pub keys: u64,
    /// Requests per second of every rate-limited caller of a tenant together (0: none).
    pub rate_per_second: u32,
    pub rate_burst: u32,
}

/// Bounds on one lock, whoever asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockLimits {
    /// Requests waiting for one lock on one instance.
    pub waiters_per_lock: u64,
    /// Tickets in one fair lock's queue (across instances: the queue is in Redis).
    pub fair_queue: u64,
    /// How deep one lease may re-enter.
    pub reentry_depth: u64,
    /// Longest admin `reason`, in characters.
    pub reason_chars: usize,
}
