//! What an acquire request may hold that its client does not know about, and giving it back.
//!
//! A request whose caller goes away (the HTTP request's future is dropped) or that fails
//! gives back what it may have got: a grant that may have happened is rolled back (only that
//! grant, and only if no other request has answered with it since: the script checks the
//! request's nonce), a place in a fair queue or in the waiting-writers line is left. A
//! ticket's poll that fails on Redis or shutdown keeps the ticket's place: its client still
//! has the ticket and polls again.
//!
//! This is the most safety-critical state of the process (a wrong "nothing" leaks a lock
//! until its TTL; a wrong "grant" rolls back a lease a client holds), so its decisions are
//! one pure function, [`MayHold::after`], tested case by case below; the waiting loop only
//! reports what happened.

use tokio::time::Instant;

use crate::locks::Locks;
use crate::locks::error::LockError;
use crate::locks::feed::waitlist::Wanted;
use crate::locks::scripts::acquire::Op;
use crate::locks::types::{LeaseId, LeaseToken, LockName, Resource};

/// What a request holds that its client may not know about, to give back if the request is
/// dropped (its client went away) or fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MayHold {
    Nothing,
    /// A place in a line: a fair ticket, or a waiting writer's place (fifo readers wait
    /// behind it).
    Place,
    /// A grant its attempt may have made with no answer carrying it yet.
    Grant,
    GrantOrPlace,
}

/// What happened to a request, as far as what it may hold goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// An attempt is on its way to Redis: until it answers, it may have granted. A reentry's
    /// grant is never rolled back: the lease is the client's already.
    Sending { reentry: bool },
    /// Redis answered: what the attempt granted is in the answer, which reaches the client.
    Answered,
    /// The attempt failed. `unavailable`: no answer came (Redis unreachable, a timeout), so
    /// it may still have granted; otherwise Redis refused and granted nothing.
    Failed { unavailable: bool },
    /// A place in a line: queued with a ticket, or a writer waiting under the fifo policy.
    InLine,
    /// The request answers with its ticket: the client keeps the place and polls on.
    TicketHandedOut,
    /// The process stops while the request waits.
    ShuttingDown,
}

impl MayHold {
    /// What the request may hold after `step`. `polls_clients_ticket`: the request polls a
    /// ticket its client holds (and will poll again elsewhere), rather than one it issued.
    pub(super) fn after(self, step: Step, polls_clients_ticket: bool) -> Self {
        match step {
            Step::Sending { reentry: true } => self,
            Step::Sending { reentry: false } => match self {
                Self::Nothing | Self::Grant => Self::Grant,
                Self::Place | Self::GrantOrPlace => Self::GrantOrPlace,
            },
            Step::Answered | Step::Failed { unavailable: false } => match self {
                Self::Nothing | Self::Grant => Self::Nothing,
                Self::Place | Self::GrantOrPlace => Self::Place,
            },
            // The ticket's client polls again: it gets any grant this attempt made, and keeps
            // its place.
            Step::Failed { unavailable: true } | Step::ShuttingDown if polls_clients_ticket => {
                Self::Nothing
            }
            Step::Failed { unavailable: true } | Step::ShuttingDown => self,
            Step::InLine => Self::Place,
            Step::TicketHandedOut => Self::Nothing,
        }
    }

    /// What giving back takes, for a request on `resource`: (roll a grant back, leave a
    /// line). A grant that was never made may have left a place in line instead, so a
    /// lock's request that may hold anything also leaves.
    pub(super) fn give_back(self, resource: Resource) -> (bool, bool) {
        let roll_back = matches!(self, Self::Grant | Self::GrantOrPlace);
        let leave = self != Self::Nothing && resource == Resource::Lock;
        (roll_back, leave)
    }
}

/// One acquire request while it runs: the lease (or ticket) it acts for and what it may hold
/// that its client does not know about; dropping it gives that back.
pub(super) struct InFlight {
    pub(super) locks: Locks,
    pub(super) name: LockName,
    pub(super) resource: Resource,
    /// How the next attempt tries: a new lease (a semaphore's too), a reentry, a ticket's
    /// poll (a queued request polls from then on). Here rather than in the target: beside the
    /// other small fields, it costs a parked waiter no padding.
    pub(super) op: Op,
    pub(super) id: LeaseId,
    pub(super) token: LeaseToken,
    /// Names the grants this request makes: only they may be rolled back by it.
    pub(super) nonce: String,
    pub(super) may_hold: MayHold,
    /// The id this request is on its lock's waiting list as, if it is: it leaves the list
    /// when it ends, however it ends (the client gone too).
    pub(super) listed: Option<LeaseId>,
}

impl InFlight {
    /// A request about to make its first attempt: holding nothing yet, on no waiting list.
    pub(super) fn new(
        locks: Locks,
        name: LockName,
        resource: Resource,
        op: Op,
        (id, token): (LeaseId, LeaseToken),
    ) -> Self {
        Self {
            locks,
            name,
            resource,
            op,
            id,
            token,
            nonce: crate::locks::types::request_nonce(),
            may_hold: MayHold::Nothing,
            listed: None,
        }
    }

    /// Puts the request on its lock's waiting list (until `deadline`); it leaves the list
    /// when it ends, however it ends.
    pub(super) fn enlist(&mut self, wanted: Wanted<'_>, deadline: Instant) {
        self.locks.enlist(&self.name, wanted, self.id, deadline);
        self.listed = Some(self.id);
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(id) = self.listed.take() {
            self.locks.unlist(&self.name, id);
        }
        let (roll_back, leave) = self.may_hold.give_back(self.resource);
        if !roll_back && !leave {
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
        let resource = self.resource;
        runtime.spawn(async move {
            // A cluster client re-sends a call whose connection dropped, so the attempt may
            // still run (again) after this: a rollback that ran first would leave that
            // replay's grant standing. Rolled back once no run of it can take effect any
            // more (its deadline, at most the Redis timeout after it was sent, is past).
            if roll_back && locks.inner.conn.capabilities().resends_calls {
                let clock = locks.inner.conn.clock();
                clock
                    .wait_past(clock.deadline(locks.inner.settings.redis_timeout))
                    .await;
            }
            if roll_back {
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
            if leave && let Err(e) = locks.leave(&name, id, &token).await {
                match e {
                    LockError::UnknownLease | LockError::LeaseLost(_) => {}
                    e => tracing::warn!(lock = %name, lease_id = %id, error = %e, "could not leave the queue"),
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::MayHold::{Grant, GrantOrPlace, Nothing, Place};
    use super::*;

    /// Runs `steps` from a fresh request (`polls`: it polls its client's ticket).
    fn run(steps: &[Step], polls: bool) -> MayHold {
        steps
            .iter()
            .fold(Nothing, |held, &step| held.after(step, polls))
    }

    const SEND: Step = Step::Sending { reentry: false };
    const LOST: Step = Step::Failed { unavailable: true };
    const REFUSED: Step = Step::Failed { unavailable: false };

    #[test]
    fn a_grant_whose_answer_was_lost_is_rolled_back() {
        assert_eq!(run(&[SEND], false), Grant, "dropped while the script runs");
        assert_eq!(
            run(&[SEND, LOST], false),
            Grant,
            "no answer: it may have granted"
        );
        assert_eq!(Grant.give_back(Resource::Lock), (true, true));
        assert_eq!(Grant.give_back(Resource::Semaphore), (true, false));
    }

    #[test]
    fn an_answered_or_refused_attempt_holds_nothing() {
        assert_eq!(run(&[SEND, Step::Answered], false), Nothing);
        assert_eq!(run(&[SEND, REFUSED], false), Nothing);
        assert_eq!(Nothing.give_back(Resource::Lock), (false, false));
    }

    #[test]
    fn a_reentry_is_never_rolled_back() {
        let reenter = Step::Sending { reentry: true };
        assert_eq!(run(&[reenter], false), Nothing);
        assert_eq!(run(&[reenter, LOST], false), Nothing);
    }

    #[test]
    fn a_queued_request_leaves_its_place_when_dropped_and_rolls_back_a_later_grant() {
        let queued = [SEND, Step::Answered, Step::InLine];
        assert_eq!(run(&queued, false), Place);
        assert_eq!(Place.give_back(Resource::Lock), (false, true));
        // Its next attempt (a poll of its own ticket) may grant: both go back.
        let polled = [&queued[..], &[SEND]].concat();
        assert_eq!(run(&polled, false), GrantOrPlace);
        assert_eq!(GrantOrPlace.give_back(Resource::Lock), (true, true));
        // Redis answers the poll: the place stays until the request ends.
        assert_eq!(
            run(&[&polled[..], &[Step::Answered]].concat(), false),
            Place
        );
        // A lost answer: the grant may have happened, and the place may still be there.
        assert_eq!(run(&[&polled[..], &[LOST]].concat(), false), GrantOrPlace);
    }

    #[test]
    fn a_ticket_handed_to_its_client_keeps_its_place() {
        let handed = [SEND, Step::Answered, Step::InLine, Step::TicketHandedOut];
        assert_eq!(run(&handed, false), Nothing);
    }

    #[test]
    fn a_poll_of_the_clients_ticket_that_fails_or_stops_keeps_the_place_and_any_grant() {
        // The client polls again elsewhere: it gets whatever this attempt granted.
        assert_eq!(run(&[SEND, LOST], true), Nothing);
        assert_eq!(
            run(
                &[SEND, Step::Answered, Step::InLine, Step::ShuttingDown],
                true
            ),
            Nothing
        );
        // Refused for good (the ticket expired): nothing was granted either.
        assert_eq!(run(&[SEND, REFUSED], true), Nothing);
    }

    #[test]
    fn shutting_down_leaves_the_line_a_request_stood_in_itself() {
        let waiting_writer = [SEND, Step::Answered, Step::InLine, Step::ShuttingDown];
        assert_eq!(run(&waiting_writer, false), Place);
    }
}
