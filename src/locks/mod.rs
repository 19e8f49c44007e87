//! The lock domain: leases on Redis-held locks, with Redisson's data layout.
//!
//! [`Locks`] is the one handle the transport layers use. It runs the scripts in `lua/` (one
//! script, one method), waits for contended locks through the shared subscriber's wake-ups,
//! and rolls back grants whose requester went away before it could learn of them.

pub mod error;
pub mod keys;
pub mod model;
mod replies;
mod scripts;
pub mod waiters;

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use error::{InvalidInput, LockError};
pub use keys::KeySpace;
use keys::LockKeys;
pub use model::*;
use replies::{
    AcquireReply, ForceReleaseReply, HolderEntry, LeaseSnapshot, LockSnapshot, ReleaseReply,
    RenewReply, non_empty, parse,
};
use waiters::Waiters;

/// Settings of the lock domain that do not change while the service runs.
#[derive(Debug, Clone)]
pub struct LockSettings {
    /// Prefix of every Redis key and channel (empty by default, like Redisson).
    pub key_prefix: String,
    /// How long a released or expired lease stays answerable (410 rather than 404).
    pub tombstone_ms: u64,
}

/// Cheap to clone; every clone shares one Redis connection and one waiter registry.
#[derive(Clone)]
pub struct Locks {
    inner: Arc<Inner>,
}

struct Inner {
    conn: ConnectionManager,
    keys: KeySpace,
    events_channel: String,
    waiters: Arc<Waiters>,
    tombstone_ms: u64,
    shutdown: CancellationToken,
}

/// The outcome of one attempt: a grant, or who holds the lock.
type Attempt = Result<Grant, Contention>;

impl Locks {
    pub fn new(
        conn: ConnectionManager,
        settings: &LockSettings,
        waiters: Arc<Waiters>,
        shutdown: CancellationToken,
    ) -> Self {
        let keys = KeySpace::new(settings.key_prefix.clone());
        Self {
            inner: Arc::new(Inner {
                conn,
                events_channel: keys.events_channel(),
                keys,
                waiters,
                tombstone_ms: settings.tombstone_ms,
                shutdown,
            }),
        }
    }

    /// Requests currently waiting for a lock in this process.
    pub fn waiting(&self) -> usize {
        self.inner.waiters.count()
    }

    /// Checks that Redis answers.
    pub async fn ping(&self) -> Result<(), LockError> {
        let mut conn = self.inner.conn.clone();
        redis::cmd("PING").query_async::<()>(&mut conn).await?;
        Ok(())
    }

    /// Acquires `name` for a new lease, or re-enters the lease `request.token` proves, waiting
    /// up to `wait` while someone else holds it.
    ///
    /// Waiting retries on the lock's unlock message or when the holder's TTL runs out, never
    /// on a fixed poll. If the caller's future is dropped (the client went away) after a new
    /// grant may have happened, the grant is rolled back rather than left to expire.
    pub async fn acquire(
        &self,
        name: &LockName,
        request: AcquireRequest,
        ttl: Ttl,
        wait: Duration,
    ) -> Result<Grant, LockError> {
        let keys = self.inner.keys.lock(name);
        let deadline = Instant::now() + wait;
        let registration = (!wait.is_zero()).then(|| self.inner.waiters.register(keys.lock()));
        let new_lease = match &request.token {
            Some(_) => None,
            None => Some((LeaseId::generate(), LeaseToken::generate())),
        };
        let mut rollback = new_lease.as_ref().map(|(id, token)| RollbackOnDrop {
            locks: self.clone(),
            name: name.clone(),
            lease_id: *id,
            token: token.clone(),
            armed: false,
        });
        loop {
            // Registered before the attempt, so an unlock right after a refusal still wakes us.
            let notified = registration.as_ref().map(|r| r.notified());
            if let Some(guard) = rollback.as_mut() {
                guard.armed = true;
            }
            let attempt = self
                .try_acquire(name, &keys, &request, ttl, new_lease.as_ref())
                .await;
            let contention = match attempt {
                Ok(Ok(grant)) => {
                    if let Some(guard) = rollback.as_mut() {
                        guard.armed = false;
                    }
                    return Ok(grant);
                }
                Ok(Err(contention)) => contention,
                Err(e) => {
                    // Redis may or may not have run the script: leave the guard armed.
                    return Err(e);
                }
            };
            if let Some(guard) = rollback.as_mut() {
                guard.armed = false;
            }
            let now = Instant::now();
            let Some(notified) = notified.filter(|_| now < deadline) else {
                return Err(LockError::Held(contention));
            };
            // The holder's TTL running out wakes nobody through pub/sub: retry then as well.
            let retry_at = contention.retry_after.map_or(deadline, |d| {
                (now + d + Duration::from_millis(1)).min(deadline)
            });
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(retry_at) => {}
                () = self.inner.shutdown.cancelled() => return Err(LockError::ShuttingDown),
            }
        }
    }

    async fn try_acquire(
        &self,
        name: &LockName,
        keys: &LockKeys,
        request: &AcquireRequest,
        ttl: Ttl,
        new_lease: Option<&(LeaseId, LeaseToken)>,
    ) -> Result<Attempt, LockError> {
        let mut invocation = scripts::ACQUIRE.prepare_invoke();
        invocation
            .key(keys.lock())
            .key(keys.state())
            .key(keys.lease_prefix());
        match (&request.token, new_lease) {
            (Some(token), _) => {
                invocation
                    .key(keys.token(&token.digest()))
                    .arg(request.ttl.map_or(0, Ttl::as_millis))
                    .arg("reenter")
                    .arg("")
                    .arg("");
            }
            (None, Some((id, token))) => {
                let digest = token.digest();
                invocation
                    .key(keys.token(&digest))
                    .arg(ttl.as_millis())
                    .arg("new")
                    .arg(id.to_string())
                    .arg(digest.hex());
            }
            (None, None) => return Err(LockError::BadReply("acquire without a lease".into())),
        }
        invocation
            .arg(request.holder.as_ref().map_or("", HolderLabel::as_str))
            .arg(
                request
                    .metadata
                    .as_ref()
                    .map(Metadata::to_json)
                    .unwrap_or_default(),
            )
            .arg(name.as_str())
            .arg(&self.inner.events_channel)
            .arg(self.inner.tombstone_ms);
        let raw: String = invocation
            .invoke_async(&mut self.inner.conn.clone())
            .await?;
        match parse::<AcquireReply>(&raw)? {
            AcquireReply::Acquired(g) => Ok(Ok(grant(g, new_lease.map(|(_, t)| t.clone()))?)),
            AcquireReply::Reentered(g) => Ok(Ok(grant(g, None)?)),
            AcquireReply::Held {
                pttl,
                holder_id,
                lease_id,
                holder,
            } => Ok(Err(Contention {
                holder: non_empty(holder),
                lease_id: lease_id.as_deref().and_then(LeaseId::parse),
                holder_id,
                retry_after: u64::try_from(pttl).ok().map(Duration::from_millis),
            })),
            AcquireReply::LeaseLost { state } => Err(replies::lost(state)),
            AcquireReply::UnknownToken => Err(LockError::UnknownToken),
        }
    }

    /// Extends a live lease to its TTL (or to `ttl`, which becomes its TTL from now on).
    pub async fn renew(
        &self,
        name: &LockName,
        lease_id: LeaseId,
        token: &LeaseToken,
        ttl: Option<Ttl>,
    ) -> Result<Renewal, LockError> {
        let keys = self.inner.keys.lock(name);
        let digest = token.digest();
        let raw: String = scripts::RENEW
            .key(keys.lock())
            .key(keys.lease(lease_id))
            .key(keys.token(&digest))
            .arg(lease_id.to_string())
            .arg(digest.hex())
            .arg(ttl.map_or(0, Ttl::as_millis))
            .arg(name.as_str())
            .arg(&self.inner.events_channel)
            .arg(self.inner.tombstone_ms)
            .invoke_async(&mut self.inner.conn.clone())
            .await?;
        match parse::<RenewReply>(&raw)? {
            RenewReply::Renewed {
                reentry_count,
                ttl_ms,
                now_ms,
                fencing_token,
                slack_ms,
            } => Ok(Renewal {
                lease_id,
                reentry_count,
                fencing_token: FencingToken(fencing_token),
                ttl_ms,
                expires_at: Timestamp(now_ms).plus(ttl_ms),
                slack_ms,
            }),
            RenewReply::Refused(r) => Err(r.into()),
        }
    }

    /// Releases one reentry level of a lease, or all of them; at zero the lock is free and
    /// its waiters (Leasehold's and Redisson's) wake up.
    pub async fn release(
        &self,
        name: &LockName,
        lease_id: LeaseId,
        token: &LeaseToken,
        all: bool,
    ) -> Result<Release, LockError> {
        self.run_release(name, lease_id, token, all, "released")
            .await
    }

    async fn run_release(
        &self,
        name: &LockName,
        lease_id: LeaseId,
        token: &LeaseToken,
        all: bool,
        reason: &str,
    ) -> Result<Release, LockError> {
        let keys = self.inner.keys.lock(name);
        let digest = token.digest();
        let raw: String = scripts::RELEASE
            .key(keys.lock())
            .key(keys.lease(lease_id))
            .key(keys.token(&digest))
            .key(keys.unlock_channel())
            .arg(lease_id.to_string())
            .arg(digest.hex())
            .arg(if all { "all" } else { "one" })
            .arg(name.as_str())
            .arg(&self.inner.events_channel)
            .arg(self.inner.tombstone_ms)
            .arg(reason)
            .invoke_async(&mut self.inner.conn.clone())
            .await?;
        match parse::<ReleaseReply>(&raw)? {
            ReleaseReply::Released => Ok(Release {
                lease_id,
                reentry_count: 0,
                released: true,
            }),
            ReleaseReply::StillHeld { reentry_count } => Ok(Release {
                lease_id,
                reentry_count,
                released: false,
            }),
            ReleaseReply::Refused(r) => Err(r.into()),
        }
    }

    /// One lease's state, as anyone may see it.
    pub async fn lease(&self, name: &LockName, lease_id: LeaseId) -> Result<LeaseView, LockError> {
        let keys = self.inner.keys.lock(name);
        let raw: String = scripts::INSPECT_LEASE
            .key(keys.lock())
            .key(keys.lease(lease_id))
            .arg(lease_id.to_string())
            .invoke_async(&mut self.inner.conn.clone())
            .await?;
        let snap: LeaseSnapshot = parse(&raw)?;
        let (true, Some(state)) = (snap.found, snap.state) else {
            return Err(LockError::UnknownLease);
        };
        let held = state == LeaseState::Held;
        let remaining_ms = if held {
            u64::try_from(snap.pttl).ok()
        } else {
            None
        };
        Ok(LeaseView {
            lease_id,
            lock: name.clone(),
            state,
            holder: non_empty(snap.holder),
            metadata: Metadata::from_stored(snap.metadata.as_deref()),
            fencing_token: FencingToken(snap.fencing_token.unwrap_or(0)),
            reentry_count: snap.reentry_count,
            ttl_ms: snap.ttl_ms.unwrap_or(0),
            acquired_at: Timestamp(snap.created_ms.unwrap_or(0)),
            // While held, the live expiry (a reentry or heartbeat may have moved it).
            expires_at: match remaining_ms {
                Some(left) => Timestamp(snap.now_ms).plus(left),
                None => Timestamp(snap.expires_ms.unwrap_or(0)),
            },
            ended_at: if held {
                None
            } else {
                snap.ended_ms.map(Timestamp)
            },
            remaining_ms,
        })
    }

    /// The lock's holders and fencing counter; `None` when it is free and was never taken.
    pub async fn lock(&self, name: &LockName) -> Result<Option<LockView>, LockError> {
        let keys = self.inner.keys.lock(name);
        let raw: String = scripts::INSPECT_LOCK
            .key(keys.lock())
            .key(keys.state())
            .key(keys.lease_prefix())
            .invoke_async(&mut self.inner.conn.clone())
            .await?;
        let snap: LockSnapshot = parse(&raw)?;
        if !snap.known {
            return Ok(None);
        }
        let remaining_ms = if snap.holders.is_empty() {
            None
        } else {
            u64::try_from(snap.pttl).ok()
        };
        Ok(Some(LockView {
            lock: name.clone(),
            holders: snap.holders.into_iter().map(holder_view).collect(),
            fencing_counter: FencingToken(snap.fence),
            remaining_ms,
            expires_at: remaining_ms.map(|left| Timestamp(snap.now_ms).plus(left)),
        }))
    }

    /// Removes every holder of `name` (an admin action): waiters wake, the removed leases'
    /// holders get 410 from then on, and the event names `by` and `reason`.
    pub async fn force_release(
        &self,
        name: &LockName,
        by: &str,
        reason: &str,
    ) -> Result<ForcedRelease, LockError> {
        let keys = self.inner.keys.lock(name);
        let raw: String = scripts::FORCE_RELEASE
            .key(keys.lock())
            .key(keys.lease_prefix())
            .key(keys.token_prefix())
            .key(keys.unlock_channel())
            .arg(name.as_str())
            .arg(&self.inner.events_channel)
            .arg(self.inner.tombstone_ms)
            .arg(by)
            .arg(reason)
            .invoke_async(&mut self.inner.conn.clone())
            .await?;
        let removed = match parse::<ForceReleaseReply>(&raw)? {
            ForceReleaseReply::ForceReleased { holders } => {
                holders.into_iter().map(holder_view).collect()
            }
            ForceReleaseReply::NotHeld => Vec::new(),
        };
        Ok(ForcedRelease {
            lock: name.clone(),
            removed,
        })
    }
}

fn grant(g: replies::Granted, token: Option<LeaseToken>) -> Result<Grant, LockError> {
    let lease_id = LeaseId::parse(&g.lease_id)
        .ok_or_else(|| LockError::BadReply(format!("lease id {:?}", g.lease_id)))?;
    Ok(Grant {
        lease_id,
        token,
        holder: non_empty(g.holder),
        fencing_token: FencingToken(g.fencing_token),
        reentry_count: g.reentry_count,
        ttl_ms: g.ttl_ms,
        acquired_at: Timestamp(g.created_ms),
        expires_at: Timestamp(g.now_ms).plus(g.ttl_ms),
    })
}

fn holder_view(h: HolderEntry) -> HolderView {
    HolderView {
        lease_id: h.lease_id.as_deref().and_then(LeaseId::parse),
        holder: non_empty(h.holder),
        metadata: Metadata::from_stored(h.metadata.as_deref()),
        reentry_count: h.reentry_count,
        fencing_token: h.fencing_token.map(FencingToken),
        acquired_at: h.created_ms.map(Timestamp),
        holder_id: h.holder_id,
    }
}

/// Releases a new lease if the acquiring future is dropped while a grant may have happened
/// (script in flight, or granted but not yet returned): the client that asked is gone and
/// will never learn the token, so the lease would only block others until its TTL ran out.
struct RollbackOnDrop {
    locks: Locks,
    name: LockName,
    lease_id: LeaseId,
    token: LeaseToken,
    armed: bool,
}

impl Drop for RollbackOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (locks, name, lease_id, token) = (
            self.locks.clone(),
            self.name.clone(),
            self.lease_id,
            self.token.clone(),
        );
        runtime.spawn(async move {
            match locks.run_release(&name, lease_id, &token, true, "client_gone").await {
                Ok(_) => tracing::info!(lock = %name, %lease_id, "rolled back a grant whose client went away"),
                Err(LockError::UnknownLease) => {}
                Err(e) => tracing::warn!(lock = %name, %lease_id, error = %e, "could not roll back an undelivered grant"),
            }
        });
    }
}
