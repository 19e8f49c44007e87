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

use std::time::Duration;

use futures_util::future::{join_all, select_all};
use tokio::time::Instant;

use crate::locks::error::MemberRefusal;
use crate::locks::scripts::multilease::{MultiOp, MultiRecord, MultiReply, Multilease};
use crate::locks::types::{
    AcquireRequest, Acquired, Contention, IdempotencyKey, LeaseId, LeaseKind, LeaseState,
    LeaseToken, LockName, MemberGrant, MemberView, Membership, Metadata, MultiGrant, MultiMember,
    MultiRenewal, MultiRequest, MultiView, Resource, Timestamp, Ttl, fingerprint,
};
use crate::locks::{LeaseEnd, LockError, Locks};

/// A multilease proven by its token and held when its record was read (see
/// [`Locks::held_multilease`]).
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
                    let _ = locks.end_record(id, LeaseState::Released, "").await;
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

impl Locks {
    /// Takes every member of `request` as one lease, waiting up to `wait` in all; refused
    /// (nothing of it held) with [`LockError::MembersRefused`] naming the members held by
    /// others when the wait ends.
    pub async fn acquire_multi(
        &self,
        request: MultiRequest,
        wait: Duration,
    ) -> Result<MultiGrant, LockError> {
        let deadline = Instant::now() + wait;
        let (token, replayed) = self.multilease_token(&request).await?;
        let id = token.lease_id();
        if replayed {
            // The first request's multilease, if it was granted: ended, the retry is told so.
            match self.read_record(id).await {
                Ok((record, _)) if record.state != "held" => {
                    return Err(LockError::LeaseLost(record_state(&record)));
                }
                Ok(_) | Err(LockError::UnknownLease) => {}
                Err(e) => return Err(e),
            }
        }
        let mut order: Vec<usize> = (0..request.members().len()).collect();
        // One global order for every request: by name.
        order.sort_by(|&a, &b| {
            request.members()[a]
                .name
                .as_str()
                .cmp(request.members()[b].name.as_str())
        });
        let metadata = member_metadata(&request, id);
        let mut holding = Holding {
            locks: self.clone(),
            held: Vec::new(),
            record: None,
        };
        // The member to wait for first (the last pass's first refusal).
        let mut first: Option<usize> = None;
        let grants = loop {
            let last = Instant::now() >= deadline;
            let pass = self
                .multilease_pass(
                    &request,
                    &token,
                    &metadata,
                    &order,
                    first,
                    deadline,
                    last,
                    &mut holding,
                )
                .await;
            match pass {
                Ok(Pass::Held(grants)) => break grants,
                Ok(Pass::Refused { refusals, waitable }) => {
                    if last || !waitable || wait.is_zero() {
                        self.unclaim(&request, id).await;
                        return Err(LockError::MembersRefused(refusals));
                    }
                    first = refusals.first().and_then(|r| {
                        order
                            .iter()
                            .copied()
                            .find(|&i| request.members()[i].name == r.member)
                    });
                }
                Err(e) => {
                    holding.give_back().await;
                    self.unclaim(&request, id).await;
                    return Err(e);
                }
            }
        };
        let body = record_body(&request, &token);
        let record = match self
            .call_record(
                &self.inner.keys.multilease(id),
                &Multilease {
                    id,
                    op: MultiOp::Put {
                        ttl_ms: request.ttl.as_millis(),
                        body: &body,
                    },
                },
            )
            .await
        {
            Ok(MultiReply::Put(record)) => record,
            Ok(other) => {
                holding.give_back().await;
                self.unclaim(&request, id).await;
                return Err(unexpected(&other));
            }
            Err(e) => {
                holding.give_back().await;
                self.unclaim(&request, id).await;
                return Err(e);
            }
        };
        holding.keep();
        Ok(MultiGrant {
            lease_id: id,
            token,
            members: grants,
            holder: request.holder.as_ref().map(|h| h.as_str().to_owned()),
            ttl_ms: record.ttl_ms,
            acquired_at: Timestamp(record.acquired_ms),
            expires_at: Timestamp(record.expires_ms),
            replayed,
        })
    }

    /// One pass: every member in `order` (`first` before the rest, waiting for it until
    /// `deadline`; the others without waiting). On a refusal, what was taken is given back;
    /// on the `last` pass every member is tried, so that the answer names each one held.
    #[allow(clippy::too_many_arguments)]
    async fn multilease_pass(
        &self,
        request: &MultiRequest,
        token: &LeaseToken,
        metadata: &Metadata,
        order: &[usize],
        first: Option<usize>,
        deadline: Instant,
        last: bool,
        holding: &mut Holding,
    ) -> Result<Pass, LockError> {
        let members = request.members();
        let mut grants: Vec<Option<MemberGrant>> = vec![None; members.len()];
        let mut refusals = Vec::new();
        let mut waitable = true;
        let sequence = first
            .into_iter()
            .chain(order.iter().copied().filter(|&i| Some(i) != first));
        for i in sequence {
            let member = &members[i];
            let wait = if Some(i) == first {
                deadline.saturating_duration_since(Instant::now())
            } else {
                Duration::ZERO
            };
            match self
                .take_member(request, member, token, metadata, wait)
                .await
            {
                Ok(Ok(grant)) => {
                    holding
                        .held
                        .push((member.name.clone(), token.member(&member.name)));
                    grants[i] = Some(grant);
                }
                Ok(Err(error)) => {
                    waitable &= matches!(error, LockError::Held(_));
                    refusals.push(MemberRefusal {
                        member: member.name.clone(),
                        error,
                    });
                    if !last || !waitable {
                        break;
                    }
                }
                Err(e) => return Err(e),
            }
        }
        if refusals.is_empty() {
            return Ok(Pass::Held(grants.into_iter().flatten().collect()));
        }
        holding.give_back().await;
        Ok(Pass::Refused { refusals, waitable })
    }

    /// One member, waiting up to `wait`: `Ok(Err(_))` when it is refused (held by another, in
    /// use as another kind), `Err` when Redis fails. A fair lock's ticket still queued when the
    /// wait ends leaves the queue: a multilease holds nothing while it waits.
    async fn take_member(
        &self,
        request: &MultiRequest,
        member: &MultiMember,
        token: &LeaseToken,
        metadata: &Metadata,
        wait: Duration,
    ) -> Result<Result<MemberGrant, LockError>, LockError> {
        let asked = AcquireRequest {
            ttl: Some(request.ttl),
            holder: request.holder.clone(),
            metadata: Some(metadata.clone()),
            kind: Some(member.kind),
            lock_delay: request.lock_delay,
            ..AcquireRequest::default()
        };
        let member_token = token.member(&member.name);
        let acquired = self
            .acquire_member(&member.name, asked, member_token.clone(), request.ttl, wait)
            .await;
        match acquired {
            Ok(Acquired::Granted(grant)) => Ok(Ok(MemberGrant {
                name: member.name.clone(),
                kind: grant.kind,
                lease_id: grant.lease_id,
                fencing_token: grant.fencing_token,
                replicas_acked: grant.replicas_acked,
                degraded: grant.degraded,
            })),
            Ok(Acquired::Queued(ticket)) => {
                if let Err(e) = self
                    .leave(&member.name, ticket.lease_id, &member_token)
                    .await
                    && !matches!(e, LockError::LeaseLost(_))
                {
                    return Err(e);
                }
                Ok(Err(LockError::Held(Contention {
                    holder: None,
                    lease_id: None,
                    holder_id: None,
                    retry_after: None,
                    delayed_until: None,
                })))
            }
            Err(e @ (LockError::Held(_) | LockError::KindConflict { .. })) => Ok(Err(e)),
            Err(e) => Err(e),
        }
    }

    /// The multilease's token: a new one, or with an Idempotency-Key the one its first
    /// request claimed (`true`: this request is a retry).
    async fn multilease_token(
        &self,
        request: &MultiRequest,
    ) -> Result<(LeaseToken, bool), LockError> {
        let token = LeaseToken::generate();
        let Some(key) = &request.idempotency else {
            return Ok((token, false));
        };
        let id = token.lease_id();
        let fp = request_fingerprint(request, key);
        let sealed = key.seal(&token);
        let claim = Multilease {
            id,
            op: MultiOp::Claim {
                keep_ms: self
                    .inner
                    .settings
                    .tombstone_ms
                    .max(request.ttl.as_millis()),
                fingerprint: &fp,
                sealed: &sealed,
            },
        };
        match self
            .call_record(&self.inner.keys.multilease_claim(&key.digest_hex()), &claim)
            .await?
        {
            MultiReply::New => Ok((token, false)),
            MultiReply::Claimed {
                fingerprint,
                sealed,
                ..
            } => {
                if fingerprint != fp {
                    return Err(LockError::IdempotencyMismatch);
                }
                let token = key
                    .unseal(&sealed)
                    .ok_or_else(|| LockError::BadReply("an unreadable multilease claim".into()))?;
                Ok((token, true))
            }
            MultiReply::TooLate => Err(LockError::TooLate),
            other => Err(unexpected(&other)),
        }
    }

    /// Lets a failed request's Idempotency-Key go, so that a retry tries afresh.
    async fn unclaim(&self, request: &MultiRequest, id: LeaseId) {
        if let Some(key) = &request.idempotency {
            let unclaim = Multilease {
                id,
                op: MultiOp::Unclaim,
            };
            let _ = self
                .call_record(
                    &self.inner.keys.multilease_claim(&key.digest_hex()),
                    &unclaim,
                )
                .await;
        }
    }

    /// Renews every member of multilease `id` (to `ttl`, or each keeps its own). A member
    /// that is no longer held ends the multilease: the others are given back and the answer
    /// is [`LockError::MemberLost`].
    pub async fn renew_multi(
        &self,
        held: &HeldMultilease,
        ttl: Option<Ttl>,
    ) -> Result<MultiRenewal, LockError> {
        let (id, token, members) = (held.id, &held.token, &held.members);
        let renewals = members.iter().map(|(name, kind)| async move {
            let member_token = token.member(name);
            let renewed = self
                .renew(
                    Resource::Lock,
                    name,
                    member_token.lease_id(),
                    &member_token,
                    ttl,
                )
                .await;
            (name.clone(), *kind, renewed)
        });
        let renewed = join_all(renewals).await;
        if let Some((name, state)) = renewed.iter().find_map(|(name, _, r)| match r {
            Err(LockError::LeaseLost(state)) => Some((name.clone(), *state)),
            Err(LockError::UnknownLease) => Some((name.clone(), LeaseState::Expired)),
            _ => None,
        }) {
            return Err(self.lose(id, token, members, &name, state).await);
        }
        let mut grants = Vec::with_capacity(renewed.len());
        for (name, kind, r) in renewed {
            let r = r?;
            grants.push(MemberGrant {
                name,
                kind,
                lease_id: r.lease_id,
                fencing_token: r.fencing_token,
                replicas_acked: r.replicas_acked,
                degraded: r.degraded,
            });
        }
        let renew = Multilease {
            id,
            op: MultiOp::Renew {
                ttl_ms: ttl.map_or(0, Ttl::as_millis),
            },
        };
        match self
            .call_record(&self.inner.keys.multilease(id), &renew)
            .await?
        {
            MultiReply::Renewed(record) => Ok(MultiRenewal {
                lease_id: id,
                members: grants,
                ttl_ms: record.ttl_ms,
                expires_at: Timestamp(record.expires_ms),
            }),
            MultiReply::Lost(record) => Err(LockError::LeaseLost(record_state(&record))),
            MultiReply::Unknown => Err(LockError::UnknownLease),
            other => Err(unexpected(&other)),
        }
    }

    /// Ends multilease `id` because member `lost` ended as `state`: the record says so and the
    /// other members are given back.
    async fn lose(
        &self,
        id: LeaseId,
        token: &LeaseToken,
        members: &[(LockName, LeaseKind)],
        lost: &LockName,
        state: LeaseState,
    ) -> LockError {
        let state = multilease_end(state);
        let _ = self.end_record(id, state, lost.as_str()).await;
        let others = members
            .iter()
            .filter(|(name, _)| name != lost)
            .map(|(name, _)| (name.clone(), token.member(name)));
        release_members(self, others).await;
        LockError::MemberLost {
            member: lost.clone(),
            state,
        }
    }

    /// Releases every member of multilease `id` (every level) and wakes their waiters. A
    /// member that was lost meanwhile makes the answer [`LockError::MemberLost`], after the
    /// others are released all the same.
    pub async fn release_multi(&self, held: &HeldMultilease) -> Result<(), LockError> {
        let (id, token, members) = (held.id, &held.token, &held.members);
        let releases = members.iter().map(|(name, _)| async move {
            let member_token = token.member(name);
            let released = self
                .release(
                    Resource::Lock,
                    name,
                    member_token.lease_id(),
                    &member_token,
                    true,
                    None,
                    None,
                )
                .await;
            (name.clone(), released)
        });
        let released = join_all(releases).await;
        let lost = released.iter().find_map(|(name, r)| match r {
            Err(LockError::LeaseLost(state)) => Some((name.clone(), *state)),
            Err(LockError::UnknownLease) => Some((name.clone(), LeaseState::Expired)),
            _ => None,
        });
        if let Some((_, Err(e))) = released
            .into_iter()
            .find(|(_, r)| matches!(r, Err(e) if e.unavailable()))
        {
            return Err(e);
        }
        match lost {
            Some((name, state)) => {
                let state = multilease_end(state);
                self.end_record(id, state, name.as_str()).await?;
                Err(LockError::MemberLost {
                    member: name,
                    state,
                })
            }
            None => {
                self.end_record(id, LeaseState::Released, "").await?;
                Ok(())
            }
        }
    }

    /// Multilease `id` as anyone may see it. A record that says held is checked against its
    /// members: one no longer held shows the multilease lost (its next heartbeat ends it).
    pub async fn multilease(&self, id: LeaseId) -> Result<MultiView, LockError> {
        let (record, body) = self.read_record(id).await?;
        let mut state = record_state(&record);
        let mut lost_member = record.member.clone().filter(|m| !m.is_empty());
        let mut ended_at = record.ended_ms.map(Timestamp);
        if state == LeaseState::Held {
            let checks = body.members.iter().map(|m| async move {
                let Ok(name) = LockName::parse(&m.lock) else {
                    return None;
                };
                match self.lease(Resource::Lock, &name, m.lease_id).await {
                    Ok(view) if view.state == LeaseState::Held => None,
                    Ok(view) => Some((m.lock.clone(), view.state, view.ended_at)),
                    Err(LockError::UnknownLease) => {
                        Some((m.lock.clone(), LeaseState::Expired, None))
                    }
                    Err(_) => None,
                }
            });
            if let Some((lock, member_state, at)) =
                join_all(checks).await.into_iter().flatten().next()
            {
                state = multilease_end(member_state);
                lost_member = Some(lock);
                ended_at = at;
            }
        }
        let held = state == LeaseState::Held;
        Ok(MultiView {
            lease_id: id,
            state,
            members: body
                .members
                .iter()
                .filter_map(|m| {
                    Some(MemberView {
                        name: LockName::parse(&m.lock).ok()?,
                        kind: LeaseKind::parse(&m.kind)?,
                        lease_id: m.lease_id,
                    })
                })
                .collect(),
            holder: body.holder,
            metadata: body.metadata.and_then(|m| Metadata::parse(m).ok()),
            ttl_ms: record.ttl_ms,
            acquired_at: Timestamp(record.acquired_ms),
            expires_at: Timestamp(record.expires_ms),
            ended_at,
            lost_member,
            remaining_ms: held.then(|| record.expires_ms.saturating_sub(record.now_ms)),
        })
    }

    /// Waits until multilease `id` ends (its first member's end), for the holder of `token`:
    /// refused when the token does not prove it or it has ended already.
    pub async fn watch_multi(
        &self,
        held: &HeldMultilease,
    ) -> Result<impl Future<Output = Result<(LeaseEnd, LockName), LockError>> + use<>, LockError>
    {
        let (token, members) = (&held.token, &held.members);
        let mut watches = Vec::with_capacity(members.len());
        for (name, _) in members {
            let member_token = token.member(name);
            match self
                .watch(Resource::Lock, name, member_token.lease_id(), &member_token)
                .await
            {
                Ok(watch) => watches.push((name.clone(), watch)),
                Err(LockError::LeaseLost(state)) => {
                    return Err(LockError::MemberLost {
                        member: name.clone(),
                        state: multilease_end(state),
                    });
                }
                Err(e) => return Err(e),
            }
        }
        Ok(async move {
            let ends = watches.into_iter().map(|(name, watch)| {
                Box::pin(async move { watch.ended().await.map(|end| (end, name)) })
            });
            let (first, _, _) = select_all(ends).await;
            first.map(|(end, name)| {
                (
                    LeaseEnd {
                        state: multilease_end(end.state),
                        ended_at: end.ended_at,
                    },
                    name,
                )
            })
        })
    }

    /// Multilease `id`, still held, for the holder of `token` (refused as its use would
    /// be: unknown, another lease's token, ended): what its record lists, read once for the
    /// heartbeat, release or watch that follows.
    pub async fn held_multilease(
        &self,
        id: LeaseId,
        token: LeaseToken,
    ) -> Result<HeldMultilease, LockError> {
        let body = self.live_record(id, &token).await?;
        Ok(HeldMultilease {
            id,
            token,
            members: members_of(&body)?,
        })
    }

    /// The record of multilease `id`, still held, for the holder of `token`.
    async fn live_record(&self, id: LeaseId, token: &LeaseToken) -> Result<StoredBody, LockError> {
        let (record, body) = self.read_record(id).await?;
        if !token.proves(id) {
            return Err(LockError::TokenMismatch);
        }
        if record.state != "held" {
            return Err(match record.member.clone().filter(|m| !m.is_empty()) {
                Some(member) => LockError::MemberLost {
                    member: LockName::parse(&member)
                        .map_err(|e| LockError::BadReply(e.to_string()))?,
                    state: record_state(&record),
                },
                None => LockError::LeaseLost(record_state(&record)),
            });
        }
        Ok(body)
    }

    /// Multilease `id`'s record and what it lists (`UnknownLease`: no such record).
    async fn read_record(&self, id: LeaseId) -> Result<(MultiRecord, StoredBody), LockError> {
        let get = Multilease {
            id,
            op: MultiOp::Get,
        };
        let record = match self
            .call_record(&self.inner.keys.multilease(id), &get)
            .await?
        {
            MultiReply::Found(record) | MultiReply::Lost(record) => record,
            MultiReply::Unknown => return Err(LockError::UnknownLease),
            other => return Err(unexpected(&other)),
        };
        let body = serde_json::from_value(record.body.clone())
            .map_err(|e| LockError::BadReply(format!("a multilease record: {e}")))?;
        Ok((record, body))
    }

    async fn end_record(
        &self,
        id: LeaseId,
        state: LeaseState,
        member: &str,
    ) -> Result<(), LockError> {
        let end = Multilease {
            id,
            op: MultiOp::End {
                state: state.as_str(),
                member,
            },
        };
        match self
            .call_record(&self.inner.keys.multilease(id), &end)
            .await?
        {
            MultiReply::Ended(_) | MultiReply::Lost(_) | MultiReply::Unknown => Ok(()),
            MultiReply::TooLate => Err(LockError::TooLate),
            other => Err(unexpected(&other)),
        }
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
