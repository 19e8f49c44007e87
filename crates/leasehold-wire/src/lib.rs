//! The `/v1` wire format of Leasehold: every request and response body, as both the server and
//! the Rust client ([`leasehold-client`](../leasehold_client/index.html), hence the CLI) use
//! them, so the two cannot drift apart. Only serde here; with the `openapi` feature, the
//! OpenAPI schema too (the server's document is made from it). The server maps its domain
//! views into these types.
//!
//! Bodies the server sends are also read by the client: fields a newer server adds are
//! ignored, and enums the client does not know read as `Unknown` where that can happen.
//!
//! Every type is at the crate's root; the modules only sort them:
//! - `lease`: lease ids, lock kinds, lease states; taking, renewing, releasing a lease;
//! - `lock`: a lock's status, the listing of live names, fence checks;
//! - `multi`: multileases, several locks held as one lease;
//! - `semaphore`: taking permits, a semaphore's status;
//! - `admin`: force release, a semaphore's limit, the audit log;
//! - `keys`: API keys;
//! - `events`: a lease watch's `lost` and the event stream's messages.

mod admin;
mod election;
mod events;
mod keys;
mod lease;
mod lock;
mod multi;
mod semaphore;

pub use self::admin::{
    AuditBody, AuditEntryBody, ForceReleaseBody, LimitBody, LimitChangeBody, RevokeBody,
    RevokedBody, RevokedLeaseBody,
};
pub use self::election::{
    CampaignBody, CandidateBody, ElectionBody, HeartbeatQuery, InLineBody, LeaderBody,
    ObservedBody, ProclaimBody, ResignedBody, TermCheckBody, TermCheckReply,
};
pub use self::events::{LockEventMessage, LostEvent, RevocationBody, WatchSignal};
pub use self::keys::{
    KeyBody, KeyCreateBody, KeyLeaseBody, KeyLeasesBody, KeyListBody, KeyQuotasBody, KeyRole,
    KeyRotateBody, KeySecretBody, NamePattern,
};
pub use self::lease::{
    AcquireBody, Degraded, GrantBody, HeartbeatBody, LeaseBody, LeaseId, LeaseState, LeftBody,
    LockKind, ReleaseBody, ReleaseQuery, RenewalBody, RwMode, RwPolicy, TicketBody, WaitQuery,
};
pub use self::lock::{
    FenceCheckBody, FenceCheckReply, HolderBody, ListBody, ListQuery, LiveBody, LockBody,
    QueuedBody, WaiterBody,
};
pub use self::multi::{
    MembershipBody, MultiAcquireBody, MultiGrantBody, MultiLeaseBody, MultiLockBody,
    MultiMemberBody, MultiMemberView, MultiReleaseBody, MultiRenewalBody,
};
pub use self::semaphore::{PermitBody, PermitHolderBody, SemaphoreBody};
