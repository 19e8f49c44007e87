//! Why an acquire was refused, when "who holds it" is not the whole answer: under the fifo
//! policy a reader is refused because a writer is waiting, even while only readers hold the
//! lock. The waiting writer comes from the waiting list every instance shares.

use crate::locks::{LeaseKind, LockError, LockName, Locks, RwMode, RwPolicy};
use crate::problem::Problem;

/// The problem for a refused acquire of `kind` under `policy`: a fifo reader refused while
/// the lock is held for reading names the writer it waits behind (`waiting_writer`).
pub(super) async fn explain(
    locks: &Locks,
    name: &LockName,
    kind: Option<LeaseKind>,
    policy: RwPolicy,
    error: LockError,
) -> Problem {
    let LockError::Held(contention) = &error else {
        return error.into();
    };
    let estimate = match contention.held.as_deref() {
        Some(&(_, age)) if contention.delayed_until.is_none() => {
            locks.estimated_wait(name, Some(age), 0).await
        }
        _ => None,
    };
    let problem = fifo_reader(locks, name, kind, policy, error).await;
    match estimate {
        Some(wait) => problem.with("estimated_wait_ms", super::bodies::millis(wait)),
        None => problem,
    }
}

/// Under the fifo policy, a reader refused while the lock is held for reading is told the
/// writer it waits behind (`waiting_writer`).
async fn fifo_reader(
    locks: &Locks,
    name: &LockName,
    kind: Option<LeaseKind>,
    policy: RwPolicy,
    error: LockError,
) -> Problem {
    let LockError::Held(contention) = &error else {
        return error.into();
    };
    if kind != Some(LeaseKind::Read) || policy != RwPolicy::Fifo {
        return error.into();
    }
    // Best effort: the refusal stands as it is if the lookup fails.
    let (Ok((waiting, _)), Ok(Some(view))) = (locks.waiters_of(name).await, locks.lock(name).await)
    else {
        return error.into();
    };
    let Some(writer) = waiting.iter().find(|w| w.is_writer()) else {
        return error.into();
    };
    if view.mode != Some(RwMode::Read) {
        return error.into();
    }
    let holder = contention.holder.clone();
    let detail = format!(
        "refused because writer {} is waiting (since {}): under the fifo policy readers queue \
         behind a waiting writer; the lock is held for reading{}",
        writer.label(),
        writer.since().rfc3339(),
        holder.map_or_else(String::new, |h| format!(" by \"{h}\" and others"))
    );
    Problem::from(error).reworded(detail).with(
        "waiting_writer",
        serde_json::json!({
            "lease_id": writer.lease_id,
            "holder": writer.holder,
            "waiting_since": writer.since().rfc3339(),
            "instance": writer.instance,
        }),
    )
}
