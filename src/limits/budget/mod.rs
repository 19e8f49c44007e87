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
//!
//! An acquire does not ask Redis either, as long as this instance holds an **advance** in the
//! account that covers it ([`local`]): room taken ahead, a part of the account like the
//! others (`r:<instance>`, 1/32 of the cap), renewed by each flush while the account has room
//! for it. So a busy caller costs Redis one budget call per account per flush, not one per
//! acquire, and the instances together still never take the account past its cap; near the
//! cap (no room for an advance) every acquire asks Redis, as a quiet caller's does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::redis::{Redis, wall_ms};

mod charge;
mod local;

pub use charge::{Charge, Kind, Sizes};
pub use local::ADVANCE_LIFE;
use local::Local;

/// How often the gathered charges are sent.
pub const FLUSH_EVERY: Duration = Duration::from_millis(250);
/// History entries a name keeps at most (`HISTORY_LENGTH` in `lua/prelude.lua`, trimmed with
/// `MAXLEN ~`, which keeps up to about a third more).
pub const ENTRIES_KEPT: u64 = 400;
/// Charges sent in one call at most (the function reads their sizes in one `HMGET`).
const OPS_PER_CALL: usize = 1_000;
/// An advance is this share of its account's cap.
const ADVANCE_SHARE: u64 = 32;

const SOURCE: &str = include_str!("../../../lua/quota.lua");

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

/// The account was full: how long until its first part ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full {
    pub retry_after: Duration,
    pub total: u64,
}

/// What Redis did with a call's ops: each op's member's size after it, or the account was
/// full.
type Applied = Result<Vec<u64>, Full>;

/// The state budgets of the deployment; cheap to clone.
#[derive(Clone)]
pub struct Budget {
    conn: Redis,
    prefix: Arc<str>,
    library: Arc<(String, String)>,
    /// This instance's advance's member in every account.
    advance_member: Arc<str>,
    /// Each active account as this instance sees it.
    accounts: Arc<Mutex<HashMap<Account, Local>>>,
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
            advance_member: format!("r:{}", uuid::Uuid::new_v4().simple()).into(),
            accounts: Arc::default(),
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

    fn locals(&self) -> std::sync::MutexGuard<'_, HashMap<Account, Local>> {
        self.accounts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies `charges` to each account at once; when one of them would grow past its cap,
    /// none applies there and the answer says which account (by position) and how long until
    /// its first part ends. Accounts without a cap (`u64::MAX`) are skipped. An account whose
    /// advance here covers the charges takes them without a Redis call.
    pub async fn reserve(
        &self,
        accounts: &[Account],
        charges: &[Charge],
    ) -> Result<Result<(), (usize, Full)>, redis::RedisError> {
        for (i, account) in accounts.iter().enumerate() {
            if account.cap == u64::MAX {
                continue;
            }
            let now = Instant::now();
            let asks_advance = {
                let mut locals = self.locals();
                let local = locals.entry(account.clone()).or_default();
                if local.admit(charges, now) {
                    continue;
                }
                local.wants_advance(now)
            };
            let advance = asks_advance.then(|| self.advance_op(account, 0));
            let mut ops = charges.to_vec();
            ops.extend(advance.clone());
            match self.apply(account, &ops, true).await? {
                Ok(sizes) => {
                    let members = ops
                        .iter()
                        .map(|c| c.member.clone())
                        .zip(sizes.iter().copied());
                    let got = advance.map(|_| sizes.last().copied().unwrap_or(0));
                    let mut locals = self.locals();
                    let local = locals.entry(account.clone()).or_default();
                    local.learned(members.take(charges.len()), got, now);
                }
                Err(full) => {
                    // The accounts before it took the charges: give them back.
                    for earlier in &accounts[..i] {
                        let undo = charges.iter().map(|c| Charge::del(c.member.clone()));
                        self.later(earlier, undo.collect());
                    }
                    return Ok(Err((i, full)));
                }
            }
        }
        Ok(Ok(()))
    }

    /// This instance's advance in `account`: `spent` of it went to charges sent with it, and
    /// it grows back to its share of the cap if there is room.
    fn advance_op(&self, account: &Account, spent: u64) -> Charge {
        let until = wall_ms() + u64::try_from(ADVANCE_LIFE.as_millis()).unwrap_or(u64::MAX);
        Charge {
            kind: Kind::Room,
            member: self.advance_member.to_string(),
            bytes: (account.cap / ADVANCE_SHARE).max(1),
            until_ms: until,
            most: spent,
            fresh: false,
        }
    }

    /// Gathers `charges` for `account`, sent with the next flush (never refused).
    pub fn later(&self, account: &Account, charges: Vec<Charge>) {
        if account.cap == u64::MAX || charges.is_empty() {
            return;
        }
        self.locals()
            .entry(account.clone())
            .or_default()
            .gather(charges);
    }

    /// The account's total now (bytes), as Redis has it (advances included).
    pub async fn total(&self, account: &Account) -> Result<u64, redis::RedisError> {
        let total: Option<u64> = redis::cmd("HGET")
            .arg(&account.key)
            .arg("#")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(total.unwrap_or(0))
    }

    /// Sends the gathered charges, each account's with its advance renewed; an account with
    /// nothing gathered is forgotten (its advance ends in Redis by itself).
    pub async fn flush(&self) {
        let taken: Vec<(Account, Vec<Charge>, u64)> = {
            let mut locals = self.locals();
            locals.retain(|_, local| !local.is_idle());
            locals
                .iter_mut()
                .map(|(account, local)| {
                    let (charges, spent) = local.take();
                    (account.clone(), charges, spent)
                })
                .collect()
        };
        for (account, charges, spent) in taken {
            let reply = self.send(&account, charges, spent).await;
            let now = Instant::now();
            let mut locals = self.locals();
            let Some(local) = locals.get_mut(&account) else {
                continue;
            };
            match reply {
                Ok((sizes, advance)) => local.flushed(sizes, advance, now),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot charge a state budget (its parts end by themselves)");
                    local.lost_track();
                }
            }
        }
    }

    /// Applies `charges` to `account` (at most [`OPS_PER_CALL`] a call), the last call with
    /// the advance they `spent`: the members' sizes in Redis after, and the advance's.
    async fn send(
        &self,
        account: &Account,
        mut charges: Vec<Charge>,
        spent: u64,
    ) -> Result<(HashMap<String, u64>, u64), redis::RedisError> {
        let mut sizes = HashMap::with_capacity(charges.len());
        while charges.len() > OPS_PER_CALL {
            let rest = charges.split_off(OPS_PER_CALL);
            let applied = self.apply(account, &charges, false).await?;
            sizes.extend(
                charges
                    .into_iter()
                    .map(|c| c.member)
                    .zip(applied.unwrap_or_default()),
            );
            charges = rest;
        }
        charges.push(self.advance_op(account, spent));
        let applied = self
            .apply(account, &charges, false)
            .await?
            .unwrap_or_default();
        let advance = applied.last().copied().unwrap_or(0);
        charges.pop();
        sizes.extend(charges.into_iter().map(|c| c.member).zip(applied));
        Ok((sizes, advance))
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
        ops: &[Charge],
        check: bool,
    ) -> Result<Applied, redis::RedisError> {
        let (text, function) = &*self.library;
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(function)
            .arg(2)
            .arg(&account.key)
            .arg(format!("{}:ends", account.key))
            .arg(wall_ms())
            .arg(account.cap)
            .arg(u8::from(check));
        for c in ops {
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
            [_, _, sizes @ ..] => Ok(sizes.to_vec()),
            _ => Ok(Vec::new()),
        })
    }
}
