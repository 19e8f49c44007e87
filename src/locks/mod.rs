//! The lock domain: leases on Redis-held locks and semaphores, in Redisson's data layouts.
//! Knows nothing of HTTP; reports what happens through an [`observer::Observer`], and reaches
//! Redis only through the seam ([`crate::redis::Redis`]).
//!
//! Where things are:
//! - [`Locks`] (`handle.rs`): the one handle the transport layers use; `calls.rs`: the one
//!   way a Lua function is called; [`Backend`]: the Redis behind it, for probes and pages.
//! - [`types`]: the vocabulary: names, lease ids and tokens, TTLs, kinds, requests, views, the
//!   typed [`LockEvent`].
//! - [`ops`]: what callers do, one file per family of use cases: `acquire` (new leases,
//!   reentries, tickets, permits, waiting server-side, rolling back what a caller that went
//!   away got), `lease` (heartbeat, release, leave, inspect a lease), `inspect` (a lock's or
//!   semaphore's state), `listing` and `census` (the live names), `admin` and `eviction`
//!   (operators' actions), `watch` (a lease's end), `tenure` (how long a name is held).
//! - [`wakeups`]: the in-process registry of waiting requests, and what wakes them (the
//!   subscriber's unlock messages).
//! - [`feed`]: what the domain tells about itself: the history stream, the live publisher and
//!   its journal, the waiting lists, the names index, the expiry sweeper.
//! - `scripts`: one Rust twin per Lua file in `lua/` (arguments and reply).
//! - [`layout`]: the Redis key layout;
//!   [`error`]: what can go wrong, as situations.

pub use crate::redis::wall_ms;

mod backend;
mod calls;
pub mod error;
pub mod feed;
mod handle;
pub mod layout;
pub mod observer;
pub mod ops;
mod scripts;
pub mod types;
pub mod wakeups;

pub use self::backend::{Backend, Persistence};
pub(in crate::locks) use self::handle::QUEUE_LISTED;
pub use self::handle::{LockSettings, Locks};

pub use self::error::LockError;
pub use self::feed::history::{HISTORY_LIFE, HISTORY_SHOWN, merged, ongoing, ongoing_permits};
pub use self::feed::waitlist::WaiterView;
pub use self::layout::{KeySpace, OWN_TAG, own_key, wake_channels};
pub use self::observer::Observer;
pub use self::ops::census::Census;
pub use self::ops::listing::{ListCursor, LiveEntry, LivePage, NamePrefix};
pub use self::ops::revoke::Revoked;
pub use self::ops::tenure::held_for;
pub use self::ops::watch::{LeaseEnd, LeaseWatch};
pub use self::types::{
    AcquireRequest, Acquired, Contention, CurrentHold, Degraded, EventKind, FencingToken,
    ForcedRelease, Grant, HeldAs, HolderLabel, HolderView, IdempotencyKey, InvalidInput, LeaseId,
    LeaseKind, LeaseState, LeaseToken, LeaseView, LimitChange, LockDelay, LockEvent, LockName,
    LockView, MemberGrant, MemberView, Membership, Metadata, MultiGrant, MultiMember, MultiRenewal,
    MultiRequest, MultiView, PermitHolderView, PermitRequest, QueuedView, Release, Renewal,
    Resource, Revocation, RwMode, RwPolicy, SemaphoreView, Ticket, Timestamp, TokenDigest, Ttl,
    TtlPolicy, random_secret,
};
pub use crate::redis::{MemoryState, RedisMemory, RedisStatus};
