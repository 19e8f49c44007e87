//! What the RedLock layer (`crate::leases::redlock`) needs of one node's lock domain, and nothing
//! else: a new reentrant lease under a token the caller chose (the same lease id on every
//! node, so each node holds Redisson's field `<lease-id>:1`, as `RedissonRedLock` holds one
//! `<client-id>:<thread-id>` on each), and the node's waiter registry, so that an unlock
//! message on any node wakes a RedLock waiter.

use std::sync::Arc;
use std::time::Duration;

use crate::locks::error::LockError;
use crate::locks::scripts::acquire::Op;
use crate::locks::types::{
    AcquireRequest, Acquired, LeaseId, LeaseKind, LeaseToken, LockName, Ttl,
};
use crate::locks::wakeups::WaitRegistry;
use crate::locks::{Locks, ops::attempt::Target};

/// One RedLock node's lock domain, as the RedLock layer uses it: [`Locks::redlock_node`].
#[derive(Clone, Copy)]
pub struct RedlockNode<'a> {
    locks: &'a Locks,
}

impl Locks {
    /// This lock domain as a RedLock node's (what only the RedLock layer asks of it).
    pub fn redlock_node(&self) -> RedlockNode<'_> {
        RedlockNode { locks: self }
    }
}

impl<'a> RedlockNode<'a> {
    /// One attempt, no wait, at a new reentrant lease `id` proven by `token` (the caller made
    /// both: every RedLock node gets the same), or a reentry of that lease when `reenter`.
    /// Dropped before its answer, it gives back what it may have got (as every acquire does).
    #[allow(clippy::too_many_arguments)] // The lease (id, token) and what is asked of it.
    pub fn acquire_as(
        self,
        name: &LockName,
        request: AcquireRequest,
        id: LeaseId,
        token: LeaseToken,
        ttl: Ttl,
        reenter: bool,
    ) -> impl Future<Output = Result<Acquired, LockError>> + Send + use<> {
        let mut request = request;
        // Each node holds a RedLock lease as Redisson's RLock: a reentrant lease.
        request.kind = Some(LeaseKind::Reentrant);
        let op = if reenter {
            Op::Reenter
        } else {
            request.ttl = Some(ttl);
            Op::New
        };
        Locks::acquire_waiting(
            self.locks.clone(),
            name.clone(),
            op,
            Target::Lock(request),
            id,
            token,
            Duration::ZERO,
        )
    }

    /// This node's waiter registry (woken by this node's subscriber).
    pub fn waiter_registry(self) -> &'a Arc<WaitRegistry> {
        &self.locks.inner.waiters
    }

    /// The key a waiter for `name` registers under (the lock's key in this key space).
    pub fn wake_key_of(self, name: &LockName) -> String {
        self.locks.inner.keys.lock(name).lock().to_owned()
    }
}
