//! What a lease call adds to its caller's (and tenant's) state budget (`limits::budget`): an
//! acquire reserves its name's state and its lease's record before the domain sees it (429
//! past the cap); what follows (the record under its lease id, the history entry every call
//! adds, a heartbeat's later end, a release's freed record) is gathered and sent in the
//! background, never refused.

use std::time::Duration;

use crate::auth::Principal;
use crate::limits::budget::{Account, Charge, ENTRIES_KEPT, Full, Sizes};
use crate::locks::{HISTORY_LIFE, HolderLabel, LeaseId, LockName, Timestamp, wall_ms};
use crate::problem::{Problem, ProblemKind};
use crate::state::AppState;

/// What a new lease makes Redis keep beside its name's state.
#[derive(Debug, Clone, Copy, Default)]
pub struct Size {
    /// Its holder label's bytes.
    pub holder: usize,
    /// Its metadata's bytes (JSON).
    pub metadata: usize,
    /// A semaphore lease's permits.
    pub permits: u64,
}

impl Size {
    fn lease_bytes(self) -> u64 {
        Sizes::lease(self.holder, self.metadata) + Sizes::permits(self.permits)
    }
}

/// The caller's and its tenant's accounts that have a cap.
pub fn accounts(state: &AppState, caller: &Principal) -> Vec<Account> {
    let q = &caller.quotas;
    let mut accounts = Vec::new();
    if q.state_bytes < u64::MAX {
        accounts.push(state.budget.account(&caller.owner(), q.state_bytes));
    }
    if q.tenant_state_bytes < u64::MAX {
        accounts.push(
            state
                .budget
                .tenant(caller.tenant.as_str(), q.tenant_state_bytes),
        );
    }
    accounts
}

fn history_until() -> u64 {
    wall_ms() + millis(HISTORY_LIFE)
}

/// One more history entry on `name`, by a holder labelled with `holder` bytes.
fn entry(name: &LockName, holder: usize) -> Charge {
    let bytes = Sizes::entry(holder);
    Charge::add(
        format!("h:{name}"),
        bytes,
        bytes * ENTRIES_KEPT,
        history_until(),
    )
}

/// Reserves what an acquire of a new lease on `name` would make Redis keep, for `lasts`
/// (its wait and TTL): 429 `quota_exceeded` when an account would go past its cap.
pub async fn reserve(
    state: &AppState,
    accounts: &[Account],
    name: &LockName,
    pending: &str,
    size: Size,
    lasts: Duration,
) -> Result<(), Problem> {
    if accounts.is_empty() {
        return Ok(());
    }
    let now = wall_ms();
    let charges = [
        Charge::set(
            format!("n:{name}"),
            Sizes::NAME,
            now + millis(lasts + HISTORY_LIFE),
        ),
        Charge::new_record(
            format!("l:{pending}"),
            size.lease_bytes(),
            now + millis(lasts),
        ),
        entry(name, size.holder),
    ];
    match state.budget.reserve(accounts, &charges).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err((i, Full { retry_after, total }))) => {
            let account = &accounts[i];
            let whose = if account.is_tenants() {
                "this tenant's callers' leases, names and histories keep"
            } else {
                "this caller's leases, names and histories keep"
            };
            Err(Problem::new(
                ProblemKind::QuotaExceeded,
                format!(
                    "{whose} about {total} bytes of Redis state, and this lease would take \
                     them past the quota of {} bytes: release leases, or wait for unused \
                     names' histories to end",
                    account.cap
                ),
            )
            .with("quota", "state bytes")
            .retry_after(retry_after))
        }
        Err(e) => Err(crate::locks::LockError::from(e).into()),
    }
}

/// The acquire granted lease `id` (reserved as `pending`) until `until`.
pub fn granted(
    state: &AppState,
    accounts: &[Account],
    pending: &str,
    id: LeaseId,
    size: Size,
    until: Timestamp,
) {
    for account in accounts {
        state.budget.later(
            account,
            vec![
                Charge::del(format!("l:{pending}")),
                Charge::new_record(format!("l:{id}"), size.lease_bytes(), until.0),
            ],
        );
    }
}

/// The acquire ended without a new lease: its reservation goes (the name's stays, until its
/// end: the request may have left a history entry).
pub fn refused(state: &AppState, accounts: &[Account], pending: &str) {
    for account in accounts {
        state
            .budget
            .later(account, vec![Charge::del(format!("l:{pending}"))]);
    }
}

/// Lease `id` of `caller` on `name` was renewed (a heartbeat, a reentry) until `until`; its
/// holder label is `holder`.
pub fn renewed(
    state: &AppState,
    caller: &Principal,
    name: &LockName,
    id: LeaseId,
    holder: Option<&str>,
    until: Timestamp,
) {
    let accounts = accounts(state, caller);
    renewed_in(
        state,
        &accounts,
        name,
        id,
        holder.map_or(0, str::len),
        until,
    );
}

/// [`renewed`], in `accounts`, the holder's label `holder` bytes long.
pub fn renewed_in(
    state: &AppState,
    accounts: &[Account],
    name: &LockName,
    id: LeaseId,
    holder: usize,
    until: Timestamp,
) {
    for account in accounts {
        state.budget.later(
            account,
            vec![
                Charge::touch(format!("l:{id}"), until.0),
                Charge::touch(format!("n:{name}"), until.0 + millis(HISTORY_LIFE)),
                entry(name, holder),
            ],
        );
    }
}

/// Lease `id` of `caller` on `name` ended (released, lost, left): its record is freed, and
/// the end's history entry counts (its holder's label unknown here: the longest a label may
/// be).
pub fn ended(state: &AppState, caller: &Principal, name: &LockName, id: LeaseId) {
    for account in accounts(state, caller) {
        state.budget.later(
            &account,
            vec![
                Charge::del(format!("l:{id}")),
                entry(name, HolderLabel::MAX_LEN),
            ],
        );
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
