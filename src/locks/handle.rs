//! The [`Locks`] handle: what every use case of `ops/` and every room shares (the Redis
//! connection, the key space, the waiter registry, the live publisher, the observer), and
//! the background tasks it runs.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::LockError;
use super::feed;
use super::layout::KeySpace;
use super::observer::Observer;
use super::types::{LeaseId, LeaseState};
use super::wakeups::WaitRegistry;
use crate::redis::Redis;

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
    pub(in crate::locks) inner: Arc<Inner>,
}

pub(in crate::locks) struct Inner {
    pub(in crate::locks) conn: Redis,
    pub(in crate::locks) keys: KeySpace,
    pub(in crate::locks) events_channel: Arc<str>,
    pub(in crate::locks) waiters: Arc<WaitRegistry>,
    pub(in crate::locks) settings: LockSettings,
    pub(in crate::locks) shutdown: CancellationToken,
    pub(in crate::locks) observer: Arc<dyn Observer>,
    pub(in crate::locks) publisher: Arc<feed::publisher::Publisher>,
    pub(in crate::locks) waitlist: Arc<feed::waitlist::Writer>,
    pub(in crate::locks) noted: Arc<feed::index::Noted>,
    /// Turns for the requests' script calls (see [`LockSettings::calls_in_flight`]).
    pub(in crate::locks) calls: Arc<Semaphore>,
    /// Recent hold times of the names asked about (see `ops::estimate`).
    pub(in crate::locks) hold_times: Arc<feed::hold_times::HoldTimes>,
}

/// How many queued waiters an inspection lists.
pub(in crate::locks) const QUEUE_LISTED: u64 = 100;

/// A turn to send one script call to Redis.
pub(in crate::locks) type Turn<'a> = tokio::sync::SemaphorePermit<'a>;

impl Locks {
    pub fn new(
        conn: Redis,
        settings: &LockSettings,
        waiters: Arc<WaitRegistry>,
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
                hold_times: Arc::default(),
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
                hold_times: inner.hold_times.clone(),
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

    /// Requests currently waiting for a lock or semaphore in this process.
    pub fn waiting(&self) -> usize {
        self.inner.waiters.count()
    }

    /// Whether this process listens for unlock messages now (a request of it waits, or did
    /// lately: see [`super::wakeups`]).
    pub fn hears_unlocks(&self) -> bool {
        self.inner.waiters.hears_unlocks()
    }

    /// Tells the observer what a refused lease call says about its lease.
    pub(in crate::locks) fn observe_refusal(&self, lease_id: LeaseId, error: &LockError) {
        if let LockError::LeaseLost(state) = error {
            if *state == LeaseState::Expired {
                self.inner.observer.lease_expired(lease_id);
            } else {
                self.inner.observer.lease_ended(lease_id);
            }
        }
    }
}
