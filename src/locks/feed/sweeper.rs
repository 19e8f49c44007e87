//! Expiries recorded when they happen. A lease that runs out changes nothing by itself (Redis
//! lets its key go), so until some call on its name noticed it, nothing said it had expired.
//! The sweeper runs `lua/sweep.lua` on a name as soon as one of its leases may have run out;
//! the function records each such lease `expired` at the time it ran out, once, whichever
//! instance sweeps first (the others find nothing to record), and its events go out live.
//!
//! It learns of expiries two ways:
//! - **Keyspace notifications** (`notify-keyspace-events` with `E` and `x`, switched on at
//!   start with `CONFIG SET` where Redis allows it, keeping any flags already set): Redis
//!   announces each expired key on `__keyevent@<db>__:expired`: a lock hash (an exclusive or
//!   write hold ran out) or a read hold's `rwlock_timeout` key. The process's one subscriber
//!   (`crate::redis::subscriber`) listens there and hands the keys over ([`Expiries`]); sweeps run on the shared
//!   connection, so the sweeper costs no Redis connection of its own.
//! - **A periodic pass** (every [`PASS_EVERY`], by one instance of the deployment at a time)
//!   over the names that have Leasehold state, at most [`PASS_BUDGET`] buckets of the
//!   keyspace per pass (in a cluster, of one primary's), going on where the last stopped:
//!   semaphore permits (members of a zset, not keys) expire only this way, and so does
//!   everything where Redis refuses `CONFIG` or notifications are lost (pub/sub is
//!   at-most-once; Redis deletes an expired key at its next access or expire cycle).
//!
//! Every tenant's locks are swept: the pass and the notifications see every key under the
//! deployment's prefix, and a key's tenant comes from its name. The pass also puts the held
//! names it finds into the names index ([`super::index`]): locks a Redisson client holds, and
//! grants whose instance died before indexing them. While the default key space has no index
//! yet (a deployment upgraded from a version without one), passes run back to back until the
//! keyspace has been walked once. The sweeper stops on shutdown.

use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::locks::layout::KeySpace;
use crate::locks::scripts::sweep::{Sweep, SweepReply};
use crate::locks::{LockError, LockName, Locks};

/// How often the periodic pass runs (by one instance of the deployment at a time).
pub const PASS_EVERY: Duration = Duration::from_secs(2);
/// Passes a turn lasts unless renewed: an instance that stops hands the pass on within
/// this many ticks.
const TURN_TICKS: u32 = 3;
/// Keyspace buckets one pass walks (SCAN COUNT): with a few keys per name, a few hundred
/// names; a full cycle over N names takes about N / 300 passes.
const PASS_BUDGET: usize = 1000;
/// Expired keys the subscriber may hand over before the sweeper takes them; beyond that they
/// are dropped and the periodic pass finds their leases.
pub const EXPIRED_QUEUE: usize = 4096;

/// The channel Redis announces expired keys of database `db` on.
pub fn expired_channel(db: i64) -> String {
    format!("__keyevent@{db}__:expired")
}

/// Redis's expired-key notifications as the process's subscriber hands them over: each key
/// goes to the sweeper's queue (dropped when the sweeper is behind: its periodic pass finds
/// them).
pub struct Expiries {
    /// The channel they come on ([`expired_channel`]).
    pub channel: String,
    pub to_sweeper: mpsc::Sender<String>,
}

impl crate::redis::Route for Expiries {
    fn route(&self, channel: &str, payload: &[u8]) -> bool {
        if channel != self.channel {
            return false;
        }
        if let Ok(key) = std::str::from_utf8(payload) {
            let _ = self.to_sweeper.try_send(key.to_owned());
        }
        true
    }
}

impl Locks {
    /// Records the expiries of `name`'s leases that ran out unobserved; returns how many this
    /// call recorded (0 when none ran out, or another instance recorded them first).
    pub async fn sweep(&self, name: &LockName) -> Result<u64, LockError> {
        match self.call(name, &Sweep).await? {
            SweepReply::Swept { expired } => Ok(expired),
            SweepReply::TooLate => Err(LockError::TooLate),
        }
    }

    /// Starts the sweeper (see the module docs) on this handle's connection: it takes the
    /// expired keys the process's subscriber hands over on `expired`, and runs until shutdown.
    /// Call it on the deployment's handle (the default key space): it sweeps every tenant's.
    pub fn spawn_sweeper(&self, expired: mpsc::Receiver<String>) -> JoinHandle<()> {
        let locks = self.clone();
        tokio::spawn(async move { locks.run_sweeper(expired).await })
    }

    async fn run_sweeper(self, mut expired: mpsc::Receiver<String>) {
        let shutdown = self.inner.shutdown.clone();
        self.enable_notifications().await;
        let mut notifying = self.inner.conn.master_epoch();
        self.build_index().await;
        let mut pass = tokio::time::interval(PASS_EVERY);
        pass.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut cursor = 0;
        let me = uuid::Uuid::now_v7().to_string();
        loop {
            tokio::select! {
                key = expired.recv() => match key {
                    Some(key) => {
                        if let Some(rest) = after_prefix_of_expired(&self.inner.keys, &key) {
                            self.sweep_logged(rest).await;
                        }
                    }
                    // The subscriber is gone (shutdown): the pass goes on until then.
                    None => return shutdown.cancelled().await,
                },
                _ = pass.tick() => {
                    // A new master (a Sentinel failover) has its own CONFIG: switch its
                    // notifications on too.
                    let epoch = self.inner.conn.master_epoch();
                    if epoch != notifying && epoch != 0 {
                        self.enable_notifications().await;
                        notifying = epoch;
                    }
                    if self.my_turn(&me).await {
                        cursor = self.pass(cursor).await;
                    }
                }
                () = shutdown.cancelled() => return,
            }
        }
    }

    /// Switches on expired-key notifications, keeping the flags already set; where Redis
    /// refuses (`CONFIG` renamed or denied on a managed Redis), expiries are found by the
    /// periodic pass only.
    /// In a cluster each primary is asked (notifications are node-local), again whenever
    /// the topology changes (a promoted replica may not have them on).
    async fn enable_notifications(&self) {
        for node in self.inner.conn.nodes() {
            self.enable_notifications_on(node.as_deref()).await;
        }
    }

    async fn enable_notifications_on(&self, node: Option<&str>) {
        let conn = &self.inner.conn;
        let mut get = redis::cmd("CONFIG");
        get.arg("GET").arg("notify-keyspace-events");
        let current: redis::RedisResult<(String, String)> = conn.on_node(node, get).await;
        let flags = match current {
            Ok((_, flags)) => flags,
            Err(e) => {
                tracing::info!(error = %e, node, "cannot read notify-keyspace-events; expiries are found by the periodic sweep only");
                return;
            }
        };
        let Some(wanted) = with_expired_events(&flags) else {
            return;
        };
        let mut set = redis::cmd("CONFIG");
        set.arg("SET").arg("notify-keyspace-events").arg(&wanted);
        let set: redis::RedisResult<()> = conn.on_node(node, set).await;
        match set {
            Ok(()) => {
                tracing::info!(flags = %wanted, node, "switched on Redis's expired-key notifications")
            }
            Err(e) => {
                tracing::info!(error = %e, node, "cannot switch on expired-key notifications; expiries are found by the periodic sweep only")
            }
        }
    }

    /// Whether this instance makes the periodic pass now: the instances of a deployment take
    /// turns, one holding the turn (a key of the deployment's own, for [`TURN_TICKS`] passes,
    /// kept while it passes) until it stops, so the fallback walk costs Redis one pass per
    /// tick however many instances there are (the notifications, which every instance
    /// hears, find expiries at once). Where Redis does not answer, the instance passes.
    async fn my_turn(&self, me: &str) -> bool {
        let key = self.inner.keys.own("sweeper");
        let ttl_ms = PASS_EVERY.as_millis() * u128::from(TURN_TICKS);
        let mut take = redis::cmd("SET");
        take.arg(&key)
            .arg(me)
            .arg("NX")
            .arg("GET")
            .arg("PX")
            .arg(ttl_ms as u64);
        let holder: redis::RedisResult<Option<String>> =
            take.query_async(&mut self.inner.conn.clone()).await;
        match holder {
            Ok(None) => true,
            Ok(Some(holder)) if holder == me => {
                let _: redis::RedisResult<()> = redis::cmd("PEXPIRE")
                    .arg(&key)
                    .arg(ttl_ms as u64)
                    .query_async(&mut self.inner.conn.clone())
                    .await;
                true
            }
            Ok(Some(_)) => false,
            Err(_) => true,
        }
    }

    /// Walks the whole keyspace once (passes back to back, until shutdown) when the default
    /// key space has no names index yet: the live locks of an earlier version, or of a Redis
    /// whose index was lost, are listed again as soon as possible.
    async fn build_index(&self) {
        let index = crate::locks::feed::index::index_key(&self.inner.keys);
        let exists: redis::RedisResult<u64> = redis::cmd("EXISTS")
            .arg(&index)
            .query_async(&mut self.inner.conn.clone())
            .await;
        if !matches!(exists, Ok(0)) {
            return;
        }
        let mut cursor = 0;
        loop {
            cursor = tokio::select! {
                next = self.pass(cursor) => next,
                () = self.inner.shutdown.cancelled() => return,
            };
            if cursor == 0 {
                return;
            }
        }
    }

    /// Sweeps the lock `rest` names: what follows the deployment's prefix in its keys, `name`
    /// for the default tenant or `tenant/name` (see [`crate::tenant`]: a tenant's key space
    /// is the prefix, its name and `/`).
    async fn sweep_logged(&self, rest: &str) {
        let Some((locks, name)) = self.space_of(rest) else {
            return;
        };
        match locks.sweep(&name).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(lock = %rest, expired = n, "recorded expiries"),
            Err(e) => tracing::debug!(lock = %rest, error = %e, "could not sweep"),
        }
    }

    /// One periodic pass from `cursor` over every key under the deployment's prefix: sweeps
    /// the names with Leasehold state it finds, and indexes those of them (and of the bare
    /// lock keys: a Redisson client's locks) that are held; returns where the next pass goes
    /// on.
    async fn pass(&self, cursor: u64) -> u64 {
        // A state hash `{P name}:leasehold` and a bare lock key `P name` both hold P.
        let pattern = format!("*{}*", self.inner.keys.prefix());
        let scanned = self
            .inner
            .conn
            .scan_page(cursor, &pattern, PASS_BUDGET)
            .await;
        let Ok((next, keys)) = scanned else {
            return cursor;
        };
        let with_state: Vec<&str> = keys
            .iter()
            .filter_map(|key| self.inner.keys.name_of_state_key(key))
            .collect();
        join_all(with_state.iter().map(|rest| self.sweep_logged(rest))).await;
        let bare = keys
            .iter()
            .filter(|key| !key.contains('{'))
            .filter_map(|key| key.strip_prefix(self.inner.keys.prefix()));
        let found: Vec<String> = with_state
            .iter()
            .copied()
            .chain(bare)
            .map(str::to_owned)
            .collect();
        if let Err(e) = self.index_found(&found).await {
            tracing::debug!(error = %e, "could not index the names a pass found");
        }
        next
    }
}

/// What follows the prefix in the name of the lock an expired key belongs to, when its expiry
/// may end a hold: a lock hash (`L`), or a read hold's timeout key
/// (`{L}:<holder>:rwlock_timeout:<n>`).
fn after_prefix_of_expired<'a>(keys: &KeySpace, key: &'a str) -> Option<&'a str> {
    let lock = match key.strip_prefix('{') {
        Some(rest) if key.contains(":rwlock_timeout:") => rest.split('}').next()?,
        Some(_) => return None,
        None => key,
    };
    lock.strip_prefix(keys.prefix())
}

/// The notification flags with expired-key events added (`E`: keyevent channels, `x`:
/// expiries; `A` includes `x`), or `None` when they are on already.
fn with_expired_events(flags: &str) -> Option<String> {
    let has_x = flags.contains('x') || flags.contains('A');
    let has_e = flags.contains('E');
    if has_x && has_e {
        return None;
    }
    let mut wanted = flags.to_owned();
    if !has_e {
        wanted.push('E');
    }
    if !has_x {
        wanted.push('x');
    }
    Some(wanted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_events_are_added_to_the_flags_already_set() {
        assert_eq!(with_expired_events(""), Some("Ex".into()));
        assert_eq!(with_expired_events("Kl"), Some("KlEx".into()));
        assert_eq!(with_expired_events("Ex"), None);
        assert_eq!(with_expired_events("AE"), None);
        assert_eq!(with_expired_events("KA"), Some("KAE".into()));
    }

    #[test]
    fn expired_keys_map_to_the_lock_whose_hold_they_end() {
        let name = |prefix: &str, key: &str| {
            after_prefix_of_expired(&KeySpace::new(prefix), key).map(str::to_owned)
        };
        assert_eq!(name("", "jobs"), Some("jobs".into()));
        assert_eq!(name("app:", "app:jobs"), Some("jobs".into()));
        assert_eq!(name("app:", "app:acme/jobs"), Some("acme/jobs".into()));
        assert_eq!(name("app:", "other"), None);
        assert_eq!(
            name(
                "",
                "{doc}:0190c5f0-0000-7000-8000-000000000000:1:rwlock_timeout:1"
            ),
            Some("doc".into())
        );
        assert_eq!(name("", "{doc}:leasehold"), None);
    }
}
