//! Quotas that must hold across instances (live leases, waiting requests of one caller), kept
//! in Redis by this code, beside the lock scripts and without touching them:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P leasehold:quota:{<owner>}:leases` | zset | the caller's live leases and fair tickets → when each ends unless renewed (ms) |
//! | `P leasehold:quota:{<owner>}:waiters` | zset | the caller's requests waiting server-side → when each wait ends (ms) |
//! | `P leasehold:quota:{<owner>}:names` | zset | the lock and semaphore names the caller gave Redis state to → until that state is gone (ms) |
//! | `P leasehold:quota:{tenant:<t>}:names` | zset | the same for every caller of tenant `<t>` (`tenant:` for the default one) |
//!
//! An entry is added *before* it is counted, so concurrent requests can only be refused too
//! eagerly, never let past the cap. Every entry carries its own end: one that nobody removes
//! (its instance died, its lease was force-released) stops counting when its time is up, so
//! the ledger heals by itself. The `<owner>` is `key:<id>`, `addr:<ip>` or `admin`.

use std::sync::Arc;
use std::time::Duration;

use crate::redis::{Batch, Redis, wall_ms};

/// How long after its last entry's end an account's key stays in Redis.
const ACCOUNT_SLACK_MS: u64 = 60_000;

/// One account and how many entries it may hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub key: String,
    pub cap: u64,
}

/// One entry to make in an account: `member`, counting until `until_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub account: Account,
    pub member: String,
    pub until_ms: u64,
}

/// An account was full: which one (by position) and when its first entry ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full {
    pub index: usize,
    pub retry_after: Duration,
}

/// The quota accounts of the deployment; cheap to clone.
#[derive(Clone)]
pub struct Ledger {
    conn: Redis,
    /// Shared, not copied: every admitted request keeps a clone of the ledger.
    prefix: Arc<str>,
}

impl Ledger {
    /// The ledger under the deployment's key prefix `base`.
    pub fn new(conn: Redis, base: &str) -> Self {
        Self {
            conn,
            prefix: format!("{base}leasehold:quota:").into(),
        }
    }

    /// The account of `owner`'s live leases.
    pub fn leases(&self, owner: &str, cap: u64) -> Account {
        Account {
            key: format!("{}{{{owner}}}:leases", self.prefix),
            cap,
        }
    }

    /// The account of `owner`'s waiting requests.
    pub fn waiters(&self, owner: &str, cap: u64) -> Account {
        Account {
            key: format!("{}{{{owner}}}:waiters", self.prefix),
            cap,
        }
    }

    /// The account of the names `owner` gave Redis state to (member: the name in its key
    /// space, `tenant/name`).
    pub fn names(&self, owner: &str, cap: u64) -> Account {
        Account {
            key: format!("{}{{{owner}}}:names", self.prefix),
            cap,
        }
    }

    /// The account of the names every caller of `tenant` gave Redis state to.
    pub fn tenant_names(&self, tenant: &str, cap: u64) -> Account {
        self.names(&format!("tenant:{tenant}"), cap)
    }

    /// Makes every entry (an entry already there keeps the later of its two ends), then
    /// counts each account: when one that an entry joined holds more than its cap, the
    /// entries this call added are taken out again and the answer says which was full (by
    /// position in `entries`). An entry that was there already never makes its account full:
    /// it adds nothing. Accounts with no cap (`u64::MAX`) are skipped.
    pub async fn reserve(&self, entries: &[Entry]) -> Result<Result<(), Full>, redis::RedisError> {
        let now = wall_ms();
        let counted: Vec<&Entry> = entries
            .iter()
            .filter(|e| e.account.cap < u64::MAX)
            .collect();
        if counted.is_empty() {
            return Ok(Ok(()));
        }
        // (A batch: each owner's accounts have a slot of their own in a cluster.)
        let mut batch = Batch::new();
        for entry in &counted {
            let key = &entry.account.key;
            let mut trim = redis::cmd("ZREMRANGEBYSCORE");
            trim.arg(key).arg("-inf").arg(now);
            let mut add = redis::cmd("ZADD");
            add.arg(key)
                .arg("GT")
                .arg(entry.until_ms)
                .arg(&entry.member);
            let mut count = redis::cmd("ZCARD");
            count.arg(key);
            batch.add_ignored(trim).add(add).add(count);
            expire(&mut batch, key, entry.until_ms.saturating_sub(now));
        }
        // (added, count) per entry.
        let replies: Vec<u64> = batch.run(&self.conn).await?;
        let added: Vec<bool> = replies.chunks(2).map(|r| r[0] == 1).collect();
        let over = counted
            .iter()
            .zip(replies.chunks(2))
            .position(|(entry, r)| {
                r.first() == Some(&1) && r.get(1).is_some_and(|&count| count > entry.account.cap)
            });
        let Some(over) = over else {
            return Ok(Ok(()));
        };
        let mut undo = Batch::new();
        for (entry, _) in counted.iter().zip(&added).filter(|(_, added)| **added) {
            let mut zrem = redis::cmd("ZREM");
            zrem.arg(&entry.account.key).arg(&entry.member);
            undo.add_ignored(zrem);
        }
        let mut oldest = redis::cmd("ZRANGE");
        oldest
            .arg(&counted[over].account.key)
            .arg(0)
            .arg(0)
            .arg("WITHSCORES");
        undo.add(oldest);
        let first: Vec<(String, f64)> = undo
            .run::<Vec<(String, f64)>>(&self.conn)
            .await?
            .into_iter()
            .next()
            .unwrap_or_default();
        let ends = first
            .first()
            .map_or(now + 1_000, |(_, score)| *score as u64);
        let index = entries
            .iter()
            .position(|e| e == counted[over])
            .unwrap_or_default();
        Ok(Err(Full {
            index,
            retry_after: Duration::from_millis(ends.saturating_sub(now).max(1)),
        }))
    }

    /// Sets `member`'s end in `account` (adding it when absent).
    pub async fn record(
        &self,
        account: &Account,
        member: &str,
        until_ms: u64,
    ) -> Result<(), redis::RedisError> {
        if account.cap == u64::MAX {
            return Ok(());
        }
        let mut batch = Batch::new();
        let mut add = redis::cmd("ZADD");
        add.arg(&account.key).arg(until_ms).arg(member);
        batch.add_ignored(add);
        expire(&mut batch, &account.key, until_ms.saturating_sub(wall_ms()));
        batch.run::<()>(&self.conn).await.map(drop)
    }

    /// Moves `member`'s end in `account`, only if it is there (a heartbeat through another
    /// caller's key leaves that key's account alone).
    pub async fn extend(
        &self,
        account: &Account,
        member: &str,
        until_ms: u64,
    ) -> Result<(), redis::RedisError> {
        if account.cap == u64::MAX {
            return Ok(());
        }
        let mut batch = Batch::new();
        let mut add = redis::cmd("ZADD");
        add.arg(&account.key).arg("XX").arg(until_ms).arg(member);
        batch.add_ignored(add);
        expire(&mut batch, &account.key, until_ms.saturating_sub(wall_ms()));
        batch.run::<()>(&self.conn).await.map(drop)
    }

    /// Takes `member` out of each account.
    pub async fn remove(
        &self,
        accounts: &[Account],
        member: &str,
    ) -> Result<(), redis::RedisError> {
        let counted: Vec<&Account> = accounts.iter().filter(|a| a.cap < u64::MAX).collect();
        if counted.is_empty() {
            // Nothing counted (an unlimited caller): no round trip, and no empty pipeline,
            // which Redis refuses.
            return Ok(());
        }
        let mut batch = Batch::new();
        for account in counted {
            let mut zrem = redis::cmd("ZREM");
            zrem.arg(&account.key).arg(member);
            batch.add_ignored(zrem);
        }
        batch.run::<()>(&self.conn).await.map(drop)
    }

    /// The entries of `account` that still count, with their ends (ms).
    pub async fn live(&self, account: &Account) -> Result<Vec<(String, u64)>, redis::RedisError> {
        let entries: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(&account.key)
            .arg(format!("({}", wall_ms()))
            .arg("+inf")
            .arg("BYSCORE")
            .arg("WITHSCORES")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(entries
            .into_iter()
            .map(|(member, end)| (member, end as u64))
            .collect())
    }

    /// Empties `account`.
    pub async fn clear(&self, account: &Account) -> Result<(), redis::RedisError> {
        redis::cmd("DEL")
            .arg(&account.key)
            .query_async(&mut self.conn.clone())
            .await
    }

    /// Entries of `account` that still count.
    pub async fn count(&self, account: &Account) -> Result<u64, redis::RedisError> {
        redis::cmd("ZCOUNT")
            .arg(&account.key)
            .arg(format!("({}", wall_ms()))
            .arg("+inf")
            .query_async(&mut self.conn.clone())
            .await
    }
}

/// Keeps `key` at least `ttl_ms` (plus slack) longer: NX gives a new key its first expiry,
/// GT only ever pushes it later, so a short entry never cuts a long one's account short.
fn expire(batch: &mut Batch, key: &str, ttl_ms: u64) {
    let ms = ttl_ms.saturating_add(ACCOUNT_SLACK_MS);
    for rule in ["NX", "GT"] {
        let mut pexpire = redis::cmd("PEXPIRE");
        pexpire.arg(key).arg(ms).arg(rule);
        batch.add_ignored(pexpire);
    }
}
