//! Who is waiting, recorded in Redis so that every instance shows every waiter: one hash per
//! lock or semaphore, `{L}:leasehold:waiting`, beside the lock's other keys (same slot), with
//! one field per waiting request (its lease id) holding a JSON [`WaiterView`].
//!
//! The in-process registry ([`super::waiters`]) says whom to wake; this list says who waits,
//! to people. A request enters it when its first attempt finds the name taken and it is going
//! to wait ([`Locks::enlist`]), and leaves it when the request ends, however it ends
//! ([`Locks::unlist`], from the request's drop). One [`Writer`] per process writes both, in
//! batches. Fair tickets are not listed here: the fair queue already lists them in
//! order ([`super::LockView::queue`]).
//!
//! Redis 7.0 has no per-field expiry, so each entry carries `until_ms` (its request's wait
//! deadline plus slack): an entry a crashed instance left behind is ignored once past it, and
//! the hash itself expires after the latest such deadline.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::locks::feed::queue::Queue;
use crate::locks::types::LeaseKind;
use crate::locks::{LeaseId, LockError, LockName, Locks, Timestamp};
use crate::redis::Batch;

/// How long past its wait deadline an entry stays valid: its request may still be finishing
/// its last attempt, and clocks differ a little.
const SLACK: Duration = Duration::from_secs(5);

/// Most waiters listed per name (a lock page, an inspection); the count is exact.
pub const WAITERS_LISTED: usize = 100;

/// This process, as waiters name the instance they wait on: `host:pid`.
pub static INSTANCE: LazyLock<String> = LazyLock::new(|| {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}:{}", std::process::id())
});

/// What a waiting request wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted<'a> {
    /// The kind asked for (`None`: a reentry whose kind the lease has).
    pub kind: Option<LeaseKind>,
    pub holder: Option<&'a str>,
    /// Semaphores: the permits asked for.
    pub permits: Option<u32>,
}

/// One request waiting for a lock or permits, as every instance sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaiterView {
    /// The lease the request will be if granted (a reentry: the lease it re-enters).
    pub lease_id: String,
    /// The holder label it asked with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// `reentrant`, `exclusive`, `read`, `write`, `semaphore`; `None` for a reentry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Semaphores: how many permits it wants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// When it began to wait (ms since the Unix epoch, Redis's clock as its instance knew it).
    pub since_ms: u64,
    /// The instance it waits on (`host:pid`).
    pub instance: String,
    /// The entry is void after this (its wait deadline plus slack).
    pub until_ms: u64,
}

impl WaiterView {
    pub fn since(&self) -> Timestamp {
        Timestamp(self.since_ms)
    }

    /// A writer (the one kind that makes fifo readers wait behind it).
    pub fn is_writer(&self) -> bool {
        self.kind.as_deref() == Some(LeaseKind::Write.as_str())
    }

    /// How people name it: its label, else its lease.
    pub fn label(&self) -> String {
        self.holder
            .clone()
            .unwrap_or_else(|| format!("lease {}", self.lease_id))
    }
}

/// A waiting list's key after its lock's hash tag: `{L}:leasehold:waiting`.
const WAITING_SUFFIX: &str = ":leasehold:waiting";

/// Changes waiting to be written, at most. Beyond that a new entry is not listed (the list is
/// best effort), and a removal is sent on its own instead of queued.
const QUEUE_CAPACITY: usize = 16_384;
/// Changes per round trip at most.
const BATCH: usize = 64;
/// After shutdown, how long the writer waits for more changes (the waiters answered at
/// shutdown leave the list) before it stops, and how long it goes on at most.
const SHUTDOWN_QUIET: Duration = Duration::from_millis(200);
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(2);

/// One change to a waiting list.
enum Change {
    /// Enters `field` into the hash `key`, which must last at least `ttl_ms` from now.
    List {
        key: String,
        field: String,
        json: String,
        ttl_ms: u64,
    },
    /// Takes `field` out of the hash `key`.
    Unlist { key: String, field: String },
}

/// Writes the waiting lists for every request of the process, in batches: one pipeline for
/// whatever changes are queued (an HSET or HDEL each, and one pair of PEXPIREs per hash),
/// rather than a round trip per waiter. A burst of waiters (10,000 parking at once) then
/// costs Redis a few hundred pipelines, not 10,000, and the server keeps one queued change
/// per waiter, not a Redis call in flight (the pipeline, its boxed future, its buffers, all
/// of them at once, behind the attempts in Redis; BENCHMARKS.md, W11).
/// One writer on one connection: a request's removal is written after its entry.
pub(in crate::locks) struct Writer {
    queue: Queue<Change>,
}

impl Default for Writer {
    fn default() -> Self {
        Self {
            queue: Queue::new(QUEUE_CAPACITY),
        }
    }
}

impl Writer {
    /// Writes queued changes until shutdown, and then those of the requests that shutdown
    /// ends (bounded). Only the first call starts a writer.
    pub fn spawn(
        &self,
        mut conn: crate::redis::Redis,
        shutdown: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let rx = self.queue.take_receiver();
        tokio::spawn(async move {
            let Some(mut rx) = rx else { return };
            let mut batch = Vec::with_capacity(BATCH);
            let stop_by = async {
                shutdown.cancelled().await;
                tokio::time::sleep(SHUTDOWN_LIMIT).await;
            };
            tokio::pin!(stop_by);
            loop {
                let received = if shutdown.is_cancelled() {
                    tokio::select! {
                        n = rx.recv_many(&mut batch, BATCH) => n,
                        () = tokio::time::sleep(SHUTDOWN_QUIET) => 0,
                        () = &mut stop_by => 0,
                    }
                } else {
                    tokio::select! {
                        n = rx.recv_many(&mut batch, BATCH) => n,
                        () = shutdown.cancelled() => continue,
                    }
                };
                if received == 0 {
                    return;
                }
                write(&mut conn, &batch).await;
                batch.clear();
            }
        })
    }
}

/// Writes one batch of changes, in order (each lock's in order: in a cluster the locks' lists
/// are written slot by slot).
async fn write(conn: &mut crate::redis::Redis, batch: &[Change]) {
    let mut pipe = Batch::new();
    // Each hash lives as long as its longest entry may: PEXPIRE GT keeps a later expiry
    // another waiter set (Redis 7.0); NX gives a new hash its first.
    let mut lives: HashMap<&str, u64> = HashMap::new();
    let mut changed: HashSet<&str> = HashSet::new();
    for change in batch {
        match change {
            Change::List {
                key,
                field,
                json,
                ttl_ms,
            } => {
                let mut hset = redis::cmd("HSET");
                hset.arg(key).arg(field).arg(json);
                pipe.add_ignored(hset);
                let life = lives.entry(key).or_default();
                *life = (*life).max(*ttl_ms);
                changed.insert(key);
            }
            Change::Unlist { key, field } => {
                let mut hdel = redis::cmd("HDEL");
                hdel.arg(key).arg(field);
                pipe.add_ignored(hdel);
                changed.insert(key);
            }
        }
    }
    // Who waits changed: the lock's lease watches re-read it (a holder's `contended`), on
    // the lock's watch channel, which wakes no waiter. Sharded where the functions publish
    // sharded (a cluster), so that it reaches the lock's shard's subscribers.
    let publish = if conn.capabilities().sharded_pubsub {
        "SPUBLISH"
    } else {
        "PUBLISH"
    };
    for key in changed {
        if let Some(tag) = key.strip_suffix(WAITING_SUFFIX) {
            let mut cmd = redis::cmd(publish);
            cmd.arg(crate::locks::layout::watch_channel(tag)).arg("0");
            pipe.add_ignored(cmd);
        }
    }
    for (key, ttl_ms) in lives {
        for rule in ["GT", "NX"] {
            let mut pexpire = redis::cmd("PEXPIRE");
            pexpire.arg(key).arg(ttl_ms).arg(rule);
            pipe.add_ignored(pexpire);
        }
    }
    if let Err(e) = pipe.run::<()>(conn).await {
        tracing::debug!(error = %e, changes = batch.len(), "could not write waiting lists (their entries lapse)");
    }
}

impl Locks {
    /// The key of `name`'s waiting list: `{L}:leasehold:waiting`.
    pub(super) fn waiting_key(&self, name: &LockName) -> String {
        format!("{}:waiting", self.inner.keys.lock(name).state())
    }

    /// Lists request `id` as waiting for `name` until `deadline`: queued for the writer, so
    /// the request does not wait for it. Best effort: a waiter missing from the list must not
    /// fail its request. The request takes itself off with [`Self::unlist`] when it ends.
    pub(in crate::locks) fn enlist(
        &self,
        name: &LockName,
        wanted: Wanted<'_>,
        id: LeaseId,
        deadline: Instant,
    ) {
        let field = id.to_string();
        let now = self.inner.conn.clock().now_ms();
        let left = deadline.saturating_duration_since(Instant::now()) + SLACK;
        let ttl_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
        let view = WaiterView {
            lease_id: field.clone(),
            holder: wanted.holder.map(str::to_owned),
            kind: wanted.kind.map(|k| k.as_str().to_owned()),
            permits: wanted.permits,
            since_ms: now,
            instance: INSTANCE.clone(),
            until_ms: now.saturating_add(ttl_ms),
        };
        let Ok(json) = serde_json::to_string(&view) else {
            return;
        };
        let change = Change::List {
            key: self.waiting_key(name),
            field,
            json,
            ttl_ms,
        };
        if self.inner.waitlist.queue.try_send(change).is_err() {
            tracing::debug!(lock = %name, "waiting-list queue full: a waiter is not listed");
        }
    }

    /// Takes request `id` off `name`'s waiting list (after its entry, if that was written).
    pub(in crate::locks) fn unlist(&self, name: &LockName, id: LeaseId) {
        let change = Change::Unlist {
            key: self.waiting_key(name),
            field: id.to_string(),
        };
        let Err(change) = self.inner.waitlist.queue.try_send(change) else {
            return;
        };
        // The queue is full (or the writer gone): sent on its own, so that no entry stays
        // listed for a request that ended.
        let (Change::Unlist { key, field } | Change::List { key, field, .. }) = change;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut conn = self.inner.conn.clone();
        runtime.spawn(async move {
            let removed: redis::RedisResult<()> = redis::cmd("HDEL")
                .arg(&key)
                .arg(&field)
                .query_async(&mut conn)
                .await;
            if let Err(e) = removed {
                tracing::debug!(error = %e, "could not remove a waiter's entry (it lapses)");
            }
        });
    }

    /// Lists request `id` as waiting for `name` until `deadline` (as [`Self::enlist`]) for a
    /// request that waits outside this domain's own acquire (a RedLock request, which waits
    /// on its nodes but is listed here, where people look): it leaves the list when the
    /// returned entry is dropped.
    pub fn list_waiting(
        &self,
        name: &LockName,
        wanted: Wanted<'_>,
        id: LeaseId,
        deadline: Instant,
    ) -> Listed {
        self.enlist(name, wanted, id, deadline);
        Listed {
            locks: self.clone(),
            name: name.clone(),
            id,
        }
    }

    /// Who waits for `name` (every instance's requests, fair tickets aside), oldest first: at
    /// most [`WAITERS_LISTED`] of them, and how many there are.
    pub async fn waiters_of(&self, name: &LockName) -> Result<(Vec<WaiterView>, u64), LockError> {
        let entries: Vec<String> = redis::cmd("HVALS")
            .arg(self.waiting_key(name))
            .query_async(&mut self.inner.conn.clone())
            .await?;
        Ok(live(entries, self.inner.conn.clock().now_ms()))
    }

    /// How many requests wait for each of `names` (fair tickets aside), in one round trip.
    pub async fn waiting_counts(&self, names: &[&LockName]) -> Result<Vec<u64>, LockError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut batch = Batch::new();
        for name in names {
            let mut hvals = redis::cmd("HVALS");
            hvals.arg(self.waiting_key(name));
            batch.add(hvals);
        }
        let all: Vec<Vec<String>> = batch.run(&self.inner.conn).await?;
        let now = self.inner.conn.clock().now_ms();
        Ok(all.into_iter().map(|e| live(e, now).1).collect())
    }
}

/// A waiting request's entry in the list ([`Locks::list_waiting`]): taken off when dropped,
/// however the request ends.
pub struct Listed {
    locks: Locks,
    name: LockName,
    id: LeaseId,
}

impl Drop for Listed {
    fn drop(&mut self) {
        self.locks.unlist(&self.name, self.id);
    }
}

/// The entries still valid at `now_ms`, oldest first (at most [`WAITERS_LISTED`]), and how
/// many are valid.
fn live(entries: Vec<String>, now_ms: u64) -> (Vec<WaiterView>, u64) {
    let mut valid: Vec<WaiterView> = entries
        .iter()
        .filter_map(|json| serde_json::from_str::<WaiterView>(json).ok())
        .filter(|w| w.until_ms > now_ms)
        .collect();
    valid.sort_by(|a, b| (a.since_ms, &a.lease_id).cmp(&(b.since_ms, &b.lease_id)));
    let count = u64::try_from(valid.len()).unwrap_or(u64::MAX);
    valid.truncate(WAITERS_LISTED);
    (valid, count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, since_ms: u64, until_ms: u64) -> String {
        serde_json::to_string(&WaiterView {
            lease_id: id.into(),
            holder: None,
            kind: Some("write".into()),
            permits: None,
            since_ms,
            instance: "h:1".into(),
            until_ms,
        })
        .expect("json")
    }

    #[test]
    fn lapsed_and_unreadable_entries_are_left_out_and_the_rest_sorted_by_arrival() {
        let (list, count) = live(
            vec![
                entry("b", 20, 1_000),
                entry("gone", 5, 50),
                "not json".into(),
                entry("a", 10, 1_000),
            ],
            100,
        );
        assert_eq!(count, 2);
        let ids: Vec<&str> = list.iter().map(|w| w.lease_id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        assert!(list[0].is_writer());
        assert_eq!(list[0].label(), "lease a");
    }
}
