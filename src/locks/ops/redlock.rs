//! What the RedLock layer (`crate::redlock`) needs of one node's lock domain, and nothing
//! else: a new reentrant lease under a token the caller chose (the same lease id on every
//! node, so each node holds Redisson's field `<lease-id>:1`, as `RedissonRedLock` holds one
//! `<client-id>:<thread-id>` on each), and the node's waiter registry, so that an unlock
//! message on any node wakes a RedLock waiter.

use std::sync::Arc;
use std::time::Duration;

use crate::locks::error::LockError;
use crate::locks::scripts::acquire::Op;
use crate::locks::types::{AcquireRequest, Acquired, LeaseKind, LeaseToken, LockName, Ttl};
use crate::locks::wakeups::Waiters;
use crate::locks::{Locks, ops::attempt::Target};

impl Locks {
    /// One attempt, no wait, at a new reentrant lease proven by `token` (the caller made it:
    /// every RedLock node gets the same), or a reentry of that lease when `reenter`. Dropped
    /// before its answer, it gives back what it may have got (as every acquire does).
    pub fn acquire_as(
        &self,
        name: &LockName,
        request: AcquireRequest,
        token: LeaseToken,
        ttl: Ttl,
        reenter: bool,
    ) -> impl Future<Output = Result<Acquired, LockError>> + Send + use<> {
        let mut request = request;
        let op = if reenter {
            Op::Reenter
        } else {
            request.ttl = Some(ttl);
            request.kind = Some(LeaseKind::Reentrant);
            Op::New
        };
        let id = token.lease_id();
        Self::acquire_waiting(
            self.clone(),
            name.clone(),
            op,
            Target::Lock(request),
            id,
            token,
            Duration::ZERO,
        )
    }

    /// This node's waiter registry (woken by this node's subscriber).
    pub fn waiter_registry(&self) -> &Arc<Waiters> {
        &self.inner.waiters
    }

    /// The key a waiter for `name` registers under (the lock's key in this key space).
    pub fn wake_key_of(&self, name: &LockName) -> String {
        self.inner.keys.lock(name).lock().to_owned()
    }
}
