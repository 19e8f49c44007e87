//! Acquiring with a server-side wait, for every kind: one attempt script call, then a wait for
//! a wake-up (the lock's channel, a fair waiter's own channel, or a semaphore's), or for the
//! holder's TTL to run out, or for the deadline. Never a fixed poll.
//!
//! A waiter whose caller goes away (the HTTP request's future is dropped) gives back what it
//! may have got: a grant that may have happened is rolled back (only that grant, and only if
//! no other request has answered with it since), a place in a fair queue or in the
//! waiting-writers line is left, and the next waiter is woken if that matters. A ticket's
//! poll that fails on Redis or shutdown keeps the ticket's place: its client still has it.

use std::time::Duration;

use tokio::time::Instant;

use super::error::LockError;
use super::model::{
    Acquired, Contention, Grant, HolderLabel, IdempotencyKey, LeaseId, LeaseToken, LockKind,
    LockName, Metadata, PermitRequest, RwPolicy, Ticket, Timestamp, Ttl, fingerprint,
    request_nonce,
};
use super::replies::{AcquireReply, Granted, non_empty, parse};
use super::{Family, Locks, ReleaseHow, scripts};
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
        idempotency: Option<&'a IdempotencyKey>,
    },
    Semaphore(&'a PermitRequest),
}

impl Target<'_> {
    fn op(&self) -> Option<Op> {
        match self {
            Self::Lock { op, .. } => Some(*op),
            Self::Semaphore(_) => None,
        }
    }

    fn idempotency(&self) -> Option<&IdempotencyKey> {
        match self {
            Self::Lock { idempotency, .. } => *idempotency,
            Self::Semaphore(request) => request.idempotency.as_ref(),
        }
    }

    /// A fair waiter is woken on its own channel; everyone else on the lock's.
    fn fair(&self) -> bool {
        matches!(
            self,
            Self::Lock {
                kind: Some(LockKind::Fair),
                ..
            } | Self::Lock { op: Op::Poll, .. }
        )
    }
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
        /// The ticket (another request's, when a retried Idempotency-Key replays it).
        ticket: LeaseId,
        token: Option<LeaseToken>,
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
        let deadline = Instant::now() + wait;
        let keys = self.inner.keys.lock(name);
        let writer = matches!(
            &target,
            Target::Lock {
                kind: Some(LockKind::Write),
                ..
            }
        );
        // A ticket issued by this request shows its token; a polled one's client has it.
        let mut issues_ticket = target.op() == Some(Op::New);
        let mut guard = GiveBack {
            locks: self.clone(),
            name: name.clone(),
            semaphore: target.op().is_none(),
            id,
            token,
            nonce: request_nonce(),
            roll_back: false,
            leave: false,
        };
        let meter = AcquireMeter {
            started: Instant::now(),
            requested_kind: requested_kind(&target),
        };
        let mut arrived_ms = 0;
        let mut woke: Option<(Instant, Wake)> = None;
        let mut registration: Option<(LeaseId, super::waiters::Registration)> = None;
        loop {
            // Registered before the attempt, so a wake-up right after a refusal is not lost.
            if !wait.is_zero()
                && registration
                    .as_ref()
                    .is_none_or(|(rid, _)| *rid != guard.id)
            {
                let wake_key = if target.fair() {
                    keys.waiter(guard.id)
                } else {
                    keys.lock().to_owned()
                };
                registration = Some((guard.id, self.inner.waiters.register(&wake_key)));
            }
            let notified = registration.as_ref().map(|(_, r)| r.notified());
            let liveness =
                deadline.saturating_duration_since(Instant::now()) + self.inner.ticket_timeout;
            // Until the script answers, it may have granted (reentries are never rolled back:
            // the lease is the client's already).
            guard.roll_back = target.op() != Some(Op::Reenter);
            let attempt = self
                .attempt(name, &target, &guard, liveness, arrived_ms)
                .await;
            guard.roll_back = false;
            let outcome = match attempt {
                Ok(outcome) => outcome,
                Err(e) => {
                    self.observe_refusal(guard.id, &e);
                    let failed = matches!(
                        e,
                        LockError::Unavailable(_)
                            | LockError::Script(_)
                            | LockError::TooLate
                            | LockError::ShuttingDown
                            | LockError::BadReply(_)
                    );
                    if failed && target.op() == Some(Op::Poll) {
                        // The ticket's client still has it and will poll again: a grant this
                        // attempt may have made is answered to that poll, and the place stays.
                        guard.leave = false;
                    } else if failed {
                        guard.roll_back = target.op() != Some(Op::Reenter);
                    }
                    let outcome = if failed {
                        AcquireOutcome::failed
                    } else {
                        AcquireOutcome::refused
                    };
                    self.finish(&meter, name, meter.requested_kind, outcome, woke.is_some());
                    return Err(e);
                }
            };
            let retry = match outcome {
                Outcome::Granted(grant) => {
                    guard.leave = false;
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
                    ticket,
                    token,
                    position,
                    retry,
                    poll_by,
                } => {
                    if ticket != guard.id {
                        // A retried Idempotency-Key: go on as the first request's ticket.
                        guard.id = ticket;
                        issues_ticket = true;
                    }
                    if let Some(token) = token {
                        guard.token = token;
                    }
                    if let Target::Lock { op, .. } = &mut target {
                        *op = Op::Poll;
                    }
                    // Leave the queue if the client goes away while waiting.
                    guard.leave = true;
                    if Instant::now() >= deadline || notified.is_none() {
                        // The ticket keeps its place for the client to poll.
                        guard.leave = false;
                        let waited = woke.is_some();
                        self.finish(&meter, name, "fair", AcquireOutcome::queued, waited);
                        return Ok(Acquired::Queued(Ticket {
                            lease_id: guard.id,
                            token: issues_ticket.then(|| guard.token.clone()),
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
                    // A waiting writer stands in line (fifo policy) until it leaves.
                    guard.leave = writer;
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
                    if target.op() == Some(Op::Poll) && !issues_ticket {
                        // The client polls its ticket again elsewhere: keep its place.
                        guard.leave = false;
                    }
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

    async fn attempt(
        &self,
        name: &LockName,
        target: &Target<'_>,
        request: &GiveBack,
        liveness: Duration,
        arrived_ms: u64,
    ) -> Result<Outcome, LockError> {
        let (id, token) = (request.id, &request.token);
        let digest = token.digest().hex();
        let idempotency = target.idempotency();
        let key_digest = idempotency
            .map(IdempotencyKey::digest_hex)
            .unwrap_or_default();
        // A new lease's token, sealed under the key, so that a retry can be handed it.
        let sealed = match (idempotency, target.op()) {
            (Some(key), Some(Op::New) | None) => key.seal(token),
            _ => String::new(),
        };
        let raw: String = match target {
            Target::Lock {
                op,
                kind,
                policy,
                ttl,
                holder,
                metadata,
                ..
            } => {
                let ttl_ms = ttl.map_or(0, Ttl::as_millis).to_string();
                let kind = kind.map_or("", LockKind::as_str);
                let holder = holder.map_or("", |h| h.as_str());
                let metadata = metadata.map(|m| m.to_json()).unwrap_or_default();
                // What a retry must repeat for the key to replay: for a reentry, the lease it
                // proves; for a new lease, everything the lease is made of.
                let fp = fingerprint(&[
                    "acquire",
                    op.as_str(),
                    kind,
                    &ttl_ms,
                    holder,
                    &metadata,
                    policy.as_str(),
                    if *op == Op::Reenter { &digest } else { "" },
                ]);
                let mut invocation = self.prepared(&scripts::ACQUIRE, name, Family::Lock);
                invocation
                    .arg(ttl_ms)
                    .arg(op.as_str())
                    .arg(id.to_string())
                    .arg(&digest)
                    .arg(holder)
                    .arg(metadata)
                    .arg(kind)
                    .arg(policy.as_str())
                    .arg(millis(liveness))
                    .arg(arrived_ms)
                    .arg(&request.nonce)
                    .arg(key_digest)
                    .arg(fp)
                    .arg(&sealed);
                self.invoke("acquire", &invocation).await?
            }
            Target::Semaphore(request_body) => {
                let holder = request_body.holder.as_ref().map_or("", HolderLabel::as_str);
                let metadata = request_body
                    .metadata
                    .as_ref()
                    .map(Metadata::to_json)
                    .unwrap_or_default();
                let fp = fingerprint(&[
                    "acquire_permits",
                    &request_body.ttl.as_millis().to_string(),
                    holder,
                    &metadata,
                    &request_body.limit.to_string(),
                    &request_body.permits.to_string(),
                ]);
                let mut invocation =
                    self.prepared(&scripts::SEMAPHORE_ACQUIRE, name, Family::Semaphore);
                invocation
                    .arg(request_body.ttl.as_millis())
                    .arg(id.to_string())
                    .arg(&digest)
                    .arg(holder)
                    .arg(metadata)
                    .arg(request_body.limit)
                    .arg(request_body.permits)
                    .arg(&request.nonce)
                    .arg(key_digest)
                    .arg(fp)
                    .arg(&sealed);
                self.invoke("semaphore_acquire", &invocation).await?
            }
        };
        let reentry = target.op() == Some(Op::Reenter);
        let shown = (!reentry).then(|| token.clone());
        let unseal = |sealed: &Option<String>| {
            sealed
                .as_deref()
                .filter(|s| !s.is_empty())
                .and_then(|s| idempotency.and_then(|key| key.unseal(s)))
        };
        match parse::<AcquireReply>(&raw)? {
            AcquireReply::Acquired(g) => {
                // A replayed new lease shows the first token (unsealed with the key); a ticket
                // polled again shows none (its client has it).
                let shown = match (g.replayed, unseal(&g.sealed)) {
                    (_, Some(first)) => Some(first),
                    (true, None) => None,
                    (false, None) => shown,
                };
                Ok(Outcome::Granted(grant(g, shown, true)?))
            }
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
                lease_id,
                position,
                pttl,
                deadline_ms,
                sealed,
            } => Ok(Outcome::Queued {
                ticket: LeaseId::parse(&lease_id)
                    .ok_or_else(|| LockError::BadReply(format!("ticket id {lease_id:?}")))?,
                token: unseal(&sealed),
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
            AcquireReply::IdempotencyMismatch => Err(LockError::IdempotencyMismatch),
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
        replayed: g.replayed,
        kind: g.kind,
        holder: non_empty(g.holder),
        fencing_token: super::FencingToken(g.fencing_token),
        reentry_count: g.reentry_count,
        ttl_ms: g.ttl_ms,
        acquired_at: Timestamp(g.created_ms),
        expires_at: Timestamp(g.expires_ms.unwrap_or(g.now_ms.saturating_add(g.ttl_ms))),
    })
}

/// What one acquire request may hold that its client does not know about, given back when
/// the request is dropped (its client went away) or fails.
struct GiveBack {
    locks: Locks,
    name: LockName,
    semaphore: bool,
    /// The lease (or ticket) this request acts for, and its token.
    id: LeaseId,
    token: LeaseToken,
    /// Names the grants this request makes: only they may be rolled back by it.
    nonce: String,
    /// A grant may have happened that no answer has carried yet: take it back.
    roll_back: bool,
    /// A queue place (fair ticket, waiting writer) held for this request: give it up.
    leave: bool,
}

impl Drop for GiveBack {
    fn drop(&mut self) {
        if !self.roll_back && !self.leave {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (locks, name, id, token, nonce) = (
            self.locks.clone(),
            self.name.clone(),
            self.id,
            self.token.clone(),
            std::mem::take(&mut self.nonce),
        );
        let (semaphore, rollback) = (self.semaphore, self.roll_back);
        runtime.spawn(async move {
            if rollback {
                let how = ReleaseHow::Rollback { nonce: &nonce };
                let undone = if semaphore {
                    locks.release_permits_because(&name, id, &token, how).await
                } else {
                    locks.release_because(&name, id, &token, how).await
                };
                match undone {
                    Ok(_) => tracing::info!(lock = %name, lease_id = %id, "rolled back a grant whose client went away"),
                    Err(
                        LockError::UnknownLease
                        | LockError::TicketPending
                        | LockError::LeaseLost(_)
                        | LockError::NotRolledBack,
                    ) => {}
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
