//! The lock domain: leases on Redis-held locks and semaphores, in Redisson's data layouts.
//! Knows nothing of HTTP; reports what happens through an [`observer::Observer`], and reaches
//! Redis only through the seam ([`crate::redis::Redis`]).
//!
//! Where things are:
//! - [`Locks`] (here): the one handle the transport layers use, and the one way a Lua
//!   function is called ([`Locks::call`]).
//! - [`types`]: the vocabulary: names, lease ids and tokens, TTLs, kinds, requests, views, the
//!   typed [`LockEvent`].
//! - [`ops`]: what callers do, one file per family of use cases: `acquire` (new leases,
//!   reentries, tickets, permits, waiting server-side, rolling back what a caller that went
//!   away got), `lease` (heartbeat, release, leave, inspect a lease), `inspect` (a lock's or
//!   semaphore's state), `listing` and `census` (the live names), `admin` and `eviction`
//!   (operators' actions), `watch` (a lease's end), `tenure` (how long a name is held).
//! - [`wakeups`]: the in-process registry of waiting requests, and what wakes them (the
//!   subscriber's unlock messages).
//! - [`feed`]: what the domain tells about itself: the history stream, the live publisher and
//!   its journal, the waiting lists, the names index, the expiry sweeper.
//! - `scripts`: one Rust twin per Lua file in `lua/` (arguments and reply).
//! - [`layout`]: the Redis key layout;
//!   [`error`]: what can go wrong, as situations.

pub use crate::redis::wall_ms;

pub mod error;
pub mod feed;
pub mod layout;
pub mod observer;
pub mod ops;
mod persistence;
pub use persistence::Persistence;
mod scripts;
pub mod types;
pub mod wakeups;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

pub use self::error::LockError;
pub use self::feed::history::{HISTORY_LIFE, HISTORY_SHOWN, merged, ongoing, ongoing_permits};
pub use self::feed::waitlist::WaiterView;
pub use self::layout::{KeySpace, OWN_TAG, own_key, wake_channels};
pub use self::observer::Observer;
pub use self::ops::census::Census;
pub use self::ops::listing::{ListCursor, LiveEntry, LivePage, NamePrefix};
pub use self::ops::tenure::held_for;
pub use self::ops::watch::{LeaseEnd, LeaseWatch};
use self::scripts::Script;
pub use self::types::{
    AcquireRequest, Acquired, Contention, Degraded, EventKind, FencingToken, ForcedRelease, Grant,
    HeldAs, HolderLabel, HolderView, IdempotencyKey, InvalidInput, LeaseId, LeaseKind, LeaseState,
    LeaseToken, LeaseView, LimitChange, LockDelay, LockEvent, LockName, LockView, MemberGrant,
    MemberView, Membership, Metadata, MultiGrant, MultiMember, MultiRenewal, MultiRequest,
    MultiView, PermitHolderView, PermitRequest, QueuedView, Release, Renewal, Resource, RwMode,
    RwPolicy, SemaphoreView, Ticket, Timestamp, TokenDigest, Ttl, TtlPolicy, random_secret,
};
use self::wakeups::Waiters;
use crate::redis::{Acked, Redis};
pub use crate::redis::{MemoryState, RedisMemory, RedisStatus};

/// Settings of the lock domain that do not change while the service runs.
#[derive(Debug, Clone)]
pub struct LockSettings {
    /// Prefix of every Redis key and channel (empty by default, like Redisson).
    pub key_prefix: String,
    /// How long a released or expired lease stays answerable (410 rather than 404).
    pub tombstone_ms: u64,
    /// How long a fair-queue ticket keeps its place without being polled.
    pub ticket_timeout_ms: u64,
    /// How long one Redis command may take; a script that changes state refuses to run later
    /// than this after it was sent (see [`crate::redis::clock`]).
    pub redis_timeout: Duration,
    /// The requests' script calls that wait on Redis at once, at most, in this process (of
    /// every key space; the sweeper's are apart). Beyond that a call waits for its turn
    /// holding nothing but its place, for at most `redis_timeout`. Sent at once, each waiting
    /// call would hold its command, the client's boxed future and room for its reply: a burst
    /// of requests (10,000 waiters parking at once) held them all together, and the allocator
    /// then kept that memory (BENCHMARKS.md, W10). Redis runs one call at a time; a few
    /// hundred queued keep it busy.
    pub calls_in_flight: usize,
}

/// Cheap to clone; every clone shares one Redis connection and one waiter registry.
#[derive(Clone)]
pub struct Locks {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Redis,
    keys: KeySpace,
    events_channel: Arc<str>,
    waiters: Arc<Waiters>,
    settings: LockSettings,
    shutdown: CancellationToken,
    observer: Arc<dyn Observer>,
    publisher: Arc<feed::publisher::Publisher>,
    waitlist: Arc<feed::waitlist::Writer>,
    noted: Arc<feed::index::Noted>,
    /// Turns for the requests' script calls (see [`LockSettings::calls_in_flight`]).
    calls: Arc<Semaphore>,
}

/// How many queued waiters an inspection lists.
const QUEUE_LISTED: u64 = 100;

/// A turn to send one script call to Redis.
pub(in crate::locks) type Turn<'a> = tokio::sync::SemaphorePermit<'a>;

impl Locks {
    pub fn new(
        conn: Redis,
        settings: &LockSettings,
        waiters: Arc<Waiters>,
        shutdown: CancellationToken,
        observer: Arc<dyn Observer>,
    ) -> Self {
        let keys = KeySpace::new(settings.key_prefix.clone());
        Self {
            inner: Arc::new(Inner {
                conn,
                events_channel: keys.events_channel().into(),
                keys,
                waiters,
                settings: settings.clone(),
                shutdown,
                observer,
                publisher: Arc::default(),
                waitlist: Arc::default(),
                noted: Arc::default(),
                calls: Arc::new(Semaphore::new(settings.calls_in_flight.max(1))),
            }),
        }
    }

    /// The same handle acting in another key space (a tenant's): every key, channel and
    /// event of the returned handle lives under `keys`, while the Redis connection, the
    /// waiter registry, the event publisher, the waiting lists' writer and the observer stay
    /// shared. Cheap enough per request.
    /// The one subscriber still wakes its waiters as long as `keys`'s prefix starts with the
    /// subscriber's (its patterns are `<channel>{<prefix>*`).
    pub fn in_space(&self, keys: KeySpace) -> Self {
        let inner = &self.inner;
        Self {
            inner: Arc::new(Inner {
                conn: inner.conn.clone(),
                events_channel: keys.events_channel().into(),
                keys,
                waiters: inner.waiters.clone(),
                settings: inner.settings.clone(),
                shutdown: inner.shutdown.clone(),
                observer: inner.observer.clone(),
                publisher: inner.publisher.clone(),
                waitlist: inner.waitlist.clone(),
                noted: inner.noted.clone(),
                calls: inner.calls.clone(),
            }),
        }
    }

    /// Keeps this process's estimate of Redis's clock fresh (for script deadlines) until
    /// shutdown.
    pub fn spawn_clock_sync(&self) -> tokio::task::JoinHandle<()> {
        self.inner
            .conn
            .spawn_clock_sync(self.inner.shutdown.clone())
    }

    /// Publishes this process's live events (of every key space) on their events channels
    /// until shutdown.
    pub fn spawn_publisher(&self) -> tokio::task::JoinHandle<()> {
        self.inner
            .publisher
            .spawn(self.inner.conn.clone(), self.inner.shutdown.clone())
    }

    /// Writes the waiting lists of this process's requests (of every key space) until shutdown.
    pub fn spawn_waitlist_writer(&self) -> tokio::task::JoinHandle<()> {
        self.inner
            .waitlist
            .spawn(self.inner.conn.clone(), self.inner.shutdown.clone())
    }

    /// Queues a live event for the events channel.
    fn publish(&self, event: &LockEvent) {
        self.inner.publisher.send(&self.inner.events_channel, event);
    }

    /// Publishes the events a function's reply carries (`"ev": [...]`: what it recorded in
    /// the history, and expiries it noticed). Each goes out as the script wrote it, with the
    /// lock's name added: parsing it into a [`LockEvent`] only to write it out again cost
    /// about 5 % of the server's time per lock operation.
    fn publish_reply_events(&self, name: &LockName, raw: &str) {
        use serde::Deserialize as _;
        // Only the array is read, from where its key is: the text `"ev":[` cannot occur
        // inside a JSON string (a quote there is escaped), so the first one is the key.
        let Some(at) = raw.find("\"ev\":[") else {
            return;
        };
        let mut array = serde_json::Deserializer::from_str(&raw[at + "\"ev\":".len()..]);
        let Ok(events) = Vec::<&serde_json::value::RawValue>::deserialize(&mut array) else {
            return;
        };
        let lock = serde_json::Value::from(name.as_str()).to_string();
        for event in events {
            let event = event.get();
            // A grant rolled back because its client went away was never answered, so its
            // `acquired` event was never published: it goes out now, before its end.
            if event.contains("\"client_gone\"") {
                self.publish_rolled_back(name, event);
                continue;
            }
            // An object with at least one member (`type`); anything else is no event.
            let Some(members) = event.strip_prefix('{').filter(|m| m.starts_with('"')) else {
                continue;
            };
            self.inner.publisher.send_json(
                &self.inner.events_channel,
                format!("{{\"lock\":{lock},{members}"),
            );
        }
    }

    /// Publishes an event that may end a grant its client never received: the grant's own
    /// beginning first (see [`Self::publish_reply_events`]).
    fn publish_rolled_back(&self, name: &LockName, event: &str) {
        let Ok(mut fields) =
            serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(event)
        else {
            return;
        };
        fields.insert("lock".into(), name.as_str().into());
        let Ok(event) = serde_json::from_value::<LockEvent>(fields.into()) else {
            return;
        };
        if event.detail_str("reason") == Some("client_gone")
            && let Some(begun) = event.beginning()
        {
            self.publish(&begun);
        }
        self.publish(&event);
    }

    /// Requests currently waiting for a lock or semaphore in this process.
    pub fn waiting(&self) -> usize {
        self.inner.waiters.count()
    }

    /// Whether this process listens for unlock messages now (a request of it waits, or did
    /// lately: see [`waiters`]).
    pub fn hears_unlocks(&self) -> bool {
        self.inner.waiters.hears_unlocks()
    }

    /// Redis's memory now (see `crate::redis::memory`).
    pub async fn redis_memory(&self) -> Result<RedisMemory, LockError> {
        Ok(self.inner.conn.memory().await?)
    }

    /// What operators see of the Redis behind this instance (see `crate::redis::status`).
    pub fn redis_status(&self) -> crate::redis::RedisStatus {
        self.inner.conn.status()
    }

    /// Whether a Redis master is known (false in Sentinel mode during a failover).
    pub fn redis_master_known(&self) -> bool {
        self.inner.conn.has_master()
    }

    /// Checks that Redis answers.
    pub async fn ping(&self) -> Result<(), LockError> {
        let mut conn = self.inner.conn.clone();
        redis::cmd("PING").query_async::<()>(&mut conn).await?;
        Ok(())
    }

    /// Loads the library of Lua functions into Redis (see `scripts::library`). Calls load it
    /// on their own when Redis lost it; doing it at start-up finds a Redis without Functions
    /// (before 7.0) at once.
    pub async fn load_functions(&self) -> Result<(), LockError> {
        scripts::library::load(&self.inner.conn).await?;
        Ok(())
    }

    /// Runs one function for the lock or semaphore `name`: FCALL with its KEYS (the lock key
    /// and its state hash), the two ARGV every function takes first (deadline, tombstone
    /// time), the function's own, then its reply parsed; events the reply carries (`ev`) are
    /// published. The observer times every call. A Redis that lost the library gets it again
    /// and the call is retried once.
    async fn call<S: Script>(&self, name: &LockName, script: &S) -> Result<S::Reply, LockError> {
        let turn = self.turn().await.ok_or(LockError::Busy)?;
        self.call_in_turn(&turn, name, script).await
    }

    /// [`Self::call`] with what replicas acknowledged (see [`Self::call_acked_in_turn`]).
    async fn call_acked<S: Script>(
        &self,
        name: &LockName,
        script: &S,
    ) -> Result<(S::Reply, Option<Acked>), LockError> {
        let turn = self.turn().await.ok_or(LockError::Busy)?;
        self.call_acked_in_turn(&turn, name, script).await
    }

    /// A turn to send one script call (see [`LockSettings::calls_in_flight`]). `None`: not had
    /// within the Redis timeout, so Redis is too far behind; the call is refused
    /// ([`LockError::Busy`]) and nothing is sent. (An `Option`, not a `Result`: the waiting
    /// loop keeps the answer while its attempt runs, and a `LockError` is 88 bytes.)
    async fn turn(&self) -> Option<Turn<'_>> {
        if let Some(turn) = self.free_turn() {
            return Some(turn);
        }
        let turn = self.inner.calls.acquire();
        // The semaphore is never closed.
        match tokio::time::timeout(self.inner.settings.redis_timeout, turn).await {
            Ok(Ok(turn)) => Some(turn),
            Ok(Err(_)) | Err(_) => None,
        }
    }

    /// A turn, if one is free now: below the cap, nearly always. It skips the timer (and, in
    /// the waiting loop, the boxed future) that waiting for a turn needs. It never jumps the
    /// queue: while calls wait for turns, no turn is free.
    fn free_turn(&self) -> Option<Turn<'_>> {
        self.inner.calls.try_acquire().ok()
    }

    /// [`Self::call`] in a turn already taken (the waiting loop takes its turn before it makes
    /// the attempt's future).
    async fn call_in_turn<S: Script>(
        &self,
        _turn: &Turn<'_>,
        name: &LockName,
        script: &S,
    ) -> Result<S::Reply, LockError> {
        self.call_on(self.inner.conn.clone(), name, script).await
    }

    /// [`Self::call`] on another connection (the sweeper's own: its calls must never share a
    /// connection, and its timeouts, with the requests').
    async fn call_on<S: Script>(
        &self,
        conn: Redis,
        name: &LockName,
        script: &S,
    ) -> Result<S::Reply, LockError> {
        Ok(self.call_acked_on(conn, name, script).await?.0)
    }

    /// [`Self::call_in_turn`] with what replicas acknowledged: for a [`Script::REPLICATED`]
    /// function while replicas are required (`None` otherwise). The caller, which knows
    /// whether the reply granted or extended anything, refuses it when they are too few.
    async fn call_acked_in_turn<S: Script>(
        &self,
        _turn: &Turn<'_>,
        name: &LockName,
        script: &S,
    ) -> Result<(S::Reply, Option<Acked>), LockError> {
        self.call_acked_on(self.inner.conn.clone(), name, script)
            .await
    }

    async fn call_acked_on<S: Script>(
        &self,
        mut conn: Redis,
        name: &LockName,
        script: &S,
    ) -> Result<(S::Reply, Option<Acked>), LockError> {
        let keys = self.inner.keys.lock(name);
        let settings = &self.inner.settings;
        let deadline = self.inner.conn.clock().deadline(settings.redis_timeout);
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(scripts::library::for_redis(&self.inner.conn).function(S::FILE));
        // The functions read KEYS[1] and KEYS[2]; in a cluster every key whose name is fixed
        // is declared too (see `LockKeys::fixed_keys`).
        let fixed = self.inner.conn.cluster().map(|_| keys.fixed_keys());
        let declared = 2 + fixed.as_ref().map_or(0, |f| f.len());
        cmd.arg(declared).arg(keys.lock()).arg(keys.state());
        if let Some(fixed) = &fixed {
            cmd.arg(fixed);
        }
        cmd.arg(deadline).arg(settings.tombstone_ms);
        script.args(&mut cmd);
        // FCALL, its name, the key count, the keys and two shared ARGV, then the twin's own,
        // which its `ARGS` names (and the Lua file's header, by a test).
        debug_assert!(
            cmd.args_iter().count() <= 5 + declared + S::ARGS.len(),
            "{} sent more arguments than its ARGS name",
            S::FILE
        );
        let started = Instant::now();
        let mut index = redis::Pipeline::new();
        let mut result = if S::NOTES_NAME && self.note_name(&mut index, name) {
            // Sent together on the one connection, the index's writes first; their own
            // failure (Redis full) is the function's to report, not theirs.
            let mut index_conn = conn.clone();
            let (_, reply) = tokio::join!(
                index.query_async::<()>(&mut index_conn),
                send::<S>(&mut conn, &cmd, keys.lock())
            );
            reply
        } else {
            send::<S>(&mut conn, &cmd, keys.lock()).await
        };
        if let Err(e) = &result
            && crate::redis::functions::is_missing(e)
        {
            tracing::info!("loading the Lua function library into Redis");
            result = match scripts::library::load(&conn).await {
                Ok(()) => send::<S>(&mut conn, &cmd, keys.lock()).await,
                Err(e) => Err(e),
            };
        }
        self.inner
            .observer
            .script_call(S::FILE, started.elapsed(), result.is_ok());
        // No answer (the connection failed or was reset under it): the function may still
        // run, so the request may not be answered 503 before its deadline has passed.
        if let Err(e) = &result
            && (e.is_io_error() || e.is_timeout() || e.is_connection_dropped())
        {
            self.inner.conn.clock().wait_past(deadline).await;
        }
        let (raw, acked) = result?;
        self.publish_reply_events(name, &raw);
        Ok((S::parse(&raw)?, acked))
    }

    /// Runs a function on a record of Leasehold's own at `key` (a multilease's), which is
    /// both of its KEYS: no lock, no names index, no events, no replicas to wait for (what a
    /// multilease holds is its members, each an ordinary lease). A Redis that lost the
    /// library gets it again.
    async fn call_record<S: Script>(&self, key: &str, script: &S) -> Result<S::Reply, LockError> {
        self.call_own([key, key], script).await
    }

    /// [`Self::call_record`] on two keys of Leasehold's own in one slot (`lua/redlock.lua`'s
    /// index and due list).
    async fn call_own<S: Script>(
        &self,
        keys: [&str; 2],
        script: &S,
    ) -> Result<S::Reply, LockError> {
        let _turn = self.turn().await.ok_or(LockError::Busy)?;
        let mut conn = self.inner.conn.clone();
        let deadline = conn.clock().deadline(self.inner.settings.redis_timeout);
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(scripts::library::for_redis(&conn).function(S::FILE))
            .arg(2)
            .arg(keys[0])
            .arg(keys[1])
            .arg(deadline)
            .arg(self.inner.settings.tombstone_ms);
        script.args(&mut cmd);
        let started = Instant::now();
        let mut result = cmd.query_async::<String>(&mut conn).await;
        if let Err(e) = &result
            && crate::redis::functions::is_missing(e)
        {
            result = match scripts::library::load(&conn).await {
                Ok(()) => cmd.query_async::<String>(&mut conn).await,
                Err(e) => Err(e),
            };
        }
        self.inner
            .observer
            .script_call(S::FILE, started.elapsed(), result.is_ok());
        if let Err(e) = &result
            && (e.is_io_error() || e.is_timeout() || e.is_connection_dropped())
        {
            conn.clock().wait_past(deadline).await;
        }
        S::parse(&result?)
    }

    /// Tells the observer what a refused lease call says about its lease.
    fn observe_refusal(&self, lease_id: LeaseId, error: &LockError) {
        if let LockError::LeaseLost(state) = error {
            if *state == LeaseState::Expired {
                self.inner.observer.lease_expired(lease_id);
            } else {
                self.inner.observer.lease_ended(lease_id);
            }
        }
    }
}

/// Sends one function call on the lock key `key`: with its `WAIT` for replicas when `S`
/// changes what a lease holds and replicas of the key's shard are required.
async fn send<S: Script>(
    conn: &mut Redis,
    cmd: &redis::Cmd,
    key: &str,
) -> redis::RedisResult<(String, Option<Acked>)> {
    if S::REPLICATED {
        let changed = |value: &redis::Value| {
            redis::from_redis_value_ref::<String>(value)
                .ok()
                .and_then(|raw| S::parse(&raw).ok())
                .is_some_and(|reply| S::changes_lease(&reply))
        };
        let (value, acked) = conn.call_replicated(cmd, key, changed).await?;
        Ok((redis::from_redis_value(value)?, acked))
    } else {
        Ok((cmd.query_async(conn).await?, None))
    }
}
