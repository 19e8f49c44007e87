//! What a caller may start before the lock domain sees an acquire: the caller's quotas (live
//! leases, waiting requests, across every instance), the lock's caps (requests waiting for
//! it here, its fair queue), and, once the domain has answered, the caller's accounts
//! settled (a pending reservation becomes the lease, or goes).

use std::time::Duration;

use uuid::Uuid;

mod quotas;
mod replay;

use self::quotas::{name_entries, which_quota};
use super::charges::{self, Size};
use crate::auth::{Principal, Watched};
use crate::limits::ledger::{Account, Entry, Full, Ledger};
use crate::limits::slots::Slot;
use crate::locks::wall_ms;
use crate::locks::{LeaseId, LockName, Locks, Timestamp};
use crate::problem::{Problem, ProblemKind};
use crate::state::AppState;

/// How long past its wait a pending reservation may count, should nobody settle it.
const PENDING_SLACK: Duration = Duration::from_secs(10);

/// How soon a waiting request's quota call is tried again after Redis did not answer it.
const UNANSWERED_RETRY: Duration = Duration::from_millis(250);

/// Runs `call` again while its answer is `unanswered` (Redis did not answer) and the
/// request's `deadline` allows another try; the last answer otherwise. A reservation run
/// twice is one reservation (its member is the request's own).
async fn while_unanswered<T, F, Fut>(
    deadline: tokio::time::Instant,
    mut call: F,
    unanswered: impl Fn(&T) -> bool,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    loop {
        let answer = call().await;
        if !unanswered(&answer) || tokio::time::Instant::now() + UNANSWERED_RETRY >= deadline {
            return answer;
        }
        tokio::time::sleep(UNANSWERED_RETRY).await;
    }
}

/// What an acquire asks of the limits.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    pub name: &'a LockName,
    /// A new lease (not a reentry or a ticket poll): counts against the live leases.
    pub new_lease: bool,
    /// A fair lock's new lease, which may join the queue.
    pub joins_queue: bool,
    pub wait: Duration,
    /// How long the lease asks for: with the wait and the history's life, how long the
    /// name keeps state in Redis (counted against the names quotas).
    pub ttl: Duration,
    /// What a new lease makes Redis keep (its caller's state budget).
    pub size: Size,
}

/// A request admitted past the limits; settle it with [`Self::granted`] or [`Self::done`].
/// Dropped unsettled (the client went away), it gives its reservations back on its own.
pub struct Admission {
    ledger: Ledger,
    /// The caller's account of live leases, if it has a cap.
    leases: Option<Account>,
    /// The capped accounts this request holds a place in, and the place (`pending`). An
    /// unlimited caller (the default) has none: its waiting request allocates nothing here,
    /// and every parked waiter keeps its admission for its whole wait.
    reserved: Vec<Account>,
    pending: String,
    /// The lock or semaphore asked for.
    name: LockName,
    _waiting: Option<Slot>,
    settled: bool,
    /// The caller's state budget, when it has one: the accounts, and a new lease's
    /// reservation in them (`pending`).
    budget: Option<Box<Budgeted>>,
}

/// A request's part in its caller's state budget.
struct Budgeted {
    state: AppState,
    accounts: Vec<crate::limits::budget::Account>,
    pending: Option<String>,
    name: LockName,
    size: Size,
}

impl Budgeted {
    /// The reservation goes (the request ended without a new lease).
    fn refused(&self) {
        if let Some(pending) = &self.pending {
            charges::refused(&self.state, &self.accounts, pending);
        }
    }
}

impl Admission {
    /// Checks `ask` against `caller`'s quotas and the lock's caps, reserving what it may take.
    pub async fn acquire(
        state: &AppState,
        caller: &Principal,
        locks: &Locks,
        ask: Ask<'_>,
    ) -> Result<Self, Problem> {
        // A waiting request waits through a Redis that does not answer (a failover, a
        // stall), as its attempts do (`locks::ops::answer`): 503 only at its deadline.
        let deadline = tokio::time::Instant::now() + ask.wait;
        let waiting = per_lock_slot(state, caller, locks, &ask, deadline).await?;
        let quotas = &caller.quotas;
        let counts_waiters = !ask.wait.is_zero() && quotas.waiters < u64::MAX;
        let counts_names =
            ask.new_lease && (quotas.names < u64::MAX || quotas.tenant_names < u64::MAX);
        let (leases, reserved, pending) =
            if quotas.leases == u64::MAX && !counts_waiters && !counts_names {
                (None, Vec::new(), String::new())
            } else {
                let owner = caller.owner();
                let leases =
                    (quotas.leases < u64::MAX).then(|| state.ledger.leases(&owner, quotas.leases));
                let mut reserved = Vec::with_capacity(2);
                if let Some(leases) = leases.as_ref().filter(|_| ask.new_lease) {
                    reserved.push(leases.clone());
                }
                if counts_waiters {
                    reserved.push(state.ledger.waiters(&owner, quotas.waiters));
                }
                (leases, reserved, format!("pending:{}", Uuid::now_v7()))
            };
        let now = wall_ms();
        let until = now + millis(ask.wait + PENDING_SLACK);
        let mut entries: Vec<Entry> = reserved
            .iter()
            .map(|account| Entry {
                account: account.clone(),
                member: pending.clone(),
                until_ms: until,
            })
            .collect();
        if counts_names {
            entries.extend(name_entries(state, caller, &ask, now));
        }
        let mut admission = Self {
            ledger: state.ledger.clone(),
            leases,
            reserved,
            pending,
            name: ask.name.clone(),
            _waiting: waiting,
            settled: false,
            budget: None,
        };
        if let Err(problem) = admission
            .reserve_budget(state, caller, &ask, deadline)
            .await
        {
            admission.settled = true;
            admission.give_back().await;
            return Err(problem);
        }
        let reserved = while_unanswered(
            deadline,
            || state.ledger.reserve(&entries),
            |r| matches!(r, Err(e) if crate::locks::LockError::from(e.clone()).unavailable()),
        )
        .await;
        match reserved {
            Ok(Ok(())) => Ok(admission),
            Ok(Err(Full { index, retry_after })) => {
                let (what, detail) =
                    which_quota(&entries, index, admission.leases.as_ref(), quotas);
                let mut admission = admission;
                admission.settled = true;
                Err(Problem::new(ProblemKind::QuotaExceeded, detail)
                    .with("quota", what)
                    .retry_after(retry_after))
            }
            Err(e) => {
                let mut admission = admission;
                admission.settled = true;
                Err(crate::locks::LockError::from(e).into())
            }
        }
    }

    /// Reserves what a new lease makes Redis keep in the caller's and its tenant's byte
    /// budgets (when they have any), tried again while Redis does not answer and the
    /// request may still wait.
    async fn reserve_budget(
        &mut self,
        state: &AppState,
        caller: &Principal,
        ask: &Ask<'_>,
        deadline: tokio::time::Instant,
    ) -> Result<(), Problem> {
        let accounts = charges::accounts(state, caller);
        if accounts.is_empty() {
            return Ok(());
        }
        let pending = ask.new_lease.then(|| format!("pending:{}", Uuid::now_v7()));
        if let Some(pending) = &pending {
            let lasts = ask.wait + PENDING_SLACK + ask.ttl;
            let reserve = || charges::reserve(state, &accounts, ask.name, pending, ask.size, lasts);
            while_unanswered(
                deadline,
                reserve,
                |r| matches!(r, Err(p) if p.kind() == ProblemKind::RedisUnavailable),
            )
            .await?;
        }
        self.budget = Some(Box::new(Budgeted {
            state: state.clone(),
            accounts,
            pending,
            name: ask.name.clone(),
            size: ask.size,
        }));
        Ok(())
    }

    /// The acquire granted (or queued, for a ticket) lease `id` until `until`.
    pub async fn granted(mut self, id: LeaseId, until: Timestamp) {
        self.settled = true;
        if let Some(b) = self.budget.take()
            && let Some(pending) = &b.pending
        {
            charges::granted(&b.state, &b.accounts, pending, id, b.size, until);
        }
        if let Some(leases) = &self.leases
            && let Err(e) = self.ledger.record(leases, &self.member(id), until.0).await
        {
            tracing::warn!(error = %e, "cannot record a lease in its caller's quota");
        }
        self.give_back().await;
    }

    /// The acquire re-entered lease `id` of this caller's, which now lasts until `until`: its
    /// quota entry follows.
    pub async fn renewed(mut self, id: LeaseId, until: Timestamp) {
        self.settled = true;
        if let Some(b) = self.budget.take() {
            b.refused();
            charges::renewed_in(&b.state, &b.accounts, &b.name, id, b.size.holder, until);
        }
        self.give_back().await;
        if let Some(leases) = &self.leases
            && let Err(e) = self.ledger.extend(leases, &self.member(id), until.0).await
        {
            tracing::warn!(error = %e, "cannot extend a lease in its caller's quota");
        }
    }

    /// The acquire ended without a new lease.
    pub async fn done(mut self) {
        self.settled = true;
        if let Some(b) = self.budget.take() {
            b.refused();
        }
        self.give_back().await;
    }

    /// Lease `id` as its caller's leases account keeps it (with its name, so that an admin
    /// can end a revoked key's leases).
    fn member(&self, id: LeaseId) -> String {
        super::key_leases::member(&self.name, id)
    }

    async fn give_back(&self) {
        if let Err(e) = self.ledger.remove(&self.reserved, &self.pending).await {
            tracing::warn!(error = %e, "cannot give a quota reservation back (it expires by itself)");
        }
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if let Some(b) = self.budget.take() {
            b.refused();
        }
        if self.settled || self.reserved.is_empty() {
            return;
        }
        let (ledger, reserved, pending) = (
            self.ledger.clone(),
            std::mem::take(&mut self.reserved),
            std::mem::take(&mut self.pending),
        );
        // The request was abandoned mid-way (its client went away): give back in the
        // background; an entry not given back stops counting when its time is up anyway.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = ledger.remove(&reserved, &pending).await;
            });
        }
    }
}

/// A lease of `caller` was renewed until `until`: its quota entry follows.
pub async fn renewed(
    state: &AppState,
    caller: &Principal,
    name: &LockName,
    id: LeaseId,
    holder: Option<&str>,
    until: Timestamp,
) {
    charges::renewed(state, caller, name, id, holder, until);
    if caller.quotas.leases == u64::MAX {
        return;
    }
    let account = state.ledger.leases(&caller.owner(), caller.quotas.leases);
    if let Err(e) = state
        .ledger
        .extend(&account, &super::key_leases::member(name, id), until.0)
        .await
    {
        tracing::warn!(error = %e, "cannot extend a lease in its caller's quota");
    }
}

/// A lease of `caller` ended (released, lost, left): it stops counting.
pub async fn ended(state: &AppState, caller: &Principal, name: &LockName, id: LeaseId) {
    charges::ended(state, caller, name, id);
    if caller.quotas.leases == u64::MAX {
        return;
    }
    let account = state.ledger.leases(&caller.owner(), caller.quotas.leases);
    if let Err(e) = state
        .ledger
        .remove(&[account], &super::key_leases::member(name, id))
        .await
    {
        tracing::warn!(error = %e, "cannot remove a lease from its caller's quota");
    }
}

/// Runs a request's wait for its lock (or permits, or turn) until it ends, or until the key or
/// session its caller came with is revoked (`watched`, see `auth::revocation`): then the wait
/// is dropped, which rolls back a grant it was making as for a client that went away, and the
/// answer is 401.
pub async fn unless_revoked<T>(
    watched: Option<Watched>,
    wait: impl Future<Output = T>,
) -> Result<T, Problem> {
    let Some(watched) = watched else {
        return Ok(wait.await);
    };
    tokio::select! {
        biased;
        () = watched.revoked() => Err(Problem::new(
            ProblemKind::ApiKeyInvalid,
            "the API key or dashboard session this request came with was revoked while it \
             waited; nothing was granted",
        )),
        done = wait => Ok(done),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The per-lock slots a request takes before anything else: a place in a fair lock's queue
/// (`--max-fair-queue`) and, when it waits, one of the lock's waiter slots on this instance
/// (`--max-waiters-per-lock`), held until it is answered.
async fn per_lock_slot(
    state: &AppState,
    caller: &Principal,
    locks: &Locks,
    ask: &Ask<'_>,
    deadline: tokio::time::Instant,
) -> Result<Option<Slot>, Problem> {
    let per_lock = state.limits.per_lock;
    if ask.joins_queue && per_lock.fair_queue < u64::MAX {
        // Read again while Redis does not answer: a fair waiter or a candidate met by a
        // failover here was answered 503 at once (the safety harness's `partition` and
        // `old-master-returns` faults), though its wait had most of its time left.
        let queued = while_unanswered(
            deadline,
            || locks.fair_queue_length(ask.name),
            |r| matches!(r, Err(e) if e.unavailable()),
        )
        .await?;
        if queued >= per_lock.fair_queue {
            return Err(Problem::new(
                ProblemKind::QueueFull,
                format!(
                    "{queued} tickets already stand in this fair lock's queue \
                     (--max-fair-queue {})",
                    per_lock.fair_queue
                ),
            )
            .retry_after(Duration::from_secs(1)));
        }
    }
    if ask.wait.is_zero() {
        return Ok(None);
    }
    let key = format!("{}\u{0}{}", caller.tenant.as_str(), ask.name);
    let slot = state
        .wait_slots
        .take(&key, per_lock.waiters_per_lock)
        .ok_or_else(|| {
            Problem::new(
                ProblemKind::TooManyWaiters,
                format!(
                    "{} requests already wait for this lock here \
                     (--max-waiters-per-lock)",
                    per_lock.waiters_per_lock
                ),
            )
            .retry_after(Duration::from_secs(1))
        })?;
    Ok(Some(slot))
}
