//! Acquiring with a server-side wait, for every kind: one attempt script call, then a wait for
//! a wake-up (the lock's channel, a fair waiter's own channel, or a semaphore's), or for the
//! holder's TTL to run out, or for the deadline. Never a fixed poll.
//!
//! A request whose caller goes away (the HTTP request's future is dropped) gives back what it
//! may have got ([`MayHold`]): a grant that may have happened is rolled back (only that grant,
//! and only if no other request has answered with it since), a place in a fair queue or in
//! the waiting-writers line is left. A ticket's poll that fails on Redis or shutdown keeps the
//! ticket's place: its client still has the ticket and polls again.

use std::pin::pin;
use std::time::Duration;

use futures_util::FutureExt as _;
use tokio::time::Instant;

use crate::locks::error::LockError;
use crate::locks::feed::waitlist::Wanted;
use crate::locks::observer::{AcquireOutcome, AcquireReport, Wake};
use crate::locks::scripts::acquire::{Acquire, AcquireReply, Granted, Op};
use crate::locks::scripts::non_empty;
use crate::locks::scripts::semaphore_acquire::SemaphoreAcquire;
use crate::locks::types::{
    AcquireRequest, Acquired, Contention, Grant, HolderLabel, IdempotencyKey, LeaseId, LeaseToken,
    LockName, Metadata, PermitRequest, RwPolicy, Ticket, Timestamp, Ttl, request_nonce,
};
use crate::locks::types::{LeaseKind, Resource};
use crate::locks::wakeups::{Parking, Registration};
use crate::locks::{EventKind, FencingToken, LockEvent, Locks};

/// What is being acquired.
enum Target<'a> {
    Lock {
        op: Op,
        kind: Option<LeaseKind>,
        policy: RwPolicy,
        ttl: Option<Ttl>,
        /// Owned, not borrowed from the request: the waiting future is then the one place
        /// a parked waiter keeps them.
        holder: Option<HolderLabel>,
        metadata: Option<Metadata>,
        idempotency: Option<IdempotencyKey>,
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

    /// The kind asked for, when known before the grant (a reentry takes its lease's).
    fn kind(&self) -> Option<LeaseKind> {
        match self {
            Self::Lock { op: Op::Poll, .. } => Some(LeaseKind::Fair),
            Self::Lock { kind, .. } => *kind,
            Self::Semaphore(_) => Some(LeaseKind::Semaphore),
        }
    }

    fn resource(&self) -> Resource {
        match self {
            Self::Lock { .. } => Resource::Lock,
            Self::Semaphore(_) => Resource::Semaphore,
        }
    }

    /// What the waiting list shows of this request (see `waitlist`).
    fn wanted(&self) -> Wanted<'_> {
        match self {
            Self::Lock { holder, .. } => Wanted {
                kind: self.kind(),
                holder: holder.as_ref().map(HolderLabel::as_str),
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

/// What a request holds that its client may not know about, to give back if the request is
/// dropped (its client went away) or fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MayHold {
    Nothing,
    /// A place in a line: a fair ticket, or a waiting writer's place (fifo readers wait
    /// behind it).
    Place,
    /// A grant its attempt may have made with no answer carrying it yet.
    Grant,
    GrantOrPlace,
}

impl MayHold {
    fn and_grant(self) -> Self {
        match self {
            Self::Nothing | Self::Grant => Self::Grant,
            Self::Place | Self::GrantOrPlace => Self::GrantOrPlace,
        }
    }

    fn answered(self) -> Self {
        match self {
            Self::Nothing | Self::Grant => Self::Nothing,
            Self::Place | Self::GrantOrPlace => Self::Place,
        }
    }

    fn grant(self) -> bool {
        matches!(self, Self::Grant | Self::GrantOrPlace)
    }
}

impl Locks {
    /// Acquires `name` for a new lease of `request.kind`, or re-enters the lease
    /// `request.token` proves, waiting up to `wait` (from this call) while the lock is taken.
    /// A fair lock still queued when the wait ends answers with a [`Ticket`] that keeps its
    /// place.
    ///
    /// Not an `async fn`: `request` goes whole into the waiting future, which is the only
    /// future here (an async fn would keep its arguments beside it for the whole wait), and
    /// borrows nothing, so a caller can make it ahead and box it.
    pub fn acquire(
        &self,
        name: &LockName,
        request: AcquireRequest,
        ttl: Ttl,
        wait: Duration,
    ) -> impl Future<Output = Result<Acquired, LockError>> + Send + use<> {
        let (op, token, ttl) = match request.token {
            // The script finds the lease from the token.
            Some(token) => (Op::Reenter, token, request.ttl),
            None => (Op::New, LeaseToken::generate(), Some(ttl)),
        };
        let id = token.lease_id();
        let target = Target::Lock {
            op,
            kind: request
                .kind
                .or((op == Op::New).then_some(LeaseKind::Reentrant)),
            policy: request.policy,
            ttl,
            holder: request.holder,
            metadata: request.metadata,
            idempotency: request.idempotency,
        };
        Self::acquire_waiting(self.clone(), name.clone(), target, id, token, wait)
    }

    /// A fair-queue ticket tries again, waiting up to `wait`: the lease (also when it was
    /// granted before: the same grant again), or the ticket still queued.
    pub fn poll_ticket<'a>(
        &'a self,
        name: &'a LockName,
        ticket: LeaseId,
        token: LeaseToken,
        wait: Duration,
    ) -> impl Future<Output = Result<Acquired, LockError>> + Send + 'a {
        let target = Target::Lock {
            op: Op::Poll,
            kind: Some(LeaseKind::Fair),
            policy: RwPolicy::default(),
            ttl: None,
            holder: None,
            metadata: None,
            idempotency: None,
        };
        Self::acquire_waiting(self.clone(), name.clone(), target, ticket, token, wait)
    }

    /// Takes `request.permits` permits of semaphore `name` for a new lease, waiting up to
    /// `wait` for permits to free up (released, or expired).
    pub fn acquire_permits<'a>(
        &'a self,
        name: &'a LockName,
        request: &'a PermitRequest,
        wait: Duration,
    ) -> impl Future<Output = Result<Grant, LockError>> + Send + 'a {
        let target = Target::Semaphore(request);
        let token = LeaseToken::generate();
        let id = token.lease_id();
        // `map`, not an async block: the waiting future is kept once, not also as a capture.
        Self::acquire_waiting(self.clone(), name.clone(), target, id, token, wait).map(|acquired| {
            match acquired? {
                Acquired::Granted(grant) => Ok(grant),
                Acquired::Queued(_) => {
                    Err(LockError::BadReply("a semaphore queued a ticket".into()))
                }
            }
        })
    }

    /// Tries to acquire `target` as lease `id` until granted, queued past the deadline (fair
    /// locks: a ticket), or refused at the deadline.
    ///
    /// Not an `async fn`: an async fn keeps each argument twice (as passed, and as its own
    /// local) for as long as it runs, and a parked waiter runs for its whole wait.
    fn acquire_waiting<'a>(
        locks: Locks,
        name: LockName,
        mut target: Target<'a>,
        id: LeaseId,
        token: LeaseToken,
        wait: Duration,
    ) -> impl Future<Output = Result<Acquired, LockError>> + Send + 'a {
        let deadline = Instant::now() + wait;
        // A ticket issued by this request shows its token; a polled one's client has it.
        let mut issues_ticket = target.op() == Some(Op::New);
        let mut replayed_ticket = false;
        // Made here, not in the future: what the future captures it keeps for its whole run,
        // so anything moved from a capture into a local there would be kept twice.
        let mut request = InFlight {
            locks,
            name,
            resource: target.resource(),
            id,
            token,
            nonce: request_nonce(),
            may_hold: MayHold::Nothing,
            listed: None,
        };
        async move {
            // Used whole, through a reference: the future then owns the whole request (never
            // its fields apart), and drops it when it ends, seeing every change made here.
            let request = &mut request;
            // The request owns them: its drop (the client gone) needs them.
            let (locks, name) = (&request.locks, &request.name);
            let mut report = Report::new(target.kind());
            let mut arrived_ms = 0;
            let mut registration: Option<(LeaseId, Registration)> = None;
            loop {
                // Registered before the attempt, so a wake-up right after a refusal is not lost.
                if !wait.is_zero()
                    && registration
                        .as_ref()
                        .is_none_or(|(rid, _)| *rid != request.id)
                {
                    let wake_key = locks.wake_key(name, &target, request.id);
                    registration = Some((request.id, locks.inner.waiters.register(&wake_key)));
                }
                // Pinned in place: the wait below polls it through a reference, so a parked
                // waiter keeps it once.
                let mut notified = pin!(registration.as_ref().map(|(_, r)| r.notified()));
                // Whether this process hears unlock messages from here on (see `park` below).
                let epoch = locks.inner.waiters.epoch();
                let ticket_timeout = Duration::from_millis(locks.inner.settings.ticket_timeout_ms);
                let liveness = deadline.saturating_duration_since(Instant::now()) + ticket_timeout;
                // A first refusal puts the request on the waiting list (after the block below).
                let mut enlist = false;
                // In a block: the attempt's reply and the refusal it carries are done with once
                // the retry time is known, and must not stay in the parked waiter's future.
                let retry = {
                    // The turn to call Redis first, then the attempt's future: in a burst, a
                    // request waiting for its turn holds nothing but its place. Waiting for it
                    // is boxed: its timer, inline, would grow every parked waiter's future.
                    let turn = match locks.free_turn() {
                        Some(turn) => Some(turn),
                        None => Box::pin(locks.turn()).await,
                    };
                    let attempt = match turn {
                        Some(turn) => {
                            // Until the script answers, it may have granted (reentries are never
                            // rolled back: the lease is the client's already).
                            if target.op() != Some(Op::Reenter) {
                                request.may_hold = request.may_hold.and_grant();
                            }
                            // Boxed: the attempt's future (script arguments, the Redis call) is
                            // large and lives only while it runs; inline, every parked waiter
                            // would keep room for it.
                            let attempt =
                                locks.attempt(name, &target, request, liveness, arrived_ms, &turn);
                            Box::pin(attempt).await
                        }
                        None => Err(LockError::Busy),
                    };
                    let outcome = match attempt {
                        Ok(outcome) => {
                            request.may_hold = request.may_hold.answered();
                            outcome
                        }
                        Err(e) => {
                            locks.observe_refusal(request.id, &e);
                            if e.unavailable() && target.op() == Some(Op::Poll) && !issues_ticket {
                                // The ticket's client polls again: it gets any grant this attempt
                                // made, and keeps its place.
                                request.may_hold = MayHold::Nothing;
                            } else if !e.unavailable() {
                                request.may_hold = request.may_hold.answered();
                            }
                            let outcome = if e.unavailable() {
                                AcquireOutcome::Failed
                            } else {
                                AcquireOutcome::Refused
                            };
                            locks.report(name, report.end(outcome));
                            return Err(e);
                        }
                    };
                    match outcome {
                        Outcome::Granted(grant) => {
                            locks
                                .inner
                                .observer
                                .lease_live(grant.lease_id, Duration::from_millis(grant.ttl_ms));
                            let outcome = if grant.new_lease {
                                AcquireOutcome::Granted
                            } else {
                                AcquireOutcome::Reentered
                            };
                            report.kind = Some(grant.kind);
                            locks.report(name, report.end(outcome));
                            return Ok(Acquired::Granted(grant));
                        }
                        Outcome::Queued {
                            ticket,
                            token,
                            position,
                            retry,
                            poll_by,
                        } => {
                            if ticket != request.id {
                                // A retried Idempotency-Key: go on as the first request's ticket.
                                request.id = ticket;
                                issues_ticket = true;
                                replayed_ticket = true;
                            }
                            if let Some(token) = token {
                                request.token = token;
                            }
                            if let Target::Lock {
                                op, idempotency, ..
                            } = &mut target
                            {
                                *op = Op::Poll;
                                // The ticket is the request now: its key's record holds the
                                // queued answer, which a retry replays (and then polls the
                                // ticket); a poll sent with the key would be another request
                                // under it, and refused.
                                *idempotency = None;
                            }
                            request.may_hold = MayHold::Place;
                            if Instant::now() >= deadline || notified.is_none() {
                                // The ticket keeps its place for the client to poll.
                                request.may_hold = MayHold::Nothing;
                                locks.report(name, report.end(AcquireOutcome::Queued));
                                return Ok(Acquired::Queued(Ticket {
                                    lease_id: request.id,
                                    token: issues_ticket.then(|| request.token.clone()),
                                    position,
                                    poll_by,
                                    replayed: replayed_ticket,
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
                            if target.kind().is_some_and(LeaseKind::stands_in_line) {
                                request.may_hold = MayHold::Place;
                            }
                            if Instant::now() >= deadline || notified.is_none() {
                                let outcome = if notified.is_none() {
                                    AcquireOutcome::Contended
                                } else {
                                    AcquireOutcome::TimedOut
                                };
                                locks.report(name, report.end(outcome));
                                return Err(LockError::Held(contention));
                            }
                            enlist = request.listed.is_none();
                            contention.retry_after
                        }
                    }
                };
                if enlist {
                    locks.enlist(name, target.wanted(), request.id, deadline);
                    request.listed = Some(request.id);
                }
                // A wait relies on an unlock message only if this process has listened since
                // before the attempt; if not, it listens now and tries again first (an unlock
                // in between was not heard). Boxed: a parked waiter keeps no room for it.
                let parking = tokio::select! {
                    parking = Box::pin(locks.inner.waiters.park(epoch, deadline)) => parking,
                    () = locks.inner.shutdown.cancelled() => Parking::Unheard,
                };
                let _reliance = match parking {
                    Parking::Heard(reliance) => Some(reliance),
                    Parking::Armed => continue,
                    Parking::Unheard => None,
                };
                // The holder's TTL (or the waiter ahead's deadline) running out wakes nobody
                // through pub/sub: retry then as well.
                let now = Instant::now();
                let retry_at = retry.map_or(deadline, |d| {
                    (now + d + Duration::from_millis(1)).min(deadline)
                });
                let Some(notified) = notified.as_mut().as_pin_mut() else {
                    unreachable!("a request that does not wait returned above")
                };
                let wake = tokio::select! {
                    () = notified => Wake::Message,
                    () = tokio::time::sleep_until(retry_at) => Wake::Timer,
                    () = locks.inner.shutdown.cancelled() => {
                        if target.op() == Some(Op::Poll) && !issues_ticket {
                            // The client polls its ticket again elsewhere: keep its place.
                            request.may_hold = MayHold::Nothing;
                        }
                        locks.report(name, report.end(AcquireOutcome::Failed));
                        return Err(LockError::ShuttingDown);
                    }
                };
                report.woke = Some((Instant::now(), wake));
            }
        }
    }

    /// The registry key a waiter is woken on: a fair waiter's own channel, else the lock's.
    fn wake_key(&self, name: &LockName, target: &Target<'_>, id: LeaseId) -> String {
        let keys = self.inner.keys.lock(name);
        if target.kind().is_some_and(LeaseKind::is_fair) {
            keys.waiter(id)
        } else {
            keys.lock().to_owned()
        }
    }

    fn report(&self, name: &LockName, report: Ended) {
        self.inner.observer.acquisition(AcquireReport {
            lock: name,
            kind: report.kind,
            outcome: report.outcome,
            waited: report.waited,
            handoff: report.handoff,
        });
    }

    async fn attempt(
        &self,
        name: &LockName,
        target: &Target<'_>,
        request: &InFlight,
        liveness: Duration,
        arrived_ms: u64,
        turn: &crate::locks::Turn<'_>,
    ) -> Result<Outcome, LockError> {
        let (id, token) = (request.id, &request.token);
        let (reply, idempotency) = match target {
            Target::Lock {
                op,
                kind,
                policy,
                ttl,
                holder,
                metadata,
                idempotency,
            } => {
                let script = Acquire {
                    op: *op,
                    ttl: *ttl,
                    id,
                    token,
                    holder: holder.as_ref(),
                    metadata: metadata.as_ref(),
                    kind: *kind,
                    policy: *policy,
                    liveness_ms: millis(liveness),
                    arrived_ms,
                    nonce: &request.nonce,
                    idempotency: idempotency.as_ref(),
                };
                (
                    self.call_in_turn(turn, name, &script).await?,
                    idempotency.as_ref(),
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
                    self.call_in_turn(turn, name, &script).await?,
                    permits.idempotency.as_ref(),
                )
            }
        };
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
                    (false, None) => (target.op() != Some(Op::Reenter)).then(|| token.clone()),
                };
                let kind = if target.op() == Some(Op::Poll) {
                    EventKind::Granted
                } else {
                    EventKind::Acquired
                };
                self.publish_grant(name, kind, &g);
                Ok(Outcome::Granted(grant(g, shown, true)?))
            }
            // Its event came with the reply (`ev`): the history has it too.
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
                new,
                holder,
                now_us,
            } => {
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

/// An acquire request as the observer hears of it when it ends.
struct Report {
    started: Instant,
    /// What it asked for, until a grant names the lease's own kind.
    kind: Option<LeaseKind>,
    /// The last wake-up: when, and what woke it.
    woke: Option<(Instant, Wake)>,
}

struct Ended {
    kind: Option<LeaseKind>,
    outcome: AcquireOutcome,
    waited: Option<Duration>,
    handoff: Option<(Wake, Duration)>,
}

impl Report {
    fn new(kind: Option<LeaseKind>) -> Self {
        Self {
            started: Instant::now(),
            kind,
            woke: None,
        }
    }

    fn end(&self, outcome: AcquireOutcome) -> Ended {
        let granted = matches!(outcome, AcquireOutcome::Granted | AcquireOutcome::Reentered);
        Ended {
            kind: self.kind,
            outcome,
            waited: self.woke.map(|_| self.started.elapsed()),
            handoff: self
                .woke
                .filter(|_| granted)
                .map(|(at, wake)| (wake, at.elapsed())),
        }
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
        fencing_token: FencingToken(g.fencing_token),
        reentry_count: g.reentry_count,
        ttl_ms: g.ttl_ms,
        acquired_at: Timestamp(g.created_ms),
        expires_at: Timestamp(g.expires_ms.unwrap_or(g.now_ms.saturating_add(g.ttl_ms))),
    })
}

/// One acquire request while it runs: the lease (or ticket) it acts for and what it may hold
/// that its client does not know about; dropping it gives that back.
struct InFlight {
    locks: Locks,
    name: LockName,
    resource: Resource,
    id: LeaseId,
    token: LeaseToken,
    /// Names the grants this request makes: only they may be rolled back by it.
    nonce: String,
    may_hold: MayHold,
    /// The id this request is on its lock's waiting list as, if it is: it leaves the list
    /// when it ends, however it ends (the client gone too).
    listed: Option<LeaseId>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(id) = self.listed.take() {
            self.locks.unlist(&self.name, id);
        }
        if self.may_hold == MayHold::Nothing {
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
        let (resource, may_hold) = (self.resource, self.may_hold);
        runtime.spawn(async move {
            if may_hold.grant() {
                match locks.roll_back(resource, &name, id, &token, &nonce).await {
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
            // A grant that was never made may have left a place in line instead.
            if resource == Resource::Lock
                && let Err(e) = locks.leave(&name, id, &token).await
            {
                match e {
                    LockError::UnknownLease | LockError::LeaseLost(_) => {}
                    e => tracing::warn!(lock = %name, lease_id = %id, error = %e, "could not leave the queue"),
                }
            }
        });
    }
}
