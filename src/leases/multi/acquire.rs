//! Taking a multilease: every member, all or nothing, without deadlock.

use std::time::Duration;

use tokio::time::Instant;

use super::{
    Holding, Pass, member_metadata, record_body, record_state, request_fingerprint, unexpected,
};
use crate::leases::{Leases, Placement};
use crate::locks::LockError;
use crate::locks::error::MemberRefusal;
use crate::locks::ops::records::{MultiOp, MultiRecord, MultiReply};
use crate::locks::types::{
    AcquireRequest, Acquired, Contention, LeaseId, LeaseToken, MemberGrant, Metadata, MultiGrant,
    MultiMember, MultiRequest, Timestamp,
};

impl Leases {
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
        let id = Placement::Multi.lease_id(&token);
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
            locks: self.locks.clone(),
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
        let record = match self.put_record(&request, &token, id).await {
            Ok(record) => record,
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

    /// Writes the record of multilease `id`, whose members are all held.
    async fn put_record(
        &self,
        request: &MultiRequest,
        token: &LeaseToken,
        id: LeaseId,
    ) -> Result<MultiRecord, LockError> {
        let body = record_body(request, token);
        let put = MultiOp::Put {
            ttl_ms: request.ttl.as_millis(),
            body: &body,
        };
        match self.locks.records().multilease_record(id, put).await? {
            MultiReply::Put(record) => Ok(record),
            other => Err(unexpected(&other)),
        }
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
            .locks
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
                revocation: None,
            })),
            Ok(Acquired::Queued(ticket)) => {
                if let Err(e) = self
                    .locks
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
                    held: None,
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
        let id = Placement::Multi.lease_id(&token);
        let fp = request_fingerprint(request, key);
        let sealed = key.seal(&token);
        let claim = MultiOp::Claim {
            keep_ms: self
                .locks
                .records()
                .tombstone_ms()
                .max(request.ttl.as_millis()),
            fingerprint: &fp,
            sealed: &sealed,
        };
        match self.locks.records().lease_claim(key, id, claim).await? {
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
            let _ = self
                .locks
                .records()
                .lease_claim(key, id, MultiOp::Unclaim)
                .await;
        }
    }
}
