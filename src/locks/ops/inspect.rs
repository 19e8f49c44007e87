//! What anyone may see of a lock or a semaphore: holders, queue, limits, fencing counter.

use crate::locks::HolderView;
use crate::locks::scripts::inspect_lock::InspectLock;
use crate::locks::scripts::semaphore_inspect::SemaphoreInspect;
use crate::locks::scripts::{HolderEntry, non_empty};
use crate::locks::{
    FencingToken, IdempotencyKey, LeaseId, LockError, LockName, LockView, Locks, Metadata,
    PermitHolderView, QUEUE_LISTED, QueuedView, RwMode, SemaphoreView, Timestamp,
};

impl Locks {
    /// How many waiters stand in `name`'s fair queue: one cheap `LLEN`, for callers that cap
    /// the queue's length before they join it.
    pub async fn fair_queue_length(&self, name: &LockName) -> Result<u64, LockError> {
        let [_, queue, _] = self.inner.keys.lock(name).liveness_keys();
        let length: u64 = redis::cmd("LLEN")
            .arg(queue)
            .query_async(&mut self.inner.conn.clone())
            .await?;
        Ok(length)
    }

    /// Whether an answer to Idempotency-Key `key` is kept on `name` (lock or semaphore):
    /// one cheap `EXISTS`, for callers that refuse a new request but not a retry, which
    /// replays that answer and takes nothing new.
    pub async fn answer_kept(
        &self,
        name: &LockName,
        key: &IdempotencyKey,
    ) -> Result<bool, LockError> {
        let record = self.inner.keys.lock(name).idempotency(&key.digest_hex());
        self.exists(&record).await
    }

    /// Whether `key` exists: one `EXISTS`, routed by the key (its slot in Cluster mode).
    pub(in crate::locks) async fn exists(&self, key: &str) -> Result<bool, LockError> {
        let found: u64 = redis::cmd("EXISTS")
            .arg(key)
            .query_async(&mut self.inner.conn.clone())
            .await?;
        Ok(found > 0)
    }

    /// The lock's kind, holders, fair queue and fencing counter; `None` when it is free and
    /// was never taken.
    pub async fn lock(&self, name: &LockName) -> Result<Option<LockView>, LockError> {
        let inspect = InspectLock {
            queue_listed: QUEUE_LISTED,
        };
        let snap = self.call(name, &inspect).await?;
        if !snap.known {
            return Ok(None);
        }
        let remaining_ms = if snap.holders.is_empty() {
            None
        } else {
            u64::try_from(snap.pttl).ok()
        };
        let queue = snap
            .queue
            .into_iter()
            .zip(1..)
            .map(|(q, position)| QueuedView {
                position,
                lease_id: q.lease_id.as_deref().and_then(LeaseId::parse),
                holder: non_empty(q.holder),
                queued_at: q.queued_ms.map(Timestamp),
                deadline: q.deadline_ms.map(Timestamp),
                holder_id: q.holder_id,
            })
            .collect();
        Ok(Some(LockView {
            lock: name.clone(),
            kind: snap.held_as,
            mode: snap.mode.as_deref().and_then(RwMode::parse),
            holders: snap.holders.into_iter().map(holder_view).collect(),
            queue,
            queue_length: snap.queue_length,
            fencing_counter: FencingToken(snap.fence),
            remaining_ms,
            expires_at: remaining_ms.map(|left| Timestamp(snap.now_ms).plus(left)),
            lock_delay_ms: snap.lock_delay_ms,
            delayed_until: snap
                .delay_pttl
                .and_then(|left| u64::try_from(left).ok())
                // (Only while L does not exist: PTTL -2.)
                .filter(|_| snap.pttl == -2)
                .map(|left| Timestamp(snap.now_ms).plus(left)),
        }))
    }

    /// The semaphore's limit, permits in use and holders; `None` when never used.
    pub async fn semaphore(&self, name: &LockName) -> Result<Option<SemaphoreView>, LockError> {
        let snap = self.call(name, &SemaphoreInspect { lease: None }).await?;
        let (true, Some(limit)) = (snap.known, snap.limit) else {
            return Ok(None);
        };
        Ok(Some(SemaphoreView {
            name: name.clone(),
            limit,
            used: snap.used,
            fencing_counter: FencingToken(snap.fence),
            holders: snap
                .holders
                .into_iter()
                .map(|h| PermitHolderView {
                    lease_id: h.lease_id.as_deref().and_then(LeaseId::parse),
                    holder: non_empty(h.holder),
                    metadata: Metadata::from_stored(h.metadata.as_deref()),
                    permits: h.permits,
                    fencing_token: h.fencing_token.map(FencingToken),
                    acquired_at: h.created_ms.map(Timestamp),
                    expires_at: h.expires_ms.map(Timestamp),
                })
                .collect(),
        }))
    }
}

/// One holder as a script described it.
pub(in crate::locks) fn holder_view(h: HolderEntry) -> HolderView {
    let rw = h.read_count.unwrap_or(0) + h.write_count.unwrap_or(0) > 0;
    HolderView {
        lease_id: h.lease_id.as_deref().and_then(LeaseId::parse),
        holder: non_empty(h.holder),
        metadata: Metadata::from_stored(h.metadata.as_deref()),
        reentry_count: h.reentry_count,
        read_count: h.read_count.filter(|_| rw),
        write_count: h.write_count.filter(|_| rw),
        kind: h.kind,
        fencing_token: h.fencing_token.map(FencingToken),
        acquired_at: h.created_ms.map(Timestamp),
        holder_id: h.holder_id,
    }
}
