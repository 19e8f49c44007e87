//! What one caller (and one tenant) makes Redis keep, in bytes: the **state budget**. The
//! other quotas count things (leases, names), and things differ by orders of magnitude: a
//! semaphore lease of 1,000 permits keeps about 120 KB, a busy name's history up to ~400 KB.
//! So each part of what a caller makes Redis keep is charged its estimated size, until its
//! own end:
//!
//! | member | size (estimated, see [`Sizes`]) | until |
//! |---|---|---|
//! | `n:<name>` | a name's state | its lease ends, plus the history's hour |
//! | `l:<lease>` | a lease's record, holder and metadata | the lease ends (heartbeats move it) |
//! | `p:<lease>` | a semaphore lease's permits | the lease ends |
//! | `h:<name>` | the history entries the caller's calls added to the name, up to the entries a history keeps | an hour after the last |
//!
//! in `P leasehold:quota:{<owner>}:bytes` (hash: member → size, `#` → total) and
//! `P leasehold:quota:{<owner>}:bytes:ends` (zset: member → end), and the same for its tenant
//! (`{tenant:<t>}`). `lua/quota.lua` (a function library of its own) applies a call's
//! charges atomically and, for an acquire, refuses them when they would take the account
//! past its cap (429 `quota_exceeded`, `quota: state bytes`). What a call adds afterwards
//! (its history entry, a heartbeat's later end, a release's freed record) is gathered here
//! and sent every [`FLUSH_EVERY`]: never refused, and never on the request's way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sha2::{Digest as _, Sha256};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::redis::{Redis, wall_ms};

/// How often the gathered charges are sent.
pub const FLUSH_EVERY: Duration = Duration::from_millis(250);
/// History entries a name keeps at most (`HISTORY_LENGTH` in `lua/prelude.lua`, trimmed with
/// `MAXLEN ~`, which keeps up to about a third more).
pub const ENTRIES_KEPT: u64 = 400;

const SOURCE: &str = include_str!("../../lua/quota.lua");

/// Estimated sizes (bytes), from `INFO memory` measured around each kind of write on Redis
/// 7.0 (tests/api/quotas.rs holds them above what Redis measures).
pub struct Sizes;

impl Sizes {
    /// A name's state (its lock hash, state hash, names index entry, history stream).
    pub const NAME: u64 = 2_048;

    /// A lease's record, with its holder label and metadata (JSON bytes).
    pub fn lease(holder: usize, metadata: usize) -> u64 {
        1_024 + 2 * holder as u64 + 2 * metadata as u64
    }

    /// A semaphore lease's permits (measured: about 120 to 150 bytes each, whatever the
    /// holder label).
    pub fn permits(permits: u64) -> u64 {
        permits * 192
    }

    /// One history entry (JSON with the holder label, in a stream; measured: 400 to 1,000
    /// bytes with a 200-character label, less where consecutive entries look alike).
    pub fn entry(holder: usize) -> u64 {
        448 + 2 * holder as u64
    }
}

/// One account and its cap (bytes).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Account {
    key: String,
    pub cap: u64,
}

impl Account {
    /// Whether this is a tenant's account (not one caller's).
    pub fn is_tenants(&self) -> bool {
        self.key.contains("{tenant:")
    }
}

/// What a charge does to its member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Its size is `bytes`.
    Set,
    /// Its size grows by `bytes`, up to `most`.
    Add,
    /// Its end moves to `until_ms` (if it is there).
    Touch,
    /// It goes.
    Del,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Set => "set",
            Self::Add => "add",
            Self::Touch => "touch",
            Self::Del => "del",
        }
    }
}

/// One charge to one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    pub kind: Kind,
    pub member: String,
    pub bytes: u64,
    pub until_ms: u64,
    pub most: u64,
}

impl Charge {
    pub fn set(member: String, bytes: u64, until_ms: u64) -> Self {
        Self {
            kind: Kind::Set,
            member,
            bytes,
            until_ms,
            most: bytes,
        }
    }

    pub fn add(member: String, bytes: u64, most: u64, until_ms: u64) -> Self {
        Self {
            kind: Kind::Add,
            member,
            bytes,
            until_ms,
            most,
        }
    }

    pub fn touch(member: String, until_ms: u64) -> Self {
        Self {
            kind: Kind::Touch,
            member,
            bytes: 0,
            until_ms,
            most: 0,
        }
    }

    pub fn del(member: String) -> Self {
        Self {
            kind: Kind::Del,
            member,
            bytes: 0,
            until_ms: 0,
            most: 0,
        }
    }

    /// Folds `later` (for the same member) into this one: what sending both would do.
    fn absorb(&mut self, later: Self) {
        match (self.kind, later.kind) {
            (Kind::Add, Kind::Add) => {
                self.bytes = self.bytes.saturating_add(later.bytes).min(later.most);
                self.most = later.most;
                self.until_ms = self.until_ms.max(later.until_ms);
            }
            (Kind::Set | Kind::Add | Kind::Touch, Kind::Touch) => {
                self.until_ms = self.until_ms.max(later.until_ms);
            }
            _ => *self = later,
        }
    }
}

/// The account was full: how long until its first part ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full {
    pub retry_after: Duration,
    pub total: u64,
}

/// The state budgets of the deployment; cheap to clone.
#[derive(Clone)]
pub struct Budget {
    conn: Redis,
    prefix: Arc<str>,
    library: Arc<(String, String)>,
    /// Charges gathered since the last flush, by account.
    gathered: Arc<Mutex<HashMap<Account, Vec<Charge>>>>,
}

impl Budget {
    /// The budgets under the deployment's key prefix `base`.
    pub fn new(conn: Redis, base: &str) -> Self {
        let hash = hex::encode(&Sha256::digest(SOURCE.as_bytes())[..6]);
        let function = format!("lhq_{hash}_charge");
        let text = format!(
            "#!lua name=leasehold_quota_{hash}\n{SOURCE}\nredis.register_function{{\
             function_name='{function}', callback=charge, flags={{'allow-oom'}}}}\n"
        );
        Self {
            conn,
            prefix: format!("{base}leasehold:quota:").into(),
            library: Arc::new((text, function)),
            gathered: Arc::default(),
        }
    }

    /// The account of what `owner` makes Redis keep.
    pub fn account(&self, owner: &str, cap: u64) -> Account {
        Account {
            key: format!("{}{{{owner}}}:bytes", self.prefix),
            cap,
        }
    }

    /// The account of what every caller of `tenant` makes Redis keep.
    pub fn tenant(&self, tenant: &str, cap: u64) -> Account {
        self.account(&format!("tenant:{tenant}"), cap)
    }

    /// Applies `charges` to each account at once; when one of them would grow past its cap,
    /// none applies there and the answer says which account (by position) and how long until
    /// its first part ends. Accounts without a cap (`u64::MAX`) are skipped.
    pub async fn reserve(
        &self,
        accounts: &[Account],
        charges: &[Charge],
    ) -> Result<Result<(), (usize, Full)>, redis::RedisError> {
        for (i, account) in accounts.iter().enumerate() {
            if account.cap == u64::MAX {
                continue;
            }
            if let Err(full) = self.apply(account, charges, true).await? {
                // The accounts before it took the charges: give them back.
                for earlier in &accounts[..i] {
                    let undo: Vec<Charge> = charges
                        .iter()
                        .map(|c| Charge::del(c.member.clone()))
                        .collect();
                    self.later(earlier, undo);
                }
                return Ok(Err((i, full)));
            }
        }
        Ok(Ok(()))
    }

    /// Gathers `charges` for `account`, sent with the next flush (never refused).
    pub fn later(&self, account: &Account, charges: Vec<Charge>) {
        if account.cap == u64::MAX || charges.is_empty() {
            return;
        }
        let mut gathered = self.gathered.lock().unwrap_or_else(PoisonError::into_inner);
        let pending = gathered.entry(account.clone()).or_default();
        for charge in charges {
            match pending.iter_mut().find(|c| c.member == charge.member) {
                Some(earlier) => earlier.absorb(charge),
                None => pending.push(charge),
            }
        }
    }

    /// The account's total now (bytes), as Redis has it.
    pub async fn total(&self, account: &Account) -> Result<u64, redis::RedisError> {
        let total: Option<u64> = redis::cmd("HGET")
            .arg(&account.key)
            .arg("#")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(total.unwrap_or(0))
    }

    /// Sends the gathered charges.
    pub async fn flush(&self) {
        let gathered =
            std::mem::take(&mut *self.gathered.lock().unwrap_or_else(PoisonError::into_inner));
        for (account, charges) in gathered {
            if let Err(e) = self.apply(&account, &charges, false).await {
                tracing::warn!(error = %e, "cannot charge a state budget (its parts end by themselves)");
            }
        }
    }

    /// Sends the gathered charges every [`FLUSH_EVERY`] until `shutdown` (and once more then).
    pub fn spawn_flusher(&self, shutdown: CancellationToken) -> JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(FLUSH_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => me.flush().await,
                    () = shutdown.cancelled() => {
                        me.flush().await;
                        return;
                    }
                }
            }
        })
    }

    async fn apply(
        &self,
        account: &Account,
        charges: &[Charge],
        check: bool,
    ) -> Result<Result<(), Full>, redis::RedisError> {
        let (text, function) = &*self.library;
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(function)
            .arg(2)
            .arg(&account.key)
            .arg(format!("{}:ends", account.key))
            .arg(wall_ms())
            .arg(if check { account.cap } else { 0 });
        for c in charges {
            cmd.arg(c.kind.as_str())
                .arg(&c.member)
                .arg(c.bytes)
                .arg(c.until_ms)
                .arg(c.most);
        }
        let mut conn = self.conn.clone();
        let reply = match cmd.query_async::<Vec<u64>>(&mut conn).await {
            Err(e) if crate::redis::functions::is_missing(&e) => {
                self.conn.load_functions(text).await?;
                cmd.query_async::<Vec<u64>>(&mut conn).await?
            }
            other => other?,
        };
        Ok(match reply.as_slice() {
            [0, total, wait, ..] => Err(Full {
                retry_after: Duration::from_millis((*wait).max(1)),
                total: *total,
            }),
            _ => Ok(()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathered_charges_fold_into_what_sending_them_all_would_do() {
        let mut first = Charge::add("h:a".into(), 10, 25, 100);
        first.absorb(Charge::add("h:a".into(), 10, 25, 200));
        first.absorb(Charge::add("h:a".into(), 10, 25, 150));
        assert_eq!(first, Charge::add("h:a".into(), 25, 25, 200));
        let mut lease = Charge::set("l:x".into(), 1000, 100);
        lease.absorb(Charge::touch("l:x".into(), 300));
        assert_eq!(lease, Charge::set("l:x".into(), 1000, 300));
        lease.absorb(Charge::del("l:x".into()));
        assert_eq!(lease.kind, Kind::Del);
    }

    #[test]
    fn sizes_grow_with_what_a_caller_chooses() {
        assert!(Sizes::lease(200, 4096) > Sizes::lease(0, 0) + 8_000);
        assert_eq!(Sizes::permits(1000), 192_000);
        assert!(Sizes::entry(200) > Sizes::entry(0) + 300);
    }
}
