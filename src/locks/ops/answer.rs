//! Reading one attempt's answer in the waiting loop (`acquire.rs`): a grant, a ticket or a
//! refusal answers the request; a held lock or a ticket still in line means waiting on.
//! Synchronous, so nothing of it stays in a parked waiter's future.

use std::time::Duration;

use tokio::time::Instant;

use super::attempt::{Outcome, Target};
use super::rollback::{InFlight, Step};
use crate::locks::error::LockError;
use crate::locks::observer::{AcquireOutcome, Wake};
use crate::locks::scripts::acquire::Op;
use crate::locks::types::{Acquired, LeaseId, LeaseKind, LeaseToken, Ticket};

/// How soon a waiting request tries again after Redis did not answer its attempt (a
/// reconnect of the subscriber wakes it sooner).
const UNANSWERED_RETRY: Duration = Duration::from_millis(250);

/// What the waiting loop does after an attempt: answer, or wait (putting the request on the
/// waiting list first when `enlist`) and try again after `retry` at the latest.
pub(super) enum Next {
    Answer(Result<Acquired, LockError>),
    Wait {
        retry: Option<Duration>,
        enlist: bool,
    },
}

/// Reads one attempt's answer: a grant, a ticket or a refusal answers the request (with its
/// report); a lock held by others, or a ticket still in line, means waiting on when the
/// request `waits` and its deadline has not passed. Synchronous: nothing of it stays in a
/// parked waiter's future.
pub(super) fn after_attempt(
    request: &mut InFlight,
    target: &mut Target<'_>,
    tally: &mut Tally,
    attempt: Result<Outcome, LockError>,
    (waits, deadline, polls_clients_ticket): (bool, Instant, bool),
) -> Next {
    let (locks, name) = (&request.locks, &request.name);
    let outcome = match attempt {
        Ok(outcome) => {
            request.may_hold = request.may_hold.after(Step::Answered, polls_clients_ticket);
            outcome
        }
        // Redis did not answer (a failover, a subscriber reconnect, a stall) while the request
        // may still wait: it waits on and tries again, keeping its place (its ticket, its
        // grant should this attempt have made one: the attempt run again finds it); it is
        // answered 503 only when its deadline passes with Redis still away.
        Err(e) if e.unavailable() && waits && Instant::now() < deadline => {
            request.may_hold = request
                .may_hold
                .after(Step::Failed { unavailable: true }, polls_clients_ticket);
            return Next::Wait {
                retry: Some(UNANSWERED_RETRY),
                enlist: false,
            };
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
            locks.report(name, tally.end(outcome));
            return Next::Answer(Err(e));
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
            tally.kind = Some(grant.kind);
            locks.report(name, tally.end(outcome));
            Next::Answer(Ok(Acquired::Granted(grant)))
        }
        Outcome::Queued {
            ticket,
            token,
            position,
            retry,
            poll_by,
            behind,
        } => queued(
            request,
            target,
            tally,
            (ticket, token, position, retry, poll_by, behind),
            (waits, deadline, polls_clients_ticket),
        ),
        Outcome::Held {
            contention,
            arrived_ms: arrived,
        } => {
            tally.arrived_ms = arrived;
            // A waiting writer stands in line (fifo policy) until it leaves.
            if target.kind().is_some_and(LeaseKind::stands_in_line) {
                request.may_hold = request.may_hold.after(Step::InLine, polls_clients_ticket);
            }
            if Instant::now() >= deadline || !waits {
                let outcome = if !waits {
                    AcquireOutcome::Contended
                } else {
                    AcquireOutcome::TimedOut
                };
                locks.report(name, tally.end(outcome));
                return Next::Answer(Err(LockError::Held(contention)));
            }
            Next::Wait {
                retry: contention.retry_after,
                enlist: request.listed.is_none(),
            }
        }
    }
}

/// A ticket in line: the request goes on as its poll, and is answered with the ticket when it
/// does not wait (or its wait is over).
#[allow(clippy::type_complexity)]
fn queued(
    request: &mut InFlight,
    target: &mut Target<'_>,
    tally: &mut Tally,
    (ticket, token, position, retry, poll_by, behind): (
        LeaseId,
        Option<LeaseToken>,
        u64,
        Option<Duration>,
        crate::locks::Timestamp,
        Option<crate::locks::CurrentHold>,
    ),
    (waits, deadline, polls_clients_ticket): (bool, Instant, bool),
) -> Next {
    if ticket != request.id {
        // A retried Idempotency-Key: go on as the first request's ticket.
        request.id = ticket;
        tally.issues_ticket = true;
        tally.replayed_ticket = true;
    }
    if let Some(token) = token {
        request.token = token;
    }
    request.op = Op::Poll;
    if let Target::Lock(asked) = target {
        // The ticket is the request now: its key's record holds the
        // queued answer, which a retry replays (and then polls the
        // ticket); a poll sent with the key would be another request
        // under it, and refused.
        asked.idempotency = None;
    }
    request.may_hold = request.may_hold.after(Step::InLine, polls_clients_ticket);
    if Instant::now() >= deadline || !waits {
        // The ticket keeps its place for the client to poll.
        request.may_hold = request
            .may_hold
            .after(Step::TicketHandedOut, polls_clients_ticket);
        request
            .locks
            .report(&request.name, tally.end(AcquireOutcome::Queued));
        return Next::Answer(Ok(Acquired::Queued(Ticket {
            lease_id: request.id,
            token: tally.issues_ticket.then(|| request.token.clone()),
            position,
            poll_by,
            replayed: tally.replayed_ticket,
            behind,
        })));
    }
    Next::Wait {
        retry,
        enlist: false,
    }
}

/// What the waiting loop keeps between attempts besides the request, and reports (to the
/// observer) when it ends. (One struct: its fields share padding, and a parked waiter's
/// future keeps it whole.)
pub(super) struct Tally {
    /// A ticket issued by this request shows its token; a polled one's client has it.
    pub(super) issues_ticket: bool,
    /// The ticket came from a retried Idempotency-Key's first request.
    pub(super) replayed_ticket: bool,
    /// When this request arrived in the lock's line, by Redis's clock (0: not yet).
    pub(super) arrived_ms: u64,
    pub(super) started: Instant,
    /// What it asked for, until a grant names the lease's own kind.
    pub(super) kind: Option<LeaseKind>,
    /// The last wake-up: when, and what woke it.
    pub(super) woke: Option<(Instant, Wake)>,
}

pub(super) struct Ended {
    pub(super) kind: Option<LeaseKind>,
    pub(super) outcome: AcquireOutcome,
    pub(super) waited: Option<Duration>,
    pub(super) handoff: Option<(Wake, Duration)>,
}

impl Tally {
    pub(super) fn new(kind: Option<LeaseKind>, issues_ticket: bool) -> Self {
        Self {
            issues_ticket,
            replayed_ticket: false,
            arrived_ms: 0,
            started: Instant::now(),
            kind,
            woke: None,
        }
    }

    pub(super) fn end(&self, outcome: AcquireOutcome) -> Ended {
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
