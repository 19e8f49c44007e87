//! Leader election: `/v1/elections/{name}` and its candidates.

use serde::{Deserialize, Serialize};

use crate::LeaseId;

/// `POST /v1/elections/{name}/candidates`: a new candidate.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CampaignBody {
    /// What the candidate publishes while it leads (its address, ...), shown to every
    /// observer: text, at most 4096 bytes.
    #[cfg_attr(feature = "openapi", schema(max_length = 4096))]
    pub value: String,
    /// The term's (and the place in line's) TTL in ms: heartbeat before it runs out; the
    /// server default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Free-text label naming the candidate, as a lease's `holder`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 200))]
    pub holder: Option<String>,
    /// Lock-delay in ms: should this candidate's term end other than by a resignation (its
    /// TTL runs out, an admin ends it), nobody leads for that long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_delay_ms: Option<u64>,
}

/// `POST /v1/elections/{name}/candidates/{id}/heartbeat`'s query.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct HeartbeatQuery {
    /// The term the caller leads in. When it is no longer this candidate's (Redis lost the
    /// grant: a crash, a failover), the answer is 410 `lease_lost` and the candidate leaves
    /// the line, instead of leading in a new term the caller would take for the old one.
    /// Leaders send it; a candidate in line does not (its heartbeat may make it lead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term: Option<u64>,
}

/// `PUT /v1/elections/{name}/candidates/{id}/value`: the leader's new value.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ProclaimBody {
    /// Text, at most 4096 bytes.
    #[cfg_attr(feature = "openapi", schema(max_length = 4096))]
    pub value: String,
}

/// A candidate's standing: `term` once it leads (201, or 200 when asked again), `position`
/// while it waits in line (202).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CandidateBody {
    pub candidate_id: LeaseId,
    /// Proves the candidate: only in the answer that made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    pub election: String,
    /// While it leads: its term, a fencing token (only grows per election).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term: Option<u64>,
    /// While it leads: the value it published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// While it leads: its TTL, and when it runs out unless it heartbeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// While in line: 1 = next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u64>,
    /// While in line: it loses its place unless it heartbeats (or polls) before this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_by: Option<String>,
    /// While in line: who leads now (absent when nobody does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<LeaderBody>,
    /// While in line: how long until it leads, in ms, estimated from the election's recent
    /// terms: what the leader's term has left plus a typical term for each candidate ahead
    /// (absent with fewer than 3 ended terms to go by).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_wait_ms: Option<u64>,
    /// The server-side wait this request was allowed, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

/// The leader, as anyone may see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaderBody {
    pub candidate_id: Option<LeaseId>,
    pub term: u64,
    pub value: Option<String>,
    pub holder: Option<String>,
    pub since: Option<String>,
    pub expires_at: Option<String>,
}

/// `GET /v1/elections/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ElectionBody {
    pub election: String,
    /// `null` when nobody leads.
    pub leader: Option<LeaderBody>,
    /// The last term handed out (the leader's, while one leads); 0 before the first.
    pub term: u64,
    /// The first candidates in line, in order.
    pub candidates: Vec<InLineBody>,
    /// How many wait in line.
    pub candidates_waiting: u64,
}

/// A candidate in line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InLineBody {
    pub position: u64,
    pub candidate_id: Option<LeaseId>,
    pub holder: Option<String>,
    pub since: Option<String>,
}

/// `DELETE /v1/elections/{name}/candidates/{id}`: it resigned, or left the line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResignedBody {
    pub candidate_id: LeaseId,
    pub election: String,
    pub resigned: bool,
}

/// `POST /v1/elections/{name}/fence/check`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TermCheckBody {
    /// The term a writer presents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term: Option<u64>,
}

/// Whether a term is the current leader's.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TermCheckReply {
    pub election: String,
    pub term: u64,
    /// The term is the leader's now (the answer can be stale as soon as it is sent).
    pub current: bool,
    /// The last term handed out.
    pub last_term: u64,
}

/// `GET /v1/elections/{name}/observe`: one message per change, in order (`event: leader` or
/// `event: vacant`), with its journal id as `id:`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ObservedBody {
    pub term: u64,
    /// `leader` events: the leader's value, label and since when it leads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_id: Option<LeaseId>,
}
