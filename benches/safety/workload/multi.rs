//! Multilease sessions: two or three names of the lock families (each in its family's kind),
//! in a random order, taken as one lease (`POST /v1/multileases`), used (each member's fenced
//! resource with its own fencing token), renewed and released as one, or abandoned.
//!
//! The history knows leases per name: each member is recorded as a lease of its own name
//! (the multilease's grant as each member's grant, its heartbeat as each member's, its
//! release or loss likewise, all at the multilease's request's times), so the exclusion,
//! fencing and hold checkers see every member exactly as they see any lease. A refused or
//! failed multilease records nothing: it holds nothing (the server gives back what it took),
//! and a member it were to keep by mistake would show as refusals of everyone else.

use std::time::Duration;

use rand::RngExt as _;
use rand::seq::SliceRandom as _;
use serde_json::{Value, json};

use super::{Answer, CLIENT_SLACK, Client, Held};
use crate::history::{Echo, Family, Outcome, Request};

/// A member's kind, by its name's family.
fn kind_of(family: Family, read: bool) -> Option<&'static str> {
    match family {
        Family::Reentrant => Some("reentrant"),
        Family::Exclusive => Some("exclusive"),
        Family::Fair => Some("fair"),
        Family::Rw => Some(if read { "read" } else { "write" }),
        Family::Semaphore | Family::Redlock | Family::Election => None,
    }
}

impl Client {
    pub(super) async fn multi_session(&mut self) {
        let Some(members) = self.pick_members() else {
            return;
        };
        let ttl_ms: u64 = self.rng.random_range(400..=1500);
        let wait_ms: u64 = if self.rng.random_bool(0.3) {
            0
        } else {
            self.rng.random_range(50..=1500)
        };
        let locks: Vec<Value> = members
            .iter()
            .map(|(name, _, kind)| json!({"name": name, "kind": kind}))
            .collect();
        let body = json!({"locks": locks, "ttl_ms": ttl_ms, "holder": format!("c{}", self.id)});
        let timeout = Duration::from_millis(wait_ms) + CLIENT_SLACK;
        let (instance, send, answer) = self
            .send(
                reqwest::Method::POST,
                format!("/v1/multileases?wait_ms={wait_ms}"),
                Some(body),
                None,
                None,
                timeout,
            )
            .await;
        let Ok(Answer { status: 201, body }) = answer else {
            return;
        };
        self.shared.recorder.note_multilease();
        let id = body["lease_id"].as_str().unwrap_or("").to_owned();
        let token = body["token"].as_str().unwrap_or("").to_owned();
        let granted = body["ttl_ms"].as_u64().unwrap_or(ttl_ms);
        let mut held: Vec<Held> = Vec::new();
        for m in body["members"].as_array().into_iter().flatten() {
            let name = m["lock"].as_str().unwrap_or("");
            let Some((_, family, kind)) = members.iter().find(|(n, _, _)| n == name) else {
                continue;
            };
            let lease = m["lease_id"].as_str().unwrap_or("").to_owned();
            let fence = m["fencing_token"].as_u64().unwrap_or(0);
            self.shared.recorder.record_answer(
                self.id,
                instance,
                name,
                *family,
                send,
                Request::Acquire {
                    kind,
                    ttl_ms: Some(ttl_ms),
                    wait_ms,
                    reentry_of: None,
                    idempotency: None,
                    gave_up_ms: None,
                },
                Outcome::Granted {
                    status: 201,
                    lease: lease.clone(),
                    fence,
                    ttl_ms: granted,
                    count: 1,
                    kind: (*kind).to_owned(),
                },
                Some(Echo {
                    lock: Some(name.to_owned()),
                    lease: Some(lease.clone()),
                    holder: body["holder"].as_str().map(str::to_owned),
                }),
            );
            held.push(self.new_held(
                name,
                *family,
                kind,
                lease,
                token.clone(),
                fence,
                granted,
                send,
            ));
        }
        self.use_multilease(&id, &token, held).await;
    }

    /// Two or three distinct names of the run's families, each with the kind to hold it as,
    /// in a random order; None when the families offer fewer.
    fn pick_members(&mut self) -> Option<Vec<(String, Family, &'static str)>> {
        let families: Vec<Family> = self
            .shared
            .plan
            .families
            .iter()
            .copied()
            .filter(|f| kind_of(*f, false).is_some())
            .collect();
        if families.is_empty() {
            return None;
        }
        let want = self.rng.random_range(2..=3);
        let mut members: Vec<(String, Family, &'static str)> = Vec::new();
        for _ in 0..want * 3 {
            if members.len() == want {
                break;
            }
            let family = families[self.rng.random_range(0..families.len())];
            let names = self.shared.plan.names(family);
            let name = names[self.rng.random_range(0..names.len())].clone();
            let read = self.rng.random_bool(0.5);
            if members.iter().any(|(n, _, _)| *n == name) {
                continue;
            }
            if let Some(kind) = kind_of(family, read) {
                members.push((name, family, kind));
            }
        }
        if members.len() < 2 {
            return None;
        }
        // Callers name their sets in any order: the server must not deadlock on it.
        members.shuffle(&mut self.rng);
        Some(members)
    }

    /// Uses, renews and lets go of a granted multilease.
    async fn use_multilease(&mut self, id: &str, token: &str, mut held: Vec<Held>) {
        let steps = self.rng.random_range(1..=4);
        let heartbeats = self.rng.random_bool(0.8);
        for _ in 0..steps {
            if !self.running() {
                break;
            }
            for h in held.clone() {
                self.touch(&h).await;
            }
            let ttl = held.first().map_or(500, |h| h.ttl_ms);
            let nap = self.rng.random_range(0..=ttl / 3);
            tokio::time::sleep(Duration::from_millis(nap)).await;
            if heartbeats && !self.multi_heartbeat(id, token, &mut held).await {
                return;
            }
        }
        if self.rng.random_range(0..10) < 8 {
            self.multi_release(id, token, &held).await;
        }
        // Otherwise abandoned: every member must expire by itself.
    }

    /// One heartbeat of the multilease, recorded as each member's; false when it is over.
    async fn multi_heartbeat(&mut self, id: &str, token: &str, held: &mut [Held]) -> bool {
        let (instance, send, answer) = self
            .send(
                reqwest::Method::POST,
                format!("/v1/multileases/{id}/heartbeat"),
                Some(json!({})),
                Some(token),
                None,
                CLIENT_SLACK,
            )
            .await;
        let alive =
            !matches!(&answer, Ok(Answer { status, .. }) if *status == 404 || *status == 410);
        let body = answer
            .as_ref()
            .map(|a| a.body.clone())
            .unwrap_or(Value::Null);
        for h in held.iter_mut() {
            let outcome = heartbeat_outcome(&answer, h);
            if let Outcome::Renewed { ttl_ms, .. } = outcome {
                h.renewed_at = send;
                h.ttl_ms = ttl_ms;
            }
            // The answer must list this member (else it answered another multilease).
            let echo = matches!(outcome, Outcome::Renewed { .. }).then(|| {
                let listed = body["members"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|m| m["lease_id"] == h.lease.as_str());
                Echo {
                    lock: listed.and_then(|m| m["lock"].as_str()).map(str::to_owned),
                    lease: Some(match listed {
                        Some(_) => h.lease.clone(),
                        None => body["lease_id"].as_str().unwrap_or("").to_owned(),
                    }),
                    holder: None,
                }
            });
            self.shared.recorder.record_answer(
                self.id,
                instance,
                &h.name,
                h.family,
                send,
                Request::Heartbeat {
                    lease: h.lease.clone(),
                    ttl_ms: None,
                    semaphore: false,
                    multi: true,
                },
                outcome,
                echo,
            );
        }
        alive
    }

    /// Releases the multilease, recorded as each member's release.
    async fn multi_release(&mut self, id: &str, token: &str, held: &[Held]) {
        let (instance, send, answer) = self
            .send(
                reqwest::Method::DELETE,
                format!("/v1/multileases/{id}"),
                None,
                Some(token),
                None,
                CLIENT_SLACK,
            )
            .await;
        for h in held {
            let outcome = match &answer {
                Ok(Answer { status: 200, .. }) => Outcome::Released {
                    released: true,
                    count: 0,
                },
                Ok(Answer { status, body }) if *status == 404 || *status == 410 => Outcome::Lost {
                    status: *status,
                    code: body["code"].as_str().unwrap_or("").to_owned(),
                },
                Ok(Answer { status, body }) => Outcome::Failed {
                    status: Some(*status),
                    what: body["code"].as_str().unwrap_or("").to_owned(),
                },
                Err(e) => Outcome::Failed {
                    status: None,
                    what: e.clone(),
                },
            };
            // The answer must name this multilease and this member's lock.
            let echo = answer.as_ref().ok().filter(|a| a.status == 200).map(|a| {
                let listed = a.body["locks"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|l| l == h.name.as_str());
                let right = listed && a.body["lease_id"] == id;
                Echo {
                    lock: Some(if right {
                        h.name.clone()
                    } else {
                        format!("multilease {}", a.body["lease_id"])
                    }),
                    lease: None,
                    holder: None,
                }
            });
            self.shared.recorder.record_answer(
                self.id,
                instance,
                &h.name,
                h.family,
                send,
                Request::Release {
                    lease: h.lease.clone(),
                    all: true,
                    mode: None,
                    semaphore: false,
                    idempotency: None,
                },
                outcome,
                echo,
            );
        }
    }
}

/// What a multilease's heartbeat answer says of one member.
fn heartbeat_outcome(answer: &Result<Answer, String>, h: &Held) -> Outcome {
    match answer {
        Ok(Answer { status: 200, body })
            if body["members"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| m["degraded"] == "not_replicated") =>
        {
            // Renewed on the primaries alone (see `outcome_of`).
            Outcome::Failed {
                status: None,
                what: "renewed on the primary alone".to_owned(),
            }
        }
        Ok(Answer { status: 200, body }) => {
            let member = body["members"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|m| m["lease_id"] == h.lease.as_str());
            Outcome::Renewed {
                ttl_ms: body["ttl_ms"].as_u64().unwrap_or(h.ttl_ms),
                fence: member
                    .and_then(|m| m["fencing_token"].as_u64())
                    .unwrap_or(h.fence),
            }
        }
        Ok(Answer { status, body }) if *status == 404 || *status == 410 => Outcome::Lost {
            status: *status,
            code: body["code"].as_str().unwrap_or("").to_owned(),
        },
        Ok(Answer { status, body }) => Outcome::Failed {
            status: Some(*status),
            what: body["code"].as_str().unwrap_or("").to_owned(),
        },
        Err(e) => Outcome::Failed {
            status: None,
            what: e.clone(),
        },
    }
}
