//! Acquiring with a server-side wait, for every kind: one attempt script call, then a wait for
//! a wake-up (the lock's channel, a fair waiter's own channel, or a semaphore's), or for the
//! holder's TTL to run out, or for the deadline. Never a fixed poll.
//!
//! A request whose caller goes away (the HTTP request's future is dropped) gives back what it
//! may have got: the loop tells [`super::rollback`] each step, which decides.

use std::pin::pin;
use std::time::Duration;

use futures_util::FutureExt as _;
use tokio::time::Instant;

use super::attempt::{Outcome, Target};
use super::rollback::{InFlight, MayHold, Step};
use crate::locks::Locks;
use crate::locks::error::LockError;
use crate::locks::observer::{AcquireOutcome, AcquireReport, Wake};
use crate::locks::scripts::acquire::Op;
use crate::locks::types::{
    AcquireRequest, Acquired, Grant, LeaseId, LeaseKind, LeaseToken, LockName, PermitRequest,
    Ticket, Ttl, request_nonce,
};
use crate::locks::wakeups::{Parking, Registration};

impl Locks {
    /// Acquires `name` for a new lease of `request.kind` (`ttl` unless it names its own), or
    /// re-enters the lease the `reentry` token proves, waiting up to `wait` (from this call) while the lock is taken.
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
        reentry: Option<LeaseToken>,
        ttl: Ttl,
        wait: Duration,
    ) -> impl Future<Output = Result<Acquired, LockError>> + Send + use<> {
        let mut request = request;
        let (op, token) = match reentry {
            // The script finds the lease from the token.
            Some(token) => (Op::Reenter, token),
            None => {
                request.ttl = Some(ttl);
                request.kind = request.kind.or(Some(LeaseKind::Reentrant));
                (Op::New, LeaseToken::generate())
            }
        };
        let id = token.lease_id();
        let target = Target::Lock(request);
        Self::acquire_waiting(self.clone(), name.clone(), op, target, id, token, wait)
    }

    /// [`Self::acquire`] for a new lease proven by `token` (made by the caller: a
    /// multilease's member, whose token comes from the multilease's). Asked again with the
    /// same token while that lease holds, it answers the same grant again.
    pub fn acquire_member(
        &self,
        name: &LockName,
        mut request: AcquireRequest,
        token: LeaseToken,
        ttl: Ttl,
        wait: Duration,
    ) -> impl Future<Output = Result<Acquired, LockError>> + Send + use<> {
        request.ttl = Some(ttl);
        request.kind = request.kind.or(Some(LeaseKind::Reentrant));
        let id = token.lease_id();
        let target = Target::Lock(request);
        Self::acquire_waiting(self.clone(), name.clone(), Op::New, target, id, token, wait)
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
        let target = Target::Lock(AcquireRequest {
            kind: Some(LeaseKind::Fair),
            ..AcquireRequest::default()
        });
        Self::acquire_waiting(
            self.clone(),
            name.clone(),
            Op::Poll,
            target,
            ticket,
            token,
            wait,
        )
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
        Self::acquire_waiting(self.clone(), name.clone(), Op::New, target, id, token, wait).map(
            |acquired| match acquired? {
                Acquired::Granted(grant) => Ok(grant),
                Acquired::Queued(_) => {
                    Err(LockError::BadReply("a semaphore queued a ticket".into()))
                }
            },
        )
    }

    /// Tries to acquire `target` as lease `id` (`op`: how it first tries; a semaphore's is a new
    /// lease) until granted, queued past the deadline (fair
    /// locks: a ticket), or refused at the deadline.
    ///
    /// Not an `async fn`: an async fn keeps each argument twice (as passed, and as its own
    /// local) for as long as it runs, and a parked waiter runs for its whole wait.
    pub(in crate::locks::ops) fn acquire_waiting<'a>(
        locks: Locks,
        name: LockName,
        op: Op,
        mut target: Target<'a>,
        id: LeaseId,
        token: LeaseToken,
        wait: Duration,
    ) -> impl Future<Output = Result<Acquired, LockError>> + Send + 'a {
        let deadline = Instant::now() + wait;
        // A ticket issued by this request shows its token; a polled one's client has it.
        let mut issues_ticket = op == Op::New;
        let mut replayed_ticket = false;
        // Made here, not in the future: what the future captures it keeps for its whole run,
        // so anything moved from a capture into a local there would be kept twice.
        let mut request = InFlight {
            locks,
            name,
            resource: target.resource(),
            op,
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
                // A poll of the ticket its client holds (not one this request issued).
                let polls_clients_ticket = request.op == Op::Poll && !issues_ticket;
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
                // (The key is read from the registration where it is needed, not kept: a
                // parked waiter's future holds nothing more for it.)
                let epoch = locks
                    .inner
                    .waiters
                    .epoch(registration.as_ref().map_or("", |(_, r)| r.key()));
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
                            let reentry = request.op == Op::Reenter;
                            request.may_hold = request
                                .may_hold
                                .after(Step::Sending { reentry }, polls_clients_ticket);
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
                            request.may_hold =
                                request.may_hold.after(Step::Answered, polls_clients_ticket);
                            outcome
                        }
                        Err(e) => {
                            locks.observe_refusal(request.id, &e);
                            let unavailable = e.unavailable();
                            request.may_hold = request
                                .may_hold
                                .after(Step::Failed { unavailable }, polls_clients_ticket);
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
                            request.op = Op::Poll;
                            if let Target::Lock(asked) = &mut target {
                                // The ticket is the request now: its key's record holds the
                                // queued answer, which a retry replays (and then polls the
                                // ticket); a poll sent with the key would be another request
                                // under it, and refused.
                                asked.idempotency = None;
                            }
                            request.may_hold =
                                request.may_hold.after(Step::InLine, polls_clients_ticket);
                            if Instant::now() >= deadline || notified.is_none() {
                                // The ticket keeps its place for the client to poll.
                                request.may_hold = request
                                    .may_hold
                                    .after(Step::TicketHandedOut, polls_clients_ticket);
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
                                request.may_hold =
                                    request.may_hold.after(Step::InLine, polls_clients_ticket);
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
                    parking = Box::pin(locks.inner.waiters.park(
                        registration.as_ref().map_or("", |(_, r)| r.key()),
                        epoch,
                        deadline,
                    )) => parking,
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
                        // (Polling its client's ticket: the client polls again elsewhere, and
                        // the ticket keeps its place.)
                        request.may_hold = request.may_hold.after(Step::ShuttingDown, polls_clients_ticket);
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
