//! Acquiring with a server-side wait, for every kind: one attempt script call, then a wait for
//! a wake-up (the lock's channel, a fair waiter's own channel, or a semaphore's), or for the
//! holder's TTL to run out, or for the deadline. Never a fixed poll.
//!
//! A waiter whose caller goes away (the HTTP request's future is dropped) gives back what it
//! may have got: a grant that may have happened is rolled back, a place in a fair queue or in
//! the waiting-writers line is left, and the next waiter is woken if that matters.

use std::time::Duration;

use tokio::time::Instant;

use super::error::LockError;
use super::keys::LockKeys;
use super::model::{
    Acquired, Contention, Grant, HolderLabel, LeaseId, LeaseToken, LockKind, LockName, Metadata,
    PermitRequest, RwPolicy, Ticket, Timestamp, Ttl,
};
use super::replies::{AcquireReply, Granted, non_empty, parse};
use super::{Family, Locks, prepared, scripts};
use crate::metrics::{AcquireOutcome, Wake, kind_label};

/// What is being acquired.
pub(super) enum Target<'a> {
    Lock {
        op: Op,
        kind: Option<LockKind>,
        policy: RwPolicy,
        ttl: Option<Ttl>,
        holder: Option<&'a HolderLabel>,
        metadata: Option<&'a Metadata>,
    },
    Semaphore(&'a PermitRequest),
}

/// How a lock attempt identifies itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    /// A new lease (id and token made here).
    New,
    /// One more level of the lease the token proves.
    Reenter,
    /// A fair queue ticket tries again.
    Poll,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::Reenter => "reenter",
            Self::Poll => "poll",
        }
    }
}

/// One attempt's outcome.
enum Outcome {
    Granted(Grant),
    Queued {
        position: u64,
        retry: Option<Duration>,
        poll_by: Timestamp,
    },
    Held {
        contention: Contention,
        arrived_ms: u64,
    },
}

impl Locks {
    /// Tries to acquire `target` as lease `id` until granted, queued past the deadline (fair
    /// locks: a ticket), or refused at the deadline.
    pub(super) async fn acquire_waiting(
        &self,
        name: &LockName,
        mut target: Target<'_>,
        id: LeaseId,
        token: LeaseToken,
        wait: Duration,
    ) -> Result<Acquired, LockError> {
        let keys = self.inner.keys.lock(name);
        let deadline = Instant::now() + wait;
        let fair = matches!(
            &target,
            Target::Lock {
                kind: Some(LockKind::Fair),
                ..
            }
        ) || matches!(&target, Target::Lock { op: Op::Poll, .. });
        let writer = matches!(
            &target,
            Target::Lock {
                kind: Some(LockKind::Write),
                ..
            }
        );
        let wake_key = if fair {
            keys.waiter(id)
        } else {
            keys.lock().to_owned()
        };
        let registration = (!wait.is_zero()).then(|| self.inner.waiters.register(&wake_key));
        let reentry = matches!(
            &target,
            Target::Lock {
                op: Op::Reenter,
                ..
            }
        );
        // A ticket issued by this request shows its token; a polled one's client has it.
        let issues_ticket = matches!(&target, Target::Lock { op: Op::New, .. });
        let mut guard = AbandonOnDrop {
            locks: self.clone(),
            name: name.clone(),
            semaphore: matches!(&target, Target::Semaphore(_)),
            id,
            token: token.clone(),
            grant_in_flight: false,
            in_line: matches!(&target, Target::Lock { op: Op::Poll, .. }),
        };
        let mut arrived_ms = 0;
        let meter = AcquireMeter {
            started: Instant::now(),
            requested_kind: requested_kind(&target),
        };
        let mut woke: Option<(Instant, Wake)> = None;
        loop {
            // Registered before the attempt, so a wake-up right after a refusal is not lost.
            let notified = registration.as_ref().map(|r| r.notified());
            let liveness =
                deadline.saturating_duration_since(Instant::now()) + self.inner.ticket_timeout;
            guard.grant_in_flight = !reentry;
            let outcome = match self
                .attempt(name, &keys, &target, id, &token, liveness, arrived_ms)
                .await
            {
                Ok(outcome) => outcome,
                Err(e) => {
                    self.observe_refusal(id, &e);
                    let outcome = match e {
                        LockError::Unavailable(_)
                        | LockError::ShuttingDown
                        | LockError::BadReply(_) => AcquireOutcome::failed,
                        _ => AcquireOutcome::refused,
                    };
                    self.finish(&meter, name, meter.requested_kind, outcome, woke.is_some());
                    return Err(e);
                }
            };
            guard.grant_in_flight = false;
            let retry = match outcome {
                Outcome::Granted(grant) => {
                    guard.in_line = false;
                    let kind = kind_label(&grant.kind);
                    let outcome = if grant.new_lease {
                        AcquireOutcome::granted
                    } else {
                        AcquireOutcome::reentered
                    };
                    let metrics = &self.inner.metrics;
                    metrics.lease_live(grant.lease_id, Duration::from_millis(grant.ttl_ms));
                    if let Some((at, wake)) = woke {
                        metrics.handoff(kind, wake, at.elapsed());
                    }
                    self.finish(&meter, name, kind, outcome, woke.is_some());
                    return Ok(Acquired::Granted(grant));
                }
                Outcome::Queued {
                    position,
                    retry,
                    poll_by,
                } => {
                    guard.in_line = true;
                    if let Target::Lock { op, .. } = &mut target {
                        *op = Op::Poll;
                    }
                    if Instant::now() >= deadline || notified.is_none() {
                        // The ticket keeps its place for the client to poll.
                        guard.in_line = false;
                        let waited = woke.is_some();
                        self.finish(&meter, name, "fair", AcquireOutcome::queued, waited);
                        return Ok(Acquired::Queued(Ticket {
                            lease_id: id,
                            token: issues_ticket.then(|| token.clone()),
                            position,
                            poll_by,
                        }));
                    }
                    retry
                }
                Outcome::Held {
                    contention,
                    arrived_ms: arrived,
                } => {
                    arrived_ms = arrived;
                    guard.in_line = writer;
                    if Instant::now() >= deadline || notified.is_none() {
                        let outcome = if notified.is_none() {
                            AcquireOutcome::contended
                        } else {
                            AcquireOutcome::timed_out
                        };
                        let waited = woke.is_some();
                        self.finish(&meter, name, meter.requested_kind, outcome, waited);
                        return Err(LockError::Held(contention));
                    }
                    contention.retry_after
                }
            };
            let now = Instant::now();
            // The holder's TTL (or the waiter ahead's deadline) running out wakes nobody
            // through pub/sub: retry then as well.
            let retry_at = retry.map_or(deadline, |d| {
                (now + d + Duration::from_millis(1)).min(deadline)
            });
            let Some(notified) = notified else {
                unreachable!("checked above")
            };
            let wake = tokio::select! {
                () = notified => Wake::message,
                () = tokio::time::sleep_until(retry_at) => Wake::timer,
                () = self.inner.shutdown.cancelled() => {
                    self.finish(&meter, name, meter.requested_kind, AcquireOutcome::failed, true);
                    return Err(LockError::ShuttingDown);
                }
            };
            woke = Some((Instant::now(), wake));
        }
    }

    /// Counts one acquire request; `waited`: it waited at least once.
    fn finish(
        &self,
        meter: &AcquireMeter,
        name: &LockName,
        kind: &'static str,
        outcome: AcquireOutcome,
        waited: bool,
    ) {
        let metrics = &self.inner.metrics;
        metrics.acquisition(name.as_str(), kind, outcome);
        if waited {
            metrics.waited(kind, outcome, meter.started.elapsed());
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &self,
        name: &LockName,
        keys: &LockKeys,
        target: &Target<'_>,
        id: LeaseId,
        token: &LeaseToken,
        liveness: Duration,
        arrived_ms: u64,
    ) -> Result<Outcome, LockError> {
        let digest = token.digest();
        let raw: String = match target {
            Target::Lock {
                op,
                kind,
                policy,
                ttl,
                holder,
                metadata,
            } => {
                let mut invocation = prepared(&scripts::ACQUIRE, keys, Family::Lock);
                invocation
                    .arg(ttl.map_or(0, Ttl::as_millis))
                    .arg(op.as_str())
                    .arg(id.to_string())
                    .arg(digest.hex())
                    .arg(holder.map_or("", |h| h.as_str()))
                    .arg(metadata.map(|m| m.to_json()).unwrap_or_default())
                    .arg(name.as_str())
                    .arg(&self.inner.events_channel)
                    .arg(self.inner.tombstone_ms)
                    .arg(kind.map_or("", LockKind::as_str))
                    .arg(policy.as_str())
                    .arg(millis(liveness))
                    .arg(arrived_ms);
                self.invoke("acquire", &invocation).await?
            }
            Target::Semaphore(request) => {
                let mut invocation = prepared(&scripts::SEMAPHORE_ACQUIRE, keys, Family::Semaphore);
                invocation
                    .arg(request.ttl.as_millis())
                    .arg(id.to_string())
                    .arg(digest.hex())
                    .arg(request.holder.as_ref().map_or("", HolderLabel::as_str))
                    .arg(
                        request
                            .metadata
                            .as_ref()
                            .map(Metadata::to_json)
                            .unwrap_or_default(),
                    )
                    .arg(name.as_str())
                    .arg(&self.inner.events_channel)
                    .arg(self.inner.tombstone_ms)
                    .arg(request.limit)
                    .arg(request.permits);
                self.invoke("semaphore_acquire", &invocation).await?
            }
        };
        let reentry = matches!(
            target,
            Target::Lock {
                op: Op::Reenter,
                ..
            }
        );
        let shown = (!reentry).then(|| token.clone());
        match parse::<AcquireReply>(&raw)? {
            AcquireReply::Acquired(g) => Ok(Outcome::Granted(grant(g, shown, true)?)),
            AcquireReply::Reentered(g) => Ok(Outcome::Granted(grant(g, None, false)?)),
            AcquireReply::Held {
                pttl,
                holder_id,
                lease_id,
                holder,
                arrived_ms,
            } => Ok(Outcome::Held {
                contention: Contention {
                    holder: non_empty(holder),
                    lease_id: lease_id.as_deref().and_then(LeaseId::parse),
                    holder_id,
                    retry_after: positive_ms(pttl),
                },
                arrived_ms: arrived_ms.unwrap_or(0),
            }),
            AcquireReply::Queued {
                position,
                pttl,
                deadline_ms,
            } => Ok(Outcome::Queued {
                position,
                retry: positive_ms(pttl),
                poll_by: Timestamp(deadline_ms),
            }),
            AcquireReply::UnknownToken => Err(LockError::UnknownToken),
            AcquireReply::TicketToken => Err(LockError::TicketPending),
            AcquireReply::TicketExpired => Err(LockError::TicketExpired),
            AcquireReply::KindConflict { held_as } => Err(LockError::KindConflict { held_as }),
            AcquireReply::NotReentrant => Err(LockError::NotReentrant),
            AcquireReply::UpgradeRefused => Err(LockError::UpgradeRefused),
            AcquireReply::LimitMismatch { limit } => Err(LockError::LimitMismatch { limit }),
            AcquireReply::Refused(r) => Err(r.into()),
        }
    }
}

/// When an acquire request started, and what kind it asked for (the metrics' label until a
/// grant names the lease's own kind).
struct AcquireMeter {
    started: Instant,
    requested_kind: &'static str,
}

fn requested_kind(target: &Target<'_>) -> &'static str {
    match target {
        Target::Semaphore(_) => "semaphore",
        Target::Lock { op: Op::Poll, .. } => "fair",
        Target::Lock { kind: Some(k), .. } => kind_label(k.as_str()),
        // A reentry without a kind re-enters whatever its lease is.
        Target::Lock { kind: None, .. } => "other",
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn positive_ms(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

fn grant(g: Granted, token: Option<LeaseToken>, new_lease: bool) -> Result<Grant, LockError> {
    let lease_id = LeaseId::parse(&g.lease_id)
        .ok_or_else(|| LockError::BadReply(format!("lease id {:?}", g.lease_id)))?;
    Ok(Grant {
        lease_id,
        token,
        new_lease,
        kind: g.kind,
        holder: non_empty(g.holder),
        fencing_token: super::FencingToken(g.fencing_token),
        reentry_count: g.reentry_count,
        ttl_ms: g.ttl_ms,
        acquired_at: Timestamp(g.created_ms),
        expires_at: Timestamp(g.now_ms).plus(g.ttl_ms),
    })
}

/// Gives back what a dropped waiter may hold: a grant that may have happened while its script
/// was in flight (the client will never learn the token, so the lease would only block others
/// until its TTL), and its place in a fair queue or the waiting-writers line.
struct AbandonOnDrop {
    locks: Locks,
    name: LockName,
    semaphore: bool,
    id: LeaseId,
    token: LeaseToken,
    grant_in_flight: bool,
    in_line: bool,
}

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        if !self.grant_in_flight && !self.in_line {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (locks, name, id, token) = (
            self.locks.clone(),
            self.name.clone(),
            self.id,
            self.token.clone(),
        );
        let (semaphore, rollback) = (self.semaphore, self.grant_in_flight);
        runtime.spawn(async move {
            if rollback {
                let undone = if semaphore {
                    locks.release_permits_because(&name, id, &token, "client_gone").await
                } else {
                    locks.release_because(&name, id, &token, true, None, "client_gone").await
                };
                match undone {
                    Ok(_) => tracing::info!(lock = %name, lease_id = %id, "rolled back a grant whose client went away"),
                    Err(LockError::UnknownLease | LockError::TicketPending | LockError::LeaseLost(_)) => {}
                    Err(e) => tracing::warn!(lock = %name, lease_id = %id, error = %e, "could not roll back an undelivered grant"),
                }
            }
            if !semaphore && let Err(e) = locks.leave(&name, id, &token).await {
                match e {
                    LockError::UnknownLease | LockError::LeaseLost(_) => {}
                    e => tracing::warn!(lock = %name, lease_id = %id, error = %e, "could not leave the queue"),
                }
            }
        });
    }
}
