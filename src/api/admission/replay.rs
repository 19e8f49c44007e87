//! A retry at its caller's limits. A request whose Idempotency-Key already has an answer kept
//! replays that answer and takes nothing new, so no quota on new leases, names or state bytes,
//! and no fair queue's cap, may refuse it: a client that lost the first reply would otherwise
//! be refused, for the very lease it counts, the token it needs to release that lease.

use super::{Admission, Ask};
use crate::auth::Principal;
use crate::locks::Locks;
use crate::problem::{Problem, ProblemKind};
use crate::state::AppState;

impl Admission {
    /// [`Self::acquire`], except that a request refused by a quota or a fair queue's cap is
    /// admitted again as a request for nothing new (still within the caps on waiting) when
    /// `kept` (the request's Idempotency-Key, if it has one) finds an answer to its key kept.
    /// Read only after a refusal: a request within its limits pays nothing for it.
    pub async fn acquire_or_replay(
        state: &AppState,
        caller: &Principal,
        locks: &Locks,
        ask: Ask<'_>,
        kept: Option<impl Future<Output = Result<bool, impl std::fmt::Display>>>,
    ) -> Result<Self, Problem> {
        let refused = match Self::acquire(state, caller, locks, ask).await {
            Err(p)
                if matches!(
                    p.kind(),
                    ProblemKind::QuotaExceeded | ProblemKind::QueueFull
                ) =>
            {
                p
            }
            answer => return answer,
        };
        let Some(kept) = kept else {
            return Err(refused);
        };
        match kept.await {
            Ok(true) => {
                let replay = Ask {
                    new_lease: false,
                    joins_queue: false,
                    ..ask
                };
                Self::acquire(state, caller, locks, replay).await
            }
            Ok(false) => Err(refused),
            Err(e) => {
                // The refusal stands: the client retries, as it would after any 429.
                tracing::warn!(error = %e, "cannot tell whether a refused request is a retry");
                Err(refused)
            }
        }
    }
}
