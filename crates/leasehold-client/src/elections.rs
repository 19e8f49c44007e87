//! Leader election (`/v1/elections/{name}`): the typed calls of a candidate (stand, poll,
//! proclaim; its heartbeat, watch and resignation are a lease's, on [`Resource::Election`])
//! and of anyone who looks (the election, the leader, a term's check) or ends a term (admin).
//! A candidate that leads is a [`Lease`] whose fencing token is its term, so `Client::keep`
//! keeps it as it keeps any lease (`term`: [`crate::Term`]).

use std::time::{Duration, Instant};

use reqwest::StatusCode;

use crate::connection::millis;
use crate::{
    CampaignBody, CandidateBody, Client, ClientError, ElectionBody, ForceReleaseBody, GrantBody,
    KeepOptions, LeaderBody, Lease, LeaseId, LeaseToken, OnInLine, ProclaimBody, ReleaseBody,
    RenewalBody, Reply, ResignedBody, Resource, TermCheckBody, TermCheckReply,
};

/// What a campaign asks for; `None` leaves the choice to the server.
#[derive(Debug, Clone, Default)]
pub struct CampaignOptions {
    /// What the candidate publishes while it leads (its address, ...): text, at most 4096
    /// bytes (422 `invalid_body` beyond).
    pub value: String,
    /// The term's TTL, and the place in line's: heartbeats and polls come every third of it.
    pub ttl: Option<Duration>,
    /// A label for people, as a lease's.
    pub holder: Option<String>,
    /// Should the term end other than by a resignation, nobody leads for this long.
    pub lock_delay: Option<Duration>,
    /// [`Client::stand`]: how long the server waits for the lead before answering 202.
    /// [`Client::campaign`]: how long to wait in line in all (`None`: until it leads).
    pub wait: Option<Duration>,
    /// How the term is kept once it leads ([`Client::campaign`]).
    pub keep: KeepOptions,
    /// [`Client::campaign`]: told where the candidate stands at each answer in line (its
    /// position, the leader now, the estimated wait), never after the term is granted.
    /// [`stand`](Client::stand) and [`poll_candidate`](Client::poll_candidate) answer it
    /// themselves (`InLine::from(&waiting.candidate)`), and ignore this.
    pub on_in_line: Option<OnInLine>,
}

/// A candidate in line (202): its place, who leads, and the token that proves it.
#[derive(Debug, Clone)]
pub struct Waiting {
    pub candidate: CandidateBody,
    pub token: LeaseToken,
}

impl Waiting {
    pub fn id(&self) -> LeaseId {
        self.candidate.candidate_id
    }
}

/// A candidate's standing: it leads (a lease on [`Resource::Election`] whose fencing token
/// is the term), or waits in line.
#[derive(Debug, Clone)]
pub enum Standing {
    Leads(Lease),
    InLine(Waiting),
}

impl CampaignOptions {
    /// How long one poll of a place in line may wait server-side: each poll keeps the place,
    /// so one comes at least every third of the TTL (of the server's usual 30 s default when
    /// the TTL is left to the server).
    pub fn poll_wait(&self) -> Duration {
        self.ttl.unwrap_or(Duration::from_secs(30)) / 3
    }
}

impl Client {
    /// `POST /v1/elections/{name}/candidates?wait_ms=N`: stands a candidate, once. It leads
    /// ([`Standing::Leads`], 201), or, when someone else still leads after `options.wait`,
    /// keeps its place in line ([`Standing::InLine`], 202) while it polls or heartbeats.
    /// It carries a fresh `Idempotency-Key`; [`Client::campaign`] sends its retries with one
    /// key, so a lost answer never stands a second candidate.
    pub async fn stand(
        &self,
        name: &str,
        options: &CampaignOptions,
    ) -> Result<Reply<Standing>, ClientError> {
        self.stand_keyed(name, options, &campaign_key()).await
    }

    /// [`stand`](Self::stand) with the `Idempotency-Key` of a campaign call (every retry of
    /// it gets the first answer: the same candidate).
    pub(crate) async fn stand_keyed(
        &self,
        name: &str,
        options: &CampaignOptions,
        key: &str,
    ) -> Result<Reply<Standing>, ClientError> {
        let wait = options.wait.unwrap_or(Duration::ZERO);
        let mut url = self.endpoint(&["v1", "elections", name, "candidates"])?;
        url.query_pairs_mut()
            .append_pair("wait_ms", &millis(wait).to_string());
        let body = CampaignBody {
            value: options.value.clone(),
            ttl_ms: options.ttl.map(millis),
            holder: options.holder.clone(),
            lock_delay_ms: options.lock_delay.map(millis),
        };
        let request = self
            .request(reqwest::Method::POST, url)
            .header("idempotency-key", key)
            .json(&body)
            .timeout(self.timeout.saturating_add(wait));
        let sent_at = Instant::now();
        standing(Self::send(request).await?, name, None, sent_at)
    }

    /// `GET /v1/elections/{name}/candidates/{id}?wait_ms=N`: the candidate's term once it
    /// leads (again, if it did already), else its place in line, kept by this poll. 410 once
    /// it is out.
    pub async fn poll_candidate(
        &self,
        name: &str,
        id: LeaseId,
        token: &LeaseToken,
        wait: Duration,
    ) -> Result<Reply<Standing>, ClientError> {
        let id = id.to_string();
        let mut url = self.endpoint(&Resource::Election.lease_path(name, &id))?;
        url.query_pairs_mut()
            .append_pair("wait_ms", &millis(wait).to_string());
        let request = self
            .request(reqwest::Method::GET, url)
            .bearer_auth(token.expose())
            .timeout(self.timeout.saturating_add(wait));
        let sent_at = Instant::now();
        standing(Self::send(request).await?, name, Some(token), sent_at)
    }

    /// `DELETE /v1/elections/{name}/candidates/{id}`: resigns (the next candidate leads at
    /// once) or leaves the line. 410 when it was out already.
    pub async fn resign(
        &self,
        name: &str,
        id: LeaseId,
        token: &LeaseToken,
    ) -> Result<Reply<ResignedBody>, ClientError> {
        let id = id.to_string();
        let url = self.endpoint(&Resource::Election.lease_path(name, &id))?;
        Self::send(
            self.request(reqwest::Method::DELETE, url)
                .bearer_auth(token.expose())
                .timeout(self.timeout),
        )
        .await
    }

    /// `PUT /v1/elections/{name}/candidates/{id}/value`: the leader publishes `value` in its
    /// term (observers get it). 409 `ticket_pending` for a candidate in line, 410 once its
    /// term ended, 422 `invalid_body` for a value over 4096 bytes.
    pub async fn proclaim(
        &self,
        name: &str,
        id: LeaseId,
        token: &LeaseToken,
        value: &str,
    ) -> Result<Reply<CandidateBody>, ClientError> {
        let id = id.to_string();
        let mut path = Resource::Election.lease_path(name, &id);
        path.push("value");
        let url = self.endpoint(&path)?;
        let body = ProclaimBody {
            value: value.to_owned(),
        };
        Self::send(
            self.request(reqwest::Method::PUT, url)
                .bearer_auth(token.expose())
                .json(&body)
                .timeout(self.timeout),
        )
        .await
    }

    /// `GET /v1/elections/{name}`: the leader (`None` when nobody leads), the last term, and
    /// the line.
    pub async fn election(&self, name: &str) -> Result<Reply<ElectionBody>, ClientError> {
        let url = self.endpoint(&["v1", "elections", name])?;
        Self::send(
            self.request(reqwest::Method::GET, url)
                .timeout(self.timeout),
        )
        .await
    }

    /// The leader of election `name` now, if anyone leads ([`election`](Self::election)).
    pub async fn leader(&self, name: &str) -> Result<Option<LeaderBody>, ClientError> {
        Ok(self.election(name).await?.body.leader)
    }

    /// `POST /v1/elections/{name}/fence/check`: whether `term` is the current leader's (stale
    /// as soon as it is answered).
    pub async fn check_term(
        &self,
        name: &str,
        term: u64,
    ) -> Result<Reply<TermCheckReply>, ClientError> {
        let url = self.endpoint(&["v1", "elections", name, "fence", "check"])?;
        let body = TermCheckBody { term: Some(term) };
        Self::send(
            self.request(reqwest::Method::POST, url)
                .json(&body)
                .timeout(self.timeout),
        )
        .await
    }

    /// `DELETE /v1/admin/elections/{name}[?reason=..]` (admin): ends the current term; the
    /// next candidate leads with a higher term. Sent once, never retried: a retry could end
    /// the next leader's term.
    pub async fn end_term(
        &self,
        name: &str,
        reason: Option<&str>,
    ) -> Result<Reply<ForceReleaseBody>, ClientError> {
        let mut url = self.endpoint(&["v1", "admin", "elections", name])?;
        if let Some(reason) = reason {
            url.query_pairs_mut().append_pair("reason", reason);
        }
        Self::send(
            self.request(reqwest::Method::DELETE, url)
                .timeout(self.timeout),
        )
        .await
    }
}

/// A fresh `Idempotency-Key` for one campaign call: 128 random bits.
pub(crate) fn campaign_key() -> String {
    use std::hash::{BuildHasher as _, RandomState};
    let now = Instant::now();
    let (high, low) = (
        RandomState::new().hash_one(now),
        RandomState::new().hash_one(now),
    );
    format!("campaign.{high:016x}{low:016x}")
}

/// A candidate's answer as a [`Standing`]; `known` is the token the caller has already (a
/// poll's answer does not repeat it).
fn standing(
    reply: Reply<CandidateBody>,
    name: &str,
    known: Option<&LeaseToken>,
    sent_at: Instant,
) -> Result<Reply<Standing>, ClientError> {
    let candidate = reply.body;
    let token = candidate
        .token
        .as_deref()
        .and_then(|t| t.parse().ok())
        .or_else(|| known.cloned())
        .ok_or_else(|| unexpected("an answer without the candidate's token"))?;
    let body = match (
        candidate.term,
        candidate.ttl_ms,
        candidate.expires_at.clone(),
    ) {
        (Some(term), Some(ttl_ms), Some(expires_at)) => Standing::Leads(Lease {
            grant: GrantBody {
                lease_id: candidate.candidate_id,
                token: None,
                lock: name.to_owned(),
                kind: "election".to_owned(),
                holder: None,
                fencing_token: term,
                reentry_count: 1,
                permits: None,
                ttl_ms,
                expires_at,
                wait_ms: candidate.wait_ms,
                replicas_acked: None,
                degraded: None,
                nodes_acked: None,
                validity_ms: None,
            },
            token,
            members: Vec::new(),
            resource: Resource::Election,
            sent_at,
        }),
        _ => Standing::InLine(Waiting { candidate, token }),
    };
    Ok(Reply {
        body,
        json: reply.json,
    })
}

/// A leader's heartbeat answer as a lease's renewal (its term as the fencing token).
pub(crate) fn renewal(
    name: &str,
    reply: Reply<CandidateBody>,
) -> Result<Reply<RenewalBody>, ClientError> {
    let candidate = reply.body;
    let (Some(term), Some(ttl_ms), Some(expires_at)) =
        (candidate.term, candidate.ttl_ms, candidate.expires_at)
    else {
        return Err(unexpected("a heartbeat of a candidate that does not lead"));
    };
    Ok(Reply {
        body: RenewalBody {
            lease_id: candidate.candidate_id,
            lock: name.to_owned(),
            fencing_token: term,
            reentry_count: 1,
            ttl_ms,
            expires_at,
            replicas_acked: None,
            degraded: None,
            nodes_acked: None,
            validity_ms: None,
            revocation: None,
        },
        json: reply.json,
    })
}

/// A resignation's answer as a lease's release.
pub(crate) fn resigned(reply: Reply<ResignedBody>) -> Reply<ReleaseBody> {
    Reply {
        body: ReleaseBody {
            lease_id: reply.body.candidate_id,
            lock: reply.body.election,
            released: reply.body.resigned,
            reentry_count: 0,
        },
        json: reply.json,
    }
}

fn unexpected(what: &str) -> ClientError {
    ClientError::Unexpected {
        status: StatusCode::OK,
        excerpt: what.to_owned(),
    }
}
