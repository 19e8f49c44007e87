//! Listing the live locks and semaphores, for the dashboard's overview, without a cross-slot
//! index: `SCAN` with `MATCH` over the per-lock state hashes (`{L}:leasehold`, one per name
//! ever used) and the bare lock keys (so a lock only a Redisson client holds is listed too,
//! as `foreign`), a cheap pipelined liveness check of each name found, then one inspection
//! per live name, all pipelined on the shared connection. Pages follow SCAN's cursor, so a page
//! costs O(page) Redis work however many locks exist; the order is Redis's hash order.

use std::collections::HashSet;

use futures_util::future::try_join_all;

use super::{InvalidInput, LockError, LockName, LockView, Locks, SemaphoreView};

/// The first SCAN call of a page walks about two buckets per name the page wants (a lock has
/// at least two keys: its lock hash and its state hash), at least this many: every name found
/// is inspected (SCAN cannot resume mid-call), and an inspection is most of a page's cost.
/// While matches stay scarce (a narrow prefix, many dead names) each further call walks twice
/// as many, up to [`SCAN_COUNT_MAX`].
const SCAN_COUNT_MIN: usize = 32;
const SCAN_COUNT_MAX: usize = 8192;
/// At most this many buckets walked per page, so a page stays fast (a few tens of ms) however
/// many keys Redis holds: the page may come back short, with a cursor to go on from.
const SCAN_BUDGET_PER_PAGE: usize = 200_000;

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

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn matches(&self, name: &str) -> bool {
        name.starts_with(&self.0)
    }
}

/// Where a listing starts: 0 for the first page, else a page's `next_cursor`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListCursor(pub u64);

/// A live lock or semaphore.
#[derive(Debug, Clone)]
pub enum LiveEntry {
    Lock(LockView),
    Semaphore(SemaphoreView),
}

impl LiveEntry {
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
    /// About `page_size` live locks and semaphores whose names start with `prefix`, from
    /// `cursor` on: held or waited-for locks, semaphores with permits out. A page may hold a
    /// few more than `page_size` (SCAN returns its batches whole) or fewer (the scan budget
    /// ran out, or this is the last page).
    pub async fn live(
        &self,
        prefix: &NamePrefix,
        cursor: ListCursor,
        page_size: usize,
    ) -> Result<LivePage, LockError> {
        // Both a name's state hash `{P name}:leasehold` and its bare lock key `P name` (held
        // by a Redisson client that Leasehold never saw) match: the walk costs the same, and
        // the extra keys are sorted out here.
        let pattern = format!("*{}{}*", self.inner.keys.prefix(), prefix.as_str());
        let mut conn = self.inner.conn.clone();
        let mut cursor = cursor.0;
        let mut entries = Vec::new();
        let mut count = page_size
            .saturating_mul(2)
            .clamp(SCAN_COUNT_MIN, SCAN_COUNT_MAX);
        let mut walked = 0;
        while walked < SCAN_BUDGET_PER_PAGE {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(count)
                .query_async(&mut conn)
                .await?;
            walked += count;
            if keys.len() < page_size / 4 {
                count = (count * 2).min(SCAN_COUNT_MAX);
            }
            let mut names: HashSet<LockName> = keys
                .iter()
                .filter_map(|key| self.inner.keys.name_of_state_key(key))
                .filter_map(|name| LockName::parse(name).ok())
                .filter(|name| prefix.matches(name.as_str()))
                .collect();
            let bare: Vec<LockName> = keys
                .iter()
                .filter_map(|key| key.strip_prefix(self.inner.keys.prefix()))
                .filter_map(|name| LockName::parse(name).ok())
                .filter(|name| prefix.matches(name.as_str()) && !names.contains(name))
                .collect();
            names.extend(self.redisson_only(bare).await?);
            let names: Vec<LockName> = names.into_iter().collect();
            entries.extend(self.inspect_live(&names).await?);
            cursor = next;
            if cursor == 0 || entries.len() >= page_size {
                break;
            }
        }
        entries.sort_by(|a, b| a.name().as_str().cmp(b.name().as_str()));
        Ok(LivePage {
            entries,
            next_cursor: (cursor != 0).then_some(ListCursor(cursor)),
        })
    }

    /// Those of `candidates` (bare lock keys) that are locks only a Redisson client knows: no
    /// state hash (a name with one is listed through it), and a hash shaped like Redisson's
    /// RLock or RReadWriteLock (fields `<client id>:<thread>`, `..:write`, `mode`). Any other
    /// program's key is left out. Listed, their inspection says `held_as: foreign`.
    async fn redisson_only(&self, candidates: Vec<LockName>) -> Result<Vec<LockName>, LockError> {
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.inner.conn.clone();
        let mut pipe = redis::pipe();
        for name in &candidates {
            let keys = self.inner.keys.lock(name);
            pipe.cmd("EXISTS").arg(keys.state());
            pipe.cmd("TYPE").arg(keys.lock());
        }
        let found: Vec<redis::Value> = pipe.query_async(&mut conn).await?;
        let hashes: Vec<LockName> = candidates
            .into_iter()
            .zip(found.chunks(2))
            .filter(|(_, f)| {
                matches!(f.first(), Some(redis::Value::Int(0)))
                    && matches!(f.get(1), Some(redis::Value::SimpleString(t)) if t == "hash")
            })
            .map(|(name, _)| name)
            .collect();
        if hashes.is_empty() {
            return Ok(hashes);
        }
        let mut pipe = redis::pipe();
        for name in &hashes {
            pipe.cmd("HRANDFIELD")
                .arg(self.inner.keys.lock(name).lock());
        }
        let fields: Vec<Option<String>> = pipe.query_async(&mut conn).await?;
        Ok(hashes
            .into_iter()
            .zip(fields)
            .filter(|(_, field)| field.as_deref().is_some_and(redisson_lock_field))
            .map(|(name, _)| name)
            .collect())
    }

    /// Inspects the live ones among `names`: one pipelined round trip tells which are live
    /// and which are semaphores, then their inspections run concurrently (pipelined too).
    async fn inspect_live(&self, names: &[LockName]) -> Result<Vec<LiveEntry>, LockError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for name in names {
            let [lock, queue, permits] = self.inner.keys.lock(name).liveness_keys();
            pipe.cmd("EXISTS").arg(&lock).arg(&queue);
            pipe.cmd("EXISTS").arg(&permits);
        }
        let flags: Vec<u64> = pipe.query_async(&mut self.inner.conn.clone()).await?;
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

/// Whether a field of a hash is one Redisson's RLock or RReadWriteLock writes: `mode`, or
/// `<client id>:<thread id>` (a read/write lock's writer also `..:write`).
fn redisson_lock_field(field: &str) -> bool {
    if field == "mode" {
        return true;
    }
    let field = field.strip_suffix(":write").unwrap_or(field);
    matches!(field.rsplit_once(':'), Some((client, thread))
        if !client.is_empty() && !thread.is_empty() && thread.bytes().all(|b| b.is_ascii_digit()))
}
