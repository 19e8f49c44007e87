//! `GET /`: one page of live locks and semaphores, with who holds them, for how long, how
//! many wait; sortable, with long holds and near expiries highlighted.

use askama::Template;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Uri};
use serde::Deserialize;

use super::PAGE_SIZE;
use super::error::{PageError, PageResult, render};
use super::format::{
    holder_in_overview, join_or_dash, permit_holder_label, remaining_until, ttl_text,
};
use super::viewer::{Nav, Viewer, viewer};
use crate::auth::Peer;
use crate::locks::{
    HeldAs, ListCursor, LiveEntry, NamePrefix, RwMode, SemaphoreView, held_for, wall_ms,
};
use crate::problem::ProblemKind;
use crate::state::AppState;

#[derive(Debug, Default, Deserialize)]
pub(super) struct OverviewQuery {
    prefix: Option<String>,
    cursor: Option<String>,
    sort: Option<String>,
}

/// `GET /`: one page of live locks and semaphores.
pub(super) async fn overview(
    State(state): State<AppState>,
    Peer(peer): Peer,
    headers: HeaderMap,
    uri: Uri,
    Query(query): Query<OverviewQuery>,
) -> PageResult {
    let Viewer { nav, principal } = match viewer(&state, &headers, &uri, peer).await {
        Ok(viewer) => viewer,
        Err(response) => return Ok(response),
    };
    let prefix = parse_prefix(query.prefix.as_deref())?;
    let cursor = ListCursor::parse(query.cursor.as_deref().unwrap_or("")).map_err(|_| {
        PageError::new(
            ProblemKind::InvalidQuery,
            "cursor must be the name a page's Next link carries",
        )
    })?;
    let leases = state.leases_for(&principal);
    let first_page = cursor.is_first();
    let p = prefix.as_str();
    // A Sentinel failover in progress: no master to read the locks from. The page says so
    // (the banner) instead of failing; it fills again once the Sentinels name one.
    if nav.redis_failing_over {
        return render(&OverviewPage {
            nav,
            prefix: p.to_owned(),
            sort: Sort::parse(query.sort.as_deref()).as_str(),
            rows: Vec::new(),
            events_url: format!("/v1/events?prefix={p}"),
            next_href: None,
            first_href: format!("/?prefix={p}"),
            first_page,
            rendered_at: crate::locks::Timestamp(wall_ms()).rfc3339(),
        });
    }
    // As `GET /v1/locks`: a page costs one request per name it may show.
    state
        .access
        .charge(&principal, u32::try_from(PAGE_SIZE).unwrap_or(u32::MAX))?;
    let page = leases.live(&prefix, cursor, PAGE_SIZE).await?;
    let entries: Vec<_> = page
        .entries
        .into_iter()
        .filter(|e| principal.patterns.allows(e.name().as_str()))
        .map(|e| e.seen_by(&|name| principal.patterns.allows(name)))
        .collect();
    let names: Vec<_> = entries.iter().map(|e| e.name()).collect();
    let waiting = leases.locks().waiting_counts(&names).await?;
    let sort = Sort::parse(query.sort.as_deref());
    render(&OverviewPage {
        nav,
        prefix: p.to_owned(),
        sort: sort.as_str(),
        rows: overview_rows(&entries, &waiting, sort, wall_ms()),
        events_url: format!("/v1/events?prefix={p}"),
        next_href: page
            .next_cursor
            .map(|c| format!("/?prefix={p}&cursor={}", c.as_str())),
        first_href: format!("/?prefix={p}"),
        first_page,
        rendered_at: crate::locks::Timestamp(wall_ms()).rfc3339(),
    })
}

pub(super) fn parse_prefix(raw: Option<&str>) -> Result<NamePrefix, PageError> {
    NamePrefix::parse(raw.unwrap_or("").trim())
        .map_err(|e| PageError::new(ProblemKind::InvalidQuery, e.to_string()))
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
    /// How long the oldest current hold has lasted (see `overview_rows`).
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
                holders: join_or_dash(
                    lock.holders
                        .iter()
                        .map(|h| holder_in_overview(h, lock.lock.as_str())),
                ),
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

/// Time left on the semaphore's permit that runs out last.
fn sem_remaining(sem: &SemaphoreView) -> Option<u64> {
    sem.holders
        .iter()
        .filter_map(|h| h.expires_at)
        .max()
        .map(remaining_until)
}

/// A hold longer than this is highlighted on the overview.
const LONG_HOLD_MS: u64 = 10 * 60 * 1000;

/// A lease with less than this left is highlighted as about to expire.
const NEAR_EXPIRY_MS: u64 = 5_000;

/// How the overview's rows are ordered (within the page: pages follow Redis's SCAN order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, strum::IntoStaticStr, strum::EnumString)]
#[strum(serialize_all = "snake_case")]
pub enum Sort {
    #[default]
    Name,
    /// Longest held first.
    #[strum(serialize = "held")]
    HeldFor,
    /// Most waiters first.
    WaitRegistry,
}

impl Sort {
    pub fn parse(raw: Option<&str>) -> Self {
        raw.and_then(|raw| raw.parse().ok()).unwrap_or_default()
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// The overview's rows for `entries`, with `waiting[i]` requests waiting for entry `i`
/// besides its fair queue, ordered by `sort`.
fn overview_rows(
    entries: &[LiveEntry],
    waiting: &[u64],
    sort: Sort,
    now_ms: u64,
) -> Vec<OverviewRow> {
    let mut rows: Vec<OverviewRow> = entries
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let mut row = OverviewRow::from_entry(entry);
            row.waiters += waiting.get(i).copied().unwrap_or(0);
            let since = entry.held_since();
            row.held_for_ms = held_for(since, now_ms).unwrap_or(0);
            row.held_for =
                held_for(since, now_ms).map_or_else(|| "—".into(), |ms| ttl_text(Some(ms)));
            row.held_since = since.map(|t| t.rfc3339()).unwrap_or_default();
            row.long_hold = row.held_for_ms >= LONG_HOLD_MS;
            row.near_expiry = row.remaining_ms.is_some_and(|ms| ms < NEAR_EXPIRY_MS);
            row
        })
        .collect();
    match sort {
        Sort::Name => {}
        Sort::HeldFor => rows.sort_by_key(|r| std::cmp::Reverse(r.held_for_ms)),
        Sort::WaitRegistry => rows.sort_by_key(|r| std::cmp::Reverse(r.waiters)),
    }
    rows
}
