//! The pages' view models: what each template shows, as display-ready text built from the
//! domain's views. Templates escape every value (askama's HTML escaping is on for `.html`), so
//! lock names, holder labels and metadata, all user input, can never become markup.

use std::time::{SystemTime, UNIX_EPOCH};

use askama::Template;

use super::insight::{Timeline, WaiterRow, when};
use crate::locks::{
    HeldAs, HolderView, LiveEntry, LockEvent, LockView, Metadata, PermitHolderView, RwMode,
    SemaphoreView, Timestamp,
};

/// What the header needs: who is signed in (then the CSRF token of their forms), whether they
/// may force-release, and whether signing in is possible at all.
#[derive(Debug, Clone, Default)]
pub struct Nav {
    /// Signed in: the CSRF token of this session's forms (sign-out).
    pub csrf: Option<String>,
    /// Signed in with the admin role: the CSRF token of the force-release form.
    pub force_csrf: Option<String>,
    /// Whom the header shows as signed in (`admin`, or the key's name).
    pub who: String,
    /// The server has an admin token or API keys to sign in with.
    pub admin_enabled: bool,
}

#[derive(Template)]
#[template(path = "overview.html")]
pub struct OverviewPage {
    pub nav: Nav,
    pub prefix: String,
    /// How the rows are ordered: name, held or waiters.
    pub sort: &'static str,
    pub rows: Vec<OverviewRow>,
    pub events_url: String,
    pub next_href: Option<String>,
    pub first_href: String,
    pub first_page: bool,
    pub rendered_at: String,
}

pub struct OverviewRow {
    pub name: String,
    pub href: String,
    pub kind: String,
    pub mode: String,
    pub holders: String,
    pub reentries: String,
    pub ttl: String,
    pub waiters: u64,
    pub fence: u64,
    /// Time left, for the near-expiry highlight.
    pub remaining_ms: Option<u64>,
    /// How long the oldest current hold has lasted (see `insight::overview_rows`).
    pub held_for: String,
    pub held_for_ms: u64,
    pub held_since: String,
    pub long_hold: bool,
    pub near_expiry: bool,
}

impl OverviewRow {
    pub fn from_entry(entry: &LiveEntry) -> Self {
        let name = entry.name().as_str().to_owned();
        let href = format!("/locks/{name}");
        match entry {
            LiveEntry::Lock(lock) => Self {
                name,
                href,
                kind: lock.kind.map_or("free", HeldAs::as_str).to_owned(),
                mode: lock.mode.map_or("—", RwMode::as_str).to_owned(),
                holders: join_or_dash(lock.holders.iter().map(holder_label)),
                reentries: join_or_dash(lock.holders.iter().map(|h| h.reentry_count.to_string())),
                ttl: ttl_text(lock.remaining_ms),
                waiters: lock.queue_length,
                fence: lock.fencing_counter.0,
                remaining_ms: lock.remaining_ms,
                held_for: String::new(),
                held_for_ms: 0,
                held_since: String::new(),
                long_hold: false,
                near_expiry: false,
            },
            LiveEntry::Semaphore(sem) => Self {
                name,
                href,
                kind: HeldAs::Semaphore.as_str().to_owned(),
                mode: format!("{} of {} permits", sem.used, sem.limit),
                holders: join_or_dash(sem.holders.iter().map(permit_holder_label)),
                reentries: join_or_dash(sem.holders.iter().map(|h| h.permits.to_string())),
                ttl: ttl_text(sem_remaining(sem)),
                waiters: 0,
                fence: sem.fencing_counter.0,
                remaining_ms: sem_remaining(sem),
                held_for: String::new(),
                held_for_ms: 0,
                held_since: String::new(),
                long_hold: false,
                near_expiry: false,
            },
        }
    }
}

#[derive(Template)]
#[template(path = "lock.html")]
pub struct LockPage {
    pub nav: Nav,
    pub name: String,
    pub self_href: String,
    pub force_release_href: String,
    pub events_url: String,
    pub flash: Option<String>,
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
    pub history: Vec<HistoryRow>,
    /// Requests waiting on any instance besides the fair queue, oldest first.
    pub waiting: Vec<WaiterRow>,
    pub waiting_count: u64,
    /// When the oldest current hold began, and how long ago.
    pub held_since: String,
    pub timeline: Timeline,
}

impl LockPage {
    /// Whether a holder is a lease an admin may evict (the evict form's choices).
    pub fn any_evictable(&self) -> bool {
        self.holders.iter().any(|h| h.evictable)
    }
}

pub struct SemaphoreFacts {
    pub used: u64,
    pub limit: u32,
}

pub struct HolderRow {
    pub lease_id: String,
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

pub struct QueueRow {
    pub position: u64,
    pub label: String,
    pub lease_id: String,
    pub since: String,
    pub deadline: String,
}

pub struct HistoryRow {
    pub at: String,
    pub kind: String,
    pub lease_id: String,
    pub holder: String,
    pub details: String,
}

impl HistoryRow {
    pub fn from_event(event: &LockEvent) -> Self {
        let mut details: Vec<String> = Vec::new();
        if event.kind == "force_released" {
            details.push(format!("by {}", event.detail_str("by").unwrap_or("?")));
            match event.detail_str("reason") {
                Some(reason) if !reason.is_empty() => details.push(format!("reason: {reason}")),
                _ => details.push("no reason given".into()),
            }
            let removed = removed_holders(event);
            details.push(if removed.is_empty() {
                "removed nobody".into()
            } else {
                format!("removed {}", removed.join(", "))
            });
        }
        for (key, value) in &event.details {
            if matches!(
                key.as_str(),
                "by" | "reason" | "lease_ids" | "holders" | "holder_ids"
            ) && event.kind == "force_released"
            {
                continue;
            }
            let text = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_owned);
            details.push(format!("{key}={text}"));
        }
        Self {
            at: when(Some(event.at()), now_ms()),
            kind: event.kind.clone(),
            lease_id: event.lease_id.clone().unwrap_or_default(),
            holder: event.holder.clone().unwrap_or_default(),
            details: details.join("; "),
        }
    }
}

/// The holders an admin action's entry names (`holders`): "label (lease id)", a lease, or a
/// Redisson client's holder id.
fn removed_holders(event: &LockEvent) -> Vec<String> {
    let Some(serde_json::Value::Array(holders)) = event.details.get("holders") else {
        return event
            .removed_lease_ids()
            .into_iter()
            .map(|id| format!("lease {id}"))
            .collect();
    };
    let text = |h: &serde_json::Value, key: &str| {
        h.get(key)
            .and_then(serde_json::Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    holders
        .iter()
        .filter_map(|h| {
            Some(match (text(h, "holder"), text(h, "lease_id")) {
                (Some(label), Some(id)) => format!("{label} (lease {id})"),
                (None, Some(id)) => format!("lease {id}"),
                (label, None) => format!(
                    "{} ({})",
                    label.unwrap_or_else(|| "Redisson client".into()),
                    text(h, "holder_id")?
                ),
            })
        })
        .collect()
}

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
        }
    }

    pub fn of_lock(lock: &LockView) -> Self {
        let ttl = ttl_text(lock.remaining_ms);
        let holders = lock
            .holders
            .iter()
            .map(|h| HolderRow {
                evictable: h.lease_id.is_some(),
                lease_id: lease_text(h),
                label: holder_label(h),
                metadata: metadata_text(h.metadata.as_ref()),
                count: h.reentry_count,
                read: h.read_count.unwrap_or(0),
                write: h.write_count.unwrap_or(0),
                acquired_at: when(h.acquired_at, now_ms()),
                ttl: ttl.clone(),
                fence: h
                    .fencing_token
                    .map_or_else(String::new, |f| f.0.to_string()),
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
                since: when(q.queued_at, now_ms()),
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
        }
    }

    pub fn of_semaphore(sem: &SemaphoreView) -> Self {
        let holders = sem
            .holders
            .iter()
            .map(|h| HolderRow {
                evictable: h.lease_id.is_some(),
                lease_id: h.lease_id.map(|id| id.to_string()).unwrap_or_default(),
                label: permit_holder_label(h),
                metadata: metadata_text(h.metadata.as_ref()),
                count: h.permits,
                read: 0,
                write: 0,
                acquired_at: when(h.acquired_at, now_ms()),
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
        }
    }
}

#[derive(Template)]
#[template(path = "events.html")]
pub struct EventsPage {
    pub nav: Nav,
    pub prefix: String,
    pub events_url: String,
}

#[derive(Template)]
#[template(path = "login.html")]
pub struct LoginPage {
    pub nav: Nav,
    pub next: String,
    pub error: Option<String>,
}

#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    pub nav: Nav,
    pub status: u16,
    pub title: String,
    pub detail: String,
}

fn holder_label(h: &HolderView) -> String {
    match (&h.holder, &h.lease_id) {
        (Some(label), _) => label.clone(),
        (None, Some(id)) => format!("lease {id}"),
        (None, None) => format!("Redisson client {}", h.holder_id),
    }
}

fn permit_holder_label(h: &PermitHolderView) -> String {
    match (&h.holder, &h.lease_id) {
        (Some(label), _) => label.clone(),
        (None, Some(id)) => format!("lease {id}"),
        (None, None) => "unknown".into(),
    }
}

fn lease_text(h: &HolderView) -> String {
    h.lease_id
        .map_or_else(|| h.holder_id.clone(), |id| id.to_string())
}

fn metadata_text(metadata: Option<&Metadata>) -> String {
    metadata.map(Metadata::to_json).unwrap_or_default()
}

fn join_or_dash(items: impl Iterator<Item = String>) -> String {
    let joined = items.collect::<Vec<_>>().join(", ");
    if joined.is_empty() {
        "—".into()
    } else {
        joined
    }
}

fn time_text(at: Option<Timestamp>) -> String {
    at.map_or_else(|| "—".into(), Timestamp::rfc3339)
}

/// Milliseconds left as people read them: "850 ms", "12.3 s", "4 min 10 s", "2 h 5 min".
pub fn ttl_text(ms: Option<u64>) -> String {
    let Some(ms) = ms else {
        return "—".into();
    };
    let s = ms / 1000;
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{}.{} s", s, (ms % 1000) / 100),
        60_000..3_600_000 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

/// Time left on the semaphore's permit that runs out last.
fn sem_remaining(sem: &SemaphoreView) -> Option<u64> {
    sem.holders
        .iter()
        .filter_map(|h| h.expires_at)
        .max()
        .map(remaining_until)
}

fn remaining_until(at: Timestamp) -> u64 {
    at.0.saturating_sub(now_ms())
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_read_like_people_write_them() {
        assert_eq!(ttl_text(None), "—");
        assert_eq!(ttl_text(Some(850)), "850 ms");
        assert_eq!(ttl_text(Some(12_345)), "12.3 s");
        assert_eq!(ttl_text(Some(250_000)), "4 min 10 s");
        assert_eq!(ttl_text(Some(7_500_000)), "2 h 5 min");
    }
}
