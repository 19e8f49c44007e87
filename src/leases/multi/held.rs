//! A multilease once held: heartbeat, release, inspection, watch, and its record.

use futures_util::future::{join_all, select_all};

use super::{
    HeldMultilease, StoredBody, end_record, members_of, multilease_end, record_state,
    release_members, unexpected,
};
use crate::leases::Leases;
use crate::locks::ops::records::{MultiOp, MultiRecord, MultiReply};
use crate::locks::types::{
    LeaseId, LeaseKind, LeaseState, LeaseToken, LockName, MemberGrant, MemberView, Metadata,
    MultiRenewal, MultiView, Resource, Timestamp, Ttl,
};
use crate::locks::{LeaseEnd, LockError};

impl Leases {
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
                .locks
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
        // A revoked member was extended no further than its deadline: the multilease ends
        // with it, so its answer says that end (as a lease's heartbeat does).
        let mut first_end: Option<(u64, Timestamp)> = None;
        for (name, kind, r) in renewed {
            let r = r?;
            if r.revocation.is_some() && first_end.is_none_or(|(_, at)| r.expires_at < at) {
                first_end = Some((r.ttl_ms, r.expires_at));
            }
            grants.push(MemberGrant {
                name,
                kind,
                lease_id: r.lease_id,
                fencing_token: r.fencing_token,
                replicas_acked: r.replicas_acked,
                degraded: r.degraded,
                revocation: r.revocation,
            });
        }
        let renew = MultiOp::Renew {
            ttl_ms: ttl.map_or(0, Ttl::as_millis),
        };
        match self.locks.records().multilease_record(id, renew).await? {
            MultiReply::Renewed(record) => {
                let (ttl_ms, expires_at) = match first_end {
                    Some((ttl_ms, at)) if at.0 < record.expires_ms => (ttl_ms, at),
                    _ => (record.ttl_ms, Timestamp(record.expires_ms)),
                };
                Ok(MultiRenewal {
                    lease_id: id,
                    members: grants,
                    ttl_ms,
                    expires_at,
                })
            }
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
        let _ = end_record(&self.locks, id, state, lost.as_str()).await;
        let others = members
            .iter()
            .filter(|(name, _)| name != lost)
            .map(|(name, _)| (name.clone(), token.member(name)));
        release_members(&self.locks, others).await;
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
                .locks
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
                end_record(&self.locks, id, state, name.as_str()).await?;
                Err(LockError::MemberLost {
                    member: name,
                    state,
                })
            }
            None => {
                end_record(&self.locks, id, LeaseState::Released, "").await?;
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
                match self.locks.lease(Resource::Lock, &name, m.lease_id).await {
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

    /// Waits until multilease `id` ends (its first member's end), for the holder of `token`,
    /// telling what each member's watch tells on the way (see [`crate::locks::ops::signals`]):
    /// refused when the token does not prove it or it has ended already.
    pub async fn watch_multi(
        &self,
        held: &HeldMultilease,
        slack: Option<std::time::Duration>,
    ) -> Result<crate::leases::Telling, LockError> {
        let (token, members) = (&held.token, &held.members);
        let mut watches = Vec::with_capacity(members.len());
        for (name, _) in members {
            let member_token = token.member(name);
            match self
                .locks
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
        let (tx, signals) = tokio::sync::mpsc::channel(crate::leases::SIGNALS_QUEUED);
        let ended = async move {
            let ends = watches.into_iter().map(|(name, watch)| {
                let tx = tx.clone();
                Box::pin(async move {
                    let end = watch.ended_telling(slack, tx, Some(name.clone())).await;
                    end.map(|end| (end, name))
                })
            });
            let (first, _, _) = select_all(ends).await;
            first.map(|(end, name)| {
                (
                    LeaseEnd {
                        state: multilease_end(end.state),
                        ended_at: end.ended_at,
                        revoked: end.revoked,
                    },
                    Some(name),
                )
            })
        };
        Ok(crate::leases::Telling {
            signals,
            ended: Box::pin(ended),
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
    pub(super) async fn read_record(
        &self,
        id: LeaseId,
    ) -> Result<(MultiRecord, StoredBody), LockError> {
        let record = match self
            .locks
            .records()
            .multilease_record(id, MultiOp::Get)
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
}
