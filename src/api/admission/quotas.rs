//! Which quota refused a request, and the name quotas' entries a new lease takes.

use super::{Ask, millis};
use crate::auth::Principal;
use crate::limits::ledger::{Account, Entry};
use crate::locks::HISTORY_LIFE;
use crate::state::AppState;

/// Which quota a full ledger entry is, and what to tell the caller about it.
pub(super) fn which_quota(
    entries: &[Entry],
    index: usize,
    leases: Option<&Account>,
    quotas: &crate::auth::Quotas,
) -> (&'static str, String) {
    let full = &entries[index].account;
    if leases == Some(full) {
        (
            "live leases",
            format!(
                "this caller already has {} live leases, its quota",
                quotas.leases
            ),
        )
    } else if full.key.ends_with(":waiters") {
        (
            "waiting requests",
            format!(
                "this caller already has {} waiting requests, its quota",
                quotas.waiters
            ),
        )
    } else if index + 1 < entries.len() {
        (
            "names",
            format!(
                "this caller gave Redis state to {} lock and semaphore names in \
                     the last hour, its quota: reuse a name, or wait for an unused \
                     one's history to end",
                quotas.names
            ),
        )
    } else {
        (
            "tenant names",
            format!(
                "this tenant's callers gave Redis state to {} lock and semaphore \
                     names in the last hour, its quota",
                quotas.tenant_names
            ),
        )
    }
}

/// The two name quotas' entries: the caller's and its tenant's, each holding the name until
/// its lease could end and its history after that.
pub(super) fn name_entries(
    state: &AppState,
    caller: &Principal,
    ask: &Ask<'_>,
    now: u64,
) -> [Entry; 2] {
    let quotas = &caller.quotas;
    // The name keeps state until its lease ends and its history after that.
    let name_until = now + millis(ask.wait + ask.ttl + HISTORY_LIFE);
    let name = ask.name.as_str().to_owned();
    [
        Entry {
            account: state.ledger.names(&caller.owner(), quotas.names),
            member: name.clone(),
            until_ms: name_until,
        },
        Entry {
            account: state
                .ledger
                .tenant_names(caller.tenant.as_str(), quotas.tenant_names),
            member: name,
            until_ms: name_until,
        },
    ]
}
