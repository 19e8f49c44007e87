//! What the leases layer (`crate::leases`) keeps on the main Redis for leases that are more
//! than one lease of one lock: a multilease's record, an `Idempotency-Key`'s claim on a lease
//! made by more than one call (a multilease, a RedLock lease), and the index of RedLock leases
//! (which live on the RedLock nodes). Single calls only; the orchestration is the leases
//! layer's.

use crate::locks::scripts::redlock::{RedlockIndex, RedlockOp, RedlockReply};
use std::sync::Arc;

use crate::locks::types::{IdempotencyKey, LeaseId, LockEvent, LockName};
use crate::locks::{KeySpace, LockError, Locks, Observer, own_key};

pub use crate::locks::scripts::multilease::{MultiOp, MultiRecord, MultiReply};

/// RedLock leases the due list read, at most, per call.
const DUE_READ: usize = 64;

/// A RedLock lease the due list says ran out: in which key space, and which.
pub struct DueRedlock {
    /// The lock domain in the lease's key space (its tenant's).
    pub locks: Locks,
    pub name: LockName,
    pub id: LeaseId,
}

/// What the leases layer keeps and reports through one store (see the module docs):
/// [`Locks::records`].
#[derive(Clone, Copy)]
pub struct Records<'a> {
    locks: &'a Locks,
}

impl Locks {
    /// The leases layer's records on this store, and its reports through it.
    pub fn records(&self) -> Records<'_> {
        Records { locks: self }
    }
}

impl<'a> Records<'a> {
    /// Runs `op` on multilease `id`'s record.
    pub async fn multilease_record(
        self,
        id: LeaseId,
        op: MultiOp<'_>,
    ) -> Result<MultiReply, LockError> {
        let record = crate::locks::scripts::multilease::Multilease { id, op };
        let key = self.locks.inner.keys.multilease(id);
        self.locks.call_own([&key, &key], &record).await
    }

    /// Runs `op` (`Claim`, `Unclaim`) on `key`'s claim on lease `id`.
    pub async fn lease_claim(
        self,
        key: &IdempotencyKey,
        id: LeaseId,
        op: MultiOp<'_>,
    ) -> Result<MultiReply, LockError> {
        let claim = crate::locks::scripts::multilease::Multilease { id, op };
        let key = self.locks.inner.keys.multilease_claim(&key.digest_hex());
        self.locks.call_own([&key, &key], &claim).await
    }

    /// Whether `key` has a claim on a lease (a multilease's, a RedLock lease's: its first
    /// request's token, kept for a retry).
    pub async fn claim_kept(self, key: &IdempotencyKey) -> Result<bool, LockError> {
        let claim = self.locks.inner.keys.multilease_claim(&key.digest_hex());
        self.locks.exists(&claim).await
    }

    /// Queues `event` for this key space's events channel and journal: the events of leases
    /// this Redis does not hold, which the leases layer tells (a RedLock lease's).
    pub fn publish_event(self, event: &LockEvent) {
        self.locks.publish(event);
    }

    /// Whoever listens to this handle's reports (the metrics).
    pub fn observer(self) -> &'a Arc<dyn Observer> {
        &self.locks.inner.observer
    }

    /// This handle's key space.
    pub fn key_space(self) -> KeySpace {
        self.locks.inner.keys.clone()
    }

    /// How long an ended lease stays answerable (and a claim at least is kept), in ms.
    pub fn tombstone_ms(self) -> u64 {
        self.locks.inner.settings.tombstone_ms
    }

    /// Indexes RedLock lease `id` of `name` as running out at `expires_ms` (Redis's clock;
    /// 0: `ttl_ms` from now).
    pub async fn index_redlock(
        self,
        name: &LockName,
        id: LeaseId,
        expires_ms: u64,
        ttl_ms: u64,
    ) -> Result<(), LockError> {
        let (member, due) = self.redlock_members(name, id);
        let put = RedlockOp::Put {
            member: &member,
            due: &due,
            expires_ms,
            ttl_ms,
        };
        match self
            .locks
            .call_own(keys(&self.redlock_keys()), &RedlockIndex(put))
            .await?
        {
            RedlockReply::TooLate => Err(LockError::TooLate),
            _ => Ok(()),
        }
    }

    /// Takes RedLock lease `id` of `name` out of the index; `true` for the one call that did
    /// (so that its end is recorded once).
    pub async fn unindex_redlock(self, name: &LockName, id: LeaseId) -> Result<bool, LockError> {
        let (member, due) = self.redlock_members(name, id);
        let end = RedlockOp::End {
            member: &member,
            due: &due,
        };
        match self
            .locks
            .call_own(keys(&self.redlock_keys()), &RedlockIndex(end))
            .await?
        {
            RedlockReply::Ended { removed } => Ok(removed > 0),
            RedlockReply::TooLate => Err(LockError::TooLate),
            _ => Ok(false),
        }
    }

    /// The RedLock leases of every key space whose indexed expiry has passed, at most a few
    /// dozen (call it on the deployment's handle), and Redis's time now.
    pub async fn due_redlocks(self) -> Result<(Vec<DueRedlock>, u64), LockError> {
        let due = RedlockOp::Due { count: DUE_READ };
        let (members, now_ms) = match self
            .locks
            .call_own(keys(&self.redlock_keys()), &RedlockIndex(due))
            .await?
        {
            RedlockReply::Due { members, now_ms } => (members, now_ms),
            RedlockReply::TooLate => return Err(LockError::TooLate),
            _ => return Ok((Vec::new(), 0)),
        };
        let due = members
            .iter()
            .filter_map(|member| {
                let (rest, id) = member.rsplit_once('\t')?;
                let (locks, name) = self.locks.space_of(rest)?;
                Some(DueRedlock {
                    locks,
                    name,
                    id: LeaseId::parse(id)?,
                })
            })
            .collect();
        Ok((due, now_ms))
    }

    /// The indexed RedLock leases of this key space whose names lie in `[from, to]` (ZRANGE
    /// BYLEX bounds over `<name>\t<id>` members), in name order, at most `limit`.
    pub async fn redlock_leases(
        self,
        from: &str,
        to: &str,
        limit: usize,
    ) -> Result<Vec<(LockName, LeaseId)>, LockError> {
        let members: Vec<String> = redis::cmd("ZRANGE")
            .arg(self.locks.inner.keys.own("redlock"))
            .arg(from)
            .arg(to)
            .arg("BYLEX")
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .query_async(&mut self.locks.inner.conn.clone())
            .await?;
        Ok(members
            .iter()
            .filter_map(|m| {
                let (name, id) = m.split_once('\t')?;
                Some((LockName::parse(name).ok()?, LeaseId::parse(id)?))
            })
            .collect())
    }

    /// The index's key in this key space, and the deployment's due list: one slot (every key
    /// space's own keys share the hash tag).
    fn redlock_keys(self) -> [String; 2] {
        [
            self.locks.inner.keys.own("redlock"),
            own_key(&self.locks.inner.settings.key_prefix, "redlock:due"),
        ]
    }

    /// This lease's members of the index and of the due list.
    fn redlock_members(self, name: &LockName, id: LeaseId) -> (String, String) {
        let space = self.locks.inner.keys.prefix();
        let tenant = space
            .strip_prefix(self.locks.inner.settings.key_prefix.as_str())
            .unwrap_or("");
        (format!("{name}\t{id}"), format!("{tenant}{name}\t{id}"))
    }
}

fn keys(owned: &[String; 2]) -> [&str; 2] {
    [&owned[0], &owned[1]]
}
