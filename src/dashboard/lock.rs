//! `GET /locks/{name}`: a lock's (or semaphore's) holders, fair queue, waiting requests,
//! timeline and history, with the admin's force-release and evict forms.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Uri};
use serde::Deserialize;

use super::error::{PageError, PageResult, render};
use super::format::when;
use super::history::HistoryRow;
use super::lock_state::{HolderRow, LockState, QueueRow, SemaphoreFacts};
use super::timeline::{self, Timeline};
use super::viewer::{Nav, Viewer, viewer};
use crate::auth::Peer;
use crate::locks::{self, HISTORY_SHOWN, HeldAs, LockName, WaiterView, wall_ms};
use crate::problem::ProblemKind;
use crate::state::AppState;

pub(super) fn lock_name(raw: &str) -> Result<LockName, PageError> {
    LockName::parse(raw).map_err(|e| PageError::new(ProblemKind::NotFound, e.to_string()))
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct LockQuery {
    released: Option<u32>,
    evicted: Option<String>,
    revoked: Option<u32>,
    /// The timeline's window: 1h, 15m, 5m, 1m (by default the shortest showing what happened).
    window: Option<String>,
}

/// `GET /locks/{name}`: a lock's (or semaphore's) holders, queue and history.
pub(super) async fn lock_page(
    State(state): State<AppState>,
    Peer(peer): Peer,
    headers: HeaderMap,
    uri: Uri,
    Path(raw): Path<String>,
    Query(query): Query<LockQuery>,
) -> PageResult {
    let Viewer { nav, principal } = match viewer(&state, &headers, &uri, peer).await {
        Ok(viewer) => viewer,
        Err(response) => return Ok(response),
    };
    let name = lock_name(&raw)?;
    principal.check_name(&name)?;
    let leases = state.leases_for(&principal);
    let domain = leases.locks();
    let lock = leases
        .lock(&name)
        .await?
        .map(|view| view.seen_by(&|lock| principal.patterns.allows(lock)));
    // The history records holds and waits when they end; those going on come from the view.
    let (lock_state, ongoing) = match &lock {
        Some(view) if !view.kind.is_some_and(HeldAs::is_semaphore) => {
            (Some(LockState::of_lock(view)), locks::ongoing(view))
        }
        _ => match domain.semaphore(&name).await? {
            Some(s) => (
                Some(LockState::of_semaphore(&s)),
                locks::ongoing_permits(&s),
            ),
            None => (None, Vec::new()),
        },
    };
    let history = locks::merged(
        leases.history(&name, HISTORY_SHOWN).await?,
        ongoing,
        HISTORY_SHOWN,
    );
    // RedLock: each node's state of the name (see `super::redlock`).
    let redlock_nodes = super::redlock::rows(leases.redlock().cloned(), &name).await;
    let on_redlock = redlock_nodes.iter().any(|n| n.state == "held");
    let lock_state = match (lock_state, lock) {
        (Some(s), _) => s,
        (None, Some(view)) => LockState::of_lock(&view),
        (None, None) if !history.is_empty() || on_redlock => LockState::free(),
        (None, None) => {
            return Err(PageError::new(
                ProblemKind::LockNotFound,
                format!("nothing named {name} was ever held"),
            ));
        }
    };
    let (waiting, waiting_count) = domain.waiters_of(&name).await?;
    let now = wall_ms();
    let mut lock_state = lock_state;
    show_revocations(
        &mut lock_state.holders,
        &domain.revocations_of(&name).await?,
        now,
    );
    let held_since = lock_state.held_since;
    let estimated_wait = estimated_wait(domain, &name, &lock_state, now).await;
    let n = name.as_str();
    render(&LockPage {
        timeline: timeline::timeline(
            &history,
            &waiting,
            now,
            timeline::window(query.window.as_deref(), &history, &waiting, now),
        ),
        waiting: waiting.iter().map(|w| WaiterRow::of(w, now)).collect(),
        waiting_count,
        held_since: when(held_since, now),
        estimated_wait,
        nav,
        name: n.to_owned(),
        self_href: format!("/locks/{n}"),
        force_release_href: format!("/locks/{n}/force-release"),
        revoke_href: format!("/locks/{n}/revoke"),
        reason_chars: state.limits.per_lock.reason_chars,
        events_url: format!("/v1/events?prefix={n}"),
        flash: flash(&query),
        kind: lock_state.kind,
        mode: lock_state.mode,
        semaphore: lock_state.semaphore,
        ttl: lock_state.ttl,
        fence: lock_state.fence,
        queue_length: lock_state.queue_length,
        queue_more: lock_state.queue_more,
        write_holder: lock_state.write_holder,
        read_holders: lock_state.read_holders,
        holders: lock_state.holders,
        queue: lock_state.queue,
        lock_delay: lock_state.lock_delay,
        delayed_until: lock_state.delayed_until,
        history: history.iter().map(HistoryRow::from_event).collect(),
        redlock_nodes,
    })
}

/// What the page says a request asking now would wait: behind the current hold and the
/// fair queue (a lock's only: a semaphore's permits are not held in turn).
async fn estimated_wait(
    locks: &crate::locks::Locks,
    name: &crate::locks::LockName,
    state: &LockState,
    now: u64,
) -> Option<String> {
    let since = state.held_since.filter(|_| state.semaphore.is_none())?;
    let age = std::time::Duration::from_millis(now.saturating_sub(since.0));
    let wait = locks
        .estimated_wait(name, Some(age), state.queue_length)
        .await?;
    let behind = match state.queue_length {
        0 => String::new(),
        n => format!(", behind {n} in the fair queue"),
    };
    Some(format!(
        "about {} (from its recent holds{behind})",
        super::format::span(wait)
    ))
}

#[derive(Template)]
#[template(path = "lock.html")]
pub struct LockPage {
    pub nav: Nav,
    pub name: String,
    pub self_href: String,
    pub force_release_href: String,
    /// The "ask to release" form's target (a revocation).
    pub revoke_href: String,
    /// The longest reason the forms take (`--max-reason-chars`).
    pub reason_chars: usize,
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
    /// The lock-delay its holders asked for (see `LockState`).
    pub lock_delay: Option<String>,
    /// Free but in its lock-delay: until when.
    pub delayed_until: Option<String>,
    pub history: Vec<HistoryRow>,
    /// Requests waiting on any instance besides the fair queue, oldest first.
    pub waiting: Vec<WaiterRow>,
    pub waiting_count: u64,
    /// When the oldest current hold began, and how long ago.
    pub held_since: String,
    /// How long a request asking now would wait, from the name's recent holds ("why am I
    /// waiting?", as a 409 or 202 says it); none while free or with too few holds to go by.
    pub estimated_wait: Option<String>,
    pub timeline: Timeline,
    /// With `--redlock-nodes`: the name on each RedLock node (a RedLock lock lives there,
    /// not in the main Redis the rest of the page shows).
    pub redlock_nodes: Vec<super::redlock::NodeRow>,
}

impl LockPage {
    /// Whether a holder is a lease an admin may evict (the evict form's choices).
    pub fn any_evictable(&self) -> bool {
        self.holders.iter().any(|h| h.evictable)
    }
}

/// One waiting request on the lock page.
pub struct WaiterRow {
    pub label: String,
    pub lease_id: String,
    pub wants: String,
    pub since: String,
    pub instance: String,
}

impl WaiterRow {
    pub fn of(w: &WaiterView, now_ms: u64) -> Self {
        let wants = match (w.kind.as_deref(), w.permits) {
            (_, Some(1)) => "1 permit".to_owned(),
            (_, Some(n)) => format!("{n} permits"),
            (Some(kind), None) => kind.to_owned(),
            (None, None) => "reentry".to_owned(),
        };
        Self {
            label: w.label(),
            lease_id: w.lease_id.clone(),
            wants,
            since: when(Some(w.since()), now_ms),
            instance: w.instance.clone(),
        }
    }
}

/// The lock page's message after an eviction (the lease id, checked: the query is anyone's).
fn evicted_flash(evicted: Option<&str>) -> Option<String> {
    let id = crate::locks::LeaseId::parse(evicted?)?;
    Some(format!(
        "Evicted lease {id}; the other holders keep theirs."
    ))
}

/// Marks the holders an operator asked to let go: by when (and how long from now), why.
fn show_revocations(
    holders: &mut [super::lock_state::HolderRow],
    revocations: &std::collections::HashMap<crate::locks::LeaseId, crate::locks::Revocation>,
    now: u64,
) {
    for row in holders {
        let Some(r) =
            crate::locks::LeaseId::parse(&row.lease_id).and_then(|id| revocations.get(&id))
        else {
            continue;
        };
        let why = if r.reason.is_empty() {
            String::new()
        } else {
            format!(": {}", r.reason)
        };
        let left = r.deadline.0.saturating_sub(now) / 1000;
        let deadline = r.deadline.rfc3339();
        row.revocation = Some(if left > 0 {
            format!("asked to release by {deadline} (in {left} s){why}")
        } else {
            format!("asked to release by {deadline} (passed){why}")
        });
    }
}

/// What the page says of the admin action that led to it (its redirect's query).
fn flash(query: &LockQuery) -> Option<String> {
    query
        .released
        .map(|count| match count {
            0 => "Force release done: nobody held it.".to_owned(),
            1 => "Force-released: removed 1 holder.".to_owned(),
            n => format!("Force-released: removed {n} holders."),
        })
        .or_else(|| evicted_flash(query.evicted.as_deref()))
        .or_else(|| revoked_flash(query.revoked))
}

fn revoked_flash(revoked: Option<u32>) -> Option<String> {
    Some(match revoked? {
        1 => "Asked the holder to release; its lease is force-released at the deadline.".to_owned(),
        n => format!(
            "Asked {n} holders to release; their leases are force-released at the deadline."
        ),
    })
}
