//! The lock domain: leases on Redis-held locks and semaphores, in Redisson's data layouts.
//!
//! [`Locks`] is the one handle the transport layers use. It runs the scripts in `lua/` (one
//! script, one method), waits for contended locks through the shared subscriber's wake-ups
//! ([`waiting`]), and gives back what a caller that went away may have been granted.

mod clock;
pub mod error;
mod history;
pub mod keys;
mod listing;
pub mod model;
mod replies;
mod scripts;
mod semaphores;
pub mod waiters;
mod waiting;

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use tokio_util::sync::CancellationToken;

use crate::metrics::{Metrics, kind_label};

pub use error::{InvalidInput, LockError};
pub use history::{HISTORY_SHOWN, LockEvent};
pub use keys::KeySpace;
pub use listing::{ListCursor, LiveEntry, LivePage, NamePrefix};
pub use semaphores::LimitChange;

pub use model::*;
use replies::{
    ForceReleaseReply, HolderEntry, LeaseSnapshot, LeaveReply, LockSnapshot, ReleaseReply,
    RenewReply, non_empty, parse,
};
use waiters::Waiters;
use waiting::{Op, Target};

/// Why a release script runs.
#[derive(Debug, Clone, Copy)]
enum ReleaseHow<'a> {
    /// The lease's holder asked.
    Asked {
        all: bool,
        mode: Option<RwMode>,
        idempotency: Option<&'a IdempotencyKey>,
    },
    /// A grant whose client went away is taken back, if the request that made it (`nonce`)
    /// is still the only one that knows it.
    Rollback { nonce: &'a str },
}

/// Settings of the lock domain that do not change while the service runs.
#[derive(Debug, Clone)]
pub struct LockSettings {
    /// Prefix of every Redis key and channel (empty by default, like Redisson).
    pub key_prefix: String,
    /// How long a released or expired lease stays answerable (410 rather than 404).
    pub tombstone_ms: u64,
    /// How long a fair-queue ticket keeps its place without being polled.
    pub ticket_timeout_ms: u64,
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
    ticket_timeout: Duration,
    shutdown: CancellationToken,
    metrics: Arc<Metrics>,
    clock: Arc<clock::RedisClock>,
    redis_timeout: Duration,
}

/// Which KEYS a script takes: every lock script the same seven (`lua/locklib.lua`), every
/// semaphore script the same four (`lua/semlib.lua`).
#[derive(Debug, Clone, Copy)]
enum Family {
    Lock,
    Semaphore,
}

impl Locks {
    /// An invocation of `script` with its family's KEYS for the lock or semaphore `name`, and
    /// the ARGV every script starts with (`lua/prelude.lua`): the name, the events channel
    /// and the tombstone time.
    fn prepared<'a>(
        &self,
        script: &'a redis::Script,
        name: &LockName,
        family: Family,
    ) -> redis::ScriptInvocation<'a> {
        let keys = self.inner.keys.lock(name);
        let mut invocation = script.prepare_invoke();
        let all: Vec<String> = match family {
            Family::Lock => keys.lock_script_keys().into(),
            Family::Semaphore => keys.semaphore_script_keys().into(),
        };
        for key in all {
            invocation.key(key);
        }
        invocation
            .arg(name.as_str())
            .arg(&self.inner.events_channel)
            .arg(self.inner.tombstone_ms)
            .arg(self.inner.clock.deadline(self.inner.redis_timeout));
        invocation
    }
}

/// How many queued waiters an inspection lists.
const QUEUE_LISTED: u64 = 100;

impl Locks {
    /// `redis_timeout`: how long a Redis command may take; a script that changes state
    /// refuses to run later than this after it was sent (see [`clock`]).
    pub fn new(
        conn: ConnectionManager,
        settings: &LockSettings,
        redis_timeout: Duration,
        waiters: Arc<Waiters>,
        shutdown: CancellationToken,
        metrics: Arc<Metrics>,
    ) -> Self {
        let keys = KeySpace::new(settings.key_prefix.clone());
        Self {
            inner: Arc::new(Inner {
                conn,
                events_channel: keys.events_channel(),
                keys,
                waiters,
                tombstone_ms: settings.tombstone_ms,
                ticket_timeout: Duration::from_millis(settings.ticket_timeout_ms),
                shutdown,
                metrics,
                clock: Arc::default(),
                redis_timeout,
            }),
        }
    }

    /// Keeps this process's estimate of Redis's clock fresh (for script deadlines) until
    /// shutdown.
    pub fn spawn_clock_sync(&self) -> tokio::task::JoinHandle<()> {
        self.inner
            .clock
            .clone()
            .spawn_sync(self.inner.conn.clone(), self.inner.shutdown.clone())
    }

    /// Requests currently waiting for a lock or semaphore in this process.
    pub fn waiting(&self) -> usize {
        self.inner.waiters.count()
    }

    /// Runs one script call (`script` names its file in `lua/`), timing it for the metrics.
    async fn invoke(
        &self,
        script: &'static str,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<String, LockError> {
        let started = std::time::Instant::now();
        let result = invocation.invoke_async(&mut self.inner.conn.clone()).await;
        self.inner
            .metrics
            .script_call(script, started.elapsed(), result.is_ok());
        Ok(result?)
    }

    /// Records what a refused lease call tells about its lease.
    fn observe_refusal(&self, lease_id: LeaseId, error: &LockError) {
        if let LockError::LeaseLost(state) = error {
            if *state == LeaseState::Expired {
                self.inner.metrics.expired(lease_id);
            } else {
                self.inner.metrics.lease_ended(lease_id);
            }
        }
    }

    /// Records a heartbeat's slack, or that it came too late.
    fn observe_renewal(&self, lease_id: LeaseId, renewed: &Result<Renewal, LockError>) {
        let metrics = &self.inner.metrics;
        match renewed {
            Ok(r) => {
                let ttl = Duration::from_millis(r.ttl_ms);
                let slack = Duration::from_millis(u64::try_from(r.slack_ms).unwrap_or(0));
                metrics.heartbeat(slack, ttl);
                metrics.lease_live(lease_id, ttl);
            }
            Err(e) => {
                if matches!(e, LockError::LeaseLost(LeaseState::Expired)) {
                    metrics.heartbeat_too_late();
                }
                self.observe_refusal(lease_id, e);
            }
        }
    }

    /// Records a release's hold time once the lease let go of its last level.
    fn observe_release(&self, lease_id: LeaseId, reply: &ReleaseReply, reason: &str) {
        if let ReleaseReply::Released { held_ms, kind } = reply {
            let held = (reason == "released")
                .then(|| held_ms.map(Duration::from_millis))
                .flatten();
            let kind = kind_label(kind.as_deref().unwrap_or("other"));
            self.inner.metrics.released(lease_id, kind, held);
        }
    }

    fn observe_forced(&self, forced: &ForcedRelease) {
        for id in forced.removed.iter().filter_map(|h| h.lease_id) {
            self.inner.metrics.lease_ended(id);
        }
    }

    /// Checks that Redis answers.
    pub async fn ping(&self) -> Result<(), LockError> {
        let mut conn = self.inner.conn.clone();
        redis::cmd("PING").query_async::<()>(&mut conn).await?;
        Ok(())
    }

    /// Acquires `name` for a new lease of `request.kind`, or re-enters the lease
    /// `request.token` proves, waiting up to `wait` while the lock is taken. A fair lock
    /// still queued when the wait ends answers with a [`Ticket`] that keeps its place.
    pub async fn acquire(
        &self,
        name: &LockName,
        request: AcquireRequest,
        ttl: Ttl,
        wait: Duration,
    ) -> Result<Acquired, LockError> {
        let (op, id, token, ttl) = match request.token.clone() {
            // The script finds the lease from the token; the id is not used.
            Some(token) => (Op::Reenter, LeaseId::generate(), token, request.ttl),
            None => (
                Op::New,
                LeaseId::generate(),
                LeaseToken::generate(),
                Some(ttl),
            ),
        };
        let target = Target::Lock {
            op,
            kind: request
                .kind
                .or((op == Op::New).then_some(LockKind::Reentrant)),
            policy: request.policy,
            ttl,
            holder: request.holder.as_ref(),
            metadata: request.metadata.as_ref(),
            idempotency: request.idempotency.as_ref(),
        };
        self.acquire_waiting(name, target, id, token, wait).await
    }

    /// A fair-queue ticket tries again, waiting up to `wait`: the lease, or the ticket still
    /// queued.
    pub async fn poll_ticket(
        &self,
        name: &LockName,
        ticket: LeaseId,
        token: LeaseToken,
        wait: Duration,
    ) -> Result<Acquired, LockError> {
        let target = Target::Lock {
            op: Op::Poll,
            kind: Some(LockKind::Fair),
            policy: RwPolicy::default(),
            ttl: None,
            holder: None,
            metadata: None,
            idempotency: None,
        };
        self.acquire_waiting(name, target, ticket, token, wait)
            .await
    }

    /// Gives up a fair-queue ticket's place (or a waiting writer's).
    pub async fn leave(
        &self,
        name: &LockName,
        ticket: LeaseId,
        token: &LeaseToken,
    ) -> Result<(), LockError> {
        let mut invocation = self.prepared(&scripts::LEAVE, name, Family::Lock);
        invocation.arg(ticket.to_string()).arg(token.digest().hex());
        let raw: String = self.invoke("leave", &invocation).await?;
        match parse::<LeaveReply>(&raw)? {
            LeaveReply::Left => Ok(()),
            LeaveReply::NotQueued { state } => Err(replies::lost(state)),
            LeaveReply::Refused(r) => Err(r.into()),
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
        let how = (&*scripts::RENEW, "renew", Family::Lock);
        self.renew_via(how, name, lease_id, token, ttl).await
    }

    /// Runs a heartbeat script: `renew.lua` and `semaphore_renew.lua` take the same ARGV.
    async fn renew_via(
        &self,
        (script, label, family): (&redis::Script, &'static str, Family),
        name: &LockName,
        lease_id: LeaseId,
        token: &LeaseToken,
        ttl: Option<Ttl>,
    ) -> Result<Renewal, LockError> {
        let mut invocation = self.prepared(script, name, family);
        invocation
            .arg(lease_id.to_string())
            .arg(token.digest().hex())
            .arg(ttl.map_or(0, Ttl::as_millis));
        let raw: String = self.invoke(label, &invocation).await?;
        let renewed = renewal(lease_id, parse(&raw)?);
        self.observe_renewal(lease_id, &renewed);
        renewed
    }

    /// Releases one reentry level of a lease, or all of them (for a read/write lease: of both
    /// modes, or of the `mode` hold; one level goes write first by default); at zero the lock
    /// is free and its waiters wake. A retry with the same `idempotency` key gets the first
    /// answer.
    pub async fn release(
        &self,
        name: &LockName,
        lease_id: LeaseId,
        token: &LeaseToken,
        all: bool,
        mode: Option<RwMode>,
        idempotency: Option<&IdempotencyKey>,
    ) -> Result<Release, LockError> {
        let how = ReleaseHow::Asked {
            all,
            mode,
            idempotency,
        };
        self.release_because(name, lease_id, token, how).await
    }

    async fn release_because(
        &self,
        name: &LockName,
        lease_id: LeaseId,
        token: &LeaseToken,
        how: ReleaseHow<'_>,
    ) -> Result<Release, LockError> {
        let mut invocation = self.prepared(&scripts::RELEASE, name, Family::Lock);
        let (all, mode, reason, nonce, idempotency) = match how {
            ReleaseHow::Asked {
                all,
                mode,
                idempotency,
            } => (all, mode, "released", "", idempotency),
            ReleaseHow::Rollback { nonce } => (true, None, "client_gone", nonce, None),
        };
        let fp = fingerprint(&[
            "release",
            &lease_id.to_string(),
            if all { "all" } else { "one" },
            mode.map_or("", RwMode::as_str),
            &token.digest().hex(),
        ]);
        invocation
            .arg(lease_id.to_string())
            .arg(token.digest().hex())
            .arg(if all { "all" } else { "one" })
            .arg(reason)
            .arg(mode.map_or("", RwMode::as_str))
            .arg(nonce)
            .arg(
                idempotency
                    .map(IdempotencyKey::digest_hex)
                    .unwrap_or_default(),
            )
            .arg(fp);
        let raw: String = self.invoke("release", &invocation).await?;
        let reply: ReleaseReply = parse(&raw)?;
        self.observe_release(lease_id, &reply, reason);
        let released = release(lease_id, reply);
        if let Err(e) = &released {
            self.observe_refusal(lease_id, e);
        }
        released
    }

    /// One lease's (or fair ticket's) state, as anyone may see it.
    pub async fn lease(&self, name: &LockName, lease_id: LeaseId) -> Result<LeaseView, LockError> {
        let mut invocation = self.prepared(&scripts::INSPECT_LEASE, name, Family::Lock);
        invocation.arg(lease_id.to_string());
        let raw: String = self.invoke("inspect_lease", &invocation).await?;
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
            kind: snap.kind.unwrap_or_else(|| "reentrant".into()),
            read_count: snap.read_count,
            write_count: snap.write_count,
            position: snap.position,
            permits: None,
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

    /// The lock's kind, holders, fair queue and fencing counter; `None` when it is free and
    /// was never taken.
    pub async fn lock(&self, name: &LockName) -> Result<Option<LockView>, LockError> {
        let mut invocation = self.prepared(&scripts::INSPECT_LOCK, name, Family::Lock);
        invocation.arg(QUEUE_LISTED);
        let raw: String = self.invoke("inspect_lock", &invocation).await?;
        let snap: LockSnapshot = parse(&raw)?;
        if !snap.known {
            return Ok(None);
        }
        let remaining_ms = if snap.holders.is_empty() {
            None
        } else {
            u64::try_from(snap.pttl).ok()
        };
        let queue = snap
            .queue
            .into_iter()
            .zip(1..)
            .map(|(q, position)| QueuedView {
                position,
                lease_id: q.lease_id.as_deref().and_then(LeaseId::parse),
                holder: non_empty(q.holder),
                queued_at: q.queued_ms.map(Timestamp),
                deadline: q.deadline_ms.map(Timestamp),
                holder_id: q.holder_id,
            })
            .collect();
        Ok(Some(LockView {
            lock: name.clone(),
            kind: snap.held_as,
            mode: snap.mode,
            holders: snap.holders.into_iter().map(holder_view).collect(),
            queue,
            queue_length: snap.queue_length,
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
        let how = (&*scripts::FORCE_RELEASE, "force_release", Family::Lock);
        self.force_release_via(how, name, by, reason, false).await
    }

    /// Runs a force-release script: `force_release.lua` and `semaphore_force_release.lua`
    /// take the same ARGV.
    async fn force_release_via(
        &self,
        (script, label, family): (&redis::Script, &'static str, Family),
        name: &LockName,
        by: &str,
        reason: &str,
        clear: bool,
    ) -> Result<ForcedRelease, LockError> {
        let mut invocation = self.prepared(script, name, family);
        invocation
            .arg(by)
            .arg(reason)
            .arg(if clear { "clear" } else { "" });
        let raw: String = self.invoke(label, &invocation).await?;
        let forced = forced(name, parse(&raw)?)?;
        self.observe_forced(&forced);
        Ok(forced)
    }
}

fn renewal(lease_id: LeaseId, reply: RenewReply) -> Result<Renewal, LockError> {
    match reply {
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

fn release(lease_id: LeaseId, reply: ReleaseReply) -> Result<Release, LockError> {
    match reply {
        ReleaseReply::Released { .. } => Ok(Release {
            lease_id,
            reentry_count: 0,
            released: true,
        }),
        ReleaseReply::StillHeld { reentry_count } => Ok(Release {
            lease_id,
            reentry_count,
            released: false,
        }),
        ReleaseReply::NotRolledBack => Err(LockError::NotRolledBack),
        ReleaseReply::IdempotencyMismatch => Err(LockError::IdempotencyMismatch),
        ReleaseReply::Refused(r) => Err(r.into()),
    }
}

fn forced(name: &LockName, reply: ForceReleaseReply) -> Result<ForcedRelease, LockError> {
    let removed = match reply {
        ForceReleaseReply::ForceReleased { holders } => {
            holders.into_iter().map(holder_view).collect()
        }
        ForceReleaseReply::NotHeld => Vec::new(),
        ForceReleaseReply::KindConflict { held_as } => {
            return Err(LockError::KindConflict { held_as });
        }
        ForceReleaseReply::TooLate => return Err(LockError::TooLate),
    };
    Ok(ForcedRelease {
        lock: name.clone(),
        removed,
    })
}

fn holder_view(h: HolderEntry) -> HolderView {
    let rw = h.read_count.unwrap_or(0) + h.write_count.unwrap_or(0) > 0;
    HolderView {
        lease_id: h.lease_id.as_deref().and_then(LeaseId::parse),
        holder: non_empty(h.holder),
        metadata: Metadata::from_stored(h.metadata.as_deref()),
        reentry_count: h.reentry_count,
        read_count: h.read_count.filter(|_| rw),
        write_count: h.write_count.filter(|_| rw),
        kind: h.kind,
        fencing_token: h.fencing_token.map(FencingToken),
        acquired_at: h.created_ms.map(Timestamp),
        holder_id: h.holder_id,
    }
}
