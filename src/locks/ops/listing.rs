//! Listing the live locks and semaphores, for the dashboard's overview, `GET /v1/locks` and
//! the metrics' census: names read in order from the key space's names index
//! ([`super::index`]), a cheap pipelined liveness check of each, then one inspection per live
//! name, all pipelined on the shared connection. A page costs Redis work for the names it
//! reads, whatever else Redis holds; a name found dead is taken out of the index (found dead
//! twice, [`index::DEAD_FOR`] apart), so names nobody uses any more stop costing listings.
//! Locks only a Redisson client holds enter the index through the sweepers' periodic pass.

use std::collections::HashMap;

use futures_util::future::try_join_all;

use crate::locks::feed::index::{self, dead_key, index_key};
use crate::locks::{InvalidInput, LockError, LockName, LockView, Locks, SemaphoreView};
use crate::redis::Batch;

/// Names read per page at most, as a multiple of the page size (at least [`READ_MIN`]): a
/// page of mostly dead names (just ended, not yet taken out) comes back short, with a cursor
/// to go on from, rather than reading on.
const READ_FACTOR: usize = 4;
const READ_MIN: usize = 64;

/// The start of lock names to list: "" for all, else a prefix of a valid name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamePrefix(String);

impl NamePrefix {
    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        if raw.is_empty() {
            return Ok(Self::default());
        }
        LockName::parse(raw).map(|name| Self(name.as_str().to_owned()))
    }

    /// The start of the server's own names (`election/`): no client can ask for it.
    pub(crate) fn internal(prefix: &str) -> Self {
        Self(prefix.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn matches(&self, name: &str) -> bool {
        name.starts_with(&self.0)
    }
}

/// Where a listing starts: the first page, or after a page's last name (its `next_cursor`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListCursor(Option<LockName>);

impl ListCursor {
    /// A page's `next_cursor` as it was given (a lock name), or "" for the first page.
    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        if raw.is_empty() {
            return Ok(Self::default());
        }
        LockName::parse(raw).map(|name| Self(Some(name)))
    }

    pub fn is_first(&self) -> bool {
        self.0.is_none()
    }

    /// The cursor as a page gives it.
    pub fn as_str(&self) -> &str {
        self.0.as_ref().map_or("", LockName::as_str)
    }
}

/// A live lock or semaphore.
#[derive(Debug, Clone)]
pub enum LiveEntry {
    Lock(LockView),
    Semaphore(SemaphoreView),
}

impl LiveEntry {
    /// As a viewer whose name patterns `allows` sees it (see `LockView::seen_by`).
    pub fn seen_by(self, allows: &dyn Fn(&str) -> bool) -> Self {
        match self {
            Self::Lock(lock) => Self::Lock(lock.seen_by(allows)),
            semaphore @ Self::Semaphore(_) => semaphore,
        }
    }

    pub fn name(&self) -> &LockName {
        match self {
            Self::Lock(lock) => &lock.lock,
            Self::Semaphore(sem) => &sem.name,
        }
    }
}

/// One page of live locks and semaphores, sorted by name.
#[derive(Debug, Clone)]
pub struct LivePage {
    pub entries: Vec<LiveEntry>,
    /// Where the next page starts; `None` after the last page.
    pub next_cursor: Option<ListCursor>,
}

impl Locks {
    /// Up to `page_size` live locks and semaphores whose names start with `prefix`, after
    /// `cursor`, in name order: held or waited-for locks, semaphores with permits out. A page
    /// may hold fewer (the names it read were dead, or this is the last page): go on from
    /// its `next_cursor` while there is one.
    pub async fn live(
        &self,
        prefix: &NamePrefix,
        cursor: ListCursor,
        page_size: usize,
    ) -> Result<LivePage, LockError> {
        let index = index_key(&self.inner.keys);
        let start = match &cursor.0 {
            Some(after) if after.as_str() >= prefix.as_str() => format!("({}", after.as_str()),
            _ if prefix.as_str().is_empty() => "-".to_owned(),
            _ => format!("[{}", prefix.as_str()),
        };
        // Names keep to ASCII below DEL: every name starting with the prefix sorts before it.
        let end = if prefix.as_str().is_empty() {
            "+".to_owned()
        } else {
            format!("[{}\u{7f}", prefix.as_str())
        };
        let read = page_size.saturating_mul(READ_FACTOR).max(READ_MIN);
        let names: Vec<String> = redis::cmd("ZRANGE")
            .arg(&index)
            .arg(&start)
            .arg(&end)
            .arg("BYLEX")
            .arg("LIMIT")
            .arg(0)
            .arg(read)
            .query_async(&mut self.inner.conn.clone())
            .await?;
        let more = names.len() == read;
        let names: Vec<LockName> = names.iter().filter_map(|n| LockName::stored(n)).collect();
        let mut entries = self.inspect_live(&names).await?;
        entries.sort_by(|a, b| a.name().as_str().cmp(b.name().as_str()));
        // Past a full page, the rest is the next page's: its cursor is the page's last name.
        let mut last_read = names.last().cloned();
        let truncated = entries.len() > page_size;
        if truncated {
            entries.truncate(page_size);
            last_read = entries.last().map(|e| e.name().clone());
        }
        let checked: Vec<&LockName> = match &last_read {
            Some(last) => names
                .iter()
                .filter(|n| n.as_str() <= last.as_str())
                .collect(),
            None => Vec::new(),
        };
        self.forget_dead(&checked, &entries).await;
        let next_cursor = (more || truncated)
            .then_some(ListCursor(last_read))
            .filter(|c| !c.is_first());
        Ok(LivePage {
            entries,
            next_cursor,
        })
    }

    /// Marks the names of `checked` that are not live (not in `live`) as found dead, takes out
    /// of the index those found dead [`index::DEAD_FOR`] ago already, and clears the marks of
    /// the live ones. Best effort: the next listing does the same.
    async fn forget_dead(&self, checked: &[&LockName], live: &[LiveEntry]) {
        if checked.is_empty() {
            return;
        }
        let (index, dead) = (index_key(&self.inner.keys), dead_key(&self.inner.keys));
        let mut conn = self.inner.conn.clone();
        let mut read = redis::cmd("HMGET");
        read.arg(&dead);
        for name in checked {
            read.arg(name.as_str());
        }
        let marks: Vec<Option<u64>> = match read.query_async(&mut conn).await {
            Ok(marks) => marks,
            Err(_) => return,
        };
        let now = self.inner.conn.clock().now_ms();
        let dead_for = u64::try_from(index::DEAD_FOR.as_millis()).unwrap_or(u64::MAX);
        let alive: HashMap<&str, ()> = live.iter().map(|e| (e.name().as_str(), ())).collect();
        let mut pipe = redis::pipe();
        for (name, mark) in checked.iter().zip(marks) {
            let name = name.as_str();
            match (alive.contains_key(name), mark) {
                (true, Some(_)) => {
                    pipe.hdel(&dead, name).ignore();
                }
                (true, None) => {}
                (false, None) => {
                    pipe.hset_nx(&dead, name, now).ignore();
                }
                (false, Some(at)) if now.saturating_sub(at) >= dead_for => {
                    pipe.zrem(&index, name).ignore().hdel(&dead, name).ignore();
                }
                (false, Some(_)) => {}
            }
        }
        if let Err(e) = pipe.query_async::<()>(&mut conn).await {
            tracing::debug!(error = %e, "could not tidy the names index");
        }
    }

    /// Inspects the live ones among `names`: one pipelined round trip tells which are live
    /// and which are semaphores, then their inspections run concurrently (pipelined too).
    async fn inspect_live(&self, names: &[LockName]) -> Result<Vec<LiveEntry>, LockError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        // (A batch: in a cluster the names sit on different slots.)
        let mut batch = Batch::new();
        for name in names {
            let [lock, queue, permits] = self.inner.keys.lock(name).liveness_keys();
            let mut exists = redis::cmd("EXISTS");
            exists.arg(&lock).arg(&queue);
            batch.add(exists);
            let mut exists = redis::cmd("EXISTS");
            exists.arg(&permits);
            batch.add(exists);
        }
        let flags: Vec<u64> = batch.run(&self.inner.conn).await?;
        let inspections = names.iter().zip(flags.chunks(2)).filter_map(|(name, f)| {
            let (lock_or_queue, permits) = (f.first().copied()?, f.get(1).copied()?);
            (lock_or_queue + permits > 0).then_some((name, permits > 0))
        });
        let found = try_join_all(inspections.map(|(name, semaphore)| async move {
            if semaphore {
                Ok::<_, LockError>(
                    self.semaphore(name)
                        .await?
                        .filter(|sem| sem.used > 0)
                        .map(LiveEntry::Semaphore),
                )
            } else {
                Ok(self
                    .lock(name)
                    .await?
                    .filter(|lock| !lock.holders.is_empty() || lock.queue_length > 0)
                    .map(LiveEntry::Lock))
            }
        }))
        .await?;
        Ok(found.into_iter().flatten().collect())
    }
}
