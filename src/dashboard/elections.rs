//! `GET /elections`: the live elections (who leads, the term, the value, since when, how many
//! candidates wait), and `GET /elections/{name}`: one election's leader, its line of
//! candidates and its history of terms (from the election's terms log), with the admin's
//! end-of-term form ([`super::actions::end_term`]). An election runs on a lock of its own
//! (`election/<name>`); these pages show it as an election, and the lock pages never show it.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Redirect};
use serde::Deserialize;

use super::error::{PageError, PageResult, render};
use super::format::{time_text, when};
use super::lock::lock_name;
use super::viewer::{Nav, Viewer, viewer};
use crate::auth::Peer;
use crate::leases::election::listing::ListedElection;
use crate::leases::election::{ElectionName, ElectionView, InLine, Leader};
use crate::locks::feed::terms::TermEntry;
use crate::locks::wall_ms;
use crate::problem::ProblemKind;
use crate::state::AppState;

/// Elections the elections view lists (in name order).
const ELECTIONS_SHOWN: usize = 200;
/// Terms an election's page shows (newest first).
const TERMS_SHOWN: usize = 50;

/// One election in the elections view.
pub struct ElectionRow {
    pub name: String,
    pub href: String,
    /// The leader's holder label (or candidate id), `—` when nobody leads.
    pub leader: String,
    pub term: u64,
    pub value: String,
    pub since: String,
    pub waiting: u64,
}

impl ElectionRow {
    fn of(listed: &ListedElection, now_ms: u64) -> Self {
        let leader = listed.view.leader.as_ref();
        Self {
            name: listed.name.to_string(),
            href: format!("/elections/{}", listed.name),
            leader: leader.map_or_else(|| "—".to_owned(), leader_label),
            term: leader.map_or(listed.view.term, |l| l.term),
            value: leader
                .and_then(|l| l.value.clone())
                .unwrap_or_else(|| "—".to_owned()),
            since: when(leader.and_then(|l| l.since), now_ms),
            waiting: listed.view.candidates_waiting,
        }
    }
}

fn leader_label(leader: &Leader) -> String {
    match (&leader.holder, leader.candidate_id) {
        (Some(holder), _) => holder.clone(),
        (None, Some(id)) => format!("candidate {id}"),
        (None, None) => "—".to_owned(),
    }
}

#[derive(Template)]
#[template(path = "elections.html")]
pub struct ElectionsPage {
    pub nav: Nav,
    pub rows: Vec<ElectionRow>,
    /// More live elections than the page lists.
    pub more: bool,
    pub rendered_at: String,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct ElectionsQuery {
    /// Open this election's page (the form for an election the list does not show).
    name: Option<String>,
}

/// `GET /elections[?name=..]`: the live elections of the viewer's tenant, within its name
/// patterns (or a redirect to the named one's page).
pub(super) async fn elections_page(
    State(state): State<AppState>,
    Peer(peer): Peer,
    headers: HeaderMap,
    uri: Uri,
    Query(query): Query<ElectionsQuery>,
) -> PageResult {
    let Viewer { nav, principal } = match viewer(&state, &headers, &uri, peer).await {
        Ok(viewer) => viewer,
        Err(response) => return Ok(response),
    };
    if let Some(raw) = query
        .name
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        let name = lock_name(raw)?;
        return Ok(Redirect::to(&format!("/elections/{}", name.as_str())).into_response());
    }
    let now = wall_ms();
    let (rows, more) = if nav.redis_failing_over {
        (Vec::new(), false)
    } else {
        // As the overview: a page costs one request per name it may show.
        state.access.charge(
            &principal,
            u32::try_from(ELECTIONS_SHOWN).unwrap_or(u32::MAX),
        )?;
        let listed = state
            .leases_for(&principal)
            .elections(ELECTIONS_SHOWN, std::iter::empty())
            .await?;
        let rows = listed
            .elections
            .iter()
            .filter(|e| principal.patterns.allows(e.name.as_str()))
            .map(|e| ElectionRow::of(e, now))
            .collect();
        (rows, listed.more)
    };
    render(&ElectionsPage {
        nav,
        rows,
        more,
        rendered_at: crate::locks::Timestamp(now).rfc3339(),
    })
}

/// The leader on an election's page.
pub struct LeaderRow {
    pub candidate_id: String,
    pub holder: String,
    pub term: u64,
    pub value: String,
    pub since: String,
    pub expires: String,
}

/// A candidate in line on an election's page.
pub struct CandidateRow {
    pub position: u64,
    pub candidate_id: String,
    pub holder: String,
    pub since: String,
}

/// A term (or a new value in one) on an election's page.
pub struct TermRow {
    pub term: u64,
    pub value: String,
    pub holder: String,
    pub candidate_id: String,
    pub since: String,
    /// `new term`, or `proclaimed` (a new value in the same term).
    pub what: &'static str,
}

fn text(value: Option<&str>) -> String {
    value.map_or_else(|| "—".to_owned(), str::to_owned)
}

fn id_text(id: Option<crate::locks::LeaseId>) -> String {
    id.map_or_else(|| "—".to_owned(), |id| id.to_string())
}

impl LeaderRow {
    fn of(leader: &Leader, now_ms: u64) -> Self {
        Self {
            candidate_id: id_text(leader.candidate_id),
            holder: text(leader.holder.as_deref()),
            term: leader.term,
            value: text(leader.value.as_deref()),
            since: when(leader.since, now_ms),
            expires: time_text(leader.expires_at),
        }
    }
}

impl CandidateRow {
    fn of(c: &InLine, now_ms: u64) -> Self {
        Self {
            position: c.position,
            candidate_id: id_text(c.candidate_id),
            holder: text(c.holder.as_deref()),
            since: when(c.since, now_ms),
        }
    }
}

impl TermRow {
    fn of(t: &TermEntry, now_ms: u64) -> Self {
        Self {
            term: t.term,
            value: text(t.value.as_deref()),
            holder: text(t.holder.as_deref()),
            candidate_id: id_text(t.candidate_id),
            since: when(Some(t.since), now_ms),
            what: if t.proclaimed {
                "proclaimed"
            } else {
                "new term"
            },
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct ElectionQuery {
    /// After the admin's end of a term: how many leaders it removed.
    ended: Option<u32>,
}

#[derive(Template)]
#[template(path = "election.html")]
pub struct ElectionPage {
    pub nav: Nav,
    pub name: String,
    pub self_href: String,
    pub end_term_href: String,
    /// The observe stream the page refreshes itself on.
    pub events_url: String,
    pub reason_chars: usize,
    pub flash: Option<String>,
    pub leader: Option<LeaderRow>,
    /// The last term handed out.
    pub term: u64,
    pub candidates: Vec<CandidateRow>,
    pub candidates_waiting: u64,
    /// Candidates in line beyond those listed.
    pub candidates_more: u64,
    pub terms: Vec<TermRow>,
}

/// `GET /elections/{name}`: the leader, the line and the terms of one election.
pub(super) async fn election_page(
    State(state): State<AppState>,
    Peer(peer): Peer,
    headers: HeaderMap,
    uri: Uri,
    Path(raw): Path<String>,
    Query(query): Query<ElectionQuery>,
) -> PageResult {
    let Viewer { nav, principal } = match viewer(&state, &headers, &uri, peer).await {
        Ok(viewer) => viewer,
        Err(response) => return Ok(response),
    };
    let name = lock_name(&raw)?;
    principal.check_name(&name)?;
    let name = ElectionName::new(name);
    let leases = state.leases_for(&principal);
    let view: ElectionView = leases.election(&name).await?;
    let terms = leases.term_history(&name, TERMS_SHOWN).await?;
    if view.leader.is_none() && view.candidates_waiting == 0 && terms.is_empty() {
        return Err(PageError::new(
            ProblemKind::NotFound,
            format!(
                "no election named {name}: nobody leads, nobody waits, and no term is recorded"
            ),
        ));
    }
    let now = wall_ms();
    render(&ElectionPage {
        nav,
        self_href: format!("/elections/{name}"),
        end_term_href: format!("/elections/{name}/end-term"),
        events_url: format!("/v1/elections/{name}/observe"),
        reason_chars: state.limits.per_lock.reason_chars,
        flash: query.ended.map(|n| match n {
            0 => "End of term done: nobody led.".to_owned(),
            _ => "The term ended: the next candidate in line leads with a higher term.".to_owned(),
        }),
        leader: view.leader.as_ref().map(|l| LeaderRow::of(l, now)),
        term: view.term,
        candidates: view
            .candidates
            .iter()
            .map(|c| CandidateRow::of(c, now))
            .collect(),
        candidates_waiting: view.candidates_waiting,
        candidates_more: view
            .candidates_waiting
            .saturating_sub(u64::try_from(view.candidates.len()).unwrap_or(u64::MAX)),
        terms: terms.iter().map(|t| TermRow::of(t, now)).collect(),
        name: name.to_string(),
    })
}
