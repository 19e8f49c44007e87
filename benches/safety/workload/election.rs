//! Elections: candidates that campaign (leading at once, or waiting in line), wait by polling
//! or heartbeating on time, late or never, vanish mid-wait, leave the line, proclaim new
//! values, write to the fenced resource with their term while they believe they lead, and
//! resign or stop heartbeating. Each candidate is recorded as a lease of the election's name
//! (its term as the fence), so the exclusion, fencing and liveness checkers read elections as
//! they read locks: two leaders at once is an overlap, a term that does not grow a fence
//! regression. The observers (see `observer.rs`) are apart.

use std::time::Duration;

use rand::RngExt as _;
use serde_json::json;

use super::{Answer, CLIENT_SLACK, Client, Held, outcome_of};
use crate::history::{Family, Op, Outcome, Request};

/// A campaign's or a poll's answer: 201/200 with a term (it leads), 202 (in line).
fn standing(answer: &Result<Answer, String>) -> Outcome {
    if let Ok(a) = answer {
        let b = &a.body;
        let id = || b["candidate_id"].as_str().unwrap_or("").to_owned();
        match a.status {
            200 | 201 if b.get("term").is_some() => {
                return Outcome::Granted {
                    status: a.status,
                    lease: id(),
                    fence: b["term"].as_u64().unwrap_or(0),
                    ttl_ms: b["ttl_ms"].as_u64().unwrap_or(0),
                    count: 1,
                    kind: "election".to_owned(),
                };
            }
            202 => return Outcome::Queued { ticket: id() },
            _ => {}
        }
    }
    outcome_of(answer)
}

/// A leader's heartbeat: 200 with its term. (A 202 would say it is only in line: refused.)
fn renewal(answer: &Result<Answer, String>) -> Outcome {
    if let Ok(a) = answer {
        match a.status {
            200 if a.body.get("term").is_some() => {
                return Outcome::Renewed {
                    ttl_ms: a.body["ttl_ms"].as_u64().unwrap_or(0),
                    fence: a.body["term"].as_u64().unwrap_or(0),
                };
            }
            202 => {
                return Outcome::Refused {
                    status: 202,
                    code: "in_line".to_owned(),
                };
            }
            _ => {}
        }
    }
    outcome_of(answer)
}

/// A leader's resignation: the lease let go.
fn resigned(answer: &Result<Answer, String>) -> Outcome {
    match answer {
        Ok(a) if a.status == 200 && a.body["resigned"] == true => Outcome::Released {
            released: true,
            count: 0,
        },
        _ => outcome_of(answer),
    }
}

/// A waiting candidate leaving the line.
fn left(answer: &Result<Answer, String>) -> Outcome {
    match answer {
        Ok(a) if a.status == 200 && a.body["resigned"] == true => Outcome::Left,
        _ => outcome_of(answer),
    }
}

fn proclaimed(answer: &Result<Answer, String>) -> Outcome {
    match answer {
        Ok(a) if a.status == 200 && a.body.get("term").is_some() => Outcome::Proclaimed {
            term: a.body["term"].as_u64().unwrap_or(0),
        },
        _ => outcome_of(answer),
    }
}

/// How a candidate keeps its place or its term.
#[derive(Clone, Copy, PartialEq)]
enum Beat {
    OnTime,
    Late,
    Never,
}

impl Client {
    pub(super) async fn election_session(&mut self, name: String) {
        let ttl_ms = self.rng.random_range(300..=1500);
        let wait_ms = if self.rng.random_bool(0.4) {
            0
        } else {
            self.rng.random_range(50..=1500)
        };
        let idem =
            (self.shared.plan.idempotency && self.rng.random_bool(0.3)).then(|| self.idem_key());
        let body = json!({
            "value": format!("c{}-s{}", self.id, self.sessions),
            "ttl_ms": ttl_ms,
            "holder": format!("c{}", self.id),
        });
        let request = Request::Acquire {
            kind: "election",
            ttl_ms: Some(ttl_ms),
            wait_ms,
            reentry_of: None,
            idempotency: idem.clone(),
            gave_up_ms: None,
        };
        let path = format!("/v1/elections/{name}/candidates?wait_ms={wait_ms}");
        let timeout = Duration::from_millis(wait_ms) + CLIENT_SLACK;
        let mut op = self
            .call_election(
                &name,
                reqwest::Method::POST,
                path.clone(),
                Some(body.clone()),
            )
            .idem(idem.as_deref())
            .send(self, timeout, request.clone(), standing)
            .await;
        let mut token = self.token_of_last();
        // The same campaign asked again with its key (as a client whose answer was lost
        // does): it answers the candidate's standing now, never a second candidate.
        if idem.is_some() && (op.outcome.uncertain() || self.rng.random_bool(0.3)) {
            let again = self
                .call_election(&name, reqwest::Method::POST, path, Some(body))
                .idem(idem.as_deref())
                .send(self, timeout, request, standing)
                .await;
            if op.outcome.uncertain() || matches!(again.outcome, Outcome::Granted { .. }) {
                token = self.token_of_last();
                op = again;
            }
        }
        match op.outcome {
            Outcome::Granted {
                lease,
                fence,
                ttl_ms,
                ..
            } => {
                let held = self.new_held(
                    &name,
                    Family::Election,
                    "election",
                    lease,
                    token,
                    fence,
                    ttl_ms,
                    op.send,
                );
                self.lead(held).await;
            }
            Outcome::Queued { ticket } => self.wait_in_line(name, ticket, token, ttl_ms).await,
            _ => {}
        }
    }

    /// In line: polls (with a wait) or heartbeats (a poll without one: both keep the place
    /// and answer the standing), on time, late or never (it vanishes: its place must go by
    /// itself), or leaves the line.
    async fn wait_in_line(&mut self, name: String, id: String, token: String, ttl_ms: u64) {
        let beat = match self.rng.random_range(0..20) {
            0..=1 => Beat::Never,
            2..=3 => Beat::Late,
            _ => Beat::OnTime,
        };
        if beat == Beat::Never {
            return;
        }
        let leave_after = self.rng.random_range(1..=12);
        for round in 0..20 {
            if !self.running() || round == leave_after {
                let path = format!("/v1/elections/{name}/candidates/{id}");
                let request = Request::Leave { ticket: id.clone() };
                let op = self
                    .call_election(&name, reqwest::Method::DELETE, path, None)
                    .token(&token)
                    .send(self, CLIENT_SLACK, request, left)
                    .await;
                // A poll still in flight when the candidate left (or sent after it, by a
                // client that lost track): it must answer 410, never the lead.
                if op.outcome == Outcome::Left && self.rng.random_bool(0.3) {
                    let wait_ms = self.rng.random_range(0..=800);
                    let path = format!("/v1/elections/{name}/candidates/{id}?wait_ms={wait_ms}");
                    let request = Request::Poll {
                        ticket: id,
                        wait_ms,
                    };
                    self.call_election(&name, reqwest::Method::GET, path, None)
                        .token(&token)
                        .send(
                            self,
                            Duration::from_millis(wait_ms) + CLIENT_SLACK,
                            request,
                            standing,
                        )
                        .await;
                }
                return;
            }
            if beat == Beat::Late {
                tokio::time::sleep(Duration::from_millis(ttl_ms + 200)).await;
            }
            let wait_ms = if self.rng.random_bool(0.3) {
                0
            } else {
                self.rng.random_range(0..=ttl_ms / 2)
            };
            let (method, path) = if wait_ms == 0 {
                let path = format!("/v1/elections/{name}/candidates/{id}/heartbeat");
                (reqwest::Method::POST, path)
            } else {
                let path = format!("/v1/elections/{name}/candidates/{id}?wait_ms={wait_ms}");
                (reqwest::Method::GET, path)
            };
            let request = Request::Poll {
                ticket: id.clone(),
                wait_ms,
            };
            let op = self
                .call_election(&name, method, path, None)
                .token(&token)
                .send(
                    self,
                    Duration::from_millis(wait_ms) + CLIENT_SLACK,
                    request,
                    standing,
                )
                .await;
            match op.outcome {
                Outcome::Granted { fence, ttl_ms, .. } => {
                    let held = self.new_held(
                        &name,
                        Family::Election,
                        "election",
                        id,
                        token,
                        fence,
                        ttl_ms,
                        op.send,
                    );
                    self.lead(held).await;
                    return;
                }
                Outcome::Lost { .. } | Outcome::Refused { .. } => return,
                _ => {}
            }
        }
    }

    /// Leads: writes to the resource with its term, heartbeats on time, late or never,
    /// proclaims; then resigns, or stops heartbeating (its term must end by itself).
    async fn lead(&mut self, mut h: Held) {
        let beat = match self.rng.random_range(0..10) {
            0..=5 => Beat::OnTime,
            6..=7 => Beat::Late,
            _ => Beat::Never,
        };
        let pauser = self.id == 1
            && self
                .shared
                .pausing
                .load(std::sync::atomic::Ordering::Relaxed);
        self.touch(&h).await;
        for _ in 0..self.rng.random_range(1..=6) {
            if !self.running() {
                break;
            }
            let alive = match self.rng.random_range(0..10) {
                0..=2 => {
                    self.touch(&h).await;
                    true
                }
                3 => self.proclaim(&h).await,
                _ => {
                    let nap = match beat {
                        Beat::Late => h.ttl_ms + 100,
                        _ => self.rng.random_range(0..=h.ttl_ms / 2),
                    };
                    tokio::time::sleep(Duration::from_millis(nap)).await;
                    beat == Beat::Never || self.renew(&mut h).await
                }
            };
            if !alive {
                return;
            }
            if beat == Beat::OnTime
                && self.now() > h.renewed_at + h.ttl_ms * 1000 / 3
                && !self.renew(&mut h).await
            {
                return;
            }
        }
        if pauser {
            // Overstays, then writes with its old term: fencing must refuse it once a newer
            // leader has written.
            tokio::time::sleep(Duration::from_millis(h.ttl_ms + 300)).await;
            self.resource_op(&h, true).await;
            return;
        }
        if self.rng.random_range(0..10) < 8 {
            let path = format!("/v1/elections/{}/candidates/{}", h.name, h.lease);
            let request = Request::Release {
                lease: h.lease.clone(),
                all: true,
                mode: None,
                semaphore: false,
                idempotency: None,
            };
            let name = h.name.clone();
            self.call_election(&name, reqwest::Method::DELETE, path, None)
                .token(&h.token)
                .send(self, CLIENT_SLACK, request, resigned)
                .await;
        }
    }

    /// A heartbeat of the term; false once it is over.
    async fn renew(&mut self, h: &mut Held) -> bool {
        // With its term: a term Redis lost is answered 410, not renewed as another.
        let path = format!(
            "/v1/elections/{}/candidates/{}/heartbeat?term={}",
            h.name, h.lease, h.fence
        );
        let request = Request::Heartbeat {
            lease: h.lease.clone(),
            ttl_ms: None,
            semaphore: false,
            multi: false,
        };
        let name = h.name.clone();
        let op = self
            .call_election(&name, reqwest::Method::POST, path, None)
            .token(&h.token)
            .send(self, CLIENT_SLACK, request, renewal)
            .await;
        match op.outcome {
            Outcome::Renewed { ttl_ms, .. } => {
                h.ttl_ms = ttl_ms;
                h.renewed_at = op.send;
                true
            }
            Outcome::Lost { .. } | Outcome::Refused { .. } => false,
            _ => true,
        }
    }

    /// A new value in the same term; false once the term is over.
    async fn proclaim(&mut self, h: &Held) -> bool {
        let value = format!(
            "c{}-s{}-p{}",
            self.id,
            self.sessions,
            self.rng.random::<u16>()
        );
        let path = format!("/v1/elections/{}/candidates/{}/value", h.name, h.lease);
        let request = Request::Proclaim {
            lease: h.lease.clone(),
            value: value.clone(),
        };
        let name = h.name.clone();
        let op = self
            .call_election(
                &name,
                reqwest::Method::PUT,
                path,
                Some(json!({ "value": value })),
            )
            .token(&h.token)
            .send(self, CLIENT_SLACK, request, proclaimed)
            .await;
        !matches!(op.outcome, Outcome::Lost { .. })
    }

    fn call_election(
        &self,
        name: &str,
        method: reqwest::Method,
        path: String,
        body: Option<serde_json::Value>,
    ) -> ElectionCall {
        ElectionCall {
            name: name.to_owned(),
            method,
            path,
            body,
            token: None,
            idem: None,
        }
    }
}

/// One election request, built up before it is sent (the lock calls' many arguments, named).
struct ElectionCall {
    name: String,
    method: reqwest::Method,
    path: String,
    body: Option<serde_json::Value>,
    token: Option<String>,
    idem: Option<String>,
}

impl ElectionCall {
    fn token(mut self, token: &str) -> Self {
        self.token = Some(token.to_owned());
        self
    }

    fn idem(mut self, key: Option<&str>) -> Self {
        self.idem = key.map(str::to_owned);
        self
    }

    async fn send(
        self,
        client: &mut Client,
        timeout: Duration,
        request: Request,
        read: fn(&Result<Answer, String>) -> Outcome,
    ) -> Op {
        client
            .call_read(
                &self.name,
                Family::Election,
                self.method,
                self.path,
                self.body,
                self.token.as_deref(),
                self.idem.as_deref(),
                timeout,
                request,
                read,
            )
            .await
    }
}
