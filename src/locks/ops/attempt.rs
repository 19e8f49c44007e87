//! One attempt of an acquire request: what is asked for ([`Target`]), the script call, and
//! its reply read as an [`Outcome`] (granted, queued with a ticket, or held by another),
//! with the grant's live event published. The waiting loop around it is [`super::acquire`].

use std::time::Duration;

use crate::locks::calls::On;
use crate::locks::error::LockError;
use crate::locks::feed::waitlist::Wanted;
use crate::locks::scripts::acquire::{Acquire, AcquireReply, Granted, HeldReply, Op};
use crate::locks::scripts::non_empty;
use crate::locks::scripts::release::ReleaseHow;
use crate::locks::scripts::semaphore_acquire::SemaphoreAcquire;
use crate::locks::types::{
    AcquireRequest, Contention, CurrentHold, Grant, HolderLabel, LeaseKind, LeaseToken, LockName,
    PermitRequest, Resource, RwMode, Timestamp, request_nonce,
};
use crate::locks::{EventKind, FencingToken, LeaseId, LockEvent, Locks};
use crate::redis::Acked;

use super::rollback::{InFlight, Step};

/// What is being acquired.
pub(super) enum Target<'a> {
    /// Owned, not borrowed from the caller: the waiting future is then the one place a
    /// parked waiter keeps it.
    Lock(AcquireRequest),
    Semaphore(&'a PermitRequest),
}

impl Target<'_> {
    /// The kind asked for, when known before the grant (a reentry takes its lease's).
    pub(super) fn kind(&self) -> Option<LeaseKind> {
        match self {
            Self::Lock(request) => request.kind,
            Self::Semaphore(_) => Some(LeaseKind::Semaphore),
        }
    }

    pub(super) fn resource(&self) -> Resource {
        match self {
            Self::Lock(_) => Resource::Lock,
            Self::Semaphore(_) => Resource::Semaphore,
        }
    }

    /// What the waiting list shows of this request (see `waitlist`).
    pub(super) fn wanted(&self) -> Wanted<'_> {
        match self {
            Self::Lock(request) => Wanted {
                kind: self.kind(),
                holder: request.holder.as_ref().map(HolderLabel::as_str),
                permits: None,
            },
            Self::Semaphore(p) => Wanted {
                kind: self.kind(),
                holder: p.holder.as_ref().map(HolderLabel::as_str),
                permits: Some(p.permits),
            },
        }
    }
}

/// One attempt's outcome.
pub(super) enum Outcome {
    Granted(Grant),
    Queued {
        /// The ticket (another request's, when a retried Idempotency-Key replays it).
        ticket: LeaseId,
        token: Option<LeaseToken>,
        position: u64,
        retry: Option<Duration>,
        poll_by: Timestamp,
        /// The lease it waits for.
        behind: Option<CurrentHold>,
    },
    Held {
        contention: Contention,
        arrived_ms: u64,
    },
}

impl Locks {
    pub(super) async fn attempt(
        &self,
        name: &LockName,
        target: &Target<'_>,
        request: &InFlight,
        liveness: Duration,
        arrived_ms: u64,
        turn: &crate::locks::handle::Turn<'_>,
    ) -> Result<Outcome, LockError> {
        let (id, token) = (request.id, &request.token);
        let ((reply, acked), idempotency) = match target {
            Target::Lock(asked) => {
                let script = Acquire {
                    op: request.op,
                    request: asked,
                    id,
                    token,
                    liveness_ms: millis(liveness),
                    arrived_ms,
                    nonce: &request.nonce,
                };
                (
                    self.call_with(On::Lock(name), &script, Some(turn)).await?,
                    asked.idempotency.as_ref(),
                )
            }
            Target::Semaphore(permits) => {
                let script = SemaphoreAcquire {
                    request: permits,
                    id,
                    token,
                    nonce: &request.nonce,
                };
                (
                    self.call_with(On::Lock(name), &script, Some(turn)).await?,
                    permits.idempotency.as_ref(),
                )
            }
        };
        // A grant too few replicas have is not answered: the error gives it back (see
        // `rollback`; a reentry's level is given back by the waiting loop). Nor is a new
        // place in a fair line: a ticket answered keeps its place across a failover only if
        // a replica has it (a waiting request tries again, finding its ticket; one answered
        // 503 leaves the line).
        let changed = matches!(
            reply,
            AcquireReply::Acquired(_)
                | AcquireReply::Reentered(_)
                | AcquireReply::Queued { new: true, .. }
        );
        if let Some(a) = acked.filter(|a| changed && a.short()) {
            if let (AcquireReply::Reentered(g), Target::Lock(asked)) = (&reply, target) {
                self.give_back_level(name, g, asked, token).await;
            }
            return Err(LockError::NotReplicated {
                acked: a.acked,
                required: a.required,
            });
        }
        if let (AcquireReply::Acquired(_) | AcquireReply::Reentered(_), Some(a)) = (&reply, acked) {
            self.inner.conn.acks().answered(a.degraded());
        }
        self.read_reply(name, reply, request, acked, idempotency)
    }

    /// What an acquire's reply (granted on enough replicas) means for the waiting loop; the
    /// grant's or the ticket's event is published here.
    fn read_reply(
        &self,
        name: &LockName,
        reply: AcquireReply,
        request: &InFlight,
        acked: Option<Acked>,
        idempotency: Option<&crate::locks::IdempotencyKey>,
    ) -> Result<Outcome, LockError> {
        let token = &request.token;
        let unseal = |sealed: &Option<String>| {
            sealed
                .as_deref()
                .filter(|s| !s.is_empty())
                .and_then(|s| idempotency.and_then(|key| key.unseal(s)))
        };
        match reply {
            AcquireReply::Acquired(g) => {
                // A replayed new lease shows the first token (unsealed with the key); a ticket
                // polled again shows none (its client has it).
                let shown = match (g.replayed, unseal(&g.sealed)) {
                    (_, Some(first)) => Some(first),
                    (true, None) => None,
                    (false, None) => (request.op != Op::Reenter).then(|| token.clone()),
                };
                let kind = if request.op == Op::Poll {
                    EventKind::Granted
                } else {
                    EventKind::Acquired
                };
                self.publish_grant(name, kind, &g);
                Ok(Outcome::Granted(grant(g, shown, true, acked)?))
            }
            // Its event came with the reply (`ev`): the history has it too.
            AcquireReply::Reentered(g) => Ok(Outcome::Granted(grant(g, None, false, acked)?)),
            AcquireReply::Held(held) => Ok(held_outcome(held)),
            AcquireReply::Queued {
                lease_id,
                position,
                pttl,
                deadline_ms,
                sealed,
                new,
                holder,
                now_us,
                held_by,
                held_since_ms,
            } => {
                let behind = held_since_ms.map(|since| CurrentHold {
                    holder: non_empty(held_by),
                    since: Timestamp(since),
                    held_for: age(since, now_us.unwrap_or(0) / 1000),
                });
                let ticket = LeaseId::parse(&lease_id)
                    .ok_or_else(|| LockError::BadReply(format!("ticket id {lease_id:?}")))?;
                if new {
                    let at_us = now_us.unwrap_or(0);
                    self.publish(
                        &LockEvent::new(EventKind::Queued, name, at_us / 1000)
                            .lease(ticket, non_empty(holder).as_deref())
                            .with("at_us", at_us),
                    );
                }
                Ok(Outcome::Queued {
                    ticket,
                    token: unseal(&sealed),
                    position,
                    retry: positive_ms(pttl),
                    poll_by: Timestamp(deadline_ms),
                    behind,
                })
            }
            AcquireReply::UnknownToken => Err(LockError::UnknownToken),
            AcquireReply::TicketToken => Err(LockError::TicketPending),
            AcquireReply::TicketExpired => Err(LockError::TicketExpired),
            AcquireReply::KindConflict { held_as } => Err(LockError::kind_conflict(&held_as)),
            AcquireReply::NotReentrant => Err(LockError::NotReentrant),
            AcquireReply::UpgradeRefused => Err(LockError::UpgradeRefused),
            AcquireReply::LimitMismatch { limit } => Err(LockError::LimitMismatch { limit }),
            AcquireReply::IdempotencyMismatch => Err(LockError::IdempotencyMismatch),
            AcquireReply::Refused(r) => Err(r.into()),
        }
    }
}

/// A refusal's outcome: who holds, since when, and when to try again (or the lock-delay).
fn held_outcome(held: HeldReply) -> Outcome {
    let HeldReply {
        pttl,
        holder_id,
        lease_id,
        holder,
        arrived_ms,
        delayed,
        now_ms,
        since_ms,
    } = held;
    Outcome::Held {
        contention: Contention {
            holder: non_empty(holder),
            lease_id: lease_id.as_deref().and_then(LeaseId::parse),
            holder_id,
            retry_after: positive_ms(pttl),
            delayed_until: delayed.then(|| {
                Timestamp(now_ms.unwrap_or_else(crate::locks::wall_ms))
                    .plus(u64::try_from(pttl).unwrap_or(0))
            }),
            held: since_ms
                .zip(now_ms)
                .map(|(since, now)| Box::new((Timestamp(since), age(since, now)))),
        },
        arrived_ms: arrived_ms.unwrap_or(0),
    }
}

/// How long a hold granted at `since` has lasted at `now` (ms, Redis's clock).
fn age(since: u64, now: u64) -> Duration {
    Duration::from_millis(now.saturating_sub(since))
}

impl Locks {
    /// Takes back the level a reentry added when too few replicas have it (the lease is the
    /// client's: its own token lets one level go, in the mode it entered). Best effort: a
    /// level left behind only keeps the lock until the lease's TTL runs out.
    async fn give_back_level(
        &self,
        name: &LockName,
        g: &Granted,
        asked: &AcquireRequest,
        token: &LeaseToken,
    ) {
        let Some(lease) = LeaseId::parse(&g.lease_id) else {
            return;
        };
        let mode = match asked.kind.unwrap_or(g.kind) {
            LeaseKind::Read => Some(RwMode::Read),
            LeaseKind::Write => Some(RwMode::Write),
            _ => None,
        };
        let nonce = request_nonce();
        let how = ReleaseHow::Asked {
            all: false,
            mode,
            idempotency: None,
            nonce: &nonce,
        };
        if let Err(e) = self
            .release_how(Resource::Lock, name, lease, token, how)
            .await
        {
            tracing::warn!(lock = %name, error = %e, "could not give back an unreplicated reentry");
        }
    }
}

impl Locks {
    /// The live event of a grant (not of one answered again).
    fn publish_grant(&self, name: &LockName, kind: EventKind, g: &Granted) {
        if g.replayed {
            return;
        }
        let at_us = g.now_us.unwrap_or(g.now_ms * 1000);
        let Some(id) = LeaseId::parse(&g.lease_id) else {
            return;
        };
        let count = if g.kind == LeaseKind::Semaphore {
            "permits"
        } else {
            "reentry_count"
        };
        self.publish(
            &LockEvent::new(kind, name, g.now_ms)
                .lease(id, g.holder.as_deref().filter(|h| !h.is_empty()))
                .with("kind", g.kind.as_str())
                .with(count, g.reentry_count)
                .with("fencing_token", g.fencing_token)
                .with("ttl_ms", g.ttl_ms)
                .with("at_us", at_us),
        );
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn positive_ms(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// A grant's reply as this service answers it (`ops::replays` reads replies through it).
pub(super) fn grant(
    g: Granted,
    token: Option<LeaseToken>,
    new_lease: bool,
    acked: Option<Acked>,
) -> Result<Grant, LockError> {
    let lease_id = LeaseId::parse(&g.lease_id)
        .ok_or_else(|| LockError::BadReply(format!("lease id {:?}", g.lease_id)))?;
    Ok(Grant {
        lease_id,
        token,
        new_lease,
        replayed: g.replayed,
        kind: g.kind,
        holder: non_empty(g.holder),
        fencing_token: FencingToken(g.fencing_token),
        reentry_count: g.reentry_count,
        // A grant answered again (a ticket polled after its grant, a retried key) has had
        // part of its TTL already: the answer says what is left, so that a client counting
        // from its request (as every client must) never counts past the expiry. (Found by
        // the safety harness's replicas-stalled fault: a poll whose grant waited for replicas
        // was answered 503, the next poll replayed it with the whole TTL.)
        ttl_ms: match (g.replayed, g.expires_ms) {
            (true, Some(expires)) => expires.saturating_sub(g.now_ms).min(g.ttl_ms),
            _ => g.ttl_ms,
        },
        acquired_at: Timestamp(g.created_ms),
        expires_at: Timestamp(g.expires_ms.unwrap_or(g.now_ms.saturating_add(g.ttl_ms))),
        replicas_acked: acked.map(|a| a.acked),
        degraded: acked.and_then(Acked::degraded),
    })
}

/// One attempt of the waiting loop: the turn to call Redis first, then the attempt, so that
/// in a burst a request waiting for its turn holds nothing but its place. Until the script
/// answers, the request may have been granted (reentries are never rolled back: the lease is
/// the client's already).
pub(super) async fn attempt_in_turn(
    request: &mut InFlight,
    target: &Target<'_>,
    liveness: Duration,
    arrived_ms: u64,
    polls_clients_ticket: bool,
) -> Result<Outcome, LockError> {
    let Some(turn) = request.locks.turn().await else {
        return Err(LockError::Busy);
    };
    let reentry = request.op == Op::Reenter;
    request.may_hold = request
        .may_hold
        .after(Step::Sending { reentry }, polls_clients_ticket);
    let request = &*request;
    request
        .locks
        .attempt(&request.name, target, request, liveness, arrived_ms, &turn)
        .await
}
