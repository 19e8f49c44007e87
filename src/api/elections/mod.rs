//! `/v1/elections/{name}`: leader election (`leases::election`). A campaign stands a
//! candidate (201 when it leads at once or within the wait, 202 with its place in line); the
//! candidate polls, heartbeats, watches and resigns with its bearer token ([`candidates`]);
//! anyone with the reader role reads the election, checks a term and observes its changes
//! ([`reads`], [`observe`]); an admin ends a term.

pub(super) mod candidates;
pub(super) mod observe;
pub(super) mod reads;

use std::time::Duration;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::bodies::{self, WAIT_HEADER};
use crate::leases::election::{ElectionName, ElectionView, Leader, Standing};
use crate::locks::Timestamp;
use crate::wire::{CandidateBody, ElectionBody, InLineBody, LeaderBody};

/// How long a candidate in line may still wait ("why am I waiting?"): behind the leader's
/// term so far, with `position - 1` candidates ahead; none for a leader.
async fn in_line_estimate(
    locks: &crate::locks::Locks,
    name: &ElectionName,
    standing: &Standing,
    leader: Option<&Leader>,
) -> Option<Duration> {
    let Standing::InLine { position, .. } = standing else {
        return None;
    };
    let term = leader
        .and_then(|l| l.since)
        .map(|since| Duration::from_millis(locks.redis_now_ms().saturating_sub(since.0)));
    locks
        .estimated_wait(&name.lock(), term, position.saturating_sub(1))
        .await
}

fn candidate_path(name: &ElectionName, id: crate::locks::LeaseId) -> String {
    format!("/v1/elections/{name}/candidates/{id}")
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn stamp(t: Option<Timestamp>) -> Option<String> {
    t.map(|t| t.rfc3339())
}

pub(super) fn leader_body(leader: Leader) -> LeaderBody {
    LeaderBody {
        candidate_id: leader.candidate_id.map(bodies::lease_id),
        term: leader.term,
        value: leader.value,
        holder: leader.holder,
        since: stamp(leader.since),
        expires_at: stamp(leader.expires_at),
    }
}

fn election_body(name: &ElectionName, view: ElectionView) -> ElectionBody {
    ElectionBody {
        election: name.to_string(),
        leader: view.leader.map(leader_body),
        term: view.term,
        candidates: view
            .candidates
            .into_iter()
            .map(|c| InLineBody {
                position: c.position,
                candidate_id: c.candidate_id.map(bodies::lease_id),
                holder: c.holder,
                since: stamp(c.since),
            })
            .collect(),
        candidates_waiting: view.candidates_waiting,
    }
}

/// 201 (a new leader), 200 (it leads, asked again) or 202 (in line, with who leads), with the
/// candidate's `Location`.
fn standing_response(
    name: &ElectionName,
    standing: Standing,
    value: Option<String>,
    (leader, estimate): (Option<Leader>, Option<Duration>),
    wait: Option<Duration>,
) -> Response {
    let mut replayed = false;
    let (status, id, body) = match standing {
        Standing::Leads {
            candidate_id,
            token,
            term,
            ttl_ms,
            expires_at,
            again,
        } => {
            // The answer that made the candidate (or a retry of it with its Idempotency-Key,
            // `again`) carries its token: 201. A poll or heartbeat of a leader: 200.
            let status = if token.is_some() {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            replayed = again && token.is_some();
            let body = CandidateBody {
                candidate_id: bodies::lease_id(candidate_id),
                token: token.map(|t| t.expose().to_owned()),
                election: name.to_string(),
                term: Some(term),
                value,
                ttl_ms: Some(ttl_ms),
                expires_at: Some(expires_at.rfc3339()),
                position: None,
                keep_by: None,
                leader: None,
                wait_ms: wait.map(millis),
                estimated_wait_ms: None,
            };
            (status, candidate_id, body)
        }
        Standing::InLine {
            candidate_id,
            token,
            position,
            keep_by,
        } => {
            let body = CandidateBody {
                candidate_id: bodies::lease_id(candidate_id),
                token: token.map(|t| t.expose().to_owned()),
                election: name.to_string(),
                term: None,
                value: None,
                ttl_ms: None,
                expires_at: None,
                position: Some(position),
                keep_by: Some(keep_by.rfc3339()),
                leader: leader.map(leader_body),
                wait_ms: wait.map(millis),
                estimated_wait_ms: estimate.map(millis),
            };
            (StatusCode::ACCEPTED, candidate_id, body)
        }
    };
    let mut response = (status, Json(body)).into_response();
    let headers = response.headers_mut();
    if let Ok(location) = HeaderValue::from_str(&candidate_path(name, id)) {
        headers.insert(header::LOCATION, location);
    }
    if let Some(wait) = wait {
        headers.insert(WAIT_HEADER, HeaderValue::from(millis(wait)));
    }
    if replayed {
        headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    response
}
