//! Who is waiting, recorded in Redis so that every instance shows every waiter: one hash per
//! lock or semaphore, `{L}:leasehold:waiting`, beside the lock's other keys (same slot), with
//! one field per waiting request (its lease id) holding a JSON [`WaiterView`].
//!
//! The in-process registry ([`super::waiters`]) says whom to wake; this list says who waits,
//! to people. A request enters it when its first attempt finds the name taken and it is going
//! to wait ([`Locks::enlist`]), and leaves it when the request ends, however it ends (the guard
//! [`Listed`] drops). Fair tickets are not listed here: the fair queue already lists them in
//! order ([`super::LockView::queue`]).
//!
//! Redis 7.0 has no per-field expiry, so each entry carries `until_ms` (its request's wait
//! deadline plus slack): an entry a crashed instance left behind is ignored once past it, and
//! the hash itself expires after the latest such deadline.

use std::sync::LazyLock;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::kind::LeaseKind;
use super::{LeaseId, LockError, LockName, Locks, Timestamp};

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

/// A waiting request's entry in the list; dropping it removes the entry.
pub struct Listed {
    conn: redis::aio::ConnectionManager,
    key: String,
    field: String,
}

impl Drop for Listed {
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut conn = self.conn.clone();
        let (key, field) = (
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.field),
        );
        // Sent after the entry's HSET on the same connection, so it lands after it.
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
}

impl Locks {
    /// The key of `name`'s waiting list: `{L}:leasehold:waiting`.
    fn waiting_key(&self, name: &LockName) -> String {
        format!("{}:waiting", self.inner.keys.lock(name).state())
    }

    /// Lists request `id` as waiting for `name` until `deadline`. Best effort: a Redis that fails here fails the attempt after it anyway, and a
    /// waiter missing from the list must not fail its request.
    pub(super) async fn enlist(
        &self,
        name: &LockName,
        wanted: Wanted<'_>,
        id: LeaseId,
        deadline: Instant,
    ) -> Listed {
        let key = self.waiting_key(name);
        let field = id.to_string();
        let now = self.inner.clock.now_ms();
        let left = deadline.saturating_duration_since(Instant::now()) + SLACK;
        let until_ms = now.saturating_add(u64::try_from(left.as_millis()).unwrap_or(u64::MAX));
        let view = WaiterView {
            lease_id: field.clone(),
            holder: wanted.holder.map(str::to_owned),
            kind: wanted.kind.map(|k| k.as_str().to_owned()),
            permits: wanted.permits,
            since_ms: now,
            instance: INSTANCE.clone(),
            until_ms,
        };
        let mut conn = self.inner.conn.clone();
        let listed = Listed {
            conn: conn.clone(),
            key,
            field,
        };
        let Ok(json) = serde_json::to_string(&view) else {
            return listed;
        };
        // The hash lives as long as its longest entry may: PEXPIRE GT keeps a later expiry
        // another waiter set (Redis 7.0); NX gives a new hash its first.
        let mut pipe = redis::pipe();
        pipe.cmd("HSET")
            .arg(&listed.key)
            .arg(&listed.field)
            .arg(json)
            .ignore()
            .cmd("PEXPIRE")
            .arg(&listed.key)
            .arg(u64::try_from(left.as_millis()).unwrap_or(u64::MAX))
            .arg("GT")
            .ignore()
            .cmd("PEXPIRE")
            .arg(&listed.key)
            .arg(u64::try_from(left.as_millis()).unwrap_or(u64::MAX))
            .arg("NX")
            .ignore();
        if let Err(e) = pipe.query_async::<()>(&mut conn).await {
            tracing::debug!(lock = %name, error = %e, "could not list a waiter");
        }
        listed
    }

    /// Who waits for `name` (every instance's requests, fair tickets aside), oldest first: at
    /// most [`WAITERS_LISTED`] of them, and how many there are.
    pub async fn waiters_of(&self, name: &LockName) -> Result<(Vec<WaiterView>, u64), LockError> {
        let entries: Vec<String> = redis::cmd("HVALS")
            .arg(self.waiting_key(name))
            .query_async(&mut self.inner.conn.clone())
            .await?;
        Ok(live(entries, self.inner.clock.now_ms()))
    }

    /// How many requests wait for each of `names` (fair tickets aside), in one round trip.
    pub async fn waiting_counts(&self, names: &[&LockName]) -> Result<Vec<u64>, LockError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for name in names {
            pipe.cmd("HVALS").arg(self.waiting_key(name));
        }
        let all: Vec<Vec<String>> = pipe.query_async(&mut self.inner.conn.clone()).await?;
        let now = self.inner.clock.now_ms();
        Ok(all.into_iter().map(|e| live(e, now).1).collect())
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
