//! The lock domain's vocabulary: names, leases' ids and tokens, the values a lease is made of,
//! what a lease is (its kind), what callers ask and get, and how leases and locks look from
//! outside. Parsed once at the edge, trusted everywhere inside. No file here imports anything
//! of the domain but this vocabulary, so no type depends on what uses it.

mod event;
mod invalid;
mod kind;
mod multi;
mod name;
mod requests;
mod token;
mod values;
mod views;

pub use event::{EventKind, LockEvent};
pub use invalid::InvalidInput;
pub use kind::{HeldAs, LeaseKind, LeaseState, Resource, RwMode, RwPolicy};
pub use multi::{
    MemberGrant, MemberView, Membership, MultiGrant, MultiMember, MultiRenewal, MultiRequest,
    MultiView,
};
pub use name::LockName;
pub use requests::{
    AcquireRequest, Acquired, Contention, CurrentHold, Degraded, Grant, PermitRequest, Release,
    Renewal, Ticket,
};
pub use token::{IdempotencyKey, LeaseId, LeaseToken, TokenDigest, random_secret};
pub(crate) use token::{fingerprint, request_nonce};
pub use values::{FencingToken, HolderLabel, LockDelay, Metadata, Timestamp, Ttl, TtlPolicy};
pub use views::{
    ForcedRelease, HolderView, LeaseView, LimitChange, LockView, PermitHolderView, QueuedView,
    Revocation, SemaphoreView,
};
