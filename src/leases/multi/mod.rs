//! Multileases: several locks taken as one lease, all or nothing, in every Redis mode.
//!
//! Each member is an ordinary lease of its lock, taken by the ordinary acquire (so every
//! guarantee of a lease holds for it: fencing, replica acknowledgements, rollback when the
//! client goes away, run-twice safety), with a token derived from the multilease's
//! ([`LeaseToken::member`]). Members sit on different Cluster slots, so no one function call
//! can take them all: they are taken one by one, and given back when one is refused.
//!
//! No deadlock, whatever order callers name overlapping sets in: a request never waits while
//! it holds anything. It tries every member without waiting, in one global order (by name);
//! when one is held by someone else it lets go of all it took, then waits for that one alone
//! (woken by its unlock message, as any waiter), and from it tries the rest again without
//! waiting. Redisson's MultiLock instead takes the locks in the caller's order, waiting on
//! each, and breaks opposite-order deadlocks only when its time budget (n × 1500 ms) runs
//! out; Curator's InterProcessMultiLock waits on each in turn too.
//!
//! The multilease's record (`lua/multilease.lua`) lists its members so that any instance can
//! renew, release, show or watch it by its id; a member's end (expired, force-released) is
//! the multilease's: its next heartbeat answers lost and gives back the other members.

mod acquire;
mod held;

use futures_util::future::join_all;

use crate::locks::error::MemberRefusal;
use crate::locks::ops::records::{MultiOp, MultiRecord, MultiReply};
use crate::locks::types::{
    IdempotencyKey, LeaseId, LeaseKind, LeaseState, LeaseToken, LockName, MemberGrant, Membership,
    Metadata, MultiRequest, Resource, fingerprint,
};
use crate::locks::{LockError, Locks};

/// A multilease proven by its token and held when its record was read (see
/// [`Leases::held_multilease`]).
pub struct HeldMultilease {
    id: LeaseId,
    token: LeaseToken,
    members: Vec<(LockName, LeaseKind)>,
}

impl HeldMultilease {
    /// Its locks, in the order the client named them.
    pub fn locks(&self) -> impl Iterator<Item = &LockName> {
        self.members.iter().map(|(name, _)| name)
    }

    /// Each member's lease id (derived from the token).
    pub fn member_leases(&self) -> impl Iterator<Item = LeaseId> + '_ {
        self.locks().map(|name| self.token.member(name).lease_id())
    }

    /// Each member's lock and lease.
    pub fn members(&self) -> impl Iterator<Item = (&LockName, LeaseId)> + '_ {
        self.locks()
            .map(|name| (name, self.token.member(name).lease_id()))
    }
}

/// What the record keeps of a member (`body.members`).
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredMember {
    lock: String,
    kind: String,
    lease_id: LeaseId,
}

/// The record's body, as `Put` stores it.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredBody {
    members: Vec<StoredMember>,
    holder: Option<String>,
    metadata: Option<serde_json::Value>,
}

/// Members this request holds, given back if it ends without answering (its client went
/// away): each member's own acquire rolls back only what it had in flight.
struct Holding {
    locks: Locks,
    held: Vec<(LockName, LeaseToken)>,
    /// The record, when it was written (ended with the members).
    record: Option<LeaseId>,
}

impl Holding {
    /// The request answered: what it holds is the client's now.
    fn keep(mut self) {
        self.held.clear();
        self.record = None;
    }

    /// Gives back every member held (in the reverse of the order taken), now.
    async fn give_back(&mut self) {
        let held = std::mem::take(&mut self.held);
        release_members(&self.locks, held.into_iter().rev()).await;
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        if self.held.is_empty() && self.record.is_none() {
            return;
        }
        let (locks, held, record) = (
            self.locks.clone(),
            std::mem::take(&mut self.held),
            self.record.take(),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                release_members(&locks, held.into_iter().rev()).await;
                if let Some(id) = record {
                    let _ = end_record(&locks, id, LeaseState::Released, "").await;
                }
            });
        }
    }
}

/// Releases every level of each member lease; a member already gone is nothing to give back.
async fn release_members(locks: &Locks, held: impl Iterator<Item = (LockName, LeaseToken)>) {
    let releases = held.map(|(name, token)| async move {
        let id = token.lease_id();
        if let Err(e) = locks
            .release(Resource::Lock, &name, id, &token, true, None, None)
            .await
            && !matches!(e, LockError::LeaseLost(_) | LockError::UnknownLease)
        {
            tracing::warn!(lock = %name, lease = %id, error = %e, "a multilease member was not given back; it runs out with its TTL");
        }
    });
    join_all(releases).await;
}

/// What one pass over the members ended with.
enum Pass {
    /// Every member held.
    Held(Vec<MemberGrant>),
    /// Refused: every member taken was given back. `waitable`: each refusal is a holder's
    /// (another's lease may end); anything else (a kind conflict) ends the request.
    Refused {
        refusals: Vec<MemberRefusal>,
        waitable: bool,
    },
}

/// Marks multilease `id`'s record ended as `state` (`member`: the one whose loss ended it).
async fn end_record(
    locks: &Locks,
    id: LeaseId,
    state: LeaseState,
    member: &str,
) -> Result<(), LockError> {
    let end = MultiOp::End {
        state: state.as_str(),
        member,
    };
    match locks.records().multilease_record(id, end).await? {
        MultiReply::Ended(_) | MultiReply::Lost(_) | MultiReply::Unknown => Ok(()),
        MultiReply::TooLate => Err(LockError::TooLate),
        other => Err(unexpected(&other)),
    }
}

/// The members a record lists.
fn members_of(body: &StoredBody) -> Result<Vec<(LockName, LeaseKind)>, LockError> {
    body.members
        .iter()
        .map(|m| {
            let name = LockName::parse(&m.lock).map_err(|e| LockError::BadReply(e.to_string()))?;
            let kind = LeaseKind::parse(&m.kind)
                .ok_or_else(|| LockError::BadReply(format!("a member of kind {}", m.kind)))?;
            Ok((name, kind))
        })
        .collect()
}

/// How a multilease ended when one of its members ended as `state`.
fn multilease_end(state: LeaseState) -> LeaseState {
    match state {
        LeaseState::Released | LeaseState::ForceReleased => state,
        _ => LeaseState::Expired,
    }
}

fn record_state(record: &MultiRecord) -> LeaseState {
    match record.state.as_str() {
        "held" => LeaseState::Held,
        "released" => LeaseState::Released,
        "force_released" => LeaseState::ForceReleased,
        _ => LeaseState::Expired,
    }
}

/// The metadata every member lease carries: the client's, and which multilease it is part
/// of (shown with the lock's holder).
fn member_metadata(request: &MultiRequest, id: LeaseId) -> Metadata {
    let membership = Membership {
        lease_id: id,
        locks: request
            .members()
            .iter()
            .map(|m| m.name.as_str().to_owned())
            .collect(),
        hidden_locks: 0,
    };
    Metadata::with_membership(request.metadata.as_ref(), &membership)
}

fn record_body(request: &MultiRequest, token: &LeaseToken) -> String {
    let body = StoredBody {
        members: request
            .members()
            .iter()
            .map(|m| StoredMember {
                lock: m.name.as_str().to_owned(),
                kind: m.kind.as_str().to_owned(),
                lease_id: token.member(&m.name).lease_id(),
            })
            .collect(),
        holder: request.holder.as_ref().map(|h| h.as_str().to_owned()),
        metadata: request.metadata.clone().map(Metadata::into_value),
    };
    serde_json::to_string(&body).unwrap_or_default()
}

/// What a retry must ask exactly as its first request did.
fn request_fingerprint(request: &MultiRequest, key: &IdempotencyKey) -> String {
    let members: Vec<String> = request
        .members()
        .iter()
        .map(|m| format!("{}\u{1}{}", m.name.as_str(), m.kind.as_str()))
        .collect();
    let ttl = request.ttl.as_millis().to_string();
    let holder = request.holder.as_ref().map_or("", |h| h.as_str());
    let metadata = request
        .metadata
        .as_ref()
        .map(Metadata::to_json)
        .unwrap_or_default();
    let delay = request
        .lock_delay
        .map_or_else(String::new, |d| d.as_millis().to_string());
    let mut parts: Vec<&str> = vec!["multilease", &ttl, holder, &metadata, &delay];
    parts.extend(members.iter().map(String::as_str));
    fingerprint(Some(key), &parts)
}

fn unexpected(reply: &MultiReply) -> LockError {
    LockError::BadReply(format!("multilease: an unexpected reply {reply:?}"))
}
