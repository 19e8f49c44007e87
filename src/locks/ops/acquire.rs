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

use super::answer::{Ended, Next, Tally, after_attempt};
use super::attempt::{Target, attempt_in_turn};
use super::rollback::{InFlight, Step};
use crate::locks::Locks;
use crate::locks::error::LockError;
use crate::locks::observer::{AcquireOutcome, AcquireReport, Wake};
use crate::locks::scripts::acquire::Op;
use crate::locks::types::{
    AcquireRequest, Acquired, Grant, LeaseId, LeaseKind, LeaseToken, LockName, PermitRequest, Ttl,
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
        request: AcquireRequest,
        token: LeaseToken,
        ttl: Ttl,
        wait: Duration,
    ) -> impl Future<Output = Result<Acquired, LockError>> + Send + use<> {
        let id = token.lease_id();
        self.acquire_as(name, request, token, id, ttl, wait)
    }

    /// [`Self::acquire`] for a new lease `id` proven by `token`, both made by the caller (a
    /// multilease's member; an election's candidate, whose id says it is one).
    pub fn acquire_as(
        &self,
        name: &LockName,
        mut request: AcquireRequest,
        token: LeaseToken,
        id: LeaseId,
        ttl: Ttl,
        wait: Duration,
    ) -> impl Future<Output = Result<Acquired, LockError>> + Send + use<> {
        request.ttl = Some(ttl);
        request.kind = request.kind.or(Some(LeaseKind::Reentrant));
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
        let issues_ticket = op == Op::New;
        // Made here, not in the future: what the future captures it keeps for its whole run,
        // so anything moved from a capture into a local there would be kept twice.
        let mut request = InFlight::new(locks, name, target.resource(), op, (id, token));
        async move {
            // Used whole, through a reference: the future then owns the whole request (never
            // its fields apart), and drops it when it ends, seeing every change made here.
            let request = &mut request;
            let mut tally = Tally::new(target.kind(), issues_ticket);
            let mut registration: Option<(LeaseId, Registration)> = None;
            loop {
                // The request owns it: its drop (the client gone) needs it.
                let locks = &request.locks;
                // A poll of the ticket its client holds (not one this request issued).
                let polls_clients_ticket = request.op == Op::Poll && !tally.issues_ticket;
                // Registered before the attempt, so a wake-up right after a refusal is not lost.
                if !wait.is_zero() {
                    register(request, &target, &mut registration);
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
                let liveness = deadline.saturating_duration_since(Instant::now())
                    + Duration::from_millis(locks.inner.settings.ticket_timeout_ms);
                // Boxed: the turn's wait and the attempt's future (script arguments, the Redis
                // call) live only while it runs; inline, every parked waiter would keep room
                // for them. The answer is moved into `after_attempt`: nothing of it stays.
                let attempt = Box::pin(attempt_in_turn(
                    request,
                    &target,
                    liveness,
                    tally.arrived_ms,
                    polls_clients_ticket,
                ))
                .await;
                let waits = (notified.is_some(), deadline, polls_clients_ticket);
                // A first refusal puts the request on the waiting list.
                let (retry, enlist) =
                    match after_attempt(request, &mut target, &mut tally, attempt, waits) {
                        Next::Answer(answer) => return answer,
                        Next::Wait { retry, enlist } => (retry, enlist),
                    };
                if enlist {
                    request.enlist(target.wanted(), deadline);
                }
                // A wait relies on an unlock message only if this process has listened since
                // before the attempt; if not, it listens now and tries again first (an unlock
                // in between was not heard). Boxed: a parked waiter keeps no room for it.
                let parking = tokio::select! {
                    parking = Box::pin(request.locks.inner.waiters.park(
                        registration.as_ref().map_or("", |(_, r)| r.key()),
                        epoch,
                        deadline,
                    )) => parking,
                    () = request.locks.inner.shutdown.cancelled() => Parking::Unheard,
                };
                let _reliance = match parking {
                    Parking::Heard(reliance) => Some(reliance),
                    Parking::Armed => continue,
                    Parking::Unheard => None,
                };
                // The holder's TTL (or the waiter ahead's deadline) running out wakes nobody
                // through pub/sub: retry then as well.
                let retry_at = retry.map_or(deadline, |d| {
                    (Instant::now() + d + Duration::from_millis(1)).min(deadline)
                });
                let Some(notified) = notified.as_mut().as_pin_mut() else {
                    unreachable!("a request that does not wait returned above")
                };
                let wake = tokio::select! {
                    () = notified => Wake::Message,
                    () = tokio::time::sleep_until(retry_at) => Wake::Timer,
                    () = request.locks.inner.shutdown.cancelled() => {
                        return shut_down(request, &tally, polls_clients_ticket);
                    }
                };
                tally.woke = Some((Instant::now(), wake));
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

    pub(super) fn report(&self, name: &LockName, report: Ended) {
        self.inner.observer.acquisition(AcquireReport {
            lock: name,
            kind: report.kind,
            outcome: report.outcome,
            waited: report.waited,
            handoff: report.handoff,
        });
    }
}

/// Registers the request's wait for its wake key (again when its id changed: a replayed
/// ticket's).
fn register(
    request: &InFlight,
    target: &Target<'_>,
    registration: &mut Option<(LeaseId, Registration)>,
) {
    if registration
        .as_ref()
        .is_none_or(|(id, _)| *id != request.id)
    {
        let wake_key = request.locks.wake_key(&request.name, target, request.id);
        let registered = request.locks.inner.waiters.register(&wake_key);
        *registration = Some((request.id, registered));
    }
}

/// The answer to a waiting request when this instance shuts down. (Polling its client's
/// ticket: the client polls again elsewhere, and the ticket keeps its place.)
fn shut_down(
    request: &mut InFlight,
    tally: &Tally,
    polls_clients_ticket: bool,
) -> Result<Acquired, LockError> {
    request.may_hold = request
        .may_hold
        .after(Step::ShuttingDown, polls_clients_ticket);
    request
        .locks
        .report(&request.name, tally.end(AcquireOutcome::Failed));
    Err(LockError::ShuttingDown)
}
