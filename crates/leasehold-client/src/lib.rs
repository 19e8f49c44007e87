//! The Rust client of Leasehold: a typed HTTP client for the `/v1` lease API, what `leasehold
//! run` and the scripting subcommands (`acquire`, `heartbeat`, `release`, `status`, `ls`)
//! speak, and what a Rust program adds to call a Leasehold server.
//!
//! It knows the wire format only ([`leasehold_wire`]), never the lock domain: it depends on
//! neither axum, Redis nor askama. Every call returns the typed body together with the JSON
//! the server sent (scripts print the latter verbatim, so fields added later reach them), or a
//! [`ClientError`] that keeps the problem's `code`, `detail` and status. It speaks `http://`
//! and `https://` (rustls; the system's trusted roots plus an optional CA file) and sends an
//! API key, when given one, in the `Leasehold-Key` header of every request.
//!
//! Every item is at the crate's root; the modules only sort them:
//! - `connection`: [`Client`] itself, its options and the way every call is sent;
//! - `secret`: [`LeaseToken`] and [`ApiKey`];
//! - `error`: [`ClientError`] and the server's [`Problem`];
//! - `codes`: [`ProblemCode`], every problem code the server can answer;
//! - `server_url`: [`ServerUrl`], a server's checked base URL;
//! - `leases`: acquire (locks, permits, fair tickets), heartbeat, release, a lease's state;
//! - `inspect`: lock and semaphore status, the live names, fence checks;
//! - `keys`: API keys (admin);
//! - `admin`: force release (admin);
//! - `watch`: lease watches ([`Watch`]);
//! - `keeper` and `upkeep`: a lease kept as every official client keeps one ([`KeptLease`]:
//!   renewed at a third of its TTL, watched, its loss a [`LossSignal`], released on every
//!   way out), by the rules of `clients/PROTOCOL.md`;
//! - `elections`: a candidate's calls (stand, poll, proclaim, resign), the election, the
//!   leader, a term's check, an admin's end of a term;
//! - `in_line`: where a candidate in line stands ([`InLine`]), told to a kept campaign's
//!   [`OnInLine`] hook;
//! - `term`: a kept campaign ([`Term`], from [`Client::campaign`]): a candidate's term is a
//!   lease on [`Resource::Election`], kept by the same loops as any other;
//! - `observe`: an election's changes as a [`futures_util::Stream`] ([`Observations`]),
//!   resumed after a dropped connection.

mod admin;
mod codes;
mod connection;
mod elections;
mod error;
mod in_line;
mod inspect;
mod keeper;
mod kept;
mod keys;
mod leases;
mod observe;
mod secret;
mod server_url;
mod term;
mod upkeep;
mod watch;

pub use leasehold_wire::{
    AcquireBody, CampaignBody, CandidateBody, Degraded, ElectionBody, FenceCheckBody,
    FenceCheckReply, ForceReleaseBody, GrantBody, HolderBody, InLineBody, KeyBody, KeyCreateBody,
    KeyLeaseBody, KeyLeasesBody, KeyListBody, KeyQuotasBody, KeyRole, KeyRotateBody, KeySecretBody,
    LeaderBody, LeaseBody, LeaseId, LeaseState, ListBody, LiveBody, LockBody, LockKind, LostEvent,
    MembershipBody, MultiAcquireBody, MultiGrantBody, MultiLeaseBody, MultiLockBody,
    MultiMemberBody, MultiReleaseBody, MultiRenewalBody, ObservedBody, PermitBody, ProclaimBody,
    ReleaseBody, RenewalBody, ResignedBody, RevocationBody, RevokeBody, RevokedBody,
    RevokedLeaseBody, SemaphoreBody, TermCheckBody, TermCheckReply, TicketBody, WatchSignal,
};

pub use self::codes::ProblemCode;
pub use self::connection::{
    Client, ClientOptions, DEFAULT_TIMEOUT, KEY_HEADER, Reply, Resource, http_builder,
    install_crypto_provider,
};
pub use self::elections::{CampaignOptions, Standing, Waiting};
pub use self::error::{ClientError, Problem};
pub use self::in_line::{InLine, OnInLine};
pub use self::keeper::{KeepOptions, KeptLease};
pub use self::kept::{LeaseLost, LossSignal, REVOKED, Renewal, Signal, UNRENEWABLE};
pub use self::leases::{AcquireOptions, Acquired, Lease, PermitOptions, Ticket};
pub use self::observe::{Change, Observation, Observations};
pub use self::secret::{ApiKey, EmptyKey, EmptyToken, LeaseToken};
pub use self::server_url::{InvalidServerUrl, ServerUrl};
pub use self::term::Term;
pub use self::watch::{WATCH_SILENCE, Watch, WatchEvent};

/// The README's example, compiled by the doctests (`cargo test --doc`).
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeExample;
