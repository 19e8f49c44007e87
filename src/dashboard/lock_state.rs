//! The parts of the lock page that come from the lock (or semaphore) itself: its kind and
//! mode, holders with their reentries and fencing tokens, the fair queue.

use super::format::{
    holder_label, lease_text, metadata_text, permit_holder_label, remaining_until, time_text,
    ttl_text, when,
};
use crate::locks::{HeldAs, LockView, SemaphoreView, Timestamp, wall_ms};

/// The parts of the lock page that come from the lock (or semaphore) itself.
pub struct LockState {
    pub kind: String,
    pub mode: Option<String>,
    pub semaphore: Option<SemaphoreFacts>,
    pub ttl: String,
    pub fence: u64,
    pub queue_length: u64,
    pub queue_more: u64,
    pub write_holder: Option<String>,
    pub read_holders: String,
    pub holders: Vec<HolderRow>,
    pub queue: Vec<QueueRow>,
    /// When the oldest current hold began.
    pub held_since: Option<Timestamp>,
    /// The lock-delay its holders asked for, as people read it.
    pub lock_delay: Option<String>,
    /// Free but in its lock-delay: until when, and how long that is from now.
    pub delayed_until: Option<String>,
}

impl LockState {
    pub fn free() -> Self {
        Self {
            kind: "free".into(),
            mode: None,
            semaphore: None,
            ttl: ttl_text(None),
            fence: 0,
            queue_length: 0,
            queue_more: 0,
            write_holder: None,
            read_holders: String::new(),
            holders: Vec::new(),
            queue: Vec::new(),
            held_since: None,
            lock_delay: None,
            delayed_until: None,
        }
    }

    pub fn of_lock(lock: &LockView) -> Self {
        let ttl = ttl_text(lock.remaining_ms);
        let holders = lock
            .holders
            .iter()
            .map(|h| {
                let (multilease, own) = match h.metadata.clone() {
                    Some(m) => m.split_membership(),
                    None => (None, None),
                };
                HolderRow {
                    revocation: None,
                    evictable: h.lease_id.is_some(),
                    lease_id: lease_text(h),
                    label: holder_label(h),
                    metadata: metadata_text(own.as_ref()),
                    multilease: multilease.map(|m| MultiRow::of(&m, lock.lock.as_str())),
                    count: h.reentry_count,
                    read: h.read_count.unwrap_or(0),
                    write: h.write_count.unwrap_or(0),
                    acquired_at: when(h.acquired_at, wall_ms()),
                    ttl: ttl.clone(),
                    fence: h
                        .fencing_token
                        .map_or_else(String::new, |f| f.0.to_string()),
                }
            })
            .collect();
        let write_holder = lock
            .holders
            .iter()
            .find(|h| h.write_count.unwrap_or(0) > 0)
            .map(|h| {
                format!(
                    "{} ({} write holds)",
                    holder_label(h),
                    h.write_count.unwrap_or(0)
                )
            });
        let read_holders = lock
            .holders
            .iter()
            .filter(|h| h.read_count.unwrap_or(0) > 0)
            .map(|h| format!("{} ({})", holder_label(h), h.read_count.unwrap_or(0)))
            .collect::<Vec<_>>()
            .join(", ");
        let queue: Vec<QueueRow> = lock
            .queue
            .iter()
            .map(|q| QueueRow {
                position: q.position,
                label: q.holder.clone().unwrap_or_else(|| q.holder_id.clone()),
                lease_id: q.lease_id.map(|id| id.to_string()).unwrap_or_default(),
                since: when(q.queued_at, wall_ms()),
                deadline: time_text(q.deadline),
            })
            .collect();
        Self {
            kind: lock.kind.map_or("free", HeldAs::as_str).to_owned(),
            mode: lock.mode.map(|m| m.as_str().to_owned()),
            semaphore: None,
            ttl,
            fence: lock.fencing_counter.0,
            queue_length: lock.queue_length,
            queue_more: lock
                .queue_length
                .saturating_sub(u64::try_from(queue.len()).unwrap_or(u64::MAX)),
            write_holder,
            read_holders,
            holders,
            queue,
            held_since: lock.held_since(),
            lock_delay: lock.lock_delay_ms.map(|ms| ttl_text(Some(ms))),
            delayed_until: lock.delayed_until.map(|at| {
                format!(
                    "{} ({} left)",
                    at.rfc3339(),
                    ttl_text(Some(remaining_until(at)))
                )
            }),
        }
    }

    pub fn of_semaphore(sem: &SemaphoreView) -> Self {
        let holders = sem
            .holders
            .iter()
            .map(|h| HolderRow {
                revocation: None,
                evictable: h.lease_id.is_some(),
                lease_id: h.lease_id.map(|id| id.to_string()).unwrap_or_default(),
                label: permit_holder_label(h),
                metadata: metadata_text(h.metadata.as_ref()),
                multilease: None,
                count: h.permits,
                read: 0,
                write: 0,
                acquired_at: when(h.acquired_at, wall_ms()),
                ttl: ttl_text(h.expires_at.map(remaining_until)),
                fence: h
                    .fencing_token
                    .map_or_else(String::new, |f| f.0.to_string()),
            })
            .collect();
        Self {
            kind: HeldAs::Semaphore.as_str().to_owned(),
            mode: None,
            semaphore: Some(SemaphoreFacts {
                used: sem.used,
                limit: sem.limit,
            }),
            ttl: ttl_text(
                sem.holders
                    .iter()
                    .filter_map(|h| h.expires_at)
                    .max()
                    .map(remaining_until),
            ),
            fence: sem.fencing_counter.0,
            queue_length: 0,
            queue_more: 0,
            write_holder: None,
            read_holders: String::new(),
            holders,
            queue: Vec::new(),
            held_since: sem.held_since(),
            lock_delay: None,
            delayed_until: None,
        }
    }
}

pub struct SemaphoreFacts {
    pub used: u64,
    pub limit: u32,
}

pub struct HolderRow {
    pub lease_id: String,
    /// An operator asked this holder to let go: by when, and why.
    pub revocation: Option<String>,
    /// The multilease this holder's lease is part of.
    pub multilease: Option<MultiRow>,
    /// A Leasehold lease (an admin may evict it), not a Redisson client.
    pub evictable: bool,
    pub label: String,
    pub metadata: String,
    pub count: u64,
    pub read: u64,
    pub write: u64,
    pub acquired_at: String,
    pub ttl: String,
    pub fence: String,
}

/// A holder that is part of a multilease: which one, and its other locks (linked).
pub struct MultiRow {
    pub lease_id: String,
    /// `(name, page)` of each other lock it holds (that the viewer may see).
    pub others: Vec<(String, String)>,
    /// Its locks the viewer may not see: counted, not named.
    pub hidden: u32,
}

impl MultiRow {
    fn of(m: &crate::locks::Membership, this: &str) -> Self {
        Self {
            lease_id: m.lease_id.to_string(),
            others: m
                .locks
                .iter()
                .filter(|name| name.as_str() != this)
                .map(|name| (name.clone(), format!("/locks/{name}")))
                .collect(),
            hidden: m.hidden_locks,
        }
    }
}

pub struct QueueRow {
    pub position: u64,
    pub label: String,
    pub lease_id: String,
    pub since: String,
    pub deadline: String,
}
